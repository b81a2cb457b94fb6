//===- FewRows.cpp - the few-rows form of the vectorised CPU lowering -----===//
//
// Decode-shaped programs (a GQA group's 1 to 8 packed rows) in the layout of
// the rows: the query and score tiles are row-major, Q.K^T runs as dot
// products along D and the online softmax with vectors over keys, so every
// lane does useful work however few rows a program has (the column form's
// vectors over rows use 4 of 16 lanes for a GQA group of 4).
//
// Q.K^T keeps 16 accumulators in registers, one per (row, key) pair of a
// register tile (16 keys x 1 row, 8 x 2 or 4 x 4, chosen by the row count),
// each a vector over 16 consecutive elements of D: one vector load of a key
// row and of a query row per FMA pair, bf16/f16 keys extended in registers.
// A transpose of the 16 accumulators (four levels of shuffles and adds)
// then reduces them into one vector of 16 scores. All vectors here are 16
// lanes whatever the host's width (LLVM splits them on narrower hosts): each
// dot product sums its lanes in one fixed order (lane l over d = l mod 16
// in order, then the halves of the tree), so the scores do not depend on the
// host, the vector-width option or the register tile.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/TileToCPU/VectorEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::kvattn;
using namespace mlir::kvattn::few_rows;

namespace {

using P = arith::CmpIPredicate;

/// The 16-lane vocabulary of this form.
struct LaneEmitter : VectorEmitter {
  explicit LaneEmitter(Emitter &e) : VectorEmitter(e.b, kLanes) {}

  VectorType vf32(int64_t lanes) const {
    return VectorType::get({lanes}, b.getF32Type());
  }
  using VectorEmitter::vf32;
  Value constMask(int64_t lanes, int64_t active) {
    SmallVector<bool> bits(lanes);
    for (int64_t i = 0; i < lanes; ++i)
      bits[i] = i < active;
    auto type = VectorType::get({lanes}, b.getI1Type());
    return arith::ConstantOp::create(
        b, type, DenseElementsAttr::get(type, ArrayRef<bool>(bits)));
  }
  /// c0 + 0, 1, ..., lanes - 1 < bound, as i1 lanes.
  Value below(Value c0, int64_t lanes, Value bound) {
    SmallVector<int64_t> values(lanes);
    for (int64_t i = 0; i < lanes; ++i)
      values[i] = i;
    auto type = VectorType::get({lanes}, b.getIndexType());
    Value iotaIndex = arith::ConstantOp::create(
        b, type, DenseElementsAttr::get(type, ArrayRef(values)));
    Value c = vector::BroadcastOp::create(b, type, c0);
    Value lanesAt = arith::AddIOp::create(b, c, iotaIndex);
    Value limit = vector::BroadcastOp::create(b, type, bound);
    return arith::CmpIOp::create(b, P::slt, lanesAt, limit);
  }
  /// `lanes` elements of `memref` from `indices` (the last one varies) as
  /// f32: a vector load, a masked one for the first `active` lanes only, or
  /// element by element where the last dimension is not contiguous.
  Value loadLanes(Value memref, SmallVector<Value, 4> indices,
                  int64_t active = kLanes) {
    auto type = cast<MemRefType>(memref.getType());
    Type elt = type.getElementType();
    auto vt = VectorType::get({kLanes}, elt);
    SmallVector<int64_t> strides;
    int64_t offset;
    bool contiguous = succeeded(type.getStridesAndOffset(strides, offset)) &&
                      strides.back() == 1;
    Value v;
    if (!contiguous) {
      SmallVector<Value> elements;
      Value zero = arith::ConstantOp::create(b, elt, b.getZeroAttr(elt));
      Value x0 = indices.back();
      for (int64_t i = 0; i < kLanes; ++i) {
        if (i >= active) {
          elements.push_back(zero);
          continue;
        }
        indices.back() = add(x0, idx(i));
        elements.push_back(load(memref, indices));
      }
      v = vector::FromElementsOp::create(b, vt, elements);
    } else if (active < kLanes) {
      Value pass = arith::ConstantOp::create(
          b, vt, DenseElementsAttr::get(vt, b.getZeroAttr(elt)));
      v = vector::MaskedLoadOp::create(b, vt, memref, indices,
                                       constMask(kLanes, active), pass);
    } else {
      v = vector::LoadOp::create(b, vt, memref, indices);
    }
    return castKvToF32(b, b.getLoc(), v);
  }

  /// One vector of 16 lanes: lane a is the sum of the lanes of acc[a], in
  /// a fixed tree (each level adds lane l and lane l + n/2 of n).
  Value transposeReduce(ArrayRef<Value> acc) {
    assert(acc.size() == static_cast<size_t>(kLanes));
    SmallVector<Value> v(acc);
    for (int64_t group = kLanes; group > 1; group /= 2) {
      SmallVector<int64_t> lo, hi;
      for (int64_t half = 0; half < 2; ++half)
        for (int64_t t = 0; t < kLanes / group; ++t)
          for (int64_t l = 0; l < group / 2; ++l) {
            lo.push_back(half * kLanes + t * group + l);
            hi.push_back(half * kLanes + t * group + group / 2 + l);
          }
      SmallVector<Value> next;
      for (size_t i = 0; i < v.size(); i += 2) {
        Value a = vector::ShuffleOp::create(b, v[i], v[i + 1], lo);
        Value c = vector::ShuffleOp::create(b, v[i], v[i + 1], hi);
        next.push_back(arith::AddFOp::create(b, a, c));
      }
      v = std::move(next);
    }
    return v[0];
  }

  /// The sum of a vector's lanes in a fixed tree (halves added, then their
  /// halves...).
  Value treeSum(Value v) {
    for (int64_t n = kLanes; n > 1; n /= 2) {
      Value lo = vector::ExtractStridedSliceOp::create(
          b, v, ArrayRef<int64_t>{0}, ArrayRef<int64_t>{n / 2},
          ArrayRef<int64_t>{1});
      Value hi = vector::ExtractStridedSliceOp::create(
          b, v, ArrayRef<int64_t>{n / 2}, ArrayRef<int64_t>{n / 2},
          ArrayRef<int64_t>{1});
      v = arith::AddFOp::create(b, lo, hi);
    }
    return vector::ExtractOp::create(b, v, ArrayRef<int64_t>{0});
  }
};

/// Lanes of the score tile's row `r` from column c0: a vector load, or a
/// masked one (`-inf` past the tile) where the tile's last chunk is short.
Value loadScores(LaneEmitter &e, Value scores, Value r, Value c0,
                 int64_t active) {
  if (active == kLanes)
    return e.vload(scores, {r, c0});
  Value pass = e.splat(e.negInf());
  return vector::MaskedLoadOp::create(e.b, e.vf32(), scores, ValueRange{r, c0},
                                      e.constMask(kLanes, active), pass);
}
void storeScores(LaneEmitter &e, Value v, Value scores, Value r, Value c0,
                 int64_t active) {
  if (active == kLanes)
    return e.vstore(v, scores, {r, c0});
  vector::MaskedStoreOp::create(e.b, scores, ValueRange{r, c0},
                                e.constMask(kLanes, active), v);
}

/// For each 16-lane chunk of a row of `bn` columns: body(c0, active lanes);
/// the full chunks in a loop, a short last one after it.
void forEachChunk(LaneEmitter &e, int64_t bn,
                  function_ref<void(Value c0, int64_t active)> body) {
  int64_t full = bn / kLanes;
  if (full)
    e.loopStep(e.idx(0), e.idx(full * kLanes), e.idx(kLanes),
               [&](Value c0) { body(c0, kLanes); });
  if (bn % kLanes)
    body(e.idx(full * kLanes), bn % kLanes);
}

/// scores[r0 + i, c0 + k] for i < rowsPerTile, k < keysPerTile (16 pairs):
/// the dot products along D, scaled (and softcapped). Rows past `rows` read
/// the last row and are not stored; keys past `cols` read the last key (the
/// caller overwrites them with -inf).
void emitDotTile(LaneEmitter &e, TileQKOp op, Value r0, Value c0,
                 int64_t rowsPerTile, int64_t keysPerTile) {
  Value q = op.getQTile(), scores = op.getScores();
  int64_t d = cast<MemRefType>(q.getType()).getDimSize(1);
  int64_t bn = cast<MemRefType>(scores.getType()).getDimSize(1);
  Value rows = op.getRows(), cols = op.getCols();
  Value lastRow = e.sub(rows, e.idx(1)), lastKey = e.sub(cols, e.idx(1));
  SmallVector<Value> qRows;
  for (int64_t i = 0; i < rowsPerTile; ++i)
    qRows.push_back(arith::MinSIOp::create(e.b, e.add(r0, e.idx(i)), lastRow));
  SmallVector<SmallVector<Value, 4>> keyRows;
  for (int64_t k = 0; k < keysPerTile; ++k) {
    Value c = arith::MinSIOp::create(e.b, e.add(c0, e.idx(k)), lastKey);
    keyRows.push_back(kvRow(e, op.getKey(), op.getBlockTable(), op.getBatch(),
                            op.getKvHead(), e.add(op.getStart(), c)));
  }
  // An FP8 cache: each key row's scale, splat over the lanes.
  SmallVector<Value> keyScales;
  if (Value scale = op.getKvScale())
    for (int64_t k = 0; k < keysPerTile; ++k)
      keyScales.push_back(e.splat(
          loadKvScale(e.b, e.b.getLoc(), scale, op.getKvHead(), keyRows[k])));
  // acc[i * keysPerTile + k] += q[row i, x..x+16) * key[k, x..x+16).
  auto step = [&](Value x, ValueRange acc, int64_t active) {
    SmallVector<Value> qv, kv;
    for (int64_t i = 0; i < rowsPerTile; ++i)
      qv.push_back(e.loadLanes(q, {qRows[i], x}, active));
    for (int64_t k = 0; k < keysPerTile; ++k) {
      SmallVector<Value, 4> at = keyRows[k];
      at.back() = x;
      kv.push_back(e.loadLanes(op.getKey(), at, active));
      if (!keyScales.empty())
        kv.back() = e.mulf(kv.back(), keyScales[k]);
    }
    SmallVector<Value> next(acc);
    for (int64_t i = 0; i < rowsPerTile; ++i)
      for (int64_t k = 0; k < keysPerTile; ++k) {
        Value &a = next[i * keysPerTile + k];
        a = e.fma(qv[i], kv[k], a);
      }
    return next;
  };
  SmallVector<Value> acc(kLanes, e.splat(0.0));
  int64_t full = d / kLanes;
  if (full)
    acc = e.carry(
        e.idx(0), e.idx(full * kLanes), e.idx(kLanes), acc,
        [&](Value x, ValueRange iter) { return step(x, iter, kLanes); });
  if (d % kLanes)
    acc = step(e.idx(full * kLanes), acc, d % kLanes);
  Value s = e.transposeReduce(acc);
  double scale = op.getScale().convertToDouble();
  if (std::optional<APFloat> softcap = op.getSoftcap()) {
    double cap = softcap->convertToDouble();
    Value scaled = e.mulf(s, e.splat(scale / cap));
    Value tanh = math::TanhOp::create(e.b, scaled);
    s = e.mulf(e.splat(cap), tanh);
  } else {
    s = e.mulf(s, e.splat(scale));
  }
  // Row i's keys: lanes [i * keysPerTile, (i + 1) * keysPerTile).
  for (int64_t i = 0; i < rowsPerTile; ++i) {
    Value r = e.add(r0, e.idx(i));
    Value inRows = e.cmpi(P::slt, r, rows);
    e.when(inRows, [&] {
      Value part = vector::ExtractStridedSliceOp::create(
          e.b, s, ArrayRef<int64_t>{i * keysPerTile},
          ArrayRef<int64_t>{keysPerTile}, ArrayRef<int64_t>{1});
      if (bn % keysPerTile == 0) {
        vector::StoreOp::create(e.b, part, scores, ValueRange{r, c0});
      } else {
        Value inTile = e.below(c0, keysPerTile, e.idx(bn));
        vector::MaskedStoreOp::create(e.b, scores, ValueRange{r, c0}, inTile,
                                      part);
      }
    });
  }
}

} // namespace

Value mlir::kvattn::few_rows::isFewRows(Emitter &e, Value rows,
                                        int64_t maxRows) {
  return e.cmpi(P::ule, rows, e.idx(maxRows));
}

void mlir::kvattn::few_rows::emitLoadQ(Emitter &e, TileLoadQOp op) {
  ::mlir::kvattn::emitLoadQ(e, op, TileRef::rowMajor(op.getQTile()));
}

void mlir::kvattn::few_rows::emitQK(Emitter &scalar, TileQKOp op) {
  LaneEmitter e(scalar);
  Value rows = op.getRows(), cols = op.getCols();
  int64_t bn = cast<MemRefType>(op.getScores().getType()).getDimSize(1);
  // The register tile: 16 keys of one row, 8 keys of two rows, or 4 keys of
  // four rows (one or two row tiles).
  auto tiles = [&](int64_t rowsPerTile) {
    int64_t keysPerTile = kLanes / rowsPerTile;
    e.loopStep(e.idx(0), rows, e.idx(rowsPerTile), [&](Value r0) {
      e.loopStep(e.idx(0), cols, e.idx(keysPerTile), [&](Value c0) {
        emitDotTile(e, op, r0, c0, rowsPerTile, keysPerTile);
      });
    });
  };
  e.ifElse(
      e.cmpi(P::eq, rows, e.idx(1)), [&] { tiles(1); },
      [&] {
        e.ifElse(
            e.cmpi(P::eq, rows, e.idx(2)), [&] { tiles(2); },
            [&] { tiles(4); });
      });
  // Columns past the keys never contribute (the last register tile stored
  // scores of repeated keys there).
  Value negInf = e.negInf();
  e.loop(e.idx(0), rows, [&](Value r) {
    e.loop(cols, e.idx(bn), [&](Value c) {
      e.store(negInf, op.getScores(), {r, c});
    });
  });
}

void mlir::kvattn::few_rows::emitMask(Emitter &scalar, TileMaskOp op) {
  LaneEmitter e(scalar);
  Value scores = op.getScores();
  int64_t bn = cast<MemRefType>(scores.getType()).getDimSize(1);
  Value rows = op.getRows(), cols = op.getCols();
  // The offset form without a general mask, key_valid or ALiBi: positions
  // are vector arithmetic over the keys; anything else element by element.
  bool vectorForm = !op.getQPos() && !op.getKPos() && !op.getMask() &&
                    !op.getKeyValid() && !op.getAlibiSlopes() &&
                    !op.getTreeParents();
  if (!vectorForm) {
    e.loop(e.idx(0), rows, [&](Value r) {
      Value qp = emitQueryPosition(e, op, r);
      e.loop(e.idx(0), cols, [&](Value c) {
        Value s = e.load(scores, {r, c});
        e.store(emitMaskedScore(e, op, r, qp, c, 1.0, s), scores, {r, c});
      });
    });
    return;
  }
  auto splatI64 = [&](int64_t v) {
    return e.splat(arith::ConstantIntOp::create(e.b, e.b.getI64Type(), v));
  };
  Value negInf = e.splat(e.negInf());
  e.loop(e.idx(0), rows, [&](Value r) {
    Value qp =
        op.getQBase() ? e.splat(e.i64(emitQueryPosition(e, op, r))) : Value();
    forEachChunk(e, bn, [&](Value c0, int64_t active) {
      Value c = arith::AddIOp::create(e.b, e.splat(e.i64(c0)), e.iota());
      Value j = arith::AddIOp::create(e.b, e.splat(e.i64(op.getKStart())), c);
      Value allowed =
          arith::CmpIOp::create(e.b, P::slt, j, e.splat(e.i64(op.getKvLen())));
      if (op.getCausal() || op.getWindow() || op.getWindowRight()) {
        Value kp = arith::AddIOp::create(e.b, e.splat(e.i64(op.getKBase())), c);
        if (op.getCausal())
          allowed = e.andi(allowed, e.cmpi(P::sle, kp, qp));
        if (std::optional<int64_t> w = op.getWindow()) {
          Value distance = arith::SubIOp::create(e.b, qp, kp);
          allowed = e.andi(allowed, e.cmpi(P::slt, distance, splatI64(*w)));
        }
        if (std::optional<int64_t> right = op.getWindowRight()) {
          Value ahead = arith::SubIOp::create(e.b, kp, qp);
          allowed = e.andi(allowed, e.cmpi(P::sle, ahead, splatI64(*right)));
        }
      }
      Value s = loadScores(e, scores, r, c0, active);
      Value masked = arith::SelectOp::create(e.b, allowed, s, negInf);
      storeScores(e, masked, scores, r, c0, active);
    });
  });
}

void mlir::kvattn::few_rows::emitSoftmaxStats(Emitter &scalar, TileSoftmaxOp op,
                                              Value alphas) {
  LaneEmitter e(scalar);
  ImplicitLocOpBuilder &b = e.b;
  Value scores = op.getScores();
  int64_t bn = cast<MemRefType>(scores.getType()).getDimSize(1);
  Value negInf = e.negInf(), vNegInf = e.splat(negInf);
  Value zero = e.splat(0.0);
  // Every column of the tile: those past the keys hold -inf (tile.qk).
  auto reduceChunks =
      [&](Value init, function_ref<Value(Value acc, Value c0, int64_t)> body) {
        int64_t full = bn / kLanes;
        Value acc = init;
        if (full)
          acc = e.carry(e.idx(0), e.idx(full * kLanes), e.idx(kLanes), {acc},
                        [&](Value c0, ValueRange iter) {
                          return SmallVector<Value>{body(iter[0], c0, kLanes)};
                        })[0];
        if (bn % kLanes)
          acc = body(acc, e.idx(full * kLanes), bn % kLanes);
        return acc;
      };
  e.loop(e.idx(0), op.getRows(), [&](Value r) {
    Value oldMax = e.load(op.getMax(), r);
    // NaN-propagating maximum: a NaN score poisons its row.
    Value maxLanes =
        reduceChunks(vNegInf, [&](Value m, Value c0, int64_t active) {
          Value s = loadScores(e, scores, r, c0, active);
          return arith::MaximumFOp::create(b, m, s).getResult();
        });
    Value blockMax = vector::ReductionOp::create(
        b, vector::CombiningKind::MAXIMUMF, maxLanes);
    Value newMax = arith::MaximumFOp::create(b, oldMax, blockMax);
    // A row with no allowed key yet keeps its state: alpha = 1, p = 0.
    Value anyAllowed =
        arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, newMax, negInf);
    Value shift = arith::SubFOp::create(b, oldMax, newMax);
    Value alpha = arith::SelectOp::create(
        b, anyAllowed, math::ExpOp::create(b, shift), e.f32(1.0));
    Value vMax = e.splat(newMax), vAny = e.splat(anyAllowed);
    Value sumLanes =
        reduceChunks(zero, [&](Value sum, Value c0, int64_t active) {
          Value s = loadScores(e, scores, r, c0, active);
          Value p = math::ExpOp::create(b, arith::SubFOp::create(b, s, vMax));
          p = arith::SelectOp::create(b, vAny, p, zero);
          storeScores(e, p, scores, r, c0, active);
          return arith::AddFOp::create(b, sum, p).getResult();
        });
    Value blockSum = e.treeSum(sumLanes);
    Value oldSum = e.load(op.getSum(), r);
    e.store(e.addf(e.mulf(alpha, oldSum), blockSum), op.getSum(), r);
    e.store(arith::SelectOp::create(b, anyAllowed, newMax, oldMax), op.getMax(),
            r);
    e.store(alpha, alphas, r);
  });
}
