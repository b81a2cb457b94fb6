//===- TileToLoops.cpp - the CPU lowering of the tile ops -----------------===//
//
// Each kvattn.tile.* op becomes the loop nest its ODS description states.
// Scores, the running max/sum and the accumulator are f32; Q, K, V are
// extended to f32 when loaded, `out` is rounded to its element type when
// stored. The innermost loops run over the head dimension, unit stride;
// dot products carry `reassoc` so that LLVM may vectorise them.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"
#include "passes/Conversion/TileToCPU/LoopEmitter.h"
#include "passes/RotaryEmbedding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <limits>

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_LOWERTILETOLOOPSPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

namespace {

LogicalResult lowerInit(TileInitOp op, PatternRewriter &rewriter) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  Value rows = e.tileDim(op.getMax(), 0);
  Value cols = e.tileDim(op.getAcc(), 1);
  e.loop(e.idx(0), rows, [&](Value r) {
    e.store(e.negInf(), op.getMax(), r);
    e.store(e.f32(0), op.getSum(), r);
    e.loop(e.idx(0), cols, [&](Value d) {
      e.store(e.f32(0), op.getAcc(), {r, d});
    });
  });
  rewriter.eraseOp(op);
  return success();
}

LogicalResult lowerLoadQ(TileLoadQOp op, PatternRewriter &rewriter) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  emitLoadQ(e, op, TileRef::rowMajor(op.getQTile()));
  rewriter.eraseOp(op);
  return success();
}

LogicalResult lowerQK(TileQKOp op, PatternRewriter &rewriter) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  Value scores = op.getScores();
  Value bn = e.tileDim(scores, 1);
  e.loop(e.idx(0), op.getRows(), [&](Value r) {
    e.loop(e.idx(0), op.getCols(), [&](Value c) {
      Value j = e.add(op.getStart(), c);
      Value s = emitScore(e, op, r, [&](Value x) {
        return e.loadKvF32(op.getKey(), op.getKvScale(), op.getKvHead(),
                           e.kvIndices(op.getKey(), op.getBlockTable(),
                                       op.getBatch(), op.getKvHead(), j, x));
      });
      e.store(s, scores, {r, c});
    });
    // Columns past the end of the keys never contribute.
    e.loop(op.getCols(), bn, [&](Value c) {
      e.store(e.negInf(), scores, {r, c});
    });
  });
  rewriter.eraseOp(op);
  return success();
}

LogicalResult lowerMask(TileMaskOp op, PatternRewriter &rewriter) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  e.loop(e.idx(0), op.getRows(), [&](Value r) {
    Value qp = emitQueryPosition(e, op, r);
    e.loop(e.idx(0), op.getCols(), [&](Value c) {
      e.store(emitMaskedScore(e, op, r, qp, c), op.getScores(), {r, c});
    });
  });
  rewriter.eraseOp(op);
  return success();
}

LogicalResult lowerSoftmax(TileSoftmaxOp op, PatternRewriter &rewriter) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  Value scores = op.getScores(), acc = op.getAcc();
  Value dv = e.tileDim(acc, 1);
  e.loop(e.idx(0), op.getRows(), [&](Value r) {
    Value oldMax = e.load(op.getMax(), r);
    // NaN-propagating maximum: a NaN score poisons its row.
    Value blockMax =
        e.reduce(e.idx(0), op.getCols(), e.negInf(), [&](Value c, Value m) {
          return arith::MaximumFOp::create(b, m, e.load(scores, {r, c}));
        });
    Value newMax = arith::MaximumFOp::create(b, oldMax, blockMax);
    Value anyAllowed =
        arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, newMax, e.negInf());
    e.when(anyAllowed, [&] {
      Value alpha =
          math::ExpOp::create(b, arith::SubFOp::create(b, oldMax, newMax));
      // p[c] = exp(s[c] - max) replaces the score; forbidden keys give 0.
      Value blockSum =
          e.reduce(e.idx(0), op.getCols(), e.f32(0), [&](Value c, Value sum) {
            Value p = math::ExpOp::create(
                b, arith::SubFOp::create(b, e.load(scores, {r, c}), newMax));
            e.store(p, scores, {r, c});
            return e.addf(sum, p, true);
          });
      e.store(e.addf(e.mulf(alpha, e.load(op.getSum(), r)), blockSum),
              op.getSum(), r);
      e.loop(e.idx(0), dv, [&](Value x) {
        e.store(e.mulf(alpha, e.load(acc, {r, x})), acc, {r, x});
      });
      e.loop(e.idx(0), op.getCols(), [&](Value c) {
        Value p = e.load(scores, {r, c});
        Value j = e.add(op.getStart(), c);
        // A forbidden key (p == 0) is skipped, not multiplied by zero: its
        // value may be NaN or infinite.
        Value contributes =
            arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, p, e.f32(0));
        e.when(contributes, [&] {
          e.loop(e.idx(0), dv, [&](Value x) {
            Value v =
                e.loadKvF32(op.getValue(), op.getKvScale(), op.getKvHead(),
                            e.kvIndices(op.getValue(), op.getBlockTable(),
                                        op.getBatch(), op.getKvHead(), j, x));
            e.store(e.addf(e.load(acc, {r, x}), e.mulf(p, v, true), true), acc,
                    {r, x});
          });
        });
      });
      e.store(newMax, op.getMax(), r);
    });
  });
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

LogicalResult lowerMerge(TileMergeOp op, PatternRewriter &rewriter) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  Value out = op.getOut();
  Type outType = cast<MemRefType>(out.getType()).getElementType();
  Value dv = e.dimOf(op.getOutParts(), 4);
  e.loop(e.idx(0), op.getRows(), [&](Value r) {
    Value i = e.add(op.getStart(), r);
    // (Named locals: the IR order must not depend on the compiler's
    // argument evaluation order.)
    Value sink = loadSink(e, op.getSinks(), op.getHead());
    Value shift =
        emitAlibiShift(e, op.getAlibiSlopes(), op.getAlibiRef(), op.getHead());
    MergedRow row = emitMergedRow(e, op.getLseParts(), op.getBatch(),
                                  op.getHead(), i, sink, shift);
    e.loop(e.idx(0), dv, [&](Value x) {
      Value v = emitMergedOut(e, op.getOutParts(), op.getLseParts(), row,
                              op.getBatch(), op.getHead(), i, x);
      e.store(truncTo(e, v, outType), out, {op.getBatch(), op.getHead(), i, x});
    });
    if (Value lse = op.getLse())
      e.store(row.lse, lse, {op.getBatch(), op.getHead(), i});
  });
  rewriter.eraseOp(op);
  return success();
}

/// A schedule hint: the host has nothing to overlap.
LogicalResult lowerPrefetch(TilePrefetchOp op, PatternRewriter &rewriter) {
  rewriter.eraseOp(op);
  return success();
}

/// RoPE's record: checked before the program runs (the reference's checks);
/// the loops read nothing of it.
LogicalResult lowerKeyRecord(TileKeyRecordOp op, PatternRewriter &rewriter) {
  rewriter.eraseOp(op);
  return success();
}

struct LowerTileToLoopsPass
    : mlir::kvattn::impl::LowerTileToLoopsPassBase<LowerTileToLoopsPass> {
  void runOnOperation() override {
    if (failed(
            checkF32QueryTiles(getOperation(), "kvattn-lower-tile-to-loops")))
      return signalPassFailure();
    RewritePatternSet patterns(&getContext());
    populateLowerTileToLoopsPatterns(patterns);
    if (failed(applyLoopLoweringPatterns(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void mlir::kvattn::emitLoadQ(Emitter &e, TileLoadQOp op, const TileRef &qTile) {
  auto type = cast<MemRefType>(op.getQTile().getType());
  Value bm = e.idx(type.getDimSize(0)), d = e.idx(type.getDimSize(1));
  RopeAttr rope = op.getRopeAttr();
  Type queryType = cast<MemRefType>(op.getQuery().getType()).getElementType();
  e.loop(e.idx(0), op.getRows(), [&](Value r) {
    QueryRow q = queryRowOf(e, op.getHead(), op.getStart(), op.getGroup(), r);
    // RoPE: the row's position (its sequence row (pos_row + r) / G).
    Value qp;
    if (rope) {
      Value i = e.add(op.getPosRow(), r);
      if (std::optional<int64_t> group = op.getGroup(); group && *group > 1)
        i = e.b.createOrFold<arith::DivUIOp>(i, e.idx(*group));
      qp = op.getQBase() ? e.add(op.getQBase(), i)
                         : e.loadIndex(op.getQPos(), {op.getBatch(), i});
    }
    e.loop(e.idx(0), d, [&](Value x) {
      Value v = e.loadF32(op.getQuery(), {op.getBatch(), q.head, q.row, x});
      if (rope) {
        RotaryElement rot =
            emitRotaryElement(e.b, e.b.getLoc(), rope, qp, x, SinCos::Math,
                              {op.getRotaryCos(), op.getRotarySin()});
        Value partner = e.loadF32(op.getQuery(),
                                  {op.getBatch(), q.head, q.row, rot.partner});
        v = emitRotate(e.b, e.b.getLoc(), rot, v, partner);
        if (!rope.getF32Query())
          v = emitRoundThrough(e.b, e.b.getLoc(), v, queryType);
      }
      qTile.store(e, v, r, x);
    });
  });
  e.loop(op.getRows(), bm, [&](Value r) {
    e.loop(e.idx(0), d, [&](Value x) { qTile.store(e, e.f32(0), r, x); });
  });
}

void mlir::kvattn::emitStore(Emitter &e, TileStoreOp op, const TileRef &acc) {
  ImplicitLocOpBuilder &b = e.b;
  Value out = op.getOut();
  Type outType = cast<MemRefType>(out.getType()).getElementType();
  Value dv = e.tileDim(op.getAcc(), 1);
  e.loop(e.idx(0), op.getRows(), [&](Value r) {
    QueryRow q = queryRowOf(e, op.getHead(), op.getStart(), op.getGroup(), r);
    Value rowMax = e.load(op.getMax(), r);
    Value sum = e.load(op.getSum(), r);
    // No allowed key: out = 0, lse = -inf (with a sink: its logit).
    Value sink = loadSink(e, op.getSinks(), q.head);
    Value shift =
        emitAlibiShift(e, op.getAlibiSlopes(), op.getAlibiRef(), q.head);
    RowNormalisation n = emitRowNormalisation(e, rowMax, sum, sink, 1.0, shift);
    e.loop(e.idx(0), dv, [&](Value x) {
      Value v = e.mulf(acc.load(e, r, x), n.inv);
      v = arith::SelectOp::create(b, n.noKey, e.f32(0), v);
      e.store(truncTo(e, v, outType), out, {op.getBatch(), q.head, q.row, x});
    });
    if (Value lse = op.getLse())
      e.store(emitRowLse(e, n), lse, {op.getBatch(), q.head, q.row});
  });
}

void mlir::kvattn::populateLowerTileStateToLoopsPatterns(
    RewritePatternSet &patterns) {
  patterns.add(lowerInit);
  patterns.add(lowerMerge);
  patterns.add(lowerPrefetch);
  patterns.add(lowerKeyRecord);
}

void mlir::kvattn::populateLowerTileToLoopsPatterns(
    RewritePatternSet &patterns) {
  populateLowerTileStateToLoopsPatterns(patterns);
  patterns.add(lowerLoadQ);
  patterns.add(lowerQK);
  patterns.add(lowerMask);
  patterns.add(lowerSoftmax);
  patterns.add(lowerStore);
}
