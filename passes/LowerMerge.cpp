//===- LowerMerge.cpp - kvattn.merge -> loops over buffers ----------------===//
//
// The merge of partial attention states as loops: for every query row, the
// parts are visited in index order (n = 0 .. N-1) to find the largest
// finite lse, then to sum exp(lse_n - max) and accumulate the rescaled
// outputs. Parts with lse = -inf are skipped, so merging empty parts gives
// (0, -inf) and never evaluates -inf - -inf. f32 throughout.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"
#include "passes/Conversion/TileToCPU/LoopEmitter.h"
#include "kvattn/Passes/Passes.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_LOWERMERGEPASS
#include "kvattn/Passes/Passes.h.inc"
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
    Value batch = e.dimOf(outParts, 1), heads = e.dimOf(outParts, 2),
          rows = e.dimOf(outParts, 3), dv = e.dimOf(outParts, 4);
    Value out = allocFor(b, op.getOut().getType(), {batch, heads, rows, dv});
    Value lse = allocFor(b, op.getLse().getType(), {batch, heads, rows});
    Type outType =
        cast<RankedTensorType>(op.getOut().getType()).getElementType();
    e.loop(e.idx(0), batch, [&](Value bi) {
      e.loop(e.idx(0), heads, [&](Value h) {
        e.loop(e.idx(0), rows, [&](Value i) {
          MergedRow row = emitMergedRow(e, lseParts, bi, h, i);
          e.store(row.lse, lse, {bi, h, i});
          e.loop(e.idx(0), dv, [&](Value x) {
            Value v = emitMergedOut(e, outParts, lseParts, row, bi, h, i, x);
            e.store(truncTo(e, v, outType), out, {bi, h, i, x});
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

struct LowerMergePass : mlir::kvattn::impl::LowerMergePassBase<LowerMergePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<LowerMergePattern>(&getContext());
    if (failed(applyLoopLoweringPatterns(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
