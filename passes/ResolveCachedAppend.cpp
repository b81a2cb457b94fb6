//===- ResolveCachedAppend.cpp - kvattn.sdpa -> kvattn.attention ----------===//
//
// Rewrites framework SDPA into position-explicit attention. The causal
// alignment of `kvattn.sdpa` is a statement about tensor shapes; this pass
// turns it into query and key positions, using what the IR says about where
// the keys came from (a cache append, a concat of a cache and new rows, an
// insert into a buffer), and warns about the one combination that is almost
// always a bug: an upper-left triangle over keys that already hold a cache.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"
#include "passes/FrameworkRope.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <cstdlib>

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_RESOLVECACHEDAPPENDPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

namespace {

/// Where the keys of an SDPA came from.
enum class CacheKind {
  /// Nothing known: positions follow from the causal alignment alone.
  None,
  /// `kvattn.append` of L rows at per-batch positions `pos` into a static
  /// cache: the logical keys are the first `pos[b] + L` slots.
  Append,
  /// `tensor.concat` along the sequence axis of a cache of length P and the
  /// new rows.
  Concat,
  /// `tensor.insert_slice` of the new rows at sequence offset P.
  InsertSlice,
};

/// A size known either as an IR value/attribute or as a tensor dimension
/// that is materialised (tensor.dim) only when the rewrite needs it, so the
/// analysis never leaves dead ops behind.
struct Size {
  OpFoldResult ofr;
  Value tensor;
  int64_t dim = -1;

  static Size ofDim(Value tensor, int64_t dim) { return {{}, tensor, dim}; }
  static Size of(OpFoldResult ofr) { return {ofr, {}, -1}; }

  std::optional<int64_t> staticValue() const {
    if (tensor) {
      auto type = cast<RankedTensorType>(tensor.getType());
      if (type.isDynamicDim(dim))
        return std::nullopt;
      return type.getDimSize(dim);
    }
    return getConstantIntValue(ofr);
  }

  OpFoldResult materialize(OpBuilder &b, Location loc) const {
    if (!tensor)
      return ofr;
    auto type = cast<RankedTensorType>(tensor.getType());
    if (!type.isDynamicDim(dim))
      return b.getIndexAttr(type.getDimSize(dim));
    return tensor::DimOp::create(b, loc, tensor, dim).getResult();
  }

  /// True when the two sizes are provably equal.
  bool provablyEquals(const Size &other) const {
    if (tensor && tensor == other.tensor && dim == other.dim)
      return true;
    if (!tensor && !other.tensor && ofr == other.ofr)
      return true;
    std::optional<int64_t> a = staticValue(), b = other.staticValue();
    return a && b && *a == *b;
  }
};

struct CacheRelation {
  CacheKind kind = CacheKind::None;
  /// Append: the per-batch write positions `pos` ([B], i32/i64).
  Value appendPos;
  /// Concat / InsertSlice: the cached length P (same for every batch), as
  /// the sum of these sizes.
  SmallVector<Size> prefix;
  /// The number of new rows written.
  Size newRows;

  /// True unless the IR proves that the cache held nothing before the write.
  bool cacheMaybeNonEmpty() const {
    switch (kind) {
    case CacheKind::None:
      return false;
    case CacheKind::Append: {
      DenseIntElementsAttr attr;
      if (matchPattern(appendPos, m_Constant(&attr)))
        return llvm::any_of(attr.getValues<APInt>(),
                            [](const APInt &v) { return !v.isZero(); });
      return true;
    }
    case CacheKind::Concat:
    case CacheKind::InsertSlice:
      return llvm::any_of(prefix, [](const Size &s) {
        std::optional<int64_t> v = s.staticValue();
        return !v || *v != 0;
      });
    }
    return true;
  }

  StringRef describe() const {
    switch (kind) {
    case CacheKind::None:
      return "no cache";
    case CacheKind::Append:
      return "kvattn.append";
    case CacheKind::Concat:
      return "tensor.concat";
    case CacheKind::InsertSlice:
      return "tensor.insert_slice";
    }
    return "";
  }
};

/// The size of dimension `dim` of `tensor` as an OpFoldResult.
OpFoldResult dimSize(OpBuilder &b, Location loc, Value tensor, int64_t dim) {
  return Size::ofDim(tensor, dim).materialize(b, loc);
}

/// a + b, folded when both are constants.
OpFoldResult addSizes(OpBuilder &b, Location loc, OpFoldResult x,
                      OpFoldResult y) {
  std::optional<int64_t> cx = getConstantIntValue(x),
                         cy = getConstantIntValue(y);
  if (cx && cy)
    return b.getIndexAttr(*cx + *cy);
  if (cx && *cx == 0)
    return y;
  if (cy && *cy == 0)
    return x;
  return arith::AddIOp::create(b, loc,
                               getValueOrCreateConstantIndexOp(b, loc, x),
                               getValueOrCreateConstantIndexOp(b, loc, y))
      .getResult();
}

/// The cached length P of a Concat / InsertSlice relation.
OpFoldResult prefixSize(OpBuilder &b, Location loc, const CacheRelation &rel) {
  OpFoldResult sum = b.getIndexAttr(0);
  for (const Size &part : rel.prefix)
    sum = addSizes(b, loc, sum, part.materialize(b, loc));
  return sum;
}

/// True when an InsertSlice relation provably writes the last rows of the
/// buffer (P + L == S). Creates no IR.
bool insertEndsBuffer(const CacheRelation &rel, Value key) {
  std::optional<int64_t> p = rel.prefix.front().staticValue(),
                         l = rel.newRows.staticValue(),
                         s = Size::ofDim(key, 2).staticValue();
  return p && l && s && *p + *l == *s;
}

/// Reads the cache relation of the SDPA's key operand. Creates no IR.
CacheRelation analyzeKey(Value key) {
  CacheRelation rel;
  Operation *def = key.getDefiningOp();
  if (!def)
    return rel;

  if (auto append = dyn_cast<AppendOp>(def)) {
    rel.kind = CacheKind::Append;
    rel.appendPos = append.getPos();
    rel.newRows = Size::ofDim(append.getUpdate(), 2);
    return rel;
  }

  if (auto concat = dyn_cast<tensor::ConcatOp>(def)) {
    if (concat.getDim() != 2 || concat.getInputs().size() < 2)
      return rel;
    ValueRange inputs = concat.getInputs();
    rel.kind = CacheKind::Concat;
    for (Value input : inputs.drop_back())
      rel.prefix.push_back(Size::ofDim(input, 2));
    rel.newRows = Size::ofDim(inputs.back(), 2);
    return rel;
  }

  if (auto insert = dyn_cast<tensor::InsertSliceOp>(def)) {
    // Only a plain write of whole [B, H, ., D] rows along the sequence axis
    // is a cache write.
    auto srcType = insert.getSourceType();
    auto dstType = insert.getDestType();
    if (srcType.getRank() != 4 || dstType.getRank() != 4)
      return rel;
    SmallVector<OpFoldResult> offsets = insert.getMixedOffsets();
    SmallVector<OpFoldResult> strides = insert.getMixedStrides();
    for (int64_t d = 0; d < 4; ++d) {
      if (!isConstantIntValue(strides[d], 1))
        return rel;
      if (d == 2)
        continue;
      if (!isConstantIntValue(offsets[d], 0) || srcType.isDynamicDim(d) ||
          dstType.isDynamicDim(d) ||
          srcType.getDimSize(d) != dstType.getDimSize(d))
        return rel;
    }
    rel.kind = CacheKind::InsertSlice;
    rel.prefix.push_back(Size::of(offsets[2]));
    rel.newRows = Size::of(insert.getMixedSizes()[2]);
    return rel;
  }
  return rel;
}

Value toIndexValue(OpBuilder &b, Location loc, OpFoldResult ofr) {
  return getValueOrCreateConstantIndexOp(b, loc, ofr);
}

/// A [B] tensor of `elementType` filled with the index `value`.
Value splatBatch(OpBuilder &b, Location loc, Value query, OpFoldResult value,
                 Type elementType) {
  OpFoldResult batch = dimSize(b, loc, query, 0);
  if (std::optional<int64_t> constant = getConstantIntValue(value)) {
    if (std::optional<int64_t> staticBatch = getConstantIntValue(batch)) {
      auto type = RankedTensorType::get({*staticBatch}, elementType);
      return arith::ConstantOp::create(
          b, loc,
          DenseElementsAttr::get(type,
                                 b.getIntegerAttr(elementType, *constant)));
    }
  }
  Value scalar = toIndexValue(b, loc, value);
  if (!elementType.isIndex())
    scalar = arith::IndexCastOp::create(b, loc, elementType, scalar);
  return tensor::SplatOp::create(b, loc, scalar, ArrayRef<OpFoldResult>{batch});
}

/// The positions chosen for one SDPA.
struct Positions {
  Value qOffset, kOffset, kvLen;
};

/// Positions that put the queries after `keyCount` keys: the last query row
/// sits at key position `keyCount - 1` (lower-right). With `keyCount < L`
/// the first `L - keyCount` rows see no key; the offsets stay non-negative
/// by moving the excess to `k_offset`.
Positions lowerRightPositions(OpBuilder &b, Location loc, Value query,
                              OpFoldResult keyCount, Type elementType) {
  Positions p;
  OpFoldResult rows = dimSize(b, loc, query, 2);
  std::optional<int64_t> ck = getConstantIntValue(keyCount),
                         cr = getConstantIntValue(rows);
  if (ck && cr) {
    p.qOffset = splatBatch(b, loc, query,
                           b.getIndexAttr(std::max<int64_t>(*ck - *cr, 0)),
                           elementType);
    if (*cr > *ck)
      p.kOffset =
          splatBatch(b, loc, query, b.getIndexAttr(*cr - *ck), elementType);
    return p;
  }
  Value k = toIndexValue(b, loc, keyCount), r = toIndexValue(b, loc, rows);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value q =
      arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, k, r), zero);
  Value kk =
      arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, r, k), zero);
  p.qOffset = splatBatch(b, loc, query, q, elementType);
  p.kOffset = splatBatch(b, loc, query, kk, elementType);
  return p;
}

/// A mask that depends only on the key, [B, 1, 1, S] with its batch size
/// equal to the SDPA's (or both 1), as an i1 [B, S] key-validity tensor.
Value asKeyValidity(OpBuilder &b, Location loc, Value mask, Value query) {
  auto type = cast<RankedTensorType>(mask.getType());
  if (!type.getElementType().isInteger(1) || type.getRank() != 4)
    return {};
  if (type.getDimSize(1) != 1 || type.getDimSize(2) != 1)
    return {};
  auto qType = cast<RankedTensorType>(query.getType());
  int64_t mb = type.getDimSize(0), qb = qType.getDimSize(0);
  bool sameBatch = (mb == qb && mb != ShapedType::kDynamic) ||
                   (ShapedType::isDynamic(mb) && ShapedType::isDynamic(qb));
  if (!sameBatch)
    return {};
  SmallVector<ReassociationIndices> groups = {{0, 1, 2}, {3}};
  return tensor::CollapseShapeOp::create(b, loc, mask, groups);
}

} // namespace

namespace {

/// The framework's RoPE, bound to the resolved ops' positions.
struct RopeResolution {
  /// The query's rotation, fused into the attention.
  std::optional<framework_rope::RopeMatch> query;
  /// The appended keys' rotation, fused into the key append.
  std::optional<framework_rope::RopeMatch> keys;
  /// The keys arrive rotated by a kvattn.append and the query is used as
  /// it is (rotated by the framework, or not at all).
  bool queryRotated = false;
};

/// Compares the positions the framework rotated at with those a resolved
/// op uses; warns when they provably differ, naming both. True when they
/// are equal. `what`: "the query is" / "the new keys are"; `pronoun`:
/// "it is" / "they are"; `use`: "attended at" / "written to the cache at".
bool positionsAgree(Operation *at, const framework_rope::RopeMatch &m,
                    Value offset, StringRef what, StringRef pronoun,
                    StringRef use) {
  auto type = cast<RankedTensorType>(m.input.getType());
  framework_rope::PositionComparison cmp = framework_rope::comparePositions(
      m.position,
      framework_rope::offsetPosition(at->getContext(), offset,
                                     type.getDimSize(0), type.getDimSize(2)),
      type.getDimSize(0), type.getDimSize(2));
  if (cmp.kind == framework_rope::PositionComparison::Different) {
    InFlightDiagnostic diag = at->emitWarning()
                              << "RoPE/cache position mismatch: " << what
                              << " rotated (RoPE) ";
    if (cmp.batch >= 0) {
      diag << "at position " << cmp.lhs << " but " << use << " position "
           << cmp.rhs << " (batch " << cmp.batch << ", row " << cmp.row << ")";
    } else {
      int64_t d = *cmp.difference;
      diag << std::abs(d) << (std::abs(d) == 1 ? " position " : " positions ")
           << (d > 0 ? "after" : "before") << " the positions " << pronoun
           << " " << use;
    }
    diag << "; the rotation is kept as the framework applied it (unfused)";
  }
  return cmp.kind == framework_rope::PositionComparison::Equal;
}

/// Tables built for an inv_freq that no theta gives hold at most this many
/// values each ([C, R/2] for a cache of C slots: 4 MiB of f32).
constexpr int64_t kMaxTableElements = int64_t{1} << 20;

/// Builds the tables of a match whose inv_freq no theta gives, for the
/// positions below `rows` (a static cache capacity), before `at`. False
/// when there is no bound or the tables would be too large.
bool buildTables(RewriterBase &rewriter, Operation *at,
                 framework_rope::RopeMatch &m, int64_t rows) {
  if (!m.needsTables())
    return true;
  if (ShapedType::isDynamic(rows) ||
      rows * static_cast<int64_t>(m.invFreq.size()) > kMaxTableElements)
    return false;
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(at);
  std::tie(m.cos, m.sin) =
      framework_rope::makeTables(rewriter, at->getLoc(), m.invFreq, rows);
  m.builtFrom = std::move(m.invFreq);
  m.invFreq.clear();
  return true;
}

/// Recognises the framework's RoPE on the SDPA's query and on the new keys
/// of the append that produced its keys, and decides what is fused.
/// `qOffset` is the query offset the attention will have (null: 0);
/// `queryAtAppend`: the query rows are the appended tokens, at their
/// positions (so below the cache's capacity).
RopeResolution resolveRope(RewriterBase &rewriter, SdpaOp op, Value qOffset,
                           bool queryAtAppend, bool fuse) {
  RopeResolution r;
  auto append = op.getKey().getDefiningOp<AppendOp>();
  const int64_t capacity = append && !append.isPaged()
                               ? append.getCache().getType().getDimSize(2)
                               : ShapedType::kDynamic;
  if (append && !append.getRopeAttr() && !append.isPaged()) {
    std::optional<framework_rope::RopeMatch> m =
        framework_rope::matchRope(append.getUpdate());
    // The fused append casts the f32 rotation to the cache's type once;
    // the framework rounded it to the update's type first. The same only
    // when that rounding is exact (f32) or the types are one.
    if (m) {
      Type updateType = getElementTypeOrSelf(m->input.getType());
      if (!updateType.isF32() &&
          updateType != append.getCache().getType().getElementType())
        m.reset();
    }
    // The written tokens sit below the capacity (the append's contract):
    // tables of `capacity` rows hold every position.
    if (m &&
        positionsAgree(append, *m, append.getPos(), "the new keys are",
                       "they are", "written to the cache at") &&
        fuse && buildTables(rewriter, append, *m, capacity))
      r.keys = m;
  }
  if (std::optional<framework_rope::RopeMatch> m =
          framework_rope::matchRope(op.getQuery())) {
    if (positionsAgree(op, *m, qOffset, "the query is", "it is",
                       "attended at") &&
        fuse) {
      // The keys' tables when they are the same angles, else tables of
      // its own when the query rows are the appended tokens.
      if (m->needsTables() && r.keys && r.keys->rope == m->rope &&
          r.keys->builtFrom == m->invFreq) {
        m->cos = r.keys->cos;
        m->sin = r.keys->sin;
        m->invFreq.clear();
      }
      if (!m->needsTables() ||
          (queryAtAppend && buildTables(rewriter, op, *m, capacity)))
        r.query = m;
    }
  }

  // Keys rotated by an append meet a query rotated the same way, or one
  // used as it is.
  RopeAttr keyRope =
      r.keys ? r.keys->rope : (append ? append.getRopeAttr() : RopeAttr());
  if (keyRope) {
    Value cos = r.keys ? r.keys->cos : append.getRotaryCos();
    Value sin = r.keys ? r.keys->sin : append.getRotarySin();
    if (r.query && (r.query->rope != keyRope || r.query->cos != cos ||
                    r.query->sin != sin))
      r.query.reset();
    r.queryRotated = !r.query;
  }
  return r;
}

/// Erases the framework's rotation once nothing reads it.
void eraseDeadRotation(RewriterBase &rewriter, Value root) {
  SmallVector<Operation *> worklist;
  if (Operation *def = root.getDefiningOp())
    worklist.push_back(def);
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    if (isa<KVAttnDialect>(op->getDialect()) || !isOpTriviallyDead(op))
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        worklist.push_back(def);
    for (Region &region : op->getRegions())
      region.walk([&](Operation *inner) {
        for (Value operand : inner->getOperands())
          if (Operation *def = operand.getDefiningOp();
              def && !op->isAncestor(def))
            worklist.push_back(def);
      });
    rewriter.eraseOp(op);
    // The same op may be queued twice: drop the erased one.
    llvm::erase(worklist, op);
  }
}

} // namespace

/// Rewrites one kvattn.sdpa; emits the lint diagnostics.
static void resolveSdpa(RewriterBase &rewriter, SdpaOp op,
                        bool fixUpperLeftAppends, bool fuseRope) {
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  Value query = op.getQuery(), key = op.getKey();
  CacheRelation rel = analyzeKey(key);
  std::optional<CausalAlignment> causal = op.getCausal();
  Type i64 = rewriter.getI64Type();

  Positions pos;
  Size queryRows = Size::ofDim(query, 2);

  // The logical keys of an append are the first pos[b] + L slots: later
  // slots hold no token (kvattn.append's contract). kv_len says so.
  if (rel.kind == CacheKind::Append) {
    Value appendPos = rel.appendPos;
    Type posType = cast<RankedTensorType>(appendPos.getType()).getElementType();
    Value newRows = splatBatch(rewriter, loc, query,
                               rel.newRows.materialize(rewriter, loc), posType);
    pos.kvLen = arith::AddIOp::create(rewriter, loc, appendPos, newRows);
  }

  bool upperLeftAppend = causal == CausalAlignment::upper_left &&
                         rel.kind != CacheKind::None &&
                         rel.cacheMaybeNonEmpty();
  bool lowerRight = causal == CausalAlignment::lower_right ||
                    (upperLeftAppend && fixUpperLeftAppends);

  if (lowerRight) {
    if (rel.kind == CacheKind::Append) {
      if (rel.newRows.provablyEquals(queryRows)) {
        // The queries are the appended rows: they start at pos[b].
        pos.qOffset = rel.appendPos;
      } else {
        // kv_len - L, kept non-negative (see lowerRightPositions).
        Type posType =
            cast<RankedTensorType>(rel.appendPos.getType()).getElementType();
        Value rows = splatBatch(rewriter, loc, query,
                                queryRows.materialize(rewriter, loc), posType);
        Value zero =
            splatBatch(rewriter, loc, query, rewriter.getIndexAttr(0), posType);
        pos.qOffset = arith::MaxSIOp::create(
            rewriter, loc,
            arith::SubIOp::create(rewriter, loc, pos.kvLen, rows), zero);
        pos.kOffset = arith::MaxSIOp::create(
            rewriter, loc,
            arith::SubIOp::create(rewriter, loc, rows, pos.kvLen), zero);
      }
    } else if (rel.kind == CacheKind::Concat &&
               rel.newRows.provablyEquals(queryRows)) {
      // The queries are the new rows, concatenated after P cached ones:
      // S - L = P.
      pos.qOffset =
          splatBatch(rewriter, loc, query, prefixSize(rewriter, loc, rel), i64);
    } else if (rel.kind == CacheKind::InsertSlice &&
               rel.newRows.provablyEquals(queryRows) &&
               (insertEndsBuffer(rel, key) || upperLeftAppend)) {
      // The queries are the rows written at offset P. When the write ends
      // the buffer this is torch's lower-right (S - L = P). When it does not
      // (only under the upper-left fix), the rows after P + L are no keys of
      // this sequence.
      OpFoldResult prefix = prefixSize(rewriter, loc, rel);
      pos.qOffset = splatBatch(rewriter, loc, query, prefix, i64);
      if (!insertEndsBuffer(rel, key))
        pos.kvLen = splatBatch(rewriter, loc, query,
                               addSizes(rewriter, loc, prefix,
                                        rel.newRows.materialize(rewriter, loc)),
                               i64);
    } else {
      Positions p = lowerRightPositions(rewriter, loc, query,
                                        dimSize(rewriter, loc, key, 2), i64);
      pos.qOffset = p.qOffset;
      pos.kOffset = p.kOffset;
    }
  } else if (causal == CausalAlignment::upper_left) {
    // torch's is_causal=True: row i sees keys 0..i.
    pos.qOffset =
        splatBatch(rewriter, loc, query, rewriter.getIndexAttr(0), i64);
  }

  if (upperLeftAppend) {
    if (fixUpperLeftAppends) {
      op.emitRemark()
          << "rewrote upper-left causal attention over a KV-cache write ("
          << rel.describe()
          << ") to lower-right positions: the queries now sit after the "
             "cached keys (fix-upper-left-appends=true)";
    } else {
      op.emitWarning()
          << "upper-left causal attention over a KV-cache write ("
          << rel.describe()
          << ") whose cache may already hold keys: query row i sees only "
             "keys 0..i, so the appended rows miss the cached context. The "
             "torch is_causal=True meaning is kept; if the queries are the "
             "appended tokens, use a lower-right causal mask "
             "(causal = lower_right, torch's causal_lower_right) or run "
             "-kvattn-resolve-cached-append with "
             "fix-upper-left-appends=true";
    }
  }

  // RoPE applied by the framework. Without a causal rule or a window the
  // query positions change no mask: an append's queries are then placed at
  // its positions, where the framework rotated them.
  Value ropeOffset = pos.qOffset;
  if (!causal && !op.getWindowAttr() && !pos.qOffset && !pos.kOffset &&
      rel.kind == CacheKind::Append && rel.newRows.provablyEquals(queryRows))
    ropeOffset = rel.appendPos;
  bool queryAtAppend = ropeOffset && rel.kind == CacheKind::Append &&
                       ropeOffset == rel.appendPos;
  RopeResolution rope =
      resolveRope(rewriter, op, ropeOffset, queryAtAppend, fuseRope);
  Value attentionQuery = query;
  RopeAttr ropeAttr;
  Value rotaryCos, rotarySin;
  if (rope.query) {
    attentionQuery = rope.query->input;
    ropeAttr = rope.query->rope;
    rotaryCos = rope.query->cos;
    rotarySin = rope.query->sin;
    // rope rotates at q_offset + i: it needs the offset form.
    pos.qOffset = ropeOffset ? ropeOffset
                             : splatBatch(rewriter, loc, query,
                                          rewriter.getIndexAttr(0), i64);
  }
  Value rotatedKeys;
  if (rope.keys) {
    auto append = key.getDefiningOp<AppendOp>();
    rotatedKeys = append.getUpdate();
    rewriter.modifyOpInPlace(append, [&] {
      append.getUpdateMutable().assign(rope.keys->input);
      append.setRopeAttr(rope.keys->rope);
      if (rope.keys->cos) {
        append.getRotaryCosMutable().assign(rope.keys->cos);
        append.getRotarySinMutable().assign(rope.keys->sin);
      }
    });
  }

  // Masks: a boolean mask over keys alone is key validity; any other mask
  // is carried as the general mask operand (a float mask's finite values
  // are biases, so it stays additive).
  Value keyValid, mask;
  if (Value m = op.getMask()) {
    keyValid = asKeyValidity(rewriter, loc, m, query);
    if (!keyValid)
      mask = m;
  }

  // The window and the soft cap carry over unchanged: the positions above
  // put every row at its causal position, so `qp - kp < window` is the
  // SDPA's window.
  Value lse = op.getLse();
  auto attention = AttentionOp::create(
      rewriter, loc, op.getOut().getType(), lse ? lse.getType() : Type(),
      attentionQuery, key, op.getValue(), pos.qOffset, pos.kOffset,
      /*q_pos=*/Value(),
      /*k_pos=*/Value(), pos.kvLen, keyValid, mask, /*block_table=*/Value(),
      /*q_start=*/Value(), /*sinks=*/Value(), /*alibi_slopes=*/Value(),
      /*k_rope_pos=*/Value(), /*k_start=*/Value(),
      /*cache_batch_idx=*/Value(), /*causal=*/causal.has_value(),
      op.getWindowAttr(), op.getSoftcapAttr(), op.getScaleAttr(),
      /*window_right=*/IntegerAttr(), /*tree_parents=*/Value(), ropeAttr,
      rope.queryRotated, /*k_scale=*/Value(),
      /*v_scale=*/Value(), /*value_dim=*/IntegerAttr(), rotaryCos, rotarySin);
  rewriter.replaceOp(op, attention->getResults());
  if (rope.query)
    eraseDeadRotation(rewriter, query);
  if (rotatedKeys)
    eraseDeadRotation(rewriter, rotatedKeys);
}

namespace {

struct SdpaToAttentionPattern : OpRewritePattern<SdpaOp> {
  SdpaToAttentionPattern(MLIRContext *ctx, bool fixUpperLeftAppends,
                         bool fuseRope)
      : OpRewritePattern<SdpaOp>(ctx), fixUpperLeftAppends(fixUpperLeftAppends),
        fuseRope(fuseRope) {}

  LogicalResult matchAndRewrite(SdpaOp op,
                                PatternRewriter &rewriter) const override {
    resolveSdpa(rewriter, op, fixUpperLeftAppends, fuseRope);
    return success();
  }

  bool fixUpperLeftAppends, fuseRope;
};

struct ResolveCachedAppendPass
    : mlir::kvattn::impl::ResolveCachedAppendPassBase<ResolveCachedAppendPass> {
  using Base::Base;

  void runOnOperation() override {
    // A plain walk rather than a greedy driver: every sdpa is rewritten
    // exactly once, so each lint diagnostic is emitted exactly once.
    SmallVector<SdpaOp> ops;
    bool paged = false;
    getOperation()->walk(
        [&](SdpaOp op) {
          ops.push_back(op);
          // SDPA has no paged form: its keys are [B, H, S, D]. Pages read as
          // such would silently mix sequences.
          for (Value kv : {op.getKey(), op.getValue()})
            if (auto append = kv.getDefiningOp<AppendOp>();
                append && append.getBlockTable()) {
              op.emitOpError()
                  << "reads a paged cache (a kvattn.append with block_table): "
                     "kvattn.sdpa has no paged form; use kvattn.attention with "
                     "block_table, q_offset = pos and kv_len = pos + L "
                     "(docs/semantics.md, Paged KV)";
              paged = true;
              break;
            }
        });
    if (paged)
      return signalPassFailure();
    IRRewriter rewriter(&getContext());
    for (SdpaOp op : ops)
      resolveSdpa(rewriter, op, fixUpperLeftAppends, fuseRope);
  }
};

} // namespace

void mlir::kvattn::populateResolveCachedAppendPatterns(
    RewritePatternSet &patterns, bool fixUpperLeftAppends, bool fuseRope) {
  patterns.add<SdpaToAttentionPattern>(patterns.getContext(),
                                       fixUpperLeftAppends, fuseRope);
}
