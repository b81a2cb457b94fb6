//===- BlockTable.cpp - the paged-KV block-table rules --------------------===//

#include "kvattn/Support/BlockTable.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mlir {
namespace kvattn {

static std::string str(int64_t v) { return std::to_string(v); }

/// Whether the table breaks no rule, without building a message: the path
/// every valid launch takes (the runtime checks host tables per launch; a
/// message string per entry cost ~1 ms for 64 sequences of 64 pages).
static bool blockTableIsValid(const BlockTableView &table, int64_t numPages,
                              int64_t pageSize) {
  std::vector<int64_t> pages;
  pages.reserve(std::max<int64_t>(table.maxPages, 0));
  for (int64_t b = 0; b < table.batch; ++b) {
    pages.clear();
    bool empty = false;
    for (int64_t slot = 0; slot < table.maxPages; ++slot) {
      const int64_t page = table.page(b, slot);
      if (page == -1) {
        empty = true;
        continue;
      }
      if (page < 0 || (numPages >= 0 && page >= numPages) || empty)
        return false;
      pages.push_back(page);
    }
    std::sort(pages.begin(), pages.end());
    if (std::adjacent_find(pages.begin(), pages.end()) != pages.end())
      return false;
    std::optional<int64_t> len = table.kvLen ? table.kvLen(b) : std::nullopt;
    if (len &&
        (*len < 0 || *len > static_cast<int64_t>(pages.size()) * pageSize))
      return false;
  }
  return true;
}

Status checkBlockTable(const BlockTableView &table, int64_t numPages,
                       int64_t pageSize) {
  if (pageSize <= 0)
    return Status::error("page_size must be positive, got " + str(pageSize));
  if (blockTableIsValid(table, numPages, pageSize))
    return Status::ok();
  // Something is wrong: find the first violation in slot order and name it.
  const std::string range = numPages < 0 ? std::string("[0, num_pages)")
                                         : "[0, " + str(numPages) + ")";
  const std::string name = table.name;
  // Sequence b's table, entry `slot` of it, and the batch suffix.
  auto row = [&](int64_t b) {
    return table.flat ? name : name + "[" + str(b) + "]";
  };
  auto batchOf = [&](int64_t b) {
    return table.flat ? std::string() : " (batch " + str(b) + ")";
  };
  for (int64_t b = 0; b < table.batch; ++b) {
    std::unordered_map<int64_t, int64_t> slotOfPage; // this sequence's pages
    int64_t active = 0, firstEmpty = -1;
    for (int64_t slot = 0; slot < table.maxPages; ++slot) {
      const int64_t page = table.page(b, slot);
      const std::string at = row(b) + "[" + str(slot) + "] = " + str(page);
      if (page == -1) {
        if (firstEmpty < 0)
          firstEmpty = slot;
        continue;
      }
      if (page < 0 || (numPages >= 0 && page >= numPages))
        return Status::error(at + ": page id out of range " + range +
                             batchOf(b));
      if (firstEmpty >= 0)
        return Status::error(at + " follows the -1 at slot " + str(firstEmpty) +
                             ": the -1 tail must be canonical" + batchOf(b));
      auto [it, fresh] = slotOfPage.try_emplace(page, slot);
      if (!fresh)
        return Status::error(at + ": page " + str(page) +
                             " is already used at slot " + str(it->second) +
                             " of the same sequence" + batchOf(b));
      ++active;
    }
    std::optional<int64_t> len = table.kvLen ? table.kvLen(b) : std::nullopt;
    if (len && (*len < 0 || *len > active * pageSize))
      return Status::error(std::string(table.lengthName) + "[" + str(b) +
                           "] = " + str(*len) + " does not fit the " +
                           str(active) + " page(s) of " + row(b) +
                           " (page_size " + str(pageSize) + ", at most " +
                           str(active * pageSize) + " tokens)" + batchOf(b));
  }
  return Status::ok();
}

Status
checkPagedWrite(const BlockTableView &table,
                const std::function<std::optional<int64_t>(int64_t b)> &pos,
                int64_t length, int64_t pageSize, bool skipPadding) {
  if (pageSize <= 0)
    return Status::error("page_size must be positive, got " + str(pageSize));
  // (page, row) -> the batch that writes it, to reject two sequences writing
  // one row of a shared page (the result would depend on the write order).
  std::map<std::pair<int64_t, int64_t>, int64_t> writer;
  for (int64_t b = 0; b < table.batch; ++b) {
    std::optional<int64_t> p = pos(b);
    if (!p)
      continue;
    if (*p < 0)
      return Status::error("pos[" + str(b) + "] = " + str(*p) +
                           " is negative (batch " + str(b) + ")");
    // The pages the tokens may fall in: the sequence's (the entries before
    // its -1 tail), or with skipPadding every slot of the table (a token in
    // a -1 slot is skipped).
    int64_t active = 0;
    while (active < table.maxPages &&
           (skipPadding || table.page(b, active) != -1))
      ++active;
    const int64_t end = *p + length;
    if (end > active * pageSize)
      return Status::error(
          "pos[" + str(b) + "] = " + str(*p) + " with L = " + str(length) +
          " does not fit the " + str(active) + " page(s) of block_table[" +
          str(b) + "] (page_size " + str(pageSize) + ", at most " +
          str(active * pageSize) + " tokens): token " +
          str(std::max(*p, active * pageSize)) + " falls in slot " +
          str(std::max(*p, active * pageSize) / pageSize) + " (batch " +
          str(b) + ")");
    for (int64_t t = *p; t < end; ++t) {
      const int64_t slot = t / pageSize, page = table.page(b, slot);
      if (skipPadding && page == -1)
        continue; // a padding token: it writes nothing
      auto [it, fresh] = writer.try_emplace({page, t % pageSize}, b);
      if (!fresh)
        return Status::error("block_table[" + str(b) + "][" + str(slot) +
                             "] = " + str(page) + ": token " + str(t) +
                             " writes row " + str(t % pageSize) + " of page " +
                             str(page) + ", which batch " + str(it->second) +
                             " also writes (batch " + str(b) + ")");
    }
  }
  return Status::ok();
}

} // namespace kvattn
} // namespace mlir
