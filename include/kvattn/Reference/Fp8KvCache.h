//===- Fp8KvCache.h - FP8 KV caches in the reference ------------*- C++ -*-===//
//
// The reference's definition of an FP8 KV cache (docs/semantics.md, "FP8 KV
// caches"): K and V stored as f8E4M3FN or f8E5M2 codes with f32 scales per
// tensor, per KV head or per token and head (the granularities of vLLM,
// SGLang and FlashInfer: k_scale / v_scale). Plain C++, no MLIR.
//
//   dequantise: value = float(code) * scale        (f32 multiply, exact code)
//   quantise:   code  = RN_satfinite(float32(x) / scale)  (f32 division, then
//               kvattn/Support/Float8.h: round to nearest even, saturate to
//               the largest finite value, infinities too; NaN -> 0x7F)
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_REFERENCE_FP8KVCACHE_H
#define KVATTN_REFERENCE_FP8KVCACHE_H

#include "kvattn/Support/Float8.h"
#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/Status.h"

#include <cstdint>
#include <vector>

namespace mlir {
namespace kvattn {
namespace reference {

/// How a scale tensor covers a cache [B, Hkv, S, D].
enum class KvScaleGranularity {
  PerTensor,      ///< f32 [1] (or rank 0)
  PerKvHead,      ///< f32 [Hkv]
  PerTokenAndHead ///< f32 [B, Hkv, S]: one per cache row of each head
};

/// The codes of one FP8 cache [B, Hkv, S, D] (row-major).
struct Fp8Cache {
  Float8Format format = Float8Format::E4M3FN;
  std::vector<int64_t> shape; ///< [B, Hkv, S, D]
  std::vector<uint8_t> codes;
};

/// Checks `scale` (named `name`, e.g. "k_scale") for a cache of shape
/// [B, Hkv, S, D] and returns its granularity: f32, one of the three
/// shapes, every value positive and finite. Errors name the operand, e.g.
/// `k_scale has shape [3]: a KV scale is per tensor [1], per KV head
/// [Hkv = 2] or per token and head [B = 2, Hkv = 2, S = 16]`, `v_scale[1] = 0
/// must be positive and finite (a KV scale divides the values it quantises)`.
Status checkKvScale(const char *name, const HostTensor &scale,
                    const std::vector<int64_t> &cacheShape,
                    KvScaleGranularity &granularity);

/// The scale of cache row (b, h, t).
float kvScaleAt(const HostTensor &scale, KvScaleGranularity granularity,
                const std::vector<int64_t> &cacheShape, int64_t b, int64_t h,
                int64_t t);

/// The f32 cache [B, Hkv, S, D] the attention reads: every code times its
/// row's scale (NaN codes give NaN: the NaN policy of docs/semantics.md then
/// decides whether a row reads them).
Status dequantizeFp8Cache(const Fp8Cache &cache, const char *scaleName,
                          const HostTensor &scale, HostTensor &values);

/// What kvattn.attention reads from an FP8 cache held in a HostTensor
/// (F8E4M3FN / F8E5M2 codes) of any layout: `cache` is [B, Hkv, S, D]
/// (`headDim` 1), or paged [num_pages, page_size, Hkv, D] (`headDim` 2);
/// `scale` is per tensor ([1] or rank 0), per KV head ([Hkv]) or per token
/// and head (the cache's shape without D). `values` becomes the f32 cache,
/// every code times its row's scale. The errors of checkKvScale (the
/// per-token shape spelled as the cache's rows), and
/// `k_scale must go with an FP8 cache (f8E4M3FN or f8E5M2), not f16`.
Status dequantizeKvCache(const HostTensor &cache, int headDim,
                         const char *scaleName, const HostTensor &scale,
                         HostTensor &values);

/// What dequantizeKvCache checks (the cache's type and layout, the scale's
/// rules, its errors), without dequantising: for a caller that reads the
/// codes in place with their scales.
Status checkKvCacheScale(const HostTensor &cache, int headDim,
                         const char *scaleName, const HostTensor &scale,
                         KvScaleGranularity &granularity);

/// kvattn.append into an FP8 cache: the L rows of `update` [B, Hkv, L, D]
/// (f32, f16 or bf16) are quantised with the cache's scales (of rows
/// pos[b] + t) and written at positions pos[b] .. pos[b] + L - 1; every
/// other code is kept. Refuses an update that is not a float tensor (an FP8
/// cache takes new tokens in f32/f16/bf16 and quantises them itself), a
/// write past the capacity, and bad scales.
Status appendFp8(Fp8Cache &cache, const HostTensor &update,
                 const HostTensor &pos, const char *scaleName,
                 const HostTensor &scale);

struct Rope;
struct AppendedRows;

/// kvattn.append into an FP8 cache held in a HostTensor (F8E4M3FN / F8E5M2
/// codes): `cache` [B, H, C, D], or pages [num_pages, page_size, H, D] with
/// `blockTable` [B, max_pages]; `update` [B, H, L, D] f32, f16 or bf16;
/// `scale` (named "kv_scale" in errors) per tensor ([1] or rank 0), per head
/// ([H]) or per token and head (the cache's shape without D). Element x of
/// token t of batch b, head h, is written at the row of position
/// pos[b] + t (append / appendPaged) as RN_satfinite(f32(x) / scale) with
/// the scale of that row. With `rope` the update is first rotated at
/// pos[b] + t in f32 (no rounding before the quantisation); with `ropePos`
/// [B, C] `ropePosResult` is the record updated (appendRotated's). Errors:
/// a non-FP8 cache, an update that is not f32/f16/bf16, a bad scale, and
/// the write rules of append / appendPaged, with their messages.
Status appendQuantized(const HostTensor &cache, const HostTensor &update,
                       const HostTensor &pos, const HostTensor *blockTable,
                       const HostTensor &scale, const Rope *rope,
                       const HostTensor *ropePos, HostTensor &result,
                       HostTensor *ropePosResult, bool skipPadding = false,
                       AppendedRows *checkOnly = nullptr);

} // namespace reference
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_REFERENCE_FP8KVCACHE_H
