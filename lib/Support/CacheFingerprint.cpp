//===- CacheFingerprint.cpp - the identity of a cached prefix -------------===//

#include "kvattn/Support/CacheFingerprint.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>
#include <vector>

namespace mlir {
namespace kvattn {

namespace {

const char kMagic[] = "kvattn-cache-fingerprint/1\n";
/// Tokens per read of a contiguous cache (per head).
constexpr int64_t kContiguousChunk = 256;

/// a * b * ... into `out`, false on overflow past int64.
bool product(std::initializer_list<int64_t> factors, uint64_t &out) {
  int64_t p = 1;
  for (int64_t f : factors)
    if (__builtin_mul_overflow(p, f, &p))
      return false;
  out = static_cast<uint64_t>(p);
  return true;
}

std::string str(int64_t v) { return std::to_string(v); }

void appendLE(std::vector<uint8_t> &out, int64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
}

} // namespace

Status checkCachePrefix(const CachePrefix &p) {
  if (p.dtype != ElementType::F32 && p.dtype != ElementType::F16 &&
      p.dtype != ElementType::BF16)
    return Status::error(std::string("cache fingerprint: dtype ") +
                         elementTypeName(p.dtype) +
                         " is not a cache dtype (f32, f16, bf16)");
  if (p.numKvHeads <= 0 || p.headDim <= 0 || p.valueHeadDim <= 0)
    return Status::error("cache fingerprint: num_kv_heads = " +
                         str(p.numKvHeads) + ", head_dim = " + str(p.headDim) +
                         ", value_head_dim = " + str(p.valueHeadDim) +
                         ": each must be positive");
  if (p.length < 0)
    return Status::error("cache fingerprint: length = " + str(p.length) +
                         " is negative");
  const int64_t es = static_cast<int64_t>(elementTypeSize(p.dtype));
  uint64_t needK = 0, needV = 0;
  if (p.pageSize == 0) {
    if (p.batchSize <= 0 || p.batch < 0 || p.batch >= p.batchSize)
      return Status::error("cache fingerprint: batch = " + str(p.batch) +
                           " is outside [0, " + str(p.batchSize) +
                           ") (batch_size " + str(p.batchSize) + ")");
    if (p.capacity < p.length)
      return Status::error("cache fingerprint: length = " + str(p.length) +
                           " exceeds the cache's capacity " + str(p.capacity) +
                           " (tokens per sequence)");
    if (!product({p.batchSize, p.numKvHeads, p.capacity, p.headDim, es},
                 needK) ||
        !product({p.batchSize, p.numKvHeads, p.capacity, p.valueHeadDim, es},
                 needV))
      return Status::error("cache fingerprint: the cache's size overflows "
                           "64 bits");
  } else {
    if (p.pageSize < 0 || p.numPages <= 0 || p.maxPages < 0)
      return Status::error("cache fingerprint: page_size = " + str(p.pageSize) +
                           ", num_pages = " + str(p.numPages) +
                           ", max_pages = " + str(p.maxPages) +
                           ": a paged cache needs page_size > 0, "
                           "num_pages > 0, max_pages >= 0");
    int64_t slots = (p.length + p.pageSize - 1) / p.pageSize;
    if (slots > p.maxPages)
      return Status::error("cache fingerprint: length = " + str(p.length) +
                           " needs " + str(slots) + " pages of " +
                           str(p.pageSize) +
                           " tokens; the block-table row "
                           "has max_pages = " +
                           str(p.maxPages));
    if (slots > 0 && !p.pageTable)
      return Status::error("cache fingerprint: a paged cache needs its "
                           "block-table row");
    std::unordered_set<int64_t> seen;
    for (int64_t s = 0; s < slots; ++s) {
      int64_t page = p.pageTable[s];
      if (page < 0 || page >= p.numPages)
        return Status::error(
            "cache fingerprint: block_table[" + str(s) + "] = " + str(page) +
            " is outside [0, " + str(p.numPages) + ") (token " +
            str(s * p.pageSize) + " of " + str(p.length) + " is in that page)");
      if (!seen.insert(page).second)
        return Status::error("cache fingerprint: block_table[" + str(s) +
                             "] = " + str(page) +
                             ": the page is already used by an earlier slot");
    }
    if (!product({p.numPages, p.pageSize, p.numKvHeads, p.headDim, es},
                 needK) ||
        !product({p.numPages, p.pageSize, p.numKvHeads, p.valueHeadDim, es},
                 needV))
      return Status::error("cache fingerprint: the cache's size overflows "
                           "64 bits");
  }
  if (p.keyBytes < needK || p.valueBytes < needV)
    return Status::error(
        "cache fingerprint: the " +
        std::string(p.keyBytes < needK ? "key" : "value") + " buffer has " +
        str(static_cast<int64_t>(p.keyBytes < needK ? p.keyBytes
                                                    : p.valueBytes)) +
        " bytes; its shape needs " +
        str(static_cast<int64_t>(p.keyBytes < needK ? needK : needV)));
  return Status::ok();
}

Status cacheFingerprint(const CachePrefix &p, const CacheReader &read,
                        Sha256Digest &digest) {
  if (Status s = checkCachePrefix(p); s.isError())
    return s;
  const uint64_t es = elementTypeSize(p.dtype);
  const uint64_t hkv = p.numKvHeads;
  const uint64_t kRow = p.headDim * es, vRow = p.valueHeadDim * es;

  Sha256 sha;
  sha.update(kMagic, sizeof(kMagic) - 1);
  std::string header =
      std::string("dtype=") + elementTypeName(p.dtype) +
      " kv_heads=" + str(p.numKvHeads) + " head_dim=" + str(p.headDim) +
      " value_head_dim=" + str(p.valueHeadDim) + " length=" + str(p.length) +
      " rope=" + (p.rope.empty() ? "none" : p.rope) + "\n";
  sha.update(header.data(), header.size());

  // Hashes tokens [t0, t1): token i's K rows of every head are at
  // k + kAt(i, h), its V rows at v + vAt(i, h).
  std::vector<uint8_t> record;
  auto hashTokens = [&](int64_t t0, int64_t t1, const uint8_t *k,
                        const uint8_t *v, auto kAt, auto vAt) {
    for (int64_t t = t0; t < t1; ++t) {
      record.clear();
      appendLE(record, p.positions ? p.positions[t] : t);
      sha.update(record.data(), record.size());
      for (uint64_t h = 0; h < hkv; ++h)
        sha.update(k + kAt(t - t0, h), kRow);
      for (uint64_t h = 0; h < hkv; ++h)
        sha.update(v + vAt(t - t0, h), vRow);
    }
  };

  std::vector<uint8_t> k, v;
  if (p.pageSize > 0) {
    // A page's rows are [page_size, Hkv, D]: one read per page and buffer.
    for (int64_t t0 = 0; t0 < p.length; t0 += p.pageSize) {
      int64_t t1 = std::min(p.length, t0 + p.pageSize);
      uint64_t page = p.pageTable[t0 / p.pageSize];
      uint64_t rows = t1 - t0;
      k.resize(rows * hkv * kRow);
      v.resize(rows * hkv * vRow);
      if (Status s =
              read(false, page * p.pageSize * hkv * kRow, k.size(), k.data());
          s.isError())
        return s;
      if (Status s =
              read(true, page * p.pageSize * hkv * vRow, v.size(), v.data());
          s.isError())
        return s;
      hashTokens(
          t0, t1, k.data(), v.data(),
          [&](uint64_t i, uint64_t h) { return (i * hkv + h) * kRow; },
          [&](uint64_t i, uint64_t h) { return (i * hkv + h) * vRow; });
    }
  } else {
    // A head's rows are consecutive: one read per head and buffer for each
    // chunk of tokens.
    for (int64_t t0 = 0; t0 < p.length; t0 += kContiguousChunk) {
      int64_t t1 = std::min(p.length, t0 + kContiguousChunk);
      uint64_t rows = t1 - t0;
      k.resize(hkv * rows * kRow);
      v.resize(hkv * rows * vRow);
      for (uint64_t h = 0; h < hkv; ++h) {
        uint64_t first = (uint64_t(p.batch) * hkv + h) * p.capacity + t0;
        if (Status s = read(false, first * kRow, rows * kRow,
                            k.data() + h * rows * kRow);
            s.isError())
          return s;
        if (Status s = read(true, first * vRow, rows * vRow,
                            v.data() + h * rows * vRow);
            s.isError())
          return s;
      }
      hashTokens(
          t0, t1, k.data(), v.data(),
          [&](uint64_t i, uint64_t h) { return (h * rows + i) * kRow; },
          [&](uint64_t i, uint64_t h) { return (h * rows + i) * vRow; });
    }
  }
  digest = sha.finish();
  return Status::ok();
}

Status cacheFingerprint(const CachePrefix &prefix, const void *key,
                        const void *value, Sha256Digest &digest) {
  if (prefix.length > 0 && (!key || !value))
    return Status::error("cache fingerprint: the key or value buffer is "
                         "null");
  return cacheFingerprint(
      prefix,
      [&](bool isValue, uint64_t offset, uint64_t bytes, void *dst) {
        const auto *base = static_cast<const uint8_t *>(isValue ? value : key);
        std::memcpy(dst, base + offset, bytes);
        return Status::ok();
      },
      digest);
}

Status checkFingerprint(const CachePrefix &p, const Sha256Digest &actual,
                        const Sha256Digest &expected) {
  if (actual == expected)
    return Status::ok();
  return Status::error(
      "cache prefix mismatch: batch " + str(p.batch) + ", tokens [0, " +
      str(p.length) + ") (" + elementTypeName(p.dtype) +
      ", rope=" + (p.rope.empty() ? "none" : p.rope) + ") has fingerprint " +
      toHex(actual) + ", not the claimed " + toHex(expected) +
      ": its tokens, positions, RoPE state or dtype differ from the prefix "
      "it is reused as");
}

} // namespace kvattn
} // namespace mlir
