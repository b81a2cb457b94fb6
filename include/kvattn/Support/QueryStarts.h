//===- QueryStarts.h - the rules of a varlen (packed) query -----*- C++ -*-===//
//
// One statement of the rules the per-sequence query starts `q_start [B + 1]`
// of a varlen `kvattn.attention` must satisfy, shared by the op verifier
// (constant operands), the scalar reference and the runtime (before a
// launch). Plain C++: the runtime links it without MLIR.
//
// Sequence `b` owns the packed query rows `q_start[b] .. q_start[b+1] - 1`
// of `query [1, Hq, T, D]` (FlashAttention's `cu_seqlens_q`); its row
// `q_start[b] + i` sits at position `q_offset[b] + i`.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_QUERYSTARTS_H
#define KVATTN_SUPPORT_QUERYSTARTS_H

#include "kvattn/Support/Status.h"

#include <cstdint>
#include <functional>
#include <optional>

namespace mlir {
namespace kvattn {

struct QueryStartsView {
  int64_t batch = 0; ///< B: the number of sequences (q_start has B + 1)
  /// `q_start[slot]`, slot in [0, B].
  std::function<int64_t(int64_t slot)> start;
  /// T, the packed query rows; -1 when unknown (a dynamic verifier shape).
  int64_t rows = -1;
  /// `q_offset[b]`, `k_offset[b]` (null: 0) and `kv_len[b]`; a null
  /// function or std::nullopt skips the rule that needs them.
  std::function<std::optional<int64_t>(int64_t b)> qOffset, kOffset, kvLen;
};

/// Checks: `q_start[0] == 0`; `q_start[b] <= q_start[b + 1]` (a sequence may
/// own no row); `q_start[B] == T`; and, with `q_offset` and `kv_len`, that the
/// rows of every non-empty sequence are tokens of its cache (the last row
/// finds its own key): `q_offset[b] + L_b <= k_offset[b] + kv_len[b]`
/// with `L_b = q_start[b + 1] - q_start[b]` (the rows are appended tokens,
/// so the cache must hold them). The first violation is returned; its
/// message names the operand, the slot, the value and the batch, e.g.
/// `q_start[2] = 5 is below q_start[1] = 7: sequence starts must not
/// decrease (batch 1)`.
Status checkQueryStarts(const QueryStartsView &view);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_QUERYSTARTS_H
