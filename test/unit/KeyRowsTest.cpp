//===- KeyRowsTest.cpp - k_start and cache_batch_idx rules ----------------===//
//
// The rules of kvattn/Support/KeyRows.h (shared by the verifier, the
// reference, the runtime and the device check) on their own: every rule's
// message, the effective lengths of ragged keys, and that a cache row may be
// read by two batches but not written by two.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Support/KeyRows.h"

#include "gtest/gtest.h"

#include <vector>

using namespace mlir::kvattn;

namespace {

Status keyStarts(std::vector<int64_t> starts, int64_t rows,
                 std::vector<int64_t> kvLen = {}) {
  KeyStartsView v;
  v.batch = static_cast<int64_t>(starts.size()) - 1;
  v.start = [starts](int64_t slot) { return starts[slot]; };
  v.rows = rows;
  if (!kvLen.empty())
    v.kvLen = [kvLen](int64_t b) -> std::optional<int64_t> { return kvLen[b]; };
  return checkKeyStarts(v);
}

Status cacheIndex(std::vector<int64_t> index, int64_t rows, bool written) {
  CacheBatchIndexView v;
  v.batch = static_cast<int64_t>(index.size());
  v.index = [index](int64_t b) { return index[b]; };
  v.cacheRows = rows;
  v.written = written;
  return checkCacheBatchIndex(v);
}

} // namespace

TEST(KeyRows, KeyStartRules) {
  EXPECT_TRUE(keyStarts({0, 4, 4, 9}, 9).isOk());
  EXPECT_TRUE(keyStarts({2, 4, 9}, 12, {2, 5}).isOk()); // rows 0, 1, 9.. free
  EXPECT_EQ(keyStarts({-1, 4}, 9).message(),
            "k_start[0] = -1 is negative: key rows start at row 0 or later "
            "(batch 0)");
  EXPECT_EQ(keyStarts({0, 4, 3}, 9).message(),
            "k_start[2] = 3 is below k_start[1] = 4: key starts must not "
            "decrease (batch 1)");
  EXPECT_EQ(keyStarts({0, 4, 10}, 9).message(),
            "k_start[2] = 10 is past the packed key rows N = 9 (batch 1)");
  EXPECT_EQ(keyStarts({0, 4, 9}, 9, {4, 6}).message(),
            "kv_len[1] = 6 exceeds the 5 key row(s) of the sequence "
            "(k_start[1] = 4 .. k_start[2] = 9): a sequence reads only its "
            "own rows (batch 1)");
  KeyStartsView v;
  std::vector<int64_t> starts = {0, 4, 9};
  v.batch = 2;
  v.start = [&](int64_t s) { return starts[s]; };
  EXPECT_EQ(keyRowCount(v, 1), 5); // without kv_len: the sequence's rows
  v.kvLen = [](int64_t) -> std::optional<int64_t> { return 3; };
  EXPECT_EQ(keyRowCount(v, 1), 3);
}

TEST(KeyRows, CacheBatchIndexRules) {
  EXPECT_TRUE(cacheIndex({3, 0, 3}, 4, false).isOk()); // a row read twice
  EXPECT_EQ(cacheIndex({3, 0, 3}, 4, true).message(),
            "cache_batch_idx[2] = 3 repeats cache_batch_idx[0]: two batches "
            "would write cache row 3 (batch 2)");
  EXPECT_EQ(cacheIndex({3, 4}, 4, false).message(),
            "cache_batch_idx[1] = 4 is outside [0, C = 4): the cache has 4 "
            "row(s) (batch 1)");
  EXPECT_EQ(cacheIndex({0, -1}, 4, false).message(),
            "cache_batch_idx[1] = -1 is outside [0, C = 4): the cache has 4 "
            "row(s) (batch 1)");
  EXPECT_EQ(cacheIndex({-2}, -1, false).message(),
            "cache_batch_idx[0] = -2 is negative (batch 0)");
}
