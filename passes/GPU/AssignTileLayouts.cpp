//===- AssignTileLayouts.cpp - tile roles and fragment layouts as IR ------===//
//
// -kvattn-assign-tile-layouts (docs/gpu-lowering.md, "Tile roles, fragment
// layouts and the schedule"): on each outlined attention kernel, every
// scratch tile (memref.alloca) of the tile program gets its role
// (kvattn.tile_role: what the tile ops use it as) and, where its entries
// live in lanes' registers, the fragment layout of the tensor-core
// instruction they follow (kvattn.fragment_layout); the kernel gets its
// schedule (kvattn.gpu_schedule: tensor-core mode, pipeline depth, TMA
// rings, what stays in registers) and the tile ops the pairings of their
// copies (kvattn.value_prefetch, kvattn.key_prefetch). With the schedule's
// intra_warpgroup_overlap the KV loop's first block is peeled off the loop
// and the loop's tile.qk marked to issue the previous block's P.V
// (kvattn.pending_pv). Last, where K/V blocks arrive by cp.async, each
// tile.qk and tile.softmax_update gets the waits and barriers its stage
// needs (kvattn.stage_sync, StageSync.cpp's analysis).
// -kvattn-lower-tile-to-gpu reads them instead of deciding itself.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"
#include "passes/Conversion/TileToGPU/SharedMemoryLayout.h"
#include "passes/GPU/StageSync.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_ASSIGNTILELAYOUTSPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

namespace {

/// Every role the tile ops give `alloca` (a well-formed program gives one).
SmallVector<TileRole, 2> rolesOf(memref::AllocaOp alloca) {
  SmallVector<TileRole, 2> roles;
  auto add = [&](TileRole role) {
    if (!llvm::is_contained(roles, role))
      roles.push_back(role);
  };
  Value tile = alloca.getResult();
  for (Operation *user : alloca->getUsers()) {
    if (auto init = dyn_cast<TileInitOp>(user)) {
      if (init.getAcc() == tile)
        add(TileRole::accumulator);
      if (init.getMax() == tile || init.getSum() == tile)
        add(TileRole::row_stats);
    } else if (auto load = dyn_cast<TileLoadQOp>(user)) {
      if (load.getQTile() == tile)
        add(TileRole::query);
    } else if (auto qk = dyn_cast<TileQKOp>(user)) {
      if (qk.getScores() == tile)
        add(TileRole::scores);
      if (qk.getQTile() == tile)
        add(TileRole::query);
    } else if (auto softmax = dyn_cast<TileSoftmaxOp>(user)) {
      if (softmax.getScores() == tile)
        add(TileRole::scores);
      if (softmax.getAcc() == tile)
        add(TileRole::accumulator);
      if (softmax.getMax() == tile || softmax.getSum() == tile)
        add(TileRole::row_stats);
    } else if (auto mask = dyn_cast<TileMaskOp>(user)) {
      if (mask.getScores() == tile)
        add(TileRole::scores);
    } else if (auto store = dyn_cast<TileStoreOp>(user)) {
      if (store.getAcc() == tile)
        add(TileRole::accumulator);
      if (store.getMax() == tile || store.getSum() == tile)
        add(TileRole::row_stats);
    }
  }
  return roles;
}

/// On tensor cores the query tile holds the query as the mma reads it: in
/// its own 16-bit type, not f32 (the bytes the outlining's shared memory
/// layout gave it), or in f16 for an FP8 cache's f16 stage. A rotated query
/// kept in f32 (rope f32_query) cannot be.
LogicalResult retypeQueryTile(memref::AllocaOp alloca) {
  Type queryType;
  for (Operation *user : alloca->getUsers())
    if (auto load = dyn_cast<TileLoadQOp>(user)) {
      queryType = getElementTypeOrSelf(load.getQuery().getType());
      if (RopeAttr rope = load.getRopeAttr(); rope && rope.getF32Query())
        return load.emitOpError()
               << "kvattn-assign-tile-layouts: rope with f32_query keeps the "
                  "rotated query in f32, but tensor cores read it in its "
                  "16-bit type: drop f32_query, or compile without tensor "
                  "cores";
    }
  if (!queryType)
    return success();
  // A bf16 query over an FP8 cache staged in f16 is converted into f16
  // (fp8StageType; tile.load_q's lowering keeps it finite).
  auto kernel = alloca->getParentOfType<gpu::GPUFuncOp>();
  bool fp8 = false;
  kernel.walk([&](TileQKOp qk) {
    fp8 |= isa<Float8E4M3FNType, Float8E5M2Type>(
        getElementTypeOrSelf(qk.getKey().getType()));
  });
  if (Type stage = fp8 ? fp8StageType(kernel) : Type();
      stage && queryConvertsToF16(queryType, stage))
    queryType = stage;
  MemRefType type = alloca.getType();
  if (type.getElementType() == queryType)
    return success();
  if (!queryType.isF16() && !queryType.isBF16())
    return alloca.emitOpError()
           << "kvattn-assign-tile-layouts: a tensor-core kernel's query is "
              "f16 or bf16, got "
           << queryType;
  alloca.getResult().setType(MemRefType::get(
      type.getShape(), queryType, type.getLayout(), type.getMemorySpace()));
  return success();
}

/// The tensor-core instruction whose fragments a kernel's tiles follow:
/// wgmma's m64nNk16 on kernels the outlining marked kvattn.wgmma, else
/// mma.sync's m16n8k16 (the scalar lowering owns its entries that way too).
MmaShape mmaShapeOf(gpu::GPUFuncOp kernel) {
  return kernel->hasAttr(kTensorCoresAttr) && kernel->hasAttr(kWgmmaAttr)
             ? MmaShape::wgmma_m64nNk16
             : MmaShape::mma_m16n8k16;
}

LogicalResult assignTileLayouts(gpu::GPUFuncOp kernel) {
  TileConfigAttr config = getTileConfig(kernel);
  const bool tensorCores = kernel->hasAttr(kTensorCoresAttr);
  const MmaShape shape = mmaShapeOf(kernel);
  const int64_t tiles = mmaTilesPerWarp(config);
  auto layoutOf = [&](memref::AllocaOp alloca,
                      FragmentOperand operand) -> FragmentLayoutAttr {
    return FragmentLayoutAttr::getChecked(
        [&] {
          return alloca.emitOpError()
                 << "kvattn-assign-tile-layouts: no fragment layout for this "
                    "tile (block_m = "
                 << config.getBlockM()
                 << ", num_warps = " << config.getNumWarps() << "): ";
        },
        kernel.getContext(), shape, 2 * tiles, tiles, operand);
  };
  WalkResult result = kernel.walk([&](memref::AllocaOp alloca) {
    SmallVector<TileRole, 2> roles = rolesOf(alloca);
    if (roles.size() != 1) {
      InFlightDiagnostic diag = alloca.emitOpError()
                                << "kvattn-assign-tile-layouts: ";
      if (roles.empty())
        diag << "a scratch tile of the program that no tile op uses as its "
                "query, scores, accumulator or row statistics";
      else
        diag << "a scratch tile used in " << roles.size() << " roles ("
             << stringifyTileRole(roles[0]) << ", "
             << stringifyTileRole(roles[1]) << "): every tile holds one thing";
      return WalkResult::interrupt();
    }
    TileRole role = roles.front();
    setTileRole(alloca, role);
    // Tensor cores: the query tile holds the mma's operand, the query in its
    // own 16-bit type (the K/V type; an FP8 cache's stages take it too).
    if (role == TileRole::query && tensorCores &&
        failed(retypeQueryTile(alloca)))
      return WalkResult::interrupt();
    // Registers in lanes: the accumulator always, the scores on the lane's
    // fragment (scalar or tensor cores: the same ownership), the query as
    // mma.sync's A operand (wgmma reads it from shared memory).
    FragmentLayoutAttr layout;
    if (role == TileRole::accumulator || role == TileRole::scores)
      layout = layoutOf(alloca, FragmentOperand::accumulator);
    else if (role == TileRole::query && tensorCores &&
             shape == MmaShape::mma_m16n8k16)
      layout = layoutOf(alloca, FragmentOperand::a_operand);
    else
      return WalkResult::advance();
    if (!layout)
      return WalkResult::interrupt();
    setFragmentLayout(alloca, layout);
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

/// The tile.softmax_update of the same KV block as `qk`, later in its
/// block: the V block it reads can be issued by the tile.qk and load while
/// Q.K^T runs.
TileSoftmaxOp findSoftmaxOfBlock(TileQKOp qk) {
  for (Operation *op = qk->getNextNode(); op; op = op->getNextNode()) {
    auto softmax = dyn_cast<TileSoftmaxOp>(op);
    if (!softmax)
      continue;
    if (softmax.getScores() == qk.getScores() &&
        softmax.getBatch() == qk.getBatch() &&
        softmax.getKvHead() == qk.getKvHead() &&
        softmax.getStart() == qk.getStart() &&
        softmax.getCols() == qk.getCols() &&
        softmax.getBlockTable() == qk.getBlockTable())
      return softmax;
    return {};
  }
  return {};
}

/// The KV loop of a program whose P.V can be deferred past the next block's
/// Q.K^T: the scf.for (no results) holding its one tile.qk and one
/// tile.softmax_update, in that order, directly in its body; null otherwise.
scf::ForOp deferrableKvLoop(gpu::GPUFuncOp kernel) {
  SmallVector<TileQKOp> qks;
  SmallVector<TileSoftmaxOp> softmaxes;
  kernel.walk([&](TileQKOp qk) { qks.push_back(qk); });
  kernel.walk([&](TileSoftmaxOp softmax) { softmaxes.push_back(softmax); });
  if (qks.size() != 1 || softmaxes.size() != 1)
    return {};
  auto loop = dyn_cast<scf::ForOp>(qks[0]->getParentOp());
  if (!loop || loop->getNumResults() != 0 ||
      softmaxes[0]->getParentOp() != loop ||
      !qks[0]->isBeforeInBlock(softmaxes[0]))
    return {};
  return loop;
}

/// Intra-warpgroup overlap: the first iteration of the KV loop `loop` runs
/// before it, under `lb < ub` (so that every block's tile.qk knows
/// statically whether a P.V is pending: none before the first), and the
/// loop's tile.qk issues the previous block's deferred P.V.
void peelFirstKvBlock(scf::ForOp loop) {
  ImplicitLocOpBuilder b(loop.getLoc(), loop);
  Value lb = loop.getLowerBound(), ub = loop.getUpperBound();
  Value any = arith::CmpIOp::create(b, arith::CmpIPredicate::slt, lb, ub);
  auto first = scf::IfOp::create(b, any, /*withElseRegion=*/false);
  OpBuilder inner = first.getThenBodyBuilder();
  IRMapping map;
  map.map(loop.getInductionVar(), lb);
  for (Operation &op : loop.getBody()->without_terminator())
    inner.clone(op, map);
  Value rest = arith::AddIOp::create(b, lb, loop.getStep());
  loop.getLowerBoundMutable().assign(rest);
  loop.walk([](TileQKOp qk) { setIssuesPendingPV(qk); });
}

/// Records the kernel's shared memory as `layout` places it: each scratch
/// tile's byte offset (kvattn.shared_offset; removed from the tiles it no
/// longer places), the staging blocks, the TMA ring and the share exchange
/// (kvattn.shared_memory). -kvattn-lower-tile-to-gpu builds its views there.
LogicalResult recordSharedMemory(gpu::GPUFuncOp kernel,
                                 const SharedMemoryLayout &layout) {
  kernel.walk([&](memref::AllocaOp alloca) {
    if (!llvm::is_contained(layout.tiles, alloca))
      alloca->removeAttr(kSharedOffsetAttrName);
  });
  for (auto [alloca, offset] : llvm::zip(layout.tiles, layout.offsets))
    setSharedOffset(alloca, offset);
  auto when = [](bool has, int64_t offset) -> int64_t {
    return has ? offset : -1;
  };
  auto memory = SharedMemoryAttr::getChecked(
      [&] {
        return kernel.emitOpError() << "kvattn-assign-tile-layouts: no shared "
                                       "memory allocation for this kernel: ";
      },
      kernel.getContext(), layout.totalBytes, layout.stageOffset,
      when(layout.separateValueStage, layout.valueStageOffset),
      when(layout.tmaRing, layout.keyStage1Offset),
      when(layout.tmaRing, layout.valueStage1Offset),
      when(layout.tmaRing, layout.barrierOffset),
      when(layout.shareExchange, layout.exchangeOffset),
      when(layout.shareExchange, layout.exchangeProbsOffset));
  if (!memory)
    return failure();
  setSharedMemory(kernel, memory);
  return success();
}

/// The schedule of a kernel whose tiles have their roles: the decisions the
/// GPU lowering used to take itself, from the same rules.
LogicalResult scheduleKernel(gpu::GPUFuncOp kernel, bool valuePrefetch,
                             bool keyPrefetch, bool queryInRegisters,
                             bool lazyRescale, bool pingPong,
                             bool intraWarpgroupOverlap, bool twoValueStages) {
  MLIRContext *ctx = kernel.getContext();
  TileConfigAttr config = getTileConfig(kernel);
  // Tensor cores, wgmma and TMA as decided by the outlining (the shared
  // memory it gave the kernel depends on them).
  const bool tensorCores = kernel->hasAttr(kTensorCoresAttr);
  const bool wgmma = tensorCores && kernel->hasAttr(kWgmmaAttr);
  const bool tma = wgmma && kernel->hasAttr(kTmaAttr);
  const TensorCoreMode mode = wgmma         ? TensorCoreMode::wgmma
                              : tensorCores ? TensorCoreMode::mma_sync
                                            : TensorCoreMode::scalar;
  const int64_t mmaTiles = mmaTilesPerWarp(config);
  bool scores = false, query = false, lazy = false, deferPV = false;
  int64_t keyStages = 0, valueStages = 0;
  FailureOr<SharedMemoryLayout> layout = computeSharedMemoryLayout(
      kernel, /*privateScores=*/false, /*query16=*/false, tileRoleAttrOf);
  // (A program the lowering cannot lay out is refused there, by name.)
  if (succeeded(layout) && tensorCores && canUseTensorCores(*layout)) {
    layout->mmaTiles = mmaTiles;
    layout->wgmma = wgmma;
    scores = keepScoresInRegisters(*layout);
    layout = computeTensorCoreLayout(kernel, mmaTiles, wgmma, tileRoleAttrOf);
    // mma.sync reads the query A fragments from registers where they fit
    // and hold the mma's operand type.
    bool sameType = true, hasQuery = false;
    kernel.walk([&](TileLoadQOp load) {
      hasQuery = true;
      sameType &=
          queryReachesStageType(getElementTypeOrSelf(load.getQuery().getType()),
                                layout->stageElementType);
    });
    query = queryInRegisters && !wgmma && hasQuery && sameType &&
            keepQueryInRegisters(*layout);
    // Lazy rescaling where the lane's data registers leave room for its
    // per-row flags and branch (kLazyRescaleRegisters).
    lazy = lazyRescale &&
           laneDataRegisters(*layout, scores, query) <= kLazyRescaleRegisters;
    deferPV = fitsDeferredPV(*layout, scores);
    if (tma) {
      std::optional<ArrayRef<int32_t>> block = kernel.getKnownBlockSize();
      addTmaRing(*layout, twoValueStages && block &&
                              (*block)[0] / 32 > config.getNumWarps());
      keyStages = kTmaStages;
      valueStages = layout->tmaValueStages;
    }
  }
  // A producer warpgroup: the warps of the outlining's block past
  // num_warps (it sized the block; TMA kernels only, which the verifier
  // checks).
  int64_t producerWarps = 0;
  if (std::optional<ArrayRef<int32_t>> block = kernel.getKnownBlockSize())
    producerWarps = (*block)[0] / 32 - config.getNumWarps();
  // K one block ahead where the program announces it (tile.prefetch) and
  // the lowering stages asynchronously (tensor cores).
  bool hasPrefetch = false;
  kernel.walk([&](TilePrefetchOp) { hasPrefetch = true; });
  // The latent form reads V from the K stage: the next K block cannot be
  // issued before P.V has read it, so K is not prefetched, and there is no
  // V block to issue.
  const bool latent = isLatentProgram(kernel);
  const int64_t depth =
      tensorCores && hasPrefetch && keyPrefetch && !latent ? 2 : 1;
  // Ping-pong between two consumer warpgroups with their own rows, whose
  // blocks arrive by TMA (no CTA barrier before a Q.K^T: docs/gpu-lowering.md
  // "Ping-pong"); not the latent form, whose warpgroups share their rows
  // and meet at every block anyway.
  const bool alternate = pingPong && producerWarps == kProducerWarps &&
                         config.getNumWarps() == 8 && !latent;
  // Intra-warpgroup overlap (FlashAttention-3's): each block's P.V runs
  // during the next block's softmax, reading its V stage while the
  // producer fills the other (two V stages), where the deferred
  // probabilities fit the registers (fitsDeferredPV); not the latent form,
  // whose warpgroups exchange their probabilities at every block.
  // A program this pass peeled already (kvattn.pending_pv on its loop's
  // tile.qk: the pass runs again) keeps the overlap; the option only
  // decides whether to peel.
  const bool canDefer = deferPV && tma && producerWarps == kProducerWarps &&
                        valueStages == 2 && !latent;
  bool peeled = false;
  kernel.walk([&](TileQKOp qk) { peeled |= issuesPendingPV(qk); });
  if (peeled && !canDefer)
    return kernel.emitOpError()
           << "kvattn-assign-tile-layouts: a tile.qk issues a pending P.V "
              "(kvattn.pending_pv), but this kernel cannot defer P.V (it "
              "needs wgmma, a producer warpgroup, two TMA V stages and the "
              "registers for the deferred probabilities)";
  scf::ForOp kvLoop;
  if (!peeled && intraWarpgroupOverlap && canDefer)
    kvLoop = deferrableKvLoop(kernel);
  auto schedule = GpuScheduleAttr::getChecked(
      [&] {
        return kernel.emitOpError()
               << "kvattn-assign-tile-layouts: no schedule for this kernel: ";
      },
      ctx, mode, depth, keyStages, valueStages, scores, query, producerWarps,
      lazy, alternate, peeled || kvLoop);
  if (!schedule)
    return failure();
  setGpuSchedule(kernel, schedule);
  // The shared memory as the lowering lays it out (a program it cannot lay
  // out is refused there, by name).
  if (succeeded(layout) && failed(recordSharedMemory(kernel, *layout)))
    return failure();
  if (kvLoop)
    peelFirstKvBlock(kvLoop);
  if (!tensorCores)
    return success();
  // Which op issues which copy. V: the tile.qk of a block issues the V
  // block of its tile.softmax_update right after the barrier that says K
  // has landed (every warp has finished the previous P.V).
  int64_t id = 0;
  if (valuePrefetch && !latent)
    kernel.walk([&](TileQKOp qk) {
      if (TileSoftmaxOp softmax = findSoftmaxOfBlock(qk)) {
        setValuePrefetchId(qk, id);
        setValuePrefetchId(softmax, id++);
      }
    });
  // K: a tile.prefetch in the KV loop (after tile.qk) is issued by the
  // tile.softmax_update that follows it in its block, after that op's
  // barrier (every warp has passed its Q.K^T: the K stage is free). The TMA
  // ring issues it where it stands (no barrier to wait for).
  if (depth < 2 || tma)
    return success();
  id = 0;
  kernel.walk([&](TilePrefetchOp prefetch) {
    for (Operation *next = prefetch->getNextNode(); next;
         next = next->getNextNode())
      if (isa<TileSoftmaxOp>(next)) {
        setKeyPrefetchId(prefetch, id);
        setKeyPrefetchId(next, id++);
        break;
      }
  });
  return success();
}

struct AssignTileLayoutsPass
    : mlir::kvattn::impl::AssignTileLayoutsPassBase<AssignTileLayoutsPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<gpu::GPUFuncOp> kernels;
    getOperation()->walk([&](gpu::GPUFuncOp kernel) {
      // Attention kernels: merge and append kernels have no scratch tiles.
      TileConfigAttr config = getTileConfig(kernel);
      if (config && (config.getKind() == KernelKind::attention ||
                     config.getKind() == KernelKind::attention_varlen))
        kernels.push_back(kernel);
    });
    for (gpu::GPUFuncOp kernel : kernels)
      if (failed(assignTileLayouts(kernel)) ||
          failed(scheduleKernel(kernel, valuePrefetch, keyPrefetch,
                                queryInRegisters, lazyRescale, pingPong,
                                intraWarpgroupOverlap, twoValueStages)) ||
          failed(placeStageSyncs(kernel)))
        return signalPassFailure();
  }
};

} // namespace
