//===- LowerMerge.cpp - kvattn.merge -> loops over buffers ----------------===//
//
// The merge of partial attention states as loops: for every query row, the
// parts are visited in index order (n = 0 .. N-1) to find the largest
// finite lse, then to sum exp(lse_n - max) and accumulate the rescaled
// outputs. Parts with lse = -inf are skipped, so merging empty parts gives
// (0, -inf) and never evaluates -inf - -inf. f32 throughout.
//
//===----------------------------------------------------------------------===//

#include "dialect/KVAttnOps.h"
#include "passes/Conversion/LoopEmitter.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_LOWERMERGEPASS
#include "passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

namespace {

Value asBuffer(ImplicitLocOpBuilder &b, Value tensor) {
  auto type = cast<RankedTensorType>(tensor.getType());
  return bufferization::ToBufferOp::create(
      b, MemRefType::get(type.getShape(), type.getElementType()), tensor,
      /*read_only=*/true);
}

Value allocFor(ImplicitLocOpBuilder &b, Type tensorType,
               ArrayRef<Value> sizes) {
  auto type = cast<RankedTensorType>(tensorType);
  SmallVector<Value> dynamic;
  for (auto [i, size] : llvm::enumerate(type.getShape()))
    if (ShapedType::isDynamic(size))
      dynamic.push_back(sizes[i]);
  return memref::AllocOp::create(
      b, MemRefType::get(type.getShape(), type.getElementType()), dynamic);
}

struct LowerMergePattern : OpRewritePattern<MergeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MergeOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    Emitter e{b};
    Value outParts = asBuffer(b, op.getOutParts());
    Value lseParts = asBuffer(b, op.getLseParts());
    Value n = e.dimOf(outParts, 0), batch = e.dimOf(outParts, 1),
          heads = e.dimOf(outParts, 2), rows = e.dimOf(outParts, 3),
          dv = e.dimOf(outParts, 4);
    Value out = allocFor(b, op.getOut().getType(), {batch, heads, rows, dv});
    Value lse = allocFor(b, op.getLse().getType(), {batch, heads, rows});
    Type outType =
        cast<RankedTensorType>(op.getOut().getType()).getElementType();
    auto isEmpty = [&](Value l) {
      return arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, l, e.negInf());
    };
    e.loop(e.idx(0), batch, [&](Value bi) {
      e.loop(e.idx(0), heads, [&](Value h) {
        e.loop(e.idx(0), rows, [&](Value i) {
          // The largest lse, NaN-aware: a NaN part poisons its row.
          Value peak = e.reduce(e.idx(0), n, e.negInf(), [&](Value p, Value m) {
            return arith::MaximumFOp::create(b, m,
                                             e.load(lseParts, {p, bi, h, i}));
          });
          Value sum = e.reduce(e.idx(0), n, e.f32(0), [&](Value p, Value s) {
            Value l = e.load(lseParts, {p, bi, h, i});
            Value w = math::ExpOp::create(b, arith::SubFOp::create(b, l, peak));
            return arith::SelectOp::create(b, isEmpty(l), s, e.addf(s, w));
          });
          Value empty = isEmpty(peak);
          Value total = arith::SelectOp::create(
              b, empty, e.negInf(), e.addf(peak, math::LogOp::create(b, sum)));
          e.store(total, lse, {bi, h, i});
          e.loop(e.idx(0), dv, [&](Value x) {
            Value acc = e.reduce(e.idx(0), n, e.f32(0), [&](Value p, Value a) {
              Value l = e.load(lseParts, {p, bi, h, i});
              Value w =
                  math::ExpOp::create(b, arith::SubFOp::create(b, l, total));
              Value v = e.load(outParts, {p, bi, h, i, x});
              return arith::SelectOp::create(b, isEmpty(l), a,
                                             e.addf(a, e.mulf(w, v)));
            });
            if (!outType.isF32())
              acc = arith::TruncFOp::create(b, outType, acc);
            e.store(acc, out, {bi, h, i, x});
          });
        });
      });
    });
    Value outTensor = bufferization::ToTensorOp::create(
        b, op.getOut().getType(), out, /*restrict=*/true, /*writable=*/true);
    Value lseTensor = bufferization::ToTensorOp::create(
        b, op.getLse().getType(), lse, /*restrict=*/true, /*writable=*/true);
    rewriter.replaceOp(op, {outTensor, lseTensor});
    return success();
  }
};

struct LowerMergePass : kvattn::impl::LowerMergePassBase<LowerMergePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<LowerMergePattern>(&getContext());
    if (failed(applyLoopLoweringPatterns(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
