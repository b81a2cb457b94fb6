//===- VectorLayouts.h - which CPU tile is vectorised along what -*- C++
//-*-===//
//
// The tiles of each tile op that the vectorised CPU lowering addresses in a
// #kvattn.vector_layout, and the axis each is vectorised along: one table
// for -kvattn-assign-vector-layouts (which writes the layouts) and
// -kvattn-lower-tile-to-vectors (which checks and obeys them).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_CONVERSION_VECTORLAYOUTS_H
#define KVATTN_PASSES_CONVERSION_VECTORLAYOUTS_H

#include "kvattn/Dialect/KVAttnAttrs.h"
#include "kvattn/Dialect/KVAttnOps.h"

#include "llvm/ADT/SmallVector.h"

namespace mlir {
namespace kvattn {

/// One tile of a tile op and the axis its vectors run along.
struct VectorTileUse {
  /// What the op uses it as ("query", "scores", "max", "sum",
  /// "accumulator"), for diagnostics.
  llvm::StringLiteral role;
  Value tile;
  VectorAxis axis;
};

/// The tiles of `op` with a vector layout: the query, the scores and the
/// running maximum and sum are vectorised over rows, the accumulator over
/// its columns. Empty for ops without tiles (tile.prefetch) and for
/// tile.merge (whose tiles the scalar lowering owns). tile.init's tiles are
/// listed (its lowering is layout-free, the layouts still describe them).
inline llvm::SmallVector<VectorTileUse, 4> vectorTileUses(Operation *op) {
  using Axis = VectorAxis;
  if (auto loadQ = dyn_cast<TileLoadQOp>(op))
    return {{"query", loadQ.getQTile(), Axis::rows}};
  if (auto qk = dyn_cast<TileQKOp>(op))
    return {{"query", qk.getQTile(), Axis::rows},
            {"scores", qk.getScores(), Axis::rows}};
  if (auto mask = dyn_cast<TileMaskOp>(op))
    return {{"scores", mask.getScores(), Axis::rows}};
  if (auto softmax = dyn_cast<TileSoftmaxOp>(op))
    return {{"scores", softmax.getScores(), Axis::rows},
            {"max", softmax.getMax(), Axis::rows},
            {"sum", softmax.getSum(), Axis::rows},
            {"accumulator", softmax.getAcc(), Axis::columns}};
  if (auto init = dyn_cast<TileInitOp>(op))
    return {{"max", init.getMax(), Axis::rows},
            {"sum", init.getSum(), Axis::rows},
            {"accumulator", init.getAcc(), Axis::columns}};
  if (auto store = dyn_cast<TileStoreOp>(op))
    return {{"accumulator", store.getAcc(), Axis::columns}};
  return {};
}

/// The extent a tile's vectors run along: its rows (dimension 0) or its
/// columns (the last dimension); dynamic when the tile's type says so.
inline int64_t vectorAxisExtent(Value tile, VectorAxis axis) {
  auto type = cast<MemRefType>(tile.getType());
  return axis == VectorAxis::rows ? type.getDimSize(0)
                                  : type.getDimSize(type.getRank() - 1);
}

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_VECTORLAYOUTS_H
