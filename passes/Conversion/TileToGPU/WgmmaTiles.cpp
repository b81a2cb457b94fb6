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
//   accumulator, then one commit_group and wait_group 0. The accumulator
//   d[4j + r] of a thread is its score entry (row r / 2, slice j, element
//   r % 2): FragmentLayout::wgmmaM64NK16Accumulator, the 16-row warps'
//   ownership, so the mask and the softmax are the tensor-core lowering's.
// - P.V: m64n{Dv}k16 with A from registers (RS): the lane's probabilities
//   of slices 2kk, 2kk + 1 rounded to 16-bit pairs are the A fragment of
//   step kk (as for mma.sync), B = the V stage, MN-major (imm-trans-b = 1);
//   the rescaled accumulator is d.
// - staging stays cp.async (TensorCoreTiles.cpp's emitAsyncStage) into the
//   panelled tiles (panelIndices); the writers execute fence.proxy.async
//   after their copies land and before the barrier that publishes them,
//   so that the async proxy (wgmma) sees them.
//
// wgmma.mma_async has no LLVM intrinsic: it is inline PTX of the form
// MLIR's NVVM dialect writes (scale-d through setp.ne.b32), which the
// emulated GPU reads (lib/GpuEmu/DeviceModule.cpp, hopperInlineSite).
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/TileToGPU/TensorCoreTiles.h"
#include "passes/Conversion/TileToGPU/WgmmaLayout.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

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
SmallVector<Value> emitWgmma(GpuEmitter &e, Type elt, int64_t n,
                             ArrayRef<Value> acc, Value descA,
                             ArrayRef<Value> aRegs, Value descB, bool transB) {
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
      arith::ConstantIntOp::create(e.b, e.b.getI32Type(), 1).getResult());
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
  Value group = e.divIdx(e.t.warp, e.idx(layout.warpsPerMma));
  Value bytes = e.mulIdx(group, layout.mmaRows() * wgmma::kPanelRowBytes);
  return arith::IndexCastUIOp::create(e.b, e.b.getI64Type(), bytes);
}

} // namespace

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

void mlir::kvattn::lowerQKWithWgmma(GpuEmitter &e, TileQKOp op,
                                    TileSoftmaxOp prefetch) {
  Type elt = cast<MemRefType>(op.getKey().getType()).getElementType();
  const int64_t bn = cast<MemRefType>(op.getScores().getType()).getDimSize(1);
  Value q16 = halfView(e, op.getQTile(), elt);
  auto qType = cast<MemRefType>(q16.getType());
  const int64_t bm = qType.getDimSize(0), d = qType.getDimSize(1);
  // The copy groups as on mma.sync (lowerQKOnTensorCores): K of this block
  // was issued one step ahead (or here), V of this block is issued after
  // the barrier that says K has landed and every warpgroup has finished the
  // previous P.V.
  if (!e.t.prefetchKeys)
    emitAsyncStage(e, op.getKey(), op.getBlockTable(), op.getBatch(),
                   op.getKvHead(), op.getStart(), op.getCols(), e.t.stage);
  emitAsyncWait(e, 0);
  emitProxyFence(e); // this thread's K copies, before wgmma reads them
  e.barrier();
  if (prefetch)
    emitAsyncStage(e, prefetch.getValue(), prefetch.getBlockTable(),
                   prefetch.getBatch(), prefetch.getKvHead(),
                   prefetch.getStart(), prefetch.getCols(), e.t.stageV,
                   /*commit=*/true, prefetch.getKeyValid());

  Value qAddress = sharedAddress(e, q16);
  Value kAddress = sharedAddress(e, e.t.stage);
  Value groupRows = warpgroupRowBytes(e);
  wgmmaFence(e);
  SmallVector<Value> acc(bn / 2, e.f32(0));
  for (int64_t kk = 0; kk < d / 16; ++kk) {
    Value descA =
        descriptor(e, qAddress, groupRows, wgmma::kMajorStep(bm, 0, kk));
    Value descB =
        descriptor(e, kAddress, Value(), wgmma::kMajorStep(bn, 0, kk));
    acc = emitWgmma(e, elt, bn, acc, descA, {}, descB, /*transB=*/false);
  }
  wgmmaCommitAndWait(e);
  const FragmentLayout &layout = e.t.layout;
  for (int64_t i = 0; i < bn / 2; ++i) {
    FragmentLayout::WgmmaEntry entry = layout.registerOfWgmma(i);
    Value s = e.t.rawScores ? acc[i] : emitScaledScore(e, op, acc[i], kLog2E);
    e.storeScore(s, entry.k, entry.slice, entry.el);
  }
  // -inf past the block's keys, only in a block shorter than block-n.
  e.when(e.lt(op.getCols(), e.idx(bn)), [&] {
    for (int64_t j = 0; j < layout.slices(bn); ++j)
      for (int k = 0; k < layout.rowsPerLane; ++k)
        for (int el = 0; el < layout.elementsPerRow; ++el) {
          Value inside = e.lt(e.accColumn(j, el), op.getCols());
          e.storeScore(arith::SelectOp::create(
                           e.b, inside, e.loadScore(k, j, el), e.negInf()),
                       k, j, el);
        }
  });
}

void mlir::kvattn::emitPVWithWgmma(GpuEmitter &e, TileSoftmaxOp op, Value stage,
                                   ArrayRef<Value> alpha) {
  Type elt = cast<MemRefType>(op.getValue().getType()).getElementType();
  const int64_t bn = cast<MemRefType>(op.getScores().getType()).getDimSize(1);
  const int64_t dv = cast<MemRefType>(op.getAcc().getType()).getDimSize(1);
  const FragmentLayout &layout = e.t.layout;
  SmallVector<Value> acc;
  for (int64_t i = 0; i < dv / 2; ++i) {
    FragmentLayout::WgmmaEntry entry = layout.registerOfWgmma(i);
    acc.push_back(
        e.mulf(alpha[entry.k], e.loadAcc(entry.k, entry.slice, entry.el)));
  }
  Value vAddress = sharedAddress(e, stage);
  wgmmaFence(e);
  for (int64_t kk = 0; kk < bn / 16; ++kk) {
    SmallVector<Value, 4> a;
    for (FragmentLayout::Entry entry : layout.aOperandEntries(kk))
      a.push_back(packPair(e, elt, e.loadScore(entry.k, entry.slice, 0),
                           e.loadScore(entry.k, entry.slice, 1)));
    Value descB = descriptor(e, vAddress, Value(), wgmma::mnMajorStep(bn, kk));
    acc = emitWgmma(e, elt, dv, acc, Value(), a, descB, /*transB=*/true);
  }
  wgmmaCommitAndWait(e);
  for (int64_t i = 0; i < dv / 2; ++i) {
    FragmentLayout::WgmmaEntry entry = layout.registerOfWgmma(i);
    e.storeAcc(acc[i], entry.k, entry.slice, entry.el);
  }
}
