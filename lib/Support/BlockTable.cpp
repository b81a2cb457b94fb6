//===- BlockTable.cpp - the paged-KV block-table rules --------------------===//

#include "kvattn/Support/BlockTable.h"

#include <string>
#include <unordered_map>

namespace kvattn {

static std::string str(int64_t v) { return std::to_string(v); }

Status checkBlockTable(const BlockTableView &table, int64_t numPages,
                       int64_t pageSize) {
  if (pageSize <= 0)
    return Status::error("page_size must be positive, got " + str(pageSize));
  const std::string range = numPages < 0 ? std::string("[0, num_pages)")
                                         : "[0, " + str(numPages) + ")";
  for (int64_t b = 0; b < table.batch; ++b) {
    std::unordered_map<int64_t, int64_t> slotOfPage; // this sequence's pages
    int64_t active = 0, firstEmpty = -1;
    for (int64_t slot = 0; slot < table.maxPages; ++slot) {
      const int64_t page = table.page(b, slot);
      const std::string at =
          "block_table[" + str(b) + "][" + str(slot) + "] = " + str(page);
      if (page == -1) {
        if (firstEmpty < 0)
          firstEmpty = slot;
        continue;
      }
      if (page < 0 || (numPages >= 0 && page >= numPages))
        return Status::error(at + ": page id out of range " + range +
                             " (batch " + str(b) + ")");
      if (firstEmpty >= 0)
        return Status::error(at + " follows the -1 at slot " + str(firstEmpty) +
                             ": the -1 tail must be canonical (batch " +
                             str(b) + ")");
      auto [it, fresh] = slotOfPage.try_emplace(page, slot);
      if (!fresh)
        return Status::error(at + ": page " + str(page) +
                             " is already used at slot " + str(it->second) +
                             " of the same sequence (batch " + str(b) + ")");
      ++active;
    }
    std::optional<int64_t> len = table.kvLen ? table.kvLen(b) : std::nullopt;
    if (len && (*len < 0 || *len > active * pageSize))
      return Status::error(
          "kv_len[" + str(b) + "] = " + str(*len) + " does not fit the " +
          str(active) + " page(s) of block_table[" + str(b) + "] (page_size " +
          str(pageSize) + ", at most " + str(active * pageSize) +
          " tokens) (batch " + str(b) + ")");
  }
  return Status::ok();
}

} // namespace kvattn
