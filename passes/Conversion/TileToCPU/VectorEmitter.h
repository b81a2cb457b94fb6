//===- VectorEmitter.h - the vector vocabulary of the CPU lowering -*- C++
//-*-===//
//
// The vector vocabulary of -kvattn-lower-tile-to-vectors over the scalar one
// (LoopEmitter.h), and the entry points of its two forms:
//
// * the column form (TileToVectors.cpp): query and score tiles transposed,
//   vectors over query rows; the form of blocks with many rows;
// * the few-rows form (FewRows.cpp): query and score tiles row-major,
//   Q.K^T as dot products along D (vectors over D, reduced by a transpose
//   of 16 accumulators), the online softmax vectorised over keys; the form
//   of decode-shaped programs (a GQA group of 1 to 8 packed rows), where
//   vectors over rows would leave most lanes idle.
//
// Every op of a program chooses its form from the program's row count with
// the same test (isFewRows), so the tiles' layouts always agree.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_CONVERSION_VECTOREMITTER_H
#define KVATTN_PASSES_CONVERSION_VECTOREMITTER_H

#include "passes/Conversion/TileToCPU/LoopEmitter.h"

namespace mlir {
namespace kvattn {

/// Vector vocabulary over the scalar one, for one vector width.
struct VectorEmitter : Emitter {
  int64_t width;
  /// Accumulators an outer-product kernel may keep in registers.
  int64_t accumulators;

  VectorEmitter(ImplicitLocOpBuilder &b, int64_t width)
      : Emitter{b}, width(width),
        // 32 vector registers with AVX-512, 16 below; keep a quarter for
        // the operands.
        accumulators(width >= 16 ? 24 : 12) {}

  VectorType vf32() const { return VectorType::get({width}, b.getF32Type()); }
  Value splat(Value scalar) {
    return vector::BroadcastOp::create(
        b, VectorType::get({width}, scalar.getType()), scalar);
  }
  Value splat(double v) { return splat(f32(v)); }
  Value vload(Value memref, ValueRange indices) {
    return vector::LoadOp::create(b, vf32(), memref, indices);
  }
  void vstore(Value v, Value memref, ValueRange indices) {
    vector::StoreOp::create(b, v, memref, indices);
  }
  Value fma(Value x, Value y, Value acc) {
    return vector::FMAOp::create(b, x, y, acc);
  }
  /// 0, 1, ..., width - 1 as i64.
  Value iota() {
    SmallVector<int64_t> values(width);
    for (int64_t i = 0; i < width; ++i)
      values[i] = i;
    auto type = VectorType::get({width}, b.getI64Type());
    return arith::ConstantOp::create(
        b, type, DenseElementsAttr::get(type, ArrayRef(values)));
  }
  Value i64(Value index) {
    return arith::IndexCastOp::create(b, b.getI64Type(), index);
  }

  /// for (iv = lb; iv < ub; iv += step) carrying `inits`; returns the
  /// final values.
  SmallVector<Value>
  carry(Value lb, Value ub, Value step, ValueRange inits,
        function_ref<SmallVector<Value>(Value iv, ValueRange iter)> body) {
    auto loop = scf::ForOp::create(
        b, lb, ub, step, inits,
        [&](OpBuilder &nested, Location loc, Value iv, ValueRange iter) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToEnd(nested.getInsertionBlock());
          scf::YieldOp::create(b, body(iv, iter));
        });
    return SmallVector<Value>(loop.getResults());
  }
  void loopStep(Value lb, Value ub, Value step,
                function_ref<void(Value)> body) {
    carry(lb, ub, step, {}, [&](Value iv, ValueRange) {
      body(iv);
      return SmallVector<Value>{};
    });
  }
};

/// The indices of key/value row `j` with the element index left to fill:
/// see Emitter::kvIndices (its last index is the element).
inline SmallVector<Value, 4> kvRow(Emitter &e, Value cache, Value blockTable,
                                   Value batch, Value head, Value j) {
  return e.kvIndices(cache, blockTable, batch, head, j, e.idx(0));
}

inline Value kvElement(Emitter &e, Value cache, SmallVector<Value, 4> row,
                       Value x) {
  row.back() = x;
  return e.loadF32(cache, row);
}

/// The scale of key/value row `row` of an FP8 cache (null without one).
inline Value kvRowScale(Emitter &e, Value scale, Value kvHead,
                        ArrayRef<Value> row) {
  if (!scale)
    return {};
  return loadKvScale(e.b, e.b.getLoc(), scale, kvHead, row);
}

//===----------------------------------------------------------------------===//
// The few-rows form (FewRows.cpp)
//===----------------------------------------------------------------------===//

namespace few_rows {

/// The lanes of its vectors, whatever the host's width (LLVM splits them on
/// narrower hosts): every sum runs in one fixed order, so its results do not
/// depend on the host or on the pass's vector-width.
constexpr int64_t kLanes = 16;

/// Whether a program of `rows` rows (the ops' `rows` operand, the same
/// value in every op of a program) runs the few-rows form: rows <= maxRows.
Value isFewRows(Emitter &e, Value rows, int64_t maxRows);

/// tile.load_q into the row-major query tile.
void emitLoadQ(Emitter &e, TileLoadQOp op);
/// tile.qk: dot products of the op's rows with its keys into the row-major
/// score tile, -inf past the keys.
void emitQK(Emitter &e, TileQKOp op);
/// tile.mask on the row-major score tile.
void emitMask(Emitter &e, TileMaskOp op);
/// The statistics of tile.softmax_update on the row-major score tile: the
/// new maxima and sums of the op's rows, p in place of the scores, each
/// row's rescale factor in `alphas`.
void emitSoftmaxStats(Emitter &e, TileSoftmaxOp op, Value alphas);

} // namespace few_rows

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_VECTOREMITTER_H
