//===- FingerprintTest.cpp - SHA-256 and cache fingerprints ---------------===//

#include "kvattn/Support/CacheFingerprint.h"
#include "kvattn/Support/Sha256.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace mlir::kvattn;

namespace {

std::string sha(const std::string &text, size_t piece = 0) {
  Sha256 h;
  if (!piece) {
    h.update(text.data(), text.size());
  } else {
    for (size_t i = 0; i < text.size(); i += piece)
      h.update(text.data() + i, std::min(piece, text.size() - i));
  }
  return toHex(h.finish());
}

// FIPS 180-4 / NIST CAVP test vectors.
TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(sha(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  EXPECT_EQ(sha(million),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // The same digest whatever the pieces updates come in (buffering across
  // block boundaries, lengths around the 56-byte padding limit).
  for (size_t n : {55, 56, 63, 64, 65, 119, 120, 1000}) {
    std::string text(n, '\0');
    for (size_t i = 0; i < n; ++i)
      text[i] = static_cast<char>(i * 7 + 3);
    for (size_t piece : {1, 3, 63, 64, 65})
      EXPECT_EQ(sha(text, piece), sha(text)) << n << " " << piece;
  }
}

/// A bf16 cache of B sequences, Hkv heads, D = Dv = 8, as contiguous
/// [B, Hkv, S, D] and as pages [P, page, Hkv, D] in a shuffled page order.
struct Caches {
  static constexpr int64_t B = 2, Hkv = 3, S = 40, D = 8, page = 16;
  static constexpr int64_t pagesPerSeq = (S + page - 1) / page; // 3
  static constexpr int64_t P = B * pagesPerSeq + 2;             // 2 spare
  std::vector<uint16_t> k, v, kPaged, vPaged;
  std::vector<int64_t> table; // [B, pagesPerSeq]

  /// The contents come from `seed`, the page placement from `pageSeed`.
  Caches(unsigned seed, unsigned pageSeed) {
    std::mt19937 rng(seed);
    k.resize(B * Hkv * S * D);
    v.resize(k.size());
    for (auto *t : {&k, &v})
      for (uint16_t &x : *t)
        x = static_cast<uint16_t>(rng());
    std::vector<int64_t> pages(P);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(pageSeed));
    table.assign(pages.begin(), pages.begin() + B * pagesPerSeq);
    kPaged.assign(P * page * Hkv * D, 0xffff);
    vPaged.assign(kPaged.size(), 0xffff);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < S; ++t)
        for (int64_t h = 0; h < Hkv; ++h)
          for (int64_t d = 0; d < D; ++d) {
            int64_t pg = table[b * pagesPerSeq + t / page];
            int64_t dst = ((pg * page + t % page) * Hkv + h) * D + d;
            int64_t src = ((b * Hkv + h) * S + t) * D + d;
            kPaged[dst] = k[src];
            vPaged[dst] = v[src];
          }
  }

  CachePrefix contiguous(int64_t b, int64_t length) const {
    CachePrefix p;
    p.dtype = ElementType::BF16;
    p.numKvHeads = Hkv;
    p.headDim = p.valueHeadDim = D;
    p.length = length;
    p.batch = b;
    p.batchSize = B;
    p.capacity = S;
    p.keyBytes = p.valueBytes = k.size() * 2;
    return p;
  }
  CachePrefix paged(int64_t b, int64_t length) const {
    CachePrefix p = contiguous(b, length);
    p.pageSize = page;
    p.numPages = P;
    p.maxPages = pagesPerSeq;
    p.pageTable = table.data() + b * pagesPerSeq;
    p.keyBytes = p.valueBytes = kPaged.size() * 2;
    return p;
  }
  Sha256Digest ofContiguous(const CachePrefix &p) const {
    Sha256Digest d{};
    Status s = cacheFingerprint(p, k.data(), v.data(), d);
    EXPECT_FALSE(s.isError()) << s.message();
    return d;
  }
  Sha256Digest ofPaged(const CachePrefix &p) const {
    Sha256Digest d{};
    Status s = cacheFingerprint(p, kPaged.data(), vPaged.data(), d);
    EXPECT_FALSE(s.isError()) << s.message();
    return d;
  }
};

TEST(CacheFingerprintTest, IndependentOfLayoutAndPagePlacement) {
  Caches c(7, 1);
  for (int64_t b = 0; b < Caches::B; ++b)
    for (int64_t length : {0, 1, 15, 16, 17, 33, 40})
      EXPECT_EQ(c.ofContiguous(c.contiguous(b, length)),
                c.ofPaged(c.paged(b, length)))
          << "batch " << b << " length " << length;
  // Another page placement of the same contents: the same fingerprint.
  Caches other(7, 2);
  ASSERT_NE(other.table, c.table);
  EXPECT_EQ(c.ofPaged(c.paged(1, 40)), other.ofPaged(other.paged(1, 40)));
}

TEST(CacheFingerprintTest, EveryPartOfTheIdentityCounts) {
  Caches c(11, 1);
  CachePrefix p = c.contiguous(1, 33);
  const Sha256Digest base = c.ofContiguous(p);
  // Another sequence, another length.
  EXPECT_NE(c.ofContiguous(c.contiguous(0, 33)), base);
  EXPECT_NE(c.ofContiguous(c.contiguous(1, 32)), base);
  // A different RoPE state of the same rows.
  CachePrefix rope = p;
  rope.rope = "neox theta=10000 rotary_dim=8";
  EXPECT_NE(c.ofContiguous(rope), base);
  // Other positions (the same rows cached at positions shifted by one).
  std::vector<int64_t> shifted(33);
  std::iota(shifted.begin(), shifted.end(), 1);
  CachePrefix moved = p;
  moved.positions = shifted.data();
  EXPECT_NE(c.ofContiguous(moved), base);
  std::vector<int64_t> same(33);
  std::iota(same.begin(), same.end(), 0);
  moved.positions = same.data();
  EXPECT_EQ(c.ofContiguous(moved), base);
  // One bit of one element of the prefix, in K and in V.
  const int64_t inPrefix = ((1 * Caches::Hkv + 2) * Caches::S + 32) * 8 + 5;
  for (auto *t : {&c.k, &c.v}) {
    (*t)[inPrefix] ^= 1;
    EXPECT_NE(c.ofContiguous(p), base);
    (*t)[inPrefix] ^= 1;
  }
  EXPECT_EQ(c.ofContiguous(p), base);
  // Rows past the prefix and other sequences' rows do not count.
  c.k[((1 * Caches::Hkv + 2) * Caches::S + 33) * 8] ^= 1;
  c.v[((0 * Caches::Hkv + 0) * Caches::S + 3) * 8] ^= 1;
  EXPECT_EQ(c.ofContiguous(p), base);
  // The dtype is part of it: the same bytes read as f16.
  CachePrefix f16 = p;
  f16.dtype = ElementType::F16;
  Sha256Digest asF16{};
  ASSERT_FALSE(cacheFingerprint(f16, c.k.data(), c.v.data(), asF16).isError());
  EXPECT_NE(asF16, base);
}

TEST(CacheFingerprintTest, NamedErrors) {
  Caches c(3, 1);
  auto error = [&](const CachePrefix &p, const void *k, const void *v) {
    Sha256Digest d{};
    Status s = cacheFingerprint(p, k, v, d);
    return s.isError() ? s.message() : std::string("ok");
  };
  CachePrefix p = c.contiguous(0, 40);
  CachePrefix bad = p;
  bad.length = 41;
  EXPECT_EQ(error(bad, c.k.data(), c.v.data()),
            "cache fingerprint: length = 41 exceeds the cache's capacity 40 "
            "(tokens per sequence)");
  bad = p;
  bad.batch = 2;
  EXPECT_EQ(error(bad, c.k.data(), c.v.data()),
            "cache fingerprint: batch = 2 is outside [0, 2) (batch_size 2)");
  bad = p;
  bad.valueBytes -= 2;
  EXPECT_EQ(error(bad, c.k.data(), c.v.data()),
            "cache fingerprint: the value buffer has 3838 bytes; its shape "
            "needs 3840");
  bad = p;
  bad.dtype = ElementType::I32;
  EXPECT_EQ(error(bad, c.k.data(), c.v.data()),
            "cache fingerprint: dtype i32 is not a cache dtype (f32, f16, "
            "bf16)");
  CachePrefix q = c.paged(1, 40);
  std::vector<int64_t> table = {c.table[3], 8, c.table[5]};
  q.pageTable = table.data();
  EXPECT_EQ(error(q, c.kPaged.data(), c.vPaged.data()),
            "cache fingerprint: block_table[1] = 8 is outside [0, 8) (token "
            "16 of 40 is in that page)");
  table[1] = table[0];
  EXPECT_EQ(error(q, c.kPaged.data(), c.vPaged.data()),
            "cache fingerprint: block_table[1] = " + std::to_string(table[0]) +
                ": the page is already used by an earlier slot");
  q = c.paged(1, 49);
  EXPECT_EQ(error(q, c.kPaged.data(), c.vPaged.data()),
            "cache fingerprint: length = 49 needs 4 pages of 16 tokens; the "
            "block-table row has max_pages = 3");
  // A mismatch names the sequence and both digests.
  Sha256Digest a = c.ofContiguous(p),
               other = c.ofContiguous(c.contiguous(1, 40));
  Status s = checkFingerprint(p, a, other);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("cache prefix mismatch: batch 0, tokens [0, 40) "
                             "(bf16, rope=none) has fingerprint " +
                             toHex(a) + ", not the claimed " + toHex(other)),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(checkFingerprint(p, a, a).isError());
}

} // namespace
