//===- IRFuzzer.cpp - libFuzzer over kvattn IR ----------------------------===//
//
// Parses mutated IR; when it verifies and is made of kvattn, func, arith and
// tensor ops only (what front ends give kvattn), runs the compiler
// pipelines on it: kvattn-to-cpu (up to the LLVM dialect, no JIT) with the
// default options and with options drawn from the input (block sizes,
// split-KV, packing, including values beyond the limits), and kvattn-to-ptx
// with drawn options and chips (to PTX text when libdevice is found, else
// to the device LLVM IR). A verified op must never crash a pass; invalid IR
// and refused options must end in diagnostics. Seed corpus: test/fuzz/corpus.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Passes/Passes.h"
#include "kvattn/Registration/Registration.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <cstdint>
#include <string>

using namespace mlir;

static MLIRContext &context() {
  // No pass registration: the pipelines are built from constructors, as an
  // embedder would.
  static MLIRContext *ctx = [] {
    DialectRegistry registry;
    ::mlir::kvattn::registerAllKVAttnDialects(registry);
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

static void runPipeline(ModuleOp module,
                        llvm::function_ref<void(OpPassManager &)> build) {
  OwningOpRef<ModuleOp> clone = module.clone();
  PassManager pm(&context());
  build(pm);
  (void)pm.run(*clone); // failing with diagnostics is fine; crashing is not
}

/// Options drawn from the input's bytes (a hash: every mutation of the IR
/// also moves the options): the sizes kvattn accepts, the edges of its
/// limits and beyond them, every chip spelling. Out-of-range values must
/// end in a diagnostic like the rest.
struct DrawnOptions {
  uint64_t state;
  explicit DrawnOptions(const uint8_t *data, size_t size)
      : state(0x9E3779B97F4A7C15ull ^ size) {
    for (size_t i = 0; i < size; ++i)
      state = (state ^ data[i]) * 0x100000001B3ull;
  }
  template <typename T, size_t N> T pick(const T (&values)[N]) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return values[(state >> 33) % N];
  }
};

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MLIRContext &ctx = context();
  ScopedDiagnosticHandler quiet(&ctx, [](Diagnostic &) { return success(); });
  std::string text(reinterpret_cast<const char *>(data), size);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &ctx);
  if (!module || failed(verify(*module)) || !onlyKVAttnInput(*module))
    return 0;
  DrawnOptions draw(data, size);
  static const int64_t kBlocks[] = {1, 8, 16, 32, 64, 128, 256, 257, 0, -1};
  static const int64_t kWarps[] = {0, 1, 2, 4, 8, 16, 17};
  static const int64_t kStages[] = {1, 2, 3, 8, 9, 0};
  static const int64_t kSplits[] = {1, 1, 2, 3, 7, 0, 256, 257, -2};
  static const bool kBools[] = {true, false};
  // sm_90a is the wgmma lowering; sm_60 is refused (VerifyTarget.cpp).
  static const char *kChips[] = {
      "sm_80",  "sm_86", "sm_89",   "sm_90", "sm_90a", "sm_100a", "sm_60",
      "sm_80a", "SM_80", "sm_1000", "",      "gfx90a", "sm_"};

  // The default CPU pipeline, then one with drawn options.
  runPipeline(*module, [](OpPassManager &pm) {
    mlir::kvattn::buildKVAttnToCpuPipeline(pm,
                                           ::mlir::kvattn::CpuCompileOptions());
  });
  ::mlir::kvattn::CpuCompileOptions cpu;
  cpu.blockM = draw.pick(kBlocks);
  cpu.blockN = draw.pick(kBlocks);
  cpu.splitKv = draw.pick(kSplits);
  cpu.packGqa = draw.pick(kBools);
  cpu.stats = draw.pick(kBools);
  cpu.vectorize = draw.pick(kBools);
  static const int64_t kWidths[] = {0, 1, 2, 4, 8, 16};
  cpu.vectorWidth = draw.pick(kWidths);
  static const int64_t kThreads[] = {0, 1, 2};
  cpu.threads = draw.pick(kThreads);
  runPipeline(*module, [&](OpPassManager &pm) {
    mlir::kvattn::buildKVAttnToCpuPipeline(pm, cpu);
  });

  // kvattn-to-ptx with drawn options, through NVVM to PTX when libdevice is
  // available (the NVPTX back end then runs on every verified input), else
  // to the device LLVM IR.
  static const std::string libdevice = mlir::kvattn::findLibdevice("");
  ::mlir::kvattn::PtxOptions gpu;
  gpu.chip = draw.pick(kChips);
  gpu.blockM = draw.pick(kBlocks);
  gpu.blockN = draw.pick(kBlocks);
  gpu.numWarps = draw.pick(kWarps);
  gpu.numStages = draw.pick(kStages);
  gpu.splitKv = draw.pick(kSplits);
  gpu.packGqa = draw.pick(kBools);
  gpu.tensorCores = draw.pick(kBools);
  if (libdevice.empty())
    gpu.image = ::mlir::kvattn::DeviceImage::LlvmIR;
  runPipeline(*module, [&](OpPassManager &pm) {
    mlir::kvattn::buildKVAttnToGpuKernelsPipeline(pm, gpu);
    mlir::kvattn::buildGpuKernelsToPtxPipeline(pm, gpu, libdevice);
  });
  return 0;
}
