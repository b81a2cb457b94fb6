//===- Fp8KvCache.cpp - FP8 KV caches in the reference -------------------===//

#include "kvattn/Reference/Fp8KvCache.h"
#include "kvattn/Reference/Reference.h"
#include "kvattn/Support/StatusWord.h"

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace mlir {
namespace kvattn {
namespace reference {

static std::string str(int64_t v) { return std::to_string(v); }

static std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

static std::string bracketed(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + str(shape[i]);
  return s + "]";
}

static Status checkCacheShape(const std::vector<int64_t> &shape) {
  if (shape.size() != 4)
    return Status::error("an FP8 cache has shape [B, Hkv, S, D], got rank " +
                         str(static_cast<int64_t>(shape.size())));
  for (int64_t d : shape)
    if (d < 0)
      return Status::error("an FP8 cache dimension is negative");
  return Status::ok();
}

Status checkKvScale(const char *name, const HostTensor &scale,
                    const std::vector<int64_t> &cacheShape,
                    KvScaleGranularity &granularity) {
  KVATTN_RETURN_IF_ERROR(checkCacheShape(cacheShape));
  const std::string n(name);
  if (scale.elementType() != ElementType::F32)
    return Status::error(n + " must be an f32 tensor, got " +
                         elementTypeName(scale.elementType()));
  const int64_t b = cacheShape[0], h = cacheShape[1], s = cacheShape[2];
  const std::vector<int64_t> &shape = scale.shape();
  if (shape.empty() || (shape.size() == 1 && shape[0] == 1))
    granularity = KvScaleGranularity::PerTensor;
  else if (shape.size() == 1 && shape[0] == h)
    granularity = KvScaleGranularity::PerKvHead;
  else if (shape == std::vector<int64_t>{b, h, s})
    granularity = KvScaleGranularity::PerTokenAndHead;
  else
    return Status::error(n + " has shape " + bracketed(shape) +
                         ": a KV scale is per tensor [1], per KV head [Hkv = " +
                         str(h) + "] or per token and head [B = " + str(b) +
                         ", Hkv = " + str(h) + ", S = " + str(s) + "]");
  for (int64_t i = 0; i < scale.numElements(); ++i) {
    const double v = scale.getDouble(i);
    if (!(v > 0.0) || !std::isfinite(v))
      return Status::error(n + "[" + str(i) + "] = " + number(v) +
                           kKvScaleRule);
  }
  return Status::ok();
}

float kvScaleAt(const HostTensor &scale, KvScaleGranularity granularity,
                const std::vector<int64_t> &cacheShape, int64_t b, int64_t h,
                int64_t t) {
  switch (granularity) {
  case KvScaleGranularity::PerTensor:
    return static_cast<float>(scale.getDouble(0));
  case KvScaleGranularity::PerKvHead:
    return static_cast<float>(scale.getDouble(h));
  case KvScaleGranularity::PerTokenAndHead:
    return static_cast<float>(
        scale.getDouble((b * cacheShape[1] + h) * cacheShape[2] + t));
  }
  return 0.0f;
}

Status dequantizeFp8Cache(const Fp8Cache &cache, const char *scaleName,
                          const HostTensor &scale, HostTensor &values) {
  KVATTN_RETURN_IF_ERROR(checkCacheShape(cache.shape));
  KvScaleGranularity g;
  KVATTN_RETURN_IF_ERROR(checkKvScale(scaleName, scale, cache.shape, g));
  const int64_t b = cache.shape[0], h = cache.shape[1], s = cache.shape[2],
                d = cache.shape[3];
  if (static_cast<int64_t>(cache.codes.size()) != b * h * s * d)
    return Status::error("the FP8 cache holds " +
                         str(static_cast<int64_t>(cache.codes.size())) +
                         " codes, its shape " + str(b * h * s * d));
  KVATTN_RETURN_IF_ERROR(
      HostTensor::make(ElementType::F32, cache.shape, values));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t t = 0; t < s; ++t) {
        const float sc = kvScaleAt(scale, g, cache.shape, bi, hi, t);
        const int64_t row = ((bi * h + hi) * s + t) * d;
        for (int64_t x = 0; x < d; ++x) {
          const float v = float8ToFloat(cache.codes[row + x], cache.format);
          values.setDouble(row + x, static_cast<double>(v * sc));
        }
      }
  return Status::ok();
}

/// The scale rules for a cache of any layout whose heads are dim `headDim`
/// and whose rows are its first three dims: per tensor, per head, or per
/// row (the shape without D); positive and finite.
static Status checkRowScale(const char *scaleName, const HostTensor &scale,
                            const std::vector<int64_t> &shape, int headDim,
                            KvScaleGranularity &g) {
  const std::string n(scaleName);
  const std::vector<int64_t> rows(shape.begin(), shape.begin() + 3);
  const int64_t hkv = shape[headDim];
  if (scale.elementType() != ElementType::F32)
    return Status::error(n + " must be an f32 tensor, got " +
                         elementTypeName(scale.elementType()));
  const std::vector<int64_t> &ss = scale.shape();
  if (ss.empty() || (ss.size() == 1 && ss[0] == 1))
    g = KvScaleGranularity::PerTensor;
  else if (ss.size() == 1 && ss[0] == hkv)
    g = KvScaleGranularity::PerKvHead;
  else if (ss == rows)
    g = KvScaleGranularity::PerTokenAndHead;
  else
    return Status::error(n + " has shape " + bracketed(ss) +
                         ": a KV scale is per tensor [1], per KV head "
                         "[Hkv = " +
                         str(hkv) + "] or per token and head " +
                         bracketed(rows));
  for (int64_t i = 0; i < scale.numElements(); ++i) {
    const double v = scale.getDouble(i);
    if (!(v > 0.0) || !std::isfinite(v))
      return Status::error(n + "[" + str(i) + "] = " + number(v) +
                           kKvScaleRule);
  }
  return Status::ok();
}

Status checkKvCacheScale(const HostTensor &cache, int headDim,
                         const char *scaleName, const HostTensor &scale,
                         KvScaleGranularity &granularity) {
  const std::string n(scaleName);
  if (!isFp8Type(cache.elementType()))
    return Status::error(n +
                         " must go with an FP8 cache (f8E4M3FN or "
                         "f8E5M2), not " +
                         elementTypeName(cache.elementType()));
  KVATTN_RETURN_IF_ERROR(checkCacheShape(cache.shape()));
  if (headDim == 1)
    return checkKvScale(scaleName, scale, cache.shape(), granularity);
  return checkRowScale(scaleName, scale, cache.shape(), headDim, granularity);
}

Status dequantizeKvCache(const HostTensor &cache, int headDim,
                         const char *scaleName, const HostTensor &scale,
                         HostTensor &values) {
  KvScaleGranularity g;
  KVATTN_RETURN_IF_ERROR(
      checkKvCacheScale(cache, headDim, scaleName, scale, g));
  const std::vector<int64_t> &shape = cache.shape();
  const int64_t hkv = shape[headDim], d = shape[3];
  KVATTN_RETURN_IF_ERROR(HostTensor::make(ElementType::F32, shape, values));
  // Each code's value once (this runs over the whole cache when the
  // reference computes).
  const Float8Format format = cache.elementType() == ElementType::F8E4M3FN
                                  ? Float8Format::E4M3FN
                                  : Float8Format::E5M2;
  float decoded[256];
  for (int c = 0; c < 256; ++c)
    decoded[c] = float8ToFloat(static_cast<uint8_t>(c), format);
  const uint8_t *codes = cache.data();
  uint8_t *out = values.mutableData();
  const int64_t nRows = shape[0] * shape[1] * shape[2];
  for (int64_t r = 0; r < nRows; ++r) {
    const int64_t head = headDim == 1 ? (r / shape[2]) % shape[1] : r % hkv;
    const float sc = g == KvScaleGranularity::PerTensor
                         ? static_cast<float>(scale.getDouble(0))
                     : g == KvScaleGranularity::PerKvHead
                         ? static_cast<float>(scale.getDouble(head))
                         : static_cast<float>(scale.getDouble(r));
    for (int64_t x = 0; x < d; ++x) {
      const float v = decoded[codes[r * d + x]] * sc;
      std::memcpy(out + (r * d + x) * sizeof(float), &v, sizeof(float));
    }
  }
  return Status::ok();
}

Status appendFp8(Fp8Cache &cache, const HostTensor &update,
                 const HostTensor &pos, const char *scaleName,
                 const HostTensor &scale) {
  KVATTN_RETURN_IF_ERROR(checkCacheShape(cache.shape));
  if (!isFloatType(update.elementType()) ||
      update.elementType() == ElementType::F64 ||
      isFp8Type(update.elementType()))
    return Status::error(
        std::string("an FP8 cache takes new tokens in f32, f16 or bf16 and "
                    "quantises them with its scales: the update is ") +
        elementTypeName(update.elementType()));
  const int64_t b = cache.shape[0], h = cache.shape[1], s = cache.shape[2],
                d = cache.shape[3];
  if (update.rank() != 4 || update.dim(0) != b || update.dim(1) != h ||
      update.dim(3) != d)
    return Status::error("the update has shape " + bracketed(update.shape()) +
                         ", the FP8 cache [B = " + str(b) +
                         ", Hkv = " + str(h) + ", S, D = " + str(d) +
                         "] takes [B, Hkv, L, D]");
  if (pos.rank() != 1 || pos.dim(0) != b)
    return Status::error("pos must have shape [B = " + str(b) + "], got " +
                         bracketed(pos.shape()));
  KvScaleGranularity g;
  KVATTN_RETURN_IF_ERROR(checkKvScale(scaleName, scale, cache.shape, g));
  const int64_t l = update.dim(2);
  for (int64_t bi = 0; bi < b; ++bi) {
    const int64_t p = pos.getInt(bi);
    if (p < 0 || p > s - l)
      return Status::error("pos[" + str(bi) + "] = " + str(p) +
                           " writes rows [" + str(p) + ", " + str(p + l) +
                           ") outside the cache capacity C = " + str(s) +
                           " (batch " + str(bi) + ")");
  }
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t t = 0; t < l; ++t) {
        const int64_t row = pos.getInt(bi) + t;
        const float sc = kvScaleAt(scale, g, cache.shape, bi, hi, row);
        for (int64_t x = 0; x < d; ++x) {
          const float v = static_cast<float>(
              update.getDouble(((bi * h + hi) * l + t) * d + x));
          cache.codes[((bi * h + hi) * s + row) * d + x] =
              floatToFloat8(v / sc, cache.format);
        }
      }
  return Status::ok();
}

} // namespace reference
} // namespace kvattn
} // namespace mlir

namespace mlir {
namespace kvattn {
namespace reference {

Status appendQuantized(const HostTensor &cache, const HostTensor &update,
                       const HostTensor &pos, const HostTensor *blockTable,
                       const HostTensor &scale, const Rope *rope,
                       const HostTensor *ropePos, HostTensor &result,
                       HostTensor *ropePosResult, bool skipPadding,
                       AppendedRows *checkOnly) {
  if (!isFp8Type(cache.elementType()))
    return Status::error(std::string("kv_scale quantises into an FP8 cache "
                                     "(f8E4M3FN or f8E5M2), not ") +
                         elementTypeName(cache.elementType()));
  if (!isFloatType(update.elementType()) ||
      update.elementType() == ElementType::F64 ||
      isFp8Type(update.elementType()))
    return Status::error(
        std::string("an FP8 cache takes new tokens in f32, f16 or bf16 and "
                    "quantises them with its scales: the update is ") +
        elementTypeName(update.elementType()));
  KVATTN_RETURN_IF_ERROR(checkCacheShape(cache.shape()));
  if (update.rank() != 4)
    return Status::error("the update has shape " + bracketed(update.shape()) +
                         ", an FP8 cache takes [B, H, L, D]");
  if (pos.rank() != 1 || pos.dim(0) != update.dim(0) ||
      (pos.elementType() != ElementType::I32 &&
       pos.elementType() != ElementType::I64))
    return Status::error("pos must be i32/i64 [B = " + str(update.dim(0)) +
                         "], got " + bracketed(pos.shape()));
  const bool paged = blockTable != nullptr;
  const std::vector<int64_t> &shape = cache.shape();
  const int headDim = paged ? 2 : 1;
  KvScaleGranularity g;
  KVATTN_RETURN_IF_ERROR(checkRowScale("kv_scale", scale, shape, headDim, g));
  if (update.dim(1) != shape[headDim] || update.dim(3) != shape[3])
    return Status::error("the update has shape " + bracketed(update.shape()) +
                         ", the FP8 cache " + bracketed(shape) +
                         " takes [B, H = " + str(shape[headDim]) +
                         ", L, D = " + str(shape[3]) + "]");
  if (paged &&
      (blockTable->rank() != 2 || blockTable->dim(0) != update.dim(0) ||
       (blockTable->elementType() != ElementType::I32 &&
        blockTable->elementType() != ElementType::I64)))
    return Status::error(
        "block_table must be i32/i64 [B = " + str(update.dim(0)) +
        ", max_pages], got " + bracketed(blockTable->shape()));

  // The values written: the update, or its rotation at pos[b] + t (f32).
  HostTensor rotated;
  const HostTensor *values = &update;
  if (rope) {
    KVATTN_RETURN_IF_ERROR(rotate(
        update, *rope, [&](int64_t b, int64_t t) { return pos.getInt(b) + t; },
        ElementType::F32, rotated));
    values = &rotated;
  }
  // The codes [B, H, L, D], each with the scale of the row it goes to. A row
  // outside the cache takes scale 1 here: append / appendPaged below refuse
  // the write with their named errors.
  const Float8Format format = cache.elementType() == ElementType::F8E4M3FN
                                  ? Float8Format::E4M3FN
                                  : Float8Format::E5M2;
  const int64_t b = update.dim(0), h = update.dim(1), l = update.dim(2),
                d = update.dim(3);
  HostTensor codes(cache.elementType(), update.shape());
  // A check-only run: the rows as attention will read them, too.
  HostTensor dequantised;
  if (checkOnly)
    dequantised = HostTensor(ElementType::F32, update.shape());
  const int64_t numRows = shape[0] * shape[1] * shape[2];
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t t = 0; t < l; ++t) {
        const int64_t p = pos.getInt(bi) + t;
        int64_t row = -1; // the cache row (its index without D)
        if (!paged) {
          if (p >= 0 && p < shape[2])
            row = (bi * shape[1] + hi) * shape[2] + p;
        } else if (p >= 0 && shape[1] > 0 &&
                   p / shape[1] < blockTable->dim(1)) {
          const int64_t page =
              blockTable->getInt(bi * blockTable->dim(1) + p / shape[1]);
          if (page >= 0 && page < shape[0])
            row = (page * shape[1] + p % shape[1]) * shape[2] + hi;
        }
        float sc = 1.0f;
        if (g == KvScaleGranularity::PerTensor)
          sc = static_cast<float>(scale.getDouble(0));
        else if (g == KvScaleGranularity::PerKvHead)
          sc = static_cast<float>(scale.getDouble(hi));
        else if (row >= 0 && row < numRows)
          sc = static_cast<float>(scale.getDouble(row));
        const int64_t at = ((bi * h + hi) * l + t) * d;
        for (int64_t x = 0; x < d; ++x) {
          const float v = static_cast<float>(values->getDouble(at + x));
          codes.mutableData()[at + x] = floatToFloat8(v / sc, format);
          if (checkOnly)
            dequantised.setDouble(
                at + x, float8ToFloat(codes.data()[at + x], format) * sc);
        }
      }
  if (checkOnly)
    checkOnly->values = std::move(dequantised);
  if (paged)
    return appendPaged(cache, codes, pos, *blockTable, result, skipPadding,
                       checkOnly);
  KVATTN_RETURN_IF_ERROR(append(cache, codes, pos, result, checkOnly));
  if (!ropePos || !ropePosResult)
    return Status::ok();
  // The RoPE record, as appendRotated writes it.
  if (ropePos->rank() != 2 || ropePos->dim(0) != shape[0] ||
      ropePos->dim(1) != shape[2])
    return Status::error("rope_pos must have shape [B = " + str(shape[0]) +
                         ", C = " + str(shape[2]) + "], got " +
                         bracketed(ropePos->shape()));
  HostTensor record(ropePos->elementType(), ropePos->shape());
  std::copy_n(ropePos->data(), ropePos->byteSize(), record.mutableData());
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < l; ++t)
      record.setInt(bi * shape[2] + pos.getInt(bi) + t, pos.getInt(bi) + t);
  *ropePosResult = std::move(record);
  return Status::ok();
}

} // namespace reference
} // namespace kvattn
} // namespace mlir
