//===- AttentionDescription.cpp - an attention described, not written -----===//

#include "kvattn/Target/AttentionDescription.h"

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Support/Limits.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

#include <cmath>
#include <cstdio>

namespace mlir {
namespace kvattn {

static std::string str(int64_t v) { return std::to_string(v); }

static std::string str(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

Status checkAttentionDescription(const AttentionDescription &d) {
  const std::string where = "attention description: ";
  if (d.dtype != "f32" && d.dtype != "f16" && d.dtype != "bf16")
    return Status::error(where + "dtype '" + d.dtype +
                         "' is not f32, f16 or bf16");
  auto size = [&](const char *name, int64_t v) {
    return v < AttentionDescription::kDynamic
               ? Status::error(where + name + " = " + str(v) +
                               " is negative (-1: dynamic)")
               : Status::ok();
  };
  KVATTN_RETURN_IF_ERROR(size("batch", d.batch));
  KVATTN_RETURN_IF_ERROR(size("query_len", d.queryLen));
  if (!d.paged)
    KVATTN_RETURN_IF_ERROR(size("key_len", d.keyLen));
  auto positive = [&](const char *name, int64_t v) {
    return v <= 0 ? Status::error(where + name + " = " + str(v) +
                                  " must be positive")
                  : Status::ok();
  };
  KVATTN_RETURN_IF_ERROR(positive("num_query_heads", d.numQueryHeads));
  KVATTN_RETURN_IF_ERROR(positive("num_kv_heads", d.numKvHeads));
  if (d.numQueryHeads % d.numKvHeads != 0)
    return Status::error(
        where + "query heads Hq = " + str(d.numQueryHeads) +
        " must be a multiple of kv heads Hkv = " + str(d.numKvHeads));
  auto headDim = [&](const char *name, int64_t v) {
    return v < 1 || v > limits::kMaxGpuHeadDim
               ? Status::error(where + name + " = " + str(v) +
                               " is outside [1, " +
                               str(limits::kMaxGpuHeadDim) +
                               "] (the GPU kernels' head dims)")
               : Status::ok();
  };
  // The latent form (DeepSeek MLA): its own limit, the GPU kernel's too
  // (limits::kMaxGpuLatentHeadDim).
  auto latentHeadDim = [&](const char *name, int64_t v) {
    return v < 1 || v > limits::kMaxGpuLatentHeadDim
               ? Status::error(where + name + " = " + str(v) +
                               " is outside [1, " +
                               str(limits::kMaxGpuLatentHeadDim) +
                               "] (the latent form's head dims)")
               : Status::ok();
  };
  if (d.latent) {
    KVATTN_RETURN_IF_ERROR(latentHeadDim("head_dim", d.headDim));
    if (d.valueHeadDim > d.headDim)
      return Status::error(where + "value_head_dim = " + str(d.valueHeadDim) +
                           " exceeds head_dim = " + str(d.headDim) +
                           " with latent: V is the first value_head_dim "
                           "columns of the key (Dv <= D)");
    if (d.valueHeadDim != 0)
      KVATTN_RETURN_IF_ERROR(latentHeadDim("value_head_dim", d.valueHeadDim));
  } else {
    KVATTN_RETURN_IF_ERROR(headDim("head_dim", d.headDim));
    if (d.valueHeadDim != 0)
      KVATTN_RETURN_IF_ERROR(headDim("value_head_dim", d.valueHeadDim));
  }
  if (d.window) {
    if (*d.window <= 0)
      return Status::error(where + "window = " + str(*d.window) +
                           " must be positive (none: no window)");
    if (!d.causal && !d.windowRight)
      return Status::error(where + "window = " + str(*d.window) +
                           " needs causal or window_right (a window over "
                           "the causal positions, or a two-sided one)");
  }
  if (d.windowRight) {
    if (*d.windowRight < 0)
      return Status::error(where + "window_right = " + str(*d.windowRight) +
                           " must be non-negative (none: no bound after the "
                           "query)");
    if (d.causal)
      return Status::error(where + "window_right = " + str(*d.windowRight) +
                           " with causal: causal allows no key after the "
                           "query");
  }
  if (d.softcap && !(std::isfinite(*d.softcap) && *d.softcap > 0))
    return Status::error(where + "softcap = " + str(*d.softcap) +
                         " must be positive and finite (none: no capping)");
  if (d.scale && !(std::isfinite(*d.scale) && *d.scale > 0))
    return Status::error(where + "scale = " + str(*d.scale) +
                         " must be positive and finite (none: 1/sqrt(D))");
  if (d.paged) {
    if (d.pageSize <= 0)
      return Status::error(where + "page_size = " + str(d.pageSize) +
                           " must be positive for a paged cache");
    KVATTN_RETURN_IF_ERROR(size("num_pages", d.numPages));
    KVATTN_RETURN_IF_ERROR(size("max_pages", d.maxPages));
  } else if (d.pageSize != 0) {
    return Status::error(where + "page_size = " + str(d.pageSize) +
                         " is given for a cache that is not paged");
  }
  if (d.tree && !d.varlen)
    return Status::error(where +
                         "tree without varlen: the draft-token trees are the "
                         "packed rows of a ragged batch (set varlen)");
  if (d.raggedKeys || d.cacheBatchIdx) {
    const std::string name = d.raggedKeys ? "ragged_keys" : "cache_batch_idx";
    if (d.tree)
      return Status::error(where + "tree with " + name +
                           ": a tree's draft keys are the last rows of its "
                           "sequence's own cache");
    if (d.raggedKeys && d.cacheBatchIdx)
      return Status::error(where + "ragged_keys with cache_batch_idx: the "
                                   "packed keys have one cache row");
    if (d.paged)
      return Status::error(where + name +
                           " with paged: a paged cache maps each sequence "
                           "to its pages already");
    if (d.append)
      return Status::error(where + name +
                           " with append: kvattn.append writes a [B, H, S, "
                           "D] cache row per batch (write the cache first)");
  }
  if (d.cacheBatchIdx)
    KVATTN_RETURN_IF_ERROR(size("cache_rows", d.cacheRows));
  if (!d.kvDtype.empty()) {
    if (d.kvDtype != "f8E4M3FN" && d.kvDtype != "f8E5M2")
      return Status::error(where + "kv_dtype '" + d.kvDtype +
                           "' is not f8E4M3FN or f8E5M2");
    if (d.kvScales < 0 || d.kvScales > 2)
      return Status::error(where + "kv_scales = " + std::to_string(d.kvScales) +
                           " is not 0 (per tensor), 1 (per KV head) or 2 "
                           "(per token and head)");
  } else if (d.kvScales != 0) {
    return Status::error(where + "kv_scales = " + std::to_string(d.kvScales) +
                         " is given for a cache that is not FP8");
  }
  if (d.cascade) {
    if (!d.varlen)
      return Status::error(where + "cascade without varlen: the sequences "
                                   "sharing the prefix are the packed rows "
                                   "of a ragged batch (set varlen)");
    const char *other = d.append             ? "append"
                        : d.window           ? "window"
                        : d.windowRight      ? "window_right"
                        : d.sinks            ? "sinks"
                        : d.alibi            ? "alibi"
                        : d.tree             ? "tree"
                        : d.raggedKeys       ? "ragged_keys"
                        : d.cacheBatchIdx    ? "cache_batch_idx"
                        : !d.kvDtype.empty() ? "kv_dtype"
                        : d.latent           ? "latent"
                                             : nullptr;
    if (other)
      return Status::error(where + "cascade with " + other +
                           ": kvattn.cascade takes a prefix and suffixes "
                           "(each plain or paged), causal or not, softcap "
                           "and scale");
    KVATTN_RETURN_IF_ERROR(size("prefix_len", d.prefixLen));
  } else if (d.prefixLen != AttentionDescription::kDynamic) {
    return Status::error(where + "prefix_len = " + str(d.prefixLen) +
                         " is given without cascade");
  }
  if (d.prefixPaged) {
    if (!d.cascade)
      return Status::error(where + "prefix_paged without cascade: only a "
                                   "shared prefix has prefix pages");
    if (d.prefixLen != AttentionDescription::kDynamic)
      return Status::error(where + "prefix_len = " + str(d.prefixLen) +
                           " with prefix_paged: a paged prefix's length is "
                           "the run's prefix_len argument");
    if (d.prefixPageSize <= 0)
      return Status::error(where +
                           "prefix_page_size = " + str(d.prefixPageSize) +
                           " must be positive for a paged prefix");
    KVATTN_RETURN_IF_ERROR(size("prefix_num_pages", d.prefixNumPages));
    KVATTN_RETURN_IF_ERROR(size("prefix_max_pages", d.prefixMaxPages));
  } else if (d.prefixPageSize != 0) {
    return Status::error(where + "prefix_page_size = " + str(d.prefixPageSize) +
                         " is given for a prefix that is not paged");
  }
  if (d.varlen && d.append)
    return Status::error(where +
                         "append with varlen: kvattn.append writes the same "
                         "L new tokens of every sequence, a ragged batch "
                         "packs different counts (write its cache first)");
  // RoPE: the attribute's rules (#kvattn.rope), named by field.
  if (d.rotaryDim != 0) {
    if (d.rotaryDim < 0 || d.rotaryDim % 2)
      return Status::error(where + "rotary_dim = " + str(d.rotaryDim) +
                           " must be even and positive (RoPE rotates pairs "
                           "of dimensions; 0: no RoPE)");
    if (d.rotaryDim > d.headDim)
      return Status::error(where + "rotary_dim = " + str(d.rotaryDim) +
                           " exceeds head_dim = " + str(d.headDim));
    if (!(std::isfinite(d.ropeTheta) && d.ropeTheta > 1))
      return Status::error(where + "rope_theta = " + str(d.ropeTheta) +
                           " must be a finite value above 1");
    const char *other = d.cascade  ? "cascade"
                        : d.tree   ? "tree"
                        : d.latent ? "latent"
                                   : nullptr;
    if (other)
      return Status::error(where + "rotary_dim with " + other +
                           ": RoPE is not taken there yet");
    if (d.rotaryRows < 0)
      return Status::error(where + "rotary_rows = " + str(d.rotaryRows) +
                           " must be positive (the rows P of rotary_cos and "
                           "rotary_sin) or 0 (rope_theta's formula)");
    if (d.rotaryRows > 0 && d.rotaryDtype != "f32" && d.rotaryDtype != "f16" &&
        d.rotaryDtype != "bf16")
      return Status::error(where + "rotary_dtype '" + d.rotaryDtype +
                           "' is not f32, f16 or bf16");
    if (d.ropeRecord) {
      const char *layout = d.paged           ? "paged"
                           : d.varlen        ? "varlen"
                           : d.raggedKeys    ? "ragged_keys"
                           : d.cacheBatchIdx ? "cache_batch_idx"
                                             : nullptr;
      if (layout)
        return Status::error(where + "rope_record with " + layout +
                             ": the record is indexed [B, S] like a plain "
                             "cache");
    }
  } else if (d.ropeRecord || d.ropeInterleaved || d.ropeTheta != 10000.0 ||
             d.rotaryRows != 0) {
    return Status::error(where +
                         (d.ropeRecord        ? "rope_record"
                          : d.ropeInterleaved ? "rope_interleaved"
                          : d.rotaryRows != 0
                              ? "rotary_rows = " + str(d.rotaryRows)
                              : "rope_theta = " + str(d.ropeTheta)) +
                         " is given without rotary_dim");
  }
  return Status::ok();
}

Status buildAttentionModule(const AttentionDescription &d, MLIRContext &ctx,
                            OwningOpRef<ModuleOp> &module) {
  KVATTN_RETURN_IF_ERROR(checkAttentionDescription(d));
  ctx.loadDialect<KVAttnDialect, func::FuncDialect>();
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  Type elt = d.dtype == "f32"   ? Type(b.getF32Type())
             : d.dtype == "f16" ? Type(b.getF16Type())
                                : Type(b.getBF16Type());
  Type index = b.getI32Type();
  auto dim = [](int64_t v) {
    return v == AttentionDescription::kDynamic ? ShapedType::kDynamic : v;
  };
  const int64_t B = dim(d.batch), L = dim(d.queryLen), Hq = d.numQueryHeads,
                Hkv = d.numKvHeads, D = d.headDim,
                Dv = d.valueHeadDim ? d.valueHeadDim : d.headDim;
  auto tensor = [](ArrayRef<int64_t> shape, Type t) -> Type {
    return RankedTensorType::get(shape, t);
  };
  // K and V: the query's type, or FP8 codes.
  Type kvElt = d.kvDtype == "f8E4M3FN" ? Type(b.getType<Float8E4M3FNType>())
               : d.kvDtype == "f8E5M2" ? Type(b.getType<Float8E5M2Type>())
                                       : elt;
  // The signature: query, key, value (none when latent), [update_k, update_v
  // (none when latent)], [q_start], q_offset (the append's pos too), kv_len,
  // [block_table], [sinks], [alibi_slopes], ..., [k_scale, v_scale (none when
  // latent)].
  SmallVector<Type> inputs = {tensor({d.varlen ? 1 : B, Hq, L, D}, elt)};
  if (d.cascade && d.prefixPaged) { // prefix_key, prefix_value: a pool
    const int64_t pages = dim(d.prefixNumPages), rows = d.prefixPageSize;
    inputs.push_back(tensor({pages, rows, Hkv, D}, elt));
    inputs.push_back(tensor({pages, rows, Hkv, Dv}, elt));
  } else if (d.cascade) { // prefix_key, prefix_value
    inputs.push_back(tensor({1, Hkv, dim(d.prefixLen), D}, elt));
    inputs.push_back(tensor({1, Hkv, dim(d.prefixLen), Dv}, elt));
  }
  SmallVector<int64_t> cacheRows; // the cache's shape without D
  if (d.paged) {
    cacheRows = {dim(d.numPages), d.pageSize, Hkv};
    inputs.push_back(
        tensor({dim(d.numPages), d.pageSize, Hkv, D}, kvElt)); // key
    if (!d.latent)
      inputs.push_back(
          tensor({dim(d.numPages), d.pageSize, Hkv, Dv}, kvElt)); // value
  } else {
    // Ragged keys: one packed buffer; a batch-to-cache map: C cache rows.
    const int64_t rows = d.raggedKeys      ? 1
                         : d.cacheBatchIdx ? dim(d.cacheRows)
                                           : B;
    cacheRows = {rows, Hkv, dim(d.keyLen)};
    inputs.push_back(tensor({rows, Hkv, dim(d.keyLen), D}, kvElt));
    if (!d.latent)
      inputs.push_back(tensor({rows, Hkv, dim(d.keyLen), Dv}, kvElt));
  }
  if (d.append) {
    // The latent form appends the new tokens' whole rows (their first Dv
    // columns are their V): update_k alone.
    inputs.push_back(tensor({B, Hkv, L, D}, elt));
    if (!d.latent)
      inputs.push_back(tensor({B, Hkv, L, Dv}, elt));
  }
  if (d.varlen)
    inputs.push_back(
        tensor({B == ShapedType::kDynamic ? B : B + 1}, index)); // q_start
  inputs.push_back(tensor({B}, index));                          // q_offset
  inputs.push_back(tensor({B}, index));                          // kv_len
  if (d.prefixPaged) {
    inputs.push_back(tensor({dim(d.prefixMaxPages)}, index)); // prefix_pages
    inputs.push_back(tensor({1}, index));                     // prefix_len
  }
  if (d.paged)
    inputs.push_back(tensor({B, dim(d.maxPages)}, index)); // block_table
  if (d.sinks)
    inputs.push_back(tensor({Hq}, b.getF32Type())); // sinks
  if (d.alibi)
    inputs.push_back(tensor({Hq}, b.getF32Type())); // alibi_slopes
  if (d.tree)
    inputs.push_back(tensor({L}, index)); // tree_parents
  if (d.raggedKeys)
    inputs.push_back(
        tensor({B == ShapedType::kDynamic ? B : B + 1}, index)); // k_start
  if (d.cacheBatchIdx)
    inputs.push_back(tensor({B}, index)); // cache_batch_idx
  if (!d.kvDtype.empty()) {
    SmallVector<int64_t> scaleShape = d.kvScales == 0 ? SmallVector<int64_t>{1}
                                      : d.kvScales == 1
                                          ? SmallVector<int64_t>{Hkv}
                                          : cacheRows;
    inputs.push_back(tensor(scaleShape, b.getF32Type())); // k_scale
    // The latent form reads V from the key cache: k_scale dequantises both.
    if (!d.latent)
      inputs.push_back(tensor(scaleShape, b.getF32Type())); // v_scale
  }
  if (d.ropeRecord)
    inputs.push_back(tensor({B, dim(d.keyLen)}, index)); // k_rope_pos
  if (d.rotaryRows > 0) {
    Type tableType = d.rotaryDtype == "f16"    ? Type(b.getF16Type())
                     : d.rotaryDtype == "bf16" ? Type(b.getBF16Type())
                                               : Type(b.getF32Type());
    inputs.push_back(tensor({d.rotaryRows, d.rotaryDim / 2}, tableType));
    inputs.push_back(tensor({d.rotaryRows, d.rotaryDim / 2}, tableType));
  }

  module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  auto func =
      func::FuncOp::create(b, loc, "attention", b.getFunctionType(inputs, {}));
  Block *body = func.addEntryBlock();
  b.setInsertionPointToEnd(body);
  unsigned next = 0;
  Value query = body->getArgument(next++);
  Value prefixKey = d.cascade ? body->getArgument(next++) : Value();
  Value prefixValue = d.cascade ? body->getArgument(next++) : Value();
  Value key = body->getArgument(next++);
  Value value = d.latent ? Value() : body->getArgument(next++);
  Value updateK, updateV, qStart;
  if (d.append) {
    updateK = body->getArgument(next++);
    updateV = d.latent ? Value() : body->getArgument(next++);
  }
  if (d.varlen)
    qStart = body->getArgument(next++);
  Value qOffset = body->getArgument(next++);
  Value kvLen = body->getArgument(next++);
  Value prefixPages = d.prefixPaged ? body->getArgument(next++) : Value();
  Value prefixLen = d.prefixPaged ? body->getArgument(next++) : Value();
  Value blockTable = d.paged ? body->getArgument(next++) : Value();
  Value sinks = d.sinks ? body->getArgument(next++) : Value();
  Value alibiSlopes = d.alibi ? body->getArgument(next++) : Value();
  Value treeParents = d.tree ? body->getArgument(next++) : Value();
  Value kStart = d.raggedKeys ? body->getArgument(next++) : Value();
  Value cacheBatchIdx = d.cacheBatchIdx ? body->getArgument(next++) : Value();
  Value kScale = d.kvDtype.empty() ? Value() : body->getArgument(next++);
  Value vScale =
      d.kvDtype.empty() || d.latent ? Value() : body->getArgument(next++);
  Value ropeRecord = d.ropeRecord ? body->getArgument(next++) : Value();
  const bool tables = d.rotaryDim && d.rotaryRows > 0;
  Value rotaryCos = tables ? body->getArgument(next++) : Value();
  Value rotarySin = tables ? body->getArgument(next++) : Value();
  // With tables the attribute has no theta: they give cos and sin.
  RopeAttr rope =
      d.rotaryDim
          ? RopeAttr::get(
                &ctx, d.rotaryDim,
                tables ? FloatAttr()
                       : FloatAttr::get(Float64Type::get(&ctx), d.ropeTheta),
                d.ropeInterleaved, /*f32_query=*/false)
          : RopeAttr();

  SmallVector<Value> results;
  if (d.append) {
    // The K append, then the V append (named locals: a fixed IR order); an
    // FP8 cache quantises the new tokens with the scales the attention
    // reads it with.
    // With RoPE the K append rotates the new keys (and writes their
    // entries of the record).
    auto kAppend = AppendOp::create(b, loc, updateK, key, qOffset, blockTable,
                                    /*rope_pos=*/ropeRecord, rope,
                                    /*kv_scale=*/kScale, rotaryCos, rotarySin);
    Value k = kAppend.getResult();
    if (ropeRecord)
      ropeRecord = kAppend.getRopePosResult();
    // The latent cache is the key: its one append writes the whole rows
    // (quantised with k_scale, the scale the attention reads K and V with).
    if (!d.latent)
      value = AppendOp::create(b, loc, updateV, value, qOffset, blockTable,
                               /*rope_pos=*/Value(), /*rope=*/RopeAttr(),
                               /*kv_scale=*/vScale, /*rotary_cos=*/Value(),
                               /*rotary_sin=*/Value())
                  .getResult();
    key = k;
  }
  AttentionExtras extras;
  extras.qStart = qStart;
  extras.qOffset = qOffset;
  extras.kvLen = kvLen;
  extras.blockTable = blockTable;
  extras.sinks = sinks;
  extras.alibiSlopes = alibiSlopes;
  extras.treeParents = treeParents;
  extras.kStart = kStart;
  extras.cacheBatchIdx = cacheBatchIdx;
  extras.kScale = kScale;
  extras.vScale = vScale;
  extras.rope = rope;
  extras.rotaryCos = rotaryCos;
  extras.rotarySin = rotarySin;
  extras.kRopePos = ropeRecord;
  extras.causal = d.causal;
  extras.window = d.window;
  extras.windowRight = d.windowRight;
  extras.softcap = d.softcap;
  extras.scale = d.scale;
  if (d.cascade) {
    // out [1, Hq, T, Dv] in the query's type, lse [1, Hq, T] f32.
    auto cascade = CascadeOp::create(
        b, loc, tensor({1, Hq, L, Dv}, elt),
        d.withLse ? Type(tensor({1, Hq, L}, b.getF32Type())) : Type(), query,
        prefixKey, prefixValue, key, value, qStart, qOffset, kvLen, prefixPages,
        prefixLen, blockTable, d.causal ? b.getUnitAttr() : UnitAttr(),
        d.softcap ? b.getF32FloatAttr(*d.softcap) : FloatAttr(),
        d.scale ? b.getF32FloatAttr(*d.scale) : FloatAttr());
    for (Value r : cascade->getResults())
      results.push_back(r);
  } else {
    if (d.latent)
      extras.valueDim = Dv;
    auto attention =
        AttentionOp::create(b, loc, query, key, value, d.withLse, extras);
    for (Value r : attention->getResults())
      results.push_back(r);
  }
  if (d.append) {
    results.push_back(key);
    if (value)
      results.push_back(value);
    if (ropeRecord)
      results.push_back(ropeRecord);
  }
  func::ReturnOp::create(b, loc, results);
  SmallVector<Type> resultTypes;
  for (Value r : results)
    resultTypes.push_back(r.getType());
  func.setFunctionType(b.getFunctionType(inputs, resultTypes));

  std::string diagnostics;
  {
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
      diagnostics += (diagnostics.empty() ? "" : "\n") + diag.str();
      return success();
    });
    if (failed(verify(*module)))
      return Status::error("attention description: the built IR does not "
                           "verify: " +
                           diagnostics);
  }
  return Status::ok();
}

} // namespace kvattn
} // namespace mlir
