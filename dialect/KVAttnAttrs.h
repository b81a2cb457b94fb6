//===- KVAttnAttrs.h - kvattn attributes ------------------------*- C++ -*-===//
//
// The typed metadata of the tile programs and kernels (KVAttnAttrs.td) and
// the one accessor each that reads and writes it on an op:
//
//   kvattn.role         getBufferRole / setBufferRole
//   kvattn.tile_config  getTileConfig / setTileConfig
//   kvattn.params       getKernelParams / setKernelParams
//   kvattn.tile_role    getTileRole / setTileRole
//   kvattn.fragment_layout getFragmentLayout / setFragmentLayout
//   kvattn.vector_layout getVectorLayout / setVectorLayout
//   kvattn.gpu_schedule getGpuSchedule / setGpuSchedule
//   kvattn.value_prefetch getValuePrefetchId / setValuePrefetchId
//   kvattn.key_prefetch getKeyPrefetchId / setKeyPrefetchId
//   kvattn.pending_pv   issuesPendingPV / setIssuesPendingPV
//   kvattn.shared_memory getSharedMemory / setSharedMemory
//   kvattn.shared_offset getSharedOffset / setSharedOffset
//   kvattn.stage_sync   getStageSync / setStageSync
//   kvattn.cascade      (a string: a cascade's B = 1 programs)
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_DIALECT_KVATTNATTRS_H
#define KVATTN_DIALECT_KVATTNATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Operation.h"

#include "kvattn/Dialect/KVAttnEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "kvattn/Dialect/KVAttnAttrs.h.inc"

#include <optional>

namespace mlir {
namespace kvattn {

/// The discardable attributes' names.
inline constexpr llvm::StringLiteral kBufferRoleAttrName = "kvattn.role";
inline constexpr llvm::StringLiteral kTileConfigAttrName = "kvattn.tile_config";
inline constexpr llvm::StringLiteral kKernelParamsAttrName = "kvattn.params";
inline constexpr llvm::StringLiteral kTileRoleAttrName = "kvattn.tile_role";
inline constexpr llvm::StringLiteral kFragmentLayoutAttrName =
    "kvattn.fragment_layout";
inline constexpr llvm::StringLiteral kVectorLayoutAttrName =
    "kvattn.vector_layout";
inline constexpr llvm::StringLiteral kGpuScheduleAttrName =
    "kvattn.gpu_schedule";
inline constexpr llvm::StringLiteral kValuePrefetchAttrName =
    "kvattn.value_prefetch";
inline constexpr llvm::StringLiteral kKeyPrefetchAttrName =
    "kvattn.key_prefetch";
inline constexpr llvm::StringLiteral kPendingPVAttrName = "kvattn.pending_pv";
inline constexpr llvm::StringLiteral kSharedMemoryAttrName =
    "kvattn.shared_memory";
inline constexpr llvm::StringLiteral kSharedOffsetAttrName =
    "kvattn.shared_offset";
inline constexpr llvm::StringLiteral kStageSyncAttrName = "kvattn.stage_sync";
/// A program or kernel of a shared-prefix (cascade) attention that runs with
/// B = 1 (a string: "prefix", the attention over the shared prefix, or
/// "merge", the merge of the prefix and suffix parts); the launch manifest
/// gives it the kind "cascade_prefix" or "cascade_merge".
inline constexpr llvm::StringLiteral kCascadeAttr = "kvattn.cascade";
/// An append kernel of a `kvattn.append ... skip_padding` (a unit
/// attribute): a token whose block-table entry is -1 is padding, which the
/// kernel skips and the validation accepts; the launch manifest records it
/// as the kernel's `"skip_padding": true`.
inline constexpr llvm::StringLiteral kSkipPaddingAttr = "kvattn.skip_padding";
/// The merge program or kernel of a ragged batch's split (a unit
/// attribute): it merges the packed rows [1, Hq, T] (its grid and buffers
/// have B = 1, while the split rule's programs count the sequences); the
/// launch manifest gives it the kind "merge_varlen".
inline constexpr llvm::StringLiteral kVarlenMergeAttr = "kvattn.varlen_merge";

/// The role of the buffer `op` defines; none when it is not a program's
/// buffer.
std::optional<BufferRole> getBufferRole(Operation *op);
void setBufferRole(Operation *op, BufferRole role);

/// The schedule of a tile program or kernel; null when `op` has none.
TileConfigAttr getTileConfig(Operation *op);
void setTileConfig(Operation *op, TileConfigAttr config);

/// Whether `kernel` carries kvattn.params (an outlined kvattn kernel).
bool hasKernelParams(Operation *kernel);
/// The parameters of `kernel` in order; empty when it has none.
SmallVector<KernelParamAttr> getKernelParams(Operation *kernel);
void setKernelParams(Operation *kernel, ArrayRef<KernelParamAttr> params);

/// The role of the scratch tile `op` defines (a memref.alloca of a GPU
/// kernel, -kvattn-assign-tile-layouts); none when it has not been assigned.
std::optional<TileRole> getTileRole(Operation *op);
void setTileRole(Operation *op, TileRole role);

/// The fragment layout of the tile `op` defines; null when it has none.
FragmentLayoutAttr getFragmentLayout(Operation *op);
void setFragmentLayout(Operation *op, FragmentLayoutAttr layout);

/// The CPU vector layout of `tile` (-kvattn-assign-vector-layouts): the
/// attribute of its defining op, or of the function argument it is; null
/// when it has none.
VectorLayoutAttr getVectorLayout(Value tile);
/// Sets it there; fails (writing nothing) when `tile` is neither defined by
/// an op nor an argument of a function's entry block.
LogicalResult setVectorLayout(Value tile, VectorLayoutAttr layout);

/// The schedule of a GPU attention kernel; null when it has none.
GpuScheduleAttr getGpuSchedule(Operation *op);
void setGpuSchedule(Operation *op, GpuScheduleAttr schedule);

/// The pairing id of a tile.qk and the tile.softmax_update of the same KV
/// block whose V block the tile.qk issues (kvattn.value_prefetch); none when
/// `op` is not paired.
std::optional<int64_t> getValuePrefetchId(Operation *op);
void setValuePrefetchId(Operation *op, int64_t id);
/// The pairing id of a tile.prefetch and the tile.softmax_update that
/// issues it after its barrier (kvattn.key_prefetch); none when unpaired.
std::optional<int64_t> getKeyPrefetchId(Operation *op);
void setKeyPrefetchId(Operation *op, int64_t id);
/// Whether the tile.qk `op` issues the P.V its previous KV block's
/// tile.softmax_update deferred (kvattn.pending_pv, a unit attribute; the
/// schedule's intra_warpgroup_overlap).
bool issuesPendingPV(Operation *op);
void setIssuesPendingPV(Operation *op);

/// The shared memory of a GPU attention kernel (kvattn.shared_memory: the
/// staging blocks, the TMA ring's stages and barriers, the share exchange);
/// null when it has none.
SharedMemoryAttr getSharedMemory(Operation *op);
void setSharedMemory(Operation *op, SharedMemoryAttr memory);
/// The byte offset of the scratch tile `op` defines in the kernel's shared
/// memory (kvattn.shared_offset); none when it is not in shared memory.
std::optional<int64_t> getSharedOffset(Operation *op);
void setSharedOffset(Operation *op, int64_t offset);
/// Where the tile.qk or tile.softmax_update `op` waits for the K/V stage it
/// reads (kvattn.stage_sync: its barriers, cp.async wait and proxy fence);
/// null when it has none.
StageSyncAttr getStageSync(Operation *op);
void setStageSync(Operation *op, StageSyncAttr sync);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_DIALECT_KVATTNATTRS_H
