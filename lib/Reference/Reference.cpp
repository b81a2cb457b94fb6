//===- Reference.cpp - the scalar reference of kvattn ---------------------===//
//
// Deliberately plain: nested loops in the order of the definition, doubles
// throughout, no blocking, no online softmax. Anything clever belongs in the
// compiled paths that are tested against this file.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Reference/Reference.h"
#include "MagnitudeScan.h"
#include "kvattn/Support/BlockTable.h"
#include "kvattn/Support/Float16.h"
#include "kvattn/Support/Float8.h"
#include "kvattn/Support/KeyRows.h"
#include "kvattn/Support/Limits.h"
#include "kvattn/Support/QueryStarts.h"
#include "kvattn/Support/StatusWord.h"
#include "kvattn/Support/TreeParents.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace mlir {
namespace kvattn {
namespace reference {

namespace {

/// The named sizes of one attention problem.
struct Dims {
  int64_t b, hq, hkv, l, s, d, dv;
};

std::string str(int64_t v) { return std::to_string(v); }

Status checkFloat(const char *name, const HostTensor &t) {
  if (!isFloatType(t.elementType()))
    return Status::error(std::string(name) + " must be a float tensor, got " +
                         elementTypeName(t.elementType()));
  return Status::ok();
}

Status checkInteger(const char *name, const HostTensor &t) {
  if (t.elementType() != ElementType::I32 &&
      t.elementType() != ElementType::I64)
    return Status::error(std::string(name) +
                         " must be an i32 or i64 tensor, got " +
                         elementTypeName(t.elementType()));
  return Status::ok();
}

/// Checks `t` against named dimensions such as {{"B", 2}, {"L", 4}}.
Status
checkShape(const char *name, const HostTensor &t,
           std::initializer_list<std::pair<const char *, int64_t>> dims) {
  std::string layout = "[";
  for (const auto &d : dims)
    layout += std::string(layout.size() > 1 ? ", " : "") + d.first;
  layout += "]";
  if (t.rank() != static_cast<int64_t>(dims.size()))
    return Status::error(std::string(name) + " must have shape " + layout +
                         ", got " + t.shapeString());
  int64_t i = 0;
  for (const auto &d : dims) {
    if (t.dim(i) != d.second)
      return Status::error(std::string(name) + " must have shape " + layout +
                           ": dim " + str(i) + " is " + str(t.dim(i)) +
                           " but " + d.first + " is " + str(d.second));
    ++i;
  }
  return Status::ok();
}

/// What checkQKV and checkPagedQKV check first: Q, K and V of float types,
/// Q of rank 4.
Status checkFloatsAndQueryRank(const HostTensor &q, const HostTensor &k,
                               const HostTensor &v) {
  KVATTN_RETURN_IF_ERROR(checkFloat("query", q));
  KVATTN_RETURN_IF_ERROR(checkFloat("key", k));
  KVATTN_RETURN_IF_ERROR(checkFloat("value", v));
  if (q.rank() != 4)
    return Status::error("query must have shape [B, Hq, L, D], got " +
                         q.shapeString());
  return Status::ok();
}

/// A ragged batch (`keyBatch >= 0`) packs its query [1, Hq, T, D].
Status checkPackedQuery(const HostTensor &q, int64_t keyBatch) {
  if (keyBatch >= 0 && q.dim(0) != 1)
    return Status::error("with q_start the query is packed [1, Hq, T, D]: "
                         "its dim 0 must be 1, got " +
                         q.shapeString());
  return Status::ok();
}

/// Q [B,Hq,L,D], K [B,Hkv,S,D], V [B,Hkv,S,Dv]: ranks, sizes, GQA.
/// With `keyBatch >= 0` (a ragged batch) Q is packed [1, Hq, T, D] and K, V
/// have `keyBatch` sequences; dims.b is then 1 (the query's batch).
Status checkQKV(const HostTensor *q, const HostTensor *k, const HostTensor *v,
                Dims &dims, int64_t keyBatch = -1) {
  if (!q || !k || !v)
    return Status::error("query, key and value are required");
  KVATTN_RETURN_IF_ERROR(checkFloatsAndQueryRank(*q, *k, *v));
  if (k->rank() != 4)
    return Status::error("key must have shape [B, Hkv, S, D], got " +
                         k->shapeString());
  dims = {q->dim(0), q->dim(1), k->dim(1), q->dim(2), k->dim(2), q->dim(3), 0};
  KVATTN_RETURN_IF_ERROR(checkPackedQuery(*q, keyBatch));
  const int64_t kb = keyBatch >= 0 ? keyBatch : dims.b;
  KVATTN_RETURN_IF_ERROR(checkShape(
      "key", *k, {{"B", kb}, {"Hkv", dims.hkv}, {"S", dims.s}, {"D", dims.d}}));
  if (v->rank() != 4)
    return Status::error("value must have shape [B, Hkv, S, Dv], got " +
                         v->shapeString());
  dims.dv = v->dim(3);
  KVATTN_RETURN_IF_ERROR(checkShape(
      "value", *v,
      {{"B", kb}, {"Hkv", dims.hkv}, {"S", dims.s}, {"Dv", dims.dv}}));
  if (dims.d == 0)
    return Status::error("head dim D must be positive, got 0");
  if (dims.hkv == 0 || dims.hq % dims.hkv != 0)
    return Status::error(
        "query heads Hq = " + str(dims.hq) +
        " must be a multiple of kv heads Hkv = " + str(dims.hkv));
  return Status::ok();
}

/// checkQKV for page pools `key [num_pages, page_size, Hkv, D]` and
/// `value [num_pages, page_size, Hkv, Dv]` read through `blockTable` up to
/// `kvLen` (validated first): `dims` as of the logical caches
/// `[B, Hkv, max_pages * page_size, D]`.
Status checkPagedQKV(const HostTensor *q, const HostTensor *k,
                     const HostTensor *v, const HostTensor &blockTable,
                     const HostTensor *kvLen, Dims &dims,
                     int64_t keyBatch = -1) {
  if (!q || !k || !v)
    return Status::error("query, key and value are required");
  if (!kvLen)
    return Status::error("block_table (paged K/V) needs kv_len");
  KVATTN_RETURN_IF_ERROR(checkFloatsAndQueryRank(*q, *k, *v));
  for (auto [name, t] : {std::pair{"key", k}, std::pair{"value", v}})
    if (t->rank() != 4)
      return Status::error(std::string(name) +
                           " pages must have shape [num_pages, page_size, "
                           "Hkv, D], got " +
                           t->shapeString());
  const int64_t numPages = k->dim(0), pageSize = k->dim(1);
  KVATTN_RETURN_IF_ERROR(
      validateBlockTable(blockTable, *kvLen, numPages, pageSize));
  int64_t logicalKeys;
  if (__builtin_mul_overflow(blockTable.dim(1), pageSize, &logicalKeys))
    return Status::error("block_table's max_pages x page_size overflows");
  dims = {q->dim(0),   q->dim(1), k->dim(2), q->dim(2),
          logicalKeys, q->dim(3), v->dim(3)};
  KVATTN_RETURN_IF_ERROR(checkPackedQuery(*q, keyBatch));
  const int64_t kb = keyBatch >= 0 ? keyBatch : dims.b;
  if (blockTable.dim(0) != kb)
    return Status::error("block_table has " + str(blockTable.dim(0)) +
                         " rows, expected B = " + str(kb));
  KVATTN_RETURN_IF_ERROR(checkShape("key", *k,
                                    {{"num_pages", numPages},
                                     {"page_size", pageSize},
                                     {"Hkv", dims.hkv},
                                     {"D", dims.d}}));
  KVATTN_RETURN_IF_ERROR(checkShape("value", *v,
                                    {{"num_pages", numPages},
                                     {"page_size", pageSize},
                                     {"Hkv", dims.hkv},
                                     {"Dv", dims.dv}}));
  if (dims.d == 0)
    return Status::error("head dim D must be positive, got 0");
  if (dims.hkv == 0 || dims.hq % dims.hkv != 0)
    return Status::error(
        "query heads Hq = " + str(dims.hq) +
        " must be a multiple of kv heads Hkv = " + str(dims.hkv));
  return Status::ok();
}

/// A mask broadcastable to [B, Hq, L, S] (rank 2..4, right-aligned).
Status checkMask(const HostTensor &mask, const Dims &dims) {
  if (mask.rank() < 2 || mask.rank() > 4)
    return Status::error("mask must have rank 2 to 4 (broadcastable to "
                         "[B, Hq, L, S]), got " +
                         mask.shapeString());
  const int64_t full[4] = {dims.b, dims.hq, dims.l, dims.s};
  const char *names[4] = {"B", "Hq", "L", "S"};
  for (int64_t i = 0; i < mask.rank(); ++i) {
    int64_t target = 4 - mask.rank() + i;
    if (mask.dim(i) != 1 && mask.dim(i) != full[target])
      return Status::error("mask dim " + str(i) + " is " + str(mask.dim(i)) +
                           ", which does not broadcast to " + names[target] +
                           " = " + str(full[target]));
  }
  return Status::ok();
}

/// Flat index of mask[b, h, i, j] under right-aligned broadcasting.
int64_t maskIndex(const HostTensor &mask, int64_t b, int64_t h, int64_t i,
                  int64_t j) {
  const int64_t full[4] = {b, h, i, j};
  int64_t flat = 0;
  for (int64_t m = 0; m < mask.rank(); ++m) {
    int64_t size = mask.dim(m);
    int64_t coord = size == 1 ? 0 : full[4 - mask.rank() + m];
    flat = flat * size + coord;
  }
  return flat;
}

/// The common core of attention and sdpa: for every (b, h, i) visits keys
/// in order, keeps those `allowed` says, and normalises over them only.
struct Core {
  const HostTensor &q, &k, &v;
  const Dims &dims;
  double scale;
  std::optional<double> softcap;
  const HostTensor *mask; // may be null
  std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)> allowed;
  /// ALiBi: the slopes [Hq] and the integer distance |qp - kp| of an
  /// allowed key, or null. The bias -slope * distance is applied relative to
  /// the row's nearest allowed key (exact in double, whatever the
  /// positions), and the constant -slope * (its distance) goes back into
  /// the lse; a sink joins relative to the same constant.
  const HostTensor *alibiSlopes = nullptr;
  std::function<int64_t(int64_t b, int64_t i, int64_t j)> alibiDistance;
  /// Attention sinks [Hq] (a logit in every row's denominator), or null.
  const HostTensor *sinks = nullptr;
  /// A ragged batch: the sequence of each packed row, and each sequence's
  /// first row (q_start). Row i of the packed query reads the keys of
  /// sequence rowSequence[i] as its row i - sequenceStart[...]. Null
  /// otherwise.
  const std::vector<int64_t> *rowSequence = nullptr;
  const std::vector<int64_t> *sequenceStart = nullptr;

  /// Every row (b, h, i), on all cores when there is enough work: rows are
  /// independent and each is computed the same way on any thread.
  void run(HostTensor &out, HostTensor *lse) const {
    const int64_t rows = dims.b * dims.hq * dims.l;
    const double work = static_cast<double>(rows) * dims.s * (dims.d + dims.dv);
    unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    if (work < 1e7)
      threads = 1;
    threads = static_cast<unsigned>(
        std::min<int64_t>(threads, std::max<int64_t>(rows, 1)));
    if (threads == 1) {
      runRows(0, rows, out, lse);
      return;
    }
    std::vector<std::thread> pool;
    const int64_t chunk = (rows + threads - 1) / threads;
    for (unsigned t = 0; t < threads; ++t) {
      const int64_t begin = t * chunk, end = std::min(rows, begin + chunk);
      if (begin < end)
        pool.emplace_back([=, &out] { runRows(begin, end, out, lse); });
    }
    for (std::thread &t : pool)
      t.join();
  }

  /// Rows [begin, end) of the flattened (b, h, i).
  void runRows(int64_t begin, int64_t end, HostTensor &out,
               HostTensor *lse) const {
    const int64_t group = dims.hq / dims.hkv;
    const double negInf = -std::numeric_limits<double>::infinity();
    const bool additive = mask && isFloatType(mask->elementType());
    std::vector<int64_t> keys, distances;
    std::vector<double> scores;
    for (int64_t row = begin; row < end; ++row) {
      const int64_t i = row % dims.l, h = row / dims.l % dims.hq,
                    b = row / dims.l / dims.hq;
      // The batch of the keys and the row within it (a packed row belongs
      // to its sequence).
      const int64_t kb = rowSequence ? (*rowSequence)[i] : b;
      const int64_t il = rowSequence ? i - (*sequenceStart)[kb] : i;
      {
        const int64_t g = h / group;
        {
          keys.clear();
          scores.clear();
          distances.clear();
          for (int64_t j = 0; j < dims.s; ++j) {
            if (!allowed(kb, h, il, j))
              continue;
            if (mask && !additive &&
                mask->getInt(maskIndex(*mask, b, h, i, j)) == 0)
              continue;
            // Rows are contiguous: element x of a row is its start + x.
            const int64_t qRow = q.flatIndex({b, h, i, 0}),
                          kRow = k.flatIndex({kb, g, j, 0});
            double dot = 0.0;
            for (int64_t x = 0; x < dims.d; ++x)
              dot += q.getDouble(qRow + x) * k.getDouble(kRow + x);
            double s = scale * dot;
            if (softcap)
              s = *softcap * std::tanh(s / *softcap);
            if (additive) {
              s += mask->getDouble(maskIndex(*mask, b, h, i, j));
              if (s == negInf)
                continue; // A -inf bias excludes the key.
            }
            if (alibiDistance)
              distances.push_back(alibiDistance(kb, il, j));
            keys.push_back(j);
            scores.push_back(s);
          }

          // A sink is one more logit in the denominator, with no value.
          std::optional<double> sink =
              sinks ? std::optional<double>(sinks->getDouble(h)) : std::nullopt;
          // ALiBi relative to the row's nearest allowed key: the integer
          // differences are exact, so is every double below 2^53; the
          // constant goes back into the lse (and the sink is taken relative
          // to it for the output's weights).
          std::optional<double> shift;
          if (alibiDistance && !keys.empty()) {
            const double slope = alibiSlopes->getDouble(h);
            const int64_t nearest =
                *std::min_element(distances.begin(), distances.end());
            for (size_t n = 0; n < keys.size(); ++n)
              scores[n] -= slope * static_cast<double>(distances[n] - nearest);
            shift = -slope * static_cast<double>(nearest);
          }
          const std::optional<double> absoluteSink = sink;
          if (sink && shift)
            sink = *sink - *shift;
          if (keys.empty()) {
            // No allowed key: out = 0 (already zero), lse = -inf, or the
            // sink's logit (its own log-sum-exp).
            if (lse)
              lse->setDouble(row, sink ? *sink : negInf);
            continue;
          }
          double peak = scores[0];
          for (double s : scores)
            if (s > peak || std::isnan(s))
              peak = s;
          if (sink && (*sink > peak || std::isnan(*sink)))
            peak = *sink;
          double sum = sink ? std::exp(*sink - peak) : 0.0;
          std::vector<double> acc(dims.dv, 0.0);
          for (size_t n = 0; n < keys.size(); ++n) {
            double w = std::exp(scores[n] - peak);
            sum += w;
            const int64_t vRow = v.flatIndex({kb, g, keys[n], 0});
            for (int64_t x = 0; x < dims.dv; ++x)
              acc[x] += w * v.getDouble(vRow + x);
          }
          for (int64_t x = 0; x < dims.dv; ++x)
            out.setDouble(row * dims.dv + x, acc[x] / sum);
          if (lse && shift) {
            // The keys' lse, absolute, log-added to the sink's own logit
            // (not to sink - shift + shift, which a large shift rounds).
            double keyPeak = scores[0];
            for (double s : scores)
              if (s > keyPeak || std::isnan(s))
                keyPeak = s;
            double keySum = 0.0;
            for (double s : scores)
              keySum += std::exp(s - keyPeak);
            double total = keyPeak + std::log(keySum) + *shift;
            if (absoluteSink) {
              const double hi = std::max(total, *absoluteSink),
                           lo = std::min(total, *absoluteSink);
              total = std::isnan(total) || std::isnan(*absoluteSink)
                          ? std::numeric_limits<double>::quiet_NaN()
                      : hi == negInf ? negInf
                                     : hi + std::log1p(std::exp(lo - hi));
            }
            lse->setDouble(row, total);
          } else if (lse) {
            lse->setDouble(row, peak + std::log(sum));
          }
        }
      }
    }
  }
};

/// Reads a [B] or [B, N] integer operand, checking non-negativity.
Status readNonNegative(const char *name, const HostTensor &t,
                       std::vector<int64_t> &values) {
  values.resize(t.numElements());
  for (int64_t n = 0; n < t.numElements(); ++n) {
    values[n] = t.getInt(n);
    if (values[n] < 0) {
      std::string where =
          t.rank() == 1 ? str(n) : str(n / t.dim(1)) + ", " + str(n % t.dim(1));
      return Status::error(std::string(name) + "[" + where +
                           "] = " + str(values[n]) + " is negative (batch " +
                           str(t.rank() == 1 ? n : n / t.dim(1)) + ")");
    }
    if (values[n] > limits::kMaxPosition) {
      std::string where =
          t.rank() == 1 ? str(n) : str(n / t.dim(1)) + ", " + str(n % t.dim(1));
      return Status::error(std::string(name) + "[" + where +
                           "] = " + str(values[n]) +
                           " is out of range (above 2^62, " + "batch " +
                           str(t.rank() == 1 ? n : n / t.dim(1)) + ")");
    }
  }
  return Status::ok();
}

/// Reads kv_len [B], each within [0, S].
Status readKvLen(const HostTensor &t, const Dims &dims,
                 std::vector<int64_t> &kvLen) {
  KVATTN_RETURN_IF_ERROR(checkInteger("kv_len", t));
  KVATTN_RETURN_IF_ERROR(checkShape("kv_len", t, {{"B", dims.b}}));
  for (int64_t b = 0; b < dims.b; ++b) {
    kvLen[b] = t.getInt(b);
    if (kvLen[b] < 0 || kvLen[b] > dims.s)
      return Status::error("kv_len[" + str(b) + "] = " + str(kvLen[b]) +
                           " is outside [0, S = " + str(dims.s) + "] (batch " +
                           str(b) + ")");
  }
  return Status::ok();
}

/// The largest finite |x| over elements [first, first + n) of a float tensor
/// (0 when there is none; this runs over the whole cache on every call of
/// the CPU path).
double finiteAbsMax(const HostTensor &t, int64_t first, int64_t n) {
  const uint8_t *base = t.data();
  switch (t.elementType()) {
  case ElementType::F32: {
    return detail::bitsToFloat(
        finiteMagnitudeBitsMax(base + first * 4, n, 4, 0x7f800000));
  }
  case ElementType::BF16:
  case ElementType::F16: {
    const bool bf16 = t.elementType() == ElementType::BF16;
    const auto u = static_cast<uint16_t>(
        finiteMagnitudeBitsMax(base + first * 2, n, 2, bf16 ? 0x7f80 : 0x7c00));
    return bf16 ? bfloat16BitsToFloat(u) : halfBitsToFloat(u);
  }
  default: {
    double m = 0;
    for (int64_t i = 0; i < n; ++i) {
      double x = t.getDouble(first + i);
      m = std::isfinite(x) ? std::max(m, std::fabs(x)) : m;
    }
    return m;
  }
  }
}

/// finiteAbsMax of elements [first, first + n) of a K or V cache (rows of
/// D, whole or their first columns). An FP8 cache read in place (`scale`
/// non-null: AttentionOperands::keyScale) counts what its dequantised copy
/// would hold: each row's largest finite |code| times the row's scale (a
/// product that is not finite is not counted, as the copy's would not be).
/// `paged`: a pool [num_pages, page_size, Hkv, D], else [B, Hkv, S, D].
double cacheAbsMax(const HostTensor &t, const HostTensor *scale, bool paged,
                   int64_t first, int64_t n) {
  if (!scale)
    return finiteAbsMax(t, first, n);
  const bool e4m3 = t.elementType() == ElementType::F8E4M3FN;
  const Float8Format format = e4m3 ? Float8Format::E4M3FN : Float8Format::E5M2;
  // Finite codes order as their bits without the sign: e4m3fn's 0x7f is
  // NaN, e5m2's 0x7c is +Inf (NaN above it).
  const uint32_t inf = e4m3 ? 0x7f : 0x7c;
  const uint8_t *codes = t.data();
  auto largest = [&](int64_t from, int64_t count, float sc) -> double {
    const auto bits = static_cast<uint8_t>(
        finiteMagnitudeBitsMax(codes + from, count, 1, inf));
    const float v = float8ToFloat(bits, format) * sc;
    if (std::isfinite(v))
      return v;
    double m = 0; // (a scale near FLT_MAX: the finite products only)
    for (int64_t i = from; i < from + count; ++i) {
      const float x = std::fabs(float8ToFloat(codes[i], format) * sc);
      m = std::isfinite(x) ? std::max(m, static_cast<double>(x)) : m;
    }
    return m;
  };
  if (scale->numElements() == 1)
    return largest(first, n, static_cast<float>(scale->getDouble(0)));
  // Per KV head [Hkv] or per cache row (the shape without D); a range may
  // hold part of a row (the latent form's V: a row's first columns).
  const int64_t d = t.dim(3), hkv = t.dim(paged ? 2 : 1), s = t.dim(2);
  double m = 0;
  for (int64_t at = first; at < first + n;) {
    const int64_t row = at / d, end = std::min(first + n, (row + 1) * d);
    const int64_t scaleAt = scale->rank() != 1 ? row
                            : paged            ? row % hkv
                                               : (row / s) % hkv;
    m = std::max(m, largest(at, end - at,
                            static_cast<float>(scale->getDouble(scaleAt))));
    at = end;
  }
  return m;
}

/// The compiled kernels compute scores, their maxima and the weighted sum
/// of values in f32. Refuses finite inputs for which that could overflow
/// (docs/semantics.md, "Range"): the bound
///   max(1, scale) * log2(e) * D * max|q| * max|k| + log2(e) * max|mask|
/// on every (scaled, base-2) score, and kv_len * max|v| on the sum of
/// values, each at most FLT_MAX. Only slots a key owns count (j < kv_len,
/// key_valid), and only finite values: non-finite inputs follow the NaN
/// policy.
Status checkF32Range(const HostTensor &q, const HostTensor &k,
                     const HostTensor &v, const HostTensor *mask,
                     const Dims &dims, const std::vector<int64_t> &kvLen,
                     const HostTensor *keyValid, double scale,
                     const HostTensor *blockTable = nullptr,
                     const HostTensor *kScale = nullptr,
                     const HostTensor *vScale = nullptr,
                     int64_t valueColumns = 0,
                     const AttentionOperands::Appended &keyAppended = {},
                     const AttentionOperands::Appended &valueAppended = {}) {
  const bool paged = blockTable != nullptr;
  double qMax = finiteAbsMax(q, 0, q.numElements()), kMax = 0, vMax = 0,
         maskMax = 0;
  if (mask && isFloatType(mask->elementType()))
    maskMax = finiteAbsMax(*mask, 0, mask->numElements());
  constexpr double kLog2E = 1.4426950408889634;
  const double fltMax = std::numeric_limits<float>::max();
  auto boundOfScores = [&](double keyMax) {
    return std::max(1.0, std::fabs(scale)) * kLog2E *
               static_cast<double>(dims.d) * qMax * keyMax +
           kLog2E * maskMax;
  };
  int64_t longest = 0;
  for (int64_t b = 0; b < dims.b; ++b)
    longest = std::max(longest, kvLen[b]);
  // Where the cache's type bounds its values so that the rule holds for any
  // of them (f16's 65,504; an FP8 cache read in place: the format's
  // largest code times the largest scale), the cache is not read: the
  // decision is the same, and the maxima only name a refusal.
  auto typeBound = [](const HostTensor &t, const HostTensor *scaleOf) {
    if (t.elementType() == ElementType::F16)
      return 65504.0;
    if (scaleOf && isFp8Type(t.elementType())) {
      double largest = 0;
      for (int64_t i = 0; i < scaleOf->numElements(); ++i)
        largest = std::max(largest, std::fabs(scaleOf->getDouble(i)));
      // (Above the f32 products the check reads: 2^-20 of headroom.)
      return static_cast<double>(
                 float8Max(t.elementType() == ElementType::F8E4M3FN
                               ? Float8Format::E4M3FN
                               : Float8Format::E5M2)) *
             largest * (1 + 0x1p-20);
    }
    return std::numeric_limits<double>::infinity();
  };
  const bool readKeys = !(boundOfScores(typeBound(k, kScale)) <= fltMax);
  const bool readValues =
      !(static_cast<double>(longest) * typeBound(v, vScale) <= fltMax);
  auto keyMax = [&](int64_t first, int64_t n) {
    return readKeys ? cacheAbsMax(k, kScale, paged, first, n) : 0.0;
  };
  // Elements [first, first + n) of V [.., Dv]; with valueColumns, V is
  // read in place as the first Dv columns of the key's rows of D.
  auto valueMax = [&](int64_t first, int64_t n) {
    if (!readValues)
      return 0.0;
    if (!valueColumns)
      return cacheAbsMax(v, vScale, paged, first, n);
    double m = 0;
    for (int64_t row = first / dims.dv; row < (first + n) / dims.dv; ++row)
      m = std::max(m,
                   cacheAbsMax(v, vScale, paged, row * dims.d, valueColumns));
    return m;
  };
  // Logical rows [j0, j1) of batch b (every KV head) as the cache holds
  // them before any append of this call.
  const int64_t pageSize = paged ? k.dim(1) : 0,
                maxPages = paged ? blockTable->dim(1) : 0;
  auto cacheRows = [&](int64_t b, int64_t j0, int64_t j1, bool keys) {
    double m = 0;
    // `rows` rows of D (Dv) from row `first` of the cache.
    auto run = [&](int64_t first, int64_t rows) {
      m = std::max(m, keys ? keyMax(first * dims.d, rows * dims.d)
                           : valueMax(first * dims.dv, rows * dims.dv));
    };
    if (paged) {
      // Pages [num_pages, page_size, Hkv, D]: the rows of a page hold their
      // keys of every head, one contiguous run.
      for (int64_t j = j0; j < j1;) {
        const int64_t at = j % pageSize, n = std::min(pageSize - at, j1 - j);
        const int64_t page = blockTable->getInt(b * maxPages + j / pageSize);
        run((page * pageSize + at) * dims.hkv, n * dims.hkv);
        j += n;
      }
    } else {
      for (int64_t h = 0; h < dims.hkv && j0 < j1; ++h)
        run((b * dims.hkv + h) * dims.s + j0, j1 - j0);
    }
    return m;
  };
  // Rows [t0, t1) of batch b of an append's rows [B, Hkv, L, W] (their
  // values: the cache's type or f32, no scale).
  auto appendedRows = [&](const AttentionOperands::Appended &a, int64_t b,
                          int64_t t0, int64_t t1, bool keys) {
    const HostTensor &r = *a.rows;
    const int64_t l = r.dim(2), w = r.dim(3);
    double m = 0;
    for (int64_t h = 0; h < dims.hkv; ++h) {
      const int64_t first = ((b * dims.hkv + h) * l + t0) * w;
      if (keys || !valueColumns) {
        m = std::max(m, finiteAbsMax(r, first, (t1 - t0) * w));
        continue;
      }
      for (int64_t t = 0; t < t1 - t0; ++t)
        m = std::max(m, finiteAbsMax(r, first + t * w, valueColumns));
    }
    return m;
  };
  // Logical rows [j0, j1) of batch b as the attention reads them: the
  // cache's, or an append's where it writes them.
  auto rowsMax = [&](int64_t b, int64_t j0, int64_t j1, bool keys) {
    if (!(keys ? readKeys : readValues))
      return 0.0;
    const AttentionOperands::Appended &a = keys ? keyAppended : valueAppended;
    if (!a.rows)
      return cacheRows(b, j0, j1, keys);
    const int64_t p = a.pos->getInt(b), l = a.rows->dim(2);
    double m = std::max(cacheRows(b, j0, std::min(j1, p), keys),
                        cacheRows(b, std::max(j0, p + l), j1, keys));
    const int64_t w0 = std::max(j0, p), w1 = std::min(j1, p + l);
    if (w0 < w1)
      m = std::max(m, appendedRows(a, b, w0 - p, w1 - p, keys));
    return m;
  };
  for (int64_t b = 0; b < dims.b && (readKeys || readValues); ++b) {
    if (!keyValid) {
      kMax = std::max(kMax, rowsMax(b, 0, kvLen[b], true));
      vMax = std::max(vMax, rowsMax(b, 0, kvLen[b], false));
      continue;
    }
    for (int64_t j = 0; j < kvLen[b]; ++j) {
      if (keyValid->getInt(b * dims.s + j) == 0)
        continue;
      kMax = std::max(kMax, rowsMax(b, j, j + 1, true));
      vMax = std::max(vMax, rowsMax(b, j, j + 1, false));
    }
  }
  const double scoreBound = boundOfScores(kMax);
  auto sci = [](double x) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.3g", x);
    return std::string(text);
  };
  if (scoreBound > fltMax)
    return Status::error(
        "scores may overflow f32: max|q| = " + sci(qMax) + ", max|k| = " +
        sci(kMax) + (maskMax ? ", max|mask| = " + sci(maskMax) : "") +
        ", D = " + str(dims.d) + ", scale = " + sci(scale) + " bound them by " +
        sci(scoreBound) +
        " > 3.4e38 (the compiled kernels compute scores in f32; see "
        "docs/semantics.md, \"Range\")");
  if (static_cast<double>(longest) * vMax > fltMax)
    return Status::error(
        "the weighted sum of values may overflow f32: max|v| = " + sci(vMax) +
        " over " + str(longest) +
        " keys is above 3.4e38 (docs/semantics.md, \"Range\")");
  return Status::ok();
}
} // namespace

Status rotate(const HostTensor &x, const Rope &rope,
              const std::function<int64_t(int64_t, int64_t)> &position,
              ElementType resultType, HostTensor &result) {
  if (x.rank() != 4)
    return Status::error("rope: the rotated tensor must have rank 4, got " +
                         x.shapeString());
  const int64_t b = x.dim(0), h = x.dim(1), l = x.dim(2), d = x.dim(3);
  const int64_t r = rope.rotaryDim;
  if (r < 2 || r % 2)
    return Status::error("rope: rotary_dim = " + str(r) +
                         " must be even and at least 2");
  if (r > d)
    return Status::error("rope: rotary_dim = " + str(r) +
                         " exceeds the head dim D = " + str(d));
  const int64_t half = r / 2;
  const bool tables = rope.cos || rope.sin;
  int64_t rows = 0;
  if (tables) {
    if (!rope.cos || !rope.sin)
      return Status::error("rotary_cos and rotary_sin come together: " +
                           std::string(rope.cos ? "rotary_sin" : "rotary_cos") +
                           " is missing");
    KVATTN_RETURN_IF_ERROR(checkFloat("rotary_cos", *rope.cos));
    KVATTN_RETURN_IF_ERROR(checkFloat("rotary_sin", *rope.sin));
    if (rope.cos->rank() != 2)
      return Status::error("rotary_cos must have rank 2 [P, rotary_dim / 2], "
                           "got " +
                           rope.cos->shapeString());
    rows = rope.cos->dim(0);
    KVATTN_RETURN_IF_ERROR(checkShape("rotary_cos", *rope.cos,
                                      {{"P", rows}, {"rotary_dim / 2", half}}));
    KVATTN_RETURN_IF_ERROR(checkShape("rotary_sin", *rope.sin,
                                      {{"P", rows}, {"rotary_dim / 2", half}}));
  } else if (!(rope.theta > 1.0) || !std::isfinite(rope.theta)) {
    return Status::error("rope: theta must be a finite value above 1");
  }
  KVATTN_RETURN_IF_ERROR(HostTensor::make(resultType, x.shape(), result));
  std::vector<float> invFreq(half);
  for (int64_t k = 0; !tables && k < half; ++k)
    invFreq[k] = static_cast<float>(std::pow(
        rope.theta, -2.0 * static_cast<double>(k) / static_cast<double>(r)));
  std::vector<float> row(d), rotated(d), cosines(half), sines(half);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < l; ++i) {
      const int64_t p = position(bi, i);
      if (p < 0)
        return Status::error("rope: position " + str(p) + " of batch " +
                             str(bi) + ", row " + str(i) + " is negative");
      if (tables && p >= rows)
        return Status::error(rotaryTableMessage(bi, i, p, rows));
      for (int64_t k = 0; k < half; ++k) {
        if (tables) {
          // The tables' values widened to f32.
          cosines[k] = static_cast<float>(rope.cos->getDouble(p * half + k));
          sines[k] = static_cast<float>(rope.sin->getDouble(p * half + k));
          continue;
        }
        const float angle = static_cast<float>(p) * invFreq[k];
        cosines[k] = static_cast<float>(std::cos(static_cast<double>(angle)));
        sines[k] = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
      for (int64_t hi = 0; hi < h; ++hi) {
        const int64_t base = x.flatIndex({bi, hi, i, 0});
        for (int64_t e = 0; e < d; ++e)
          row[e] = static_cast<float>(x.getDouble(base + e));
        rotated = row;
        for (int64_t k = 0; k < half; ++k) {
          const int64_t ia = rope.interleaved ? 2 * k : k;
          const int64_t ib = rope.interleaved ? 2 * k + 1 : k + half;
          const float a = row[ia], bv = row[ib];
          const float ac = a * cosines[k], bs = bv * sines[k];
          const float bc = bv * cosines[k], as = a * sines[k];
          rotated[ia] = ac - bs;
          rotated[ib] = bc + as;
        }
        for (int64_t e = 0; e < d; ++e)
          result.setDouble(base + e, rotated[e]);
      }
    }
  return Status::ok();
}

/// The latent form's rule: 1 <= value_dim <= D.
static Status checkLatentValueDim(const HostTensor &key, int64_t valueDim) {
  if (key.rank() < 1)
    return Status::error("the latent form needs a key of rank >= 1");
  const int64_t d = key.dim(key.rank() - 1);
  if (valueDim < 1 || valueDim > d)
    return Status::error("value_dim = " + str(valueDim) +
                         " must be in [1, D = " + str(d) +
                         "]: the latent form's V is the first value_dim "
                         "columns of key");
  return Status::ok();
}

Status latentValue(const HostTensor &key, int64_t valueDim, HostTensor &value) {
  KVATTN_RETURN_IF_ERROR(checkLatentValueDim(key, valueDim));
  const int64_t d = key.dim(key.rank() - 1);
  std::vector<int64_t> shape = key.shape();
  shape.back() = valueDim;
  KVATTN_RETURN_IF_ERROR(HostTensor::make(key.elementType(), shape, value));
  const size_t elt = elementTypeSize(key.elementType());
  const int64_t rows = d == 0 ? 0 : key.numElements() / d;
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(value.mutableData() + r * valueDim * elt,
                key.data() + r * d * elt, valueDim * elt);
  return Status::ok();
}

Status attention(const AttentionOperands &ops, const AttentionAttributes &attrs,
                 AttentionResult &result, Compute compute) {
  // The latent form: V is the key's first columns, by definition.
  if (ops.latentValueDim != 0) {
    if (ops.value)
      return Status::error("value_dim = " + str(ops.latentValueDim) +
                           " declares the latent form (V is the first "
                           "value_dim columns of key), but a value is given");
    if (!ops.key)
      return Status::error("query, key and value are required");
    if (compute == Compute::ChecksOnly) {
      // Checks only (a compiled path's validation, every call): V is read
      // as the key's first columns in place, not copied.
      KVATTN_RETURN_IF_ERROR(checkLatentValueDim(*ops.key, ops.latentValueDim));
      AttentionOperands plain = ops;
      plain.value = ops.key;
      plain.valueColumns = ops.latentValueDim;
      plain.valueAppended = ops.keyAppended; // (V is the key's columns)
      plain.latentValueDim = 0;
      return attention(plain, attrs, result, compute);
    }
    HostTensor value;
    KVATTN_RETURN_IF_ERROR(latentValue(*ops.key, ops.latentValueDim, value));
    AttentionOperands plain = ops;
    plain.value = &value;
    plain.latentValueDim = 0;
    return attention(plain, attrs, result, compute);
  }
  // A ragged batch: B sequences (q_start has B + 1 entries) over the packed
  // rows of a [1, Hq, T, D] query.
  std::vector<int64_t> qStart;
  if (ops.qStart) {
    KVATTN_RETURN_IF_ERROR(checkInteger("q_start", *ops.qStart));
    if (ops.qStart->rank() != 1 || ops.qStart->dim(0) < 1)
      return Status::error("q_start must have shape [B + 1] (at least one "
                           "entry), got " +
                           ops.qStart->shapeString());
    for (int64_t n = 0; n < ops.qStart->numElements(); ++n)
      qStart.push_back(ops.qStart->getInt(n));
    if (ops.qPos || ops.kPos)
      return Status::error("q_start (packed rows) does not combine with "
                           "explicit positions (q_pos/k_pos)");
    if (ops.mask)
      return Status::error("q_start (packed rows) does not combine with a "
                           "mask");
  }
  const int64_t sequences =
      ops.qStart ? static_cast<int64_t>(qStart.size()) - 1 : -1;
  Dims dims;
  if ((ops.keyScale || ops.valueScale) && compute != Compute::ChecksOnly)
    return Status::error("k_scale / v_scale: the reference computes over "
                         "the dequantised caches; dequantise them first "
                         "(dequantizeKvCache)");
  if (ops.blockTable) {
    if (compute != Compute::ChecksOnly)
      return Status::error("block_table: the reference computes over the "
                           "logical caches; gather the pages first "
                           "(gatherPages)");
    KVATTN_RETURN_IF_ERROR(checkPagedQKV(ops.query, ops.key, ops.value,
                                         *ops.blockTable, ops.kvLen, dims,
                                         sequences));
  } else {
    KVATTN_RETURN_IF_ERROR(
        checkQKV(ops.query, ops.key, ops.value, dims, sequences));
  }
  if (ops.valueColumns != 0) {
    if (compute != Compute::ChecksOnly || ops.value != ops.key)
      return Status::error("valueColumns reads V as the key's first columns "
                           "in a check-only run (the latent form)");
    dims.dv = ops.valueColumns;
  }
  // The per-sequence sizes: B is the sequence count (the query's batch when
  // not packed).
  Dims seq = dims;
  if (ops.qStart)
    seq.b = sequences;

  // Operand groups, as the verifier states them.
  const bool offsetForm = ops.qOffset || ops.kOffset;
  const bool explicitForm = ops.qPos || ops.kPos;
  if (offsetForm && explicitForm)
    return Status::error("positions are given both in offset form and in "
                         "explicit form; use one form");
  if (ops.kOffset && !ops.qOffset)
    return Status::error("k_offset requires q_offset");
  if (static_cast<bool>(ops.qPos) != static_cast<bool>(ops.kPos))
    return Status::error("the explicit form needs both q_pos and k_pos");
  if ((attrs.causal || attrs.window || attrs.windowRight) && !offsetForm &&
      !explicitForm)
    return Status::error("causal and window attention need query and key "
                         "positions");
  if (attrs.windowRight && *attrs.windowRight < 0)
    return Status::error("window_right must be non-negative, got " +
                         str(*attrs.windowRight));
  if (attrs.windowRight && attrs.causal)
    return Status::error("window_right does not combine with causal");
  if (attrs.window && *attrs.window <= 0)
    return Status::error("window must be positive, got " + str(*attrs.window));
  if (attrs.softcap && !(*attrs.softcap > 0.0 && std::isfinite(*attrs.softcap)))
    return Status::error("softcap must be positive and finite");

  std::vector<int64_t> qOffset(seq.b, 0), kOffset(seq.b, 0), qPos, kPos,
      kvLen(seq.b, dims.s);
  if (ops.qOffset) {
    KVATTN_RETURN_IF_ERROR(checkInteger("q_offset", *ops.qOffset));
    KVATTN_RETURN_IF_ERROR(
        checkShape("q_offset", *ops.qOffset, {{"B", seq.b}}));
    KVATTN_RETURN_IF_ERROR(readNonNegative("q_offset", *ops.qOffset, qOffset));
  }
  if (ops.kOffset) {
    KVATTN_RETURN_IF_ERROR(checkInteger("k_offset", *ops.kOffset));
    KVATTN_RETURN_IF_ERROR(
        checkShape("k_offset", *ops.kOffset, {{"B", seq.b}}));
    KVATTN_RETURN_IF_ERROR(readNonNegative("k_offset", *ops.kOffset, kOffset));
  }
  if (ops.qPos) {
    KVATTN_RETURN_IF_ERROR(checkInteger("q_pos", *ops.qPos));
    KVATTN_RETURN_IF_ERROR(
        checkShape("q_pos", *ops.qPos, {{"B", dims.b}, {"L", dims.l}}));
    KVATTN_RETURN_IF_ERROR(readNonNegative("q_pos", *ops.qPos, qPos));
    KVATTN_RETURN_IF_ERROR(checkInteger("k_pos", *ops.kPos));
    KVATTN_RETURN_IF_ERROR(
        checkShape("k_pos", *ops.kPos, {{"B", dims.b}, {"S", dims.s}}));
    KVATTN_RETURN_IF_ERROR(readNonNegative("k_pos", *ops.kPos, kPos));
  }
  if (ops.kvLen)
    KVATTN_RETURN_IF_ERROR(readKvLen(*ops.kvLen, seq, kvLen));
  if (ops.keyValid) {
    if (ops.keyValid->elementType() != ElementType::I1)
      return Status::error(std::string("key_valid must be an i1 tensor, got ") +
                           elementTypeName(ops.keyValid->elementType()));
    KVATTN_RETURN_IF_ERROR(
        checkShape("key_valid", *ops.keyValid, {{"B", seq.b}, {"S", dims.s}}));
  }
  if (ops.mask)
    KVATTN_RETURN_IF_ERROR(checkMask(*ops.mask, dims));
  for (auto [name, t] : {std::pair{"sinks", ops.sinks},
                         std::pair{"alibi_slopes", ops.alibiSlopes}}) {
    if (!t)
      continue;
    if (t->elementType() != ElementType::F32)
      return Status::error(std::string(name) + " must be an f32 tensor, got " +
                           elementTypeName(t->elementType()));
    KVATTN_RETURN_IF_ERROR(checkShape(name, *t, {{"Hq", dims.hq}}));
  }
  if (ops.alibiSlopes && !offsetForm && !explicitForm)
    return Status::error("alibi_slopes (ALiBi) needs query and key "
                         "positions");

  // A draft-token tree per sequence (kvattn/Support/TreeParents.h).
  std::vector<int64_t> treeParent, treeDepthOf;
  if (ops.treeParents) {
    if (!ops.qStart)
      return Status::error("tree_parents needs q_start: each sequence's "
                           "draft tokens are the packed rows of a ragged "
                           "batch");
    if (!ops.qOffset)
      return Status::error("tree_parents needs q_offset: a draft token's "
                           "position is q_offset[b] + its depth in the tree");
    KVATTN_RETURN_IF_ERROR(checkInteger("tree_parents", *ops.treeParents));
    KVATTN_RETURN_IF_ERROR(
        checkShape("tree_parents", *ops.treeParents, {{"T", dims.l}}));
    for (int64_t n = 0; n < ops.treeParents->numElements(); ++n)
      treeParent.push_back(ops.treeParents->getInt(n));
  }

  // The packed rows' sequences (kvattn/Support/QueryStarts.h), before any
  // row reads a key.
  std::vector<int64_t> rowSequence;
  if (ops.qStart) {
    QueryStartsView view;
    view.batch = seq.b;
    view.start = [&](int64_t slot) { return qStart[slot]; };
    view.rows = dims.l;
    if (ops.qOffset)
      view.qOffset = [&](int64_t b) -> std::optional<int64_t> {
        return qOffset[b];
      };
    view.kOffset = [&](int64_t b) -> std::optional<int64_t> {
      return kOffset[b];
    };
    if (ops.kvLen)
      view.kvLen = [&](int64_t b) -> std::optional<int64_t> {
        return kvLen[b];
      };
    KVATTN_RETURN_IF_ERROR(checkQueryStarts(view));
    if (ops.treeParents) {
      TreeParentsView tree;
      tree.batch = seq.b;
      tree.start = view.start;
      tree.parent = [&](int64_t row) { return treeParent[row]; };
      tree.qOffset = view.qOffset;
      tree.kOffset = view.kOffset;
      tree.kvLen = [&](int64_t b) -> std::optional<int64_t> {
        return kvLen[b];
      };
      KVATTN_RETURN_IF_ERROR(checkTreeParents(tree));
      treeDepthOf.resize(dims.l);
      for (int64_t b = 0; b < seq.b; ++b)
        for (int64_t i = qStart[b]; i < qStart[b + 1]; ++i)
          treeDepthOf[i] =
              treeDepth([&, b](int64_t x) { return treeParent[qStart[b] + x]; },
                        i - qStart[b]);
    }
    rowSequence.resize(dims.l);
    for (int64_t b = 0; b < seq.b; ++b)
      for (int64_t i = qStart[b]; i < qStart[b + 1]; ++i)
        rowSequence[i] = b;
  }

  const double scale =
      attrs.scale.value_or(1.0 / std::sqrt(static_cast<double>(dims.d)));
  KVATTN_RETURN_IF_ERROR(checkF32Range(
      *ops.query, *ops.key, *ops.value, ops.mask, seq, kvLen, ops.keyValid,
      scale, ops.blockTable, ops.keyScale, ops.valueScale, ops.valueColumns,
      ops.keyAppended, ops.valueAppended));

  auto queryPos = [&](int64_t b, int64_t i) {
    if (ops.treeParents)
      return qOffset[b] + treeDepthOf[qStart[b] + i];
    return ops.qPos ? qPos[b * dims.l + i] : qOffset[b] + i;
  };
  // The key's position for row i; a draft key of a tree (the last L_b
  // keys) sits at its token's position, and `inTree` says whether it is
  // the row's token or one of its ancestors (true for cache keys).
  auto keyPosFor = [&](int64_t b, int64_t i, int64_t j, bool *inTree) {
    if (inTree)
      *inTree = true;
    if (ops.treeParents) {
      const int64_t rows = qStart[b + 1] - qStart[b];
      const int64_t a = j - (kvLen[b] - rows);
      if (a >= 0) {
        int64_t steps = 0;
        bool ancestor = treeAncestor(
            [&](int64_t x) { return treeParent[qStart[b] + x]; }, i, a, &steps);
        if (inTree)
          *inTree = ancestor;
        return queryPos(b, i) - steps;
      }
    }
    return ops.kPos ? kPos[b * dims.s + j] : kOffset[b] + j;
  };

  // RoPE: the query rotated at its positions; the keys' record.
  if (attrs.rope && attrs.queryRotated)
    return Status::error("the query is declared rotated (query_rotated) and "
                         "rope would rotate it again");
  if (attrs.rope && ops.treeParents)
    return Status::error("rope does not combine with tree_parents yet: a "
                         "draft token's position is its depth in the tree");
  if (attrs.rope && !offsetForm && !explicitForm)
    return Status::error("rope rotates the query at its positions: give "
                         "q_offset or q_pos and k_pos");
  HostTensor rotatedQuery;
  const HostTensor *query = ops.query;
  if (attrs.rope) {
    std::function<int64_t(int64_t, int64_t)> position =
        [&](int64_t b, int64_t i) { return queryPos(b, i); };
    if (ops.qStart)
      position = [&](int64_t, int64_t i) {
        const int64_t b = rowSequence[i];
        return qOffset[b] + (i - qStart[b]);
      };
    KVATTN_RETURN_IF_ERROR(rotate(
        *ops.query, *attrs.rope, position,
        attrs.rope->f32Query ? ElementType::F32 : ops.query->elementType(),
        rotatedQuery));
    query = &rotatedQuery;
  }
  if (ops.kRopePos) {
    if (ops.qStart)
      return Status::error("k_rope_pos is not taken with q_start");
    if (!offsetForm && !explicitForm)
      return Status::error("k_rope_pos binds the keys to their positions: "
                           "give q_offset (and k_offset) or q_pos and k_pos");
    KVATTN_RETURN_IF_ERROR(checkInteger("k_rope_pos", *ops.kRopePos));
    KVATTN_RETURN_IF_ERROR(checkShape("k_rope_pos", *ops.kRopePos,
                                      {{"B", dims.b}, {"S", dims.s}}));
    for (int64_t b = 0; b < dims.b; ++b)
      for (int64_t j = 0; j < kvLen[b]; ++j) {
        if (ops.keyValid && ops.keyValid->getInt(b * dims.s + j) == 0)
          continue;
        const int64_t at = ops.kRopePos->getInt(b * dims.s + j);
        const int64_t kp = keyPosFor(b, /*i=*/0, j, nullptr); // (no tree)
        if (at != kp)
          return Status::error(kRopePosMessage(b, j, at, kp));
      }
  }

  Core core{*query,
            *ops.key,
            *ops.value,
            dims,
            scale,
            attrs.softcap,
            ops.mask,
            [&](int64_t b, int64_t, int64_t i, int64_t j) {
              if (j >= kvLen[b])
                return false;
              if (ops.keyValid && ops.keyValid->getInt(b * dims.s + j) == 0)
                return false;
              bool inTree = true;
              const int64_t qp = queryPos(b, i),
                            kp = keyPosFor(b, i, j, &inTree);
              if (!inTree)
                return false;
              if (attrs.causal && kp > qp)
                return false;
              if (attrs.window && qp - kp >= *attrs.window)
                return false;
              if (attrs.windowRight && kp - qp > *attrs.windowRight)
                return false;
              return true;
            }};
  core.sinks = ops.sinks;
  if (ops.alibiSlopes) {
    core.alibiSlopes = ops.alibiSlopes;
    core.alibiDistance = [&](int64_t b, int64_t i, int64_t j) {
      // In integers: positions are at most 2^62, so the difference fits.
      const int64_t diff = queryPos(b, i) - keyPosFor(b, i, j, nullptr);
      return diff < 0 ? -diff : diff;
    };
  }
  if (ops.qStart) {
    core.rowSequence = &rowSequence;
    core.sequenceStart = &qStart;
  }
  KVATTN_RETURN_IF_ERROR(HostTensor::make(
      ElementType::F64, {dims.b, dims.hq, dims.l, dims.dv}, result.out));
  KVATTN_RETURN_IF_ERROR(HostTensor::make(
      ElementType::F64, {dims.b, dims.hq, dims.l}, result.lse));
  if (compute == Compute::Values)
    core.run(result.out, &result.lse);
  return Status::ok();
}

Status sdpa(const SdpaOperands &ops, const SdpaAttributes &attrs,
            HostTensor &out, Compute compute, HostTensor *lse) {
  Dims dims;
  KVATTN_RETURN_IF_ERROR(checkQKV(ops.query, ops.key, ops.value, dims));
  if (attrs.window) {
    if (*attrs.window <= 0)
      return Status::error("window must be positive, got " +
                           str(*attrs.window));
    if (attrs.causal == CausalAlignment::None)
      return Status::error("window needs causal");
  }
  if (attrs.softcap && !(*attrs.softcap > 0 && std::isfinite(*attrs.softcap)))
    return Status::error("softcap must be positive and finite");
  if (ops.mask) {
    if (attrs.causal != CausalAlignment::None)
      return Status::error("mask and causal are exclusive (as in torch SDPA)");
    KVATTN_RETURN_IF_ERROR(checkMask(*ops.mask, dims));
  }
  std::vector<int64_t> kvLen(dims.b, dims.s);
  if (ops.kvLen)
    KVATTN_RETURN_IF_ERROR(readKvLen(*ops.kvLen, dims, kvLen));
  const double scale =
      attrs.scale.value_or(1.0 / std::sqrt(static_cast<double>(dims.d)));
  KVATTN_RETURN_IF_ERROR(checkF32Range(*ops.query, *ops.key, *ops.value,
                                       ops.mask, dims, kvLen, nullptr, scale));
  // Lower-right aligns the last query row with the last key: row i sits at
  // position i + S - L (S the number of keys of the batch). Upper-left puts
  // row i at position i.
  Core core{*ops.query,
            *ops.key,
            *ops.value,
            dims,
            scale,
            attrs.softcap,
            ops.mask,
            [&](int64_t b, int64_t, int64_t i, int64_t j) {
              if (j >= kvLen[b])
                return false;
              int64_t position = i; // the row's causal position
              switch (attrs.causal) {
              case CausalAlignment::None:
                return true;
              case CausalAlignment::UpperLeft:
                break;
              case CausalAlignment::LowerRight:
                position = i + kvLen[b] - dims.l;
                break;
              }
              if (j > position)
                return false;
              return !attrs.window || position - j < *attrs.window;
            }};
  KVATTN_RETURN_IF_ERROR(HostTensor::make(
      ElementType::F64, {dims.b, dims.hq, dims.l, dims.dv}, out));
  if (lse)
    KVATTN_RETURN_IF_ERROR(
        HostTensor::make(ElementType::F64, {dims.b, dims.hq, dims.l}, *lse));
  if (compute == Compute::Values)
    core.run(out, lse);
  return Status::ok();
}

/// The operands every append shares: `update [B, H, L, D]` (L returned in
/// `l`) and `pos [B]` (i32/i64).
static Status checkAppendUpdate(const HostTensor &update, const HostTensor &pos,
                                int64_t b, int64_t h, int64_t d, int64_t &l) {
  if (update.rank() != 4)
    return Status::error("update must have shape [B, H, L, D], got " +
                         update.shapeString());
  l = update.dim(2);
  KVATTN_RETURN_IF_ERROR(
      checkShape("update", update, {{"B", b}, {"H", h}, {"L", l}, {"D", d}}));
  KVATTN_RETURN_IF_ERROR(checkInteger("pos", pos));
  return checkShape("pos", pos, {{"B", b}});
}

Status append(const HostTensor &cache, const HostTensor &update,
              const HostTensor &pos, HostTensor &result,
              AppendedRows *checkOnly) {
  KVATTN_RETURN_IF_ERROR(checkFloat("cache", cache));
  if (cache.rank() != 4)
    return Status::error("cache must have shape [B, H, C, D], got " +
                         cache.shapeString());
  if (update.elementType() != cache.elementType())
    return Status::error(std::string("update element type ") +
                         elementTypeName(update.elementType()) +
                         " must match the cache element type " +
                         elementTypeName(cache.elementType()));
  const int64_t b = cache.dim(0), h = cache.dim(1), c = cache.dim(2),
                d = cache.dim(3);
  int64_t l = 0;
  KVATTN_RETURN_IF_ERROR(checkAppendUpdate(update, pos, b, h, d, l));

  for (int64_t bi = 0; bi < b; ++bi) {
    const int64_t p = pos.getInt(bi);
    if (p < 0 || p > c - l)
      return Status::error("pos[" + str(bi) + "] = " + str(p) +
                           " writes rows [" + str(p) + ", " + str(p + l) +
                           ") outside the cache capacity C = " + str(c) +
                           " (batch " + str(bi) + ")");
  }
  if (checkOnly) {
    checkOnly->rows = update;
    return Status::ok();
  }
  // A copy (the op has value semantics): writing it, a view of the
  // caller's cache too, writes its own bytes (HostTensor::mutableData).
  result = cache;
  const size_t eltSize = elementTypeSize(cache.elementType());
  for (int64_t bi = 0; bi < b; ++bi) {
    const int64_t p = pos.getInt(bi);
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t t = 0; t < l; ++t)
        std::copy_n(update.data() + update.flatIndex({bi, hi, t, 0}) * eltSize,
                    d * eltSize,
                    result.mutableData() +
                        result.flatIndex({bi, hi, p + t, 0}) * eltSize);
  }
  return Status::ok();
}

Status appendRotated(const HostTensor &cache, const HostTensor &update,
                     const HostTensor &pos, const Rope &rope,
                     const HostTensor *ropePos, HostTensor &result,
                     HostTensor *ropePosResult, AppendedRows *checkOnly) {
  KVATTN_RETURN_IF_ERROR(checkFloat("cache", cache));
  if (cache.rank() != 4 || update.rank() != 4)
    return Status::error("cache and update must have rank 4, got " +
                         cache.shapeString() + " and " + update.shapeString());
  KVATTN_RETURN_IF_ERROR(checkInteger("pos", pos));
  KVATTN_RETURN_IF_ERROR(checkShape("pos", pos, {{"B", update.dim(0)}}));
  HostTensor rotated;
  KVATTN_RETURN_IF_ERROR(rotate(
      update, rope, [&](int64_t b, int64_t t) { return pos.getInt(b) + t; },
      cache.elementType(), rotated));
  KVATTN_RETURN_IF_ERROR(append(cache, rotated, pos, result, checkOnly));
  if (!ropePos)
    return Status::ok();
  KVATTN_RETURN_IF_ERROR(checkInteger("rope_pos", *ropePos));
  KVATTN_RETURN_IF_ERROR(checkShape(
      "rope_pos", *ropePos, {{"B", cache.dim(0)}, {"C", cache.dim(2)}}));
  // A copy (the op has value semantics; HostTensor::mutableData).
  *ropePosResult = *ropePos;
  const int64_t c = cache.dim(2);
  for (int64_t b = 0; b < cache.dim(0); ++b)
    for (int64_t t = 0; t < update.dim(2); ++t)
      ropePosResult->setInt(b * c + pos.getInt(b) + t, pos.getInt(b) + t);
  return Status::ok();
}

Status appendPaged(const HostTensor &pages, const HostTensor &update,
                   const HostTensor &pos, const HostTensor &blockTable,
                   HostTensor &result, bool skipPadding,
                   AppendedRows *checkOnly) {
  KVATTN_RETURN_IF_ERROR(checkFloat("pages", pages));
  if (pages.rank() != 4)
    return Status::error(
        "pages must have shape [num_pages, page_size, H, D], got " +
        pages.shapeString());
  if (update.elementType() != pages.elementType())
    return Status::error(std::string("update element type ") +
                         elementTypeName(update.elementType()) +
                         " must match the cache element type " +
                         elementTypeName(pages.elementType()));
  KVATTN_RETURN_IF_ERROR(checkInteger("block_table", blockTable));
  if (blockTable.rank() != 2)
    return Status::error("block_table must have shape [B, max_pages], got " +
                         blockTable.shapeString());
  const int64_t numPages = pages.dim(0), pageSize = pages.dim(1),
                h = pages.dim(2), d = pages.dim(3), b = blockTable.dim(0),
                maxPages = blockTable.dim(1);
  int64_t l = 0;
  KVATTN_RETURN_IF_ERROR(checkAppendUpdate(update, pos, b, h, d, l));

  BlockTableView view;
  view.batch = b;
  view.maxPages = maxPages;
  view.page = [&](int64_t bi, int64_t slot) {
    return blockTable.getInt(bi * maxPages + slot);
  };
  KVATTN_RETURN_IF_ERROR(checkBlockTable(view, numPages, pageSize));
  KVATTN_RETURN_IF_ERROR(checkPagedWrite(
      view,
      [&](int64_t bi) -> std::optional<int64_t> { return pos.getInt(bi); }, l,
      pageSize, skipPadding));
  if (checkOnly) {
    checkOnly->rows = update;
    return Status::ok();
  }

  // A copy (the op has value semantics): writing it, a view of the
  // caller's pages too, writes its own bytes (HostTensor::mutableData).
  result = pages;
  const size_t eltSize = elementTypeSize(pages.elementType());
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < l; ++t) {
      const int64_t p = pos.getInt(bi) + t;
      const int64_t page = blockTable.getInt(bi * maxPages + p / pageSize);
      if (page == -1)
        continue; // padding (skipPadding; checkPagedWrite refused it else)
      for (int64_t hi = 0; hi < h; ++hi)
        std::copy_n(update.data() + update.flatIndex({bi, hi, t, 0}) * eltSize,
                    d * eltSize,
                    result.mutableData() +
                        result.flatIndex({page, p % pageSize, hi, 0}) *
                            eltSize);
    }
  return Status::ok();
}

static Status cascadeContiguous(const CascadeOperands &ops,
                                const AttentionAttributes &attrs,
                                AttentionResult &result, Compute compute);

Status cascade(const CascadeOperands &ops, const AttentionAttributes &attrs,
               AttentionResult &result, Compute compute) {
  if (!ops.prefixPages && !ops.prefixLen && !ops.blockTable)
    return cascadeContiguous(ops, attrs, result, compute);
  CascadeOperands plain = ops;
  plain.prefixPages = plain.prefixLen = plain.blockTable = nullptr;
  HostTensor prefixKey, prefixValue, key, value;
  if (ops.prefixPages || ops.prefixLen) {
    if (!ops.prefixPages || !ops.prefixLen)
      return Status::error("cascade: prefix_pages and prefix_len go together");
    const HostTensor &pages = *ops.prefixPages, &len = *ops.prefixLen;
    KVATTN_RETURN_IF_ERROR(checkInteger("prefix_pages", pages));
    KVATTN_RETURN_IF_ERROR(checkInteger("prefix_len", len));
    if (pages.rank() != 1 || len.rank() != 1 || len.dim(0) != 1)
      return Status::error("cascade: prefix_pages must be [prefix_max_pages] "
                           "and prefix_len [1], got " +
                           pages.shapeString() + " and " + len.shapeString());
    for (auto [name, pool] : {std::pair<const char *, const HostTensor *>{
                                  "prefix_key", ops.prefixKey},
                              {"prefix_value", ops.prefixValue}})
      if (pool->rank() != 4 || pool->dim(0) != ops.prefixKey->dim(0) ||
          pool->dim(1) != ops.prefixKey->dim(1))
        return Status::error(std::string("cascade: ") + name +
                             " must be a page pool [num_pages, page_size, "
                             "Hkv, D], the prefix key's, got " +
                             pool->shapeString());
    // The prefix as the one-sequence table [1, prefix_max_pages], checked
    // under its own names.
    const int64_t maxPages = pages.dim(0), p = len.getInt(0);
    BlockTableView view;
    view.batch = 1;
    view.maxPages = maxPages;
    view.page = [&](int64_t, int64_t slot) { return pages.getInt(slot); };
    view.kvLen = [&](int64_t) -> std::optional<int64_t> { return p; };
    view.name = "prefix_pages";
    view.lengthName = "prefix_len";
    view.flat = true;
    KVATTN_RETURN_IF_ERROR(
        checkBlockTable(view, ops.prefixKey->dim(0), ops.prefixKey->dim(1)));
    HostTensor table(ElementType::I64, {1, maxPages}),
        length(ElementType::I64, {1});
    for (int64_t slot = 0; slot < maxPages; ++slot)
      table.setInt(slot, pages.getInt(slot));
    length.setInt(0, p);
    // The gathered [1, Hkv, max_pages * page_size, D], cut to its P keys.
    auto gather = [&](const HostTensor &pool, HostTensor &out) -> Status {
      HostTensor full;
      KVATTN_RETURN_IF_ERROR(gatherPages(pool, table, length, full));
      const int64_t h = full.dim(1), n = full.dim(2), d = full.dim(3);
      KVATTN_RETURN_IF_ERROR(
          HostTensor::make(full.elementType(), {1, h, p, d}, out));
      const size_t eltSize = elementTypeSize(full.elementType());
      for (int64_t g = 0; g < h; ++g)
        std::copy_n(full.data() + g * n * d * eltSize, p * d * eltSize,
                    out.mutableData() + g * p * d * eltSize);
      return Status::ok();
    };
    KVATTN_RETURN_IF_ERROR(gather(*ops.prefixKey, prefixKey));
    KVATTN_RETURN_IF_ERROR(gather(*ops.prefixValue, prefixValue));
    plain.prefixKey = &prefixKey;
    plain.prefixValue = &prefixValue;
  }
  if (ops.blockTable) {
    KVATTN_RETURN_IF_ERROR(
        gatherPages(*ops.key, *ops.blockTable, *ops.kvLen, key));
    KVATTN_RETURN_IF_ERROR(
        gatherPages(*ops.value, *ops.blockTable, *ops.kvLen, value));
    plain.key = &key;
    plain.value = &value;
  }
  return cascadeContiguous(plain, attrs, result, compute);
}

static Status cascadeContiguous(const CascadeOperands &ops,
                                const AttentionAttributes &attrs,
                                AttentionResult &result, Compute compute) {
  const HostTensor &q = *ops.query, &pk = *ops.prefixKey,
                   &pv = *ops.prefixValue, &k = *ops.key, &v = *ops.value;
  for (auto [name, t] :
       {std::pair<const char *, const HostTensor *>{"query", &q},
        {"prefix_key", &pk},
        {"prefix_value", &pv},
        {"key", &k},
        {"value", &v}})
    if (t->rank() != 4)
      return Status::error(std::string(name) + " must have rank 4");
  const int64_t batch = k.dim(0), hkv = k.dim(1), s = k.dim(2), p = pk.dim(2);
  if (pk.dim(0) != 1 || pv.dim(0) != 1 || pk.dim(1) != hkv ||
      pv.dim(1) != hkv || pv.dim(2) != p || v.dim(0) != batch ||
      v.dim(1) != hkv || v.dim(2) != s || pk.dim(3) != k.dim(3) ||
      pv.dim(3) != v.dim(3))
    return Status::error("cascade: prefix_key/prefix_value must be [1, Hkv, "
                         "P, D|Dv] and key/value [B, Hkv, S, D|Dv] with the "
                         "same Hkv, D and Dv");
  if (ops.qStart->numElements() != batch + 1 ||
      ops.qOffset->numElements() != batch || ops.kvLen->numElements() != batch)
    return Status::error(
        "cascade: q_start must have B + 1 = " + std::to_string(batch + 1) +
        " entries, q_offset and kv_len B = " + std::to_string(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t qo = ops.qOffset->getInt(b), len = ops.kvLen->getInt(b);
    if (qo < 0)
      return Status::error("q_offset[" + std::to_string(b) +
                           "] = " + std::to_string(qo) +
                           " is negative (batch " + std::to_string(b) + ")");
    if (len < 0 || len > s)
      return Status::error("kv_len[" + std::to_string(b) +
                           "] = " + std::to_string(len) +
                           " is outside [0, S = " + std::to_string(s) +
                           "] (batch " + std::to_string(b) + ")");
  }
  // Each sequence's cache: the prefix, then its suffix rows.
  auto joined = [&](const HostTensor &prefix, const HostTensor &suffix,
                    HostTensor &out) -> Status {
    const int64_t d = suffix.dim(3);
    KVATTN_RETURN_IF_ERROR(
        HostTensor::make(suffix.elementType(), {batch, hkv, p + s, d}, out));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t g = 0; g < hkv; ++g)
        for (int64_t j = 0; j < p + s; ++j)
          for (int64_t x = 0; x < d; ++x) {
            const int64_t to = ((b * hkv + g) * (p + s) + j) * d + x;
            out.setDouble(to, j < p ? prefix.getDouble((g * p + j) * d + x)
                                    : suffix.getDouble(
                                          ((b * hkv + g) * s + j - p) * d + x));
          }
    return Status::ok();
  };
  HostTensor key, value;
  KVATTN_RETURN_IF_ERROR(joined(pk, k, key));
  KVATTN_RETURN_IF_ERROR(joined(pv, v, value));
  HostTensor qOffset(ElementType::I64, {batch}),
      kvLen(ElementType::I64, {batch});
  for (int64_t b = 0; b < batch; ++b) {
    qOffset.setInt(b, p + ops.qOffset->getInt(b));
    kvLen.setInt(b, p + ops.kvLen->getInt(b));
  }
  AttentionOperands plain;
  plain.query = &q;
  plain.key = &key;
  plain.value = &value;
  plain.qStart = ops.qStart;
  plain.qOffset = &qOffset;
  plain.kvLen = &kvLen;
  return attention(plain, attrs, result, compute);
}

Status merge(const HostTensor &outParts, const HostTensor &lseParts,
             AttentionResult &result) {
  if (outParts.rank() != 5 || lseParts.rank() != 4)
    return Status::error("merge: out_parts must be [N, B, Hq, L, Dv] and "
                         "lse_parts [N, B, Hq, L], got " +
                         outParts.shapeString() + " and " +
                         lseParts.shapeString());
  for (int64_t d = 0; d < 4; ++d)
    if (outParts.dim(d) != lseParts.dim(d))
      return Status::error("merge: out_parts " + outParts.shapeString() +
                           " and lse_parts " + lseParts.shapeString() +
                           " disagree in dim " + str(d));
  // Rows from the result's shape: with no part at all (n = 0) every row is
  // the identity (0, -inf), as on the compiled paths.
  const int64_t n = outParts.dim(0),
                rows = outParts.dim(1) * outParts.dim(2) * outParts.dim(3),
                dv = outParts.dim(4);
  KVATTN_RETURN_IF_ERROR(HostTensor::make(
      ElementType::F64, {outParts.dim(1), outParts.dim(2), outParts.dim(3), dv},
      result.out));
  KVATTN_RETURN_IF_ERROR(HostTensor::make(
      ElementType::F64, {outParts.dim(1), outParts.dim(2), outParts.dim(3)},
      result.lse));
  const double negInf = -std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    // lse = log sum exp(lse_n), taken relative to the largest finite lse_n.
    double peak = negInf;
    for (int64_t p = 0; p < n; ++p) {
      double l = lseParts.getDouble(p * rows + r);
      if (l > peak || std::isnan(l))
        peak = l;
    }
    if (peak == negInf) { // every part empty: the identity
      result.lse.setDouble(r, negInf);
      continue;
    }
    double sum = 0;
    for (int64_t p = 0; p < n; ++p) {
      double l = lseParts.getDouble(p * rows + r);
      if (l != negInf)
        sum += std::exp(l - peak);
    }
    double lse = peak + std::log(sum);
    result.lse.setDouble(r, lse);
    for (int64_t x = 0; x < dv; ++x) {
      double acc = 0;
      for (int64_t p = 0; p < n; ++p) {
        double l = lseParts.getDouble(p * rows + r);
        if (l != negInf)
          acc +=
              std::exp(l - lse) * outParts.getDouble((p * rows + r) * dv + x);
      }
      result.out.setDouble(r * dv + x, acc);
    }
  }
  return Status::ok();
}

Status validateBlockTable(const HostTensor &blockTable, const HostTensor &kvLen,
                          int64_t numPages, int64_t pageSize) {
  KVATTN_RETURN_IF_ERROR(checkInteger("block_table", blockTable));
  KVATTN_RETURN_IF_ERROR(checkInteger("kv_len", kvLen));
  if (blockTable.rank() != 2)
    return Status::error("block_table must have shape [B, max_pages], got " +
                         blockTable.shapeString());
  const int64_t b = blockTable.dim(0), maxPages = blockTable.dim(1);
  KVATTN_RETURN_IF_ERROR(checkShape("kv_len", kvLen, {{"B", b}}));
  if (numPages < 0)
    return Status::error("num_pages must be non-negative, got " +
                         str(numPages));
  BlockTableView view;
  view.batch = b;
  view.maxPages = maxPages;
  view.page = [&](int64_t bi, int64_t slot) {
    return blockTable.getInt(bi * maxPages + slot);
  };
  view.kvLen = [&](int64_t bi) -> std::optional<int64_t> {
    return kvLen.getInt(bi);
  };
  return checkBlockTable(view, numPages, pageSize);
}

Status gatherPages(const HostTensor &pages, const HostTensor &blockTable,
                   const HostTensor &kvLen, HostTensor &logical) {
  KVATTN_RETURN_IF_ERROR(checkFloat("pages", pages));
  if (pages.rank() != 4)
    return Status::error(
        "pages must have shape [num_pages, page_size, Hkv, D], got " +
        pages.shapeString());
  const int64_t numPages = pages.dim(0), pageSize = pages.dim(1),
                h = pages.dim(2), d = pages.dim(3);
  KVATTN_RETURN_IF_ERROR(
      validateBlockTable(blockTable, kvLen, numPages, pageSize));
  const int64_t b = blockTable.dim(0), maxPages = blockTable.dim(1);
  int64_t logicalKeys;
  if (__builtin_mul_overflow(maxPages, pageSize, &logicalKeys))
    return Status::error("block_table's max_pages x page_size overflows");
  KVATTN_RETURN_IF_ERROR(
      HostTensor::make(pages.elementType(), {b, h, logicalKeys, d}, logical));
  const size_t eltSize = elementTypeSize(pages.elementType());
  for (int64_t bi = 0; bi < b; ++bi) {
    const int64_t len = kvLen.getInt(bi);
    for (int64_t t = 0; t < len; ++t) {
      const int64_t page = blockTable.getInt(bi * maxPages + t / pageSize);
      for (int64_t hi = 0; hi < h; ++hi)
        std::copy_n(pages.data() +
                        pages.flatIndex({page, t % pageSize, hi, 0}) * eltSize,
                    d * eltSize,
                    logical.mutableData() +
                        logical.flatIndex({bi, hi, t, 0}) * eltSize);
    }
  }
  return Status::ok();
}

Status gatherKeyRows(const HostTensor &cache, const KeyRowsOperands &ops,
                     int64_t batch, HostTensor &logical, HostTensor &kvLen) {
  KVATTN_RETURN_IF_ERROR(checkFloat("key/value", cache));
  if (cache.rank() != 4)
    return Status::error("key/value must have rank 4, got " +
                         cache.shapeString());
  const int64_t rows = cache.dim(0), h = cache.dim(1), n = cache.dim(2),
                d = cache.dim(3);
  std::vector<int64_t> len;
  if (ops.kvLen) {
    KVATTN_RETURN_IF_ERROR(checkInteger("kv_len", *ops.kvLen));
    KVATTN_RETURN_IF_ERROR(checkShape("kv_len", *ops.kvLen, {{"B", batch}}));
    for (int64_t b = 0; b < batch; ++b)
      len.push_back(ops.kvLen->getInt(b));
  }
  const size_t eltSize = elementTypeSize(cache.elementType());
  if (ops.kStart) {
    const HostTensor &ks = *ops.kStart;
    KVATTN_RETURN_IF_ERROR(checkInteger("k_start", ks));
    KVATTN_RETURN_IF_ERROR(checkShape("k_start", ks, {{"B + 1", batch + 1}}));
    if (rows != 1)
      return Status::error("with k_start the key and value are packed ([1, "
                           "Hkv, N, D]): dim 0 must be 1, got " +
                           str(rows));
    KeyStartsView view;
    view.batch = batch;
    view.start = [&](int64_t slot) { return ks.getInt(slot); };
    view.rows = n;
    if (!len.empty())
      view.kvLen = [&](int64_t b) -> std::optional<int64_t> { return len[b]; };
    KVATTN_RETURN_IF_ERROR(checkKeyStarts(view));
    for (int64_t b = 0; b < batch; ++b)
      if (!len.empty() && len[b] < 0)
        return Status::error(
            "kv_len[" + str(b) + "] = " + str(len[b]) +
            " is outside [0, S = " + str(view.start(b + 1) - view.start(b)) +
            "] (batch " + str(b) + ")");
    int64_t longest = 1;
    std::vector<int64_t> effective(batch);
    for (int64_t b = 0; b < batch; ++b) {
      effective[b] = keyRowCount(view, b);
      longest = std::max(longest, effective[b]);
    }
    KVATTN_RETURN_IF_ERROR(
        HostTensor::make(cache.elementType(), {batch, h, longest, d}, logical));
    KVATTN_RETURN_IF_ERROR(HostTensor::make(ElementType::I64, {batch}, kvLen));
    for (int64_t b = 0; b < batch; ++b) {
      kvLen.setInt(b, effective[b]);
      for (int64_t hi = 0; hi < h; ++hi)
        std::copy_n(
            cache.data() + cache.flatIndex({0, hi, ks.getInt(b), 0}) * eltSize,
            effective[b] * d * eltSize,
            logical.mutableData() + logical.flatIndex({b, hi, 0, 0}) * eltSize);
    }
    return Status::ok();
  }
  if (!ops.cacheBatchIdx)
    return Status::error("gatherKeyRows needs k_start or cache_batch_idx");
  const HostTensor &idx = *ops.cacheBatchIdx;
  KVATTN_RETURN_IF_ERROR(checkInteger("cache_batch_idx", idx));
  KVATTN_RETURN_IF_ERROR(checkShape("cache_batch_idx", idx, {{"B", batch}}));
  CacheBatchIndexView view;
  view.batch = batch;
  view.index = [&](int64_t b) { return idx.getInt(b); };
  view.cacheRows = rows;
  KVATTN_RETURN_IF_ERROR(checkCacheBatchIndex(view));
  KVATTN_RETURN_IF_ERROR(
      HostTensor::make(cache.elementType(), {batch, h, n, d}, logical));
  for (int64_t b = 0; b < batch; ++b)
    std::copy_n(
        cache.data() + cache.flatIndex({idx.getInt(b), 0, 0, 0}) * eltSize,
        h * n * d * eltSize,
        logical.mutableData() + logical.flatIndex({b, 0, 0, 0}) * eltSize);
  if (ops.kvLen)
    kvLen = *ops.kvLen;
  return Status::ok();
}

} // namespace reference
} // namespace kvattn
} // namespace mlir
