//===- KVAttnTileOps.cpp - verifiers of the tile ops ----------------------===//
//
// Tile buffers have static shapes: [BM] rows, [BM, BN] scores, [BM, D]
// queries, [BM, Dv] accumulators. The verifiers check that the tiles of one
// op agree with each other and with the head dims of the global operands.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"

using namespace mlir;
using namespace mlir::kvattn;

static LogicalResult checkStatic(Operation *op, StringRef name, Value tile) {
  auto type = cast<MemRefType>(tile.getType());
  if (type.hasStaticShape())
    return success();
  return op->emitOpError() << name << " tile must have a static shape, got "
                           << type;
}

static int64_t dim(Value v, unsigned i) {
  return cast<ShapedType>(v.getType()).getDimSize(i);
}

/// Checks `a` dim `i` == `b` dim `j` when both are static.
static LogicalResult checkMatch(Operation *op, StringRef what, Value a,
                                StringRef aName, unsigned i, Value b,
                                StringRef bName, unsigned j) {
  int64_t x = dim(a, i), y = dim(b, j);
  if (ShapedType::isDynamic(x) || ShapedType::isDynamic(y) || x == y)
    return success();
  return op->emitOpError() << what << " mismatch: " << aName << " dim " << i
                           << " is " << x << " but " << bName << " dim " << j
                           << " is " << y;
}

/// max, sum: [BM]; acc: [BM, Dv].
static LogicalResult checkState(Operation *op, Value max, Value sum,
                                Value acc) {
  if (failed(checkStatic(op, "max", max)) ||
      failed(checkStatic(op, "sum", sum)) ||
      failed(checkStatic(op, "acc", acc)) ||
      failed(checkMatch(op, "tile rows BM", sum, "sum", 0, max, "max", 0)) ||
      failed(checkMatch(op, "tile rows BM", acc, "acc", 0, max, "max", 0)))
    return failure();
  return success();
}

/// GQA packing: `group` heads per tile, at least 1.
static LogicalResult checkGroup(Operation *op, std::optional<int64_t> group) {
  if (group && *group < 1)
    return op->emitOpError() << "group must be positive, got " << *group;
  return success();
}

LogicalResult TileInitOp::verify() {
  return checkState(*this, getMax(), getSum(), getAcc());
}

LogicalResult TileLoadQOp::verify() {
  if (failed(checkStatic(*this, "q_tile", getQTile())) ||
      failed(checkGroup(*this, getGroup())))
    return failure();
  if (RopeAttr rope = getRopeAttr()) {
    if (!getPosRow() ||
        static_cast<bool>(getQBase()) == static_cast<bool>(getQPos()))
      return emitOpError() << "rope needs pos_row and one of q_base (offset "
                              "form) or q_pos (explicit form)";
    int64_t d = cast<MemRefType>(getQTile().getType()).getDimSize(1);
    if (rope.getRotaryDim() > d)
      return emitOpError() << "rope: rotary_dim = " << rope.getRotaryDim()
                           << " exceeds the head dim D = " << d;
    if (rope.usesTables() != static_cast<bool>(getRotaryCos()) ||
        static_cast<bool>(getRotaryCos()) != static_cast<bool>(getRotarySin()))
      return emitOpError() << "a rope without theta reads rotary_cos and "
                              "rotary_sin, one with theta neither";
  } else if (getRotaryCos() || getRotarySin()) {
    return emitOpError() << "rotary_cos and rotary_sin are RoPE's tables: "
                            "they need rope";
  } else if (getPosRow() || getQBase() || getQPos()) {
    return emitOpError() << "pos_row, q_base and q_pos position the rows "
                            "for rope: they need rope";
  }
  // A 16-bit query tile (the tensor-core kernels') holds the query as it
  // is: its own type, and a rotated query rounded to it; or a bf16 query
  // converted into f16 (an FP8 cache's f16 stage), rows scaled by powers
  // of two where they would not be finite.
  Type tileType = cast<MemRefType>(getQTile().getType()).getElementType();
  Type queryType = cast<MemRefType>(getQuery().getType()).getElementType();
  if (!tileType.isF32()) {
    const bool converted =
        queryType.isBF16() && tileType.isF16() && !getRopeAttr();
    if (tileType != queryType && !converted)
      return emitOpError() << "a 16-bit q_tile holds the query in its own "
                              "type (or a bf16 query without rope in f16): "
                              "the query is "
                           << queryType << ", the tile " << tileType;
    if (RopeAttr rope = getRopeAttr(); rope && rope.getF32Query())
      return emitOpError() << "rope with f32_query keeps the rotated query "
                              "in f32: the q_tile must be f32, got "
                           << tileType;
  }
  return checkMatch(*this, "head dim D", getQTile(), "q_tile", 1, getQuery(),
                    "query", 3);
}

/// A block table is [B, max_pages].
static LogicalResult checkBlockTable(Operation *op, Value blockTable) {
  if (!blockTable)
    return success();
  auto type = cast<MemRefType>(blockTable.getType());
  if (type.getRank() != 2)
    return op->emitOpError()
           << "block_table must have rank 2 [B, max_pages], got rank "
           << type.getRank();
  return success();
}

/// An FP8 cache is read with its scale, and only an FP8 cache has one.
static LogicalResult checkKvScale(Operation *op, StringRef name, Value cache,
                                  Value scale) {
  Type elt = cast<MemRefType>(cache.getType()).getElementType();
  const bool fp8 = isa<Float8E4M3FNType, Float8E5M2Type>(elt);
  if (fp8 && !scale)
    return op->emitOpError()
           << "an FP8 " << name << " (" << elt << ") is read with kv_scale";
  if (!fp8 && scale)
    return op->emitOpError()
           << "kv_scale dequantises an FP8 " << name << ", not " << elt;
  if (scale) {
    int64_t rank = cast<MemRefType>(scale.getType()).getRank();
    if (rank != 0 && rank != 1 && rank != 3)
      return op->emitOpError()
             << "kv_scale has rank " << rank
             << ": per tensor [1], per KV head [Hkv] or per token and head "
                "(the cache's shape without its last dimension)";
  }
  return success();
}

LogicalResult TileQKOp::verify() {
  if (failed(checkStatic(*this, "q_tile", getQTile())) ||
      failed(checkStatic(*this, "scores", getScores())) ||
      failed(checkBlockTable(*this, getBlockTable())) ||
      failed(checkMatch(*this, "head dim D", getQTile(), "q_tile", 1, getKey(),
                        "key", 3)) ||
      failed(checkMatch(*this, "tile rows BM", getScores(), "scores", 0,
                        getQTile(), "q_tile", 0)) ||
      failed(checkKvScale(*this, "key", getKey(), getKvScale())))
    return failure();
  // A 16-bit query tile is the tensor cores' A operand: the key is the B
  // operand in the same type (an FP8 key is converted to it as it is
  // staged).
  Type tileType = cast<MemRefType>(getQTile().getType()).getElementType();
  Type keyType = cast<MemRefType>(getKey().getType()).getElementType();
  if (!tileType.isF32() && tileType != keyType &&
      !isa<Float8E4M3FNType, Float8E5M2Type>(keyType))
    return emitOpError() << "a 16-bit q_tile (" << tileType
                         << ") multiplies a key of its own type or an FP8 "
                            "one, got "
                         << keyType;
  if (std::optional<APFloat> cap = getSoftcap())
    if (!cap->isFinite() || cap->isNegative() || cap->isZero())
      return emitOpError() << "softcap must be positive and finite";
  return success();
}

LogicalResult TileMaskOp::verify() {
  if (failed(checkStatic(*this, "scores", getScores())) ||
      failed(checkGroup(*this, getGroup())))
    return failure();
  if (static_cast<bool>(getQPos()) != static_cast<bool>(getKPos()))
    return emitOpError() << "q_pos and k_pos go together";
  bool offsets = getQBase() && getKBase();
  if (static_cast<bool>(getQBase()) != static_cast<bool>(getKBase()))
    return emitOpError() << "q_base and k_base go together";
  if (offsets && getQPos())
    return emitOpError() << "positions are given both as offsets and as "
                            "position buffers";
  if ((getCausal() || getWindow() || getWindowRight()) && !offsets &&
      !getQPos())
    return emitOpError() << "causal and window masks need positions";
  if (getAlibiSlopes() && !offsets && !getQPos())
    return emitOpError() << "an ALiBi bias needs positions";
  if (static_cast<bool>(getAlibiSlopes()) != static_cast<bool>(getAlibiRef()))
    return emitOpError() << "alibi takes the slopes and the reference "
                            "distance";
  if (getTreeParents() && (!getTreeRow0() || !getTreeDraftBase()))
    return emitOpError() << "tree takes the parents, the sequence's first "
                            "row and the first draft key";
  if (getTreeParents() && !offsets)
    return emitOpError() << "a tree mask needs the offset form (q_base, "
                            "k_base)";
  if (std::optional<int64_t> r = getWindowRight(); r && *r < 0)
    return emitOpError() << "window_right must be non-negative, got " << *r;
  if (std::optional<int64_t> w = getWindow(); w && *w <= 0)
    return emitOpError() << "window must be positive, got " << *w;
  return success();
}

LogicalResult TileSoftmaxOp::verify() {
  if (failed(checkStatic(*this, "scores", getScores())) ||
      failed(checkState(*this, getMax(), getSum(), getAcc())) ||
      failed(checkBlockTable(*this, getBlockTable())) ||
      failed(checkMatch(*this, "tile rows BM", getScores(), "scores", 0,
                        getMax(), "max", 0)) ||
      (getKeyValid() &&
       cast<MemRefType>(getKeyValid().getType()).getRank() != 2 &&
       failed(emitOpError("key_valid must be a [B, S] memref"))) ||
      (!getLatent() && failed(checkMatch(*this, "value head dim Dv", getAcc(),
                                         "acc", 1, getValue(), "value", 3))) ||
      failed(checkKvScale(*this, "value", getValue(), getKvScale())))
    return failure();
  // The latent form reads the first Dv columns of the key cache.
  if (getLatent()) {
    int64_t dv = dim(getAcc(), 1), d = dim(getValue(), 3);
    if (ShapedType::isStatic(d) && d < dv)
      return emitOpError() << "latent: the value rows are the first Dv = " << dv
                           << " columns of the key cache, which has only " << d;
  }
  // A block with key validity is never full: its invalid keys must be
  // skipped, whatever their probability.
  if (getAllAllowed() && getKeyValid())
    return emitOpError("all_allowed cannot be combined with key_valid: the "
                       "values of invalid keys must never be read");
  return success();
}

LogicalResult TileStoreOp::verify() {
  if (failed(checkState(*this, getMax(), getSum(), getAcc())) ||
      failed(checkGroup(*this, getGroup())) ||
      failed(checkMatch(*this, "value head dim Dv", getAcc(), "acc", 1,
                        getOut(), "out", 3)))
    return failure();
  if (static_cast<bool>(getAlibiSlopes()) != static_cast<bool>(getAlibiRef()))
    return emitOpError() << "alibi takes the slopes and the reference "
                            "distance";
  return success();
}

LogicalResult TileMergeOp::verify() {
  if (failed(checkMatch(*this, "parts N", getLseParts(), "lse_parts", 0,
                        getOutParts(), "out_parts", 0)) ||
      failed(checkMatch(*this, "value head dim Dv", getOut(), "out", 3,
                        getOutParts(), "out_parts", 4)))
    return failure();
  const char *names[] = {"batch size B", "query heads Hq", "query length L"};
  for (unsigned d = 0; d < 3; ++d)
    if (failed(checkMatch(*this, names[d], getLseParts(), "lse_parts", d + 1,
                          getOutParts(), "out_parts", d + 1)) ||
        failed(checkMatch(*this, names[d], getOut(), "out", d, getOutParts(),
                          "out_parts", d + 1)))
      return failure();
  if (static_cast<bool>(getAlibiSlopes()) != static_cast<bool>(getAlibiRef()))
    return emitOpError() << "alibi takes the slopes and the reference "
                            "distance";
  return success();
}

LogicalResult TilePrefetchOp::verify() {
  return checkBlockTable(*this, getBlockTable());
}
