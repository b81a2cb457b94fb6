//===- LowerAppend.cpp - kvattn.append -> tensor.insert_slice -------------===//

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"
#include "passes/Conversion/Fp8.h"
#include "passes/RotaryEmbedding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_LOWERAPPENDPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

namespace {

/// append(update [B,H,L,D], cache [B,H,C,D], pos [B]) ->
///   scf.for b: cache = insert_slice(update[b], cache[b, :, pos[b]:+L, :])
/// and the paged form one token at a time (rewritePaged).
struct LowerAppendPattern : OpRewritePattern<AppendOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AppendOp op,
                                PatternRewriter &rewriter) const override {
    // RoPE: the update rotated first (tensor.generate), then written.
    Value update = op.getUpdate();
    const bool fp8 = op.hasFp8Cache();
    if (RopeAttr rope = op.getRopeAttr())
      update = rotateUpdate(op, rope, /*keepF32=*/fp8, rewriter);
    // FP8: the (rotated) update quantised with the scales of the rows it is
    // written to.
    if (fp8)
      update = quantizeUpdate(op, update, rewriter);
    Value record;
    if (Value ropePos = op.getRopePos())
      record = writeRecord(op, ropePos, rewriter);
    Value result = op.isPaged() ? rewritePaged(op, update, rewriter)
                                : rewriteStatic(op, update, rewriter);
    if (record)
      rewriter.replaceOp(op, {result, record});
    else
      rewriter.replaceOp(op, result);
    return success();
  }

  /// update[b, h, t, :] rotated at position pos[b] + t in f32, cast to the
  /// cache's element type (the write's), or kept in f32 (`keepF32`: an FP8
  /// cache quantises the f32 rotation).
  static Value rotateUpdate(AppendOp op, RopeAttr rope, bool keepF32,
                            PatternRewriter &rewriter) {
    Location loc = op.getLoc();
    Value update = op.getUpdate(), pos = op.getPos();
    auto type = cast<RankedTensorType>(update.getType());
    if (keepF32)
      type = type.clone(rewriter.getF32Type());
    SmallVector<Value> dynamic;
    for (int64_t d = 0; d < 4; ++d)
      if (type.isDynamicDim(d))
        dynamic.push_back(tensor::DimOp::create(rewriter, loc, update, d));
    auto generate = tensor::GenerateOp::create(
        rewriter, loc, type, dynamic,
        [&](OpBuilder &b, Location l, ValueRange ix) {
          Type f32 = b.getF32Type();
          auto load = [&](Value x) {
            Value v = tensor::ExtractOp::create(
                b, l, update, ValueRange{ix[0], ix[1], ix[2], x});
            return v.getType().isF32()
                       ? v
                       : arith::ExtFOp::create(b, l, f32, v).getResult();
          };
          Value p = tensor::ExtractOp::create(b, l, pos, ValueRange{ix[0]});
          p = arith::IndexCastOp::create(b, l, b.getIndexType(), p);
          p = arith::AddIOp::create(b, l, p, ix[2]);
          RotaryElement e =
              emitRotaryElement(b, l, rope, p, ix[3], SinCos::Math,
                                {op.getRotaryCos(), op.getRotarySin()});
          Value v = emitRotate(b, l, e, load(ix[3]), load(e.partner));
          if (!type.getElementType().isF32())
            v = arith::TruncFOp::create(b, l, type.getElementType(), v);
          tensor::YieldOp::create(b, l, v);
        });
    return generate.getResult();
  }

  /// The update [B, H, L, D] (f32, f16 or bf16) as the cache's FP8 codes:
  /// element (b, h, t, x) is RN_satfinite(f32(v) / scale) with the scale of
  /// the cache row it is written to (row pos[b] + t of head h; paged, row
  /// p % page_size of page block_table[b, p / page_size]). Positions (and
  /// the table) are validated before this runs.
  static Value quantizeUpdate(AppendOp op, Value values,
                              PatternRewriter &rewriter) {
    Location loc = op.getLoc();
    Value pos = op.getPos(), scale = op.getKvScale(),
          table = op.getBlockTable(), cache = op.getCache();
    auto valuesType = cast<RankedTensorType>(values.getType());
    Type fp8 = op.getCache().getType().getElementType();
    auto type = valuesType.clone(fp8);
    auto scaleType = cast<RankedTensorType>(scale.getType());
    SmallVector<Value> dynamic;
    for (int64_t d = 0; d < 4; ++d)
      if (type.isDynamicDim(d))
        dynamic.push_back(tensor::DimOp::create(rewriter, loc, values, d));
    auto generate = tensor::GenerateOp::create(
        rewriter, loc, type, dynamic,
        [&](OpBuilder &b, Location l, ValueRange ix) {
          Value v = tensor::ExtractOp::create(b, l, values, ix);
          if (!v.getType().isF32())
            v = arith::ExtFOp::create(b, l, b.getF32Type(), v);
          Value s;
          if (scaleType.getRank() == 0) {
            s = tensor::ExtractOp::create(b, l, scale, ValueRange{});
          } else if (scaleType.getRank() == 1) {
            // [1] per tensor or [H] per head (a dynamic size decides).
            Value zero = arith::ConstantIndexOp::create(b, l, 0);
            Value index = ix[1];
            if (scaleType.getDimSize(0) == 1) {
              index = zero;
            } else if (scaleType.isDynamicDim(0)) {
              Value size = tensor::DimOp::create(b, l, scale, 0);
              Value perTensor = arith::CmpIOp::create(
                  b, l, arith::CmpIPredicate::eq, size,
                  arith::ConstantIndexOp::create(b, l, 1));
              index = arith::SelectOp::create(b, l, perTensor, zero, ix[1]);
            }
            s = tensor::ExtractOp::create(b, l, scale, ValueRange{index});
          } else {
            Value p = tensor::ExtractOp::create(b, l, pos, ValueRange{ix[0]});
            p = arith::IndexCastOp::create(b, l, b.getIndexType(), p);
            p = arith::AddIOp::create(b, l, p, ix[2]);
            if (!table) {
              s = tensor::ExtractOp::create(b, l, scale,
                                            ValueRange{ix[0], ix[1], p});
            } else {
              Value pageSize = tensor::DimOp::create(b, l, cache, 1);
              Value slot = arith::DivUIOp::create(b, l, p, pageSize);
              Value row = arith::RemUIOp::create(b, l, p, pageSize);
              Value page = tensor::ExtractOp::create(b, l, table,
                                                     ValueRange{ix[0], slot});
              page = arith::IndexCastOp::create(b, l, b.getIndexType(), page);
              // A padding token (skip_padding, page -1) is not written: its
              // code is computed with page 0's scale and never stored.
              if (op.getSkipPadding()) {
                Value zero = arith::ConstantIndexOp::create(b, l, 0);
                Value isPage = arith::CmpIOp::create(
                    b, l, arith::CmpIPredicate::sge, page, zero);
                page = arith::SelectOp::create(b, l, isPage, page, zero);
              }
              s = tensor::ExtractOp::create(b, l, scale,
                                            ValueRange{page, row, ix[1]});
            }
          }
          Value q = arith::DivFOp::create(b, l, v, s);
          tensor::YieldOp::create(b, l, castF32ToFp8(b, l, q, fp8));
        });
    return generate.getResult();
  }

  /// The RoPE record: rope_pos[b, pos[b] + t] = pos[b] + t.
  static Value writeRecord(AppendOp op, Value record,
                           PatternRewriter &rewriter) {
    Location loc = op.getLoc();
    Value update = op.getUpdate(), pos = op.getPos();
    Type elt = cast<RankedTensorType>(record.getType()).getElementType();
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value batch = rewriter.createOrFold<tensor::DimOp>(loc, update, 0);
    Value length = rewriter.createOrFold<tensor::DimOp>(loc, update, 2);
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, batch, one, ValueRange{record},
        [&](OpBuilder &b, Location l, Value bIdx, ValueRange iter) {
          Value p0 = tensor::ExtractOp::create(b, l, pos, ValueRange{bIdx});
          p0 = arith::IndexCastOp::create(b, l, b.getIndexType(), p0);
          auto inner = scf::ForOp::create(
              b, l, zero, length, one, ValueRange{iter[0]},
              [&](OpBuilder &b, Location l, Value t, ValueRange iter) {
                Value p = arith::AddIOp::create(b, l, p0, t);
                Value v = arith::IndexCastOp::create(b, l, elt, p);
                Value written = tensor::InsertOp::create(b, l, v, iter[0],
                                                         ValueRange{bIdx, p});
                scf::YieldOp::create(b, l, written);
              });
          scf::YieldOp::create(b, l, inner.getResult(0));
        });
    return loop.getResult(0);
  }

  static Value rewriteStatic(AppendOp op, Value update,
                             PatternRewriter &rewriter) {
    Location loc = op.getLoc();
    Value cache = op.getCache(), pos = op.getPos();
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
    return loop.getResult(0);
  }

  /// Paged: append(update [B,H,L,D], pages [N,P,H,D], pos [B], table [B,M])
  ///   scf.for b: scf.for t:
  ///     p = pos[b] + t
  ///     pages = insert_slice(update[b, :, t, :] as [H,D],
  ///                          pages[table[b, p / P], p % P, :, :])
  /// Both loops carry the pages tensor, so the writes bufferize in place.
  static Value rewritePaged(AppendOp op, Value update,
                            PatternRewriter &rewriter) {
    Location loc = op.getLoc();
    Value pages = op.getCache(), pos = op.getPos(), table = op.getBlockTable();
    auto updateType = cast<RankedTensorType>(update.getType());
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value batch = rewriter.createOrFold<tensor::DimOp>(loc, table, 0);
    Value length = rewriter.createOrFold<tensor::DimOp>(loc, update, 2);
    Value pageSize = rewriter.createOrFold<tensor::DimOp>(loc, pages, 1);
    // One token of one sequence, all heads: [H, D] (a rank-reduced slice of
    // update, inserted rank-reduced into one row of one page).
    auto rowType = RankedTensorType::get(
        {updateType.getDimSize(1), updateType.getDimSize(3)},
        updateType.getElementType());
    auto rowSizes = [&](OpBuilder &b, Location l) {
      SmallVector<OpFoldResult> sizes{b.getIndexAttr(1), b.getIndexAttr(1)};
      for (int64_t d : {1, 3})
        sizes.push_back(
            updateType.isDynamicDim(d)
                ? OpFoldResult(
                      tensor::DimOp::create(b, l, update, d).getResult())
                : OpFoldResult(b.getIndexAttr(updateType.getDimSize(d))));
      return sizes;
    };
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, batch, one, ValueRange{pages},
        [&](OpBuilder &b, Location l, Value bIdx, ValueRange iter) {
          Value p0 = tensor::ExtractOp::create(b, l, pos, ValueRange{bIdx});
          p0 = arith::IndexCastOp::create(b, l, b.getIndexType(), p0);
          auto inner = scf::ForOp::create(
              b, l, zero, length, one, ValueRange{iter[0]},
              [&](OpBuilder &b, Location l, Value t, ValueRange iter) {
                // Positions are validated non-negative before this runs.
                Value p = arith::AddIOp::create(b, l, p0, t);
                Value slot = arith::DivUIOp::create(b, l, p, pageSize);
                Value row = arith::RemUIOp::create(b, l, p, pageSize);
                Value page = tensor::ExtractOp::create(b, l, table,
                                                       ValueRange{bIdx, slot});
                page = arith::IndexCastOp::create(b, l, b.getIndexType(), page);
                SmallVector<OpFoldResult> sizes = rowSizes(b, l);
                SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
                // update[b, :, t, :] has sizes [1, H, 1, D].
                SmallVector<OpFoldResult> srcSizes{b.getIndexAttr(1), sizes[2],
                                                   b.getIndexAttr(1), sizes[3]};
                SmallVector<OpFoldResult> srcOffsets{bIdx, b.getIndexAttr(0), t,
                                                     b.getIndexAttr(0)};
                SmallVector<OpFoldResult> dstOffsets{
                    page, row, b.getIndexAttr(0), b.getIndexAttr(0)};
                auto insert = [&](OpBuilder &b, Location l) -> Value {
                  Value slice = tensor::ExtractSliceOp::create(
                      b, l, rowType, update, srcOffsets, srcSizes, strides);
                  return tensor::InsertSliceOp::create(
                      b, l, slice, iter[0], dstOffsets, sizes, strides);
                };
                if (!op.getSkipPadding()) {
                  scf::YieldOp::create(b, l, insert(b, l));
                  return;
                }
                // skip_padding: a token whose table entry is -1 keeps the
                // pages as they are.
                Value isPage = arith::CmpIOp::create(
                    b, l, arith::CmpIPredicate::sge, page, zero);
                auto write = scf::IfOp::create(
                    b, l, isPage,
                    [&](OpBuilder &b, Location l) {
                      scf::YieldOp::create(b, l, insert(b, l));
                    },
                    [&](OpBuilder &b, Location l) {
                      scf::YieldOp::create(b, l, iter[0]);
                    });
                scf::YieldOp::create(b, l, write.getResult(0));
              });
          scf::YieldOp::create(b, l, inner.getResult(0));
        });
    return loop.getResult(0);
  }
};

struct LowerAppendPass
    : mlir::kvattn::impl::LowerAppendPassBase<LowerAppendPass> {
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
