//===- KVAttnInterfaces.cpp - builders, shapes and tiling of kvattn ops ---===//
//
// What upstream drivers need from the attention ops: builders that infer
// the result types, reified result shapes (tensor.empty destinations for
// dynamic shapes), and TilingInterface on kvattn.attention over its parallel
// dimensions [B, Hq, L].
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

using namespace mlir;
using namespace mlir::kvattn;

//===----------------------------------------------------------------------===//
// Builders
//===----------------------------------------------------------------------===//

SmallVector<Type> AttentionOp::inferResultTypes(Value query, Value value,
                                                bool withLse) {
  auto v = cast<RankedTensorType>(value.getType());
  return inferResultTypes(query, v.getShape().back(), withLse);
}

SmallVector<Type> AttentionOp::inferResultTypes(Value query, int64_t valueDim,
                                                bool withLse) {
  auto q = cast<RankedTensorType>(query.getType());
  ArrayRef<int64_t> qs = q.getShape();
  SmallVector<Type> types = {RankedTensorType::get(
      {qs[0], qs[1], qs[2], valueDim}, q.getElementType())};
  if (withLse)
    types.push_back(RankedTensorType::get(
        {qs[0], qs[1], qs[2]}, Float32Type::get(query.getContext())));
  return types;
}

static FloatAttr optionalF32(Builder &b, std::optional<double> value) {
  return value ? b.getF32FloatAttr(static_cast<float>(*value)) : FloatAttr();
}

void AttentionOp::build(OpBuilder &b, OperationState &state, Value query,
                        Value key, Value value, bool withLse,
                        const AttentionExtras &e) {
  SmallVector<Type> types = e.valueDim && !value
                                ? inferResultTypes(query, *e.valueDim, withLse)
                                : inferResultTypes(query, value, withLse);
  build(b, state, types[0], withLse ? types[1] : Type(), query, key, value,
        e.qOffset, e.kOffset, e.qPos, e.kPos, e.kvLen, e.keyValid, e.mask,
        e.blockTable, e.qStart, e.sinks, e.alibiSlopes, e.kRopePos, e.kStart,
        e.cacheBatchIdx, e.causal,
        e.window ? b.getI64IntegerAttr(*e.window) : IntegerAttr(),
        optionalF32(b, e.softcap), optionalF32(b, e.scale),
        e.windowRight ? b.getI64IntegerAttr(*e.windowRight) : IntegerAttr(),
        e.treeParents, e.rope, e.queryRotated, e.kScale, e.vScale,
        e.valueDim ? b.getI64IntegerAttr(*e.valueDim) : IntegerAttr(),
        e.rotaryCos, e.rotarySin);
}

AttentionExtras AttentionOp::getExtras() {
  AttentionExtras e;
  e.qOffset = getQOffset();
  e.kOffset = getKOffset();
  e.qPos = getQPos();
  e.kPos = getKPos();
  e.kvLen = getKvLen();
  e.keyValid = getKeyValid();
  e.mask = getMask();
  e.blockTable = getBlockTable();
  e.qStart = getQStart();
  e.sinks = getSinks();
  e.alibiSlopes = getAlibiSlopes();
  e.kRopePos = getKRopePos();
  e.rope = getRopeAttr();
  e.queryRotated = getQueryRotated();
  e.kStart = getKStart();
  e.cacheBatchIdx = getCacheBatchIdx();
  e.causal = getCausal();
  e.window = getWindow();
  e.windowRight = getWindowRight();
  e.treeParents = getTreeParents();
  e.kScale = getKScale();
  e.vScale = getVScale();
  e.valueDim = getValueDim();
  e.rotaryCos = getRotaryCos();
  e.rotarySin = getRotarySin();
  if (std::optional<APFloat> softcap = getSoftcap())
    e.softcap = softcap->convertToDouble();
  if (std::optional<APFloat> scale = getScale())
    e.scale = scale->convertToDouble();
  return e;
}

void SdpaOp::build(OpBuilder &b, OperationState &state, Value query, Value key,
                   Value value, bool withLse, Value mask,
                   std::optional<CausalAlignment> causal,
                   std::optional<double> scale) {
  SmallVector<Type> types =
      AttentionOp::inferResultTypes(query, value, withLse);
  build(
      b, state, types[0], withLse ? types[1] : Type(), query, key, value, mask,
      causal ? CausalAlignmentAttr::get(b.getContext(), *causal)
             : CausalAlignmentAttr(),
      /*window=*/IntegerAttr(), /*softcap=*/FloatAttr(), optionalF32(b, scale));
}

//===----------------------------------------------------------------------===//
// Reified result shapes
//===----------------------------------------------------------------------===//

/// out [B, Hq, L, Dv] and lse [B, Hq, L] from query and value.
static void reifyAttentionShapes(OpBuilder &b, Location loc, Value query,
                                 Value value, unsigned numResults,
                                 ReifiedRankedShapedTypeDims &shapes) {
  SmallVector<OpFoldResult> rows = {tensor::getMixedSize(b, loc, query, 0),
                                    tensor::getMixedSize(b, loc, query, 1),
                                    tensor::getMixedSize(b, loc, query, 2)};
  SmallVector<OpFoldResult> out = rows;
  out.push_back(tensor::getMixedSize(b, loc, value, 3));
  shapes.push_back(out);
  if (numResults > 1)
    shapes.push_back(rows);
}

LogicalResult
AttentionOp::reifyResultShapes(OpBuilder &b,
                               ReifiedRankedShapedTypeDims &shapes) {
  reifyAttentionShapes(b, getLoc(), getQuery(), getValueSource(),
                       getOperation()->getNumResults(), shapes);
  if (std::optional<int64_t> dv = getValueDim())
    shapes[0][3] = b.getIndexAttr(*dv);
  return success();
}

LogicalResult SdpaOp::reifyResultShapes(OpBuilder &b,
                                        ReifiedRankedShapedTypeDims &shapes) {
  reifyAttentionShapes(b, getLoc(), getQuery(), getValue(),
                       getOperation()->getNumResults(), shapes);
  return success();
}

LogicalResult AppendOp::reifyResultShapes(OpBuilder &b,
                                          ReifiedRankedShapedTypeDims &shapes) {
  shapes.push_back(tensor::getMixedSizes(b, getLoc(), getCache()));
  if (Value record = getRopePos())
    shapes.push_back(tensor::getMixedSizes(b, getLoc(), record));
  return success();
}

LogicalResult AppendOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  // The cache, and the RoPE record when one is updated.
  types.push_back(adaptor.getCache().getType());
  if (Value record = adaptor.getRopePos())
    types.push_back(record.getType());
  return success();
}

LogicalResult MergeOp::reifyResultShapes(OpBuilder &b,
                                         ReifiedRankedShapedTypeDims &shapes) {
  SmallVector<OpFoldResult> out =
      tensor::getMixedSizes(b, getLoc(), getOutParts());
  out.erase(out.begin());
  SmallVector<OpFoldResult> lse(out.begin(), out.end() - 1);
  shapes.push_back(out);
  shapes.push_back(lse);
  return success();
}

//===----------------------------------------------------------------------===//
// TilingInterface on kvattn.attention
//===----------------------------------------------------------------------===//

SmallVector<utils::IteratorType> AttentionOp::getLoopIteratorTypes() {
  return SmallVector<utils::IteratorType>(3, utils::IteratorType::parallel);
}

SmallVector<Range> AttentionOp::getIterationDomain(OpBuilder &b) {
  Location loc = getLoc();
  OpFoldResult zero = b.getIndexAttr(0), one = b.getIndexAttr(1);
  SmallVector<Range> domain;
  for (unsigned d = 0; d < 3; ++d)
    domain.push_back({zero, tensor::getMixedSize(b, loc, getQuery(), d), one});
  return domain;
}

namespace {

/// One cut dimension of a slice: `dim` restricted to [offset, offset + size).
struct Cut {
  unsigned dim;
  OpFoldResult offset, size;
};

/// Builds the slices one tile of the iteration domain [B, Hq, L] reads.
struct TileSlicer {
  OpBuilder &b;
  Location loc;
  ArrayRef<OpFoldResult> offsets, sizes; // of [B, Hq, L]
  SmallVector<Operation *> slices;

  /// Dimension `dim` cut like iteration dimension `loopDim`.
  Cut like(unsigned dim, unsigned loopDim) const {
    return {dim, offsets[loopDim], sizes[loopDim]};
  }

  /// `value` with the `cuts` dimensions restricted, every other whole.
  Value slice(Value value, ArrayRef<Cut> cuts) {
    auto type = cast<RankedTensorType>(value.getType());
    SmallVector<OpFoldResult> off(type.getRank(), b.getIndexAttr(0));
    SmallVector<OpFoldResult> len = tensor::getMixedSizes(b, loc, value);
    SmallVector<OpFoldResult> stride(type.getRank(), b.getIndexAttr(1));
    for (const Cut &cut : cuts) {
      off[cut.dim] = cut.offset;
      len[cut.dim] = cut.size;
    }
    auto op = tensor::ExtractSliceOp::create(b, loc, value, off, len, stride);
    slices.push_back(op);
    return op.getResult();
  }
};

} // namespace

/// The kv heads a tile of query heads [h0, h0 + hs) reads, for a GQA group
/// `group = Hq / Hkv`: hs / group heads from h0 / group when the tile holds
/// whole groups, one head when it lies inside one group.
static FailureOr<std::pair<OpFoldResult, OpFoldResult>>
kvHeadTile(OpBuilder &b, Location loc, AttentionOp op, OpFoldResult h0,
           OpFoldResult hs) {
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  auto k = cast<RankedTensorType>(op.getKey().getType());
  int64_t hq = q.getDimSize(1), hkv = k.getDimSize(op.getKeyHeadDim());
  std::optional<int64_t> tile = getConstantIntValue(hs);
  std::optional<int64_t> full =
      getConstantIntValue(tensor::getMixedSize(b, loc, op.getQuery(), 1));
  if (tile && full && *tile == *full && isZeroInteger(h0)) // untiled
    return std::make_pair(
        OpFoldResult(b.getIndexAttr(0)),
        tensor::getMixedSize(b, loc, op.getKey(), op.getKeyHeadDim()));
  if (ShapedType::isDynamic(hq) || ShapedType::isDynamic(hkv)) {
    op.emitOpError() << "cannot tile query heads with dynamic head counts "
                        "(the GQA group Hq / Hkv must be static)";
    return failure();
  }
  const int64_t group = hq / hkv;
  if (group == 1)
    return std::make_pair(h0, hs);
  AffineExpr d0;
  bindDims(b.getContext(), d0);
  OpFoldResult kvOffset =
      affine::makeComposedFoldedAffineApply(b, loc, d0.floorDiv(group), {h0});
  if (tile && *tile % group == 0)
    return std::make_pair(kvOffset,
                          OpFoldResult(b.getIndexAttr(*tile / group)));
  if (tile && group % *tile == 0)
    return std::make_pair(kvOffset, OpFoldResult(b.getIndexAttr(1)));
  op.emitOpError() << "a tile of query heads must hold whole GQA groups or "
                      "lie inside one (tile size dividing or a multiple of "
                      "Hq / Hkv = "
                   << group << ", and dividing Hq = " << hq << ")";
  return failure();
}

/// `offset` (i32/i64/index [b]) + `rows`, elementwise.
static Value shiftOffsets(OpBuilder &b, Location loc, Value offset,
                          OpFoldResult rows) {
  auto type = cast<RankedTensorType>(offset.getType());
  Value scalar = getValueOrCreateConstantIndexOp(b, loc, rows);
  if (!type.getElementType().isIndex())
    scalar = arith::IndexCastOp::create(b, loc, type.getElementType(), scalar);
  Value splat = tensor::SplatOp::create(b, loc, scalar,
                                        tensor::getMixedSizes(b, loc, offset));
  return arith::AddIOp::create(b, loc, offset, splat);
}

FailureOr<TilingResult>
AttentionOp::getTiledImplementation(OpBuilder &b,
                                    ArrayRef<OpFoldResult> offsets,
                                    ArrayRef<OpFoldResult> sizes) {
  Location loc = getLoc();
  if (getKScale() || getVScale()) {
    emitOpError() << "tiling a kvattn.attention over an FP8 cache "
                     "(k_scale/v_scale) is not supported yet";
    return failure();
  }
  if (isVarlen() || hasKeyStarts()) {
    // The packed rows belong to sequences through q_start (or k_start): a
    // tile takes whole query heads only (every row, the one packed batch).
    for (unsigned d : {0u, 2u}) {
      std::optional<int64_t> size = getConstantIntValue(sizes[d]);
      if (!isZeroInteger(offsets[d]) || !size ||
          *size != getQuery().getType().getDimSize(d)) {
        emitOpError() << "a varlen kvattn.attention ("
                      << (isVarlen() ? "q_start" : "k_start")
                      << ") tiles over query heads only, not over dim " << d;
        return failure();
      }
    }
  }
  TileSlicer s{b, loc, offsets, sizes, {}};
  FailureOr<std::pair<OpFoldResult, OpFoldResult>> kvHeads =
      kvHeadTile(b, loc, *this, offsets[1], sizes[1]);
  if (failed(kvHeads))
    return failure();

  // Rows of the mask that are cut: dimensions of size 1 broadcast and stay,
  // the key dimension is never cut. A dynamic dimension may broadcast at run
  // time, so it is cut only when the tile covers it whole.
  AttentionExtras e = getExtras();
  if (Value mask = e.mask) {
    auto type = cast<RankedTensorType>(mask.getType());
    const int64_t lead = 4 - type.getRank();
    SmallVector<Cut> cuts;
    for (int64_t d = 0; d < type.getRank() && lead + d < 3; ++d) {
      if (type.getDimSize(d) == 1)
        continue;
      if (type.isDynamicDim(d)) {
        emitOpError() << "cannot tile over mask dim " << d
                      << ": it is dynamic and may broadcast";
        return failure();
      }
      cuts.push_back(s.like(d, lead + d));
    }
    e.mask = s.slice(mask, cuts);
  }

  // Per-head parameters follow the query heads.
  for (Value *perHead : {&e.sinks, &e.alibiSlopes})
    if (*perHead)
      *perHead = s.slice(*perHead, {s.like(0, 1)});
  Value query = s.slice(getQuery(), {s.like(0, 0), s.like(1, 1), s.like(2, 2)});
  Cut heads{getKeyHeadDim(), kvHeads->first, kvHeads->second};
  Value key, value;
  if (isVarlen() || hasKeyStarts()) {
    // Every sequence stays: only the kv heads are cut.
    key = s.slice(getKey(), {heads});
    value = getValue() ? s.slice(getValue(), {heads}) : Value();
    auto tiled = AttentionOp::create(b, loc, query, key, value,
                                     static_cast<bool>(getLse()), e);
    return TilingResult{{tiled.getOperation()},
                        SmallVector<Value>(tiled->getResults()),
                        s.slices};
  }
  if (hasCacheBatchIdx()) {
    // Cache rows are shared by every batch: only their kv heads are cut,
    // and the batches' entries of the map.
    key = s.slice(getKey(), {heads});
    value = getValue() ? s.slice(getValue(), {heads}) : Value();
    e.cacheBatchIdx = s.slice(e.cacheBatchIdx, {s.like(0, 0)});
  } else if (isPaged()) {
    // Pages are shared by every sequence: only their kv heads are cut, and
    // the sequences' rows of the table.
    key = s.slice(getKey(), {heads});
    value = getValue() ? s.slice(getValue(), {heads}) : Value();
    e.blockTable = s.slice(e.blockTable, {s.like(0, 0)});
  } else {
    key = s.slice(getKey(), {s.like(0, 0), heads});
    value = getValue() ? s.slice(getValue(), {s.like(0, 0), heads}) : Value();
  }
  for (Value *batchOnly :
       {&e.kOffset, &e.kPos, &e.kvLen, &e.keyValid, &e.kRopePos})
    if (*batchOnly)
      *batchOnly = s.slice(*batchOnly, {s.like(0, 0)});
  if (e.qOffset) {
    // Row i of the tile is row offsets[2] + i of the op.
    e.qOffset = s.slice(e.qOffset, {s.like(0, 0)});
    if (!isZeroInteger(offsets[2]))
      e.qOffset = shiftOffsets(b, loc, e.qOffset, offsets[2]);
  }
  if (e.qPos)
    e.qPos = s.slice(e.qPos, {s.like(0, 0), s.like(1, 2)});

  auto tiled = AttentionOp::create(b, loc, query, key, value,
                                   static_cast<bool>(getLse()), e);
  return TilingResult{{tiled.getOperation()},
                      SmallVector<Value>(tiled->getResults()),
                      s.slices};
}

LogicalResult AttentionOp::getResultTilePosition(
    OpBuilder &b, unsigned resultNumber, ArrayRef<OpFoldResult> offsets,
    ArrayRef<OpFoldResult> sizes, SmallVector<OpFoldResult> &resultOffsets,
    SmallVector<OpFoldResult> &resultSizes) {
  resultOffsets.assign(offsets.begin(), offsets.end());
  resultSizes.assign(sizes.begin(), sizes.end());
  if (resultNumber == 0) {
    resultOffsets.push_back(b.getIndexAttr(0));
    resultSizes.push_back(
        isLatent() ? OpFoldResult(b.getIndexAttr(getValueHeadDim()))
                   : tensor::getMixedSize(b, getLoc(), getValue(), 3));
  }
  return success();
}

LogicalResult AttentionOp::getIterationDomainTileFromResultTile(
    OpBuilder &, unsigned, ArrayRef<OpFoldResult> offsets,
    ArrayRef<OpFoldResult> sizes, SmallVectorImpl<OpFoldResult> &iterOffsets,
    SmallVectorImpl<OpFoldResult> &iterSizes) {
  // The first three result dimensions are the iteration domain; a tile of
  // out must cover Dv whole (one row's output needs every value column
  // anyway, so a narrower slice recomputes nothing less).
  iterOffsets.assign(offsets.begin(), offsets.begin() + 3);
  iterSizes.assign(sizes.begin(), sizes.begin() + 3);
  return success();
}

FailureOr<TilingResult>
AttentionOp::generateResultTileValue(OpBuilder &b, unsigned resultNumber,
                                     ArrayRef<OpFoldResult> offsets,
                                     ArrayRef<OpFoldResult> sizes) {
  SmallVector<OpFoldResult> iterOffsets, iterSizes;
  if (failed(getIterationDomainTileFromResultTile(
          b, resultNumber, offsets, sizes, iterOffsets, iterSizes)))
    return failure();
  if (resultNumber == 0 && offsets.size() == 4) {
    // Only whole rows of out can be produced.
    std::optional<int64_t> off = getConstantIntValue(offsets[3]);
    std::optional<int64_t> len = getConstantIntValue(sizes[3]);
    std::optional<int64_t> dv = getConstantIntValue(
        isLatent() ? OpFoldResult(b.getIndexAttr(getValueHeadDim()))
                   : tensor::getMixedSize(b, getLoc(), getValue(), 3));
    if (!off || *off != 0 || !len || !dv || *len != *dv)
      return failure();
  }
  return getTiledImplementation(b, iterOffsets, iterSizes);
}
