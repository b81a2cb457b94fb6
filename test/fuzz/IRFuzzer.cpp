//===- IRFuzzer.cpp - libFuzzer over kvattn IR ----------------------------===//
//
// Parses mutated IR; when it verifies and is made of kvattn, func, arith and
// tensor ops only (what front ends give kvattn), runs the compiler
// pipelines on it: kvattn-to-cpu (up to the LLVM dialect, no JIT) and
// kvattn-to-ptx (to PTX text when libdevice is found). A verified op must
// never crash a pass; invalid IR must end in diagnostics. Seed corpus:
// test/fuzz/corpus.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Registration/Registration.h"
#include "passes/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <cstdint>
#include <string>

using namespace mlir;

static MLIRContext &context() {
  static MLIRContext *ctx = [] {
    mlir::registerAllPasses();
    ::kvattn::registerAllKVAttnPasses();
    DialectRegistry registry;
    ::kvattn::registerAllKVAttnDialects(registry);
    auto *c = new MLIRContext(registry);
    c->disableMultithreading();
    return c;
  }();
  return *ctx;
}

/// Only the ops kvattn's pipelines take as input: the fuzzer looks for bugs
/// in kvattn, not in unrelated upstream dialects.
static bool onlyKVAttnInput(ModuleOp module) {
  bool ok = true;
  module.walk([&](Operation *op) {
    StringRef dialect =
        op->getDialect() ? op->getDialect()->getNamespace() : StringRef();
    if (isa<ModuleOp>(op) || dialect == "kvattn" || dialect == "func" ||
        dialect == "arith" || dialect == "tensor")
      return;
    ok = false;
  });
  return ok;
}

static void runPipeline(ModuleOp module, const std::string &pipeline) {
  OwningOpRef<ModuleOp> clone = module.clone();
  PassManager pm(&context());
  if (failed(parsePassPipeline(pipeline, pm)))
    __builtin_trap();   // our own pipeline text must parse
  (void)pm.run(*clone); // failing with diagnostics is fine; crashing is not
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MLIRContext &ctx = context();
  ScopedDiagnosticHandler quiet(&ctx, [](Diagnostic &) { return success(); });
  std::string text(reinterpret_cast<const char *>(data), size);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &ctx);
  if (!module || failed(verify(*module)) || !onlyKVAttnInput(*module))
    return 0;
  runPipeline(*module, "kvattn-to-cpu");
  runPipeline(*module, "kvattn-to-cpu{block-m=16 block-n=8 stats=true}");
  // kvattn-to-ptx, through NVVM to PTX when libdevice is available (the
  // NVPTX back end then runs on every verified input), else its kernel
  // half.
  static const bool haveLibdevice = !mlir::kvattn::findLibdevice("").empty();
  runPipeline(*module, haveLibdevice
                           ? "kvattn-to-ptx"
                           : "kvattn-resolve-cached-append,kvattn-tile,"
                             "kvattn-outline-tile-programs,"
                             "gpu.module(kvattn-lower-tile-to-gpu)");
  return 0;
}
