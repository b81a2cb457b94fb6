//===- KeyRows.h - where a batch's keys live: k_start, cache_batch_idx -*- C++
//-*-===//
//
// One statement of the rules for the two ways a `kvattn.attention` can map
// a batch to its keys without pages, shared by the op verifier (constant
// operands), the scalar reference and the runtime (before a launch). Plain
// C++: the runtime links it without MLIR.
//
// - Ragged keys (`k_start [B + 1]`, FlashAttention's `cu_seqlens_k`): K and
//   V are one packed buffer `[1, Hkv, N, D]`; batch `b`'s keys are rows
//   `k_start[b] .. k_start[b] + kv_len[b] - 1`, where `kv_len[b]` defaults
//   to `k_start[b + 1] - k_start[b]`.
// - A batch-to-cache map (`cache_batch_idx [B]`, FlashAttention's kvcache
//   API): K and V are `[C, Hkv, S, D]` (C cache rows); batch `b` reads cache
//   row `cache_batch_idx[b]`.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_KEYROWS_H
#define KVATTN_SUPPORT_KEYROWS_H

#include "kvattn/Support/Status.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace mlir {
namespace kvattn {

struct KeyStartsView {
  int64_t batch = 0; ///< B: k_start has B + 1 entries
  /// `k_start[slot]`, slot in [0, B].
  std::function<int64_t(int64_t slot)> start;
  /// N, the packed key rows of K and V; -1 when unknown.
  int64_t rows = -1;
  /// `kv_len[b]`; null (or std::nullopt) when not given.
  std::function<std::optional<int64_t>(int64_t b)> kvLen;
};

/// Checks: `k_start[0] >= 0`; `k_start[b] <= k_start[b + 1]`;
/// `k_start[B] <= N`; with `kv_len`, `kv_len[b] <= k_start[b + 1] -
/// k_start[b]` (a batch reads only its own rows). The first violation is
/// returned, naming the operand, the slot, the value and the batch, e.g.
/// `k_start[2] = 3 is below k_start[1] = 5: key starts must not decrease
/// (batch 1)`.
Status checkKeyStarts(const KeyStartsView &view);

/// The effective key count of batch `b` with ragged keys: `kv_len[b]` when
/// given, else `k_start[b + 1] - k_start[b]`.
inline int64_t keyRowCount(const KeyStartsView &view, int64_t b) {
  if (view.kvLen)
    if (std::optional<int64_t> len = view.kvLen(b))
      return *len;
  return view.start(b + 1) - view.start(b);
}

struct CacheBatchIndexView {
  int64_t batch = 0; ///< B: cache_batch_idx has B entries
  std::function<int64_t(int64_t b)> index;
  /// C, the cache rows of K and V (dim 0); -1 when unknown.
  int64_t cacheRows = -1;
  /// True where the map is written through (kvattn.append): no two batches
  /// may name the same cache row. Reads may share a row.
  bool written = false;
};

/// Checks: `0 <= cache_batch_idx[b] < C`; when written, no repeated row.
/// E.g. `cache_batch_idx[1] = 4 is outside [0, C = 4): the cache has 4
/// row(s) (batch 1)`, `cache_batch_idx[2] = 1 repeats cache_batch_idx[0]:
/// two batches would write cache row 1 (batch 2)`.
Status checkCacheBatchIndex(const CacheBatchIndexView &view);

/// The messages of the rules, shared with the device status word's reader
/// (the runtime's describeViolation), so host and device checks say the
/// same.
std::string keyStartNegativeMessage(int64_t value);
std::string keyStartDecreaseMessage(int64_t b, int64_t lo, int64_t hi);
std::string keyStartPastRowsMessage(int64_t b, int64_t hi, int64_t rows);
std::string keyStartKvLenMessage(int64_t b, int64_t len, int64_t lo,
                                 int64_t hi);
std::string cacheBatchIndexRangeMessage(int64_t b, int64_t row,
                                        int64_t cacheRows);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_KEYROWS_H
