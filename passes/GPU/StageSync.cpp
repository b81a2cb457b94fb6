//===- StageSync.cpp - where tile ops wait for their K/V stages -----------===//
//
// A tensor-core kernel without the TMA ring stages each K and V block in
// shared memory with cp.async: every thread copies a part of the block, so
// before any thread reads a stage it must wait for its own copies
// (cp.async.wait_group) and then for everyone's (a CTA barrier), and before
// any thread overwrites a stage every thread must be done reading it (a
// barrier between the reads and the copies). Which op issues which copy is
// the schedule's (kvattn.value_prefetch, kvattn.key_prefetch,
// pipeline_depth); this analysis follows the copies, reads and barriers
// through the program in order (a loop until its entry state is stable, an
// scf.if as the join of its branches) and gives each tile.qk and
// tile.softmax_update the least synchronisation that covers every path to
// it: kvattn.stage_sync. The lowering emits exactly that.
//
// The events of an op, in the order the lowering emits them:
//   tile.qk             [its K copy (pipeline_depth 1)] sync(K)
//                       [the paired V copy] reads K
//   tile.prefetch       its K copy where it stands (pipeline_depth 2,
//                       unpaired); nothing when a softmax issues it
//   tile.softmax_update [its V copy (unpaired)] sync(V)
//                       [the paired K copy] reads V
// (the latent form reads V from the K stage and copies no V).
//
//===----------------------------------------------------------------------===//

#include "passes/GPU/StageSync.h"

#include "kvattn/Dialect/KVAttnOps.h"
#include "passes/Conversion/Fp8.h"
#include "passes/Conversion/TileToGPU/SharedMemoryLayout.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <optional>

using namespace mlir;
using namespace mlir::kvattn;

namespace {

enum StageKind { kKeyStage = 0, kValueStage = 1 };

/// What the analysis knows of one stage at a point of the program, for
/// every path reaching it.
struct StageState {
  /// Its newest copy may not have landed for this thread.
  bool inFlight = false;
  /// Copy groups surely committed after that copy's (0: it may be the
  /// newest, so only wait_group 0 surely retires it).
  int64_t age = 0;
  /// Its data is surely visible to every thread (waited for, then a
  /// barrier).
  bool published = true;
  /// Threads may have read it since the last barrier.
  bool read = false;

  bool operator==(const StageState &o) const {
    return inFlight == o.inFlight && (!inFlight || age == o.age) &&
           published == o.published && read == o.read;
  }
};

struct State {
  StageState stages[2];
  bool operator==(const State &o) const {
    return stages[0] == o.stages[0] && stages[1] == o.stages[1];
  }
};

/// The state after either of two paths.
State join(const State &a, const State &b) {
  State s;
  for (int k = 0; k < 2; ++k) {
    const StageState &x = a.stages[k], &y = b.stages[k];
    StageState &z = s.stages[k];
    z.inFlight = x.inFlight || y.inFlight;
    z.age = x.inFlight && y.inFlight ? std::min(x.age, y.age)
            : x.inFlight             ? x.age
                                     : y.age;
    z.published = x.published && y.published;
    z.read = x.read || y.read;
  }
  return s;
}

/// What an op's sync point must do (kvattn.stage_sync).
struct Need {
  bool barrierBefore = false;
  int64_t wait = -1;
  bool fence = false, barrier = false;
};

class StageSyncAnalysis {
public:
  StageSyncAnalysis(bool wgmma, bool keysAhead, bool latent)
      : wgmma(wgmma), keysAhead(keysAhead), latent(latent) {}

  /// The stages whose "copies" are plain loads and stores (an FP8 cache's
  /// conversion, emitFp8Stage): landed for this thread when issued, so no
  /// copy group and no wait; the barrier publishes them, after a proxy fence
  /// where wgmma reads them.
  bool synchronous[2] = {false, false};

  /// The pairings: the tile.softmax_update ops whose V block their tile.qk
  /// issues, the tile.qk ops that issue one, the tile.prefetch ops a
  /// tile.softmax_update issues and those softmaxes.
  llvm::DenseSet<Operation *> valueIssuers, valueIssued, keyIssuers, keyIssued;

  LogicalResult run(Block &block) { return processBlock(block); }

  llvm::MapVector<Operation *, Need> needs;

private:
  LogicalResult processBlock(Block &block) {
    for (Operation &op : block)
      if (failed(process(op)))
        return failure();
    return success();
  }

  LogicalResult process(Operation &op) {
    if (auto loop = dyn_cast<scf::ForOp>(op)) {
      // Every iteration starts from the state before the loop or after an
      // iteration: iterate from their join until it no longer changes (it
      // settles: the join only lowers an age and moves each flag one way).
      const State before = state;
      State entry = before;
      for (int i = 0;; ++i) {
        state = entry;
        if (failed(processBlock(*loop.getBody())))
          return failure();
        State next = join(entry, state);
        if (next == entry)
          break;
        if (i == 16)
          return loop.emitOpError()
                 << "kvattn-assign-tile-layouts: the K/V copies of this "
                    "loop do not settle into a steady state";
        entry = next;
      }
      state = join(before, state); // (also no iteration)
      return success();
    }
    if (op.getNumRegions() != 0) {
      // scf.if and the like: any branch, or none.
      const State before = state;
      State after = before;
      for (Region &region : op.getRegions())
        for (Block &block : region) {
          state = before;
          if (failed(processBlock(block)))
            return failure();
          after = join(after, state);
        }
      state = after;
      return success();
    }
    if (auto qk = dyn_cast<TileQKOp>(op)) {
      stageOp(qk, keysAhead ? std::nullopt : std::optional(kKeyStage),
              kKeyStage,
              valueIssuers.contains(qk) ? std::optional(kValueStage)
                                        : std::nullopt);
      return success();
    }
    if (auto prefetch = dyn_cast<TilePrefetchOp>(op)) {
      if (!keysAhead || keyIssued.contains(prefetch))
        return success(); // nothing here (the softmax issues it)
      if (state.stages[kKeyStage].read)
        return prefetch.emitOpError()
               << "kvattn-assign-tile-layouts: this K block's copies would "
                  "overwrite a K stage other threads may still be reading, "
                  "and a tile.prefetch has no barrier of its own (pair it "
                  "with the tile.softmax_update after it)";
      commit(kKeyStage);
      return success();
    }
    if (auto softmax = dyn_cast<TileSoftmaxOp>(op)) {
      stageOp(softmax,
              latent || valueIssued.contains(softmax)
                  ? std::nullopt
                  : std::optional(kValueStage),
              latent ? kKeyStage : kValueStage,
              keyIssuers.contains(softmax) ? std::optional(kKeyStage)
                                           : std::nullopt);
      return success();
    }
    return success();
  }

  /// A tile.qk or tile.softmax_update (the table above): its own copies
  /// into `own`, the sync point for the stage it `reads`, the copies the
  /// schedule pairs with it into `paired`, the read. Every such op gets its
  /// kvattn.stage_sync, an empty one where it needs nothing.
  void stageOp(Operation *op, std::optional<StageKind> own, StageKind reads,
               std::optional<StageKind> paired) {
    needs[op];
    if (own)
      issue(*own, op, /*beforeSync=*/true);
    sync(op, reads);
    if (paired)
      issue(*paired, op, /*beforeSync=*/false);
    state.stages[reads].read = true;
  }

  /// A CTA barrier: every read before it is done, every copy waited for
  /// before it is visible.
  void barrier() {
    for (StageState &s : state.stages) {
      s.read = false;
      if (!s.inFlight)
        s.published = true;
    }
  }

  /// A copy group into stage `k` (a synchronous stage's writes: no group).
  void commit(StageKind k) {
    if (synchronous[k]) {
      StageState &s = state.stages[k];
      s.inFlight = false;
      s.published = false;
      return;
    }
    for (StageState &s : state.stages)
      if (s.inFlight)
        ++s.age;
    StageState &s = state.stages[k];
    s.inFlight = true;
    s.age = 0;
    s.published = false;
  }

  /// Op `by` copies into stage `k`, before or after its sync point: the
  /// stage's earlier reads by other threads must be behind a barrier.
  void issue(StageKind k, Operation *by, bool beforeSync) {
    if (state.stages[k].read) {
      Need &need = needs[by];
      (beforeSync ? need.barrierBefore : need.barrier) = true;
      barrier();
    }
    commit(k);
  }

  /// Op `op` is about to read stage `k`: its copies landed (this thread's:
  /// the wait; everyone's: the barrier).
  void sync(Operation *op, StageKind k) {
    Need &need = needs[op];
    StageState &s = state.stages[k];
    if (s.inFlight) {
      const int64_t n = s.age;
      need.wait = need.wait < 0 ? n : std::min(need.wait, n);
      for (StageState &t : state.stages)
        if (t.inFlight && t.age >= n)
          t.inFlight = false;
      // wgmma reads shared memory through the async proxy: this thread's
      // copies (generic proxy) are ordered before it by a proxy fence.
      need.fence |= wgmma;
      need.barrier = true;
      barrier();
    } else if (!s.published) {
      need.fence |= wgmma && synchronous[k];
      need.barrier = true;
      barrier();
    }
  }

  const bool wgmma, keysAhead, latent;
  State state;
};

} // namespace

LogicalResult mlir::kvattn::placeStageSyncs(gpu::GPUFuncOp kernel) {
  GpuScheduleAttr schedule = getGpuSchedule(kernel);
  auto clear = [&] {
    kernel.walk([](Operation *op) { op->removeAttr(kStageSyncAttrName); });
  };
  // Only cp.async stages: the scalar lowering stages each block inside
  // the op that reads it (its barriers are its own), the TMA ring
  // synchronises through its mbarriers.
  if (!schedule || schedule.getMode() == TensorCoreMode::scalar ||
      schedule.getTmaKeyStages() != 0) {
    clear();
    return success();
  }
  StageSyncAnalysis analysis(schedule.getMode() == TensorCoreMode::wgmma,
                             schedule.getPipelineDepth() > 1,
                             isLatentProgram(kernel));
  llvm::DenseMap<int64_t, Operation *> valueQK, keyPrefetch;
  kernel.walk([&](Operation *op) {
    if (std::optional<int64_t> id = getValuePrefetchId(op);
        id && isa<TileQKOp>(op))
      valueQK[*id] = op;
    if (std::optional<int64_t> id = getKeyPrefetchId(op);
        id && isa<TilePrefetchOp>(op))
      keyPrefetch[*id] = op;
  });
  kernel.walk([&](TileQKOp qk) {
    analysis.synchronous[0] |= isFp8(qk.getKey().getType());
  });
  kernel.walk([&](TileSoftmaxOp softmax) {
    analysis.synchronous[1] |= isFp8(softmax.getValue().getType());
    if (std::optional<int64_t> id = getValuePrefetchId(softmax))
      if (Operation *qk = valueQK.lookup(*id)) {
        analysis.valueIssuers.insert(qk);
        analysis.valueIssued.insert(softmax);
      }
    if (std::optional<int64_t> id = getKeyPrefetchId(softmax))
      if (Operation *prefetch = keyPrefetch.lookup(*id)) {
        analysis.keyIssuers.insert(softmax);
        analysis.keyIssued.insert(prefetch);
      }
  });
  if (failed(analysis.run(kernel.getBody().front())))
    return failure();
  clear();
  MLIRContext *ctx = kernel.getContext();
  for (auto &[op, need] : analysis.needs)
    setStageSync(op, StageSyncAttr::get(ctx, need.barrierBefore, need.wait,
                                        need.fence, need.barrier));
  return success();
}
