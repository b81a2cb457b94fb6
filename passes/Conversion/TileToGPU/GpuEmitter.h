//===- GpuEmitter.h - thread mapping vocabulary -----------------*- C++ -*-===//
//
// The thread coordinates of a kernel and the loop vocabulary over them,
// shared by the scalar tile lowering (TileToGPU.cpp) and the tensor-core
// one (TensorCoreTiles.cpp). See TileToGPU.cpp for the thread mapping.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_CONVERSION_GPUEMITTER_H
#define KVATTN_PASSES_CONVERSION_GPUEMITTER_H

#include "passes/Conversion/TileToCPU/LoopEmitter.h"
#include "passes/Conversion/TileToGPU/FragmentLayout.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "llvm/ADT/StringMap.h"

namespace mlir {
namespace kvattn {

/// The type of a lane's private array (registers) for a warp tile
/// `columns` wide: [rowsPerLane][slices][elementsPerRow].
inline MemRefType privateTileType(const FragmentLayout &layout, int64_t columns,
                                  Type element) {
  return MemRefType::get(
      {layout.rowsPerLane, layout.slices(columns), layout.elementsPerRow},
      element);
}

/// The C++ description of a #kvattn.fragment_layout (a verified one):
/// mma.sync's m16n8k16 fragment of `tiles_per_warp` m16 tiles, or wgmma's
/// m64nNk16 (the operand kind does not change who owns what).
inline FragmentLayout fragmentLayoutOf(FragmentLayoutAttr attr) {
  if (attr.getShape() == MmaShape::wgmma_m64nNk16)
    return FragmentLayout::wgmmaM64NK16Accumulator();
  return FragmentLayout::mmaM16N8K16Accumulator(attr.getTilesPerWarp());
}

/// Values that depend only on the thread (shared-memory offsets of its
/// ldmatrix and cp.async operands, ...), computed once per program at the
/// kernel's entry, after the thread coordinates, instead of in every KV
/// block (docs/gpu-lowering.md, "Address arithmetic"). `last` is the last
/// operation of that region: new ones go after it, in creation order, so a
/// constant may use an earlier one.
struct ThreadConstants {
  Operation *last = nullptr;
  llvm::StringMap<Value> values;
};

/// The thread coordinates of a kernel, created once at its entry.
struct Threads {
  /// Which lane owns which score, probability and accumulator entry
  /// (docs/gpu-lowering.md, "The thread mapping"): the m16n8k16
  /// accumulator fragment, for the scalar lowering too.
  FragmentLayout layout = FragmentLayout::mmaM16N8K16Accumulator();
  /// `quad`: the lane's index within its row's lanes (lane % lanesPerRow).
  Value tid, warp, lane, quad;
  int64_t count;
  Value stage; // the K/V staging block in shared memory
  /// 16-bit K/V with 16-aligned head dims: a second staging block for V
  /// (so V can be loaded while Q.K^T runs); null otherwise.
  Value stageV;
  /// The latent form (tile.softmax_update latent, DeepSeek MLA): V is the
  /// first Dv columns of the K stage, which P.V reads where Q.K^T did; no
  /// V block is copied.
  bool latent = false;
  int64_t latentValueCols = 0; ///< the latent form's Dv
  /// Warps that share each warp's query rows (SharedMemoryLayout::
  /// valueSplit; the latent form's Dv = 512): `warp` is then the row group
  /// (tid / 32 / valueSplit) and `valueSlice` (tid / 32 % valueSplit) the
  /// warp's share: output columns [valueSlice * Dv / valueSplit, ...) of the
  /// group's rows, and the same share of each block's 8-key slices in
  /// Q.K^T. 1 and null otherwise. On wgmma the sharing warps are whole
  /// warpgroups: warpgroup g takes slice g % valueSplit of row group
  /// g / valueSplit, and `warp` is the warp's index among its row group's
  /// 16-row warps (4 (g / valueSplit) + tid / 32 % 4).
  int64_t valueSplit = 1;
  Value valueSlice;
  /// wgmma: the warpgroup's row group (64 rows each), warp-uniform to
  /// ptxas (a shuffle from lane 0); valueSlice derives from it too.
  Value rowGroup;
  /// A wgmma value split (SharedMemoryLayout::shareExchange): the row
  /// group's first warpgroup (value slice 0, scoringWarpgroup()) computes
  /// Q.K^T, the mask and the probabilities of all of a block's keys, in
  /// m64nBNk16 steps that read the K stage once (FlashMLA's schedule); the
  /// others only rescale their accumulator slices and compute their P.V.
  /// It publishes the rows' maxima through `shareMax` ([BM] f32; the row
  /// sums at the store) and the probabilities, as
  /// P.V's A registers, through `shareProbs` (i32 words: one 16-byte vector
  /// per thread and k16 step, [row group][step][128 threads]).
  bool scoreShares = false;
  Value shareMax, shareProbs;
  /// Whether tile.qk and the P.V product of tile.softmax_update run on
  /// tensor cores (mma.sync m16n8k16, operands through ldmatrix).
  bool tensorCores = false;
  /// sm_90a (tensor cores too): Q.K^T and P.V as warpgroup wgmma.mma_async
  /// (WgmmaTiles.cpp), the 16-bit tiles in 64-column panels
  /// (panelIndices) and the layout wgmmaM64NK16Accumulator.
  bool wgmma = false;
  /// FP8 K/V are converted with cvt.rn.f16x2.{e4m3x2,e5m2x2} (sm_89 and
  /// later) instead of the software decode (Fp8.h).
  bool hardwareFp8 = false;
  /// A bf16 query converted into an FP8 cache's f16 stage
  /// (queryConvertsToF16): the lane's private memref<rowsPerLane x f32>, for
  /// each of its rows the power of two 2^s tile.load_q scaled the row down
  /// by (1 unless a value of the row would not be finite in f16), which
  /// tile.qk multiplies the row's dot products by. Null otherwise.
  Value queryScale;
  /// Tensor cores with tile.prefetch in the program: each K block is
  /// already in flight when its tile.qk runs (issued one step ahead).
  bool prefetchKeys = false;
  /// sm_90a with kvattn.tma: K and V arrive by TMA through two-stage
  /// mbarrier rings (WgmmaTiles.cpp, emitTmaIssue / emitTmaAcquire /
  /// emitTmaRelease). `tensorMaps` is the kernel's tensor_maps argument
  /// (!llvm.ptr: K's map, then V's), `smemBase` the shared address of the
  /// dynamic shared memory (i64), `smemFlat` its 16-bit view,
  /// `ringStage[r][s]` the byte offset of stage s of ring r (0 K, 1 V),
  /// `barrierOffset` that of the mbarriers (full K, full V, empty K, empty
  /// V; two each), `ringCounters` the thread's private counts (K issued, K
  /// consumed, V issued, V consumed; memref<4xindex>).
  bool tma = false;
  Value tensorMaps, smemBase, smemFlat, ringCounters;
  /// The dynamic shared memory as a shared pointer (!llvm.ptr<3>): the
  /// mbarrier and TMA operands are GEPs from it (an integer shared address
  /// would be 32 bits, which the emulated GPU's host pointers are not).
  Value smemPointer;
  /// Warp specialisation (kvattn.gpu_schedule's producer_warps): the
  /// block's warps after the `count / 32` consumers' form a producer
  /// warpgroup whose first thread issues every TMA copy (a clone of the
  /// program's control flow); the consumers only acquire and release the
  /// stages, and their CTA barriers are a named barrier over their `count`
  /// threads (barrier()).
  int64_t producerWarps = 0;
  /// The code being written runs in the producer's issuing thread alone
  /// (emitTmaIssue then needs no thread-0 test of its own).
  bool inProducer = false;
  int64_t ringStage[2][2] = {{0, 0}, {0, 0}};
  int64_t ringStages[2] = {2, 2}; ///< stages of the K and the V ring
  int64_t barrierOffset = 0;
  /// The lane's accumulator entries, private to the thread:
  /// [2 rows][ceil(Dv / 8) slices][2] f32, indexed by compile-time
  /// constants only, so that they live in registers across the KV loop.
  Value acc;
  /// Tensor cores only: the lane's scores and probabilities, private in
  /// the same layout ([2][BN / 8][2]): every access on that path is to the
  /// lane's own entries (the mma accumulator of Q.K^T is the A operand of
  /// P.V), so the score tile needs no shared memory.
  Value scores;
  /// Tensor cores with the f32 score tile in shared memory (and block-n a
  /// multiple of 32): its columns are swizzled per row (scoreColumn), so
  /// that the lanes' accesses, 8 rows x 4 quads of a warp, hit 32 banks.
  bool swizzleScores = false;
  /// Tensor cores: the running max and sum of the lane's two rows, private
  /// ([stat: 0 max, 1 sum][k] f32, constant indices: registers). The four
  /// lanes of a row hold the same values (quad reductions), so the row
  /// statistics need neither shared memory nor a barrier; null otherwise
  /// (the [BM] tiles in shared memory, published by one lane per row).
  Value rowStats;
  /// Tensor cores, D <= 128: the warp's query A fragments, loaded once per
  /// program by tile.load_q and kept in registers across the KV loop
  /// ([D / 16][4] operand registers, constant indices only); null when
  /// Q.K^T reads them from the shared query tile in every block.
  Value qFragments;
  /// The units of the scores and running maxima (docs/gpu-lowering.md,
  /// "Softmax in FMA form"). Every probability is
  /// exp2(s * expScale - max * expScale), one FFMA and one ex2 per score;
  /// a float mask is added to the scores times `maskUnit`; the lse is
  /// max * lseUnit + log(sum). With `rawScores` (tensor cores, no softcap,
  /// a positive scale) tile.qk stores the bare dot product and expScale is
  /// scale * log2(e); otherwise the scores are scale * dot * log2(e) (with a
  /// softcap, its tanh) and expScale is 1.
  bool rawScores = false;
  double expScale = 1.0;
  double maskUnit = kLog2E;
  double lseUnit = 1.0 / kLog2E;
  /// The query tile (f32 storage in shared memory; on tensor cores its
  /// 16-bit view holds Q): each warp's own rows of it are free after its
  /// last Q.K^T and stage that warp's output rows for 16-byte stores.
  Value qTile;
  /// Where threadConstant puts its values (null: computed in place).
  ThreadConstants *constants = nullptr;
  /// Tensor cores: the K/V operands and cp.async destinations through the
  /// flat shared-memory view at thread-constant bases (docs/gpu-lowering.md,
  /// "Address arithmetic"); false: 2-D indices swizzled at each access.
  bool leanAddresses = true;
  /// Tensor cores: a row keeps its running maximum while a block raises it
  /// by at most kLazyRescaleLog2 (exp2 units), and a warp whose rows all
  /// keep it skips the accumulator's rescale (docs/gpu-lowering.md, "Lazy
  /// rescaling").
  bool lazyRescale = false;
  /// sm_90a, two consumer warpgroups with a producer (kvattn.gpu_schedule's
  /// ping_pong): they take turns at the tensor cores (emitPingPongWait /
  /// emitPingPongPass, TensorCoreTiles.h).
  bool pingPong = false;
  /// sm_90a, kvattn.gpu_schedule's intra_warpgroup_overlap: a
  /// tile.softmax_update leaves its P.V to the next tile.qk (marked
  /// kvattn.pending_pv), which issues it after its own Q.K^T, or to the
  /// tile.store; the next softmax waits for it. `pendingProbs` holds the
  /// deferred probabilities as the RS wgmma's A registers ([BN / 16 * 4]
  /// i32), `pendingBlock` the deferred block's first key and whether one is
  /// pending ([2] index); constant indices only: registers.
  bool overlapPV = false;
  Value pendingProbs, pendingBlock;
};

/// The largest growth of a row's maximum, in exp2 units, that leaves the
/// running maximum as it is (lazy rescaling): probabilities stay <= 2^8.
inline constexpr double kLazyRescaleLog2 = 8.0;

/// The row offset |max * expScale| from which a warp takes the softmax's
/// exact form for a block (round(s * f) - round(max * f), one more
/// instruction per score) instead of the FMA form, whose rounding of the
/// offset, up to half an ulp, is an exponent of the row's largest
/// probability: 2^26, an ulp of 8 below it, so that probabilities stay
/// below 2^4 (2^12 with lazy rescaling), finite in the f16 that P.V takes
/// them in for an f16 query or an FP8 cache's f16 stage (65,504).
inline constexpr double kExactSoftmaxOffset = 67108864.0;

/// Loop vocabulary plus the thread mapping.
struct GpuEmitter : Emitter {
  const Threads &t;

  GpuEmitter(ImplicitLocOpBuilder &b, const Threads &t) : Emitter{b}, t(t) {}

  Value mulIdx(Value x, int64_t c) {
    return b.createOrFold<arith::MulIOp>(x, idx(c));
  }
  Value divIdx(Value x, Value y) {
    return b.createOrFold<arith::DivUIOp>(x, y);
  }
  Value remIdx(Value x, Value y) {
    return b.createOrFold<arith::RemUIOp>(x, y);
  }
  Value lt(Value x, Value y) {
    return b.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::ult, x, y);
  }

  /// Every consumer thread of the block: the CTA barrier, or with a
  /// producer warpgroup (Threads::producerWarps) named barrier 1 over the
  /// consumers' `count` threads, which the producer never joins.
  void barrier() {
    if (!t.producerWarps)
      return ctaBarrier();
    LLVM::CallIntrinsicOp::create(
        b, b.getStringAttr("llvm.nvvm.barrier.cta.sync.aligned.count"),
        ValueRange{arith::ConstantIntOp::create(b, b.getI32Type(), 1),
                   arith::ConstantIntOp::create(b, b.getI32Type(), t.count)});
  }
  /// The factors tile.qk multiplies the dot products of the lane's rows
  /// by (rowOfRegister's k): an FP8 K's scale outside the stage
  /// (`keyScale`, or null) times the power of two the row of a query
  /// converted into f16 was scaled down by (Threads::queryScale); empty
  /// when neither applies.
  SmallVector<Value> dotFactors(Value keyScale) {
    SmallVector<Value> factors;
    if (!t.queryScale) {
      if (keyScale)
        factors.assign(t.layout.rowsPerLane, keyScale);
      return factors;
    }
    for (int64_t k = 0; k < t.layout.rowsPerLane; ++k) {
      Value up = memref::LoadOp::create(
          b, t.queryScale, ValueRange{arith::ConstantIndexOp::create(b, k)});
      factors.push_back(
          keyScale ? arith::MulFOp::create(b, keyScale, up).getResult() : up);
    }
    return factors;
  }
  /// Whether `pred` (i1) holds in any thread of the CTA: the CTA barrier
  /// that reduces it (barrier.cta.red.or; every thread of the CTA takes
  /// part, so not on kernels with producer warps), the same i1 in every
  /// thread.
  Value ctaBarrierAny(Value pred) {
    assert(!t.producerWarps && "a CTA-wide reduction with producer warps");
    Value any =
        LLVM::CallIntrinsicOp::create(
            b, b.getI1Type(),
            b.getStringAttr("llvm.nvvm.barrier.cta.red.or.aligned.all"),
            ValueRange{arith::ConstantIntOp::create(b, b.getI32Type(), 0),
                       pred})
            .getResult(0);
    // The same in every thread, but ptxas does not know it of the
    // barrier's result: shuffled from lane 0 (as Threads::rowGroup), a
    // branch on it keeps the code after it on the uniform datapath (the
    // wgmma descriptors in uniform registers).
    Value i32 = arith::ExtUIOp::create(b, b.getI32Type(), any);
    i32 = gpu::ShuffleOp::create(
              b, i32, arith::ConstantIntOp::create(b, b.getI32Type(), 0),
              arith::ConstantIntOp::create(b, b.getI32Type(), 32),
              gpu::ShuffleMode::IDX)
              .getShuffleResult();
    return arith::TruncIOp::create(b, b.getI1Type(), i32);
  }
  /// Whether `pred` holds in any lane of the warp (vote.any.sync over all
  /// lanes: the warp must be converged), the same i1 in every lane.
  Value warpAny(Value pred) {
    return LLVM::CallIntrinsicOp::create(
               b, b.getI1Type(), b.getStringAttr("llvm.nvvm.vote.any.sync"),
               ValueRange{arith::ConstantIntOp::create(b, b.getI32Type(), -1),
                          pred})
        .getResult(0);
  }
  /// Every thread of the block, the producer's too.
  void ctaBarrier() { gpu::BarrierOp::create(b); }

  /// x + y for non-negative offsets that do not overflow (element offsets
  /// below 2^31, docs/gpu-lowering.md "Index width"): marked nsw and nuw so
  /// that LLVM folds a constant `y` into the address as an immediate.
  Value addOffset(Value x, Value y) {
    auto op = arith::AddIOp::create(b, x, y);
    op.setOverflowFlags(arith::IntegerOverflowFlags::nsw |
                        arith::IntegerOverflowFlags::nuw);
    return op;
  }
  Value addOffset(Value x, int64_t y) {
    return y == 0 ? x : addOffset(x, idx(y));
  }
  /// x * c, marked as addOffset.
  Value mulOffset(Value x, int64_t c) {
    auto op = arith::MulIOp::create(b, x, idx(c));
    op.setOverflowFlags(arith::IntegerOverflowFlags::nsw |
                        arith::IntegerOverflowFlags::nuw);
    return op;
  }

  /// The thread constant named `key`: compute(h) with an emitter `h` at the
  /// kernel's entry (Threads::constants), once per program; the same key
  /// returns the same value. `compute` may use only the thread coordinates,
  /// values defined before them and other thread constants. Without
  /// Threads::constants it is computed here.
  Value threadConstant(StringRef key,
                       function_ref<Value(GpuEmitter &)> compute) {
    ThreadConstants *tc = t.constants;
    if (!tc)
      return compute(*this);
    if (Value v = tc->values.lookup(key))
      return v;
    ImplicitLocOpBuilder hb(b.getLoc(), b.getContext());
    hb.setInsertionPointAfter(tc->last);
    GpuEmitter h(hb, t);
    Value v = compute(h);
    if (hb.getInsertionPoint() != hb.getInsertionBlock()->begin())
      tc->last = &*std::prev(hb.getInsertionPoint());
    tc->values[key] = v;
    return v;
  }

  /// All threads together: for (i = tid; i < n; i += threads).
  void cooperative(Value n, function_ref<void(Value)> body) {
    scf::ForOp::create(
        b, t.tid, n, idx(t.count), ValueRange{},
        [&](OpBuilder &nested, Location loc, Value iv, ValueRange) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(scf::YieldOp::create(nested, loc));
          body(iv);
        });
  }

  /// Row k (0 .. rowsPerLane - 1) of this lane, in the program's tile:
  /// 16w + l / 4 + 8k.
  Value ownedRow(int k) {
    const FragmentLayout &l = t.layout;
    return add(
        add(mulIdx(t.warp, l.warpRows), divIdx(t.lane, idx(l.lanesPerRow))),
        idx(l.rowOffset(k)));
  }

  /// The lane's columns below `n`: 8j + 2 * quad + e.
  void ownedColumns(Value n, function_ref<void(Value)> body) {
    const FragmentLayout &l = t.layout;
    Value groups = b.createOrFold<arith::CeilDivUIOp>(n, idx(l.sliceColumns));
    loop(idx(0), groups, [&](Value j) {
      loop(idx(0), idx(l.elementsPerRow), [&](Value e) {
        Value c = add(
            add(mulIdx(j, l.sliceColumns), mulIdx(t.quad, l.elementsPerRow)),
            e);
        when(lt(c, n), [&] { body(c); });
      });
    });
  }

  /// Where column `c` of score-tile row `r` is stored. Swizzled (see
  /// Threads::swizzleScores): c ^ (8 * (r % 4) + (r / 4) % 2), a permutation
  /// of each row's columns (the key is below 32 and block-n a multiple of
  /// 32). A lane's entries (row 16w + g + 8k, column 8j + 2q + el) land in
  /// bank 8 * (j ^ g % 4) + 2q + (el ^ g / 4 % 2) mod 32: distinct for the
  /// 32 lanes of every access. Every access of the score tile on the
  /// tensor-core path goes through here.
  Value scoreColumn(Value r, Value c) {
    if (!t.swizzleScores)
      return c;
    Value key =
        add(mulIdx(remIdx(r, idx(4)), 8), remIdx(divIdx(r, idx(4)), idx(2)));
    return b.createOrFold<arith::XOrIOp>(c, key);
  }

  /// Statistic `stat` (0: max, 1: sum) of owned row k (row index r): the
  /// lane's registers on tensor cores, else the shared tile `shared`.
  Value loadRowStat(Value shared, int stat, int k, Value r) {
    return t.rowStats ? load(t.rowStats, {idx(stat), idx(k)}) : load(shared, r);
  }

  /// The first output column this warp owns, valueSlice * dv / valueSplit
  /// (a thread constant); 0 without a value split. The lane's accumulator
  /// entries (slice j, element el) are output column
  /// valueColumnBase(dv) + accColumn(j, el).
  Value valueColumnBase(int64_t dv) {
    if (t.valueSplit == 1)
      return idx(0);
    return threadConstant(
        "valuebase:" + std::to_string(dv), [&](GpuEmitter &h) {
          return h.mulIdx(h.t.valueSlice, dv / h.t.valueSplit);
        });
  }

  /// Whether the lane's warpgroup computes its rows' scores (an i1 thread
  /// constant): the row group's first with Threads::scoreShares, every
  /// warpgroup otherwise.
  Value scoringWarpgroup() {
    if (!t.scoreShares)
      return arith::ConstantIntOp::create(b, 1, 1);
    return threadConstant("scoring", [](GpuEmitter &h) {
      return arith::CmpIOp::create(h.b, arith::CmpIPredicate::eq,
                                   h.t.valueSlice, h.idx(0))
          .getResult();
    });
  }
  /// `body` where the lane's warpgroup computes scores (Threads::
  /// scoreShares: the score warpgroup; a warpgroup-uniform branch).
  void whenScoring(function_ref<void()> body) {
    if (!t.scoreShares)
      return body();
    when(scoringWarpgroup(), body);
  }

  /// Column `8j + 2q + el` of the lane's accumulator entries.
  Value accColumn(int64_t j, int el) {
    return add(idx(t.layout.columnOffset(j, el)),
               mulIdx(t.quad, t.layout.elementsPerRow));
  }
  /// Entry (row k, slice j, element el) of a lane's private array (t.acc,
  /// t.scores): constant indices only.
  SmallVector<Value, 3> laneIndex(int k, int64_t j, int el) {
    return {idx(k), idx(j), idx(el)};
  }
  Value loadAcc(int k, int64_t j, int el) {
    return load(t.acc, laneIndex(k, j, el));
  }
  void storeAcc(Value v, int k, int64_t j, int el) {
    store(v, t.acc, laneIndex(k, j, el));
  }
  Value loadScore(int k, int64_t j, int el) {
    return load(t.scores, laneIndex(k, j, el));
  }
  void storeScore(Value v, int k, int64_t j, int el) {
    store(v, t.scores, laneIndex(k, j, el));
  }
  /// body(j, el, column) for the lane's accumulator columns below `dv`,
  /// unrolled at compile time (the private accumulator needs constant
  /// indices to become registers).
  void forAccColumns(int64_t dv,
                     function_ref<void(int64_t j, int el, Value col)> body) {
    const FragmentLayout &l = t.layout;
    for (int64_t j = 0; j < l.slices(dv); ++j)
      for (int el = 0; el < l.elementsPerRow; ++el) {
        Value col = accColumn(j, el);
        if (dv % l.sliceColumns == 0)
          body(j, el, col);
        else
          when(lt(col, idx(dv)), [&] { body(j, el, col); });
      }
  }

  /// A reduction over the lane's columns of a [*, bn] tile (bn a multiple
  /// of the slice width).
  Value reduceOwnedColumns(int64_t bn, Value init,
                           function_ref<Value(Value c, Value acc)> body) {
    const FragmentLayout &l = t.layout;
    return reduce(
        idx(0), idx(bn / l.sliceColumns), init, [&](Value j, Value acc) {
          Value c0 =
              add(mulIdx(j, l.sliceColumns), mulIdx(t.quad, l.elementsPerRow));
          acc = body(c0, acc);
          for (int64_t el = 1; el < l.elementsPerRow; ++el)
            acc = body(add(c0, idx(el)), acc);
          return acc;
        });
  }

  /// Combines a value across the lanes of a row (a quad: xor 1, 2).
  Value quadReduce(Value v, bool isMax) {
    for (int32_t offset : t.layout.rowShuffleOffsets()) {
      Value off = arith::ConstantIntOp::create(b, b.getI32Type(), offset);
      Value width = arith::ConstantIntOp::create(b, b.getI32Type(), 32);
      Value other =
          gpu::ShuffleOp::create(b, v, off, width, gpu::ShuffleMode::XOR)
              .getShuffleResult();
      v = isMax ? arith::MaximumFOp::create(b, v, other).getResult()
                : addf(v, other);
    }
    return v;
  }

  /// cond ? thenValues() : elseValues(), each evaluated only on its side.
  SmallVector<Value> ifElse(Value cond, TypeRange types,
                            function_ref<SmallVector<Value>()> thenValues,
                            function_ref<SmallVector<Value>()> elseValues) {
    auto ifOp = scf::IfOp::create(b, types, cond, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      scf::YieldOp::create(b, thenValues());
      b.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(b, elseValues());
    }
    return SmallVector<Value>(ifOp.getResults());
  }

  /// cond ? thenValue() : elseValue, evaluating thenValue only if needed.
  Value ifElse(Value cond, function_ref<Value()> thenValue, Value elseValue) {
    return ifElse(
        cond, TypeRange{elseValue.getType()},
        [&] { return SmallVector<Value>{thenValue()}; },
        [&] { return SmallVector<Value>{elseValue}; })[0];
  }

  /// 2^x as one MUFU.EX2 (ex2.approx.ftz.f32: subnormal inputs and
  /// results are flushed to zero, no range fix-up around it).
  Value exp2(Value x) {
    return LLVM::CallIntrinsicOp::create(
               b, b.getF32Type(),
               b.getStringAttr("llvm.nvvm.ex2.approx.ftz.f32"), ValueRange{x})
        .getResult(0);
  }
  /// x * y rounded to nearest, never contracted with an add into an FFMA
  /// (mul.rn.f32: ptxas fuses a plain mul.f32 into a following add).
  Value mulRn(Value x, Value y) {
    return LLVM::CallIntrinsicOp::create(b, b.getF32Type(),
                                         b.getStringAttr("llvm.nvvm.mul.rn.f"),
                                         ValueRange{x, y})
        .getResult(0);
  }
  /// x * y + z, rounded once (FFMA).
  Value fma(Value x, Value y, Value z) {
    return math::FmaOp::create(b, x, y, z);
  }

  Value zeroOf(Type type) {
    return arith::ConstantOp::create(b, type, b.getZeroAttr(type));
  }
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_GPUEMITTER_H
