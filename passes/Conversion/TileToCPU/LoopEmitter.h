//===- LoopEmitter.h - loop-building vocabulary -----------------*- C++ -*-===//
//
// The CPU and GPU lowerings of the tile ops both expand them into scf loops
// over memref loads and stores in f32; this is their shared vocabulary.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_CONVERSION_LOOPEMITTER_H
#define KVATTN_PASSES_CONVERSION_LOOPEMITTER_H

#include "kvattn/Dialect/KVAttnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <limits>

namespace mlir {
namespace kvattn {

/// Small loop-building vocabulary over an ImplicitLocOpBuilder.
struct Emitter {
  ImplicitLocOpBuilder &b;

  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value f32(double v) {
    return arith::ConstantFloatOp::create(b, b.getF32Type(),
                                          APFloat(static_cast<float>(v)));
  }
  Value negInf() { return f32(-std::numeric_limits<float>::infinity()); }
  Value dimOf(Value memref, int64_t d) {
    return b.createOrFold<memref::DimOp>(memref, d);
  }
  Value tileDim(Value memref, int64_t d) {
    return idx(cast<MemRefType>(memref.getType()).getDimSize(d));
  }

  /// for (iv = lb; iv < ub; ++iv) body(iv)
  void loop(Value lb, Value ub, function_ref<void(Value)> body) {
    scf::ForOp::create(
        b, lb, ub, idx(1), ValueRange{},
        [&](OpBuilder &nested, Location loc, Value iv, ValueRange) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(scf::YieldOp::create(nested, loc));
          body(iv);
        });
  }

  /// A reduction loop carrying one f32 value.
  Value reduce(Value lb, Value ub, Value init,
               function_ref<Value(Value iv, Value acc)> body) {
    auto loop = scf::ForOp::create(
        b, lb, ub, idx(1), ValueRange{init},
        [&](OpBuilder &nested, Location loc, Value iv, ValueRange iter) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToEnd(nested.getInsertionBlock());
          Value next = body(iv, iter[0]);
          scf::YieldOp::create(b, next);
        });
    return loop.getResult(0);
  }

  /// if (cond) body()
  void when(Value cond, function_ref<void()> body) {
    auto ifOp = scf::IfOp::create(b, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    body();
  }

  /// if (cond) then() else otherwise()
  void ifElse(Value cond, function_ref<void()> then,
              function_ref<void()> otherwise) {
    auto ifOp = scf::IfOp::create(b, cond, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    then();
    b.setInsertionPoint(ifOp.elseBlock()->getTerminator());
    otherwise();
  }

  Value load(Value memref, ValueRange indices) {
    return memref::LoadOp::create(b, memref, indices);
  }
  void store(Value value, Value memref, ValueRange indices) {
    memref::StoreOp::create(b, value, memref, indices);
  }
  /// The indices of element `x` of key/value row `j` of kv head `head`:
  /// `[batch, head, j, x]` in a `[B, Hkv, S, D]` cache, or
  /// `[block_table[batch, j / page_size], j % page_size, head, x]` in a
  /// paged `[num_pages, page_size, Hkv, D]` cache.
  SmallVector<Value, 4> kvIndices(Value cache, Value blockTable, Value batch,
                                  Value head, Value j, Value x) {
    if (!blockTable)
      return {batch, head, j, x};
    Value pageSize = dimOf(cache, 1);
    Value slot = b.createOrFold<arith::DivUIOp>(j, pageSize);
    Value page = arith::IndexCastOp::create(
        b, b.getIndexType(), load(blockTable, ValueRange{batch, slot}));
    return {page, b.createOrFold<arith::RemUIOp>(j, pageSize), head, x};
  }

  /// Loads an element of a Q/K/V buffer as f32.
  Value loadF32(Value memref, ValueRange indices) {
    Value v = load(memref, indices);
    if (v.getType().isF32())
      return v;
    return arith::ExtFOp::create(b, b.getF32Type(), v);
  }
  Value loadIndex(Value memref, ValueRange indices) {
    return arith::IndexCastOp::create(b, b.getIndexType(),
                                      load(memref, indices));
  }

  // f32 arithmetic; `fast` marks reductions that may be reassociated.
  Value addf(Value x, Value y, bool fast = false) {
    auto op = arith::AddFOp::create(b, x, y);
    if (fast)
      op.setFastmath(arith::FastMathFlags::reassoc |
                     arith::FastMathFlags::contract);
    return op;
  }
  Value mulf(Value x, Value y, bool fast = false) {
    auto op = arith::MulFOp::create(b, x, y);
    if (fast)
      op.setFastmath(arith::FastMathFlags::reassoc |
                     arith::FastMathFlags::contract);
    return op;
  }
  Value add(Value x, Value y) { return b.createOrFold<arith::AddIOp>(x, y); }
  Value sub(Value x, Value y) { return b.createOrFold<arith::SubIOp>(x, y); }
  Value cmpi(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, p, x, y);
  }
  Value andi(Value x, Value y) { return arith::AndIOp::create(b, x, y); }
};

/// log2(e): the GPU lowering keeps scores and running maxima in base-2
/// units (s * log2(e)) so that each probability is one exp2.
constexpr double kLog2E = 1.4426950408889634;

/// The score of tile.qk from the f32 dot product `dot`: scale * dot, then
/// the softcap, in units of `unit` (1, or log2(e) for base 2), with the
/// constants folded: `dot * (scale * unit)`, or with a softcap
/// `(cap * unit) * tanh(dot * (scale / cap))`.
inline Value emitScaledScore(Emitter &e, TileQKOp op, Value dot,
                             double unit = 1.0) {
  double scale = op.getScale().convertToDouble();
  std::optional<APFloat> softcap = op.getSoftcap();
  if (!softcap)
    return e.mulf(dot, e.f32(scale * unit));
  double cap = softcap->convertToDouble();
  return e.mulf(e.f32(cap * unit),
                math::TanhOp::create(e.b, e.mulf(dot, e.f32(scale / cap))));
}

/// The score of tile.qk for row `r` against one key whose element `d` is
/// returned by `loadKey(d)` (f32): scale * dot, then the softcap, in units
/// of `unit`.
inline Value emitScore(Emitter &e, TileQKOp op, Value r,
                       function_ref<Value(Value)> loadKey, double unit = 1.0) {
  Value q = op.getQTile();
  Value d = e.tileDim(q, 1);
  Value dot = e.reduce(e.idx(0), d, e.f32(0), [&](Value x, Value acc) {
    return e.addf(acc, e.mulf(e.load(q, {r, x}), loadKey(x), true), true);
  });
  return emitScaledScore(e, op, dot, unit);
}

/// Indices of mask[b, h, i, j] under right-aligned broadcasting: static
/// size-1 dimensions read index 0.
inline SmallVector<Value> maskIndices(Emitter &e, Value mask, Value b, Value h,
                                      Value i, Value j) {
  auto type = cast<MemRefType>(mask.getType());
  Value full[4] = {b, h, i, j};
  SmallVector<Value> indices;
  for (int64_t d = 0; d < type.getRank(); ++d)
    indices.push_back(type.getDimSize(d) == 1 ? e.idx(0)
                                              : full[4 - type.getRank() + d]);
  return indices;
}

/// The query head and the query row of tile row `r` of a tile op whose
/// rows start at `start` of head `head`: `(head, start + r)`, or with GQA
/// packing (`group = G`) `(head + (start + r) % G, (start + r) / G)`.
struct QueryRow {
  Value head, row;
};
inline QueryRow queryRowOf(Emitter &e, Value head, Value start,
                           std::optional<int64_t> group, Value r) {
  Value t = e.add(start, r);
  if (!group || *group == 1)
    return {head, t};
  Value g = e.idx(*group);
  return {e.add(head, e.b.createOrFold<arith::RemUIOp>(t, g)),
          e.b.createOrFold<arith::DivUIOp>(t, g)};
}

/// The position of row `r` of a tile.mask (null without positions).
inline Value emitQueryPosition(Emitter &e, TileMaskOp op, Value r) {
  std::optional<int64_t> group = op.getGroup();
  if (op.getQBase()) {
    if (!group || *group == 1)
      return e.add(op.getQBase(), r);
    // Packed: q_base is the position of query row 0.
    return e.add(op.getQBase(),
                 queryRowOf(e, op.getHead(), op.getQStart(), group, r).row);
  }
  if (op.getQPos())
    return e.loadIndex(
        op.getQPos(),
        {op.getBatch(),
         queryRowOf(e, op.getHead(), op.getQStart(), group, r).row});
  return {};
}

/// tile.mask for one element: the score at (r, c) with -inf where the key
/// is forbidden and a float mask added where it is allowed (in units of
/// `unit`, as the scores). `score` is the current score, or null to load
/// it from the score tile.
inline Value emitMaskedScore(Emitter &e, TileMaskOp op, Value r, Value qp,
                             Value c, double unit = 1.0, Value score = {}) {
  using P = arith::CmpIPredicate;
  Value j = e.add(op.getKStart(), c);
  Value allowed = e.cmpi(P::slt, j, op.getKvLen());
  if (Value valid = op.getKeyValid())
    allowed = e.andi(allowed, e.load(valid, {op.getBatch(), j}));
  if (op.getCausal() || op.getWindow()) {
    Value kp = op.getKBase() ? e.add(op.getKBase(), c)
                             : e.loadIndex(op.getKPos(), {op.getBatch(), j});
    if (op.getCausal())
      allowed = e.andi(allowed, e.cmpi(P::sle, kp, qp));
    if (std::optional<int64_t> w = op.getWindow())
      allowed = e.andi(allowed, e.cmpi(P::slt, e.sub(qp, kp), e.idx(*w)));
  }
  Value s = score ? score : e.load(op.getScores(), {r, c});
  if (Value mask = op.getMask()) {
    QueryRow q = queryRowOf(e, op.getHead(), op.getQStart(), op.getGroup(), r);
    Value m =
        e.load(mask, maskIndices(e, mask, op.getBatch(), q.head, q.row, j));
    if (isa<FloatType>(m.getType())) {
      if (!m.getType().isF32())
        m = arith::ExtFOp::create(e.b, e.b.getF32Type(), m);
      s = e.addf(s, unit == 1.0 ? m : e.mulf(m, e.f32(unit)));
    } else {
      allowed = e.andi(allowed, m);
    }
  }
  return arith::SelectOp::create(e.b, allowed, s, e.negInf());
}

/// The merge of partial states (kvattn.merge, kvattn.tile.merge) for one
/// row `(b, h, i)` of `lseParts [N, B, H, L]`, visiting the parts in index
/// order: the largest part lse `peak`, `sum` = the sum of
/// `exp(lse_n - peak)` over non-empty parts, and the merged
/// `lse = peak + log(sum)` (-inf when every part is empty; a NaN part
/// poisons the row).
struct MergedRow {
  Value peak, sum, lse;
};

/// The pieces of the merge arithmetic, shared by every lowering of it.
namespace merge_detail {
/// Whether a part (its lse `l`) is empty: -inf.
inline Value isEmpty(Emitter &e, Value l) {
  return arith::CmpFOp::create(e.b, arith::CmpFPredicate::OEQ, l, e.negInf());
}
/// A part's weight relative to the row's peak lse: exp(l - peak).
inline Value partWeight(Emitter &e, Value l, Value peak) {
  return math::ExpOp::create(e.b, arith::SubFOp::create(e.b, l, peak));
}
/// `scalar` as `like`'s type (a vector: broadcast).
inline Value asTypeOf(Emitter &e, Value scalar, Value like) {
  if (auto vector = dyn_cast<VectorType>(like.getType()))
    return vector::BroadcastOp::create(e.b, vector, scalar);
  return scalar;
}
/// acc + weight(l) * v, or acc for an empty part (`acc` and `v` scalars or
/// vectors of one row's columns).
inline Value accumulatePart(Emitter &e, Value acc, Value l, Value peak,
                            Value v) {
  // (Named locals here and below: the IR order must not depend on the
  // compiler's argument evaluation order; this is GCC's.)
  Value w = asTypeOf(e, partWeight(e, l, peak), v);
  Value added = e.addf(acc, e.mulf(w, v));
  Value empty = isEmpty(e, l);
  return arith::SelectOp::create(e.b, empty, acc, added);
}
/// The merged value: the weighted sum over the weights' sum, 0 when every
/// part is empty.
inline Value normalise(Emitter &e, Value weighted, Value peak, Value sum) {
  Value merged =
      arith::DivFOp::create(e.b, weighted, asTypeOf(e, sum, weighted));
  Value zero = asTypeOf(e, e.f32(0), weighted);
  Value empty = isEmpty(e, peak);
  return arith::SelectOp::create(e.b, empty, zero, merged);
}
inline Value peakStep(Emitter &e, Value m, Value l) {
  return arith::MaximumFOp::create(e.b, m, l);
}
inline Value sumStep(Emitter &e, Value s, Value l, Value peak) {
  Value w = partWeight(e, l, peak);
  Value added = e.addf(s, w);
  Value empty = isEmpty(e, l);
  return arith::SelectOp::create(e.b, empty, s, added);
}
inline Value rowLse(Emitter &e, Value peak, Value sum) {
  Value log = math::LogOp::create(e.b, sum);
  Value lse = e.addf(peak, log);
  Value negInf = e.negInf();
  Value empty = isEmpty(e, peak);
  return arith::SelectOp::create(e.b, empty, negInf, lse);
}
} // namespace merge_detail

inline MergedRow emitMergedRow(Emitter &e, Value lseParts, Value b, Value h,
                               Value i) {
  using namespace merge_detail;
  Value n = e.dimOf(lseParts, 0);
  MergedRow row;
  row.peak = e.reduce(e.idx(0), n, e.negInf(), [&](Value p, Value m) {
    return peakStep(e, m, e.load(lseParts, {p, b, h, i}));
  });
  row.sum = e.reduce(e.idx(0), n, e.f32(0), [&](Value p, Value s) {
    return sumStep(e, s, e.load(lseParts, {p, b, h, i}), row.peak);
  });
  row.lse = rowLse(e, row.peak, row.sum);
  return row;
}

/// The same for part lses already loaded (`lses`, in part order): the
/// same operations in the same order, unrolled.
inline MergedRow emitMergedRow(ArrayRef<Value> lses, Emitter &e) {
  using namespace merge_detail;
  MergedRow row;
  row.peak = e.negInf();
  for (Value l : lses)
    row.peak = peakStep(e, row.peak, l);
  row.sum = e.f32(0);
  for (Value l : lses)
    row.sum = sumStep(e, row.sum, l, row.peak);
  row.lse = rowLse(e, row.peak, row.sum);
  return row;
}

/// Element `x` of the merged output of `row`: the sum over non-empty parts,
/// in index order, of `exp(lse_n - peak) * out_n[x]`, divided by `sum` (0
/// when every part is empty). The weights are taken relative to the peak and
/// normalised by their sum, not as `exp(lse_n - lse)`: for large scores
/// `lse = peak + log(sum)` rounds back to `peak` in f32, and those weights
/// would no longer add up to 1.
inline Value emitMergedOut(Emitter &e, Value outParts, Value lseParts,
                           const MergedRow &row, Value b, Value h, Value i,
                           Value x) {
  using namespace merge_detail;
  Value n = e.dimOf(lseParts, 0);
  Value weighted = e.reduce(e.idx(0), n, e.f32(0), [&](Value p, Value a) {
    Value l = e.load(lseParts, {p, b, h, i});
    Value v = e.load(outParts, {p, b, h, i, x});
    return accumulatePart(e, a, l, row.peak, v);
  });
  return normalise(e, weighted, row.peak, row.sum);
}

/// Converts an f32 to `type` (round to nearest even), or returns it.
inline Value truncTo(Emitter &e, Value v, Type type) {
  return type.isF32() ? v : arith::TruncFOp::create(e.b, type, v).getResult();
}

/// A program's scratch tile `[R, C]` as the CPU lowerings address it:
/// row-major as typed, or transposed, `[C][R]` in the same buffer: the
/// layout of the vectorised lowering, whose vectors run over query rows.
struct TileRef {
  /// The tile, or a `[C, R]` view of it.
  Value view;
  bool transposed = false;

  static TileRef rowMajor(Value tile) { return {tile, false}; }
  /// The transposed view of an identity-layout tile of static shape.
  static TileRef transposedOf(ImplicitLocOpBuilder &b, Value tile) {
    auto type = cast<MemRefType>(tile.getType());
    int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
    auto viewType = MemRefType::get({cols, rows}, type.getElementType());
    Value view = memref::ReinterpretCastOp::create(
        b, viewType, tile, /*offset=*/0, ArrayRef<int64_t>{cols, rows},
        ArrayRef<int64_t>{rows, 1});
    return {view, true};
  }
  Value load(Emitter &e, Value r, Value c) const {
    return transposed ? e.load(view, {c, r}) : e.load(view, {r, c});
  }
  void store(Emitter &e, Value v, Value r, Value c) const {
    transposed ? e.store(v, view, {c, r}) : e.store(v, view, {r, c});
  }
};

/// tile.load_q into `qTile` (the op's tile, in either layout); rows past
/// `rows` are zero.
void emitLoadQ(Emitter &e, TileLoadQOp op, const TileRef &qTile);
/// tile.store from `acc` (the op's accumulator, in either layout).
void emitStore(Emitter &e, TileStoreOp op, const TileRef &acc);

/// Runs the patterns of a lowering to loops over `root`. Region
/// simplification is off: these lowerings only replace ops, one by one, and
/// leave every clean-up to the pipelines' canonicalize, which runs only
/// where it is safe (see Pipelines.cpp).
inline LogicalResult applyLoopLoweringPatterns(Operation *root,
                                               RewritePatternSet &&patterns) {
  GreedyRewriteConfig config;
  config.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
  return applyPatternsGreedily(root, std::move(patterns), config);
}

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_LOOPEMITTER_H
