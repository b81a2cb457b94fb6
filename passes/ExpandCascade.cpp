//===- ExpandCascade.cpp - kvattn.cascade -> attentions + merge -----------===//
//
// Shared-prefix (cascade) attention from the kernels that exist: (a) one
// kvattn.attention of all packed query rows over the shared prefix (one
// batch, so the prefix K/V is read once per KV head and row block, not once
// per sequence; no positions and no mask: the prefix lies before every
// query), (b) the ragged kvattn.attention of each sequence's rows over its
// own suffix (q_start, q_offset, kv_len: positions counted from the end of
// the prefix, which is all causality needs), (c) kvattn.merge of the two
// states in that order (f32 parts; 16-bit outputs widened exactly).
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_EXPANDCASCADEPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

std::pair<AttentionOp, AttentionOp>
mlir::kvattn::createCascadeAttentions(OpBuilder &builder, CascadeOp op) {
  Location loc = op.getLoc();
  auto outType = cast<RankedTensorType>(op.getOut().getType());
  auto lseType = RankedTensorType::get(outType.getShape().drop_back(),
                                       builder.getF32Type());
  auto attention = [&](Value key, Value value, Value qStart, Value qOffset,
                       Value kvLen, Value blockTable, bool causal) {
    return AttentionOp::create(
        builder, loc, outType, lseType, op.getQuery(), key, value, qOffset,
        /*k_offset=*/Value(), /*q_pos=*/Value(), /*k_pos=*/Value(), kvLen,
        /*key_valid=*/Value(), /*mask=*/Value(), blockTable, qStart,
        /*sinks=*/Value(), /*alibi_slopes=*/Value(),
        /*k_rope_pos=*/Value(), /*k_start=*/Value(),
        /*cache_batch_idx=*/Value(), causal, /*window=*/IntegerAttr(),
        op.getSoftcapAttr(), op.getScaleAttr(),
        /*window_right=*/IntegerAttr(), /*tree_parents=*/Value(),
        /*rope=*/RopeAttr(), /*query_rotated=*/false, /*k_scale=*/Value(),
        /*v_scale=*/Value(), /*value_dim=*/IntegerAttr(),
        /*rotary_cos=*/Value(), /*rotary_sin=*/Value());
  };
  // (a) Every row over the prefix: mask-free, no positions. A paged prefix
  // is one sequence of prefix_len keys through the block table
  // [1, prefix_max_pages] of its pages.
  Value prefixTable, prefixLen;
  if (op.isPrefixPaged()) {
    auto pagesType = cast<RankedTensorType>(op.getPrefixPages().getType());
    SmallVector<int64_t> shape = {1, pagesType.getDimSize(0)};
    SmallVector<OpFoldResult> sizes = {
        builder.getIndexAttr(1),
        tensor::getMixedSize(builder, loc, op.getPrefixPages(), 0)};
    prefixTable = tensor::ExpandShapeOp::create(
        builder, loc, RankedTensorType::get(shape, pagesType.getElementType()),
        op.getPrefixPages(), ArrayRef<ReassociationIndices>{{0, 1}}, sizes);
    prefixLen = op.getPrefixLen();
  }
  AttentionOp prefix =
      attention(op.getPrefixKey(), op.getPrefixValue(), Value(), Value(),
                prefixLen, prefixTable, false);
  // (b) Each sequence's rows over its suffix.
  AttentionOp suffix =
      attention(op.getKey(), op.getValue(), op.getQStart(), op.getQOffset(),
                op.getKvLen(), op.getBlockTable(), op.getCausal());
  return {prefix, suffix};
}

SmallVector<Value> mlir::kvattn::emptyCascadeResults(OpBuilder &builder,
                                                     CascadeOp op) {
  auto outType = cast<RankedTensorType>(op.getOut().getType());
  if (outType.getDimSize(2) != 0)
    return {};
  // out [1, Hq, 0, Dv] and lse [1, Hq, 0]: Hq from the query when dynamic.
  Location loc = op.getLoc();
  auto empty = [&](RankedTensorType type) -> Value {
    SmallVector<OpFoldResult> sizes;
    for (int64_t d = 0; d < type.getRank(); ++d)
      sizes.push_back(
          type.isDynamicDim(d)
              ? tensor::getMixedSize(builder, loc, op.getQuery(), d)
              : OpFoldResult(builder.getIndexAttr(type.getDimSize(d))));
    return tensor::EmptyOp::create(builder, loc, sizes, type.getElementType());
  };
  SmallVector<Value> results = {empty(outType)};
  if (Value lse = op.getLse())
    results.push_back(empty(cast<RankedTensorType>(lse.getType())));
  return results;
}

namespace {

/// `v` [d0, ...] as [1, d0, ...] (one part of a merge), widened to f32.
Value asPart(PatternRewriter &rewriter, Location loc, Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  if (!type.getElementType().isF32()) {
    auto wide = RankedTensorType::get(type.getShape(), rewriter.getF32Type());
    v = arith::ExtFOp::create(rewriter, loc, wide, v);
  }
  SmallVector<int64_t> shape = {1};
  llvm::append_range(shape, type.getShape());
  SmallVector<ReassociationIndices> groups = {{0, 1}};
  for (int64_t d = 2; d <= type.getRank(); ++d)
    groups.push_back({d});
  SmallVector<OpFoldResult> sizes = {rewriter.getIndexAttr(1)};
  for (int64_t d = 0; d < type.getRank(); ++d)
    sizes.push_back(tensor::getMixedSize(rewriter, loc, v, d));
  return tensor::ExpandShapeOp::create(
      rewriter, loc, RankedTensorType::get(shape, rewriter.getF32Type()), v,
      groups, sizes);
}

struct ExpandCascadePattern : OpRewritePattern<CascadeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(CascadeOp op,
                                PatternRewriter &rewriter) const override {
    if (SmallVector<Value> empty = emptyCascadeResults(rewriter, op);
        !empty.empty()) {
      rewriter.replaceOp(op, empty);
      return success();
    }
    Location loc = op.getLoc();
    auto outType = cast<RankedTensorType>(op.getOut().getType());
    auto lseType = RankedTensorType::get(outType.getShape().drop_back(),
                                         rewriter.getF32Type());
    auto [prefix, suffix] = createCascadeAttentions(rewriter, op);
    // (c) The merge, prefix part first.
    Value outPrefix = asPart(rewriter, loc, prefix.getOut());
    Value outSuffix = asPart(rewriter, loc, suffix.getOut());
    Value lsePrefix = asPart(rewriter, loc, prefix.getLse());
    Value lseSuffix = asPart(rewriter, loc, suffix.getLse());
    Value outParts = tensor::ConcatOp::create(rewriter, loc, /*dim=*/0,
                                              ValueRange{outPrefix, outSuffix});
    Value lseParts = tensor::ConcatOp::create(rewriter, loc, /*dim=*/0,
                                              ValueRange{lsePrefix, lseSuffix});
    auto merge = MergeOp::create(rewriter, loc, TypeRange{outType, lseType},
                                 outParts, lseParts);
    SmallVector<Value> results = {merge.getOut()};
    if (op.getLse())
      results.push_back(merge.getLse());
    rewriter.replaceOp(op, results);
    return success();
  }
};

struct ExpandCascadePass
    : mlir::kvattn::impl::ExpandCascadePassBase<ExpandCascadePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateExpandCascadePatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void mlir::kvattn::populateExpandCascadePatterns(RewritePatternSet &patterns) {
  patterns.add<ExpandCascadePattern>(patterns.getContext());
}
