//===- LowerAppend.cpp - kvattn.append -> tensor.insert_slice -------------===//

#include "dialect/KVAttnOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_LOWERAPPENDPASS
#include "passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

namespace {

/// append(update [B,H,L,D], cache [B,H,C,D], pos [B]) ->
///   scf.for b: cache = insert_slice(update[b], cache[b, :, pos[b]:+L, :])
struct LowerAppendPattern : OpRewritePattern<AppendOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AppendOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value update = op.getUpdate(), cache = op.getCache(), pos = op.getPos();
    auto updateType = cast<RankedTensorType>(update.getType());
    auto sliceSizes = [&](OpBuilder &b) {
      SmallVector<OpFoldResult> sizes{b.getIndexAttr(1)};
      for (int64_t d = 1; d < 4; ++d)
        sizes.push_back(
            updateType.isDynamicDim(d)
                ? OpFoldResult(
                      tensor::DimOp::create(b, loc, update, d).getResult())
                : OpFoldResult(b.getIndexAttr(updateType.getDimSize(d))));
      return sizes;
    };
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value batch = rewriter.createOrFold<tensor::DimOp>(loc, cache, 0);
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, batch, one, ValueRange{cache},
        [&](OpBuilder &b, Location l, Value bIdx, ValueRange iter) {
          Value p = tensor::ExtractOp::create(b, l, pos, ValueRange{bIdx});
          p = arith::IndexCastOp::create(b, l, b.getIndexType(), p);
          SmallVector<OpFoldResult> sizes = sliceSizes(b);
          SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
          SmallVector<OpFoldResult> srcOffsets{
              bIdx, b.getIndexAttr(0), b.getIndexAttr(0), b.getIndexAttr(0)};
          SmallVector<OpFoldResult> dstOffsets{bIdx, b.getIndexAttr(0), p,
                                               b.getIndexAttr(0)};
          auto sliceType = RankedTensorType::get({1, updateType.getDimSize(1),
                                                  updateType.getDimSize(2),
                                                  updateType.getDimSize(3)},
                                                 updateType.getElementType());
          Value slice = tensor::ExtractSliceOp::create(
              b, l, sliceType, update, srcOffsets, sizes, strides);
          Value inserted = tensor::InsertSliceOp::create(
              b, l, slice, iter[0], dstOffsets, sizes, strides);
          scf::YieldOp::create(b, l, inserted);
        });
    rewriter.replaceOp(op, loop.getResult(0));
    return success();
  }
};

struct LowerAppendPass : kvattn::impl::LowerAppendPassBase<LowerAppendPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateLowerAppendPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void mlir::kvattn::populateLowerAppendPatterns(RewritePatternSet &patterns) {
  patterns.add<LowerAppendPattern>(patterns.getContext());
}
