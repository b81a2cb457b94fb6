//===- TreeParents.h - the rules of a speculative-decoding tree -*- C++ -*-===//
//
// One statement of the rules the draft-token trees `tree_parents [T]` of a
// varlen `kvattn.attention` must satisfy, shared by the op verifier
// (constant operands), the scalar reference and the runtime (before a
// launch). Plain C++: the runtime links it without MLIR.
//
// Sequence `b` owns the packed rows `q_start[b] .. q_start[b+1] - 1`, its
// `L_b` draft tokens. `tree_parents[q_start[b] + i]` is the local index of
// draft token i's parent (-1: a root, whose parent is the cache). Draft
// token i sits at position `q_offset[b] + depth(i)` (a root at depth 0)
// and its key is key `kv_len[b] - L_b + i` of the sequence: the draft
// tokens are the last `L_b` keys of the cache, right after the cached
// prefix (`q_offset[b] = k_offset[b] + kv_len[b] - L_b`).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_TREEPARENTS_H
#define KVATTN_SUPPORT_TREEPARENTS_H

#include "kvattn/Support/Status.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace mlir {
namespace kvattn {

struct TreeParentsView {
  int64_t batch = 0; ///< B: the number of sequences (q_start has B + 1)
  /// `q_start[slot]`, slot in [0, B]; the q_start rules hold already
  /// (checkQueryStarts).
  std::function<int64_t(int64_t slot)> start;
  /// `tree_parents[row]`, row a packed query row.
  std::function<int64_t(int64_t row)> parent;
  /// `q_offset[b]`, `k_offset[b]` (null: 0) and `kv_len[b]` (null: `keys`);
  /// a null function or std::nullopt skips the rules that need them.
  std::function<std::optional<int64_t>(int64_t b)> qOffset, kOffset, kvLen;
  /// S, the logical keys of a sequence (the default kv_len); -1 unknown.
  int64_t keys = -1;
};

/// Checks, per sequence b with L_b rows: every `tree_parents[q_start[b] +
/// i]` is -1 or a local row in [0, i) (a draft token's ancestors come
/// before it, so the parents form a forest and depths are well defined);
/// the cache holds the draft tokens, `kv_len[b] >= L_b`; and the tree
/// follows the cached prefix, `q_offset[b] = k_offset[b] + kv_len[b] -
/// L_b`. The first violation is returned; its message names the operand,
/// the slot, the value and the batch, e.g. `tree_parents[4] = 3 is not a
/// row before local row 1 of its sequence: a draft token's parent is -1
/// (the cache) or one of its rows 0 .. 0 (batch 1)`.
Status checkTreeParents(const TreeParentsView &view);

/// The messages of the three rules, shared with the device check (the
/// runtime turns a status word into them): packed row `row` of batch `b`,
/// its local row `local`, holds parent `parent`; the batch's `rows` draft
/// tokens against its keys `len`; `qOffset` against `kOffset + len - rows`.
std::string treeParentMessage(int64_t row, int64_t parent, int64_t local,
                              int64_t b);
std::string treeKvLenMessage(int64_t b, int64_t len, int64_t rows);
std::string treeQOffsetMessage(int64_t b, int64_t qOffset, int64_t kOffset,
                               int64_t len, int64_t rows);

/// The depth of local row `i` of a sequence whose parents (local indices)
/// are `parent(0 .. i)`: 0 for a root. Invalid parents (>= their row, or
/// below -1) are clamped into [-1, row - 1], as compiled code does, so the
/// walk always ends.
int64_t treeDepth(const std::function<int64_t(int64_t)> &parent, int64_t i);

/// Whether local row `a` is `i` or an ancestor of `i` (same clamping);
/// `steps` receives depth(i) - depth(a) when it is.
bool treeAncestor(const std::function<int64_t(int64_t)> &parent, int64_t i,
                  int64_t a, int64_t *steps = nullptr);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_TREEPARENTS_H
