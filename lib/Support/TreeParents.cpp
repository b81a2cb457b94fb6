//===- TreeParents.cpp - the rules of a speculative-decoding tree ---------===//

#include "kvattn/Support/TreeParents.h"

#include <algorithm>
#include <string>

namespace mlir {
namespace kvattn {

static std::string str(int64_t v) { return std::to_string(v); }

static int64_t clampedParent(const std::function<int64_t(int64_t)> &parent,
                             int64_t x) {
  return std::max<int64_t>(std::min<int64_t>(parent(x), x - 1), -1);
}

int64_t treeDepth(const std::function<int64_t(int64_t)> &parent, int64_t i) {
  int64_t depth = 0;
  for (int64_t x = clampedParent(parent, i); x >= 0;
       x = clampedParent(parent, x))
    ++depth;
  return depth;
}

bool treeAncestor(const std::function<int64_t(int64_t)> &parent, int64_t i,
                  int64_t a, int64_t *steps) {
  int64_t n = 0, x = i;
  while (x > a && x >= 0) {
    x = clampedParent(parent, x);
    ++n;
  }
  if (steps)
    *steps = n;
  return x == a && a >= 0;
}

std::string treeParentMessage(int64_t row, int64_t parent, int64_t local,
                              int64_t b) {
  return "tree_parents[" + str(row) + "] = " + str(parent) +
         " is not a row before local row " + str(local) +
         " of its sequence: a draft token's parent is -1 (the cache) or " +
         (local == 0 ? std::string("none of its rows (row 0 is a root)")
                     : "one of its rows 0 .. " + str(local - 1)) +
         " (batch " + str(b) + ")";
}

std::string treeKvLenMessage(int64_t b, int64_t len, int64_t rows) {
  return "kv_len[" + str(b) + "] = " + str(len) +
         " holds fewer keys than the " + str(rows) +
         " draft token(s) of the tree: the draft tokens are the last keys of "
         "the cache (batch " +
         str(b) + ")";
}

std::string treeQOffsetMessage(int64_t b, int64_t qOffset, int64_t kOffset,
                               int64_t len, int64_t rows) {
  return "q_offset[" + str(b) + "] = " + str(qOffset) + " must be k_offset + " +
         "kv_len - L = " + str(kOffset) + " + " + str(len) + " - " + str(rows) +
         " = " + str(kOffset + len - rows) +
         ": the tree's roots sit right after the cached prefix, its draft "
         "tokens are the last L keys (batch " +
         str(b) + ")";
}

Status checkTreeParents(const TreeParentsView &v) {
  for (int64_t b = 0; b < v.batch; ++b) {
    const int64_t lo = v.start(b), rows = v.start(b + 1) - lo;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t p = v.parent(lo + i);
      if (p == -1 || (p >= 0 && p < i))
        continue;
      return Status::error(treeParentMessage(lo + i, p, i, b));
    }
    if (rows == 0)
      continue;
    std::optional<int64_t> len =
        v.kvLen ? v.kvLen(b)
                : (v.keys >= 0 ? std::optional<int64_t>(v.keys) : std::nullopt);
    if (!len)
      continue;
    if (*len < rows)
      return Status::error(treeKvLenMessage(b, *len, rows));
    std::optional<int64_t> qOff =
        v.qOffset ? v.qOffset(b) : std::optional<int64_t>();
    std::optional<int64_t> kOff =
        v.kOffset ? v.kOffset(b) : std::optional<int64_t>(0);
    if (!qOff || !kOff)
      continue;
    if (*qOff != *kOff + *len - rows)
      return Status::error(treeQOffsetMessage(b, *qOff, *kOff, *len, rows));
  }
  return Status::ok();
}

} // namespace kvattn
} // namespace mlir
