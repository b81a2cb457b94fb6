//===- CacheFingerprint.h - the identity of a cached prefix -----*- C++ -*-===//
//
// A cached KV prefix is reused (prefix caching, a shared system prompt, a
// context-parallel rank's blocks) only if it is the prefix it claims to be:
// the same tokens at the same positions, rotated the same way, in the same
// dtype. Its fingerprint is a SHA-256 over exactly that, in logical order,
// so it does not depend on where the rows live: contiguous or paged, which
// pages, in which order, on the host or on the device.
//
// The hashed stream (docs/runtime.md, "Cache identity"), all integers
// little-endian:
//   "kvattn-cache-fingerprint/1\n"
//   "dtype=<f32|f16|bf16> kv_heads=<Hkv> head_dim=<D> value_head_dim=<Dv> "
//   "length=<n> rope=<state, or none>\n"
//   for each token t in 0 .. n-1:
//     position (int64: positions[t], or t),
//     K[t, h, 0 .. D-1] for h = 0 .. Hkv-1 (the dtype's bytes),
//     V[t, h, 0 .. Dv-1] for h = 0 .. Hkv-1.
// Plain C++: the runtime links it to fingerprint device buffers.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_CACHEFINGERPRINT_H
#define KVATTN_SUPPORT_CACHEFINGERPRINT_H

#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/Sha256.h"
#include "kvattn/Support/Status.h"

#include <cstdint>
#include <functional>
#include <string>

namespace mlir {
namespace kvattn {

/// Where one sequence's first `length` tokens live in a K and a V buffer.
/// Contiguous (pageSize == 0): K is [batchSize, Hkv, capacity, D] and V
/// [batchSize, Hkv, capacity, Dv], the sequence is `batch`. Paged
/// (pageSize > 0): K is [numPages, pageSize, Hkv, D] (V: Dv), and
/// `pageTable` is the sequence's row of the block table (maxPages entries:
/// token t is in page pageTable[t / pageSize], row t % pageSize).
struct CachePrefix {
  ElementType dtype = ElementType::F32; ///< f32, f16 or bf16
  int64_t numKvHeads = 0, headDim = 0, valueHeadDim = 0;
  int64_t length = 0;
  int64_t batch = 0, batchSize = 0, capacity = 0;
  int64_t pageSize = 0, numPages = 0, maxPages = 0;
  const int64_t *pageTable = nullptr;
  /// The logical position of each token (length entries), or null: t.
  const int64_t *positions = nullptr;
  /// The RoPE state the cached K was written in ("" = none): it is part of
  /// the identity (the same K rotated at other positions is another cache).
  std::string rope;
  /// The buffers' sizes in bytes, for the bounds checks.
  uint64_t keyBytes = 0, valueBytes = 0;
};

/// Checks the description: dtype, sizes, batch, length within the
/// capacity or the table's pages, page ids in [0, numPages), distinct
/// pages, and every row inside the buffers' sizes. Errors name the field
/// and the value.
Status checkCachePrefix(const CachePrefix &prefix);

/// Reads `bytes` bytes at `offset` of the K (value == false) or V buffer
/// into `dst`.
using CacheReader = std::function<Status(bool value, uint64_t offset,
                                         uint64_t bytes, void *dst)>;

/// The fingerprint of `prefix`, reading its rows through `read` (a page or
/// a run of rows per call, never one row at a time), after
/// checkCachePrefix.
Status cacheFingerprint(const CachePrefix &prefix, const CacheReader &read,
                        Sha256Digest &digest);

/// The same over buffers in host memory.
Status cacheFingerprint(const CachePrefix &prefix, const void *key,
                        const void *value, Sha256Digest &digest);

/// An error naming the sequence and both digests when `actual` differs
/// from `expected`; ok otherwise.
Status checkFingerprint(const CachePrefix &prefix, const Sha256Digest &actual,
                        const Sha256Digest &expected);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_CACHEFINGERPRINT_H
