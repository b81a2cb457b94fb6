//===- KVAttnOps.cpp - kvattn operations ----------------------------------===//
//
// Verifiers. Every rule rejects statically wrong IR with a diagnostic that
// names the tensor, the dimension and both sizes; dynamic dimensions are
// accepted and checked at run time by whoever executes the op.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Support/BlockTable.h"
#include "kvattn/Support/KeyRows.h"
#include "kvattn/Support/QueryStarts.h"
#include "kvattn/Support/StatusWord.h"
#include "kvattn/Support/TreeParents.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kvattn;

//===----------------------------------------------------------------------===//
// Shape helpers
//===----------------------------------------------------------------------===//

namespace {
/// One dimension of one named tensor, for diagnostics.
struct NamedDim {
  StringRef tensor;
  unsigned index;
  int64_t size;
};
} // namespace

static bool isCompatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

static std::string dimToString(int64_t size) {
  return ShapedType::isDynamic(size) ? std::string("?") : std::to_string(size);
}

static NamedDim dimOf(StringRef tensor, Value value, unsigned index) {
  auto type = cast<ShapedType>(value.getType());
  return {tensor, index, type.getDimSize(index)};
}

/// Verifies `scale`, the f32 scales of an FP8 cache of type `cache` with
/// `heads` heads (`name` in the messages): per tensor ([1] or rank 0), per
/// head ([heads]: `headWord` [`headSymbol` = heads] in the message) or per
/// token and head (the cache's shape without its last dimension); constant
/// scales positive and finite.
static LogicalResult checkKvScale(Operation *op, StringRef name, Value scale,
                                  RankedTensorType cache, int64_t heads,
                                  StringRef headWord, StringRef headSymbol) {
  auto type = cast<RankedTensorType>(scale.getType());
  if (!type.getElementType().isF32())
    return op->emitOpError()
           << name << " must be an f32 tensor, got " << scale.getType();
  ArrayRef<int64_t> shape = type.getShape();
  ArrayRef<int64_t> rows = cache.getShape().drop_back();
  bool ok = shape.empty() ||
            (shape.size() == 1 &&
             (isCompatible(shape[0], 1) || isCompatible(shape[0], heads)));
  if (!ok && shape.size() == rows.size()) {
    ok = true;
    for (auto [a, c] : llvm::zip(shape, rows))
      ok &= isCompatible(a, c);
  }
  if (!ok) {
    std::string rowsText;
    llvm::raw_string_ostream os(rowsText);
    llvm::interleave(
        rows, os, [&](int64_t d) { os << dimToString(d); }, ", ");
    return op->emitOpError()
           << name << " has shape " << scale.getType()
           << ": a KV scale is per tensor [1], per " << headWord << " ["
           << headSymbol << " = " << dimToString(heads)
           << "] or per token and head [" << rowsText
           << "] (the cache's shape without its last dimension)";
  }
  DenseElementsAttr values;
  if (matchPattern(scale, m_Constant(&values)))
    for (auto [i, v] : llvm::enumerate(values.getValues<APFloat>()))
      if (!v.isFinite() || v.isNegative() || v.isZero())
        return op->emitOpError()
               << name << "[" << i << "] = "
               << llvm::formatv("{0}", llvm::format("%g", v.convertToDouble()))
                      .str()
               << " must be positive and finite (a KV scale divides the "
                  "values it quantises)";
  return success();
}

/// Checks that two dimensions that denote the same quantity `what` agree.
static LogicalResult checkSameDim(Operation *op, StringRef what, NamedDim a,
                                  NamedDim b) {
  if (isCompatible(a.size, b.size))
    return success();
  return op->emitOpError() << what << " mismatch: " << a.tensor << " dim "
                           << a.index << " is " << a.size << " but " << b.tensor
                           << " dim " << b.index << " is " << b.size;
}

static LogicalResult checkRank(Operation *op, StringRef tensor, Value value,
                               int64_t rank, StringRef layout) {
  auto type = cast<ShapedType>(value.getType());
  if (type.getRank() == rank)
    return success();
  return op->emitOpError() << tensor << " must have rank " << rank << " "
                           << layout << ", got rank " << type.getRank();
}

/// Checks a tensor against an expected shape of named dimensions, e.g.
/// `q_pos` against [B, L]. `expected` holds (name, size) pairs.
static LogicalResult
checkShape(Operation *op, StringRef tensor, Value value,
           ArrayRef<std::pair<StringRef, int64_t>> expected) {
  auto type = cast<ShapedType>(value.getType());
  auto layout = [&] {
    std::string s = "[";
    llvm::interleave(
        expected, [&](const auto &d) { s += d.first.str(); },
        [&] { s += ", "; });
    return s + "]";
  };
  if (type.getRank() != static_cast<int64_t>(expected.size()))
    return op->emitOpError()
           << tensor << " must have shape " << layout() << " (rank "
           << expected.size() << "), got rank " << type.getRank();
  for (auto [i, d] : llvm::enumerate(expected)) {
    if (isCompatible(type.getDimSize(i), d.second))
      continue;
    return op->emitOpError() << tensor << " must have shape " << layout()
                             << ": dim " << i << " is " << type.getDimSize(i)
                             << " but " << d.first << " is " << d.second;
  }
  return success();
}

/// f8E4M3FN or f8E5M2: the element types of an FP8 KV cache.
static bool isFp8KvType(Type t) {
  return isa<Float8E4M3FNType, Float8E5M2Type>(t);
}

namespace {
/// The named sizes of an attention problem, read off Q, K, V.
struct AttentionDims {
  int64_t b, hq, hkv, l, s, d, dv;
};
} // namespace

/// Verifies Q [B,Hq,L,D], K [B,Hkv,S,D], V [B,Hkv,S,Dv], out [B,Hq,L,Dv],
/// their element types and the GQA ratio. Shared by attention and sdpa.
/// With a `blockTable` [B, max_pages], K and V are paged caches
/// [num_pages, page_size, Hkv, D|Dv] and S = max_pages * page_size.
/// With `qStart` [B + 1] (a ragged batch) Q and out are packed,
/// [1, Hq, T, D|Dv], and B is the sequence count: the batch dimension of
/// K and V (or of the block table) and dim 0 of q_start minus 1.
/// With `kStart` [B + 1] (ragged keys) K and V are packed, [1, Hkv, N, D|Dv];
/// with `cacheBatchIdx` [B] they are [C, Hkv, S, D|Dv] (any C): B is then
/// read off those operands instead of K and V.
/// With `latentDv` (the latent form) `v` is `k` and Dv is `latentDv`: the
/// value is the first Dv columns of the key.
static FailureOr<AttentionDims>
verifyQKVOut(Operation *op, Value q, Value k, Value v, Value out,
             Value blockTable = {}, Value qStart = {}, Value kStart = {},
             Value cacheBatchIdx = {},
             std::optional<int64_t> latentDv = std::nullopt) {
  const bool paged = static_cast<bool>(blockTable);
  const bool varlen = static_cast<bool>(qStart);
  const bool keyRows = kStart || cacheBatchIdx;
  if (failed(checkRank(op, "query", q, 4, "[B, Hq, L, D]")) ||
      failed(checkRank(op, "key", k, 4,
                       paged ? "[num_pages, page_size, Hkv, D]"
                             : "[B, Hkv, S, D]")) ||
      failed(checkRank(op, "value", v, 4,
                       paged ? "[num_pages, page_size, Hkv, Dv]"
                             : "[B, Hkv, S, Dv]")) ||
      failed(checkRank(op, "out", out, 4, "[B, Hq, L, Dv]")) ||
      (paged &&
       failed(checkRank(op, "block_table", blockTable, 2, "[B, max_pages]"))))
    return failure();

  Type elt = cast<ShapedType>(q.getType()).getElementType();
  Type kElt = cast<ShapedType>(k.getType()).getElementType();
  Type vElt = cast<ShapedType>(v.getType()).getElementType();
  if (isFp8KvType(kElt) || isFp8KvType(vElt)) {
    // An FP8 cache: K and V share one FP8 format, Q and out stay f32, f16
    // or bf16 (kvattn.attention only; the type constraint of sdpa refuses
    // FP8 already).
    if (kElt != vElt) {
      op->emitOpError() << "an FP8 KV cache stores key and value in one FP8 "
                           "format: key element type "
                        << kElt << ", value element type " << vElt;
      return failure();
    }
  } else {
    for (auto [name, value] :
         {std::pair<StringRef, Value>{"key", k}, {"value", v}})
      if (cast<ShapedType>(value.getType()).getElementType() != elt) {
        op->emitOpError() << name << " element type "
                          << cast<ShapedType>(value.getType()).getElementType()
                          << " must match the query element type " << elt;
        return failure();
      }
  }
  if (Type other = cast<ShapedType>(out.getType()).getElementType();
      other != elt) {
    op->emitOpError() << "out element type " << other
                      << " must match the query element type " << elt;
    return failure();
  }

  // Where B, Hkv and S live in K and V.
  NamedDim keyBatch =
      paged ? dimOf("block_table", blockTable, 0) : dimOf("key", k, 0);
  if (kStart) {
    if (failed(checkRank(op, "k_start", kStart, 1, "[B + 1]")))
      return failure();
    for (auto [name, value] :
         {std::pair<StringRef, Value>{"key", k}, {"value", v}})
      if (cast<ShapedType>(value.getType()).getDimSize(0) != 1) {
        op->emitOpError()
            << "with k_start the " << name
            << " is packed ([1, Hkv, N, D]): its dim 0 must be 1, got "
            << dimToString(cast<ShapedType>(value.getType()).getDimSize(0));
        return failure();
      }
    int64_t starts = cast<ShapedType>(kStart.getType()).getDimSize(0);
    if (starts == 0) {
      op->emitOpError() << "k_start must have B + 1 entries (at least 1), "
                           "got 0";
      return failure();
    }
    keyBatch = {"k_start (entries - 1)", 0,
                ShapedType::isDynamic(starts) ? ShapedType::kDynamic
                                              : starts - 1};
  } else if (cacheBatchIdx) {
    if (failed(checkRank(op, "cache_batch_idx", cacheBatchIdx, 1, "[B]")))
      return failure();
    keyBatch = dimOf("cache_batch_idx", cacheBatchIdx, 0);
  }
  const unsigned headIndex = paged ? 2 : 1;
  if (varlen) {
    if (failed(checkRank(op, "q_start", qStart, 1, "[B + 1]")))
      return failure();
    for (auto [name, value] :
         {std::pair<StringRef, Value>{"query", q}, {"out", out}})
      if (cast<ShapedType>(value.getType()).getDimSize(0) != 1) {
        op->emitOpError()
            << "with q_start the " << name
            << " is packed ([1, Hq, T, D]): its dim 0 must be 1, got "
            << dimToString(cast<ShapedType>(value.getType()).getDimSize(0));
        return failure();
      }
    int64_t starts = cast<ShapedType>(qStart.getType()).getDimSize(0);
    if (starts == 0) {
      op->emitOpError() << "q_start must have B + 1 entries (at least 1), "
                           "got 0";
      return failure();
    }
    NamedDim sequences{"q_start", 0,
                       ShapedType::isDynamic(starts) ? ShapedType::kDynamic
                                                     : starts - 1};
    if (!isCompatible(keyBatch.size, sequences.size)) {
      op->emitOpError() << "batch size B mismatch: " << keyBatch.tensor
                        << " dim " << keyBatch.index << " is " << keyBatch.size
                        << " but q_start has " << starts
                        << " entries (B + 1 = " << sequences.size + 1 << ")";
      return failure();
    }
  } else if (failed(checkSameDim(op, "batch size B", keyBatch,
                                 dimOf("query", q, 0)))) {
    return failure();
  }
  if (paged) {
    if (failed(checkSameDim(op, "pages num_pages", dimOf("value", v, 0),
                            dimOf("key", k, 0))) ||
        failed(checkSameDim(op, "page size", dimOf("value", v, 1),
                            dimOf("key", k, 1))))
      return failure();
  } else if (failed(checkSameDim(op, "batch size B", dimOf("value", v, 0),
                                 varlen || keyRows ? dimOf("key", k, 0)
                                                   : dimOf("query", q, 0)))) {
    return failure();
  }
  if (failed(checkSameDim(op, "head dim D", dimOf("key", k, 3),
                          dimOf("query", q, 3))) ||
      failed(checkSameDim(op, "kv heads Hkv", dimOf("value", v, headIndex),
                          dimOf("key", k, headIndex))) ||
      (!paged && failed(checkSameDim(op, "key length S", dimOf("value", v, 2),
                                     dimOf("key", k, 2)))) ||
      failed(checkSameDim(op, "batch size B", dimOf("out", out, 0),
                          dimOf("query", q, 0))) ||
      failed(checkSameDim(op, "query heads Hq", dimOf("out", out, 1),
                          dimOf("query", q, 1))) ||
      failed(checkSameDim(op, "query length L", dimOf("out", out, 2),
                          dimOf("query", q, 2))) ||
      failed(checkSameDim(op, "value head dim Dv", dimOf("out", out, 3),
                          latentDv ? NamedDim{"value_dim", 0, *latentDv}
                                   : dimOf("value", v, 3))))
    return failure();

  auto qt = cast<ShapedType>(q.getType());
  auto kt = cast<ShapedType>(k.getType());
  auto vt = cast<ShapedType>(v.getType());
  int64_t s = kt.getDimSize(2);
  if (paged) {
    int64_t maxPages = cast<ShapedType>(blockTable.getType()).getDimSize(1);
    int64_t pageSize = kt.getDimSize(1);
    s = ShapedType::isDynamic(maxPages) || ShapedType::isDynamic(pageSize)
            ? ShapedType::kDynamic
            : maxPages * pageSize;
    if (pageSize == 0) {
      op->emitOpError() << "page size must be positive, got 0";
      return failure();
    }
  }
  // B: the sequences. Packed, they are q_start's entries minus one (or the
  // batch of K, V or the table).
  int64_t batch = qt.getDimSize(0);
  if (varlen) {
    int64_t starts = cast<ShapedType>(qStart.getType()).getDimSize(0);
    batch = ShapedType::isStatic(starts) ? starts - 1 : keyBatch.size;
  }
  AttentionDims dims{batch,
                     qt.getDimSize(1),
                     kt.getDimSize(headIndex),
                     qt.getDimSize(2),
                     s,
                     qt.getDimSize(3),
                     latentDv ? *latentDv : vt.getDimSize(3)};
  if (dims.d == 0) {
    op->emitOpError() << "head dim D must be positive, got 0";
    return failure();
  }
  if (dims.dv == 0) {
    op->emitOpError() << "value head dim Dv must be positive, got 0";
    return failure();
  }
  if (dims.hkv == 0) {
    op->emitOpError() << "kv heads Hkv must be positive, got 0";
    return failure();
  }
  if (ShapedType::isStatic(dims.hq) && ShapedType::isStatic(dims.hkv) &&
      dims.hq % dims.hkv != 0) {
    op->emitOpError() << "query heads Hq = " << dims.hq
                      << " must be a multiple of kv heads Hkv = " << dims.hkv
                      << " (GQA groups query heads evenly)";
    return failure();
  }
  return dims;
}

/// Checks that `mask` broadcasts to [B, Hq, L, S]: rank 2 to 4, aligned on
/// the right, each static dimension 1 or the full size.
static LogicalResult verifyMaskShape(Operation *op, Value mask,
                                     const AttentionDims &dims) {
  auto type = cast<ShapedType>(mask.getType());
  int64_t rank = type.getRank();
  if (rank < 2 || rank > 4)
    return op->emitOpError()
           << "mask must have rank 2 to 4 (broadcastable to [B, Hq, L, S]), "
              "got rank "
           << rank;
  const std::pair<StringRef, int64_t> full[4] = {
      {"B", dims.b}, {"Hq", dims.hq}, {"L", dims.l}, {"S", dims.s}};
  for (int64_t i = 0; i < rank; ++i) {
    int64_t size = type.getDimSize(i);
    const auto &target = full[4 - rank + i];
    if (size == 1 || isCompatible(size, target.second))
      continue;
    return op->emitOpError()
           << "mask dim " << i << " is " << size << ", which does not "
           << "broadcast to " << target.first << " = "
           << dimToString(target.second) << " (must be 1 or "
           << dimToString(target.second) << ")";
  }
  return success();
}

static LogicalResult verifyScale(Operation *op, std::optional<APFloat> scale) {
  if (scale && !scale->isFinite())
    return op->emitOpError()
           << "scale must be finite, got " << scale->convertToDouble();
  return success();
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

static LogicalResult verifyWindowAndSoftcap(Operation *op,
                                            std::optional<int64_t> window,
                                            std::optional<APFloat> softcap) {
  if (window && *window <= 0)
    return op->emitOpError() << "window must be positive, got " << *window;
  if (softcap &&
      (!softcap->isFinite() || softcap->isNegative() || softcap->isZero()))
    return op->emitOpError() << "softcap must be positive and finite, got "
                             << softcap->convertToDouble();
  return success();
}

/// The latent form (DeepSeek MLA): value_dim without a value operand, V the
/// first value_dim columns of key, 1 <= value_dim <= D.
LogicalResult AttentionOp::verifyLatentForm() {
  std::optional<int64_t> dv = getValueDim();
  if (dv && getValue())
    return emitOpError()
           << "value_dim = " << *dv
           << " declares the latent form (V is the first value_dim columns "
              "of key), but a value operand is given: drop the value, or "
              "drop value_dim";
  if (!dv && !getValue())
    return emitOpError() << "needs a value operand, or value_dim for the "
                            "latent form (V is the first value_dim columns of "
                            "key)";
  if (!dv)
    return success();
  int64_t d = getKey().getType().getDimSize(3);
  if (*dv < 1)
    return emitOpError() << "value_dim must be positive, got " << *dv;
  if (ShapedType::isStatic(d) && *dv > d)
    return emitOpError() << "value_dim = " << *dv
                         << " exceeds the key's head dim D = " << d
                         << ": the latent form's V is the first value_dim "
                            "columns of key (Dv <= D)";
  if (getVScale())
    return emitOpError() << "v_scale with the latent form: V is read from the "
                            "key cache, dequantised with k_scale (drop "
                            "v_scale)";
  return success();
}

LogicalResult AttentionOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyLatentForm()))
    return failure();
  FailureOr<AttentionDims> maybeDims = verifyQKVOut(
      op, getQuery(), getKey(), getValueSource(), getOut(), getBlockTable(),
      getQStart(), getKStart(), getCacheBatchIdx(), getValueDim());
  if (failed(maybeDims))
    return failure();
  const AttentionDims &dims = *maybeDims;
  if (hasKeyStarts() || hasCacheBatchIdx()) {
    StringRef name = hasKeyStarts() ? "k_start" : "cache_batch_idx";
    if (hasKeyStarts() && hasCacheBatchIdx())
      return emitOpError() << "k_start (packed keys) does not combine with "
                              "cache_batch_idx (a batch-to-cache map): the "
                              "packed keys have one cache row";
    if (isPaged())
      return emitOpError()
             << name
             << " does not combine with block_table: a paged cache maps "
                "each sequence to its pages already";
    if (getKeyValid())
      return emitOpError() << name << " does not combine with key_valid: "
                           << (hasKeyStarts()
                                   ? "give each sequence's keys as rows of "
                                     "the packed buffer and its length as "
                                     "kv_len"
                                   : "bound each batch's keys with kv_len");
    if (hasKeyStarts() && (getQPos() || getKPos()))
      return emitOpError()
             << "k_start (packed keys) does not combine with explicit "
                "positions (q_pos/k_pos): give each sequence's first key "
                "position as k_offset";
    if (hasKeyStarts() && getMask())
      return emitOpError()
             << "k_start (packed keys) does not combine with a mask: use "
                "causal, window and kv_len";
    if (Value idx = getCacheBatchIdx())
      if (failed(checkShape(op, "cache_batch_idx", idx, {{"B", dims.b}})))
        return failure();
  }
  if (isVarlen()) {
    // Explicit positions and a mask are indexed [B, L, ...] by a batch's
    // own rows; packed rows have no such index.
    if (getQPos() || getKPos())
      return emitOpError()
             << "q_start (packed rows) does not combine with explicit "
                "positions (q_pos/k_pos): give each sequence's first "
                "position as q_offset";
    if (getMask())
      return emitOpError()
             << "q_start (packed rows) does not combine with a mask: use "
                "causal, window, kv_len and key_valid [B, S]";
  }
  if (isPaged()) {
    if (!getKvLen())
      return emitOpError() << "paged attention (block_table) needs kv_len: "
                              "the sequence lengths bound the pages read";
    if (failed(verifyConstantBlockTable()))
      return failure();
  }

  if (Value lse = getLse()) {
    if (failed(checkShape(op, "lse", lse,
                          {{isVarlen() ? "1" : "B", isVarlen() ? 1 : dims.b},
                           {"Hq", dims.hq},
                           {isVarlen() ? "T" : "L", dims.l}})))
      return failure();
  }

  // Position forms.
  bool offsetForm = getQOffset() || getKOffset();
  bool explicitForm = getQPos() || getKPos();
  if (offsetForm && explicitForm)
    return emitOpError()
           << "positions are given both in offset form (q_offset/k_offset) "
              "and in explicit form (q_pos/k_pos); use one form";
  if (getKOffset() && !getQOffset())
    return emitOpError() << "k_offset requires q_offset";
  if (static_cast<bool>(getQPos()) != static_cast<bool>(getKPos()))
    return emitOpError()
           << "the explicit form needs both q_pos and k_pos, got only "
           << (getQPos() ? "q_pos" : "k_pos");
  if (std::optional<int64_t> right = getWindowRight()) {
    if (*right < 0)
      return emitOpError() << "window_right must be non-negative, got "
                           << *right;
    if (getCausal())
      return emitOpError()
             << "window_right = " << *right
             << " with causal: causal allows no key after the query (drop "
                "window_right, or drop causal for a two-sided window)";
  }
  if ((getCausal() || getWindow() || getWindowRight() || getAlibiSlopes()) &&
      !offsetForm && !explicitForm)
    return emitOpError()
           << (getCausal()        ? "causal"
               : getWindow()      ? "window"
               : getWindowRight() ? "window_right"
                                  : "alibi_slopes (ALiBi)")
           << " attention needs query and key positions: give q_offset "
              "(and optionally k_offset) or q_pos and k_pos";

  if (Value v = getQOffset())
    if (failed(checkShape(op, "q_offset", v, {{"B", dims.b}})))
      return failure();
  if (Value v = getKOffset())
    if (failed(checkShape(op, "k_offset", v, {{"B", dims.b}})))
      return failure();
  if (Value v = getQPos())
    if (failed(checkShape(op, "q_pos", v, {{"B", dims.b}, {"L", dims.l}})))
      return failure();
  if (Value v = getKPos())
    if (failed(checkShape(op, "k_pos", v, {{"B", dims.b}, {"S", dims.s}})))
      return failure();
  if (Value v = getKvLen())
    if (failed(checkShape(op, "kv_len", v, {{"B", dims.b}})))
      return failure();
  if (Value v = getKeyValid())
    if (failed(checkShape(op, "key_valid", v, {{"B", dims.b}, {"S", dims.s}})))
      return failure();
  if (Value v = getMask())
    if (failed(verifyMaskShape(op, v, dims)))
      return failure();
  for (auto [name, v] : {std::pair{"sinks", getSinks()},
                         std::pair{"alibi_slopes", getAlibiSlopes()}}) {
    if (!v)
      continue;
    Type elt = cast<ShapedType>(v.getType()).getElementType();
    if (!elt.isF32())
      return emitOpError() << name << " must be an f32 tensor [Hq] (one value "
                           << "per query head), got " << v.getType();
    if (failed(checkShape(op, name, v, {{"Hq", dims.hq}})))
      return failure();
  }

  if (Value tree = getTreeParents()) {
    if (hasKeyStarts() || hasCacheBatchIdx())
      return emitOpError()
             << "tree_parents does not combine with "
             << (hasKeyStarts() ? "k_start" : "cache_batch_idx")
             << " yet: a tree's draft keys are the last rows of its "
                "sequence's own cache";
    if (!isVarlen())
      return emitOpError()
             << "tree_parents needs q_start: each sequence's draft tokens "
                "are the packed rows of a ragged batch, one tree per sequence";
    if (!getQOffset())
      return emitOpError() << "tree_parents needs q_offset: a draft token's "
                              "position is q_offset[b] + its depth in the tree";
    if (failed(checkShape(op, "tree_parents", tree, {{"T", dims.l}})))
      return failure();
  }

  if (failed(verifyWindowAndSoftcap(op, getWindow(), getSoftcap())))
    return failure();
  if (failed(verifyScale(op, getScale())))
    return failure();
  if (failed(verifyKvScales()))
    return failure();
  if (failed(verifyRope(dims.d, dims.b, dims.s)))
    return failure();
  if (failed(verifyConstantKeyRows()))
    return failure();
  if (failed(verifyConstantQueryStarts()))
    return failure();
  return verifyConstantTreeParents();
}

LogicalResult AttentionOp::verifyKvScales() {
  const bool fp8 = isFp8KvType(getKey().getType().getElementType());
  for (auto [name, scale] :
       {std::pair<StringRef, Value>{"k_scale", getKScale()},
        {"v_scale", getVScale()}}) {
    if (!fp8 && scale)
      return emitOpError()
             << name << " dequantises an FP8 cache, but key and value are "
             << getKey().getType().getElementType()
             << ": drop it, or store K and V as f8E4M3FN or f8E5M2";
    // The latent form's V is the key cache, read with k_scale.
    if (fp8 && !scale && name == "v_scale" && isLatent())
      continue;
    if (fp8 && !scale)
      return emitOpError()
             << "an FP8 KV cache (" << getKey().getType().getElementType()
             << ") needs " << name
             << " (f32, per tensor [1], per KV head [Hkv] or per token and "
                "head: the cache's shape without its last dimension)";
    if (!scale)
      continue;
    auto cache = cast<RankedTensorType>(
        (name == "k_scale" ? getKey() : getValueSource()).getType());
    if (failed(checkKvScale(*this, name, scale, cache,
                            cache.getDimSize(getKeyHeadDim()), "KV head",
                            "Hkv")))
      return failure();
  }
  return success();
}

/// Applies the tree rules (kvattn/Support/TreeParents.h) when tree_parents
/// and q_start are constants; the position rules with constant q_offset
/// and kv_len (or a static S) and k_offset too.
LogicalResult AttentionOp::verifyConstantTreeParents() {
  DenseIntElementsAttr starts, parents;
  if (!getTreeParents() || !matchPattern(getQStart(), m_Constant(&starts)) ||
      !matchPattern(getTreeParents(), m_Constant(&parents)))
    return success();
  auto values = [](DenseIntElementsAttr attr) {
    return llvm::to_vector(
        llvm::map_range(attr.getValues<APInt>(),
                        [](const APInt &v) { return v.getSExtValue(); }));
  };
  SmallVector<int64_t> cu = values(starts), parent = values(parents), qOff,
                       kOff, len;
  DenseIntElementsAttr attr;
  bool knownQOffset = matchPattern(getQOffset(), m_Constant(&attr));
  if (knownQOffset)
    qOff = values(attr);
  bool knownKOffset = !getKOffset();
  if (getKOffset() && matchPattern(getKOffset(), m_Constant(&attr))) {
    kOff = values(attr);
    knownKOffset = true;
  }
  bool knownLen = false;
  if (getKvLen() && matchPattern(getKvLen(), m_Constant(&attr))) {
    len = values(attr);
    knownLen = true;
  }
  ::mlir::kvattn::TreeParentsView view;
  view.batch = static_cast<int64_t>(cu.size()) - 1;
  view.start = [&](int64_t slot) { return cu[slot]; };
  view.parent = [&](int64_t row) { return parent[row]; };
  int64_t keys = getLogicalKeyLength();
  view.keys = ShapedType::isDynamic(keys) ? -1 : keys;
  if (getKvLen()) {
    view.kvLen = [&](int64_t b) -> std::optional<int64_t> {
      if (!knownLen)
        return std::nullopt;
      return len[b];
    };
  }
  if (knownQOffset && knownKOffset) {
    view.qOffset = [&](int64_t b) -> std::optional<int64_t> { return qOff[b]; };
    view.kOffset = [&](int64_t b) -> std::optional<int64_t> {
      return kOff.empty() ? 0 : kOff[b];
    };
  }
  // The q_start rules hold (verifyConstantQueryStarts ran first), but only
  // a static T says that every start is inside the parents.
  for (int64_t c : cu)
    if (c < 0 || c > static_cast<int64_t>(parent.size()))
      return success();
  ::mlir::kvattn::Status status = ::mlir::kvattn::checkTreeParents(view);
  if (!status)
    return emitOpError() << "invalid tree_parents: " << status.message();
  return success();
}

/// Applies the k_start and cache_batch_idx rules (kvattn/Support/KeyRows.h)
/// to constant operands (with a constant kv_len, also that each sequence
/// reads only its own packed rows).
LogicalResult AttentionOp::verifyConstantKeyRows() {
  auto values = [](DenseIntElementsAttr attr) {
    return llvm::to_vector(
        llvm::map_range(attr.getValues<APInt>(),
                        [](const APInt &v) { return v.getSExtValue(); }));
  };
  DenseIntElementsAttr attr;
  if (hasKeyStarts() && matchPattern(getKStart(), m_Constant(&attr))) {
    SmallVector<int64_t> starts = values(attr), len;
    if (getKvLen() && matchPattern(getKvLen(), m_Constant(&attr)))
      len = values(attr);
    ::mlir::kvattn::KeyStartsView view;
    view.batch = static_cast<int64_t>(starts.size()) - 1;
    view.start = [&](int64_t slot) { return starts[slot]; };
    int64_t rows = getKey().getType().getDimSize(2);
    view.rows = ShapedType::isDynamic(rows) ? -1 : rows;
    if (!len.empty())
      view.kvLen = [&](int64_t b) -> std::optional<int64_t> { return len[b]; };
    ::mlir::kvattn::Status status = ::mlir::kvattn::checkKeyStarts(view);
    if (!status)
      return emitOpError() << "invalid k_start: " << status.message();
  }
  if (hasCacheBatchIdx() &&
      matchPattern(getCacheBatchIdx(), m_Constant(&attr))) {
    SmallVector<int64_t> index = values(attr);
    ::mlir::kvattn::CacheBatchIndexView view;
    view.batch = static_cast<int64_t>(index.size());
    view.index = [&](int64_t b) { return index[b]; };
    int64_t rows = getKey().getType().getDimSize(0);
    view.cacheRows = ShapedType::isDynamic(rows) ? -1 : rows;
    ::mlir::kvattn::Status status = ::mlir::kvattn::checkCacheBatchIndex(view);
    if (!status)
      return emitOpError() << "invalid cache_batch_idx: " << status.message();
  }
  return success();
}

/// Whether two rotary embeddings rotate alike (f32_query only says where
/// the query is rounded). Tables are compared by the caller.
static bool sameRotation(RopeAttr a, RopeAttr b) {
  return a.getRotaryDim() == b.getRotaryDim() &&
         a.getThetaValue() == b.getThetaValue() &&
         a.getInterleaved() == b.getInterleaved();
}

/// The rules of RoPE's tables, for both ops: rotary_cos and rotary_sin come
/// together, exactly with a `rope` without theta, as [P, rotary_dim / 2]
/// f32/f16/bf16 of one type. `rows` is P (dynamic when unknown or without
/// tables).
static LogicalResult verifyRotaryTables(Operation *op, RopeAttr rope, Value cos,
                                        Value sin, int64_t &rows) {
  rows = ShapedType::kDynamic;
  if (static_cast<bool>(cos) != static_cast<bool>(sin))
    return op->emitOpError()
           << "rotary_cos and rotary_sin come together: "
           << (cos ? "rotary_sin" : "rotary_cos") << " is missing";
  if (!cos) {
    if (rope && rope.usesTables())
      return op->emitOpError()
             << "rope = " << rope
             << " has no theta: its cosines and sines come from the tables "
                "rotary_cos and rotary_sin, which are missing";
    return success();
  }
  if (!rope)
    return op->emitOpError() << "rotary_cos and rotary_sin are RoPE's tables: "
                                "they need rope (#kvattn.rope without theta)";
  if (!rope.usesTables())
    return op->emitOpError()
           << "rope = " << rope
           << " has a theta, but rotary_cos and rotary_sin replace the "
              "formula: drop theta";
  auto type = cast<RankedTensorType>(cos.getType());
  if (type.getRank() != 2)
    return op->emitOpError() << "rotary_cos must have rank 2 [P, rotary_dim "
                                "/ 2] (row = position), got rank "
                             << type.getRank();
  if (!isa<Float32Type, Float16Type, BFloat16Type>(type.getElementType()))
    return op->emitOpError() << "rotary_cos must hold f32, f16 or bf16, got "
                             << type.getElementType();
  if (sin.getType() != type)
    return op->emitOpError() << "rotary_sin has type " << sin.getType()
                             << " but rotary_cos has type " << type
                             << ": the tables have one type";
  const int64_t half = rope.getRotaryDim() / 2;
  if (ShapedType::isStatic(type.getDimSize(1)) && type.getDimSize(1) != half)
    return op->emitOpError() << "rotary_cos has " << type.getDimSize(1)
                             << " columns but rope's rotary_dim / 2 = " << half;
  rows = type.getDimSize(0);
  return success();
}

/// The integers of a constant operand, or an empty vector.
static SmallVector<int64_t> constantInts(Value v) {
  SmallVector<int64_t> values;
  DenseIntElementsAttr attr;
  if (v && matchPattern(v, m_Constant(&attr)))
    for (const APInt &e : attr.getValues<APInt>())
      values.push_back(e.getSExtValue());
  return values;
}

/// The block-table rules (kvattn/Support/BlockTable.h) of `tableValue` over
/// the paged cache `pool` when the table is a constant, with the lengths of
/// `lengthValue` where they are constant too. `prefix`: the table is one
/// sequence's pages (a cascade's `prefix_pages`, length `prefix_len`).
/// Errors read "invalid <what>: ...".
static LogicalResult checkConstantBlockTable(Operation *op, StringRef what,
                                             Value tableValue,
                                             Value lengthValue, Value pool,
                                             bool prefix) {
  DenseIntElementsAttr table;
  if (!tableValue || !matchPattern(tableValue, m_Constant(&table)))
    return success();
  auto poolType = cast<ShapedType>(pool.getType());
  if (ShapedType::isDynamic(poolType.getDimSize(1)))
    return success(); // the page size is needed for every rule but range
  SmallVector<int64_t> entries = constantInts(tableValue),
                       lengths = constantInts(lengthValue);
  auto tableType = cast<ShapedType>(table.getType());
  ::mlir::kvattn::BlockTableView view;
  if (prefix) {
    view.name = "prefix_pages";
    view.lengthName = "prefix_len";
    view.flat = true;
  }
  view.batch = prefix ? 1 : tableType.getDimSize(0);
  view.maxPages = tableType.getDimSize(prefix ? 0 : 1);
  view.page = [&](int64_t b, int64_t slot) {
    return entries[b * view.maxPages + slot];
  };
  if (static_cast<int64_t>(lengths.size()) == view.batch)
    view.kvLen = [&](int64_t b) -> std::optional<int64_t> {
      return lengths[b];
    };
  int64_t numPages = poolType.getDimSize(0);
  ::mlir::kvattn::Status status = ::mlir::kvattn::checkBlockTable(
      view, ShapedType::isDynamic(numPages) ? -1 : numPages,
      poolType.getDimSize(1));
  if (!status)
    return op->emitOpError() << "invalid " << what << ": " << status.message();
  return success();
}

/// Position `p` of batch `b`, row `i` within RoPE's tables of `rows` rows.
static LogicalResult checkTableRow(Operation *op, int64_t rows, int64_t b,
                                   int64_t i, int64_t p) {
  if (p < rows)
    return success();
  return op->emitOpError() << rotaryTableMessage(b, i, p, rows);
}

/// rotary_dim <= D, for both ops.
static LogicalResult verifyRotaryDim(Operation *op, RopeAttr rope, int64_t d) {
  if (rope && ShapedType::isStatic(d) && rope.getRotaryDim() > d)
    return op->emitOpError() << "rope: rotary_dim = " << rope.getRotaryDim()
                             << " exceeds the head dim D = " << d;
  return success();
}

LogicalResult AttentionOp::verifyRope(int64_t d, int64_t b, int64_t s) {
  Operation *op = getOperation();
  RopeAttr rope = getRopeAttr();
  if (failed(verifyRotaryDim(op, rope, d)))
    return failure();
  if (rope && getQueryRotated())
    return emitOpError() << "the query is declared rotated (query_rotated) "
                            "and rope would rotate it again";
  if (rope && getTreeParents())
    return emitOpError() << "rope does not combine with tree_parents yet: a "
                            "draft token's position is its depth in the tree";
  if (rope && !hasOffsetPositions() && !hasExplicitPositions())
    return emitOpError() << "rope rotates the query at its positions: give "
                            "q_offset or q_pos and k_pos";
  int64_t rows;
  if (failed(
          verifyRotaryTables(op, rope, getRotaryCos(), getRotarySin(), rows)))
    return failure();
  // Keys rotated by kvattn.append meet a query rotated the same way (with
  // tables: the same tables).
  if (auto append = getKey().getDefiningOp<AppendOp>()) {
    if (RopeAttr keys = append.getRopeAttr()) {
      if (!rope && !getQueryRotated())
        return emitOpError()
               << "the keys were rotated by kvattn.append (rope = " << keys
               << ") but the query is not: give rope (the same) or declare "
                  "query_rotated";
      if (rope && !sameRotation(rope, keys))
        return emitOpError()
               << "rope = " << rope
               << " differs from the keys' rotation (rope = " << keys
               << " in kvattn.append)";
      if (rope && (getRotaryCos() != append.getRotaryCos() ||
                   getRotarySin() != append.getRotarySin()))
        return emitOpError() << "rotary_cos and rotary_sin must be the "
                                "tables kvattn.append rotated the keys with "
                                "(the same values)";
    }
  }
  // Constant positions within the tables.
  if (ShapedType::isStatic(rows)) {
    const int64_t l = getQuery().getType().getDimSize(2);
    if (hasExplicitPositions()) {
      SmallVector<int64_t> pos = constantInts(getQPos());
      auto posType = getQPos().getType();
      if (!pos.empty() && posType.hasStaticShape())
        for (int64_t n = 0; n < static_cast<int64_t>(pos.size()); ++n)
          if (failed(checkTableRow(op, rows, n / posType.getDimSize(1),
                                   n % posType.getDimSize(1), pos[n])))
            return failure();
    } else if (hasOffsetPositions()) {
      SmallVector<int64_t> off = constantInts(getQOffset());
      SmallVector<int64_t> starts = constantInts(getQStart());
      const bool known = isVarlen() ? starts.size() == off.size() + 1
                                    : ShapedType::isStatic(l);
      for (int64_t bi = 0; known && bi < static_cast<int64_t>(off.size());
           ++bi) {
        const int64_t lb = isVarlen() ? starts[bi + 1] - starts[bi] : l;
        if (lb <= 0 || off[bi] + lb - 1 < rows)
          continue;
        const int64_t i = std::max<int64_t>(0, rows - off[bi]);
        if (failed(checkTableRow(op, rows, bi, i, off[bi] + i)))
          return failure();
      }
    }
  }
  Value record = getKRopePos();
  if (!record)
    return success();
  if (hasKeyStarts() || hasCacheBatchIdx())
    return emitOpError() << "k_rope_pos is not taken with "
                         << (hasKeyStarts() ? "k_start" : "cache_batch_idx")
                         << " yet: the record is indexed [B, S] like a "
                            "static cache";
  if (isPaged() || isVarlen())
    return emitOpError() << "k_rope_pos is not taken with "
                         << (isPaged() ? "block_table" : "q_start")
                         << " (a [B, S] record of a static cache)";
  if (!hasOffsetPositions() && !hasExplicitPositions())
    return emitOpError() << "k_rope_pos binds the keys to their positions: "
                            "give q_offset (and k_offset) or q_pos and k_pos";
  if (failed(checkShape(op, "k_rope_pos", record, {{"B", b}, {"S", s}})))
    return failure();
  // Constant record and key positions: every valid key must be attended at
  // the position it was rotated at.
  DenseIntElementsAttr recorded, kOffset, kPos, kvLen;
  if (!matchPattern(record, m_Constant(&recorded)) || getKeyValid())
    return success();
  if (hasExplicitPositions()) {
    if (!matchPattern(getKPos(), m_Constant(&kPos)))
      return success();
  } else if (getKOffset() && !matchPattern(getKOffset(), m_Constant(&kOffset)))
    return success();
  if (getKvLen() && !matchPattern(getKvLen(), m_Constant(&kvLen)))
    return success();
  auto shape = recorded.getType().getShape();
  SmallVector<int64_t> rec, off, pos, len;
  for (const APInt &v : recorded.getValues<APInt>())
    rec.push_back(v.getSExtValue());
  if (kOffset)
    for (const APInt &v : kOffset.getValues<APInt>())
      off.push_back(v.getSExtValue());
  if (kPos)
    for (const APInt &v : kPos.getValues<APInt>())
      pos.push_back(v.getSExtValue());
  if (kvLen)
    for (const APInt &v : kvLen.getValues<APInt>())
      len.push_back(v.getSExtValue());
  for (int64_t bi = 0; bi < shape[0]; ++bi) {
    int64_t end = kvLen ? std::min(len[bi], shape[1]) : shape[1];
    for (int64_t j = 0; j < end; ++j) {
      int64_t kp = kPos ? pos[bi * shape[1] + j] : (kOffset ? off[bi] : 0) + j;
      int64_t at = rec[bi * shape[1] + j];
      if (kp != at)
        return emitOpError() << "k_rope_pos: the key of batch " << bi
                             << ", slot " << j << " was rotated at position "
                             << at << " but is attended at position " << kp;
    }
  }
  return success();
}

/// Applies the q_start rules (kvattn/Support/QueryStarts.h) when q_start is
/// a constant; with constant q_offset and kv_len (and k_offset) too, also
/// that a causal sequence's rows find their own keys.
LogicalResult AttentionOp::verifyConstantQueryStarts() {
  DenseIntElementsAttr starts;
  if (!isVarlen() || !matchPattern(getQStart(), m_Constant(&starts)))
    return success();
  auto values = [](DenseIntElementsAttr attr) {
    return llvm::to_vector(
        llvm::map_range(attr.getValues<APInt>(),
                        [](const APInt &v) { return v.getSExtValue(); }));
  };
  SmallVector<int64_t> cu = values(starts), qOff, kOff, len;
  DenseIntElementsAttr attr;
  if (getQOffset() && matchPattern(getQOffset(), m_Constant(&attr)))
    qOff = values(attr);
  if (getKOffset() && matchPattern(getKOffset(), m_Constant(&attr)))
    kOff = values(attr);
  if (getKvLen() && matchPattern(getKvLen(), m_Constant(&attr)))
    len = values(attr);
  ::mlir::kvattn::QueryStartsView view;
  view.batch = static_cast<int64_t>(cu.size()) - 1;
  view.start = [&](int64_t slot) { return cu[slot]; };
  int64_t rows = getQuery().getType().getDimSize(2);
  view.rows = ShapedType::isDynamic(rows) ? -1 : rows;
  auto lookup =
      [&](const SmallVector<int64_t> &v,
          bool given) -> std::function<std::optional<int64_t>(int64_t)> {
    if (!given)
      return nullptr;
    return [&v](int64_t b) -> std::optional<int64_t> {
      if (v.empty())
        return std::nullopt;
      return v[b];
    };
  };
  view.qOffset = lookup(qOff, static_cast<bool>(getQOffset()));
  view.kvLen = lookup(len, static_cast<bool>(getKvLen()));
  view.kOffset = getKOffset()
                     ? lookup(kOff, true)
                     : std::function<std::optional<int64_t>(int64_t)>();
  ::mlir::kvattn::Status status = ::mlir::kvattn::checkQueryStarts(view);
  if (!status)
    return emitOpError() << "invalid q_start: " << status.message();
  return success();
}

/// Applies the block-table rules (kvattn/Support/BlockTable.h) when the
/// table is a constant; with a constant kv_len too, also that the lengths
/// fit the pages.
LogicalResult AttentionOp::verifyConstantBlockTable() {
  return checkConstantBlockTable(getOperation(), "block table", getBlockTable(),
                                 getKvLen(), getKey(),
                                 /*prefix=*/false);
}

int64_t AttentionOp::getLogicalKeyLength() {
  auto keyType = getKey().getType();
  if (!isPaged())
    return keyType.getDimSize(2);
  int64_t maxPages = getBlockTable().getType().getDimSize(1);
  int64_t pageSize = keyType.getDimSize(1);
  if (ShapedType::isDynamic(maxPages) || ShapedType::isDynamic(pageSize))
    return ShapedType::kDynamic;
  return maxPages * pageSize;
}

std::optional<double> AttentionOp::getEffectiveScale() {
  if (std::optional<APFloat> scale = getScale())
    return scale->convertToDouble();
  int64_t d = getQuery().getType().getDimSize(3);
  if (ShapedType::isDynamic(d))
    return std::nullopt;
  return 1.0 / std::sqrt(static_cast<double>(d));
}

//===----------------------------------------------------------------------===//
// SdpaOp
//===----------------------------------------------------------------------===//

LogicalResult SdpaOp::verify() {
  Operation *op = getOperation();
  FailureOr<AttentionDims> dims =
      verifyQKVOut(op, getQuery(), getKey(), getValue(), getOut());
  if (failed(dims))
    return failure();
  if (Value mask = getMask()) {
    if (getCausal())
      return emitOpError()
             << "mask and causal are exclusive (as in torch SDPA): fold the "
                "causal rule into the mask, or drop the mask";
    if (failed(verifyMaskShape(op, mask, *dims)))
      return failure();
  }
  if (Value lse = getLse())
    if (failed(checkShape(op, "lse", lse,
                          {{"B", dims->b}, {"Hq", dims->hq}, {"L", dims->l}})))
      return failure();
  if (failed(verifyWindowAndSoftcap(op, getWindow(), getSoftcap())))
    return failure();
  if (getWindow() && !getCausal())
    return emitOpError() << "window needs causal (the window is measured "
                            "back from each row's causal position)";
  return verifyScale(op, getScale());
}

//===----------------------------------------------------------------------===//
// AppendOp
//===----------------------------------------------------------------------===//

LogicalResult AppendOp::verify() {
  Operation *op = getOperation();
  const bool paged = isPaged();
  if (failed(
          checkRank(op, "cache", getCache(), 4,
                    paged ? "[num_pages, page_size, H, D]" : "[B, H, C, D]")) ||
      failed(checkRank(op, "update", getUpdate(), 4, "[B, H, L, D]")) ||
      (paged && failed(checkRank(op, "block_table", getBlockTable(), 2,
                                 "[B, max_pages]"))))
    return failure();
  if (getSkipPadding() && !paged)
    return emitOpError() << "skip_padding skips the tokens whose block-table "
                            "entry is -1: it needs block_table (a paged "
                            "cache)";
  auto cacheType = cast<ShapedType>(getCache().getType());
  auto updateType = cast<ShapedType>(getUpdate().getType());
  if (failed(verifyKvScale()))
    return failure();
  if (!hasFp8Cache() &&
      cacheType.getElementType() != updateType.getElementType())
    return emitOpError() << "update element type "
                         << updateType.getElementType()
                         << " must match the cache element type "
                         << cacheType.getElementType();
  // Where B and H live: the cache's dims 0 and 1, or, paged, the table's
  // dim 0 and the pages' dim 2.
  const NamedDim batch = paged ? dimOf("block_table", getBlockTable(), 0)
                               : dimOf("cache", getCache(), 0);
  if (failed(checkSameDim(op, "batch size B", dimOf("update", getUpdate(), 0),
                          batch)) ||
      failed(checkSameDim(op, "heads H", dimOf("update", getUpdate(), 1),
                          dimOf("cache", getCache(), paged ? 2 : 1))) ||
      failed(checkSameDim(op, "head dim D", dimOf("update", getUpdate(), 3),
                          dimOf("cache", getCache(), 3))))
    return failure();
  if (updateType.getDimSize(3) == 0)
    return emitOpError() << "head dim D must be positive, got 0";
  const int64_t b =
      ShapedType::isStatic(batch.size) ? batch.size : updateType.getDimSize(0);
  if (failed(checkShape(op, "pos", getPos(), {{"B", b}})))
    return failure();
  if (failed(verifyRotaryDim(op, getRopeAttr(), updateType.getDimSize(3))))
    return failure();
  int64_t rows;
  if (failed(verifyRotaryTables(op, getRopeAttr(), getRotaryCos(),
                                getRotarySin(), rows)))
    return failure();
  if (ShapedType::isStatic(rows) &&
      ShapedType::isStatic(updateType.getDimSize(2))) {
    // Constant positions within the tables: token t of batch b at
    // pos[b] + t.
    const int64_t l = updateType.getDimSize(2);
    SmallVector<int64_t> pos = constantInts(getPos());
    for (int64_t bi = 0; bi < static_cast<int64_t>(pos.size()); ++bi) {
      if (l <= 0 || pos[bi] < 0 || pos[bi] + l - 1 < rows)
        continue;
      const int64_t t = std::max<int64_t>(0, rows - pos[bi]);
      if (failed(checkTableRow(op, rows, bi, t, pos[bi] + t)))
        return failure();
    }
  }
  if (Value record = getRopePos()) {
    if (!getRopeAttr())
      return emitOpError() << "rope_pos records the positions the keys were "
                              "rotated at: it needs rope";
    if (paged)
      return emitOpError() << "rope_pos is not taken with block_table (a "
                              "[B, C] record of a static cache)";
    if (failed(checkShape(op, "rope_pos", record,
                          {{"B", b}, {"C", cacheType.getDimSize(2)}})))
      return failure();
  }
  int64_t l = updateType.getDimSize(2);
  if (!paged) {
    int64_t c = cacheType.getDimSize(2);
    if (ShapedType::isStatic(l) && ShapedType::isStatic(c) && l > c)
      return emitOpError() << "update writes L = " << l
                           << " rows but the cache capacity is C = " << c;
    return success();
  }

  int64_t pageSize = cacheType.getDimSize(1);
  if (pageSize == 0)
    return emitOpError() << "page size must be positive, got 0";
  int64_t maxPages = getBlockTable().getType().getDimSize(1);
  if (ShapedType::isStatic(l) && ShapedType::isStatic(pageSize) &&
      ShapedType::isStatic(maxPages) && l > maxPages * pageSize)
    return emitOpError() << "update writes L = " << l
                         << " rows but a sequence holds at most max_pages * "
                            "page_size = "
                         << maxPages << " * " << pageSize << " = "
                         << maxPages * pageSize << " tokens";
  return verifyConstantBlockTable();
}

LogicalResult AppendOp::verifyKvScale() {
  Type cacheElt = getCache().getType().getElementType();
  Value scale = getKvScale();
  if (!hasFp8Cache()) {
    if (scale)
      return emitOpError()
             << "kv_scale quantises the update into an FP8 cache, but the "
                "cache is "
             << cacheElt
             << ": drop it, or store the cache as f8E4M3FN or "
                "f8E5M2";
    return success();
  }
  if (!scale)
    return emitOpError()
           << "an FP8 cache (" << cacheElt << ") takes a "
           << getUpdate().getType().getElementType()
           << " update only with kv_scale, the f32 scales it quantises "
              "with (per tensor [1], per head [H] or per token and head: "
              "the cache's shape without its last dimension)";
  auto cache = getCache().getType();
  return checkKvScale(*this, "kv_scale", scale, cache,
                      cache.getDimSize(isPaged() ? 2 : 1), "head", "H");
}

/// Applies the block-table rules (kvattn/Support/BlockTable.h) when the
/// table is a constant; with a constant `pos` too, also the write rules
/// (the tokens written lie in the sequence's pages, no shared row is
/// written twice).
LogicalResult AppendOp::verifyConstantBlockTable() {
  DenseIntElementsAttr table;
  if (!matchPattern(getBlockTable(), m_Constant(&table)))
    return success();
  auto cacheType = getCache().getType();
  int64_t pageSize = cacheType.getDimSize(1);
  if (ShapedType::isDynamic(pageSize))
    return success(); // the page size is needed for every rule but range
  auto values = [](DenseIntElementsAttr attr) {
    return llvm::to_vector(
        llvm::map_range(attr.getValues<APInt>(),
                        [](const APInt &v) { return v.getSExtValue(); }));
  };
  SmallVector<int64_t> entries = values(table);
  auto tableType = cast<ShapedType>(table.getType());
  ::mlir::kvattn::BlockTableView view;
  view.batch = tableType.getDimSize(0);
  view.maxPages = tableType.getDimSize(1);
  view.page = [&](int64_t b, int64_t slot) {
    return entries[b * view.maxPages + slot];
  };
  int64_t numPages = cacheType.getDimSize(0);
  ::mlir::kvattn::Status status = ::mlir::kvattn::checkBlockTable(
      view, ShapedType::isDynamic(numPages) ? -1 : numPages, pageSize);
  if (!status)
    return emitOpError() << "invalid block table: " << status.message();

  DenseIntElementsAttr posAttr;
  int64_t l = getUpdate().getType().getDimSize(2);
  if (ShapedType::isDynamic(l) || !matchPattern(getPos(), m_Constant(&posAttr)))
    return success();
  SmallVector<int64_t> positions = values(posAttr);
  if (static_cast<int64_t>(positions.size()) != view.batch)
    return success();
  status = ::mlir::kvattn::checkPagedWrite(
      view, [&](int64_t b) -> std::optional<int64_t> { return positions[b]; },
      l, pageSize, getSkipPadding());
  if (!status)
    return emitOpError() << "invalid paged write: " << status.message();
  return success();
}

//===----------------------------------------------------------------------===//
// MergeOp
//===----------------------------------------------------------------------===//

LogicalResult MergeOp::verify() {
  Operation *op = getOperation();
  if (failed(
          checkRank(op, "out_parts", getOutParts(), 5, "[N, B, Hq, L, Dv]")) ||
      failed(checkRank(op, "lse_parts", getLseParts(), 4, "[N, B, Hq, L]")) ||
      failed(checkRank(op, "out", getOut(), 4, "[B, Hq, L, Dv]")) ||
      failed(checkRank(op, "lse", getLse(), 3, "[B, Hq, L]")))
    return failure();
  if (failed(checkSameDim(op, "parts N", dimOf("lse_parts", getLseParts(), 0),
                          dimOf("out_parts", getOutParts(), 0))))
    return failure();
  const char *names[] = {"batch size B", "query heads Hq", "query length L"};
  for (unsigned d = 0; d < 3; ++d)
    if (failed(checkSameDim(op, names[d],
                            dimOf("lse_parts", getLseParts(), d + 1),
                            dimOf("out_parts", getOutParts(), d + 1))) ||
        failed(checkSameDim(op, names[d], dimOf("out", getOut(), d),
                            dimOf("out_parts", getOutParts(), d + 1))) ||
        failed(checkSameDim(op, names[d], dimOf("lse", getLse(), d),
                            dimOf("out_parts", getOutParts(), d + 1))))
      return failure();
  if (getOutParts().getType().getDimSize(4) == 0)
    return emitOpError() << "value head dim Dv must be positive, got 0";
  return checkSameDim(op, "value head dim Dv", dimOf("out", getOut(), 3),
                      dimOf("out_parts", getOutParts(), 4));
}

//===----------------------------------------------------------------------===//
// CascadeOp
//===----------------------------------------------------------------------===//

LogicalResult CascadeOp::verify() {
  Operation *op = getOperation();
  Value q = getQuery(), pk = getPrefixKey(), pv = getPrefixValue(),
        k = getKey(), v = getValue();
  const bool prefixPaged = isPrefixPaged(), paged = isPaged();
  if (static_cast<bool>(getPrefixPages()) != static_cast<bool>(getPrefixLen()))
    return emitOpError() << "prefix_pages and prefix_len go together: a "
                            "paged prefix is the first prefix_len keys of "
                            "its pages";
  if (failed(checkRank(op, "query", q, 4, "[1, Hq, T, D]")) ||
      failed(checkRank(op, "prefix_key", pk, 4,
                       prefixPaged ? "[num_pages, page_size, Hkv, D]"
                                   : "[1, Hkv, P, D]")) ||
      failed(checkRank(op, "prefix_value", pv, 4,
                       prefixPaged ? "[num_pages, page_size, Hkv, Dv]"
                                   : "[1, Hkv, P, Dv]")) ||
      failed(checkRank(op, "key", k, 4,
                       paged ? "[num_pages, page_size, Hkv, D]"
                             : "[B, Hkv, S, D]")) ||
      failed(checkRank(op, "value", v, 4,
                       paged ? "[num_pages, page_size, Hkv, Dv]"
                             : "[B, Hkv, S, Dv]")) ||
      failed(checkRank(op, "out", getOut(), 4, "[1, Hq, T, Dv]")) ||
      failed(checkRank(op, "q_start", getQStart(), 1, "[B + 1]")) ||
      failed(checkRank(op, "q_offset", getQOffset(), 1, "[B]")) ||
      failed(checkRank(op, "kv_len", getKvLen(), 1, "[B]")) ||
      (prefixPaged &&
       (failed(checkRank(op, "prefix_pages", getPrefixPages(), 1,
                         "[prefix_max_pages]")) ||
        failed(checkRank(op, "prefix_len", getPrefixLen(), 1, "[1]")))) ||
      (paged && failed(checkRank(op, "block_table", getBlockTable(), 2,
                                 "[B, max_pages]"))))
    return failure();
  SmallVector<std::pair<StringRef, Value>> ones = {{"query", q}};
  if (!prefixPaged)
    ones.append({{"prefix_key", pk}, {"prefix_value", pv}});
  for (auto [name, value] : ones) {
    int64_t d0 = cast<ShapedType>(value.getType()).getDimSize(0);
    if (!isCompatible(d0, 1))
      return emitOpError() << name << " dim 0 must be 1 (the packed rows "
                           << "share one prefix), got " << d0;
  }
  if (prefixPaged) {
    int64_t n = cast<ShapedType>(getPrefixLen().getType()).getDimSize(0);
    if (!isCompatible(n, 1))
      return emitOpError() << "prefix_len must have 1 entry (the prefix "
                              "keys), got "
                           << n;
  }
  Type elt = getElementTypeOrSelf(q.getType());
  for (auto [name, value] : {std::pair<StringRef, Value>{"prefix_key", pk},
                             {"prefix_value", pv},
                             {"key", k},
                             {"value", v},
                             {"out", getOut()}})
    if (getElementTypeOrSelf(value.getType()) != elt)
      return emitOpError() << name << " element type "
                           << getElementTypeOrSelf(value.getType())
                           << " must match the query element type " << elt;
  // Heads (dim 2 of a page pool), head dims, the prefix length P (or the
  // pools' pages) and the batch B (of the block table when paged).
  const unsigned prefixHeads = prefixPaged ? 2 : 1, heads = paged ? 2 : 1;
  const NamedDim batch =
      paged ? dimOf("block_table", getBlockTable(), 0) : dimOf("key", k, 0);
  if (failed(checkSameDim(op, "head dim D", dimOf("prefix_key", pk, 3),
                          dimOf("query", q, 3))) ||
      failed(checkSameDim(op, "head dim D", dimOf("key", k, 3),
                          dimOf("query", q, 3))) ||
      failed(checkSameDim(op, "value head dim Dv", dimOf("value", v, 3),
                          dimOf("prefix_value", pv, 3))) ||
      failed(checkSameDim(op, "value head dim Dv", dimOf("out", getOut(), 3),
                          dimOf("prefix_value", pv, 3))) ||
      failed(checkSameDim(op, "kv heads Hkv",
                          dimOf("prefix_value", pv, prefixHeads),
                          dimOf("prefix_key", pk, prefixHeads))) ||
      failed(checkSameDim(op, "kv heads Hkv", dimOf("key", k, heads),
                          dimOf("prefix_key", pk, prefixHeads))) ||
      failed(checkSameDim(op, "kv heads Hkv", dimOf("value", v, heads),
                          dimOf("prefix_key", pk, prefixHeads))) ||
      failed(checkSameDim(op, "batch size B",
                          dimOf("q_offset", getQOffset(), 0), batch)) ||
      failed(checkSameDim(op, "batch size B", dimOf("kv_len", getKvLen(), 0),
                          batch)))
    return failure();
  // The prefix K and V pools (or P), and the suffix K and V pools (or B
  // and S), agree.
  auto sameDims = [&](StringRef key, Value kv, StringRef value, Value vv,
                      ArrayRef<std::pair<unsigned, StringRef>> dims) {
    for (auto [d, what] : dims)
      if (failed(
              checkSameDim(op, what, dimOf(value, vv, d), dimOf(key, kv, d))))
        return failure();
    return success();
  };
  using Dims = SmallVector<std::pair<unsigned, StringRef>>;
  const Dims pool = {{0, "pages num_pages"}, {1, "page size page_size"}};
  if (failed(sameDims("prefix_key", pk, "prefix_value", pv,
                      prefixPaged ? pool : Dims{{2, "prefix length P"}})) ||
      failed(sameDims("key", k, "value", v,
                      paged ? pool
                            : Dims{{0, "batch size B"}, {2, "key length S"}})))
    return failure();
  for (auto [name, value, paged] :
       {std::tuple<StringRef, Value, bool>{"prefix_key", pk, prefixPaged},
        {"key", k, paged}})
    if (paged && cast<ShapedType>(value.getType()).getDimSize(1) == 0)
      return emitOpError() << name << " page_size must be positive, got 0";
  for (unsigned d = 0; d < 3; ++d)
    if (failed(checkSameDim(op, "out shape", dimOf("out", getOut(), d),
                            dimOf("query", q, d))))
      return failure();
  int64_t b = batch.size;
  int64_t starts = cast<ShapedType>(getQStart().getType()).getDimSize(0);
  if (!ShapedType::isDynamic(b) && !ShapedType::isDynamic(starts) &&
      starts != b + 1)
    return emitOpError() << "q_start must have B + 1 = " << b + 1
                         << " entries, got " << starts;
  int64_t hq = cast<ShapedType>(q.getType()).getDimSize(1);
  int64_t hkv = cast<ShapedType>(pk.getType()).getDimSize(prefixHeads);
  if (!ShapedType::isDynamic(hq) && !ShapedType::isDynamic(hkv) &&
      (hkv == 0 || hq % hkv != 0))
    return emitOpError() << "query heads Hq = " << hq
                         << " must be a multiple of kv heads Hkv = " << hkv;
  if (Value lse = getLse()) {
    if (failed(checkRank(op, "lse", lse, 3, "[1, Hq, T]")))
      return failure();
    for (unsigned d = 0; d < 3; ++d)
      if (failed(checkSameDim(op, "lse shape", dimOf("lse", lse, d),
                              dimOf("query", q, d))))
        return failure();
  }
  if (failed(verifyWindowAndSoftcap(op, std::nullopt, getSoftcap())) ||
      failed(verifyScale(op, getScale())))
    return failure();
  return verifyConstantTables();
}

/// The block-table rules (kvattn/Support/BlockTable.h) of the constant
/// tables: prefix_pages as the table of one sequence of prefix_len keys,
/// block_table with kv_len (the lengths where they are constant too).
LogicalResult CascadeOp::verifyConstantTables() {
  if (failed(checkConstantBlockTable(getOperation(), "prefix_pages",
                                     getPrefixPages(), getPrefixLen(),
                                     getPrefixKey(), /*prefix=*/true)))
    return failure();
  return checkConstantBlockTable(getOperation(), "block table", getBlockTable(),
                                 getKvLen(), getKey(),
                                 /*prefix=*/false);
}

#define GET_OP_CLASSES
#include "kvattn/Dialect/KVAttnOps.cpp.inc"
