//===- WgmmaTiles.cpp - tile ops on sm_90a's warpgroup MMA ----------------===//
//
// The sm_90a lowering of tile.qk and of the P.V product of
// tile.softmax_update (docs/gpu-lowering.md, "Hopper (sm_90a)"): a second
// MMA-issue strategy beside TensorCoreTiles.cpp's mma.sync, on the same
// tile program, the same ownership and the same staging.
//
// - Q.K^T: wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.{bf16,f16} with
//   both operands from shared memory (SS): A = the warpgroup's 64 rows of
//   the query tile, B = the K stage, both K-major through 128-byte-swizzle
//   matrix descriptors (WgmmaLayout.h), D / 16 steps chained on one
//   accumulator, then one commit_group and wait_group 0. A step's
//   descriptor is the tile's first one plus a constant (stepDescriptors). The
//   accumulator d[4j + r] of a thread is its score entry (row r / 2, slice j,
//   element r % 2): FragmentLayout::wgmmaM64NK16Accumulator, the 16-row warps'
//   ownership, so the mask and the softmax are the tensor-core lowering's.
// - P.V: m64n{Dv}k16 with A from registers (RS): the lane's probabilities
//   of slices 2kk, 2kk + 1 rounded to 16-bit pairs are the A fragment of
//   step kk (as for mma.sync), B = the V stage, MN-major (imm-trans-b = 1);
//   the rescaled accumulator is d.
// - staging: with kvattn.tma (contiguous caches, canUseTmaRing) K and V
//   arrive by TMA through two-stage mbarrier rings (emitTmaIssue /
//   emitTmaAcquire / emitTmaRelease): the producer warpgroup's first thread
//   (TileToGPU.cpp, specializeProducerWarps) waits for a stage's "empty"
//   barrier (one arrival per consumer warp after the wgmma that read its
//   previous block retired), arrives on its "full" barrier with the boxes'
//   bytes (expect_tx) and issues one 64-column box per panel, which lands in
//   the panel layout (128-byte swizzle); the consumers wait for the full
//   barrier's phase (try_wait.parity) and no CTA barrier separates the
//   blocks. Otherwise cp.async (TensorCoreTiles.cpp's emitAsyncStage) into
//   the panelled tiles (panelIndices); the writers execute
//   fence.proxy.async after their copies land and before the barrier that
//   publishes them, so that the async proxy (wgmma) sees them.
// - the latent form (DeepSeek MLA: V = the K stage's first Dv columns):
//   the warpgroups of a value split share their rows; the first computes
//   Q.K^T over the block's keys and the softmax and publishes the rows'
//   maxima and probabilities through shared memory, each computes P.V over
//   its Dv / valueSplit columns. Its TMA ring holds K only and is released
//   after P.V (docs/gpu-lowering.md, "The latent form on wgmma").
//
// wgmma.mma_async has no LLVM intrinsic: it is inline PTX of the form
// MLIR's NVVM dialect writes (scale-d through setp.ne.b32), which the
// emulated GPU reads (lib/GpuEmu/DeviceModule.cpp, hopperInlineSite).
//
//===----------------------------------------------------------------------===//

#include "kvattn/Passes/Passes.h"
#include "kvattn/Support/KernelMarkers.h"
#include "passes/Conversion/Fp8.h"
#include "passes/Conversion/TileToGPU/SharedMemoryLayout.h"
#include "passes/Conversion/TileToGPU/TensorCoreTiles.h"
#include "passes/Conversion/TileToGPU/WgmmaLayout.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <optional>
#include <string>

using namespace mlir;
using namespace mlir::kvattn;

namespace {

Value i64Constant(GpuEmitter &e, uint64_t v) {
  return arith::ConstantIntOp::create(e.b, e.b.getI64Type(),
                                      static_cast<int64_t>(v));
}

/// The shared-window address of a tile (a view of the dynamic shared
/// memory), as i64.
Value sharedAddress(GpuEmitter &e, Value tile) {
  Value p = memref::ExtractAlignedPointerAsIndexOp::create(e.b, tile);
  return arith::IndexCastUIOp::create(e.b, e.b.getI64Type(), p);
}

/// The matrix descriptor of one k16 step: the start `address + step.offset`
/// (+ `extra` bytes when given), LBO, SBO and the 128-byte swizzle.
Value descriptor(GpuEmitter &e, Value address, Value extra,
                 wgmma::StepDescriptor step) {
  Value start =
      arith::AddIOp::create(e.b, address, i64Constant(e, step.offset));
  if (extra)
    start = arith::AddIOp::create(e.b, start, extra);
  start = arith::ShRUIOp::create(e.b, start, i64Constant(e, 4));
  start = arith::AndIOp::create(e.b, start, i64Constant(e, 0x3FFF));
  const uint64_t fixed = wgmma::encodeDescriptor(
      0, step.leadingByteOffset, step.strideByteOffset, wgmma::Swizzle::B128);
  return arith::OrIOp::create(e.b, start, i64Constant(e, fixed));
}

/// The descriptors of the k16 steps `steps` of one tile: the first one
/// encoded in full (descriptor), the others as it plus the difference of
/// their start addresses >> 4 (one 64-bit add each: the start field of a
/// tile inside the shared window does not overflow its 14 bits, and LBO,
/// SBO and the swizzle are the same for every step of a tile).
SmallVector<Value> stepDescriptors(GpuEmitter &e, Value address, Value extra,
                                   ArrayRef<wgmma::StepDescriptor> steps) {
  SmallVector<Value> out;
  for (const wgmma::StepDescriptor &step : steps) {
    if (out.empty()) {
      out.push_back(descriptor(e, address, extra, step));
      continue;
    }
    assert(step.leadingByteOffset == steps[0].leadingByteOffset &&
           step.strideByteOffset == steps[0].strideByteOffset &&
           (step.offset - steps[0].offset) % 16 == 0 && "one tile's steps");
    out.push_back(arith::AddIOp::create(
        e.b, out.front(),
        i64Constant(e, static_cast<uint64_t>(step.offset - steps[0].offset) >>
                           4)));
  }
  return out;
}

/// Two 16-bit values as one b32 register (the RS A operand).
Value packPair(GpuEmitter &e, Type elt, Value lo, Value hi) {
  auto pairType = VectorType::get({2}, elt);
  Value pair = vector::FromElementsOp::create(
      e.b, pairType,
      ValueRange{arith::TruncFOp::create(e.b, elt, lo),
                 arith::TruncFOp::create(e.b, elt, hi)});
  Value word = vector::BitCastOp::create(
      e.b, VectorType::get({1}, e.b.getI32Type()), pair);
  return vector::ExtractOp::create(e.b, word, ArrayRef<int64_t>{0});
}

/// d = A . B + d, wgmma.mma_async m64n{n}k16 with f32 accumulation: A from
/// its descriptor `descA` (SS) or from the four b32 registers `aRegs` (RS),
/// B from `descB` (MN-major when `transB`). Returns the n / 2 values of d.
/// Without `accumulate` (scale-d = 0) d = A . B: `acc`'s values are not read
/// (ptxas then sets no registers for them).
SmallVector<Value> emitWgmma(GpuEmitter &e, Type elt, int64_t n,
                             ArrayRef<Value> acc, Value descA,
                             ArrayRef<Value> aRegs, Value descB, bool transB,
                             bool accumulate = true) {
  const int64_t outs = n / 2;
  assert(static_cast<int64_t>(acc.size()) == outs && "one value per d");
  const bool rs = !aRegs.empty();
  const std::string type = elt.isF16() ? "f16" : "bf16";
  auto ref = [](int64_t i) { return "$" + std::to_string(i); };
  std::string d, constraints;
  for (int64_t i = 0; i < outs; ++i) {
    d += (i ? ", " : "") + ref(i);
    constraints += (i ? ",=f" : "=f");
  }
  for (int64_t i = 0; i < outs; ++i)
    constraints += "," + std::to_string(i);
  SmallVector<Value> operands(acc.begin(), acc.end());
  int64_t next = 2 * outs;
  std::string a;
  if (rs) {
    a = "{";
    for (int64_t i = 0; i < 4; ++i) {
      a += (i ? ", " : "") + ref(next++);
      constraints += ",r";
      operands.push_back(aRegs[i]);
    }
    a += "}";
  } else {
    a = ref(next++);
    constraints += ",l";
    operands.push_back(descA);
  }
  const std::string b = ref(next++);
  constraints += ",l";
  operands.push_back(descB);
  const std::string scaleD = ref(next++);
  constraints += ",n";
  operands.push_back(
      arith::ConstantIntOp::create(e.b, e.b.getI32Type(), accumulate ? 1 : 0)
          .getResult());
  std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, " + scaleD +
                     ", 0;\nwgmma.mma_async.sync.aligned.m64n" +
                     std::to_string(n) + "k16.f32." + type + "." + type + " {" +
                     d + "}, " + a + ", " + b + ", p, 1, 1, " +
                     (rs ? "" : "0, ") + (transB ? "1" : "0") + ";\n}\n";
  MLIRContext *ctx = e.b.getContext();
  SmallVector<Type> fields(outs, e.b.getF32Type());
  auto resultType = LLVM::LLVMStructType::getLiteral(ctx, fields);
  auto asmOp = LLVM::InlineAsmOp::create(
      e.b, resultType, operands, text, constraints,
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(ctx, LLVM::AsmDialect::AD_ATT),
      /*operand_attrs=*/ArrayAttr());
  SmallVector<Value> out;
  for (int64_t i = 0; i < outs; ++i)
    out.push_back(LLVM::ExtractValueOp::create(e.b, asmOp.getResult(0),
                                               ArrayRef<int64_t>{i}));
  return out;
}

void wgmmaFence(GpuEmitter &e) { NVVM::WgmmaFenceAlignedOp::create(e.b); }
void wgmmaCommitAndWait(GpuEmitter &e) {
  NVVM::WgmmaGroupSyncAlignedOp::create(e.b);
  NVVM::WgmmaWaitGroupSyncOp::create(e.b, 0);
}

/// The byte offset of the thread's warpgroup's first row in a panel (64
/// rows of 128 bytes per warpgroup), as i64.
Value warpgroupRowBytes(GpuEmitter &e) {
  const FragmentLayout &layout = e.t.layout;
  Value group = e.t.rowGroup ? e.t.rowGroup
                             : e.divIdx(e.t.warp, e.idx(layout.warpsPerMma));
  Value bytes = e.mulIdx(group, layout.mmaRows() * wgmma::kPanelRowBytes);
  return arith::IndexCastUIOp::create(e.b, e.b.getI64Type(), bytes);
}

} // namespace

namespace {

/// The named barrier of warpgroup `group`'s turns (2 + group; 0 is the
/// CTA's, 1 the consumers').
constexpr int32_t kPingPongBarrier = 2;
constexpr int32_t kPingPongThreads = 2 * 128;

Value pingPongBarrier(GpuEmitter &e, bool other) {
  Value group = e.t.rowGroup;
  if (other)
    group = e.sub(e.idx(1), group);
  return arith::IndexCastUIOp::create(e.b, e.b.getI32Type(),
                                      e.add(group, e.idx(kPingPongBarrier)));
}

void namedBarrier(GpuEmitter &e, StringRef intrinsic, Value id) {
  LLVM::CallIntrinsicOp::create(
      e.b, e.b.getStringAttr(intrinsic),
      ValueRange{id, arith::ConstantIntOp::create(e.b, e.b.getI32Type(),
                                                  kPingPongThreads)});
}

} // namespace

namespace {

constexpr llvm::StringLiteral kBarSync =
    "llvm.nvvm.barrier.cta.sync.aligned.count";
constexpr llvm::StringLiteral kBarArrive =
    "llvm.nvvm.barrier.cta.arrive.aligned.count";

/// `intrinsic` on this warpgroup's turn barrier (or the other's), by the
/// threads of warpgroup `only` alone when given.
void pingPongBarrierOp(GpuEmitter &e, StringRef intrinsic, bool other,
                       std::optional<int64_t> only = std::nullopt) {
  if (!e.t.pingPong)
    return;
  if (!only)
    return namedBarrier(e, intrinsic, pingPongBarrier(e, other));
  e.when(arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq, e.t.rowGroup,
                               e.idx(*only)),
         [&] { namedBarrier(e, intrinsic, pingPongBarrier(e, other)); });
}

} // namespace

// A turn begins with a wait on the warpgroup's own barrier and ends with an
// arrival on the other's. Without the overlap, warpgroup 0's first Q.K^T
// needs no turn (warpgroup 1 waits for it first) and its last turn is given
// back before the store; with it, every tile.qk takes a turn (its Q.K^T and
// the pending P.V), so warpgroup 1 gives warpgroup 0 the first one and
// warpgroup 0 takes warpgroup 1's last one before the store.
void mlir::kvattn::emitPingPongStart(GpuEmitter &e) {
  if (e.t.overlapPV)
    pingPongBarrierOp(e, kBarArrive, /*other=*/true, /*only=*/1);
  else
    pingPongBarrierOp(e, kBarSync, /*other=*/false, /*only=*/1);
}

void mlir::kvattn::emitPingPongWait(GpuEmitter &e) {
  pingPongBarrierOp(e, kBarSync, /*other=*/false);
}

void mlir::kvattn::emitPingPongPass(GpuEmitter &e) {
  pingPongBarrierOp(e, kBarArrive, /*other=*/true);
}

void mlir::kvattn::emitPingPongEnd(GpuEmitter &e) {
  if (e.t.overlapPV)
    pingPongBarrierOp(e, kBarSync, /*other=*/false, /*only=*/0);
  else
    pingPongBarrierOp(e, kBarArrive, /*other=*/true, /*only=*/0);
}

void mlir::kvattn::emitProxyFence(GpuEmitter &e) {
  NVVM::FenceProxyOp::create(
      e.b, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(e.b.getContext(),
                                 NVVM::SharedSpace::shared_cta));
}

SmallVector<Value, 2> mlir::kvattn::panelIndices(GpuEmitter &e, Value tile,
                                                 Value row, Value col) {
  auto type = cast<MemRefType>(tile.getType());
  const int64_t rows = type.getDimSize(0), width = type.getDimSize(1);
  const int64_t panel = wgmma::kPanelColumns;
  // (col / 64) * rows * 64 + row * 64 + ((col % 64) ^ 8 (row % 8)): the
  // chunk XOR of WgmmaLayout.h's panelElementOffset.
  Value c = e.remIdx(col, e.idx(panel));
  Value swizzled =
      arith::XOrIOp::create(e.b, c, e.mulIdx(e.remIdx(row, e.idx(8)), 8));
  Value linear =
      e.add(e.add(e.mulIdx(e.divIdx(col, e.idx(panel)), rows * panel),
                  e.mulIdx(row, panel)),
            swizzled);
  return {e.divIdx(linear, e.idx(width)), e.remIdx(linear, e.idx(width))};
}

namespace {

Value callIntrinsic(GpuEmitter &e, Type result, StringRef name,
                    ValueRange args) {
  if (!result) {
    LLVM::CallIntrinsicOp::create(e.b, e.b.getStringAttr(name), args);
    return Value();
  }
  return LLVM::CallIntrinsicOp::create(e.b, result, e.b.getStringAttr(name),
                                       args)
      .getResult(0);
}

Value i32Of(GpuEmitter &e, Value index) {
  return arith::IndexCastOp::create(e.b, e.b.getI32Type(), index);
}

Value llvmConstant(GpuEmitter &e, Type type, int64_t v) {
  return LLVM::ConstantOp::create(e.b, type, e.b.getIntegerAttr(type, v));
}

/// The shared pointer (!llvm.ptr<3>) `offset` (i64) bytes into the dynamic
/// shared memory.
Value sharedPointer(GpuEmitter &e, Value offset) {
  return LLVM::GEPOp::create(
      e.b, LLVM::LLVMPointerType::get(e.b.getContext(), 3), e.b.getI8Type(),
      e.t.smemPointer, ArrayRef<LLVM::GEPArg>{offset});
}

/// The byte offset (i64) of stage `stage` (index) of ring `ring` in the
/// dynamic shared memory.
Value stageOffset(GpuEmitter &e, int ring, Value stage) {
  const int64_t first = e.t.ringStage[ring][0];
  const int64_t step = e.t.ringStage[ring][1] - first;
  Value s = arith::IndexCastUIOp::create(e.b, e.b.getI64Type(), stage);
  return arith::AddIOp::create(
      e.b, i64Constant(e, first),
      arith::MulIOp::create(e.b, s, i64Constant(e, step)));
}

/// mbarrier `kind` (0 full K, 1 full V, 2 empty K, 3 empty V) of stage
/// `stage` (index).
Value ringBarrier(GpuEmitter &e, int kind, Value stage) {
  Value at = i64Constant(e, e.t.barrierOffset + 8 * kTmaStages * kind);
  Value s = arith::IndexCastUIOp::create(e.b, e.b.getI64Type(), stage);
  return sharedPointer(
      e, arith::AddIOp::create(
             e.b, at, arith::MulIOp::create(e.b, s, i64Constant(e, 8))));
}

/// Blocks until the phase of `barrier` with parity `parity` (i32) has
/// completed: the try_wait.parity loop. With `warpUniform` (every lane of
/// the warp waits) the loop's exit is voted (vote.sync.all), so that ptxas
/// knows the warp converged after it: no divergent slow paths for the
/// shuffles and wgmma that follow.
void waitParity(GpuEmitter &e, Value barrier, Value parity,
                bool warpUniform = false) {
  scf::WhileOp::create(
      e.b, TypeRange{}, ValueRange{},
      [&](OpBuilder &b, Location loc, ValueRange) {
        ImplicitLocOpBuilder ib(loc, b);
        Value ok =
            LLVM::CallIntrinsicOp::create(
                ib, ib.getI1Type(),
                ib.getStringAttr(
                    "llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta"),
                ValueRange{barrier, parity})
                .getResult(0);
        if (warpUniform)
          ok = LLVM::CallIntrinsicOp::create(
                   ib, ib.getI1Type(),
                   ib.getStringAttr("llvm.nvvm.vote.all.sync"),
                   ValueRange{
                       arith::ConstantIntOp::create(ib, ib.getI32Type(), -1),
                       ok})
                   .getResult(0);
        Value notYet = arith::XOrIOp::create(
            ib, ok, arith::ConstantIntOp::create(ib, ib.getI1Type(), 1));
        scf::ConditionOp::create(ib, notYet, ValueRange{});
      },
      [&](OpBuilder &b, Location loc, ValueRange) {
        scf::YieldOp::create(b, loc);
      });
}

/// Columns of ring `ring`'s stages (D for K, Dv for V).
int64_t ringColumns(GpuEmitter &e, int ring) {
  return cast<MemRefType>((ring ? e.t.stageV : e.t.stage).getType())
      .getDimSize(1);
}

int64_t ringRows(GpuEmitter &e) {
  return cast<MemRefType>(e.t.stage.getType()).getDimSize(0);
}

/// The ring counter `i` (0 K issued, 1 K consumed, 2 V issued, 3 V
/// consumed) and its stage and lap parity.
struct RingSlot {
  Value count, stage, parity;
};
/// The stage of the block at key `start`: consecutive blocks alternate
/// (start / block-n mod stages), so that the stage, its shared address and
/// the wgmma descriptors derive from the loop's uniform block start rather
/// than from the per-thread counters (ptxas then keeps the descriptors in
/// uniform registers). The counter of the ring's uses gives the parity:
/// the earlier uses of this block's stage are the blocks 2, 4, ... before
/// it, floor(n / 2) of the n blocks since the program's first.
RingSlot ringSlot(GpuEmitter &e, int64_t i, Value start) {
  Value n = e.load(e.t.ringCounters, {e.idx(i)});
  const int64_t stages = e.t.ringStages[i / 2];
  Value stage = stages == 1 ? e.idx(0)
                            : e.remIdx(e.divIdx(start, e.idx(ringRows(e))),
                                       e.idx(stages));
  return {n, stage, i32Of(e, e.remIdx(e.divIdx(n, e.idx(stages)), e.idx(2)))};
}

} // namespace

Value mlir::kvattn::tmaBlockStage(GpuEmitter &e, int ring, Value start) {
  const int64_t stages = e.t.ringStages[ring];
  return stages == 1
             ? e.idx(0)
             : e.remIdx(e.divIdx(start, e.idx(ringRows(e))), e.idx(stages));
}

void mlir::kvattn::emitTmaRingInit(GpuEmitter &e) {
  Value leader =
      arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq, e.t.tid, e.idx(0));
  e.when(leader, [&] {
    const int64_t warps = e.t.count / 32;
    for (int kind = 0; kind < 4; ++kind)
      for (int64_t s = 0; s < kTmaStages; ++s)
        callIntrinsic(
            e, Type(), "llvm.nvvm.mbarrier.init.shared",
            {ringBarrier(e, kind, e.idx(s)),
             llvmConstant(e, e.b.getI32Type(), kind < 2 ? 1 : warps)});
    // The initialised barriers, before the TMA (async proxy) completes
    // transactions on them.
    emitProxyFence(e);
  });
  e.ctaBarrier(); // the producer warpgroup's threads too
}

Value mlir::kvattn::tmaStageAddress(GpuEmitter &e, int ring, Value stage) {
  return arith::AddIOp::create(e.b, e.t.smemBase, stageOffset(e, ring, stage));
}

void mlir::kvattn::emitTmaIssue(GpuEmitter &e, int ring, Value source,
                                Value blockTable, Value batch, Value head,
                                Value start, Value cols) {
  Value any =
      arith::CmpIOp::create(e.b, arith::CmpIPredicate::ugt, cols, e.idx(0));
  e.when(any, [&] {
    RingSlot slot = ringSlot(e, 2 * ring, start);
    const int64_t bn = ringRows(e), panels = ringColumns(e, ring) / 64;
    const int64_t panelBytes = bn * wgmma::kPanelRowBytes;
    auto issueBlock = [&] {
      // The stage's previous block: every warp has released it (the first
      // lap passes: the phase before phase 0 counts as complete).
      Value emptyParity = arith::XOrIOp::create(
          e.b, slot.parity,
          arith::ConstantIntOp::create(e.b, e.b.getI32Type(), 1));
      waitParity(e, ringBarrier(e, 2 + ring, slot.stage), emptyParity);
      Value full = ringBarrier(e, ring, slot.stage);
      callIntrinsic(
          e, e.b.getI64Type(),
          "llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta",
          {full, llvmConstant(e, e.b.getI32Type(), panels * panelBytes)});
      Value dst = stageOffset(e, ring, slot.stage);
      auto ptr = LLVM::LLVMPointerType::get(e.b.getContext());
      Value map = LLVM::GEPOp::create(e.b, ptr, e.b.getI8Type(), e.t.tensorMaps,
                                      ArrayRef<LLVM::GEPArg>{128 * ring});
      // One box per panel at `offset` bytes into the stage.
      auto issue = [&](Value offset, ArrayRef<Value> coords) {
        for (int64_t p = 0; p < panels; ++p) {
          Value at = arith::AddIOp::create(
              e.b, arith::AddIOp::create(e.b, dst, offset),
              i64Constant(e, p * panelBytes));
          Value cluster = LLVM::AddrSpaceCastOp::create(
              e.b, LLVM::LLVMPointerType::get(e.b.getContext(), 7),
              sharedPointer(e, at));
          callIntrinsic(e, Type(), "llvm.nvvm.cp.async.bulk.tensor.g2s.tile.4d",
                        {cluster, full, map,
                         llvmConstant(e, e.b.getI32Type(), 64 * p), coords[0],
                         coords[1], coords[2],
                         llvmConstant(e, e.b.getI16Type(), 0),
                         llvmConstant(e, e.b.getI64Type(), 0),
                         llvmConstant(e, e.b.getI1Type(), 0),
                         llvmConstant(e, e.b.getI1Type(), 0),
                         llvmConstant(e, e.b.getI32Type(), 0)});
        }
      };
      // Contiguous: the map is {D, S, Hkv, B}, the box at (x, start, head,
      // batch). Paged: the map is {D, Hkv, page_size, pages}; a page size
      // that is a multiple of block-n gives the box {64, 1, block-n, 1} at
      // (x, head, start mod page_size, table[batch, start / page_size]): the
      // same dense rows; a smaller page (tmaPageBoxRows) one box {64, 1,
      // page_size, 1} per page of the block at (x, head, 0, page), landing
      // page_size rows further each. A page past the block's keys (a short
      // last block) is not read from the table: its box repeats the last
      // page with keys (the bytes are whole, so expect_tx stays; its K rows
      // are masked, its V rows zeroed as any row past `cols`).
      if (!blockTable) {
        issue(i64Constant(e, 0),
              {i32Of(e, start), i32Of(e, head), i32Of(e, batch)});
        return;
      }
      const int64_t pageSize = cast<MemRefType>(source.getType()).getDimSize(1);
      const int64_t boxRows = tmaPageBoxRows(pageSize, bn);
      assert(boxRows > 0 && "canUseTmaRing admits this page size");
      auto pageAt = [&](Value column) {
        return i32Of(e, arith::IndexCastOp::create(
                            e.b, e.b.getIndexType(),
                            memref::LoadOp::create(e.b, blockTable,
                                                   ValueRange{batch, column})));
      };
      Value first = e.divIdx(start, e.idx(pageSize));
      if (boxRows == bn) {
        issue(i64Constant(e, 0),
              {i32Of(e, head), i32Of(e, e.remIdx(start, e.idx(pageSize))),
               pageAt(first)});
        return;
      }
      Value last =
          e.divIdx(e.add(start, e.sub(cols, e.idx(1))), e.idx(pageSize));
      Value zero = llvmConstant(e, e.b.getI32Type(), 0);
      e.loop(e.idx(0), e.idx(bn / boxRows), [&](Value c) {
        Value column = arith::MinUIOp::create(e.b, e.add(first, c), last);
        Value offset = arith::IndexCastUIOp::create(
            e.b, e.b.getI64Type(),
            e.mulIdx(c, boxRows * wgmma::kPanelRowBytes));
        issue(offset, {i32Of(e, head), zero, pageAt(column)});
      });
      // Kept a loop: unrolled, its pages' coordinates and addresses outgrow
      // the producer's 24 registers at D > 128 (ptxas spilled 16-108 bytes).
      auto pages = cast<scf::ForOp>(&*std::prev(e.b.getInsertionPoint()));
      MLIRContext *ctx = e.b.getContext();
      auto noUnroll = LLVM::LoopUnrollAttr::get(
          ctx, /*disable=*/e.b.getBoolAttr(true), /*count=*/{},
          /*runtimeDisable=*/{}, /*full=*/{}, /*followupUnrolled=*/{},
          /*followupRemainder=*/{}, /*followupAll=*/{});
      pages->setAttr(kLoopAnnotationAttr,
                     LLVM::LoopAnnotationAttr::get(ctx, {}, {}, {}, noUnroll,
                                                   {}, {}, {}, {}, {}, {}, {},
                                                   {}, {}, {}, {}));
    };
    // The producer's issuing thread runs this alone; without a producer
    // warpgroup thread 0 issues.
    if (e.t.inProducer)
      issueBlock();
    else
      e.when(arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq, e.t.tid,
                                   e.idx(0)),
             issueBlock);
    e.store(e.add(slot.count, e.idx(1)), e.t.ringCounters, {e.idx(2 * ring)});
  });
}

Value mlir::kvattn::emitTmaAcquire(GpuEmitter &e, int ring, Value start) {
  RingSlot slot = ringSlot(e, 2 * ring + 1, start);
  waitParity(e, ringBarrier(e, ring, slot.stage), slot.parity,
             /*warpUniform=*/true);
  return slot.stage;
}

void mlir::kvattn::emitTmaRelease(GpuEmitter &e, int ring, Value start) {
  RingSlot slot = ringSlot(e, 2 * ring + 1, start);
  // The warp's lanes retired their wgmma reads (wait_group, a warpgroup
  // collective: the warp is converged here); lane 0 arrives for the warp.
  Value lane0 =
      arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq, e.t.lane, e.idx(0));
  e.when(lane0, [&] {
    callIntrinsic(e, e.b.getI64Type(),
                  "llvm.nvvm.mbarrier.arrive.scope.cta.space.cta",
                  {ringBarrier(e, 2 + ring, slot.stage),
                   llvmConstant(e, e.b.getI32Type(), 1)});
  });
  e.store(e.add(slot.count, e.idx(1)), e.t.ringCounters, {e.idx(2 * ring + 1)});
}

void mlir::kvattn::emitZeroValueTail(GpuEmitter &e, int ring, Value stage,
                                     Value cols, int64_t bn, int64_t dv) {
  e.when(e.lt(cols, e.idx(bn)), [&] {
    auto flatType = cast<MemRefType>(e.t.smemFlat.getType());
    Type elt = flatType.getElementType();
    const int64_t eltBytes = elt.getIntOrFloatBitWidth() / 8;
    const int64_t first = e.t.ringStage[ring][0] / eltBytes;
    const int64_t step =
        (e.t.ringStage[ring][1] - e.t.ringStage[ring][0]) / eltBytes;
    Value base = e.add(e.idx(first), e.mulIdx(stage, step));
    constexpr int64_t kChunk = 8;
    const int64_t perRow = dv / kChunk, panel = wgmma::kPanelColumns;
    auto chunkType = VectorType::get({kChunk}, elt);
    Value zeros =
        arith::ConstantOp::create(e.b, chunkType, e.b.getZeroAttr(chunkType));
    e.cooperative(e.idx(bn * perRow), [&](Value i) {
      Value r = e.divIdx(i, e.idx(perRow));
      Value x = e.mulIdx(e.remIdx(i, e.idx(perRow)), kChunk);
      e.when(arith::CmpIOp::create(e.b, arith::CmpIPredicate::uge, r, cols),
             [&] {
               // WgmmaLayout.h's panelElementOffset.
               Value c = e.remIdx(x, e.idx(panel));
               Value swizzled = arith::XOrIOp::create(
                   e.b, c, e.mulIdx(e.remIdx(r, e.idx(8)), 8));
               Value at = e.add(
                   e.add(base, e.mulIdx(e.divIdx(x, e.idx(panel)), bn * panel)),
                   e.add(e.mulIdx(r, panel), swizzled));
               vector::StoreOp::create(e.b, zeros, e.t.smemFlat, ValueRange{at},
                                       /*nontemporal=*/false, llvm::Align(16));
             });
    });
    emitProxyFence(e); // the zeros, before wgmma reads the stage
    e.barrier();
  });
}

namespace {

/// The accumulator's values, one per register of the lane
/// (FragmentLayout::registerOfWgmma order: Dv / 2 of them).
SmallVector<Value> loadAccumulator(GpuEmitter &e) {
  const FragmentLayout &layout = e.t.layout;
  const int64_t regs = cast<MemRefType>(e.t.acc.getType()).getNumElements();
  SmallVector<Value> acc;
  for (int64_t i = 0; i < regs; ++i) {
    FragmentLayout::WgmmaEntry entry = layout.registerOfWgmma(i);
    acc.push_back(e.loadAcc(entry.k, entry.slice, entry.el));
  }
  return acc;
}

void storeAccumulator(GpuEmitter &e, ArrayRef<Value> acc) {
  const FragmentLayout &layout = e.t.layout;
  for (auto [i, v] : llvm::enumerate(acc)) {
    FragmentLayout::WgmmaEntry entry =
        layout.registerOfWgmma(static_cast<int64_t>(i));
    e.storeAcc(v, entry.k, entry.slice, entry.el);
  }
}

/// The deferred P.V's operands (intra-warpgroup overlap), formed before
/// the wgmma.fence: the stashed probabilities as A registers and the
/// descriptors of the V stage of the block at key `start`.
struct DeferredPV {
  SmallVector<SmallVector<Value, 4>> as;
  SmallVector<Value> descs;
};

DeferredPV loadDeferredPV(GpuEmitter &e, int64_t bn) {
  DeferredPV pv;
  Value start = e.load(e.t.pendingBlock, {e.idx(0)});
  Value vAddress = tmaStageAddress(e, 1, tmaBlockStage(e, 1, start));
  SmallVector<wgmma::StepDescriptor> vSteps;
  for (int64_t kk = 0; kk < bn / 16; ++kk) {
    SmallVector<Value, 4> a;
    for (int64_t i = 0; i < 4; ++i)
      a.push_back(e.load(e.t.pendingProbs, {e.idx(4 * kk + i)}));
    pv.as.push_back(a);
    vSteps.push_back(wgmma::mnMajorStep(bn, kk));
  }
  pv.descs = stepDescriptors(e, vAddress, Value(), vSteps);
  return pv;
}

/// acc += P . V of the deferred block: BN / 16 RS wgmmas on the
/// accumulator registers as they are (rescaled by the softmax that
/// deferred it); the caller fences before and commits after.
void issueDeferredPV(GpuEmitter &e, const DeferredPV &pv) {
  Type elt = cast<MemRefType>(e.t.stage.getType()).getElementType();
  SmallVector<Value> acc = loadAccumulator(e);
  const int64_t dv = 2 * static_cast<int64_t>(acc.size());
  for (auto [a, desc] : llvm::zip_equal(pv.as, pv.descs))
    acc = emitWgmma(e, elt, dv, acc, Value(), a, desc, /*transB=*/true);
  storeAccumulator(e, acc);
}

/// Accumulator registers tied to this point, after the wgmma.wait_group
/// that retired the wgmma writing them: empty asm statements that read and
/// rewrite them (CUTLASS's warpgroup_fence_operand), so that LLVM moves no
/// use of them above the wait (reading them there reads registers the
/// wgmma still writes: the emulator's racecheck names it). 32 registers
/// per statement.
SmallVector<Value> fenceRegisters(GpuEmitter &e, ArrayRef<Value> values) {
  constexpr size_t kPerAsm = 32;
  MLIRContext *ctx = e.b.getContext();
  SmallVector<Value> out;
  for (size_t first = 0; first < values.size(); first += kPerAsm) {
    ArrayRef<Value> chunk =
        values.slice(first, std::min(kPerAsm, values.size() - first));
    std::string constraints;
    for (size_t i = 0; i < chunk.size(); ++i)
      constraints += (i ? ",=f" : "=f");
    for (size_t i = 0; i < chunk.size(); ++i)
      constraints += "," + std::to_string(i);
    SmallVector<Type> fields(chunk.size(), e.b.getF32Type());
    auto asmOp = LLVM::InlineAsmOp::create(
        e.b, LLVM::LLVMStructType::getLiteral(ctx, fields), chunk, "",
        constraints,
        /*has_side_effects=*/true, /*is_align_stack=*/false,
        LLVM::tailcallkind::TailCallKind::None,
        LLVM::AsmDialectAttr::get(ctx, LLVM::AsmDialect::AD_ATT),
        /*operand_attrs=*/ArrayAttr());
    for (size_t i = 0; i < chunk.size(); ++i)
      out.push_back(LLVM::ExtractValueOp::create(
          e.b, asmOp.getResult(0), ArrayRef<int64_t>{static_cast<int64_t>(i)}));
  }
  return out;
}

/// fenceRegisters over the lane's accumulator.
void fenceAccumulator(GpuEmitter &e) {
  storeAccumulator(e, fenceRegisters(e, loadAccumulator(e)));
}

} // namespace

void mlir::kvattn::emitDeferPV(GpuEmitter &e, TileSoftmaxOp op) {
  Type elt = cast<MemRefType>(e.t.stage.getType()).getElementType();
  const int64_t bn = cast<MemRefType>(op.getScores().getType()).getDimSize(1);
  for (int64_t kk = 0; kk < bn / 16; ++kk)
    for (auto [i, entry] : llvm::enumerate(e.t.layout.aOperandEntries(kk)))
      e.store(packPair(e, elt, e.loadScore(entry.k, entry.slice, 0),
                       e.loadScore(entry.k, entry.slice, 1)),
              e.t.pendingProbs, {e.idx(4 * kk + static_cast<int64_t>(i))});
  e.store(op.getStart(), e.t.pendingBlock, {e.idx(0)});
  e.store(e.idx(1), e.t.pendingBlock, {e.idx(1)});
}

void mlir::kvattn::emitWaitForDeferredPV(GpuEmitter &e) {
  NVVM::WgmmaWaitGroupSyncOp::create(e.b, 0);
  fenceAccumulator(e);
  emitTmaRelease(e, 1, e.load(e.t.pendingBlock, {e.idx(0)}));
}

void mlir::kvattn::emitFlushDeferredPV(GpuEmitter &e) {
  Value pending = e.load(e.t.pendingBlock, {e.idx(1)});
  e.when(
      arith::CmpIOp::create(e.b, arith::CmpIPredicate::ne, pending, e.idx(0)),
      [&] {
        DeferredPV pv = loadDeferredPV(e, ringRows(e));
        wgmmaFence(e);
        issueDeferredPV(e, pv);
        wgmmaCommitAndWait(e);
        fenceAccumulator(e);
        emitTmaRelease(e, 1, e.load(e.t.pendingBlock, {e.idx(0)}));
      });
}

namespace {
void emitScoresWithWgmma(GpuEmitter &e, TileQKOp op, Value kAddress, int64_t bn,
                         int64_t bm, int64_t d);
} // namespace

void mlir::kvattn::lowerQKWithWgmma(GpuEmitter &e, TileQKOp op,
                                    TileSoftmaxOp prefetch) {
  // Intra-warpgroup overlap: the KV block peeled off the loop (its tile.qk
  // issues no pending P.V) starts with a PTX comment, which emits nothing
  // but tells the emulated GPU where that trip's code begins (its counters
  // count it as a KV block; gpu-emulator.md).
  if (e.t.overlapPV && !issuesPendingPV(op)) {
    MLIRContext *ctx = e.b.getContext();
    LLVM::InlineAsmOp::create(
        e.b, /*res=*/Type(), ValueRange(), kPeeledKvBlockMarker, "",
        /*has_side_effects=*/true, /*is_align_stack=*/false,
        LLVM::tailcallkind::TailCallKind::None,
        LLVM::AsmDialectAttr::get(ctx, LLVM::AsmDialect::AD_ATT),
        /*operand_attrs=*/ArrayAttr());
  }
  const int64_t bn = cast<MemRefType>(op.getScores().getType()).getDimSize(1);
  // The query in the operand type (assign-tile-layouts).
  auto qType = cast<MemRefType>(op.getQTile().getType());
  const int64_t bm = qType.getDimSize(0), d = qType.getDimSize(1);
  // The TMA ring: K of this block was issued one step ahead (or here), V
  // of this block is issued now (its stage is free once every warp has
  // released it), then the K stage is awaited; no CTA barrier.
  // A producer warpgroup issues both (Threads::producerWarps).
  Value kAddress;
  if (e.t.tma) {
    if (!e.t.producerWarps && !e.t.prefetchKeys)
      emitTmaIssue(e, 0, op.getKey(), op.getBlockTable(), op.getBatch(),
                   op.getKvHead(), op.getStart(), op.getCols());
    if (prefetch && !e.t.producerWarps)
      emitTmaIssue(e, 1, prefetch.getValue(), prefetch.getBlockTable(),
                   prefetch.getBatch(), prefetch.getKvHead(),
                   prefetch.getStart(), prefetch.getCols());
    Value kStage = emitTmaAcquire(e, 0, op.getStart());
    kAddress = tmaStageAddress(e, 0, kStage);
    // The latent form's V (the stage's first Dv columns) past the block's
    // keys, zeroed before any warpgroup's wgmma reads the stage.
    if (e.t.latent)
      emitZeroValueTail(e, 0, kStage, op.getCols(), bn, e.t.latentValueCols);
  }
  // The copy groups as on mma.sync (lowerQKOnTensorCores): K of this block
  // was issued one step ahead (or here), V of this block is issued after
  // the barrier that says K has landed and every warpgroup has finished the
  // previous P.V. The latent form's one K stage is also its V: every
  // warpgroup's previous P.V must be done before the copies overwrite it.
  // The waits, barriers and the proxy fence (this thread's K copies before
  // wgmma reads them) are the op's kvattn.stage_sync (StageSync.cpp).
  if (!e.t.tma) {
    emitQKStageCopies(e, op, prefetch);
    kAddress = sharedAddress(e, e.t.stage);
  }

  // Score shares (a value split): the row group's score warpgroup computes
  // the block's scores alone (Threads::scoreShares); the others have none.
  e.whenScoring([&] { emitScoresWithWgmma(e, op, kAddress, bn, bm, d); });
}

namespace {

/// Q.K^T of tile.qk on wgmma, from the K stage at `kAddress`, into the
/// lane's score registers (scaled, -inf past the block's keys).
void emitScoresWithWgmma(GpuEmitter &e, TileQKOp op, Value kAddress, int64_t bn,
                         int64_t bm, int64_t d) {
  // The staged type (an FP8 cache's K is converted to the query's).
  Type elt = cast<MemRefType>(e.t.stage.getType()).getElementType();
  Value qAddress = sharedAddress(e, op.getQTile());
  Value groupRows = warpgroupRowBytes(e);
  // (The descriptors before the fence, as for P.V.)
  SmallVector<wgmma::StepDescriptor> qSteps, kSteps;
  for (int64_t kk = 0; kk < d / 16; ++kk) {
    qSteps.push_back(wgmma::kMajorStep(bm, 0, kk));
    kSteps.push_back(wgmma::kMajorStep(bn, 0, kk));
  }
  SmallVector<Value> descAs = stepDescriptors(e, qAddress, groupRows, qSteps);
  SmallVector<Value> descBs = stepDescriptors(e, kAddress, Value(), kSteps);
  // Intra-warpgroup overlap: the previous block's P.V, deferred by its
  // softmax, is issued right after this Q.K^T and runs during this block's
  // mask and softmax (which waits for it before rescaling).
  const bool pending = e.t.overlapPV && issuesPendingPV(op);
  DeferredPV pv;
  if (pending)
    pv = loadDeferredPV(e, bn);
  // Ping-pong with the overlap: the turn is this tile.qk's two GEMMs.
  if (e.t.overlapPV)
    emitPingPongWait(e);
  wgmmaFence(e);
  // The first step writes the scores (scale-d = 0): no zeroed registers.
  SmallVector<Value> acc(bn / 2, e.f32(0));
  for (int64_t kk = 0; kk < d / 16; ++kk)
    acc = emitWgmma(e, elt, bn, acc, descAs[kk], {}, descBs[kk],
                    /*transB=*/false, /*accumulate=*/kk > 0);
  NVVM::WgmmaGroupSyncAlignedOp::create(e.b);
  if (pending) {
    issueDeferredPV(e, pv);
    NVVM::WgmmaGroupSyncAlignedOp::create(e.b);
  }
  // Ping-pong: this warpgroup's turn (the previous P.V and this Q.K^T)
  // ends with the issue; the other's softmax is done, its turn begins.
  emitPingPongPass(e);
  // The Q.K^T's group (the older one when a P.V follows it).
  NVVM::WgmmaWaitGroupSyncOp::create(e.b, pending ? 1 : 0);
  acc = fenceRegisters(e, acc);
  // The K stage may be refilled (the latent form's, whose V it is, after
  // P.V; only the latent form shares its scores, so every warpgroup that
  // holds the stage passes here).
  assert(!e.t.scoreShares || e.t.latent);
  if (e.t.tma && !e.t.latent)
    emitTmaRelease(e, 0, op.getStart());
  const FragmentLayout &layout = e.t.layout;
  // An FP8 K's scale per tensor or per KV head, on the dot products (the
  // stage holds the exact codes: foldedKvScale), times the power of two
  // each row of a query converted into f16 was scaled down by (dotFactors:
  // one per row of the lane).
  SmallVector<Value> dotFactors = e.dotFactors(foldedKvScale(
      e.b, e.b.getLoc(), op.getKey(), op.getKvScale(), op.getKvHead()));
  for (int64_t i = 0; i < bn / 2; ++i) {
    FragmentLayout::WgmmaEntry entry = layout.registerOfWgmma(i);
    Value dot =
        dotFactors.empty() ? acc[i] : e.mulf(acc[i], dotFactors[entry.k]);
    Value s = e.t.rawScores ? dot : emitScaledScore(e, op, dot, kLog2E);
    e.storeScore(s, entry.k, entry.slice, entry.el);
  }
  // -inf past the block's keys, only in a block shorter than block-n: the
  // register's column 8j + el + 2q is inside while 8j + el < cols - 2q (a
  // compare with an immediate; the lane's columns, each loop-invariant,
  // would otherwise be hoisted out of the KV loop into registers of their
  // own).
  e.when(e.lt(op.getCols(), e.idx(bn)), [&] {
    Value left = e.sub(op.getCols(), e.mulIdx(e.t.quad, layout.elementsPerRow));
    for (int64_t j = 0; j < layout.slices(bn); ++j)
      for (int k = 0; k < layout.rowsPerLane; ++k)
        for (int el = 0; el < layout.elementsPerRow; ++el) {
          Value inside = e.cmpi(arith::CmpIPredicate::slt,
                                e.idx(layout.columnOffset(j, el)), left);
          e.storeScore(arith::SelectOp::create(
                           e.b, inside, e.loadScore(k, j, el), e.negInf()),
                       k, j, el);
        }
  });
}

} // namespace

void mlir::kvattn::emitPVWithWgmma(GpuEmitter &e, TileSoftmaxOp op, Value stage,
                                   ArrayRef<Value> alpha, Value vAddress) {
  // The staged type (an FP8 cache's V is converted to the query's).
  Type elt = cast<MemRefType>(e.t.stage.getType()).getElementType();
  const int64_t bn = cast<MemRefType>(op.getScores().getType()).getDimSize(1);
  // A value split: the warpgroup's Dv / valueSplit columns of V, panels
  // valueSlice * Dv / valueSplit / 64 on.
  const int64_t dv =
      cast<MemRefType>(op.getAcc().getType()).getDimSize(1) / e.t.valueSplit;
  const FragmentLayout &layout = e.t.layout;
  SmallVector<Value> acc;
  for (int64_t i = 0; i < dv / 2; ++i) {
    FragmentLayout::WgmmaEntry entry = layout.registerOfWgmma(i);
    acc.push_back(
        e.mulf(alpha[entry.k], e.loadAcc(entry.k, entry.slice, entry.el)));
  }
  if (!vAddress)
    vAddress = sharedAddress(e, stage);
  if (e.t.valueSplit > 1) {
    Value panels = e.threadConstant("wgmma:values", [&](GpuEmitter &h) {
      return h.mulIdx(h.t.valueSlice,
                      dv / wgmma::kPanelColumns * bn * wgmma::kPanelRowBytes);
    });
    vAddress = arith::AddIOp::create(
        e.b, vAddress,
        arith::IndexCastUIOp::create(e.b, e.b.getI64Type(), panels));
  }
  // Every A operand (P as 16-bit pairs) and B descriptor before the fence:
  // a register written between wgmma.fence and the wgmma that reads it
  // makes ptxas inject a warpgroup.arrive before that wgmma (C7519).
  const int64_t steps = bn / 16;
  auto packProbabilities = [&] {
    SmallVector<Value> words;
    for (int64_t kk = 0; kk < steps; ++kk)
      for (FragmentLayout::Entry entry : layout.aOperandEntries(kk))
        words.push_back(packPair(e, elt, e.loadScore(entry.k, entry.slice, 0),
                                 e.loadScore(entry.k, entry.slice, 1)));
    return words;
  };
  SmallVector<Value> words;
  if (!e.t.scoreShares) {
    words = packProbabilities();
  } else {
    // Score shares: thread t of every warpgroup of the row group holds the
    // A registers of the same rows, so the score warpgroup's thread t
    // publishes its own (one 16-byte vector per k16 step) and thread t of
    // the others reads them. The words are rewritten only after the next
    // block's maxima barrier, which every reader reaches after this P.V.
    auto vector4 = VectorType::get({4}, e.b.getI32Type());
    Value thread = e.threadConstant("sharethread", [](GpuEmitter &h) {
      return h.remIdx(h.t.tid, h.idx(128));
    });
    auto slot = [&](int64_t kk) {
      Value step = e.add(e.mulIdx(e.t.rowGroup, steps), e.idx(kk));
      return e.mulIdx(e.add(e.mulIdx(step, 128), thread), 4);
    };
    SmallVector<Type> types(4 * steps, e.b.getI32Type());
    Value scoring = e.scoringWarpgroup();
    SmallVector<Value> own = e.ifElse(
        scoring, types,
        [&] {
          SmallVector<Value> packed = packProbabilities();
          for (int64_t kk = 0; kk < steps; ++kk)
            vector::StoreOp::create(
                e.b,
                vector::FromElementsOp::create(
                    e.b, vector4, ArrayRef(packed).slice(4 * kk, 4)),
                e.t.shareProbs, ValueRange{slot(kk)},
                /*nontemporal=*/false, llvm::Align(16));
          return packed;
        },
        [&] {
          // (Never read: the other warpgroups take the exchange's words
          // below. Poison, not zeros, which ptxas materialised per block.)
          return SmallVector<Value>(
              types.size(), LLVM::PoisonOp::create(e.b, e.b.getI32Type()));
        });
    e.barrier();
    words = e.ifElse(
        scoring, types, [&] { return own; },
        [&] {
          SmallVector<Value> read;
          for (int64_t kk = 0; kk < steps; ++kk) {
            Value w = vector::LoadOp::create(
                e.b, vector4, e.t.shareProbs, ValueRange{slot(kk)},
                /*nontemporal=*/false, llvm::Align(16));
            for (int64_t i = 0; i < 4; ++i)
              read.push_back(
                  vector::ExtractOp::create(e.b, w, ArrayRef<int64_t>{i}));
          }
          return read;
        });
  }
  SmallVector<SmallVector<Value, 4>> as;
  SmallVector<wgmma::StepDescriptor> vSteps;
  for (int64_t kk = 0; kk < steps; ++kk) {
    as.push_back(SmallVector<Value, 4>(ArrayRef(words).slice(4 * kk, 4)));
    vSteps.push_back(wgmma::mnMajorStep(bn, kk));
  }
  SmallVector<Value> descs = stepDescriptors(e, vAddress, Value(), vSteps);
  // Ping-pong: this warpgroup's turn begins with its P.V.
  emitPingPongWait(e);
  wgmmaFence(e);
  for (int64_t kk = 0; kk < static_cast<int64_t>(as.size()); ++kk)
    acc = emitWgmma(e, elt, dv, acc, Value(), as[kk], descs[kk],
                    /*transB=*/true);
  wgmmaCommitAndWait(e);
  acc = fenceRegisters(e, acc);
  // The V stage may be refilled (the latent form's: the K stage).
  if (e.t.tma)
    emitTmaRelease(e, e.t.latent ? 0 : 1, op.getStart());
  storeAccumulator(e, acc);
}
