//===- TileToVectors.cpp - the vectorised CPU lowering of the tile ops ----===//
//
// See Passes.td (-kvattn-lower-tile-to-vectors). The query and score tiles
// are stored transposed, so that Q.K^T is a sum of outer products with one
// broadcast key element per FMA (vectors over query rows) and the online
// softmax of W rows is a handful of vertical vector operations per key.
// P.V runs on the row-major accumulator with vectors over the value
// dimension and one broadcast probability per row and key.
//
// Register tiling: an outer-product kernel keeps `keys x rowVectors` (Q.K^T)
// or `rows x valueChunks` (P.V) accumulators in registers across its
// reduction loop: about three quarters of the vector registers (24 of 32
// with AVX-512).
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"
#include "passes/Conversion/TileToCPU/VectorEmitter.h"
#include "passes/Conversion/TileToCPU/VectorLayouts.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_LOWERTILETOVECTORSPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

namespace {

/// Row vectors per register tile: the most, up to 4, that divide the
/// tile's `rowVectors`.
int64_t rowVectorsPerTile(int64_t rowVectors) {
  for (int64_t n = 4; n > 1; --n)
    if (rowVectors % n == 0)
      return n;
  return 1;
}

/// The lowering's own options; the layouts and widths are the tiles'
/// (#kvattn.vector_layout).
struct Lowering {
  /// Paged caches: re-read blocks from a contiguous copy, and the next
  /// block's rows prefetched (the pass's paged-blocks).
  bool pagedBlocks = true;
};

/// The vector width of a tile's layout (vectorLayoutProblem has checked
/// it before the op is rewritten).
int64_t widthOf(Value tile) { return getVectorLayout(tile).getWidth(); }

/// The few-rows bound of the program a tile op belongs to: its row tiles'
/// `few_rows`.
int64_t fewRowsOf(Value rowTile) {
  return getVectorLayout(rowTile).getFewRows();
}

//===----------------------------------------------------------------------===//
// tile.load_q, tile.store: once per program, element by element
//===----------------------------------------------------------------------===//

/// The few-rows form where the program has at most `bound` rows (the
/// `few_rows` of its row tiles' layout), the column form elsewhere (a test
/// of the row count, the same in every op of a program); the column form
/// only when `bound` is 0.
void byRowCount(Emitter &e, int64_t bound, Value rows,
                function_ref<void()> fewRows, function_ref<void()> column) {
  if (bound == 0)
    return column();
  e.ifElse(few_rows::isFewRows(e, rows, bound), fewRows, column);
}

LogicalResult lowerLoadQ(TileLoadQOp op, PatternRewriter &rewriter,
                         const Lowering &) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  byRowCount(
      e, fewRowsOf(op.getQTile()), op.getRows(),
      [&] { few_rows::emitLoadQ(e, op); },
      [&] { emitLoadQ(e, op, TileRef::transposedOf(b, op.getQTile())); });
  rewriter.eraseOp(op);
  return success();
}

LogicalResult lowerStore(TileStoreOp op, PatternRewriter &rewriter) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  emitStore(e, op, TileRef::rowMajor(op.getAcc()));
  rewriter.eraseOp(op);
  return success();
}

//===----------------------------------------------------------------------===//
// Key/value rows, and the packing of a paged block
//===----------------------------------------------------------------------===//

/// Where a lowering reads the key/value rows of its block: the op's cache
/// (through the block table when paged), or a contiguous copy of the
/// block's rows (packPagedBlock).
struct KvRows {
  Value cache, blockTable, batch, head, start;
  /// `[bn, D]`: row c holds key start + c (null: read the cache).
  Value packed;

  /// The indices of the block's row `c` with the element index left to
  /// fill (the last).
  SmallVector<Value, 4> row(Emitter &e, Value c) const {
    if (packed)
      return {c, e.idx(0)};
    return cacheRow(e, c);
  }
  /// The cache's indices of the block's row `c` (an FP8 cache's scales are
  /// indexed by them, also when the rows are read from a packed copy).
  SmallVector<Value, 4> cacheRow(Emitter &e, Value c) const {
    return kvRow(e, cache, blockTable, batch, head, e.add(start, c));
  }
  Value memref() const { return packed ? packed : cache; }
};

/// A scratch buffer of `type` next to `like`'s allocation (the tile pass's
/// per-program allocas), or at the function's entry: never inside the KV
/// loop, whose lowering restores no stack.
Value scratchNear(ImplicitLocOpBuilder &b, Value like, MemRefType type) {
  OpBuilder::InsertionGuard guard(b);
  if (auto alloca = like.getDefiningOp<memref::AllocaOp>()) {
    b.setInsertionPointAfter(alloca);
  } else {
    Operation *scope = b.getInsertionBlock()->getParentOp();
    while (scope && !isa<FunctionOpInterface>(scope))
      scope = scope->getParentOp();
    Region &body = cast<FunctionOpInterface>(scope).getFunctionBody();
    b.setInsertionPointToStart(&body.front());
  }
  return memref::AllocaOp::create(b, type);
}

/// For each row `c < cols` of a paged block (key `start + c`, in order):
/// body(page, row in the page, c), with one block-table lookup per page the
/// block touches; nothing when `cols` is 0.
void forEachPagedRow(Emitter &e, const KvRows &rows, Value cols,
                     function_ref<void(Value, Value, Value)> body) {
  Value pageSize = e.dimOf(rows.cache, 1);
  Value end = e.add(rows.start, cols);
  e.when(e.cmpi(arith::CmpIPredicate::sgt, cols, e.idx(0)), [&] {
    Value firstSlot = e.b.createOrFold<arith::DivUIOp>(rows.start, pageSize);
    Value endSlot = e.b.createOrFold<arith::CeilDivUIOp>(end, pageSize);
    e.loop(firstSlot, endSlot, [&](Value slot) {
      Value page = e.loadIndex(rows.blockTable, {rows.batch, slot});
      Value base = e.b.createOrFold<arith::MulIOp>(slot, pageSize);
      Value lo = arith::MaxUIOp::create(e.b, base, rows.start);
      Value hi = arith::MinUIOp::create(e.b, e.add(base, pageSize), end);
      e.loop(lo, hi, [&](Value j) {
        Value inPage = e.sub(j, base);
        body(page, inPage, e.sub(j, rows.start));
      });
    });
  });
}

/// A paged block's rows as a contiguous run. In a paged cache
/// `[num_pages, page_size, Hkv, D]` consecutive keys of one head lie
/// Hkv * D elements apart (4 KiB for 8 f32 heads of 128): a loop that
/// re-reads the block's rows (P.V, once per row tile) finds them in a few
/// cache sets and out of the prefetchers' reach. Copying rows
/// `[start, start + cols)` once into `[bn, D]` scratch (in the cache's
/// element type: the copy is exact) makes every later read a contiguous
/// one, as from a contiguous cache. One block-table lookup per page the
/// block touches, the page's rows copied as vectors; only the rows the op
/// reads are read (none past kv_len, where table entries may be -1).
/// Returns the op's own rows when the block is not paged or its row size
/// is not static.
KvRows packPagedBlock(VectorEmitter &e, KvRows rows, Value cols, int64_t bn,
                      Value near) {
  if (!rows.blockTable)
    return rows;
  auto cacheType = cast<MemRefType>(rows.cache.getType());
  int64_t d = cacheType.getDimSize(3);
  if (ShapedType::isDynamic(d))
    return rows;
  Type elt = cacheType.getElementType();
  Value packed = scratchNear(e.b, near, MemRefType::get({bn, d}, elt));
  // The widest vector of at most 16 lanes that divides a row.
  int64_t lanes = 16;
  while (d % lanes)
    lanes /= 2;
  auto vectorType = VectorType::get({lanes}, elt);
  forEachPagedRow(e, rows, cols, [&](Value page, Value inPage, Value c) {
    for (int64_t x = 0; x < d; x += lanes) {
      Value v =
          vector::LoadOp::create(e.b, vectorType, rows.cache,
                                 ValueRange{page, inPage, rows.head, e.idx(x)});
      vector::StoreOp::create(e.b, v, packed, ValueRange{c, e.idx(x)});
    }
  });
  rows.packed = packed;
  return rows;
}

//===----------------------------------------------------------------------===//
// tile.qk
//===----------------------------------------------------------------------===//

/// scores^T[c0 + k, r0 + v*W ...] for k < keys, v < rowVecs: the dot
/// products over d in order, in registers, then scaled (and softcapped).
void emitScoreTile(VectorEmitter &e, TileQKOp op, const KvRows &keyRows,
                   Value qT, Value sT, Value c0, int64_t keys, Value r0,
                   int64_t rowVecs) {
  auto qType = cast<MemRefType>(op.getQTile().getType());
  int64_t d = qType.getDimSize(1);
  SmallVector<SmallVector<Value, 4>> rows;
  for (int64_t k = 0; k < keys; ++k)
    rows.push_back(keyRows.row(e, e.add(c0, e.idx(k))));
  // An FP8 cache's scales are indexed like the cache's rows (a packed
  // block's rows are not).
  SmallVector<Value> scales;
  for (int64_t k = 0; k < keys; ++k)
    scales.push_back(
        kvRowScale(e, op.getKvScale(), op.getKvHead(),
                   op.getKvScale() ? keyRows.cacheRow(e, e.add(c0, e.idx(k)))
                                   : SmallVector<Value, 4>()));
  Value zero = e.splat(0.0);
  SmallVector<Value> inits(keys * rowVecs, zero);
  SmallVector<Value> acc = e.carry(
      e.idx(0), e.idx(d), e.idx(1), inits, [&](Value x, ValueRange iter) {
        SmallVector<Value> q;
        for (int64_t v = 0; v < rowVecs; ++v)
          q.push_back(e.vload(qT, {x, e.add(r0, e.idx(v * e.width))}));
        SmallVector<Value> next(iter);
        for (int64_t k = 0; k < keys; ++k) {
          Value kx = kvElement(e, keyRows.memref(), rows[k], x);
          if (scales[k])
            kx = e.mulf(kx, scales[k]);
          Value kb = e.splat(kx);
          for (int64_t v = 0; v < rowVecs; ++v)
            next[k * rowVecs + v] = e.fma(q[v], kb, next[k * rowVecs + v]);
        }
        return next;
      });
  double scale = op.getScale().convertToDouble();
  std::optional<APFloat> softcap = op.getSoftcap();
  for (int64_t k = 0; k < keys; ++k)
    for (int64_t v = 0; v < rowVecs; ++v) {
      Value s = acc[k * rowVecs + v];
      if (!softcap) {
        s = e.mulf(s, e.splat(scale));
      } else {
        double cap = softcap->convertToDouble();
        s = e.mulf(e.splat(cap),
                   math::TanhOp::create(e.b, e.mulf(s, e.splat(scale / cap))));
      }
      e.vstore(s, sT, {e.add(c0, e.idx(k)), e.add(r0, e.idx(v * e.width))});
    }
}

/// The rows of a row-vector loop over a program's `rows`: rounded up to
/// `step` (the tile's rows are a multiple of it).
Value roundUpRows(Emitter &e, Value rows, int64_t step) {
  Value n = e.b.createOrFold<arith::CeilDivUIOp>(rows, e.idx(step));
  return e.b.createOrFold<arith::MulIOp>(n, e.idx(step));
}

/// tile.qk in the column form: outer products over the transposed tiles.
void emitColumnQK(TileQKOp op, ImplicitLocOpBuilder &b, const Lowering &l) {
  VectorEmitter e(b, widthOf(op.getScores()));
  Value qT = TileRef::transposedOf(b, op.getQTile()).view;
  Value sT = TileRef::transposedOf(b, op.getScores()).view;
  auto sType = cast<MemRefType>(op.getScores().getType());
  int64_t bm = sType.getDimSize(0), bn = sType.getDimSize(1);
  int64_t rowVecs = bm / e.width;
  int64_t tileVecs = rowVectorsPerTile(rowVecs);
  int64_t keys = std::max<int64_t>(1, e.accumulators / tileVecs);

  Value cols = op.getCols();
  // Each row group reads the whole block's keys: with more than one group,
  // a paged block is read as a contiguous copy.
  KvRows keyRows{op.getKey(),    op.getBlockTable(), op.getBatch(),
                 op.getKvHead(), op.getStart(),      Value()};
  if (l.pagedBlocks && bm > tileVecs * e.width)
    keyRows = packPagedBlock(e, keyRows, cols, bn, op.getScores());
  Value mainCols = b.createOrFold<arith::MulIOp>(
      b.createOrFold<arith::DivUIOp>(cols, e.idx(keys)), e.idx(keys));
  Value groupStep = e.idx(tileVecs * e.width);
  Value rowEnd = roundUpRows(e, op.getRows(), tileVecs * e.width);
  e.loopStep(e.idx(0), rowEnd, groupStep, [&](Value r0) {
    e.loopStep(e.idx(0), mainCols, e.idx(keys), [&](Value c0) {
      emitScoreTile(e, op, keyRows, qT, sT, c0, keys, r0, tileVecs);
    });
    // The remaining cols % keys keys in tiles of 4, 2, 1 (below keys): a
    // tile of one key would leave the FMAs latency-bound.
    Value c = mainCols;
    for (int64_t size = llvm::PowerOf2Ceil(keys) / 2; size >= 1; size /= 2) {
      if (size >= keys)
        continue;
      Value fits =
          e.cmpi(arith::CmpIPredicate::ule, e.add(c, e.idx(size)), cols);
      auto ifOp = scf::IfOp::create(b, TypeRange{b.getIndexType()}, fits,
                                    /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(ifOp.thenBlock());
        emitScoreTile(e, op, keyRows, qT, sT, c, size, r0, tileVecs);
        scf::YieldOp::create(b, ValueRange{e.add(c, e.idx(size))});
        b.setInsertionPointToStart(ifOp.elseBlock());
        scf::YieldOp::create(b, ValueRange{c});
      }
      c = ifOp.getResult(0);
    }
  });
  // Columns past the end of the keys never contribute.
  Value negInf = e.splat(e.negInf());
  Value vectorEnd = roundUpRows(e, op.getRows(), e.width);
  e.loop(cols, e.idx(bn), [&](Value c) {
    e.loopStep(e.idx(0), vectorEnd, e.idx(e.width), [&](Value r0) {
      e.vstore(negInf, sT, {c, r0});
    });
  });
}

LogicalResult lowerQK(TileQKOp op, PatternRewriter &rewriter,
                      const Lowering &l) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  byRowCount(
      e, fewRowsOf(op.getScores()), op.getRows(),
      [&] { few_rows::emitQK(e, op); }, [&] { emitColumnQK(op, b, l); });
  rewriter.eraseOp(op);
  return success();
}

//===----------------------------------------------------------------------===//
// tile.mask
//===----------------------------------------------------------------------===//

/// The offset form without a general mask or explicit positions: row
/// positions are an arithmetic sequence (or, packed, a step function), so
/// the whole rule (and an ALiBi bias) is vector arithmetic.
bool isVectorMask(TileMaskOp op) {
  return !op.getQPos() && !op.getKPos() && !op.getMask() &&
         !op.getTreeParents();
}

/// tile.mask in the column form, on the transposed scores.
void emitColumnMask(TileMaskOp op, ImplicitLocOpBuilder &b, const Lowering &l) {
  VectorEmitter e(b, widthOf(op.getScores()));
  Value sT = TileRef::transposedOf(b, op.getScores()).view;

  if (!isVectorMask(op)) {
    // Element by element, as the scalar lowering, on the transposed tile.
    e.loop(e.idx(0), op.getRows(), [&](Value r) {
      Value qp = emitQueryPosition(e, op, r);
      e.loop(e.idx(0), op.getCols(), [&](Value c) {
        Value s = e.load(sT, {c, r});
        e.store(emitMaskedScore(e, op, r, qp, c, 1.0, s), sT, {c, r});
      });
    });
    return;
  }

  using P = arith::CmpIPredicate;
  Value negInf = e.splat(e.negInf());
  Value rowEnd = roundUpRows(e, op.getRows(), e.width);
  e.loopStep(e.idx(0), rowEnd, e.idx(e.width), [&](Value r0) {
    // Positions of rows r0 .. r0 + W (offset form; none without causal or
    // window, where only kv_len and key_valid apply).
    Value qp;
    if (op.getQBase()) {
      Value t = arith::AddIOp::create(b, e.splat(e.i64(r0)), e.iota());
      if (std::optional<int64_t> g = op.getGroup(); g && *g > 1) {
        t = arith::AddIOp::create(b, t, e.splat(e.i64(op.getQStart())));
        t = arith::DivUIOp::create(
            b, t, e.splat(arith::ConstantIntOp::create(b, b.getI64Type(), *g)));
      }
      qp = arith::AddIOp::create(b, e.splat(e.i64(op.getQBase())), t);
    }
    // ALiBi: the negated slope of each row's query head (packed: lane l is
    // head head + (q_start + r0 + l) % G), once per row vector.
    Value negSlopes;
    if (Value slopes = op.getAlibiSlopes()) {
      std::optional<int64_t> g = op.getGroup();
      if (!g || *g == 1) {
        negSlopes = e.splat(
            arith::NegFOp::create(b, e.load(slopes, op.getHead())).getResult());
      } else {
        negSlopes = e.splat(0.0);
        for (int64_t lane = 0; lane < e.width; ++lane) {
          Value t = e.add(e.add(op.getQStart(), r0), e.idx(lane));
          Value head =
              e.add(op.getHead(), b.createOrFold<arith::RemUIOp>(t, e.idx(*g)));
          Value slope = arith::NegFOp::create(b, e.load(slopes, head));
          negSlopes = vector::InsertOp::create(b, slope, negSlopes, lane);
        }
      }
    }
    e.loop(e.idx(0), op.getCols(), [&](Value c) {
      Value j = e.add(op.getKStart(), c);
      Value keyOk = e.cmpi(P::slt, j, op.getKvLen());
      if (Value valid = op.getKeyValid())
        keyOk = e.andi(keyOk, e.load(valid, {op.getBatch(), j}));
      Value allowed = e.splat(keyOk);
      if (op.getCausal() || op.getWindow() || op.getWindowRight()) {
        Value kp = e.splat(e.i64(e.add(op.getKBase(), c)));
        if (op.getCausal())
          allowed = e.andi(allowed, e.cmpi(P::sle, kp, qp));
        if (std::optional<int64_t> w = op.getWindow())
          allowed =
              e.andi(allowed, e.cmpi(P::slt, arith::SubIOp::create(b, qp, kp),
                                     e.splat(arith::ConstantIntOp::create(
                                         b, b.getI64Type(), *w))));
        if (std::optional<int64_t> right = op.getWindowRight())
          allowed =
              e.andi(allowed, e.cmpi(P::sle, arith::SubIOp::create(b, kp, qp),
                                     e.splat(arith::ConstantIntOp::create(
                                         b, b.getI64Type(), *right))));
      }
      Value s = e.vload(sT, {c, r0});
      if (negSlopes) {
        // -slope * (|qp - kp| - d), relative to the batch's reference
        // distance d (tile.mask): exact in integers, small, so exact in f32.
        Value kp = e.splat(e.i64(e.add(op.getKBase(), c)));
        Value diff = arith::SubIOp::create(b, qp, kp);
        Value negated = arith::SubIOp::create(b, kp, qp);
        Value distance = arith::MaxSIOp::create(b, diff, negated);
        Value relative = arith::SubIOp::create(
            b, distance, e.splat(e.i64(op.getAlibiRef())));
        Value f = arith::SIToFPOp::create(b, e.vf32(), relative);
        s = e.fma(negSlopes, f, s);
      }
      e.vstore(arith::SelectOp::create(b, allowed, s, negInf), sT, {c, r0});
    });
  });
}

LogicalResult lowerMask(TileMaskOp op, PatternRewriter &rewriter,
                        const Lowering &l) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  byRowCount(
      e, fewRowsOf(op.getScores()), op.getRows(),
      [&] { few_rows::emitMask(e, op); }, [&] { emitColumnMask(op, b, l); });
  rewriter.eraseOp(op);
  return success();
}

//===----------------------------------------------------------------------===//
// tile.softmax_update
//===----------------------------------------------------------------------===//

/// acc[r0 + i, x0 + k*V ...] = alpha[r0 + i] * acc[...] + sum_c p^T[c, r0 + i]
/// * value[c, x0 + k*V ...] for i < rows, k < chunks (V = the value vector's
/// width), in registers across the keys: one value vector load per chunk
/// and key, one broadcast probability per row and key. With `skipZero`, a
/// row whose p is 0 for a key skips it (the FMA is masked): the value of a
/// forbidden key may be NaN or infinite. Full blocks (`all_allowed`) have
/// no forbidden key and multiply every value.
void emitValueTile(VectorEmitter &e, TileSoftmaxOp op, const KvRows &values,
                   const TileRef &pT, Value alpha, Value r0, int64_t rows,
                   Value x0, int64_t chunks, bool skipZero) {
  Value acc = op.getAcc();
  auto at = [&](int64_t i, int64_t k) {
    return SmallVector<Value>{e.add(r0, e.idx(i)),
                              e.add(x0, e.idx(k * e.width))};
  };
  SmallVector<Value> inits;
  for (int64_t i = 0; i < rows; ++i) {
    Value a = e.splat(e.load(alpha, e.add(r0, e.idx(i))));
    for (int64_t k = 0; k < chunks; ++k)
      inits.push_back(e.mulf(a, e.vload(acc, at(i, k))));
  }
  Value zero = e.splat(0.0);
  Type eltType = cast<MemRefType>(op.getValue().getType()).getElementType();
  SmallVector<Value> sums = e.carry(
      e.idx(0), op.getCols(), e.idx(1), inits, [&](Value c, ValueRange iter) {
        SmallVector<Value, 4> row = values.row(e, c);
        SmallVector<Value> v;
        Value scale =
            kvRowScale(e, op.getKvScale(), op.getKvHead(),
                       op.getKvScale() ? values.cacheRow(e, c)
                                       : SmallVector<Value, 4>());
        for (int64_t k = 0; k < chunks; ++k) {
          row.back() = e.add(x0, e.idx(k * e.width));
          Value x = vector::LoadOp::create(
              e.b, VectorType::get({e.width}, eltType), values.memref(), row);
          x = castKvToF32(e.b, e.b.getLoc(), x);
          if (scale)
            x = e.mulf(x, e.splat(scale));
          v.push_back(x);
        }
        SmallVector<Value> next(iter);
        for (int64_t i = 0; i < rows; ++i) {
          Value p = e.splat(pT.load(e, e.add(r0, e.idx(i)), c));
          Value contributes =
              skipZero ? arith::CmpFOp::create(e.b, arith::CmpFPredicate::UNE,
                                               p, zero)
                       : Value();
          for (int64_t k = 0; k < chunks; ++k) {
            Value &a = next[i * chunks + k];
            Value sum = e.fma(p, v[k], a);
            a = skipZero ? arith::SelectOp::create(e.b, contributes, sum, a)
                         : sum;
          }
        }
        return next;
      });
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < chunks; ++k)
      e.vstore(sums[i * chunks + k], acc, at(i, k));
}

/// A scratch row of `like`'s type next to `like`'s allocation.
Value scratchRowLike(ImplicitLocOpBuilder &b, Value like) {
  return scratchNear(b, like, cast<MemRefType>(like.getType()));
}

/// The statistics of tile.softmax_update in the column form, W rows at a
/// time (one lane per row); p replaces the scores, each row's rescale factor
/// goes to `alphas`.
void emitColumnSoftmaxStats(TileSoftmaxOp op, ImplicitLocOpBuilder &b,
                            const Lowering &l, Value alphas) {
  VectorEmitter e(b, widthOf(op.getScores()));
  Value sT = TileRef::transposedOf(b, op.getScores()).view;
  Value cols = op.getCols();
  Value negInf = e.splat(e.negInf()), zero = e.splat(0.0), one = e.splat(1.0);
  Value rowEnd = roundUpRows(e, op.getRows(), e.width);
  e.loopStep(e.idx(0), rowEnd, e.idx(e.width), [&](Value r0) {
    Value oldMax = e.vload(op.getMax(), r0);
    // NaN-propagating maximum: a NaN score poisons its row.
    // Four interleaved maxima: the NaN-aware maximum is several
    // instructions long, and one chain would be latency-bound. (The maximum
    // does not depend on the order.)
    auto max = [&](Value x, Value y) -> Value {
      return arith::MaximumFOp::create(b, x, y);
    };
    constexpr int64_t kChains = 4;
    Value mainCols = b.createOrFold<arith::MulIOp>(
        b.createOrFold<arith::DivUIOp>(cols, e.idx(kChains)), e.idx(kChains));
    SmallVector<Value> chains = e.carry(
        e.idx(0), mainCols, e.idx(kChains), SmallVector<Value>(kChains, negInf),
        [&](Value c, ValueRange m) {
          SmallVector<Value> next;
          for (int64_t k = 0; k < kChains; ++k)
            next.push_back(max(m[k], e.vload(sT, {e.add(c, e.idx(k)), r0})));
          return next;
        });
    Value blockMax =
        e.carry(mainCols, cols, e.idx(1),
                {max(max(chains[0], chains[1]), max(chains[2], chains[3]))},
                [&](Value c, ValueRange m) {
                  return SmallVector<Value>{max(m[0], e.vload(sT, {c, r0}))};
                })[0];
    Value newMax = arith::MaximumFOp::create(b, oldMax, blockMax);
    // Rows with no allowed key yet keep their state: alpha = 1, p = 0.
    Value anyAllowed =
        arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, newMax, negInf);
    Value alpha = arith::SelectOp::create(
        b, anyAllowed,
        math::ExpOp::create(b, arith::SubFOp::create(b, oldMax, newMax)), one);
    Value blockSum =
        e.carry(e.idx(0), cols, e.idx(1), {zero}, [&](Value c, ValueRange sum) {
          Value p = math::ExpOp::create(
              b, arith::SubFOp::create(b, e.vload(sT, {c, r0}), newMax));
          p = arith::SelectOp::create(b, anyAllowed, p, zero);
          e.vstore(p, sT, {c, r0});
          return SmallVector<Value>{e.addf(sum[0], p, true)};
        })[0];
    e.vstore(e.addf(e.mulf(alpha, e.vload(op.getSum(), r0)), blockSum),
             op.getSum(), r0);
    e.vstore(arith::SelectOp::create(b, anyAllowed, newMax, oldMax),
             op.getMax(), r0);
    e.vstore(alpha, alphas, r0);
  });
}

/// P.V of tile.softmax_update from p in `pT`'s layout, with each row's
/// rescale factor in `alphas`.
void emitValueBlock(TileSoftmaxOp op, ImplicitLocOpBuilder &b,
                    const Lowering &l, const TileRef &pT, Value alphas,
                    bool columnForm) {
  VectorEmitter e(b, widthOf(op.getScores()));
  int64_t dv = cast<MemRefType>(op.getAcc().getType()).getDimSize(1);
  int64_t bn = cast<MemRefType>(op.getScores().getType()).getDimSize(1);
  // P.V on the row-major accumulator, vectors over the value dimension
  // (full vectors however few rows the tile has, e.g. decode), register-
  // tiled over rows x value chunks, only over the op's rows.
  VectorEmitter ve(b, widthOf(op.getAcc()));
  const int64_t chunks = dv / ve.width;
  const int64_t tileRows = std::min<int64_t>(
      4, std::max<int64_t>(1, ve.accumulators / std::min<int64_t>(chunks, 6)));
  const int64_t tileChunks =
      std::max<int64_t>(1, std::min(chunks, ve.accumulators / tileRows));
  Value rows = op.getRows();
  Value mainRows = b.createOrFold<arith::MulIOp>(
      b.createOrFold<arith::DivUIOp>(rows, e.idx(tileRows)), e.idx(tileRows));
  KvRows values{op.getValue(),  op.getBlockTable(), op.getBatch(),
                op.getKvHead(), op.getStart(),      Value()};
  auto valueTiles = [&](Value r0, int64_t n, bool skipZero) {
    const int64_t mainChunks = chunks / tileChunks * tileChunks;
    ve.loopStep(ve.idx(0), ve.idx(mainChunks * ve.width),
                ve.idx(tileChunks * ve.width), [&](Value x0) {
                  emitValueTile(ve, op, values, pT, alphas, r0, n, x0,
                                tileChunks, skipZero);
                });
    if (chunks > mainChunks)
      emitValueTile(ve, op, values, pT, alphas, r0, n,
                    ve.idx(mainChunks * ve.width), chunks - mainChunks,
                    skipZero);
  };
  auto valueBlock = [&](bool skipZero) {
    e.loopStep(e.idx(0), mainRows, e.idx(tileRows),
               [&](Value r0) { valueTiles(r0, tileRows, skipZero); });
    e.loop(mainRows, rows, [&](Value r) { valueTiles(r, 1, skipZero); });
  };
  // A full block has no forbidden key: no p != 0 test (one compare per row
  // and key, on the FMA ports).
  auto block = [&] {
    if (Value full = op.getAllAllowed())
      e.ifElse(
          full, [&] { valueBlock(/*skipZero=*/false); },
          [&] { valueBlock(/*skipZero=*/true); });
    else
      valueBlock(/*skipZero=*/true);
  };
  // Each tile of rows reads the whole block's values: with more than one,
  // a paged block is read from a contiguous copy (the column form always
  // has more rows than a tile).
  if (!op.getBlockTable() || !l.pagedBlocks)
    return block();
  auto packed = [&] {
    KvRows direct = values;
    values = packPagedBlock(e, values, op.getCols(), bn, op.getScores());
    block();
    values = direct;
  };
  if (columnForm)
    return packed();
  e.ifElse(e.cmpi(arith::CmpIPredicate::ugt, rows, e.idx(tileRows)), packed,
           block);
}

LogicalResult lowerSoftmax(TileSoftmaxOp op, PatternRewriter &rewriter,
                           const Lowering &l) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  // Each row's rescale factor, for P.V.
  Value alphas = scratchRowLike(b, op.getMax());
  byRowCount(
      e, fewRowsOf(op.getScores()), op.getRows(),
      [&] {
        few_rows::emitSoftmaxStats(e, op, alphas);
        emitValueBlock(op, b, l, TileRef::rowMajor(op.getScores()), alphas,
                       /*columnForm=*/false);
      },
      [&] {
        emitColumnSoftmaxStats(op, b, l, alphas);
        emitValueBlock(op, b, l, TileRef::transposedOf(b, op.getScores()),
                       alphas, /*columnForm=*/true);
      });
  rewriter.eraseOp(op);
  return success();
}

//===----------------------------------------------------------------------===//
// tile.prefetch
//===----------------------------------------------------------------------===//

/// The next block of a paged cache: each 64-byte line of its rows is
/// prefetched (one block-table lookup per page), since the hardware
/// prefetchers do not follow rows Hkv * D elements apart, each in another
/// 4 KiB page for 128-element f32 rows of 8 heads. A contiguous cache is
/// one sequential run per head, which they do follow: there, as in the
/// scalar lowering, the op is dropped.
LogicalResult lowerPrefetch(TilePrefetchOp op, PatternRewriter &rewriter,
                            const Lowering &l) {
  auto type = cast<MemRefType>(op.getKey().getType());
  if (l.pagedBlocks && op.getBlockTable() &&
      !ShapedType::isDynamic(type.getDimSize(3))) {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    Emitter e{b};
    int64_t d = type.getDimSize(3);
    int64_t perLine = std::max<int64_t>(
        1, 64 / std::max<int64_t>(1, type.getElementTypeBitWidth() / 8));
    KvRows rows{op.getKey(),    op.getBlockTable(), op.getBatch(),
                op.getKvHead(), op.getStart(),      Value()};
    forEachPagedRow(
        e, rows, op.getCols(), [&](Value page, Value inPage, Value) {
          for (int64_t x = 0; x < d; x += perLine)
            memref::PrefetchOp::create(
                b, op.getKey(),
                ValueRange{page, inPage, op.getKvHead(), e.idx(x)},
                /*isWrite=*/false, /*localityHint=*/3, /*isDataCache=*/true);
        });
  }
  rewriter.eraseOp(op);
  return success();
}

/// What keeps `op`'s tiles from being lowered in their layouts (empty when
/// nothing does): static identity tiles, each with a #kvattn.vector_layout
/// along the axis the op uses it, whose width divides that extent, the row
/// tiles sharing one layout.
std::string vectorLayoutProblem(Operation *op) {
  std::string problem;
  llvm::raw_string_ostream os(problem);
  VectorLayoutAttr rowLayout;
  StringRef rowRole;
  for (const VectorTileUse &use : vectorTileUses(op)) {
    auto type = cast<MemRefType>(use.tile.getType());
    if (!type.hasStaticShape() || !type.getLayout().isIdentity()) {
      os << "kvattn-lower-tile-to-vectors needs tiles of static shape and "
            "identity layout, got '"
         << type << "'";
      return problem;
    }
    VectorLayoutAttr layout = getVectorLayout(use.tile);
    if (!layout) {
      os << "kvattn-lower-tile-to-vectors: the " << use.role
         << " tile has no #kvattn.vector_layout (run "
            "-kvattn-assign-vector-layouts before the lowering)";
      return problem;
    }
    if (layout.getAxis() != use.axis) {
      os << "kvattn-lower-tile-to-vectors vectorises the " << use.role
         << " tile along its " << stringifyVectorAxis(use.axis)
         << ", its layout is " << layout;
      return problem;
    }
    int64_t extent = vectorAxisExtent(use.tile, use.axis);
    if (extent % layout.getWidth()) {
      os << "kvattn-lower-tile-to-vectors: the " << use.role
         << " tile's layout " << layout << " does not divide its " << extent
         << " " << stringifyVectorAxis(use.axis);
      return problem;
    }
    if (use.axis != VectorAxis::rows)
      continue;
    if (!rowLayout) {
      rowLayout = layout;
      rowRole = use.role;
    } else if (layout != rowLayout) {
      os << "kvattn-lower-tile-to-vectors: the " << rowRole << " and "
         << use.role << " tiles hold the same rows in one layout, got "
         << rowLayout << " and " << layout;
      return problem;
    }
  }
  return problem;
}

/// A lowering with the pass's options.
template <typename OpTy,
          LogicalResult (*lower)(OpTy, PatternRewriter &, const Lowering &)>
struct VectorPattern : OpRewritePattern<OpTy> {
  VectorPattern(MLIRContext *context, Lowering lowering,
                PatternBenefit benefit = 1)
      : OpRewritePattern<OpTy>(context, benefit), lowering(lowering) {}
  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    // (The pass refuses such ops by name first; an embedder applying the
    // patterns alone gets them left in place.)
    std::string problem = vectorLayoutProblem(op);
    if (!problem.empty())
      return rewriter.notifyMatchFailure(op, problem);
    return lower(op, rewriter, lowering);
  }
  Lowering lowering;
};

struct LowerTileToVectorsPass
    : mlir::kvattn::impl::LowerTileToVectorsPassBase<LowerTileToVectorsPass> {
  using Base::Base;
  void runOnOperation() override {
    if (failed(
            checkF32QueryTiles(getOperation(), "kvattn-lower-tile-to-vectors")))
      return signalPassFailure();
    // The transposed views need static identity-layout tiles, which is
    // what -kvattn-tile allocates, and every op's tiles must agree on the
    // layouts they are lowered in; anything else is refused before a
    // single op is rewritten (a mix of layouts would be silent garbage).
    WalkResult walk = getOperation()->walk([&](Operation *op) {
      // tile.init's lowering is the scalar one, whatever the layout.
      if (isa<TileInitOp>(op))
        return WalkResult::advance();
      // P.V loads value rows as vectors: their elements must be adjacent.
      if (auto softmax = dyn_cast<TileSoftmaxOp>(op)) {
        auto type = cast<MemRefType>(softmax.getValue().getType());
        SmallVector<int64_t> strides;
        int64_t offset;
        if (failed(type.getStridesAndOffset(strides, offset)) ||
            strides.back() != 1) {
          op->emitOpError() << "kvattn-lower-tile-to-vectors needs value rows "
                               "with unit stride, got "
                            << type;
          return WalkResult::interrupt();
        }
      }
      if (std::string problem = vectorLayoutProblem(op); !problem.empty()) {
        op->emitOpError() << problem;
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    RewritePatternSet patterns(&getContext());
    populateLowerTileToVectorsPatterns(patterns, pagedBlocks);
    if (failed(applyLoopLoweringPatterns(getOperation(), std::move(patterns))))
      return signalPassFailure();

    // exp and tanh on vectors: polynomials, not one libm call per lane
    // (scalar math keeps libm's).
    auto selected = [](StringRef name) {
      name.consume_front("math.");
      return name == "exp" || name == "tanh";
    };
    SmallVector<Operation *> vectorMath;
    getOperation()->walk([&](Operation *op) {
      if (isa<math::ExpOp, math::TanhOp>(op) &&
          isa<VectorType>(op->getResult(0).getType()))
        vectorMath.push_back(op);
    });
    RewritePatternSet math(&getContext());
    populateMathPolynomialApproximationPatterns(math, selected);
    GreedyRewriteConfig config;
    config.setStrictness(GreedyRewriteStrictness::ExistingAndNewOps);
    if (failed(applyOpPatternsGreedily(vectorMath, std::move(math), config)))
      return signalPassFailure();
  }
};

} // namespace

void mlir::kvattn::populateLowerTileToVectorsPatterns(
    RewritePatternSet &patterns, bool pagedBlocks) {
  populateLowerTileStateToLoopsPatterns(patterns);
  patterns.add(lowerStore);
  // Before the scalar lowering's (which drops the op).
  patterns.add<VectorPattern<TilePrefetchOp, lowerPrefetch>>(
      patterns.getContext(), Lowering{pagedBlocks},
      /*benefit=*/2);
  patterns.add<VectorPattern<TileLoadQOp, lowerLoadQ>,
               VectorPattern<TileQKOp, lowerQK>,
               VectorPattern<TileMaskOp, lowerMask>,
               VectorPattern<TileSoftmaxOp, lowerSoftmax>>(
      patterns.getContext(), Lowering{pagedBlocks});
}
