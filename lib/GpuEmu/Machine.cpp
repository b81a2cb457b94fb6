//===- Machine.cpp - CTAs of fibers, warps, barriers, checks, counters ----===//
//
// One launch at a time. CTAs run one after another; each thread of a CTA is
// a fiber (Boost.Context's fcontext: a stack switch, no system call) that
// runs until it reaches a warp collective, a barrier or its end. The
// scheduler completes a collective once every lane it needs has arrived,
// and a barrier once every thread of the CTA has; if neither can happen and
// not every thread has ended, the launch fails with a description of where
// each warp waits (never a hang).
//
// Shared memory is the arena (Internal.h), filled with 0xFF (NaN in f32,
// f16 and bf16) when a CTA starts. Each byte has a shadow entry: the last
// writer and reader with their barrier interval ("epoch") and site, and the
// thread whose cp.async to it is still in flight. Two accesses by different
// threads in the same epoch, at least one a write, are a hazard; so is any
// access to a cp.async destination before its wait_group. A cp.async lands
// at the latest point allowed, the wait_group that must complete it.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <boost/context/detail/fcontext.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

namespace fctx = boost::context::detail;

extern "C" {
uint64_t kvemu_counters[3] = {0, 0, 0};
}

namespace mlir {
namespace kvattn {
namespace emu {
namespace detail {

std::vector<Site> &sites() {
  static std::vector<Site> all;
  return all;
}

uint8_t *Arena::base() {
  static uint8_t *arena = [] {
    void *p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
  }();
  return arena;
}

namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096;
constexpr size_t kMaxReports = 20;

/// Fiber stacks with a guard page below each, kept for the process.
std::vector<uint8_t *> &stacks() {
  static std::vector<uint8_t *> pool;
  return pool;
}

Status ensureStacks(size_t count) {
  while (stacks().size() < count) {
    void *p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return Status::error("cannot map a fiber stack");
    mprotect(p, kGuardBytes, PROT_NONE);
    stacks().push_back(static_cast<uint8_t *>(p) + kGuardBytes);
  }
  return Status::ok();
}

enum class State : uint8_t {
  Runnable,
  AtCollective,
  AtBarrier,
  Exited,
  Faulted
};

struct AsyncCopy {
  uint8_t *dst;
  const uint8_t *src;
  uint32_t bytes, srcBytes, group, site;
};

struct Thread {
  uint32_t index = 0, warp = 0, lane = 0;
  fctx::fcontext_t fiber = nullptr, scheduler = nullptr;
  State state = State::Runnable;
  uint32_t site = 0;
  uint64_t *args = nullptr, *results = nullptr;
  std::vector<AsyncCopy> copies;
  uint32_t group = 0; ///< the cp.async group being formed
  uintptr_t stackLo = 0, stackHi = 0;
};

struct AccessEvent {
  uint64_t address;
  uint32_t site;
  uint32_t size;
  uint8_t lane;
  bool shared;
};

struct ShadowByte {
  uint32_t generation = 0;
  uint32_t writeEpoch = 0, readEpoch = 0;
  uint32_t writeSite = 0, readSite = 0;
  /// The accessing warp's count of completed bar.warp.sync at the write /
  /// at the latest read of the epoch: accesses of one warp on either side
  /// of a warp barrier are ordered.
  uint32_t writeSync = 0, readSync = 0;
  uint16_t writer = 0, reader = 0;
  uint16_t pending = 0; ///< 1 + the thread with a cp.async in flight here
  bool multipleReaders = false;
  /// Every reader of the epoch is in the reader's warp.
  bool readersInOneWarp = true;
};

std::vector<ShadowByte> &shadow() {
  static std::vector<ShadowByte> bytes(Arena::kBytes);
  return bytes;
}

/// A buffer of the launch: an allocation a pointer parameter points into.
struct Buffer {
  uint64_t base, bytes;
  unsigned param;
};

class Launch;
Launch *current = nullptr;

void fiberMain(fctx::transfer_t from);

class Launch {
public:
  Launch(const Module &module, const Kernel &kernel, Dim3 grid, Dim3 block,
         unsigned dynamicBytes, void **params,
         const std::map<uint64_t, Allocation> &allocations,
         const EmulatorOptions &options, LaunchCounters &counters,
         std::vector<std::string> &reports)
      : module_(module), kernel_(kernel), grid_(grid), block_(block),
        params_(params), options_(options), counters_(counters),
        reports_(reports) {
    sharedBytes_ = dynamicBytes ? module.dynamicSharedOffset + dynamicBytes
                                : module.staticSharedBytes;
    for (size_t i = 0; i < kernel.pointerParams.size(); ++i) {
      if (!kernel.pointerParams[i])
        continue;
      uint64_t p;
      std::memcpy(&p, params[i], 8);
      auto it = allocations.upper_bound(p);
      if (it == allocations.begin())
        continue;
      --it;
      if (p < it->second.base + std::max<uint64_t>(it->second.bytes, 1))
        buffers_.push_back(
            {it->second.base, it->second.bytes, static_cast<unsigned>(i)});
    }
  }

  Status run();

  // Called from JIT code (on a fiber).
  void access(uint64_t address, uint64_t size, uint32_t site);
  void op(uint32_t site, uint64_t *args, uint64_t *results);
  uint32_t sreg(uint32_t which) const;
  void start() { kernel_.entry(params_); }
  Thread &thread() { return *running_; }

private:
  friend void fiberMain(fctx::transfer_t from);

  Status runCta();
  void resume(Thread &t);
  /// Leaves the fiber until the scheduler resumes it.
  void wait(Thread &t) {
    fctx::transfer_t back = fctx::jump_fcontext(t.scheduler, nullptr);
    t.scheduler = back.fctx;
  }
  /// Ends the launch from a fiber: the message is its failure.
  [[noreturn]] void fault(Thread &t, std::string message);
  Status completeWarp(unsigned warp, bool &progress);
  Status completeBarrier();
  std::string whereThreadsWait() const;

  void checkShared(Thread &t, uint64_t offset, uint64_t size, bool write,
                   uint32_t site);
  void hazard(const char *kind, uint64_t offset, const Thread &t, uint32_t site,
              int other, uint32_t otherSite, bool write);
  const Buffer *findBuffer(uint64_t address, uint64_t size) const;
  std::string describeMiss(uint64_t address, uint64_t size) const;
  void landCopies(Thread &t, uint32_t keepGroups);
  void cpAsync(Thread &t, const Site &site, uint32_t siteId,
               const uint64_t *args);
  void record(const Thread &t, uint64_t address, uint64_t size, uint32_t site,
              bool shared) {
    if (!options_.countRequests)
      return;
    warpEvents_[t.warp].push_back(
        {address, site,
         static_cast<uint32_t>(std::min<uint64_t>(size, 1u << 20)),
         static_cast<uint8_t>(t.lane), shared});
  }
  void flushWarp(unsigned warp);
  /// Whether an earlier access by thread `other` in barrier interval
  /// `accessEpoch` (its warp had completed `otherSyncs` warp barriers) is
  /// unordered with an access by `t` now: same CTA interval, another thread,
  /// and not separated by a barrier of their common warp.
  bool unordered(const Thread &t, uint32_t accessEpoch, uint32_t other,
                 uint32_t otherSyncs) const;
  /// Reports a write (or a cp.async issue) by `t` to a byte with shadow `s`
  /// that is unordered with its last write or reads.
  void checkWriteOrder(const ShadowByte &s, const Thread &t, uint64_t offset,
                       uint32_t site);
  void countRequest(const AccessEvent *const *request, unsigned n);
  void flushAll() {
    for (unsigned w = 0; w < warpEvents_.size(); ++w)
      flushWarp(w);
  }

  std::string threadName(uint32_t index) const {
    unsigned x = index % block_.x, y = index / block_.x % block_.y,
             z = index / (block_.x * block_.y);
    return "thread (" + std::to_string(x) + "," + std::to_string(y) + "," +
           std::to_string(z) + ")";
  }
  std::string where(const Thread &t) const {
    return threadName(t.index) + " of block (" + std::to_string(cta_.x) + "," +
           std::to_string(cta_.y) + "," + std::to_string(cta_.z) + ")";
  }
  std::string kernelName() const { return "kernel '" + kernel_.name + "'"; }
  unsigned lanesOf(unsigned warp) const {
    return std::min<unsigned>(32, threadsPerCta_ - 32 * warp);
  }

  const Module &module_;
  const Kernel &kernel_;
  Dim3 grid_, block_, cta_;
  void **params_;
  const EmulatorOptions &options_;
  LaunchCounters &counters_;
  std::vector<std::string> &reports_;
  uint64_t sharedBytes_ = 0;
  std::vector<Buffer> buffers_;
  unsigned threadsPerCta_ = 0;
  std::vector<Thread> threads_;
  std::vector<std::vector<AccessEvent>> warpEvents_;
  // Scratch of flushWarp's divergent path.
  std::vector<std::pair<uint64_t, uint32_t>> table_;
  std::vector<uint32_t> next_, laneCounts_, touched_;
  Thread *running_ = nullptr;
  uint32_t epoch_ = 1;
  /// Per warp of the CTA: completed bar.warp.sync (racecheck).
  std::vector<uint32_t> warpSyncs_;
  std::string fault_;
  std::set<std::tuple<std::string, uint32_t, uint32_t>> hazardsSeen_;
  uint64_t hazards_ = 0, hazardsNotShown_ = 0;
  static uint32_t generation_;
};

uint32_t Launch::generation_ = 0;

void fiberMain(fctx::transfer_t from) {
  Thread &t = *static_cast<Thread *>(from.data);
  t.scheduler = from.fctx;
  current->start();
  t.state = State::Exited;
  fctx::jump_fcontext(t.scheduler, nullptr);
  __builtin_unreachable();
}

void Launch::resume(Thread &t) {
  running_ = &t;
  fctx::transfer_t back = fctx::jump_fcontext(t.fiber, &t);
  t.fiber = back.fctx;
  running_ = nullptr;
}

void Launch::fault(Thread &t, std::string message) {
  fault_ = std::move(message);
  t.state = State::Faulted;
  fctx::jump_fcontext(t.scheduler, nullptr);
  __builtin_unreachable();
}

Status Launch::run() {
  threadsPerCta_ = block_.x * block_.y * block_.z;
  unsigned warps = (threadsPerCta_ + 31) / 32;
  KVATTN_RETURN_IF_ERROR(ensureStacks(threadsPerCta_));
  if (!Arena::base())
    return Status::error("the shared-memory arena could not be mapped");
  threads_.assign(threadsPerCta_, Thread());
  for (unsigned i = 0; i < threadsPerCta_; ++i) {
    Thread &t = threads_[i];
    t.index = i;
    t.warp = i / 32;
    t.lane = i % 32;
    t.stackLo = reinterpret_cast<uintptr_t>(stacks()[i]);
    t.stackHi = t.stackLo + kStackBytes;
  }
  warpEvents_.assign(warps, {});

  counters_ = LaunchCounters();
  counters_.kernel = kernel_.name;
  counters_.grid = grid_;
  counters_.block = block_;
  counters_.sharedBytes = sharedBytes_;
  counters_.warpsPerCta = warps;
  std::fill(std::begin(kvemu_counters), std::end(kvemu_counters), 0);

  Status status = Status::ok();
  current = this;
  for (unsigned z = 0; z < grid_.z && status.isOk(); ++z)
    for (unsigned y = 0; y < grid_.y && status.isOk(); ++y)
      for (unsigned x = 0; x < grid_.x && status.isOk(); ++x) {
        cta_ = {x, y, z};
        status = runCta();
        ++counters_.ctas;
      }
  current = nullptr;
  counters_.threadInsts = kvemu_counters[0];
  counters_.kvThreadInsts = kvemu_counters[1];
  counters_.kvBlocks =
      kernel_.hasKvLoop ? kvemu_counters[2] / threadsPerCta_ : 0;
  if (hazardsNotShown_)
    reports_.push_back("racecheck: " + kernelName() + ": " +
                       std::to_string(hazardsNotShown_) +
                       " more hazards not shown");
  if (status.isError())
    return status;
  if (hazards_ && options_.failOnReport) {
    std::string all;
    for (const std::string &r : reports_)
      all += "\n  " + r;
    return Status::error(kernelName() + ": " + std::to_string(hazards_) +
                         " shared-memory hazard" + (hazards_ == 1 ? "" : "s") +
                         ":" + all);
  }
  return Status::ok();
}

Status Launch::runCta() {
  ++generation_;
  epoch_ = 1;
  warpSyncs_.assign((threads_.size() + 31) / 32, 0);
  std::memset(Arena::base(), 0xFF, sharedBytes_);
  for (Thread &t : threads_) {
    t.state = State::Runnable;
    t.copies.clear();
    t.group = 0;
    t.fiber = fctx::make_fcontext(reinterpret_cast<void *>(t.stackHi),
                                  kStackBytes, fiberMain);
  }
  const unsigned warps = static_cast<unsigned>(warpEvents_.size());
  for (;;) {
    bool progress = false;
    for (unsigned w = 0; w < warps; ++w) {
      for (unsigned l = 0; l < lanesOf(w); ++l) {
        Thread &t = threads_[32 * w + l];
        if (t.state != State::Runnable)
          continue;
        resume(t);
        progress = true;
        if (t.state == State::Faulted)
          return Status::error(fault_);
      }
      KVATTN_RETURN_IF_ERROR(completeWarp(w, progress));
    }
    unsigned atBarrier = 0, exited = 0;
    for (const Thread &t : threads_) {
      atBarrier += t.state == State::AtBarrier;
      exited += t.state == State::Exited;
    }
    if (exited == threadsPerCta_)
      break;
    if (atBarrier && atBarrier + exited == threadsPerCta_) {
      if (exited)
        return Status::error(
            kernelName() + ": a barrier that " + std::to_string(exited) +
            " thread(s) never reach (they ended) in block (" +
            std::to_string(cta_.x) + "," + std::to_string(cta_.y) + "," +
            std::to_string(cta_.z) + "):" + whereThreadsWait());
      KVATTN_RETURN_IF_ERROR(completeBarrier());
      progress = true;
    }
    if (!progress)
      return Status::error(
          kernelName() + ": deadlock: no thread of block (" +
          std::to_string(cta_.x) + "," + std::to_string(cta_.y) + "," +
          std::to_string(cta_.z) + ") can continue:" + whereThreadsWait());
  }
  flushAll();
  return Status::ok();
}

std::string Launch::whereThreadsWait() const {
  std::string s;
  for (unsigned w = 0; w < warpEvents_.size(); ++w) {
    std::map<std::string, std::vector<unsigned>> by;
    for (unsigned l = 0; l < lanesOf(w); ++l) {
      const Thread &t = threads_[32 * w + l];
      std::string at;
      switch (t.state) {
      case State::Exited:
        at = "ended";
        break;
      case State::AtBarrier:
      case State::AtCollective:
        at = "at " + sites()[t.site].describe();
        break;
      default:
        at = "running";
      }
      by[at].push_back(l);
    }
    for (auto &[at, lanes] : by)
      s += "\n  warp " + std::to_string(w) + " lanes " +
           (lanes.size() == 32 ? std::string("0-31")
                               : std::to_string(lanes.front()) + ".." +
                                     std::to_string(lanes.back()) + " (" +
                                     std::to_string(lanes.size()) + ")") +
           ": " + at;
  }
  return s;
}

Status Launch::completeBarrier() {
  uint32_t site = 0;
  bool first = true;
  for (const Thread &t : threads_) {
    if (t.state != State::AtBarrier)
      continue;
    if (first) {
      site = t.site;
      first = false;
    } else if (t.site != site) {
      return Status::error(
          kernelName() + ": threads of block (" + std::to_string(cta_.x) + "," +
          std::to_string(cta_.y) + "," + std::to_string(cta_.z) +
          ") wait at different barriers (an aligned "
          "barrier needs every thread at the same one):" +
          whereThreadsWait());
    }
  }
  flushAll();
  ++counters_.barriers;
  if (sites()[site].inKvLoop)
    ++counters_.kvBarriers;
  ++epoch_;
  for (Thread &t : threads_)
    if (t.state == State::AtBarrier)
      t.state = State::Runnable;
  return Status::ok();
}

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

Status Launch::completeWarp(unsigned warp, bool &progress) {
  const unsigned lanes = lanesOf(warp);
  Thread *first = nullptr;
  for (unsigned l = 0; l < lanes; ++l) {
    Thread &t = threads_[32 * warp + l];
    if (t.state == State::Runnable)
      return Status::ok();
    if (t.state == State::AtCollective && !first)
      first = &t;
  }
  if (!first)
    return Status::ok();
  const Site &site = sites()[first->site];
  const std::string what = kernelName() + ", warp " + std::to_string(warp) +
                           " of block (" + std::to_string(cta_.x) + "," +
                           std::to_string(cta_.y) + "," +
                           std::to_string(cta_.z) + ")";

  // The lanes the collective needs: all 32 for the .aligned ones, the
  // member mask for the others.
  uint32_t needed = 0xffffffffu;
  bool aligned = site.op == Op::Ldmatrix || site.op == Op::Mma;
  if (!aligned) {
    needed = static_cast<uint32_t>(first->args[0]);
    if (!(needed >> first->lane & 1u))
      return Status::error(what + ": lane " + std::to_string(first->lane) +
                           " executes " + site.describe() +
                           " with a member mask (0x" + llvm::utohexstr(needed) +
                           ") that does not hold it");
  }
  uint64_t *args[32] = {}, *results[32] = {};
  for (unsigned l = 0; l < 32; ++l) {
    if (!(needed >> l & 1u))
      continue;
    if (l >= lanes)
      return Status::error(what + ": " + site.describe() + " needs lane " +
                           std::to_string(l) +
                           ", which the block does not "
                           "have");
    Thread &t = threads_[32 * warp + l];
    bool same = t.state == State::AtCollective &&
                (aligned ? t.site == first->site
                         : sites()[t.site].op == site.op &&
                               static_cast<uint32_t>(t.args[0]) == needed);
    if (!same) {
      std::string why = t.state == State::Exited
                            ? "it ended"
                            : "it waits at " + sites()[t.site].describe();
      return Status::error(what +
                           ": a collective reached by only part of the "
                           "warp: lane " +
                           std::to_string(first->lane) + " is at " +
                           site.describe() + " but lane " + std::to_string(l) +
                           " never gets there (" + why + ")");
    }
    args[l] = t.args;
    results[l] = t.results;
  }

  flushWarp(warp);
  bool kv = site.inKvLoop;
  switch (site.op) {
  case Op::Mma:
    mmaM16N8K16(site.bf16, args, results);
    ++counters_.mma;
    counters_.kvMma += kv;
    break;
  case Op::Ldmatrix: {
    const uint8_t *rows[4][8] = {};
    std::vector<AccessEvent> request;
    uint8_t *arena = Arena::base();
    for (int m = 0; m < site.matrices; ++m)
      for (int r = 0; r < 8; ++r) {
        Thread &t = threads_[32 * warp + 8 * m + r];
        uint64_t address = t.args[0];
        uint64_t offset = address - reinterpret_cast<uint64_t>(arena);
        if (address < reinterpret_cast<uint64_t>(arena) ||
            offset + 16 > sharedBytes_ || address % 16)
          return Status::error(
              "memcheck: " + kernelName() + ": " + where(t) +
              " gives ldmatrix row address 0x" + llvm::utohexstr(address) +
              (address % 16
                   ? " (not 16-byte aligned)"
                   : " outside the launch's " + std::to_string(sharedBytes_) +
                         " bytes of shared memory") +
              ", at " + site.describe());
        checkShared(t, offset, 16, false, t.site);
        rows[m][r] = reinterpret_cast<const uint8_t *>(address);
        // Each matrix (8 rows of 16 bytes) is served like a quarter-warp
        // phase of 16-byte accesses: its rows stand for lanes 0..7.
        request.push_back({address, t.site, 16, static_cast<uint8_t>(r), true});
      }
    uint64_t replays = 0;
    for (int m = 0; m < site.matrices; ++m) {
      const AccessEvent *phase[8];
      for (int r = 0; r < 8; ++r)
        phase[r] = &request[8 * m + r];
      replays += bankReplays(phase, 8);
    }
    ++counters_.ldmatrix;
    ++counters_.sharedRequests;
    counters_.bankConflicts += replays;
    if (kv) {
      ++counters_.kvLdmatrix;
      ++counters_.kvSharedRequests;
      counters_.kvBankConflicts += replays;
    }
    ldmatrix(site.matrices, site.trans, rows, results);
    break;
  }
  case Op::Shfl:
    shflSync(site.shflMode, site.shflPredicate, needed, args, results);
    ++counters_.shfl;
    counters_.kvShfl += kv;
    break;
  case Op::Vote: {
    uint32_t ballot = 0;
    for (unsigned l = 0; l < 32; ++l)
      if (args[l] && (args[l][1] & 1u))
        ballot |= 1u << l;
    for (unsigned l = 0; l < 32; ++l) {
      if (!results[l])
        continue;
      switch (site.voteMode) {
      case Site::Ballot:
        results[l][0] = ballot;
        break;
      case Site::All:
        results[l][0] = ballot == needed;
        break;
      case Site::Any:
        results[l][0] = ballot != 0;
        break;
      case Site::Uni:
        results[l][0] = ballot == 0 || ballot == needed;
        break;
      }
    }
    break;
  }
  case Op::WarpSync:
    ++warpSyncs_[warp];
    break;
  default:
    return Status::error(what + ": " + site.describe() +
                         " is not a warp collective (an emulator bug)");
  }
  for (unsigned l = 0; l < 32; ++l)
    if (needed >> l & 1u)
      threads_[32 * warp + l].state = State::Runnable;
  progress = true;
  return Status::ok();
}

void Launch::hazard(const char *kind, uint64_t offset, const Thread &t,
                    uint32_t site, int other, uint32_t otherSite, bool write) {
  ++hazards_;
  if (!hazardsSeen_.insert({kind, site, otherSite}).second)
    return;
  if (hazardsSeen_.size() > kMaxReports) {
    ++hazardsNotShown_;
    return;
  }
  std::string text =
      "racecheck: " + kernelName() + ": " + kind + " hazard at shared offset " +
      std::to_string(offset) + " (address 0x" +
      llvm::utohexstr(reinterpret_cast<uint64_t>(Arena::base()) + offset) +
      "): " + where(t) + (write ? " writes it" : " reads it") + " at " +
      sites()[site].describe() + "; " +
      (other >= 0 ? threadName(static_cast<uint32_t>(other))
                  : std::string("another thread")) +
      " " +
      (std::string(kind) == "read-after-write" ||
               std::string(kind) == "write-after-write"
           ? "wrote"
       : std::string(kind) == "write-after-read" ? "read"
                                                 : "copies to") +
      " it at " + sites()[otherSite].describe() +
      ", with no barrier in between";
  if (options_.printReports)
    llvm::errs() << text << "\n";
  reports_.push_back(std::move(text));
}

bool Launch::unordered(const Thread &t, uint32_t accessEpoch, uint32_t other,
                       uint32_t otherSyncs) const {
  const uint32_t warp = t.index / 32;
  return accessEpoch == epoch_ && other != t.index &&
         !(other / 32 == warp && otherSyncs != warpSyncs_[warp]);
}

void Launch::checkWriteOrder(const ShadowByte &s, const Thread &t,
                             uint64_t offset, uint32_t site) {
  const uint32_t warp = t.index / 32;
  if (unordered(t, s.writeEpoch, s.writer, s.writeSync))
    hazard("write-after-write", offset, t, site, s.writer, s.writeSite, true);
  else if (s.readEpoch == epoch_ &&
           (s.multipleReaders
                ? !(s.readersInOneWarp && s.reader / 32 == warp &&
                    s.readSync != warpSyncs_[warp])
                : unordered(t, s.readEpoch, s.reader, s.readSync)))
    hazard("write-after-read", offset, t, site,
           s.reader != t.index ? int(s.reader) : -1, s.readSite, true);
}

void Launch::checkShared(Thread &t, uint64_t offset, uint64_t size, bool write,
                         uint32_t site) {
  std::vector<ShadowByte> &bytes = shadow();
  for (uint64_t i = offset; i < offset + size; ++i) {
    ShadowByte &s = bytes[i];
    if (s.generation != generation_) {
      s = ShadowByte();
      s.generation = generation_;
    }
    if (s.pending) {
      hazard("cp.async-in-flight", i, t, site, s.pending - 1, s.writeSite,
             write);
      continue;
    }
    const uint32_t warp = t.index / 32, syncs = warpSyncs_[warp];
    if (write) {
      checkWriteOrder(s, t, i, site);
      s.writeEpoch = epoch_;
      s.writer = static_cast<uint16_t>(t.index);
      s.writeSite = site;
      s.writeSync = syncs;
    } else {
      if (unordered(t, s.writeEpoch, s.writer, s.writeSync))
        hazard("read-after-write", i, t, site, s.writer, s.writeSite, false);
      if (s.readEpoch != epoch_) {
        s.readEpoch = epoch_;
        s.reader = static_cast<uint16_t>(t.index);
        s.readSite = site;
        s.readSync = syncs;
        s.multipleReaders = false;
        s.readersInOneWarp = true;
      } else if (s.reader != t.index) {
        s.multipleReaders = true;
        s.readersInOneWarp = s.readersInOneWarp && s.reader / 32 == warp;
        s.readSync = std::max(s.readSync, syncs);
      }
    }
  }
}

const Buffer *Launch::findBuffer(uint64_t address, uint64_t size) const {
  for (const Buffer &b : buffers_)
    if (address >= b.base && address + size <= b.base + b.bytes &&
        address + size >= address)
      return &b;
  return nullptr;
}

std::string Launch::describeMiss(uint64_t address, uint64_t size) const {
  const Buffer *nearest = nullptr;
  uint64_t distance = ~uint64_t(0);
  for (const Buffer &b : buffers_) {
    uint64_t d = address < b.base ? b.base - address
                 : address + size > b.base + b.bytes
                     ? address + size - (b.base + b.bytes)
                     : 0;
    if (d < distance) {
      distance = d;
      nearest = &b;
    }
  }
  if (!nearest)
    return "the launch has no buffers";
  std::string s = "in no buffer of the launch; the nearest, parameter " +
                  std::to_string(nearest->param) + " [0x" +
                  llvm::utohexstr(nearest->base) + ", +" +
                  std::to_string(nearest->bytes) + " bytes), ";
  if (address < nearest->base)
    return s + "starts " + std::to_string(distance) + " bytes above it";
  if (address >= nearest->base + nearest->bytes)
    return s + "ends " +
           std::to_string(address - (nearest->base + nearest->bytes)) +
           " bytes below it";
  return s + "ends " + std::to_string(distance) +
         " bytes before the access does";
}

void Launch::access(uint64_t address, uint64_t size, uint32_t siteId) {
  Thread &t = thread();
  const Site &site = sites()[siteId];
  bool write = site.op == Op::Store;
  uint64_t arena = reinterpret_cast<uint64_t>(Arena::base());
  if (address >= arena && address < arena + Arena::kBytes) {
    uint64_t offset = address - arena;
    if (offset + size > sharedBytes_)
      fault(t, "memcheck: " + kernelName() + ": invalid shared " +
                   (write ? "write" : "read") + " of " + std::to_string(size) +
                   " bytes at shared offset " + std::to_string(offset) +
                   " by " + where(t) + ", at " + site.describe() +
                   ": the launch has " + std::to_string(sharedBytes_) +
                   " bytes of shared memory (" +
                   std::to_string(module_.staticSharedBytes) + " static)");
    checkShared(t, offset, size, write, siteId);
    record(t, address, size, siteId, true);
    return;
  }
  if (address >= t.stackLo && address < t.stackHi)
    return; // the thread's own stack: local memory
  if (!findBuffer(address, size))
    fault(t, "memcheck: " + kernelName() + ": invalid global " +
                 (write ? "write" : "read") + " of " + std::to_string(size) +
                 " bytes at 0x" + llvm::utohexstr(address) + " by " + where(t) +
                 ", at " + site.describe() + ": " +
                 describeMiss(address, size));
  record(t, address, size, siteId, false);
}

void Launch::cpAsync(Thread &t, const Site &site, uint32_t siteId,
                     const uint64_t *args) {
  uint64_t dst = args[0], src = args[1];
  uint32_t srcBytes =
      site.cpSrcSize ? static_cast<uint32_t>(args[2]) : site.cpBytes;
  uint64_t arena = reinterpret_cast<uint64_t>(Arena::base());
  uint64_t offset = dst - arena;
  if (dst < arena || offset + site.cpBytes > sharedBytes_ || dst % site.cpBytes)
    fault(t, "memcheck: " + kernelName() + ": cp.async destination 0x" +
                 llvm::utohexstr(dst) + " by " + where(t) +
                 (dst % site.cpBytes ? " is not aligned to its size"
                                     : " is outside the launch's " +
                                           std::to_string(sharedBytes_) +
                                           " bytes of shared memory") +
                 ", at " + site.describe());
  if (srcBytes > static_cast<uint32_t>(site.cpBytes))
    fault(t, "memcheck: " + kernelName() + ": cp.async src-size " +
                 std::to_string(srcBytes) + " exceeds its copy size " +
                 std::to_string(site.cpBytes) + " (" + where(t) + ", at " +
                 site.describe() + ")");
  if (srcBytes) {
    if (!findBuffer(src, srcBytes))
      fault(t, "memcheck: " + kernelName() + ": invalid global read of " +
                   std::to_string(srcBytes) + " bytes at 0x" +
                   llvm::utohexstr(src) + " by a cp.async of " + where(t) +
                   ", at " + site.describe() + ": " +
                   describeMiss(src, srcBytes));
    record(t, src, srcBytes, siteId, false);
  }
  counters_.cpAsyncBytes += site.cpBytes;
  // The destination is in flight until the wait_group that completes it.
  std::vector<ShadowByte> &bytes = shadow();
  for (uint64_t i = offset; i < offset + site.cpBytes; ++i) {
    ShadowByte &s = bytes[i];
    if (s.generation != generation_) {
      s = ShadowByte();
      s.generation = generation_;
    }
    if (s.pending && uint32_t(s.pending - 1) != t.index)
      hazard("write-after-write", i, t, siteId, s.pending - 1, s.writeSite,
             true);
    else // the copy may land at once: ordered like a write issued now
      checkWriteOrder(s, t, i, siteId);
    s.pending = static_cast<uint16_t>(t.index + 1);
    s.writeSite = siteId;
  }
  t.copies.push_back(
      {reinterpret_cast<uint8_t *>(dst), reinterpret_cast<const uint8_t *>(src),
       static_cast<uint32_t>(site.cpBytes), srcBytes, t.group, siteId});
}

void Launch::landCopies(Thread &t, uint32_t keepGroups) {
  uint32_t limit = t.group >= keepGroups ? t.group - keepGroups : 0;
  std::vector<ShadowByte> &bytes = shadow();
  uint64_t arena = reinterpret_cast<uint64_t>(Arena::base());
  auto end = std::stable_partition(
      t.copies.begin(), t.copies.end(),
      [&](const AsyncCopy &c) { return c.group >= limit; });
  for (auto it = end; it != t.copies.end(); ++it) {
    const AsyncCopy &c = *it;
    std::memcpy(c.dst, c.src, c.srcBytes);
    std::memset(c.dst + c.srcBytes, 0, c.bytes - c.srcBytes);
    uint64_t offset = reinterpret_cast<uint64_t>(c.dst) - arena;
    for (uint64_t i = offset; i < offset + c.bytes; ++i)
      if (bytes[i].pending == t.index + 1)
        bytes[i].pending = 0;
    // It lands now: a write by this thread in the current interval.
    checkShared(t, offset, c.bytes, true, c.site);
  }
  t.copies.erase(end, t.copies.end());
}

void Launch::op(uint32_t siteId, uint64_t *args, uint64_t *results) {
  Thread &t = thread();
  const Site &site = sites()[siteId];
  switch (site.op) {
  case Op::Barrier:
    t.state = State::AtBarrier;
    t.site = siteId;
    wait(t);
    return;
  case Op::Shfl:
  case Op::Vote:
  case Op::WarpSync:
  case Op::Ldmatrix:
  case Op::Mma:
    t.state = State::AtCollective;
    t.site = siteId;
    t.args = args;
    t.results = results;
    wait(t);
    return;
  case Op::CpAsync:
    cpAsync(t, site, siteId, args);
    return;
  case Op::CpAsyncCommit:
    ++t.group;
    return;
  case Op::CpAsyncWait:
    landCopies(t, static_cast<uint32_t>(site.waitGroups));
    return;
  case Op::CpAsyncWaitAll:
    ++t.group;
    landCopies(t, 0);
    return;
  case Op::Load:
  case Op::Store:
    break;
  }
  fault(t, kernelName() + ": " + site.describe() +
               " reached the emulator as an operation (an emulator bug)");
}

uint32_t Launch::sreg(uint32_t which) const {
  const Thread &t = *running_;
  unsigned x = t.index % block_.x, y = t.index / block_.x % block_.y,
           z = t.index / (block_.x * block_.y);
  switch (which) {
  case TidX:
    return x;
  case TidY:
    return y;
  case TidZ:
    return z;
  case NtidX:
    return block_.x;
  case NtidY:
    return block_.y;
  case NtidZ:
    return block_.z;
  case CtaidX:
    return cta_.x;
  case CtaidY:
    return cta_.y;
  case CtaidZ:
    return cta_.z;
  case NctaidX:
    return grid_.x;
  case NctaidY:
    return grid_.y;
  case NctaidZ:
    return grid_.z;
  case LaneId:
    return t.lane;
  case WarpSize:
    return 32;
  }
  return 0;
}

} // namespace

Status runLaunch(const Module &module, const Kernel &kernel, Dim3 grid,
                 Dim3 block, unsigned dynamicSharedBytes, void **params,
                 const std::map<uint64_t, Allocation> &allocations,
                 const EmulatorOptions &options, LaunchCounters &counters,
                 std::vector<std::string> &reports) {
  Launch launch(module, kernel, grid, block, dynamicSharedBytes, params,
                allocations, options, counters, reports);
  return launch.run();
}

} // namespace detail
} // namespace emu
} // namespace kvattn
} // namespace mlir

using mlir::kvattn::emu::detail::current;

extern "C" {

void kvemu_access(void *address, uint64_t size, uint32_t site) {
  current->access(reinterpret_cast<uint64_t>(address), size, site);
}

void kvemu_op(uint32_t site, uint64_t *args, uint64_t *results) {
  current->op(site, args, results);
}

uint32_t kvemu_sreg(uint32_t which) { return current->sreg(which); }
}
