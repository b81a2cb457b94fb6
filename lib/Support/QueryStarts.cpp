//===- QueryStarts.cpp - the rules of a varlen (packed) query -------------===//

#include "kvattn/Support/QueryStarts.h"

#include <string>

namespace mlir {
namespace kvattn {

static std::string str(int64_t v) { return std::to_string(v); }

Status checkQueryStarts(const QueryStartsView &v) {
  const int64_t first = v.start(0);
  if (first != 0)
    return Status::error("q_start[0] = " + str(first) +
                         " must be 0: the first sequence starts the packed "
                         "query (batch 0)");
  for (int64_t b = 0; b < v.batch; ++b) {
    const int64_t lo = v.start(b), hi = v.start(b + 1);
    if (hi < lo)
      return Status::error("q_start[" + str(b + 1) + "] = " + str(hi) +
                           " is below q_start[" + str(b) + "] = " + str(lo) +
                           ": sequence starts must not decrease (batch " +
                           str(b) + ")");
    if (v.rows >= 0 && hi > v.rows)
      return Status::error("q_start[" + str(b + 1) + "] = " + str(hi) +
                           " is past the packed query rows T = " + str(v.rows) +
                           " (batch " + str(b) + ")");
  }
  const int64_t last = v.start(v.batch);
  if (v.rows >= 0 && last != v.rows)
    return Status::error(
        "q_start[" + str(v.batch) + "] = " + str(last) +
        " must equal the packed query rows T = " + str(v.rows) +
        ": the last entry closes batch " + str(v.batch - 1) + " (batch " +
        str(v.batch > 0 ? v.batch - 1 : 0) + ")");
  if (!v.qOffset || !v.kvLen)
    return Status::ok();
  for (int64_t b = 0; b < v.batch; ++b) {
    const int64_t rows = v.start(b + 1) - v.start(b);
    std::optional<int64_t> qOff = v.qOffset(b), len = v.kvLen(b);
    std::optional<int64_t> kOff =
        v.kOffset ? v.kOffset(b) : std::optional<int64_t>(0);
    if (rows == 0 || !qOff || !len || !kOff)
      continue;
    if (*qOff + rows > *kOff + *len)
      return Status::error(
          "q_offset[" + str(b) + "] = " + str(*qOff) +
          " with L = " + str(rows) + " row(s) (q_start[" + str(b) +
          "] = " + str(v.start(b)) + " .. q_start[" + str(b + 1) +
          "] = " + str(v.start(b + 1)) + ") puts the last query at position " +
          str(*qOff + rows - 1) + ", past the last cached key at position " +
          str(*kOff + *len - 1) + " (kv_len[" + str(b) + "] = " + str(*len) +
          "): the rows of a sequence must be tokens of its cache (batch " +
          str(b) + ")");
  }
  return Status::ok();
}

} // namespace kvattn
} // namespace mlir
