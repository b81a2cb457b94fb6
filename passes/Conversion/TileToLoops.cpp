//===- TileToLoops.cpp - the CPU lowering of the tile ops -----------------===//
//
// Each kvattn.tile.* op becomes the loop nest its ODS description states.
// Scores, the running max/sum and the accumulator are f32; Q, K, V are
// extended to f32 when loaded, `out` is rounded to its element type when
// stored. The innermost loops run over the head dimension, unit stride;
// dot products carry `reassoc` so that LLVM may vectorise them.
//
//===----------------------------------------------------------------------===//

#include "dialect/KVAttnOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <limits>

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_LOWERTILETOLOOPSPASS
#include "passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

namespace {

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

  Value load(Value memref, ValueRange indices) {
    return memref::LoadOp::create(b, memref, indices);
  }
  void store(Value value, Value memref, ValueRange indices) {
    memref::StoreOp::create(b, value, memref, indices);
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
  Value tile = op.getQTile();
  Value bm = e.tileDim(tile, 0), d = e.tileDim(tile, 1);
  e.loop(e.idx(0), op.getRows(), [&](Value r) {
    Value i = e.add(op.getStart(), r);
    e.loop(e.idx(0), d, [&](Value x) {
      e.store(e.loadF32(op.getQuery(), {op.getBatch(), op.getHead(), i, x}),
              tile, {r, x});
    });
  });
  e.loop(op.getRows(), bm, [&](Value r) {
    e.loop(e.idx(0), d, [&](Value x) { e.store(e.f32(0), tile, {r, x}); });
  });
  rewriter.eraseOp(op);
  return success();
}

LogicalResult lowerQK(TileQKOp op, PatternRewriter &rewriter) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  Value q = op.getQTile(), scores = op.getScores();
  Value bn = e.tileDim(scores, 1), d = e.tileDim(q, 1);
  Value scale = e.f32(op.getScale().convertToDouble());
  std::optional<APFloat> softcap = op.getSoftcap();
  e.loop(e.idx(0), op.getRows(), [&](Value r) {
    e.loop(e.idx(0), op.getCols(), [&](Value c) {
      Value j = e.add(op.getStart(), c);
      Value dot = e.reduce(e.idx(0), d, e.f32(0), [&](Value x, Value acc) {
        Value k = e.loadF32(op.getKey(), {op.getBatch(), op.getKvHead(), j, x});
        return e.addf(acc, e.mulf(e.load(q, {r, x}), k, true), true);
      });
      Value s = e.mulf(dot, scale);
      if (softcap) {
        Value cap = e.f32(softcap->convertToDouble());
        s = e.mulf(cap,
                   math::TanhOp::create(b, arith::DivFOp::create(b, s, cap)));
      }
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

/// Indices of mask[b, h, i, j] under right-aligned broadcasting: static
/// size-1 dimensions read index 0.
SmallVector<Value> maskIndices(Emitter &e, Value mask, Value b, Value h,
                               Value i, Value j) {
  auto type = cast<MemRefType>(mask.getType());
  Value full[4] = {b, h, i, j};
  SmallVector<Value> indices;
  for (int64_t d = 0; d < type.getRank(); ++d)
    indices.push_back(type.getDimSize(d) == 1 ? e.idx(0)
                                              : full[4 - type.getRank() + d]);
  return indices;
}

LogicalResult lowerMask(TileMaskOp op, PatternRewriter &rewriter) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  Emitter e{b};
  Value scores = op.getScores();
  Value mask = op.getMask();
  bool additive =
      mask && !cast<MemRefType>(mask.getType()).getElementType().isInteger(1);
  using P = arith::CmpIPredicate;
  e.loop(e.idx(0), op.getRows(), [&](Value r) {
    Value i = e.add(op.getQStart(), r);
    Value qp;
    if (op.getQBase())
      qp = e.add(op.getQBase(), r);
    else if (op.getQPos())
      qp = e.loadIndex(op.getQPos(), {op.getBatch(), i});
    e.loop(e.idx(0), op.getCols(), [&](Value c) {
      Value j = e.add(op.getKStart(), c);
      Value allowed = e.cmpi(P::slt, j, op.getKvLen());
      if (Value valid = op.getKeyValid())
        allowed = e.andi(allowed, e.load(valid, {op.getBatch(), j}));
      if (op.getCausal() || op.getWindow()) {
        Value kp = op.getKBase()
                       ? e.add(op.getKBase(), c)
                       : e.loadIndex(op.getKPos(), {op.getBatch(), j});
        if (op.getCausal())
          allowed = e.andi(allowed, e.cmpi(P::sle, kp, qp));
        if (std::optional<int64_t> w = op.getWindow())
          allowed = e.andi(allowed, e.cmpi(P::slt, e.sub(qp, kp), e.idx(*w)));
      }
      Value s = e.load(scores, {r, c});
      if (mask) {
        Value m = e.load(
            mask, maskIndices(e, mask, op.getBatch(), op.getHead(), i, j));
        if (additive) {
          if (!m.getType().isF32())
            m = arith::ExtFOp::create(b, b.getF32Type(), m);
          s = e.addf(s, m);
        } else {
          allowed = e.andi(allowed, m);
        }
      }
      e.store(arith::SelectOp::create(b, allowed, s, e.negInf()), scores,
              {r, c});
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
        e.loop(e.idx(0), dv, [&](Value x) {
          Value v =
              e.loadF32(op.getValue(), {op.getBatch(), op.getKvHead(), j, x});
          e.store(e.addf(e.load(acc, {r, x}), e.mulf(p, v, true), true), acc,
                  {r, x});
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
  Value acc = op.getAcc(), out = op.getOut();
  Type outType = cast<MemRefType>(out.getType()).getElementType();
  Value dv = e.tileDim(acc, 1);
  e.loop(e.idx(0), op.getRows(), [&](Value r) {
    Value i = e.add(op.getStart(), r);
    Value rowMax = e.load(op.getMax(), r);
    Value sum = e.load(op.getSum(), r);
    // No allowed key: out = 0, lse = -inf. A NaN max is not -inf, so NaN
    // propagates through acc / sum.
    Value empty =
        arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, rowMax, e.negInf());
    Value inv = arith::DivFOp::create(b, e.f32(1), sum);
    e.loop(e.idx(0), dv, [&](Value x) {
      Value v = e.mulf(e.load(acc, {r, x}), inv);
      v = arith::SelectOp::create(b, empty, e.f32(0), v);
      if (!outType.isF32())
        v = arith::TruncFOp::create(b, outType, v);
      e.store(v, out, {op.getBatch(), op.getHead(), i, x});
    });
    if (Value lse = op.getLse()) {
      Value l = e.addf(rowMax, math::LogOp::create(b, sum));
      e.store(arith::SelectOp::create(b, empty, e.negInf(), l), lse,
              {op.getBatch(), op.getHead(), i});
    }
  });
  rewriter.eraseOp(op);
  return success();
}

struct LowerTileToLoopsPass
    : kvattn::impl::LowerTileToLoopsPassBase<LowerTileToLoopsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateLowerTileToLoopsPatterns(patterns);
    GreedyRewriteConfig config;
    config.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    if (failed(
            applyPatternsGreedily(getOperation(), std::move(patterns), config)))
      return signalPassFailure();
  }
};

} // namespace

void mlir::kvattn::populateLowerTileToLoopsPatterns(
    RewritePatternSet &patterns) {
  patterns.add(lowerInit);
  patterns.add(lowerLoadQ);
  patterns.add(lowerQK);
  patterns.add(lowerMask);
  patterns.add(lowerSoftmax);
  patterns.add(lowerStore);
}
