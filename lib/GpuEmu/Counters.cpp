//===- Counters.cpp - per-warp request counters ---------------------------===//
//
// Each warp's global and shared accesses between two collectives form its
// requests: sectors and bank-conflict replays are counted per request, as
// the hardware serves them (docs/gpu-emulator.md, "Counters").
//
//===----------------------------------------------------------------------===//

#include "Launch.h"

extern "C" {
uint64_t kvemu_counters[3] = {0, 0, 0};
}

namespace mlir {
namespace kvattn {
namespace emu {
namespace detail {

/// Bank-conflict replays of one shared-memory warp request: a request of
/// 8-byte (16-byte) accesses is served in 2 (4) phases of 16 (8) lanes; a
/// phase takes as many wavefronts as the most distinct 4-byte words any of
/// the 32 banks holds.
uint64_t bankReplays(const AccessEvent *const *request, unsigned n) {
  uint32_t widest = 0;
  for (unsigned i = 0; i < n; ++i)
    widest = std::max(widest, request[i]->size);
  if (widest > 16)
    widest = 16; // block copies: counted like 16-byte accesses
  unsigned phases = widest <= 4 ? 1 : (widest <= 8 ? 2 : 4);
  unsigned lanesPerPhase = 32 / phases;
  uint64_t wavefronts = 0, ideal = 0;
  uint64_t words[32 * 5];
  for (unsigned p = 0; p < phases; ++p) {
    unsigned count = 0;
    for (unsigned i = 0; i < n; ++i) {
      const AccessEvent *e = request[i];
      if (e->lane / lanesPerPhase != p || !e->size)
        continue;
      uint64_t last = (e->address + std::min<uint32_t>(e->size, 16) - 1) / 4;
      for (uint64_t w = e->address / 4; w <= last && count < 32 * 5; ++w)
        words[count++] = w;
    }
    if (!count)
      continue;
    std::sort(words, words + count);
    count = static_cast<unsigned>(std::unique(words, words + count) - words);
    unsigned perBank[32] = {};
    unsigned most = 0;
    for (unsigned i = 0; i < count; ++i)
      most = std::max(most, ++perBank[words[i] % 32]);
    wavefronts += most;
    ++ideal;
  }
  return wavefronts - ideal;
}

void Launch::countRequest(const AccessEvent *const *request, unsigned n) {
  bool kv = sites()[request[0]->site].inKvLoop;
  if (request[0]->shared) {
    uint64_t replays = bankReplays(request, n);
    ++counters_.sharedRequests;
    counters_.bankConflicts += replays;
    if (kv) {
      ++counters_.kvSharedRequests;
      counters_.kvBankConflicts += replays;
    }
    return;
  }
  ++counters_.globalRequests;
  uint64_t sectors[64];
  unsigned count = 0;
  std::pair<uint64_t, uint64_t> ranges[32];
  unsigned spans = 0;
  for (unsigned i = 0; i < n; ++i) {
    const AccessEvent *e = request[i];
    if (!e->size)
      continue;
    for (uint64_t s = e->address / 32; s <= (e->address + e->size - 1) / 32;
         ++s) {
      if (count == 64) { // wider than a warp's worth: count it now
        std::sort(sectors, sectors + count);
        counters_.globalSectors +=
            std::unique(sectors, sectors + count) - sectors;
        count = 0;
      }
      sectors[count++] = s;
    }
    if (spans < 32)
      ranges[spans++] = {e->address, e->address + e->size};
  }
  std::sort(sectors, sectors + count);
  counters_.globalSectors += std::unique(sectors, sectors + count) - sectors;
  std::sort(ranges, ranges + spans);
  uint64_t end = 0;
  for (unsigned i = 0; i < spans; ++i) {
    uint64_t lo = std::max(ranges[i].first, end), hi = ranges[i].second;
    if (hi > lo)
      counters_.globalBytes += hi - lo;
    end = std::max(end, hi);
  }
}

void Launch::flushWarp(unsigned warp) {
  std::vector<AccessEvent> &events = warpEvents_[warp];
  if (events.empty())
    return;
  // Between two rendezvous of its warp each lane runs once, so its events
  // are contiguous. The k-th access of each lane belongs to the k-th warp
  // request when the lanes agree on the sites (converged code: the common
  // case, counted without a map).
  unsigned begin[33] = {}, lanes = 0;
  bool converged = true;
  for (size_t i = 0; i < events.size() && converged; ++i)
    if (i == 0 || events[i].lane != events[i - 1].lane) {
      if (lanes == 32 || (lanes && events[i].lane < events[i - 1].lane))
        converged = false;
      else
        begin[lanes++] = static_cast<unsigned>(i);
    }
  begin[lanes] = static_cast<unsigned>(events.size());
  size_t length = begin[1] - begin[0];
  for (unsigned l = 1; l < lanes && converged; ++l)
    converged = begin[l + 1] - begin[l] == length;
  for (size_t k = 0; k < length && converged; ++k)
    for (unsigned l = 1; l < lanes && converged; ++l)
      converged = events[begin[l] + k].site == events[begin[0] + k].site;
  if (converged) {
    const AccessEvent *request[32];
    for (size_t k = 0; k < length; ++k) {
      for (unsigned l = 0; l < lanes; ++l)
        request[l] = &events[begin[l] + k];
      countRequest(request, lanes);
    }
    events.clear();
    return;
  }
  // Divergent lanes: the k-th execution of a site by each lane belongs to
  // the site's k-th warp request. Each access is numbered per (site, lane)
  // and chained to its request through an open-addressing table keyed by
  // (site, k).
  const size_t n = events.size();
  size_t capacity = 64;
  while (capacity < 2 * n)
    capacity *= 2;
  constexpr uint64_t kEmpty = ~uint64_t(0);
  table_.assign(capacity, {kEmpty, 0});
  next_.assign(n, ~uint32_t(0));
  if (laneCounts_.size() < 32 * sites().size())
    laneCounts_.assign(32 * sites().size(), 0);
  touched_.clear();
  for (size_t i = 0; i < n; ++i) {
    const AccessEvent &e = events[i];
    uint32_t &count = laneCounts_[32 * size_t(e.site) + e.lane];
    if (!count)
      touched_.push_back(32 * e.site + e.lane);
    uint64_t key = (uint64_t(e.site) << 32) | count++;
    size_t slot = (key * 0x9E3779B97F4A7C15ull >> 20) & (capacity - 1);
    while (table_[slot].first != kEmpty && table_[slot].first != key)
      slot = (slot + 1) & (capacity - 1);
    if (table_[slot].first == kEmpty)
      table_[slot] = {key, static_cast<uint32_t>(i)};
    else {
      next_[i] = table_[slot].second;
      table_[slot].second = static_cast<uint32_t>(i);
    }
  }
  for (uint32_t t : touched_)
    laneCounts_[t] = 0;
  const AccessEvent *request[32];
  for (const auto &[key, head] : table_) {
    if (key == kEmpty)
      continue;
    unsigned m = 0;
    for (uint32_t i = head; i != ~uint32_t(0); i = next_[i]) {
      if (m == 32) {
        countRequest(request, m);
        m = 0;
      }
      request[m++] = &events[i];
    }
    countRequest(request, m);
  }
  events.clear();
}

} // namespace detail
} // namespace emu
} // namespace kvattn
} // namespace mlir
