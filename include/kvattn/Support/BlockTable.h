//===- BlockTable.h - the paged-KV block-table rules ------------*- C++ -*-===//
//
// One statement of the rules a paged KV layout must satisfy, shared by the
// op verifier (constant tables), the scalar reference and the runtime
// (before a launch). Plain C++: the runtime links it without MLIR.
//
// A block table `[B, max_pages]` maps sequence `b`'s logical page `slot`
// (keys `slot * page_size .. (slot + 1) * page_size - 1`) to a physical page
// id in `[0, num_pages)`; unused slots hold `-1`, and only at the end.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_BLOCKTABLE_H
#define KVATTN_SUPPORT_BLOCKTABLE_H

#include "kvattn/Support/Status.h"

#include <cstdint>
#include <functional>
#include <optional>

namespace mlir {
namespace kvattn {

struct BlockTableView {
  int64_t batch = 0;    ///< B
  int64_t maxPages = 0; ///< slots per sequence
  /// Entry `[b][slot]`.
  std::function<int64_t(int64_t b, int64_t slot)> page;
  /// `kv_len[b]`; std::nullopt when the lengths are not known (a verifier
  /// with a constant table but run-time lengths).
  std::function<std::optional<int64_t>(int64_t b)> kvLen;
  /// The names in messages: the table and the lengths. With `flat` the
  /// table is one sequence's list of pages (`batch` 1; a cascade's
  /// `prefix_pages [max_pages]` of `prefix_len [1]` keys): its entries are
  /// named `name[slot]`, without a batch.
  const char *name = "block_table";
  const char *lengthName = "kv_len";
  bool flat = false;
};

/// Checks, for every sequence: each entry is `-1` or a page id in
/// `[0, numPages)` (`numPages < 0`: unknown, only `>= -1` is checked); no
/// page id follows a `-1` (the tail is canonical); no page appears twice
/// among the sequence's pages; `0 <= kv_len <= (pages) * pageSize`. The
/// first violation is returned; its message names the batch, the slot and
/// the value, e.g. `block_table[1][3] = 7: page 7 is already used at slot 0
/// of the same sequence (batch 1)`.
Status checkBlockTable(const BlockTableView &table, int64_t numPages,
                       int64_t pageSize);

/// The write rules of a paged `kvattn.append` of `length` tokens at `pos[b]`,
/// checked after checkBlockTable (the table itself is valid): `pos[b] >= 0`
/// (`pos` returns std::nullopt for an unknown position, which is skipped);
/// the written tokens `pos[b] .. pos[b] + length - 1` lie in the sequence's
/// pages (`pos[b] + length <= pages * pageSize`); no two sequences write the
/// same row of a shared page. Errors name the batch, the slot and the value,
/// e.g. `pos[1] = 14 with L = 4 does not fit the 1 page(s) of block_table[1]
/// (page_size 16, at most 16 tokens): token 16 falls in slot 1 (batch 1)`.
/// With `skipPadding` (`kvattn.append ... skip_padding`) a token whose table
/// entry is `-1` is a padding token that writes nothing: the tokens must lie
/// in the table's `max_pages` slots instead of the sequence's pages, and
/// padding tokens take no part in the shared-row rule.
Status
checkPagedWrite(const BlockTableView &table,
                const std::function<std::optional<int64_t>(int64_t b)> &pos,
                int64_t length, int64_t pageSize, bool skipPadding = false);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_BLOCKTABLE_H
