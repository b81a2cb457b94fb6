//===- Launch.h - one emulated launch ---------------------------*- C++ -*-===//
//
// The state of one launch of the emulated GPU and the class that runs it,
// shared by the files that implement its concerns:
//   Scheduler.cpp    CTAs of fibers, warp collectives, barriers, the
//                    instructions the JIT code calls (op, sreg);
//   Memcheck.cpp     every global and shared access checked against the
//                    launch's buffers and the shared-memory size;
//   Racecheck.cpp    the per-byte shadow of shared memory and its hazards;
//   AsyncCopies.cpp  cp.async: copies in flight, landing at wait_group;
//   Counters.cpp     per-warp request counters (bank replays, sectors).
//
// Shared memory is the arena (Internal.h), filled with 0xFF (NaN in f32,
// f16 and bf16) when a CTA starts. Each byte has a shadow entry: the last
// writer and reader with their barrier interval ("epoch") and site, and the
// thread whose cp.async to it is still in flight.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_LIB_GPUEMU_LAUNCH_H
#define KVATTN_LIB_GPUEMU_LAUNCH_H

#include "Internal.h"

#include <boost/context/detail/fcontext.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace fctx = boost::context::detail;

/// Thread instructions, those in the KV loop, and KV-loop iterations of the
/// running launch: incremented by the JIT code (DeviceModule.cpp).
extern "C" uint64_t kvemu_counters[3];

namespace mlir {
namespace kvattn {
namespace emu {

/// The emulator's encoding of a CUtensorMap (Hopper.cpp).
struct TensorMap;

namespace detail {

/// The most distinct hazards a launch reports in full.
constexpr size_t kMaxReports = 20;

enum class State : uint8_t {
  Runnable,
  AtCollective,
  AtBarrier,
  AtMbarrier,     ///< a try_wait/test_wait whose phase has not completed
  AtNamedBarrier, ///< bar.sync id, n not yet complete
  Exited,
  Faulted
};

/// An mbarrier object (Hopper.cpp), keyed by its shared offset.
struct Mbarrier {
  uint32_t expected = 0, pending = 0;
  int64_t tx = 0;
  uint32_t phase =
      0; ///< completed phases; the current phase's parity is phase & 1
  uint32_t initSite = 0;
  /// Vector clocks released into the current phase, and that of the last
  /// completed phase (what a successful wait acquires).
  std::vector<uint32_t> clock, completed;
};

/// A TMA operation in flight.
struct TmaOp {
  bool load = true;
  uint32_t issuer = 0, site = 0, group = 0;
  uint64_t barrier = 0; ///< shared offset of the mbarrier (loads)
  /// Loads: the shared offset of each element and its bytes (read at
  /// issue); stores: shared offsets and global addresses of the elements
  /// inside the tensor.
  std::vector<uint32_t> smem;
  std::vector<uint64_t> global;
  std::vector<uint8_t> data;
  uint32_t elementBytes = 2;
  uint64_t bytes = 0;            ///< the box's bytes (complete_tx)
  std::vector<uint32_t> sources; ///< stores: the shared offsets of the box
  std::vector<uint32_t> clock;   ///< the issuer's vector clock at issue
};

struct WgmmaOp {
  uint32_t group = 0, site = 0;
  uint64_t instance = 0;
  std::vector<uint32_t> sources; ///< shared offsets it reads
};

/// Per warpgroup: wgmma state and registers (setmaxnreg).
struct WarpgroupState {
  bool fenced = false;
  uint32_t group = 0; ///< the wgmma-group being formed
  uint64_t instances = 0;
  std::vector<WgmmaOp> inFlight;
  unsigned registers = 0;
};

struct NamedBarrierState {
  uint32_t expected = 0, arrived = 0;
  std::vector<uint32_t> clock;   ///< released by the arrivals so far
  std::vector<uint32_t> waiters; ///< the bar.sync participants
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
  uint32_t group = 0;       ///< the cp.async group being formed
  uint32_t bulkGroup = 0;   ///< the cp.async.bulk group being formed
  uint64_t waitBarrier = 0; ///< AtMbarrier: its shared offset
  uint32_t waitParity = 0;
  uint32_t namedBarrier = 0; ///< AtNamedBarrier: its id
  /// The latest instance of each wgmma site this thread issued.
  std::vector<std::pair<uint32_t, uint64_t>> wgmmaLatest;
  std::vector<TmaOp> bulkStores; ///< TMA stores not yet waited for
  /// The KV loop's latches this thread executed in its CTA (the emulated
  /// code's count during the thread's slices; LaunchCounters::kvBlocks).
  uint64_t kvLatches = 0;
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
  uint16_t pending = 0;    ///< 1 + the thread with a cp.async in flight here
  bool pendingTma = false; ///< the pending copy is a TMA load
  /// Vector-clock stamps (the accessing thread's own clock) of the write and
  /// of the latest read; the latest reader.
  uint32_t writeClock = 0, lastReadClock = 0;
  uint16_t lastReader = 0;
  /// The last write was by the generic proxy (st.shared, cp.async), when
  /// its writer had executed `writeFence` fence.proxy.async.
  bool genericWrite = false;
  uint32_t writeFence = 0;
  /// wgmma.mma_async in flight that read this byte, and the last one's site.
  uint8_t wgmmaReads = 0;
  uint32_t wgmmaSite = 0;
  uint16_t wgmmaIssuer = 0;
  bool multipleReaders = false;
  /// Every reader of the epoch is in the reader's warp.
  bool readersInOneWarp = true;
};

/// Bank-conflict replays of one shared-memory warp request of `n` accesses
/// (Counters.cpp).
uint64_t bankReplays(const AccessEvent *const *request, unsigned n);

/// The shadow of every arena byte (Racecheck.cpp).
std::vector<ShadowByte> &shadow();

/// A buffer of the launch: an allocation a pointer parameter points into.
struct Buffer {
  uint64_t base, bytes;
  unsigned param;
};

class Launch;
/// The launch being run (the JIT code's entry points go to it).
extern Launch *current;

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
        reports_(reports), allocations_(allocations) {
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
  /// Adds this CTA's KV-loop trips to the counters (kvBlocks,
  /// kvWarpsPerCta) from the threads' latch counts.
  void countKvBlocks();
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
                 uint32_t otherSyncs, uint32_t otherClock) const;
  /// Whether thread `t` has acquired `other`'s accesses up to its clock
  /// `otherClock` (mbarriers, named barriers, warpgroup waits).
  bool clockOrdered(uint32_t t, uint32_t other, uint32_t otherClock) const {
    return !clocks_.empty() && clocks_[t][other] >= otherClock;
  }
  uint32_t ownClock(uint32_t t) const {
    return clocks_.empty() ? 0 : clocks_[t][t];
  }
  /// Release: joins t's clock into `into`, then advances t's own clock.
  void release(uint32_t t, std::vector<uint32_t> &into);
  /// Acquire: joins `from` into t's clock.
  void acquire(uint32_t t, const std::vector<uint32_t> &from);

  // sm_90a (Hopper.cpp).
  void hopperOp(Thread &t, const Site &site, uint32_t siteId, uint64_t *args,
                uint64_t *results);
  Status completeWarpgroup(unsigned warp, const Site &site, uint32_t siteId,
                           bool &progress);
  Mbarrier &mbarrierAt(Thread &t, uint64_t address, const Site &site,
                       uint64_t &offset, bool mustExist = true);
  void mbarrierArrive(Mbarrier &b, uint64_t offset, uint32_t count, int64_t tx,
                      const std::vector<uint32_t> *clock);
  void wakeWaiters(uint64_t offset);
  void tmaLoad(Thread &t, const Site &site, uint32_t siteId, uint64_t *args);
  void tmaStore(Thread &t, const Site &site, uint32_t siteId, uint64_t *args);
  /// The tensor map operand of a TMA copy or store (`what`, for the fault
  /// messages) at `mapAddress`, checked: inside device memory, 64-byte
  /// aligned, written by cuTensorMapEncodeTiled, of the instruction's rank.
  void readTmaOperand(Thread &t, const Site &site, uint64_t mapAddress,
                      const char *what, TensorMap &map);
  void landTma(TmaOp &op);
  bool landAllTma();
  void completeBulkStores(Thread &t, uint32_t keepGroups);
  void asyncRead(uint32_t reader, uint64_t offset, uint32_t site,
                 const char *what);
  std::string describeWait(const Thread &t) const;
  Status endOfCta();
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
  const std::map<uint64_t, Allocation> &allocations_;
  /// Vector clocks (kernels with mbarriers or named barriers): clocks_[t][u]
  /// is the latest clock of thread u that thread t has acquired.
  std::vector<std::vector<uint32_t>> clocks_;
  std::vector<uint32_t> fences_; ///< fence.proxy.async executed, per thread
  std::map<uint64_t, Mbarrier> mbarriers_;
  std::vector<TmaOp> tmaLoads_;
  std::vector<WarpgroupState> warpgroups_;
  std::map<uint32_t, NamedBarrierState> namedBarriers_;
  uint64_t hazards_ = 0, hazardsNotShown_ = 0;
  static uint32_t generation_;
};

} // namespace detail
} // namespace emu
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_LIB_GPUEMU_LAUNCH_H
