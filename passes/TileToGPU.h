//===- TileToGPU.h - the GPU tile lowering as pattern sets ------*- C++ -*-===//
//
// -kvattn-lower-tile-to-gpu, usable without the pass (docs/gpu-lowering.md,
// "Pattern sets"). The lowering of a kernel's tile ops keeps state for the
// whole kernel — the thread coordinates, the shared memory views, the
// lanes' private registers (accumulator, scores, query fragments, row
// statistics) and the schedule's pairings — so it runs in three steps:
//
//   FailureOr<GpuTileLoweringPtr> state = prepareGpuTileLowering(kernel);
//   RewritePatternSet patterns(ctx);
//   populateTileToMmaSyncPatterns(patterns, **state);  // or Wgmma, ScalarGpu
//   if (failed(applyGpuTilePatterns(**state, std::move(patterns)))) ...
//
// prepareGpuTileLowering reads the kernel's kvattn.gpu_schedule, tile roles
// and fragment layouts (-kvattn-assign-tile-layouts) and creates the
// per-kernel values at its entry; each tile op (tile.init, load_q, qk, mask,
// softmax_update, store, prefetch) then lowers through its own
// OpRewritePattern, which holds a reference to that state;
// applyGpuTilePatterns applies the patterns to the tile ops one at a time in
// program order (the order matters: copies are issued by one op and awaited
// by a later one, thread constants are created on first use) and removes the
// tiles that became registers. A pattern set's patterns match only kernels
// of its mode (kvattn.gpu_schedule's `mode`): an mma.sync set applied to a
// wgmma kernel lowers nothing and applyGpuTilePatterns fails by name.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_TILETOGPU_H
#define KVATTN_PASSES_TILETOGPU_H

#include "kvattn/Dialect/KVAttnAttrs.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Rewrite/FrozenRewritePatternSet.h"

#include <memory>

namespace mlir {
namespace kvattn {

/// The lowering state of one kernel (opaque).
class GpuTileLowering;
struct GpuTileLoweringDeleter {
  void operator()(GpuTileLowering *state) const;
};
using GpuTileLoweringPtr =
    std::unique_ptr<GpuTileLowering, GpuTileLoweringDeleter>;

/// Prepares the lowering of an attention kernel's tile ops (a gpu.func of
/// kind attention or attention_varlen with its schedule, roles and
/// layouts): the shared memory views replace its tiles, the thread
/// coordinates and private registers are created at its entry. Options as
/// -kvattn-lower-tile-to-gpu's. Loads the dialects the patterns create ops
/// of (arith, gpu, llvm, math, memref, nvgpu, nvvm, scf, vector): outside a
/// pass, or from a pass that declares them as dependent dialects. Fails
/// with a diagnostic on the kernel.
FailureOr<GpuTileLoweringPtr>
prepareGpuTileLowering(gpu::GPUFuncOp kernel, bool wideTileAddressBases = true,
                       bool hardwareFp8 = false);

/// The kernel's tensor-core mode: which pattern set lowers it.
TensorCoreMode getTensorCoreMode(const GpuTileLowering &state);

/// The tile ops on scalar FMAs (each lane its fragment of the mma.sync
/// accumulator layout; K and V staged by plain loads between barriers).
void populateTileToScalarGpuPatterns(RewritePatternSet &patterns,
                                     GpuTileLowering &state);
/// The tile ops on mma.sync.m16n8k16 (ldmatrix, cp.async stages).
void populateTileToMmaSyncPatterns(RewritePatternSet &patterns,
                                   GpuTileLowering &state);
/// The tile ops on sm_90a's wgmma.mma_async m64nNk16 (cp.async stages or
/// the TMA rings).
void populateTileToWgmmaPatterns(RewritePatternSet &patterns,
                                 GpuTileLowering &state);

/// Applies `patterns` to the kernel's tile ops in program order, each op
/// once, then removes the tiles that became registers. Fails (with a
/// diagnostic) on an op no pattern lowers.
LogicalResult applyGpuTilePatterns(GpuTileLowering &state,
                                   const FrozenRewritePatternSet &patterns);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_TILETOGPU_H
