//===- Scheduler.cpp - CTAs of fibers, collectives, barriers --------------===//
//
// One launch at a time. CTAs run one after another; each thread of a CTA is
// a fiber (Boost.Context's fcontext: a stack switch, no system call) that
// runs until it reaches a warp collective, a barrier or its end. The
// scheduler completes a collective once every lane it needs has arrived,
// and a barrier once every thread of the CTA has; if neither can happen and
// not every thread has ended, the launch fails with a description of where
// each warp waits (never a hang). The checks and counters it drives are in
// Memcheck.cpp, Racecheck.cpp, AsyncCopies.cpp and Counters.cpp (Launch.h).
//
//===----------------------------------------------------------------------===//

#include "Launch.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <sys/mman.h>

namespace mlir {
namespace kvattn {
namespace emu {
namespace detail {

std::vector<Site> &sites() {
  static std::vector<Site> all;
  return all;
}

uint8_t *Arena::base() {
  // Aligned to its size (256 KiB): a shared address's low 18 bits are its
  // offset in the arena, as on the GPU, where kernels form wgmma matrix
  // descriptors from the shared address (14 bits of address >> 4) and
  // align the dynamic shared memory to 1024 bytes for the 128-byte
  // swizzle.
  static uint8_t *arena = [] {
    void *p = mmap(nullptr, 2 * kBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return static_cast<uint8_t *>(nullptr);
    uintptr_t at =
        (reinterpret_cast<uintptr_t>(p) + kBytes - 1) / kBytes * kBytes;
    return reinterpret_cast<uint8_t *>(at);
  }();
  return arena;
}

namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096;

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
} // namespace

Launch *current = nullptr;

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
  // Only this thread runs until it yields: the latches counted meanwhile
  // are its own.
  const uint64_t latches = kvemu_counters[2];
  fctx::transfer_t back = fctx::jump_fcontext(t.fiber, &t);
  t.fiber = back.fctx;
  t.kvLatches += kvemu_counters[2] - latches;
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
  counters_.warpgroups.assign((threadsPerCta_ + 127) / 128, {});
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
  if (!kernel_.hasKvLoop)
    counters_.kvBlocks = counters_.kvBlocksMaxCta = counters_.kvWarpsPerCta = 0;
  if (hazardsNotShown_)
    reports_.push_back("racecheck: " + kernelName() + ": " +
                       std::to_string(hazardsNotShown_) +
                       " more hazards not shown");
  if (status.isError()) {
    if (!hazards_)
      return status;
    // The hazards found before the failure are part of its story.
    std::string all;
    for (const std::string &r : reports_)
      all += "\n  " + r;
    return Status::error(status.message() + "\n(after " +
                         std::to_string(hazards_) + " shared-memory hazard" +
                         (hazards_ == 1 ? "" : "s") + ":" + all + ")");
  }
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

void Launch::countKvBlocks() {
  // The KV loop's trips in this CTA: its latch executions over the threads
  // that ran it (the consumers; a producer warpgroup runs its own copy of
  // the block loop, which is not the KV loop), and the warps they are in.
  uint64_t latches = 0, threads = 0, warps = 0;
  for (size_t w = 0; w * 32 < threads_.size(); ++w) {
    bool ran = false;
    for (size_t i = 32 * w; i < std::min(threads_.size(), 32 * w + 32); ++i)
      if (threads_[i].kvLatches) {
        latches += threads_[i].kvLatches;
        ++threads;
        ran = true;
      }
    warps += ran;
  }
  if (threads) {
    counters_.kvBlocks += latches / threads;
    counters_.kvBlocksMaxCta =
        std::max(counters_.kvBlocksMaxCta, latches / threads);
  }
  counters_.kvWarpsPerCta = std::max(counters_.kvWarpsPerCta, warps);
}

Status Launch::runCta() {
  ++generation_;
  epoch_ = 1;
  warpSyncs_.assign((threads_.size() + 31) / 32, 0);
  std::memset(Arena::base(), 0xFF, sharedBytes_);
  const size_t groups = (threads_.size() + 127) / 128;
  warpgroups_.assign(groups, WarpgroupState());
  // Registers per thread at launch: the CTA's share of the 65,536 (what
  // ptxas gives a kernel of .maxntid threads and .minnctapersm 1).
  for (WarpgroupState &wg : warpgroups_)
    wg.registers = std::min<unsigned>(
        256, 65536 / (128 * static_cast<unsigned>(groups)) / 8 * 8);
  mbarriers_.clear();
  tmaLoads_.clear();
  namedBarriers_.clear();
  fences_.assign(threads_.size(), 0);
  clocks_.clear();
  if (kernel_.hopperSync) {
    clocks_.assign(threads_.size(), std::vector<uint32_t>(threads_.size(), 0));
    for (size_t i = 0; i < threads_.size(); ++i)
      clocks_[i][i] = 1;
  }
  for (Thread &t : threads_) {
    t.state = State::Runnable;
    t.copies.clear();
    t.group = 0;
    t.bulkGroup = 0;
    t.bulkStores.clear();
    t.wgmmaLatest.clear();
    t.kvLatches = 0;
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
    // TMA loads land at the latest point: when nothing else can progress.
    if (!progress && landAllTma())
      progress = true;
    if (!progress)
      return Status::error(
          kernelName() + ": deadlock: no thread of block (" +
          std::to_string(cta_.x) + "," + std::to_string(cta_.y) + "," +
          std::to_string(cta_.z) + ") can continue:" + whereThreadsWait());
  }
  flushAll();
  countKvBlocks();
  return endOfCta();
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
      case State::AtMbarrier:
        at = describeWait(t);
        break;
      case State::AtNamedBarrier: {
        auto it = namedBarriers_.find(t.namedBarrier);
        at = "waits at named barrier " + std::to_string(t.namedBarrier) +
             (it == namedBarriers_.end()
                  ? std::string()
                  : " (" + std::to_string(it->second.arrived) + " of " +
                        std::to_string(it->second.expected) +
                        " threads arrived)") +
             ", at " + sites()[t.site].describe();
        break;
      }
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
  // barrier.cta.red: every waiting thread's predicate (operand 1, an i1
  // stored in its slot's low byte) reduced into each one's result.
  if (const Site::BarrierReduction red = sites()[site].barrierReduction;
      red != Site::NoReduction) {
    uint64_t count = 0, waiting = 0;
    for (const Thread &t : threads_)
      if (t.state == State::AtBarrier) {
        ++waiting;
        count += t.args[1] & 1u;
      }
    const uint64_t value = red == Site::Popc  ? count
                           : red == Site::And ? count == waiting
                                              : count != 0;
    for (Thread &t : threads_)
      if (t.state == State::AtBarrier)
        t.results[0] = value;
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
  if (isWarpgroupCollective(site.op))
    return completeWarpgroup(warp, site, first->site, progress);
  // Lanes still waiting on an mbarrier or a named barrier may get there.
  for (unsigned l = 0; l < lanes; ++l) {
    State s = threads_[32 * warp + l].state;
    if (s == State::AtMbarrier || s == State::AtNamedBarrier)
      return Status::ok();
  }
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
    if (!clocks_.empty()) { // its lanes' accesses before it, for everyone
      std::vector<uint32_t> joined;
      for (unsigned l = 0; l < 32; ++l)
        if (needed >> l & 1u)
          release(32 * warp + l, joined);
      for (unsigned l = 0; l < 32; ++l)
        if (needed >> l & 1u)
          acquire(32 * warp + l, joined);
    }
    break;
  case Op::ElectSync: {
    unsigned elected = 0;
    while (!(needed >> elected & 1u))
      ++elected;
    for (unsigned l = 0; l < 32; ++l)
      if (results[l]) {
        results[l][0] = elected;
        results[l][1] = l == elected;
      }
    break;
  }
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
void Launch::op(uint32_t siteId, uint64_t *args, uint64_t *results) {
  Thread &t = thread();
  const Site &site = sites()[siteId];
  switch (site.op) {
  case Op::Barrier:
    t.state = State::AtBarrier;
    t.site = siteId;
    t.args = args;
    t.results = results;
    wait(t);
    return;
  case Op::Shfl:
  case Op::Vote:
  case Op::WarpSync:
  case Op::Ldmatrix:
  case Op::Mma:
  case Op::ElectSync:
  case Op::WgmmaFence:
  case Op::WgmmaMma:
  case Op::WgmmaCommit:
  case Op::WgmmaWait:
  case Op::SetMaxNReg:
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
  default:
    hopperOp(t, site, siteId, args, results);
    return;
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
