//===- StageSync.h - where tile ops wait for their K/V stages ---*- C++ -*-===//
//
// The synchronisation of a tensor-core kernel's K/V stages, placed by an
// analysis of the tile program (docs/gpu-lowering.md, "Stage
// synchronisation"): -kvattn-assign-tile-layouts calls it once the
// schedule and the copies' pairings are written.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_GPU_STAGESYNC_H
#define KVATTN_PASSES_GPU_STAGESYNC_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Support/LogicalResult.h"

namespace mlir {
namespace kvattn {

/// Writes kvattn.stage_sync on every tile.qk and tile.softmax_update of
/// `kernel` when its K/V blocks arrive by cp.async (a tensor-core schedule
/// without the TMA ring); removes it elsewhere. Needs the kernel's
/// kvattn.gpu_schedule and the ops' pairings (kvattn.value_prefetch,
/// kvattn.key_prefetch). Fails, by name, on a program whose copies it
/// cannot follow.
LogicalResult placeStageSyncs(gpu::GPUFuncOp kernel);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_GPU_STAGESYNC_H
