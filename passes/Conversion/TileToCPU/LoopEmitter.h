//===- LoopEmitter.h - loop-building vocabulary -----------------*- C++ -*-===//
//
// The CPU and GPU lowerings of the tile ops both expand them into scf loops
// over memref loads and stores in f32; this is their shared vocabulary.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_CONVERSION_LOOPEMITTER_H
#define KVATTN_PASSES_CONVERSION_LOOPEMITTER_H

#include "kvattn/Dialect/KVAttnOps.h"
#include "passes/Conversion/Fp8.h"

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

  /// Loads an element of a Q/K/V buffer as f32 (an FP8 code exactly).
  Value loadF32(Value memref, ValueRange indices) {
    return castKvToF32(b, b.getLoc(), load(memref, indices));
  }
  /// Loads an element of a K/V cache as f32: with an FP8 cache's `scale`,
  /// f32(code) * the scale of its row (kvattn/Reference/Fp8KvCache.h).
  Value loadKvF32(Value cache, Value scale, Value kvHead, ValueRange indices) {
    Value v = loadF32(cache, indices);
    if (!scale)
      return v;
    return arith::MulFOp::create(
        b, v, loadKvScale(b, b.getLoc(), scale, kvHead, indices));
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
Value emitScaledScore(Emitter &e, TileQKOp op, Value dot, double unit = 1.0);

/// The score of tile.qk for row `r` against one key whose element `d` is
/// returned by `loadKey(d)` (f32): scale * dot, then the softcap, in units
/// of `unit`.
Value emitScore(Emitter &e, TileQKOp op, Value r,
                function_ref<Value(Value)> loadKey, double unit = 1.0);

/// Indices of mask[b, h, i, j] under right-aligned broadcasting: static
/// size-1 dimensions read index 0.
SmallVector<Value> maskIndices(Emitter &e, Value mask, Value b, Value h,
                               Value i, Value j);

/// The query head and the query row of tile row `r` of a tile op whose
/// rows start at `start` of head `head`: `(head, start + r)`, or with GQA
/// packing (`group = G`) `(head + (start + r) % G, (start + r) / G)`.
struct QueryRow {
  Value head, row;
};
QueryRow queryRowOf(Emitter &e, Value head, Value start,
                    std::optional<int64_t> group, Value r);

/// The position of row `r` of a tile.mask (null without positions).
Value emitQueryPosition(Emitter &e, TileMaskOp op, Value r);

/// tile.mask for one element: the score at (r, c) with -inf where the key
/// is forbidden and a float mask added where it is allowed (in units of
/// `unit`, as the scores). `score` is the current score, or null to load
/// it from the score tile.
Value emitMaskedScore(Emitter &e, TileMaskOp op, Value r, Value qp, Value c,
                      double unit = 1.0, Value score = {});

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
Value isEmpty(Emitter &e, Value l);
/// A part's weight relative to the row's peak lse: exp(l - peak).
Value partWeight(Emitter &e, Value l, Value peak);
/// `scalar` as `like`'s type (a vector: broadcast).
Value asTypeOf(Emitter &e, Value scalar, Value like);
/// acc + weight(l) * v, or acc for an empty part (`acc` and `v` scalars or
/// vectors of one row's columns).
Value accumulatePart(Emitter &e, Value acc, Value l, Value peak, Value v);
/// The merged value: the weighted sum over the weights' sum, 0 when every
/// part is empty.
Value normalise(Emitter &e, Value weighted, Value peak, Value sum);
Value peakStep(Emitter &e, Value m, Value l);
Value sumStep(Emitter &e, Value s, Value l, Value peak);
Value rowLse(Emitter &e, Value peak, Value sum);
} // namespace merge_detail

/// With a `sink` (an attention sink's logit, f32; null: none) the sink
/// joins once, after the parts, as a part of zero output: it raises the
/// peak and the sum but adds no value (emitMergedOut is unchanged).
///
/// With ALiBi's `shift` (emitAlibiShift; null: none) the parts are relative
/// to it: the sink joins as `sink - shift` and the lse is that of the keys
/// plus the shift, log-added to the sink's (tile.merge).
MergedRow emitMergedRow(Emitter &e, Value lseParts, Value b, Value h, Value i,
                        Value sink = {}, Value shift = {});

/// The same for part lses already loaded (`lses`, in part order): the
/// same operations in the same order, unrolled.
MergedRow emitMergedRow(ArrayRef<Value> lses, Emitter &e, Value sink = {},
                        Value shift = {});

/// log(exp(a) + exp(b)) as hi + log(1 + exp(lo - hi)): -inf when both are.
Value emitLogAddExp(Emitter &e, Value a, Value b);

/// ALiBi's constant of a row of query head `head` of a tile.store or
/// tile.merge with `alibi(%slopes, %ref)`: -slopes[head] * ref, in f64 (one
/// rounding of the f32 results it is added to; null without slopes).
Value emitAlibiShift(Emitter &e, Value slopes, Value ref, Value head);

/// The epilogue's normalisation of one row of tile.store from its running
/// max (in units of `unit`: natural = rowMax * unit) and sum: `noKey` (no
/// allowed key: out = 0) and `inv` (out = acc * inv); emitRowLse gives the
/// row's lse from it. With a `sink` logit z (natural units; null: none) the
/// denominator holds exp(z) too: m = max(max, z), sum' = exp(max - m) sum +
/// exp(z - m), inv = exp(max - m) / sum', lse = m + log(sum'). Without one
/// the ops are those of a plain softmax epilogue.
///
/// With ALiBi's `shift` (f64, natural units; null: none) the state is relative
/// to it: the sink joins `out`'s normalisation as `sink - shift`, and the
/// lse is the keys' `max + log(sum) + shift` log-added to the sink's.
struct RowNormalisation {
  Value noKey, inv;
  /// The lse's pieces: the (natural) peak and the denominator relative to
  /// it; with a sink, whether the row has neither a key nor a finite sink.
  Value peak, total, empty;
  /// ALiBi: the shift, the (absolute) sink, the natural max and the sum.
  Value shift, sink, natural, sum;
};
RowNormalisation emitRowNormalisation(Emitter &e, Value rowMax, Value sum,
                                      Value sink, double unit = 1.0,
                                      Value shift = {});
/// The natural-log lse of a normalised row: -inf when it has neither a key
/// nor a finite sink.
Value emitRowLse(Emitter &e, const RowNormalisation &n);

/// The sink of the row of query head `head` of a tile.store or tile.merge
/// with `sinks` (null without).
Value loadSink(Emitter &e, Value sinks, Value head);

/// Element `x` of the merged output of `row`: the sum over non-empty parts,
/// in index order, of `exp(lse_n - peak) * out_n[x]`, divided by `sum` (0
/// when every part is empty). The weights are taken relative to the peak and
/// normalised by their sum, not as `exp(lse_n - lse)`: for large scores
/// `lse = peak + log(sum)` rounds back to `peak` in f32, and those weights
/// would no longer add up to 1.
Value emitMergedOut(Emitter &e, Value outParts, Value lseParts,
                    const MergedRow &row, Value b, Value h, Value i, Value x);

/// Converts an f32 to `type` (round to nearest even), or returns it.
Value truncTo(Emitter &e, Value v, Type type);

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

/// The CPU lowerings compute in f32 and read the query tile as f32: a
/// 16-bit query tile (the tensor-core GPU kernels' form) is refused by
/// name, naming `pass`, before anything is rewritten.
inline LogicalResult checkF32QueryTiles(Operation *root, StringRef pass) {
  WalkResult walk = root->walk([&](Operation *op) {
    Value qTile;
    if (auto load = dyn_cast<TileLoadQOp>(op))
      qTile = load.getQTile();
    else if (auto qk = dyn_cast<TileQKOp>(op))
      qTile = qk.getQTile();
    if (!qTile || cast<MemRefType>(qTile.getType()).getElementType().isF32())
      return WalkResult::advance();
    op->emitOpError() << pass
                      << " reads the query tile in f32 (16-bit query tiles "
                         "are the tensor-core GPU kernels'), got "
                      << qTile.getType();
    return WalkResult::interrupt();
  });
  return failure(walk.wasInterrupted());
}

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
