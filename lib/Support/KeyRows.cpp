//===- KeyRows.cpp - where a batch's keys live: k_start, cache_batch_idx --===//

#include "kvattn/Support/KeyRows.h"

#include <string>
#include <unordered_map>

namespace mlir {
namespace kvattn {

static std::string str(int64_t v) { return std::to_string(v); }

std::string keyStartNegativeMessage(int64_t value) {
  return "k_start[0] = " + str(value) +
         " is negative: key rows start at row 0 or later (batch 0)";
}

std::string keyStartDecreaseMessage(int64_t b, int64_t lo, int64_t hi) {
  return "k_start[" + str(b + 1) + "] = " + str(hi) + " is below k_start[" +
         str(b) + "] = " + str(lo) + ": key starts must not decrease (batch " +
         str(b) + ")";
}

std::string keyStartPastRowsMessage(int64_t b, int64_t hi, int64_t rows) {
  return "k_start[" + str(b + 1) + "] = " + str(hi) +
         " is past the packed key rows N = " + str(rows) + " (batch " + str(b) +
         ")";
}

std::string keyStartKvLenMessage(int64_t b, int64_t len, int64_t lo,
                                 int64_t hi) {
  return "kv_len[" + str(b) + "] = " + str(len) + " exceeds the " +
         str(hi - lo) + " key row(s) of the sequence (k_start[" + str(b) +
         "] = " + str(lo) + " .. k_start[" + str(b + 1) + "] = " + str(hi) +
         "): a sequence reads only its own rows (batch " + str(b) + ")";
}

std::string cacheBatchIndexRangeMessage(int64_t b, int64_t row,
                                        int64_t cacheRows) {
  return "cache_batch_idx[" + str(b) + "] = " + str(row) +
         " is outside [0, C = " + str(cacheRows) + "): the cache has " +
         str(cacheRows) + " row(s) (batch " + str(b) + ")";
}

Status checkKeyStarts(const KeyStartsView &v) {
  const int64_t first = v.start(0);
  if (first < 0)
    return Status::error(keyStartNegativeMessage(first));
  for (int64_t b = 0; b < v.batch; ++b) {
    const int64_t lo = v.start(b), hi = v.start(b + 1);
    if (hi < lo)
      return Status::error(keyStartDecreaseMessage(b, lo, hi));
    if (v.rows >= 0 && hi > v.rows)
      return Status::error(keyStartPastRowsMessage(b, hi, v.rows));
  }
  if (!v.kvLen)
    return Status::ok();
  for (int64_t b = 0; b < v.batch; ++b) {
    std::optional<int64_t> len = v.kvLen(b);
    const int64_t lo = v.start(b), hi = v.start(b + 1);
    if (len && *len > hi - lo)
      return Status::error(keyStartKvLenMessage(b, *len, lo, hi));
  }
  return Status::ok();
}

Status checkCacheBatchIndex(const CacheBatchIndexView &v) {
  std::unordered_map<int64_t, int64_t> firstUse;
  for (int64_t b = 0; b < v.batch; ++b) {
    const int64_t row = v.index(b);
    if (row < 0 && v.cacheRows < 0)
      return Status::error("cache_batch_idx[" + str(b) + "] = " + str(row) +
                           " is negative (batch " + str(b) + ")");
    if (row < 0 || (v.cacheRows >= 0 && row >= v.cacheRows))
      return Status::error(cacheBatchIndexRangeMessage(b, row, v.cacheRows));
    if (!v.written)
      continue;
    auto [it, inserted] = firstUse.emplace(row, b);
    if (!inserted)
      return Status::error("cache_batch_idx[" + str(b) + "] = " + str(row) +
                           " repeats cache_batch_idx[" + str(it->second) +
                           "]: two batches would write cache row " + str(row) +
                           " (batch " + str(b) + ")");
  }
  return Status::ok();
}

} // namespace kvattn
} // namespace mlir
