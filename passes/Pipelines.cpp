//===- Pipelines.cpp - registered kvattn pipelines ------------------------===//

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

namespace {

struct CpuPipelineOptions : public PassPipelineOptions<CpuPipelineOptions> {
  Option<int64_t> blockM{*this, "block-m",
                         llvm::cl::desc("Query rows per program"),
                         llvm::cl::init(64)};
  Option<int64_t> blockN{*this, "block-n", llvm::cl::desc("Keys per KV block"),
                         llvm::cl::init(64)};
  Option<bool> stats{*this, "stats",
                     llvm::cl::desc("Count loaded/masked/skipped KV blocks"),
                     llvm::cl::init(false)};
  Option<bool> fixUpperLeftAppends{
      *this, "fix-upper-left-appends",
      llvm::cl::desc("Passed to -kvattn-resolve-cached-append"),
      llvm::cl::init(false)};
};

/// kvattn -> tile program -> loops -> LLVM dialect, ready for the
/// ExecutionEngine. Upstream passes are named textually so that this file
/// does not pull in every conversion header.
void buildKVAttnToCpuPipeline(OpPassManager &pm,
                              const CpuPipelineOptions &options) {
  std::string text = llvm::formatv(
      "kvattn-resolve-cached-append{{fix-upper-left-appends={0}},"
      "kvattn-lower-append,"
      "kvattn-tile{{block-m={1} block-n={2} stats={3}},"
      // No canonicalization before scf-forall-to-for: it would inline the
      // per-program alloca scope into the forall and, after the forall
      // becomes a loop, the scratch tiles would grow the stack per program.
      "func.func(convert-elementwise-to-linalg),"
      "one-shot-bufferize{{bufferize-function-boundaries "
      "function-boundary-type-conversion=identity-layout-map},"
      "kvattn-lower-tile-to-loops,"
      "func.func(scf-forall-to-for,convert-linalg-to-loops),"
      "canonicalize,"
      "expand-strided-metadata,"
      "lower-affine,"
      "convert-scf-to-cf,"
      "convert-math-to-llvm,"
      "convert-math-to-libm,"
      "finalize-memref-to-llvm,"
      "convert-arith-to-llvm,"
      "convert-index-to-llvm,"
      "convert-func-to-llvm,"
      "convert-cf-to-llvm,"
      "reconcile-unrealized-casts",
      options.fixUpperLeftAppends ? "true" : "false", options.blockM.getValue(),
      options.blockN.getValue(), options.stats ? "true" : "false");
  if (failed(parsePassPipeline(text, pm, llvm::errs())))
    llvm::report_fatal_error("kvattn-to-cpu: invalid pipeline text");
}

} // namespace

void mlir::kvattn::registerKVAttnPipelines() {
  PassPipelineRegistration<CpuPipelineOptions>(
      "kvattn-to-cpu",
      "kvattn (sdpa/append/attention) -> tile program -> loops -> LLVM "
      "dialect for the CPU JIT",
      buildKVAttnToCpuPipeline);
}
