//===- Fp8KvCacheTest.cpp - FP8 KV caches in the reference ----------------===//
//
// reference::appendFp8 / appendQuantized / dequantizeFp8Cache
// (kvattn/Reference/Fp8KvCache.h):
// every scale granularity, the rounding / saturation / NaN policy, the
// accuracy of attention over an FP8 cache against the f32 cache (printed and
// bounded), and the named errors (a scale of the wrong shape, zero, negative
// or NaN scales, an update that is not f32/f16/bf16, a write past the
// capacity).
//
//===----------------------------------------------------------------------===//

#include "kvattn/Reference/Fp8KvCache.h"
#include "kvattn/Reference/Reference.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

using namespace mlir::kvattn;
using namespace mlir::kvattn::reference;

namespace {

HostTensor f32(std::vector<int64_t> shape, std::vector<double> values = {}) {
  HostTensor t(ElementType::F32, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    t.setDouble(static_cast<int64_t>(i), values[i]);
  return t;
}

HostTensor ints(std::vector<int64_t> values) {
  HostTensor t(ElementType::I32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i)
    t.setInt(static_cast<int64_t>(i), values[i]);
  return t;
}

HostTensor random(std::vector<int64_t> shape, double magnitude, unsigned seed) {
  HostTensor t(ElementType::F32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-magnitude, magnitude);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.setDouble(i, static_cast<float>(u(rng)));
  return t;
}

Fp8Cache emptyCache(Float8Format f, std::vector<int64_t> shape) {
  Fp8Cache c;
  c.format = f;
  c.shape = shape;
  c.codes.assign(shape[0] * shape[1] * shape[2] * shape[3], 0);
  return c;
}

} // namespace

TEST(Fp8KvCache, EveryGranularityQuantisesWithItsRowsScale) {
  // B = 2, Hkv = 2, S = 4, D = 3; two tokens written at positions 1 and 0.
  const std::vector<int64_t> shape = {2, 2, 4, 3};
  HostTensor update = random({2, 2, 2, 3}, 900.0, 1);
  HostTensor pos = ints({1, 0});
  std::vector<HostTensor> scales = {f32({1}, {4.0}), f32({2}, {2.0, 8.0}),
                                    f32({2, 2, 4})};
  for (int64_t i = 0; i < 16; ++i)
    scales[2].setDouble(i, 0.5 + i);
  for (Float8Format f : {Float8Format::E4M3FN, Float8Format::E5M2})
    for (const HostTensor &scale : scales) {
      Fp8Cache cache = emptyCache(f, shape);
      ASSERT_TRUE(appendFp8(cache, update, pos, "k_scale", scale).isOk());
      HostTensor values;
      ASSERT_TRUE(dequantizeFp8Cache(cache, "k_scale", scale, values).isOk());
      KvScaleGranularity g;
      ASSERT_TRUE(checkKvScale("k_scale", scale, shape, g).isOk());
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t t = 0; t < 4; ++t)
            for (int64_t x = 0; x < 3; ++x) {
              const int64_t at = ((b * 2 + h) * 4 + t) * 3 + x;
              const int64_t l = t - pos.getInt(b);
              const float s = kvScaleAt(scale, g, shape, b, h, t);
              if (l < 0 || l >= 2) {
                EXPECT_EQ(cache.codes[at], 0); // kept
                continue;
              }
              const float v = static_cast<float>(
                  update.getDouble(((b * 2 + h) * 2 + l) * 3 + x));
              const uint8_t code = floatToFloat8(v / s, f);
              EXPECT_EQ(cache.codes[at], code);
              EXPECT_EQ(values.getDouble(at),
                        static_cast<double>(float8ToFloat(code, f) * s));
            }
    }
}

TEST(Fp8KvCache, RoundingSaturationAndNaN) {
  const std::vector<int64_t> shape = {1, 1, 1, 6};
  const double inf = std::numeric_limits<double>::infinity();
  HostTensor update = f32({1, 1, 1, 6}, {1.0625, 1000.0, -inf, inf,
                                         std::nan(""), 2.0 * 448.0 * 0.75});
  Fp8Cache cache = emptyCache(Float8Format::E4M3FN, shape);
  HostTensor scale = f32({1}, {1.0});
  ASSERT_TRUE(appendFp8(cache, update, ints({0}), "v_scale", scale).isOk());
  EXPECT_EQ(cache.codes[0], 0x38); // 1.0625: the tie goes to 1.0 (even)
  EXPECT_EQ(cache.codes[1], 0x7e); // 1000 saturates to 448
  EXPECT_EQ(cache.codes[2], 0xfe); // -inf saturates to -448
  EXPECT_EQ(cache.codes[3], 0x7e);
  EXPECT_EQ(cache.codes[4], kFloat8NaN);
  EXPECT_EQ(cache.codes[5], 0x7e); // 672 > 448
  // With a scale of 4, 1000 fits (1000 / 4 = 250 -> 256): ignoring the
  // scale would saturate it.
  ASSERT_TRUE(
      appendFp8(cache, update, ints({0}), "v_scale", f32({1}, {4.0})).isOk());
  HostTensor values;
  ASSERT_TRUE(
      dequantizeFp8Cache(cache, "v_scale", f32({1}, {4.0}), values).isOk());
  EXPECT_EQ(values.getDouble(1), 1024.0);
  EXPECT_TRUE(std::isnan(values.getDouble(4)));
}

TEST(Fp8KvCache, AttentionOverAnFp8CacheAgainstF32) {
  // B = 2, Hq = 4, Hkv = 2, L = 3, S = 64, D = 32; K and V in [-6, 6], Q in
  // [-0.25, 0.25] (scores of a few units), with one scale, per-head scales
  // and per-token scales: the FP8 cache's result against the f32 cache's
  // (both through reference::attention). The bounds are about twice the
  // errors measured (printed); e5m2 keeps 2 mantissa bits, e4m3 3.
  const std::vector<int64_t> shape = {2, 2, 64, 32};
  HostTensor q = random({2, 4, 3, 32}, 0.25, 2);
  HostTensor k = random(shape, 6.0, 3), v = random(shape, 6.0, 4);
  HostTensor pos = ints({0, 0});
  HostTensor qOffset = ints({61, 40}), kvLen = ints({64, 43});
  AttentionOperands exact;
  exact.query = &q;
  exact.key = &k;
  exact.value = &v;
  exact.qOffset = &qOffset;
  exact.kvLen = &kvLen;
  AttentionAttributes attrs;
  attrs.causal = true;
  AttentionResult want;
  ASSERT_TRUE(attention(exact, attrs, want).isOk());
  HostTensor perToken = f32({2, 2, 64});
  for (int64_t i = 0; i < 256; ++i)
    perToken.setDouble(i, 6.0 / 448.0 * (1.0 + (i % 5) * 0.25));
  struct Case {
    const char *name;
    Float8Format format;
    HostTensor scale;
    double bound;
  } cases[] = {
      {"e4m3 per tensor", Float8Format::E4M3FN, f32({1}, {6.0 / 448.0}), 0.12},
      {"e4m3 per kv head", Float8Format::E4M3FN,
       f32({2}, {6.0 / 448.0, 6.0 / 224.0}), 0.12},
      {"e4m3 per token and head", Float8Format::E4M3FN, perToken, 0.12},
      {"e5m2 per tensor", Float8Format::E5M2, f32({1}, {1.0}), 0.3},
  };
  for (Case &c : cases) {
    Fp8Cache kq = emptyCache(c.format, shape), vq = emptyCache(c.format, shape);
    ASSERT_TRUE(appendFp8(kq, k, pos, "k_scale", c.scale).isOk());
    ASSERT_TRUE(appendFp8(vq, v, pos, "v_scale", c.scale).isOk());
    HostTensor kd, vd;
    ASSERT_TRUE(dequantizeFp8Cache(kq, "k_scale", c.scale, kd).isOk());
    ASSERT_TRUE(dequantizeFp8Cache(vq, "v_scale", c.scale, vd).isOk());
    AttentionOperands fp8 = exact;
    fp8.key = &kd;
    fp8.value = &vd;
    AttentionResult got;
    ASSERT_TRUE(attention(fp8, attrs, got).isOk());
    double err = 0, lseErr = 0;
    for (int64_t i = 0; i < got.out.numElements(); ++i)
      err = std::max(err,
                     std::fabs(got.out.getDouble(i) - want.out.getDouble(i)));
    for (int64_t i = 0; i < got.lse.numElements(); ++i)
      lseErr = std::max(
          lseErr, std::fabs(got.lse.getDouble(i) - want.lse.getDouble(i)));
    std::printf("fp8 kv cache, %s: max |out - out_f32| = %.4f, max |lse - "
                "lse_f32| = %.4f (values in [-6, 6])\n",
                c.name, err, lseErr);
    EXPECT_LT(err, c.bound) << c.name;
    EXPECT_GT(err, 0.0) << c.name; // FP8 does round
  }
}

TEST(Fp8KvCache, BadScalesAndUpdatesAreNamed) {
  const std::vector<int64_t> shape = {2, 2, 16, 8};
  KvScaleGranularity g;
  auto error = [&](const HostTensor &scale) {
    Status s = checkKvScale("k_scale", scale, shape, g);
    EXPECT_TRUE(s.isError());
    return s.message();
  };
  EXPECT_EQ(error(f32({3}, {1, 1, 1})),
            "k_scale has shape [3]: a KV scale is per tensor [1], per KV head "
            "[Hkv = 2] or per token and head [B = 2, Hkv = 2, S = 16]");
  EXPECT_EQ(error(f32({2}, {1, 0})),
            "k_scale[1] = 0 must be positive and finite (a KV scale divides "
            "the values it quantises)");
  EXPECT_EQ(error(f32({1}, {-0.5})),
            "k_scale[0] = -0.5 must be positive and finite (a KV scale "
            "divides the values it quantises)");
  EXPECT_EQ(error(f32({1}, {std::nan("")})),
            "k_scale[0] = nan must be positive and finite (a KV scale "
            "divides the values it quantises)");
  HostTensor half(ElementType::F16, {1});
  half.setDouble(0, 1.0);
  EXPECT_EQ(error(half), "k_scale must be an f32 tensor, got f16");
  Fp8Cache cache = emptyCache(Float8Format::E4M3FN, shape);
  HostTensor codes(ElementType::I32, {2, 2, 1, 8});
  Status s = appendFp8(cache, codes, ints({0, 0}), "k_scale", f32({1}, {1}));
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(), "an FP8 cache takes new tokens in f32, f16 or bf16 "
                         "and quantises them with its scales: the update is "
                         "i32");
  s = appendFp8(cache, f32({2, 2, 1, 8}), ints({0, 16}), "k_scale",
                f32({1}, {1}));
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(), "pos[1] = 16 writes rows [16, 17) outside the cache "
                         "capacity C = 16 (batch 1)");
}

TEST(Fp8KvCache, HostTensorsHoldCodes) {
  // F8E4M3FN / F8E5M2 elements are one byte: setDouble rounds to nearest
  // even and saturates (e5m2 keeps a stored infinity), getDouble decodes.
  HostTensor e4m3(ElementType::F8E4M3FN, {4});
  EXPECT_EQ(e4m3.byteSize(), 4u);
  e4m3.setDouble(0, 1.0625); // a tie between 1.0 and 1.125: even, 1.0
  e4m3.setDouble(1, 1000.0); // saturates to 448
  e4m3.setDouble(2, -std::numeric_limits<double>::infinity());
  e4m3.setDouble(3, std::nan(""));
  EXPECT_EQ(e4m3.getDouble(0), 1.0);
  EXPECT_EQ(e4m3.getDouble(1), 448.0);
  EXPECT_EQ(e4m3.getDouble(2), -448.0);
  EXPECT_TRUE(std::isnan(e4m3.getDouble(3)));
  EXPECT_EQ(e4m3.data()[3], 0x7f);
  HostTensor e5m2(ElementType::F8E5M2, {2});
  e5m2.setDouble(0, std::numeric_limits<double>::infinity());
  e5m2.setDouble(1, 1e9);
  EXPECT_EQ(e5m2.data()[0], 0x7c);
  EXPECT_EQ(e5m2.getDouble(1), 57344.0);
  EXPECT_TRUE(isFp8Type(ElementType::F8E5M2) &&
              isFloatType(ElementType::F8E5M2));
  EXPECT_EQ(std::string(elementTypeName(ElementType::F8E4M3FN)), "f8E4M3FN");
}

TEST(Fp8KvCache, DequantizesPagedCachesPerToken) {
  // A paged cache [num_pages = 2, page_size = 3, Hkv = 2, D = 2] with
  // per-token scales [2, 3, 2] (the cache's shape without D): element
  // (p, s, h, x) reads code * scale[p, s, h].
  HostTensor pages(ElementType::F8E4M3FN, {2, 3, 2, 2});
  HostTensor scale(ElementType::F32, {2, 3, 2});
  for (int64_t i = 0; i < pages.numElements(); ++i)
    pages.setDouble(i, 0.5 * static_cast<double>(i % 7) - 1.0);
  for (int64_t r = 0; r < scale.numElements(); ++r)
    scale.setDouble(r, 0.25 * static_cast<double>(r + 1));
  HostTensor values;
  ASSERT_TRUE(dequantizeKvCache(pages, 2, "v_scale", scale, values).isOk());
  for (int64_t i = 0; i < pages.numElements(); ++i)
    EXPECT_EQ(values.getDouble(i),
              static_cast<double>(static_cast<float>(pages.getDouble(i)) *
                                  static_cast<float>(scale.getDouble(i / 2))));
  // Per KV head [Hkv = 2]: head h of every row.
  HostTensor head(ElementType::F32, {2});
  head.setDouble(0, 2.0);
  head.setDouble(1, 0.5);
  ASSERT_TRUE(dequantizeKvCache(pages, 2, "v_scale", head, values).isOk());
  EXPECT_EQ(values.getDouble(2), pages.getDouble(2) * 0.5); // (0, 0, 1, 0)
  EXPECT_EQ(values.getDouble(4), pages.getDouble(4) * 2.0); // (0, 1, 0, 0)
  // The errors name the operand and the layout.
  HostTensor wrong(ElementType::F32, {3, 2});
  Status s = dequantizeKvCache(pages, 2, "v_scale", wrong, values);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(), "v_scale has shape [3, 2]: a KV scale is per tensor "
                         "[1], per KV head [Hkv = 2] or per token and head "
                         "[2, 3, 2]");
  head.setDouble(1, std::numeric_limits<double>::infinity());
  s = dequantizeKvCache(pages, 2, "v_scale", head, values);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(), "v_scale[1] = inf must be positive and finite (a KV "
                         "scale divides the values it quantises)");
  HostTensor f16(ElementType::F16, {2, 3, 2, 2});
  s = dequantizeKvCache(f16, 2, "k_scale", scale, values);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(),
            "k_scale must go with an FP8 cache (f8E4M3FN or f8E5M2), not f16");
}

TEST(Fp8KvCache, CheckingTheScalesInPlaceAsDequantizing) {
  // checkKvCacheScale (the validation of a cache read in place) refuses
  // what dequantizeKvCache refuses, with its messages, and accepts what it
  // accepts; every code of both formats dequantises as float(code) * scale
  // (NaN codes to NaN), e5m2's largest to 57,344 times the scale.
  for (ElementType type : {ElementType::F8E4M3FN, ElementType::F8E5M2}) {
    HostTensor cache(type, {1, 2, 128, 2}); // each code once per head
    for (int64_t i = 0; i < cache.numElements(); ++i)
      cache.mutableData()[i] = static_cast<uint8_t>(i);
    HostTensor scale(ElementType::F32, {2});
    scale.setDouble(0, 0.5);
    scale.setDouble(1, 3.0);
    reference::KvScaleGranularity g;
    ASSERT_TRUE(checkKvCacheScale(cache, 1, "k_scale", scale, g).isOk());
    EXPECT_EQ(g, reference::KvScaleGranularity::PerKvHead);
    HostTensor values;
    ASSERT_TRUE(dequantizeKvCache(cache, 1, "k_scale", scale, values).isOk());
    for (int64_t i = 0; i < cache.numElements(); ++i) {
      const float code = static_cast<float>(cache.getDouble(i));
      const float want = code * (i < 256 ? 0.5f : 3.0f); // head 0, 1
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(values.getDouble(i))) << i;
      else
        EXPECT_EQ(values.getDouble(i), static_cast<double>(want)) << i;
    }
    HostTensor wrong(ElementType::F32, {3});
    Status a = checkKvCacheScale(cache, 1, "k_scale", wrong, g);
    Status b = dequantizeKvCache(cache, 1, "k_scale", wrong, values);
    ASSERT_TRUE(a.isError());
    EXPECT_EQ(a.message(), b.message());
    scale.setDouble(1, 0.0);
    a = checkKvCacheScale(cache, 1, "k_scale", scale, g);
    b = dequantizeKvCache(cache, 1, "k_scale", scale, values);
    ASSERT_TRUE(a.isError());
    EXPECT_EQ(a.message(), b.message());
  }
  HostTensor bf16(ElementType::BF16, {1, 2, 4, 2}),
      scale(ElementType::F32, {1});
  scale.setDouble(0, 1.0);
  reference::KvScaleGranularity g;
  Status s = checkKvCacheScale(bf16, 1, "v_scale", scale, g);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(),
            "v_scale must go with an FP8 cache (f8E4M3FN or f8E5M2), not bf16");
}

TEST(Fp8KvCache, AppendQuantizedWritesTheRowsCodes) {
  // reference::appendQuantized (kvattn.append ... kv_scale) agrees with
  // appendFp8 code by code for every granularity (plain cache), and the
  // paged form takes the scale of the page row it writes: the same tokens
  // through a table give the same codes as the plain cache with the scales
  // laid out as the pages hold them.
  const std::vector<int64_t> shape = {2, 2, 16, 8};
  HostTensor update = random({2, 2, 3, 8}, 500, 3);
  update.setDouble(0, std::numeric_limits<double>::infinity());
  update.setDouble(1, std::nan(""));
  update.setDouble(2, -0.0);
  const HostTensor pos = ints({4, 13});
  HostTensor perToken = random({2, 2, 16}, 1, 4);
  for (int64_t i = 0; i < perToken.numElements(); ++i)
    perToken.setDouble(i, 0.25 + std::fabs(perToken.getDouble(i)));
  for (Float8Format f : {Float8Format::E4M3FN, Float8Format::E5M2})
    for (const HostTensor &scale :
         {f32({1}, {0.7}), f32({2}, {0.3, 2.5}), perToken}) {
      Fp8Cache want = emptyCache(f, shape);
      ASSERT_TRUE(appendFp8(want, update, pos, "kv_scale", scale).isOk());
      const ElementType elt = f == Float8Format::E4M3FN ? ElementType::F8E4M3FN
                                                        : ElementType::F8E5M2;
      HostTensor cache(elt, shape), result;
      ASSERT_TRUE(appendQuantized(cache, update, pos, nullptr, scale, nullptr,
                                  nullptr, result, nullptr)
                      .isOk());
      for (int64_t i = 0; i < result.numElements(); ++i)
        ASSERT_EQ(result.data()[i], want.codes[i]) << i;
      EXPECT_EQ(result.data()[((0 * 2 + 0) * 16 + 4) * 8 + 1], kFloat8NaN);
    }
  // Paged: pages [5, 4, 2, 8]; batch 0 in pages 3, 1 (tokens 4..6: page 1
  // rows 0..2), batch 1 in pages 0, 2, 4 (tokens 9..11: page 4 rows 1..3);
  // every written code uses the scale of its page row.
  const HostTensor table = [] {
    HostTensor t(ElementType::I32, {2, 4});
    const int64_t v[] = {3, 1, -1, -1, 0, 2, 4, -1};
    for (int64_t i = 0; i < 8; ++i)
      t.setInt(i, v[i]);
    return t;
  }();
  const HostTensor pagedPos = ints({4, 9});
  HostTensor pageScale = random({5, 4, 2}, 1, 5);
  for (int64_t i = 0; i < pageScale.numElements(); ++i)
    pageScale.setDouble(i, 0.25 + std::fabs(pageScale.getDouble(i)));
  HostTensor pages(ElementType::F8E4M3FN, {5, 4, 2, 8}), written;
  ASSERT_TRUE(appendQuantized(pages, update, pagedPos, &table, pageScale,
                              nullptr, nullptr, written, nullptr)
                  .isOk());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t t = 0; t < 3; ++t) {
        const int64_t p = pagedPos.getInt(b) + t;
        const int64_t page = table.getInt(b * 4 + p / 4), row = p % 4;
        const float sc =
            static_cast<float>(pageScale.getDouble((page * 4 + row) * 2 + h));
        for (int64_t x = 0; x < 8; ++x) {
          const float v = static_cast<float>(
              update.getDouble(((b * 2 + h) * 3 + t) * 8 + x));
          ASSERT_EQ(written.data()[((page * 4 + row) * 2 + h) * 8 + x],
                    floatToFloat8(v / sc, Float8Format::E4M3FN));
        }
      }
  // The errors: a scale of another shape, zero, a cache that is not FP8, a
  // write past the capacity.
  HostTensor cache(ElementType::F8E4M3FN, shape), result;
  auto error = [&](const HostTensor &c, const HostTensor &s,
                   const HostTensor &p) {
    Status st = appendQuantized(c, update, p, nullptr, s, nullptr, nullptr,
                                result, nullptr);
    return st.isError() ? st.message() : std::string("ok");
  };
  EXPECT_EQ(error(cache, f32({3}), pos),
            "kv_scale has shape [3]: a KV scale is per tensor [1], per KV "
            "head [Hkv = 2] or per token and head [2, 2, 16]");
  EXPECT_EQ(error(cache, f32({2}, {1, 0}), pos),
            "kv_scale[1] = 0 must be positive and finite (a KV scale divides "
            "the values it quantises)");
  EXPECT_EQ(error(HostTensor(ElementType::F16, shape), f32({1}, {1}), pos),
            "kv_scale quantises into an FP8 cache (f8E4M3FN or f8E5M2), not "
            "f16");
  EXPECT_EQ(error(cache, f32({1}, {1}), ints({4, 14})),
            "pos[1] = 14 writes rows [14, 17) outside the cache capacity C = "
            "16 (batch 1)");
}
