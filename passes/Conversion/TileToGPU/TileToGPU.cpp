//===- TileToGPU.cpp - the GPU lowering of the tile ops -------------------===//
//
// Thread mapping (docs/gpu-lowering.md). A program is a thread block of
// 32 * num_warps threads and BM = 16 * num_warps query rows (or, on tensor
// cores, 32 * num_warps: two m16 tiles per warp, FragmentLayout.h):
//
//   warp w = tid / 32 owns rows [16w, 16w + 16)
//   lane l = tid % 32 owns rows 16w + l/4 and 16w + l/4 + 8, and in each of
//   them the columns 8j + 2(l % 4) + {0, 1}, j = 0, 1, ...
//
// which is the accumulator fragment of mma.sync.m16n8k16 (c0..c3). Scores
// and the accumulator are owned that way; the four lanes of a row (a quad)
// reduce its maximum and sum with two xor-shuffles. Whole tiles (the query
// tile, a K or V block) are loaded cooperatively by all threads, and
// barriers separate phases. Every barrier sits in block-uniform control
// flow: the loops and the partial-block branch of the tile program depend
// only on the program id.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Passes/TileToGPU.h"
#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"
#include "passes/Conversion/Fp8.h"
#include "passes/Conversion/TileToGPU/GpuEmitter.h"
#include "passes/Conversion/TileToGPU/SharedMemoryLayout.h"
#include "passes/Conversion/TileToGPU/TensorCoreTiles.h"
#include "passes/RotaryEmbedding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Iterators.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Rewrite/PatternApplicator.h"

#include <cmath>

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_LOWERTILETOGPUPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

namespace {

void lowerInit(GpuEmitter &e, TileInitOp op) {
  // Each lane zeroes its own accumulator entries (registers).
  auto accType = cast<MemRefType>(e.t.acc.getType());
  for (int k = 0; k < e.t.layout.rowsPerLane; ++k)
    for (int64_t j = 0; j < accType.getDimSize(1); ++j)
      for (int el = 0; el < e.t.layout.elementsPerRow; ++el)
        e.storeAcc(e.f32(0), k, j, el);
  if (e.t.rowStats) {
    // The lane's own rows, in registers: nothing to publish.
    for (int k = 0; k < e.t.layout.rowsPerLane; ++k) {
      e.store(e.negInf(), e.t.rowStats, {e.idx(0), e.idx(k)});
      e.store(e.f32(0), e.t.rowStats, {e.idx(1), e.idx(k)});
    }
    return;
  }
  e.cooperative(e.tileDim(op.getMax(), 0), [&](Value r) {
    e.store(e.negInf(), op.getMax(), r);
    e.store(e.f32(0), op.getSum(), r);
  });
  e.barrier();
}

/// RoPE: element `x` of tile row `r` (query row `q`) rotated at the row's
/// position in f32 (cos/sin by polynomial: no libdevice call), then stored
/// as `elt`: the query's 16-bit type on tensor cores, else f32 (rounded
/// through the query's type first unless f32_query).
Value rotatedQueryElement(GpuEmitter &e, TileLoadQOp op, RopeAttr rope, Value r,
                          const QueryRow &q, Value x, Type elt) {
  Value i = e.add(op.getPosRow(), r);
  if (std::optional<int64_t> group = op.getGroup(); group && *group > 1)
    i = e.b.createOrFold<arith::DivUIOp>(i, e.idx(*group));
  Value qp = op.getQBase() ? e.add(op.getQBase(), i)
                           : e.loadIndex(op.getQPos(), {op.getBatch(), i});
  RotaryElement rot =
      emitRotaryElement(e.b, e.b.getLoc(), rope, qp, x, SinCos::Polynomial,
                        {op.getRotaryCos(), op.getRotarySin()});
  Value self = e.loadF32(op.getQuery(), {op.getBatch(), q.head, q.row, x});
  Value partner =
      e.loadF32(op.getQuery(), {op.getBatch(), q.head, q.row, rot.partner});
  Value v = emitRotate(e.b, e.b.getLoc(), rot, self, partner);
  Type queryType = getElementTypeOrSelf(op.getQuery().getType());
  if (!elt.isF32())
    return arith::TruncFOp::create(e.b, elt, v);
  return rope.getF32Query() ? v
                            : emitRoundThrough(e.b, e.b.getLoc(), v, queryType);
}

/// The largest biased exponent field of the finite values of a bf16
/// chunk (0 for zeros and subnormals; infinities and NaNs, 0xFF, left out).
static Value maxFiniteExponent(GpuEmitter &e, Value chunk) {
  auto chunkType = cast<VectorType>(chunk.getType());
  auto intType = VectorType::get(chunkType.getShape(), e.b.getI16Type());
  auto splat = [&](int64_t v) {
    return arith::ConstantOp::create(
        e.b, intType,
        DenseElementsAttr::get(intType, Attribute(e.b.getI16IntegerAttr(v))));
  };
  Value bits = arith::BitcastOp::create(e.b, intType, chunk);
  Value exponent = arith::AndIOp::create(
      e.b, arith::ShRUIOp::create(e.b, bits, splat(7)), splat(0xFF));
  Value finite = arith::CmpIOp::create(e.b, arith::CmpIPredicate::ne, exponent,
                                       splat(0xFF));
  exponent = arith::SelectOp::create(e.b, finite, exponent, splat(0));
  Value m =
      vector::ReductionOp::create(e.b, vector::CombiningKind::MAXUI, exponent);
  return arith::ExtUIOp::create(e.b, e.b.getI32Type(), m);
}

/// A converted query tile (lowerLoadQ) where some value would not be
/// finite in f16: each warp takes its rows one at a time (every row of the
/// tile belongs to one warp; of warps that share rows, the first value
/// slice's writes): its lanes' chunks of the row, the largest finite
/// exponent E of the row (a warp reduction), the row rewritten scaled by
/// 2^-s, s = max(E - 15, 0) — bf16's largest mantissa times 2^15 is
/// 65,280, finite in f16; a row that did not overflow is stored as before.
/// Returns 2^s of each row the lane owns in the accumulator fragment
/// (rowOfRegister's k; the caller keeps them in Threads::queryScale), which
/// tile.qk multiplies the row's dot products by. A row's scale is its own:
/// a row of huge values costs the others nothing, and a NaN or an infinity
/// stays in its row.
static SmallVector<Value> emitQueryRowScales(
    GpuEmitter &e, TileLoadQOp op,
    function_ref<std::tuple<Value, Value, Value>(Value)> loadChunk,
    function_ref<void(Value, Value, Value)> storeChunk,
    function_ref<std::pair<Value, Value>(Value, Value)> toF16) {
  const FragmentLayout &layout = e.t.layout;
  auto type = cast<MemRefType>(op.getQTile().getType());
  constexpr int64_t kChunk = 8;
  const int64_t chunksPerRow = type.getDimSize(1) / kChunk;
  Type i32 = e.b.getI32Type();
  auto c32 = [&](int64_t v) {
    return arith::ConstantIntOp::create(e.b, i32, v).getResult();
  };
  auto eq = [&](Value x, Value y) {
    return arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq, x, y)
        .getResult();
  };
  // The warp's rows from rowBase; chunk c of row r is loadChunk's
  // r * chunksPerRow + c.
  Value rowBase = e.mulIdx(e.t.warp, layout.warpRows);
  // Only the first value slice's warps write the rows they share.
  Value writes =
      e.t.valueSlice
          ? eq(e.t.valueSlice, e.idx(0))
          : arith::ConstantIntOp::create(e.b, e.b.getI1Type(), 1).getResult();
  Value laneRow = e.divIdx(e.t.lane, e.idx(layout.lanesPerRow));
  SmallVector<Value> ones(layout.rowsPerLane, e.f32(1.0f));
  auto rows = scf::ForOp::create(
      e.b, e.idx(0), e.idx(layout.warpRows), e.idx(1), ones,
      [&](OpBuilder &nested, Location loc, Value j, ValueRange scales) {
        OpBuilder::InsertionGuard guard(e.b);
        e.b.setInsertionPoint(nested.getInsertionBlock(),
                              nested.getInsertionPoint());
        Value first = e.mulIdx(e.add(rowBase, j), chunksPerRow);
        auto eachOfRow = [&](Value carried,
                             function_ref<Value(Value, Value)> step) {
          auto loop = scf::ForOp::create(
              e.b, e.t.lane, e.idx(chunksPerRow), e.idx(32),
              carried ? ValueRange{carried} : ValueRange{},
              [&](OpBuilder &inner, Location l, Value c, ValueRange args) {
                OpBuilder::InsertionGuard g(e.b);
                auto yield = scf::YieldOp::create(inner, l);
                e.b.setInsertionPoint(yield);
                Value next =
                    step(e.add(first, c), args.empty() ? Value() : args[0]);
                if (next)
                  yield->setOperands(next);
              });
          return carried ? loop.getResult(0) : Value();
        };
        Value biased = eachOfRow(c32(0), [&](Value i, Value m) -> Value {
          return arith::MaxUIOp::create(
              e.b, m, maxFiniteExponent(e, std::get<2>(loadChunk(i))));
        });
        for (int32_t offset = 1; offset < 32; offset *= 2)
          biased = arith::MaxUIOp::create(
              e.b, biased,
              gpu::ShuffleOp::create(e.b, biased, c32(offset), c32(32),
                                     gpu::ShuffleMode::XOR)
                  .getShuffleResult());
        // s = max(E - 15, 0) = max(biased - 142, 0); 2^-s and 2^s by their
        // f32 bit patterns (exponent fields 127 - s >= 15, 127 + s <= 239).
        Value shift = arith::MaxSIOp::create(
            e.b, arith::SubIOp::create(e.b, biased, c32(142)), c32(0));
        auto power = [&](Value exponent) {
          return arith::BitcastOp::create(
              e.b, e.b.getF32Type(),
              arith::ShLIOp::create(e.b, exponent, c32(23)));
        };
        Value down = power(arith::SubIOp::create(e.b, c32(127), shift));
        Value up = power(arith::AddIOp::create(e.b, c32(127), shift));
        e.when(writes, [&] {
          eachOfRow(Value(), [&](Value i, Value) {
            auto [r, x, v] = loadChunk(i);
            storeChunk(r, x, toF16(v, down).second);
            return Value();
          });
        });
        SmallVector<Value> next;
        for (int64_t k = 0; k < layout.rowsPerLane; ++k)
          next.push_back(arith::SelectOp::create(
              e.b,
              eq(j,
                 e.add(laneRow, e.idx(layout.rowOffset(static_cast<int>(k))))),
              up, scales[k]));
        scf::YieldOp::create(e.b, next);
      });
  e.barrier();
  return SmallVector<Value>(rows.getResults());
}

void lowerLoadQ(GpuEmitter &e, TileLoadQOp op) {
  // Tensor cores: the query rows in their own 16-bit type (the tile's),
  // swizzled (ldmatrix reads them); otherwise f32.
  Value tile = op.getQTile();
  auto type = cast<MemRefType>(tile.getType());
  Type elt = type.getElementType();
  RopeAttr rope = op.getRopeAttr();
  if (!rope && e.t.tensorCores && elt.getIntOrFloatBitWidth() == 16 &&
      type.getDimSize(1) % 8 == 0) {
    // 16-byte chunks: one vector<8x(b)f16> global load per chunk (rows are
    // D * 2 bytes, D % 8 == 0, and the buffers 16-byte aligned: the ABI),
    // stored whole (the swizzle moves 16-byte chunks).
    constexpr int64_t kChunk = 8;
    // A bf16 query into an FP8 cache's f16 stage (queryConvertsToF16):
    // each chunk through f32 into f16, exact between 2^-14 and 65,504.
    Type queryType = getElementTypeOrSelf(op.getQuery().getType());
    const bool convert = queryConvertsToF16(queryType, elt);
    auto chunkType = VectorType::get({kChunk}, queryType);
    auto tileChunkType = VectorType::get({kChunk}, elt);
    auto f32Chunk = VectorType::get({kChunk}, e.b.getF32Type());
    Value chunks = e.idx(type.getDimSize(1) / kChunk);
    // Chunk i of the tile: its row, its column and its query values
    // (zeros past the program's rows).
    auto loadChunk = [&](Value i) {
      Value r = e.divIdx(i, chunks), x = e.mulIdx(e.remIdx(i, chunks), kChunk);
      Value v = e.ifElse(
          e.lt(r, op.getRows()),
          [&] {
            QueryRow q =
                queryRowOf(e, op.getHead(), op.getStart(), op.getGroup(), r);
            return vector::LoadOp::create(
                       e.b, chunkType, op.getQuery(),
                       ValueRange{op.getBatch(), q.head, q.row, x},
                       /*nontemporal=*/false, llvm::Align(16))
                .getResult();
          },
          arith::ConstantOp::create(e.b, chunkType,
                                    e.b.getZeroAttr(chunkType)));
      return std::make_tuple(r, x, v);
    };
    auto storeChunk = [&](Value r, Value x, Value v) {
      SmallVector<Value, 2> at =
          e.t.wgmma ? panelIndices(e, tile, r, x)
                    : SmallVector<Value, 2>{r, swizzledCol(e, tile, r, x)};
      vector::StoreOp::create(e.b, v, tile, at,
                              /*nontemporal=*/false, llvm::Align(16));
    };
    // f16 of a bf16 chunk times `scale` (a power of two, or none).
    auto toF16 = [&](Value v, Value scale) {
      Value f = arith::ExtFOp::create(e.b, f32Chunk, v);
      if (scale)
        f = arith::MulFOp::create(
            e.b, f, vector::BroadcastOp::create(e.b, f32Chunk, scale));
      return std::make_pair(
          f, arith::TruncFOp::create(e.b, tileChunkType, f).getResult());
    };
    // The thread's chunks, `step` applied to each; with `carried`, the
    // loop-carried value step folds into.
    auto eachChunk = [&](Value carried,
                         function_ref<Value(Value, Value)> step) -> Value {
      auto loop = scf::ForOp::create(
          e.b, e.t.tid, e.idx(type.getNumElements() / kChunk), e.idx(e.t.count),
          carried ? ValueRange{carried} : ValueRange{},
          [&](OpBuilder &nested, Location loc, Value i, ValueRange args) {
            OpBuilder::InsertionGuard guard(e.b);
            auto yield = scf::YieldOp::create(nested, loc);
            e.b.setInsertionPoint(yield);
            Value next = step(i, args.empty() ? Value() : args.front());
            if (next)
              yield->setOperands(next);
          });
      return carried ? loop.getResult(0) : Value();
    };
    Value overflow;
    if (!convert) {
      eachChunk(Value(), [&](Value i, Value) {
        auto [r, x, v] = loadChunk(i);
        storeChunk(r, x, v);
        return Value();
      });
    } else {
      // Whether a finite value of the thread's chunks became an infinity
      // (|q| >= 65,520).
      Value limit = e.f32(65520.0f), inf = e.f32(INFINITY);
      overflow = eachChunk(
          arith::ConstantIntOp::create(e.b, e.b.getI1Type(), 0),
          [&](Value i, Value any) {
            auto [r, x, v] = loadChunk(i);
            auto [f, h] = toF16(v, Value());
            storeChunk(r, x, h);
            Value a = math::AbsFOp::create(e.b, f);
            Value big = arith::AndIOp::create(
                e.b,
                arith::CmpFOp::create(
                    e.b, arith::CmpFPredicate::OGE, a,
                    vector::BroadcastOp::create(e.b, f32Chunk, limit)),
                arith::CmpFOp::create(
                    e.b, arith::CmpFPredicate::OLT, a,
                    vector::BroadcastOp::create(e.b, f32Chunk, inf)));
            return arith::OrIOp::create(
                e.b, any,
                vector::ReductionOp::create(e.b, vector::CombiningKind::OR,
                                            big));
          });
    }
    // (sm_90a: wgmma reads the tile through the async proxy; the
    // fence.proxy.async each thread executes after its K copies land, before
    // the barrier of the first Q.K^T, orders these writes too. With the TMA
    // ring no thread copies K: each fences its query stores here.)
    if (e.t.tma)
      emitProxyFence(e);
    if (!convert) {
      e.barrier();
    } else {
      // The barrier that publishes the tile also tells every thread whether
      // any chunk overflowed; only then (never, for a model's activations)
      // emitQueryRowScales rewrites the rows that need a scale. The lane's
      // row scales (1 without) go to Threads::queryScale for tile.qk.
      Value any = e.ctaBarrierAny(overflow);
      const FragmentLayout &layout = e.t.layout;
      auto ifOp = scf::IfOp::create(
          e.b, SmallVector<Type>(layout.rowsPerLane, e.b.getF32Type()), any,
          /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard guard(e.b);
        e.b.setInsertionPointToStart(ifOp.thenBlock());
        scf::YieldOp::create(
            e.b, emitQueryRowScales(e, op, loadChunk, storeChunk, toF16));
        e.b.setInsertionPointToStart(ifOp.elseBlock());
        scf::YieldOp::create(
            e.b, SmallVector<Value>(layout.rowsPerLane, e.f32(1.0f)));
      }
      for (int64_t k = 0; k < layout.rowsPerLane; ++k)
        memref::StoreOp::create(e.b, ifOp.getResult(k), e.t.queryScale,
                                ValueRange{e.idx(k)});
    }
    if (e.t.qFragments)
      emitLoadQueryFragments(e, tile);
    emitPingPongStart(e);
    return;
  }
  Value d = e.idx(type.getDimSize(1));
  e.cooperative(e.idx(type.getNumElements()), [&](Value i) {
    Value r = e.divIdx(i, d), x = e.remIdx(i, d);
    Value v = e.ifElse(
        e.lt(r, op.getRows()),
        [&] {
          QueryRow q =
              queryRowOf(e, op.getHead(), op.getStart(), op.getGroup(), r);
          SmallVector<Value> at = {op.getBatch(), q.head, q.row, x};
          if (rope)
            return rotatedQueryElement(e, op, rope, r, q, x, elt);
          return elt.isF32() ? e.loadF32(op.getQuery(), at)
                             : e.load(op.getQuery(), at);
        },
        e.zeroOf(elt));
    // The layouts of the 16-byte path: wgmma's panels, mma.sync's swizzle.
    SmallVector<Value, 2> at =
        e.t.wgmma ? panelIndices(e, tile, r, x)
                  : SmallVector<Value, 2>{
                        r, e.t.tensorCores ? swizzledCol(e, tile, r, x) : x};
    e.store(v, tile, at);
  });
  // (As on the 16-byte path: with the TMA ring each thread fences its
  // query stores for wgmma's async-proxy reads.)
  if (e.t.tma)
    emitProxyFence(e);
  e.barrier();
  if (e.t.qFragments)
    emitLoadQueryFragments(e, tile);
  emitPingPongStart(e);
}

/// Stages rows [start, start + cols) of `source[batch, head]` (through
/// `blockTable` when the cache is paged) into the shared staging block
/// `stage` (zeros past `cols`).
void stageBlock(GpuEmitter &e, Value stage, Value source, Value blockTable,
                Value batch, Value head, Value start, Value cols, int64_t bn,
                int64_t width, Value scale = Value()) {
  Type elt = cast<MemRefType>(stage.getType()).getElementType();
  Value w = e.idx(width);
  e.cooperative(e.idx(bn * width), [&](Value i) {
    Value c = e.divIdx(i, w), x = e.remIdx(i, w);
    Value v = e.ifElse(
        e.lt(c, cols),
        [&] {
          SmallVector<Value, 4> at =
              e.kvIndices(source, blockTable, batch, head, e.add(start, c), x);
          Value v = e.load(source, at);
          if (!isFp8(v.getType()))
            return v;
          // An FP8 cache: f32(code) * scale, in the stage's type.
          v = arith::MulFOp::create(
              e.b, castKvToF32(e.b, e.b.getLoc(), v),
              loadKvScale(e.b, e.b.getLoc(), scale, head, at));
          return elt.isF32() ? v
                             : arith::TruncFOp::create(e.b, elt, v).getResult();
        },
        e.zeroOf(elt));
    e.store(v, stage, {c, x});
  });
}

/// The schedule's pairings of a kernel's tile ops (kvattn.value_prefetch,
/// kvattn.key_prefetch): `valueOfQK[qk]` the tile.softmax_update whose V
/// block the tile.qk issues; `deferred[softmax]` the tile.prefetch that
/// tile.softmax_update issues, and `deferred[prefetch]` the tile.prefetch
/// itself (lowered by its softmax, erased after it).
struct PrefetchPairs {
  llvm::DenseMap<Operation *, TileSoftmaxOp> valueOfQK;
  llvm::DenseMap<Operation *, TilePrefetchOp> deferred;
};

FailureOr<PrefetchPairs> readPrefetchPairs(gpu::GPUFuncOp kernel,
                                           ArrayRef<Operation *> tileOps) {
  PrefetchPairs pairs;
  llvm::DenseMap<int64_t, std::pair<Operation *, Operation *>> value, key;
  auto pair = [&](auto &map, int64_t id, Operation *op, bool issuer) {
    auto &[issuerOp, softmax] = map[id];
    Operation *&slot = issuer ? issuerOp : softmax;
    if (slot)
      return false;
    slot = op;
    return true;
  };
  for (Operation *op : tileOps) {
    if (std::optional<int64_t> id = getValuePrefetchId(op))
      if (!pair(value, *id, op, isa<TileQKOp>(op)))
        return op->emitOpError()
               << "kvattn-lower-tile-to-gpu: " << kValuePrefetchAttrName << " "
               << *id << " pairs more than two ops";
    if (std::optional<int64_t> id = getKeyPrefetchId(op))
      if (!pair(key, *id, op, isa<TilePrefetchOp>(op)))
        return op->emitOpError()
               << "kvattn-lower-tile-to-gpu: " << kKeyPrefetchAttrName << " "
               << *id << " pairs more than two ops";
  }
  for (auto &[id, ops] : value) {
    if (!ops.first || !ops.second)
      return kernel.emitOpError()
             << "kvattn-lower-tile-to-gpu: " << kValuePrefetchAttrName << " "
             << id << " names no tile.qk and tile.softmax_update pair";
    pairs.valueOfQK[ops.first] = cast<TileSoftmaxOp>(ops.second);
  }
  for (auto &[id, ops] : key) {
    if (!ops.first || !ops.second)
      return kernel.emitOpError()
             << "kvattn-lower-tile-to-gpu: " << kKeyPrefetchAttrName << " "
             << id << " names no tile.prefetch and tile.softmax_update pair";
    auto prefetch = cast<TilePrefetchOp>(ops.first);
    pairs.deferred[ops.second] = prefetch;
    pairs.deferred[prefetch] = prefetch;
  }
  return pairs;
}

/// tile.qk on scalar FMAs (tensor cores: lowerQKOnTensorCores,
/// lowerQKWithWgmma).
void lowerQKScalar(GpuEmitter &e, TileQKOp op) {
  auto scoresType = cast<MemRefType>(op.getScores().getType());
  int64_t bn = scoresType.getDimSize(1);
  int64_t d = cast<MemRefType>(op.getQTile().getType()).getDimSize(1);
  stageBlock(e, e.t.stage, op.getKey(), op.getBlockTable(), op.getBatch(),
             op.getKvHead(), op.getStart(), op.getCols(), bn, d,
             op.getKvScale());
  e.barrier();
  for (int k = 0; k < e.t.layout.rowsPerLane; ++k) {
    Value r = e.ownedRow(k);
    e.when(e.lt(r, op.getRows()), [&] {
      e.ownedColumns(e.idx(bn), [&](Value c) {
        Value s = e.ifElse(
            e.lt(c, op.getCols()),
            [&] {
              return emitScore(
                  e, op, r,
                  [&](Value x) {
                    Value v = e.load(e.t.stage, {c, x});
                    return v.getType().isF32()
                               ? v
                               : arith::ExtFOp::create(e.b, e.b.getF32Type(), v)
                                     .getResult();
                  },
                  kLog2E);
            },
            e.negInf());
        e.store(s, op.getScores(), {r, c});
      });
    });
  }
  e.barrier();
}

/// tile.mask on the lane's score registers in the offset form, without
/// key-validity flags, masks, ALiBi or trees: every rule is a compare of
/// the element's compile-time column with a value computed once per block,
/// or once per row and block. Lane row k and element (j, el) are
/// row0 + rowOffset(k) and col0 + columnOffset(j, el) (row0, col0 the
/// lane's first; packed, tile row r is query row (q_start + r) / g), so
/// with cc = columnOffset(j, el) and the row's distance
/// d_k = qp(row0 + rowOffset(k)) - (k_base + col0) (d_0 + rowOffset(k) / g
/// where g divides the row offset, else the row's own query position):
///   kp <= qp              <=>  cc < d_k + 1
///   kp - qp <= right      <=>  cc < d_k + right + 1
///   qp - kp < window      <=>  cc >= d_k - window + 1
///   j < kv_len, c < cols  <=>  cc < min(kv_len - k_start, cols) - col0.
/// With a window the upper bounds are one per row (their minimum, hi_k),
/// so each score takes two compares. One query position per row, kept
/// live across the KV loop for each of the lane's 2 or 4 rows (the general
/// path), took registers the 128-row D = 128 kernels do not have; so did
/// windows as compares of one per-block distance with immediates cc - off
/// (an earlier form): LLVM shares each compare among the rows and elements
/// with the same immediate and ptxas kept those predicates live through
/// the mask (8-56 bytes of stack frame on sm_80 and sm_90). Without a
/// window the causal bound stays a compare of its own beside the kv_len
/// one (with their minimum ptxas put the sm_80 append's bound in local
/// memory). Per column instead, each of the lane's columns k_start +
/// col0 + cc was hoisted out of the KV loop into a register of its own (16
/// on the latent wgmma kernel's 64-key blocks, whose score warpgroup then
/// spilled). The padding rows past `rows` are masked by the same rule
/// (their scores are never stored), without a branch per row. No
/// overflow: a lane whose row0 is a padding row has only padding rows,
/// one whose k_base + col0 is past kv_len only rejected keys (cc is never
/// below the bound), and the positions of real rows and keys are in
/// [0, maxPosition], so d_k + 1 fits; with a window, d_k is clamped to
/// [-2^30, 2^30] first, which for windows up to 2^29 and cc < block-n
/// changes no result and keeps d_k - window + 1 and d_k + right + 1 in 32
/// bits.
static bool masksByDistance(GpuEmitter &e, TileMaskOp op) {
  constexpr int64_t kLargestWindow = int64_t(1) << 29;
  const int64_t window = op.getWindow().value_or(0);
  const int64_t right = op.getWindowRight().value_or(-1);
  return e.t.scores && op.getQBase() && op.getKBase() && !op.getKeyValid() &&
         !op.getMask() && !op.getAlibiSlopes() && !op.getTreeParents() &&
         window <= kLargestWindow && right <= kLargestWindow;
}

static void lowerMaskByDistance(GpuEmitter &e, TileMaskOp op, int64_t bn) {
  constexpr int64_t kClamp = int64_t(1) << 30;
  const int64_t window = op.getWindow().value_or(0);
  const int64_t right = op.getWindowRight().value_or(-1);
  const bool hasWindow = op.getWindow().has_value();
  const bool hasRight = op.getWindowRight().has_value();
  const FragmentLayout &l = e.t.layout;
  const int64_t g = op.getGroup().value_or(1);
  using P = arith::CmpIPredicate;
  Value col0 = e.mulIdx(e.t.quad, l.elementsPerRow);
  // (Packed, q_base is the position of query row 0, as in
  // emitQueryPosition.)
  auto queryPosition = [&](Value row) {
    return g == 1 ? e.add(op.getQBase(), row)
                  : e.add(op.getQBase(),
                          e.divIdx(e.add(op.getQStart(), row), e.idx(g)));
  };
  Value kp0 = e.add(op.getKBase(), col0);
  Value diff = e.sub(queryPosition(e.ownedRow(0)), kp0);
  Value keys = arith::MinSIOp::create(e.b, e.sub(op.getKvLen(), op.getKStart()),
                                      op.getCols());
  Value left = e.sub(keys, col0);
  for (int k = 0; k < l.rowsPerLane; ++k) {
    Value d = l.rowOffset(k) % g == 0
                  ? e.add(diff, e.idx(l.rowOffset(k) / g))
                  : e.sub(queryPosition(e.ownedRow(k)), kp0);
    if (hasWindow || hasRight)
      d = arith::MaxSIOp::create(
          e.b, arith::MinSIOp::create(e.b, d, e.idx(kClamp)), e.idx(-kClamp));
    Value hi = left, causalHi, lo;
    if (op.getCausal() && !hasWindow && !hasRight)
      causalHi = e.add(d, e.idx(1));
    else if (op.getCausal())
      hi = arith::MinSIOp::create(e.b, hi, e.add(d, e.idx(1)));
    if (hasRight)
      hi = arith::MinSIOp::create(e.b, hi, e.add(d, e.idx(right + 1)));
    if (hasWindow)
      lo = e.sub(d, e.idx(window - 1));
    for (int64_t j = 0; j < l.slices(bn); ++j)
      for (int el = 0; el < l.elementsPerRow; ++el) {
        Value cc = e.idx(l.columnOffset(j, el));
        Value allowed = e.cmpi(P::slt, cc, hi);
        if (causalHi)
          allowed = e.andi(allowed, e.cmpi(P::slt, cc, causalHi));
        if (lo)
          allowed = e.andi(allowed, e.cmpi(P::sge, cc, lo));
        e.storeScore(arith::SelectOp::create(e.b, allowed,
                                             e.loadScore(k, j, el), e.negInf()),
                     k, j, el);
      }
  }
}

void lowerMask(GpuEmitter &e, TileMaskOp op) {
  // Same ownership as tile.qk and tile.softmax_update: no barrier needed.
  int64_t bn = cast<MemRefType>(op.getScores().getType()).getDimSize(1);
  if (masksByDistance(e, op)) {
    // (Threads::scoreShares: the score warpgroup's registers.)
    e.whenScoring([&] { lowerMaskByDistance(e, op, bn); });
    return;
  }
  for (int k = 0; k < e.t.layout.rowsPerLane; ++k) {
    Value r = e.ownedRow(k);
    e.when(e.lt(r, op.getRows()), [&] {
      Value qp = emitQueryPosition(e, op, r);
      if (e.t.scores) {
        // The lane's score registers: every (slice, element), unrolled
        // (with Threads::scoreShares only the score warpgroup has them).
        e.whenScoring([&] {
          e.forAccColumns(bn, [&](int64_t j, int el, Value c) {
            e.when(e.lt(c, op.getCols()), [&] {
              e.storeScore(emitMaskedScore(e, op, r, qp, c, e.t.maskUnit,
                                           e.loadScore(k, j, el)),
                           k, j, el);
            });
          });
        });
        return;
      }
      e.ownedColumns(op.getCols(), [&](Value c) {
        Value at = e.scoreColumn(r, c);
        e.store(emitMaskedScore(e, op, r, qp, c, e.t.maskUnit,
                                e.load(op.getScores(), {r, at})),
                op.getScores(), {r, at});
      });
    });
  }
}

/// Threads::scoreShares: the lane's row statistics computed by the score
/// warpgroup (`compute`: one per row of the lane, the same in every lane of
/// the quad), published to the other warpgroups of its row group, which
/// read them after one barrier (the score warpgroup keeps its own). The
/// slots are rewritten only after the next exchange's barrier, which every
/// reader reaches after reading them.
SmallVector<Value, 4>
exchangeShareStats(GpuEmitter &e,
                   function_ref<SmallVector<Value, 4>()> compute) {
  Value leader =
      arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq, e.t.quad, e.idx(0));
  const int rows = e.t.layout.rowsPerLane;
  SmallVector<Type> types(rows, e.b.getF32Type());
  Value scoring = e.scoringWarpgroup();
  SmallVector<Value> own = e.ifElse(
      scoring, types,
      [&] {
        SmallVector<Value> values(compute());
        for (auto [k, v] : llvm::enumerate(values)) {
          Value r = e.ownedRow(static_cast<int>(k));
          e.when(leader, [&] { e.store(v, e.t.shareMax, r); });
        }
        return values;
      },
      [&] {
        // (Never read: the others load the slots below.)
        return SmallVector<Value>(
            rows, LLVM::PoisonOp::create(e.b, e.b.getF32Type()));
      });
  e.barrier();
  SmallVector<Value> all = e.ifElse(
      scoring, types, [&] { return own; },
      [&] {
        SmallVector<Value> read;
        for (int k = 0; k < rows; ++k)
          read.push_back(e.load(e.t.shareMax, e.ownedRow(k)));
        return read;
      });
  return SmallVector<Value, 4>(all.begin(), all.end());
}

void lowerSoftmax(GpuEmitter &e, TileSoftmaxOp op, bool valuePrefetched,
                  TilePrefetchOp deferredPrefetch, bool pvPending,
                  bool valueScaledAtStore) {
  Value scores = op.getScores(), acc = op.getAcc();
  int64_t bn = cast<MemRefType>(scores.getType()).getDimSize(1);
  int64_t dv = cast<MemRefType>(acc.getType()).getDimSize(1);
  Value stage = e.t.stageV ? e.t.stageV : e.t.stage;
  if (e.t.tma) {
    if (!valuePrefetched && !e.t.producerWarps && !e.t.latent)
      emitTmaIssue(e, 1, op.getValue(), op.getBlockTable(), op.getBatch(),
                   op.getKvHead(), op.getStart(), op.getCols());
    // No CTA barrier tells ptxas that the warp is converged before the quad
    // shuffles (the producer's branch, the masks' uniform ifs): without
    // this it adds divergent slow paths to every shuffle.
    NVVM::SyncWarpOp::create(
        e.b, arith::ConstantIntOp::create(e.b, e.b.getI32Type(), -1));
  } else if (e.t.tensorCores) {
    // (The latent form's V is the K stage: nothing to copy.)
    if (!valuePrefetched && !e.t.latent)
      emitAsyncStage(e, op.getValue(), op.getBlockTable(), op.getBatch(),
                     op.getKvHead(), op.getStart(), op.getCols(), stage,
                     /*commit=*/true, op.getKeyValid(), op.getKvScale());
  } else {
    stageBlock(e, stage, op.getValue(), op.getBlockTable(), op.getBatch(),
               op.getKvHead(), op.getStart(), op.getCols(), bn, dv,
               op.getKvScale());
  }

  // Phase 1, per owned row: the new maximum (quad-reduced), the rescale
  // factor, the probabilities (written over the scores) and their sum, in
  // FMA form (Threads::rawScores): p = exp2(s * f - max * f), one FFMA and
  // one ex2 per score, f = e.t.expScale.
  struct RowUpdate {
    Value row, max, sum, alpha, keep;
  };
  // Lazy rescaling (below) on the tensor-core lowerings, whose P.V
  // multiplies the lane's accumulator registers by the rescale factors:
  // a warp whose rows all keep their maximum skips those multiplies.
  const bool lazyRescale = e.t.tensorCores && e.t.lazyRescale;
  SmallVector<RowUpdate, 4> rows(e.t.layout.rowsPerLane);
  // The lane's scores: the score tile, or its registers on tensor cores
  // (every (slice, element) unrolled).
  auto reduceScores =
      [&](int k, Value r, Value init,
          function_ref<Value(Value s, Value acc, function_ref<void(Value)> set)>
              body) {
        if (!e.t.scores)
          return e.reduceOwnedColumns(bn, init, [&](Value c, Value acc) {
            Value at = e.scoreColumn(r, c);
            return body(e.load(scores, {r, at}), acc, [&](Value p) {
              e.store(p, scores, {r, at});
            });
          });
        auto registers = [&] {
          Value acc = init;
          for (int64_t j = 0; j < bn / e.t.layout.sliceColumns; ++j)
            for (int el = 0; el < e.t.layout.elementsPerRow; ++el)
              acc = body(e.loadScore(k, j, el), acc,
                         [&](Value p) { e.storeScore(p, k, j, el); });
          return acc;
        };
        // Threads::scoreShares: the score warpgroup's; `init` elsewhere.
        if (!e.t.scoreShares)
          return registers();
        return e.ifElse(e.scoringWarpgroup(), registers, init);
      };
  Value f = e.f32(e.t.expScale);
  // An FP8 V's scale per tensor or per KV head (the latent form's: K's) on
  // the probabilities P.V reads, not on the sum: the tensor-core stages hold
  // the exact codes (foldedKvScale). Where tile.store applies it to the
  // rows' outputs instead (valueScalesAtStore), not here.
  Value valueScale = e.t.tensorCores && !valueScaledAtStore
                         ? foldedKvScale(e.b, e.b.getLoc(), op.getValue(),
                                         op.getKvScale(), op.getKvHead())
                         : Value();
  auto laneMax = [&](int k, Value r) {
    return e.quadReduce(
        reduceScores(k, r, e.negInf(),
                     [&](Value s, Value m, function_ref<void(Value)>) {
                       return arith::MaximumFOp::create(e.b, m, s).getResult();
                     }),
        /*isMax=*/true);
  };
  // Score shares: the score warpgroup's block maxima of the rows, given to
  // the row group's other warpgroups (one exchange for all of the lane's
  // rows); every warpgroup then computes the same new maxima, rescale
  // factors and lazy-rescale decisions.
  SmallVector<Value, 4> shareMaxima;
  if (e.t.scoreShares)
    shareMaxima = exchangeShareStats(e, [&] {
      SmallVector<Value, 4> maxima;
      for (int k = 0; k < e.t.layout.rowsPerLane; ++k)
        maxima.push_back(laneMax(k, e.ownedRow(k)));
      return maxima;
    });
  // Each row's offset is its maximum in exp2 units rounded once,
  // round(max * f) (mul.rn: never contracted into an FFMA), and the
  // rescale factor is taken between the offsets themselves,
  // exp2(round(old * f) - round(new * f)), so that the blocks of a row
  // weigh their scores against the same rounded offsets. The FMA form
  // subtracts the offset from the exact s * f: the row's largest score gets
  // exp2(max * f - round(max * f)), up to 2^(ulp / 2), infinite from
  // |max * f| >= 2^31 (scaled scores of about 1.5e9). A warp with a row
  // whose offset reaches kExactSoftmaxOffset takes the exact form for the
  // block: its scores are first rounded as the offsets are, s = round(s *
  // f), and the same FFMA then runs with a multiplier of 1, giving
  // round(s * f) - round(max * f): 0 for the maximum, <= 0 for the others
  // (rounding is monotone). Below that offset |max * f - round(max * f)|
  // <= 4: probabilities below 2^4 (2^12 with lazy rescaling), finite in
  // f16 P (docs/gpu-lowering.md, "Softmax in FMA form").
  const bool roundedOffsets = e.t.expScale != 1.0;
  auto toOffset = [&](Value max) {
    return roundedOffsets ? e.mulRn(max, f) : max;
  };
  // `none`: the row has nothing allowed yet (max = -inf). It is decided
  // on the new maximum before lazy rescaling, which keeps a maximum only
  // if it did not move or moved from a finite one: the same rows.
  SmallVector<Value, 4> oldMaxima, newMaxima, oldOffsets, newOffsets, nones;
  Value anyHuge;
  for (int k = 0; k < e.t.layout.rowsPerLane; ++k) {
    Value r = e.ownedRow(k);
    Value oldMax = e.loadRowStat(op.getMax(), 0, k, r);
    Value blockMax = e.t.scoreShares ? shareMaxima[k] : laneMax(k, r);
    Value newMax = arith::MaximumFOp::create(e.b, oldMax, blockMax);
    Value none = arith::CmpFOp::create(e.b, arith::CmpFPredicate::OEQ, newMax,
                                       e.negInf());
    oldMaxima.push_back(oldMax);
    newMaxima.push_back(newMax);
    oldOffsets.push_back(toOffset(oldMax));
    newOffsets.push_back(toOffset(newMax));
    nones.push_back(none);
    if (!roundedOffsets)
      continue;
    // |offset| >= the limit, decided on the new maximum (lazy rescaling
    // keeps an old one only within 8 of it: 2^26 leaves the FMA form room
    // for that, even in f16).
    // (One op per statement: the IR's order must not depend on the host
    // compiler's order of evaluating arguments.)
    Value size = math::AbsFOp::create(e.b, newOffsets[k]);
    Value atLimit = arith::CmpFOp::create(e.b, arith::CmpFPredicate::OGE, size,
                                          e.f32(kExactSoftmaxOffset));
    Value some = arith::XOrIOp::create(e.b, none,
                                       arith::ConstantIntOp::create(e.b, 1, 1));
    Value huge = arith::AndIOp::create(e.b, atLimit, some);
    anyHuge =
        anyHuge ? arith::OrIOp::create(e.b, anyHuge, huge).getResult() : huge;
  }
  // The exact form's rounding of the warp's scores, before anything else
  // of the rows is computed (nothing but the scores lives across it).
  Value scoreUnit = f;
  if (anyHuge) {
    anyHuge = e.warpAny(anyHuge);
    e.when(anyHuge, [&] {
      for (int k = 0; k < e.t.layout.rowsPerLane; ++k)
        reduceScores(k, e.ownedRow(k), e.f32(0),
                     [&](Value s, Value acc, function_ref<void(Value)> set) {
                       set(e.mulRn(s, f));
                       return acc;
                     });
    });
    scoreUnit = arith::SelectOp::create(e.b, anyHuge, e.f32(1), f);
  }
  SmallVector<Value, 4> negOffsets, keeps, alphaArgs;
  for (int k = 0; k < e.t.layout.rowsPerLane; ++k) {
    Value oldMax = oldMaxima[k], oldOffset = oldOffsets[k];
    Value &newMax = newMaxima[k];
    Value newOffset = newOffsets[k];
    // Lazy rescaling: the row keeps its old maximum while the block raises
    // its offset by at most kLazyRescaleLog2; the row's probabilities are
    // then at most 2^kLazyRescaleLog2 (times the FMA form's rounding) and
    // its rescale factor exactly 1 (softmax is shift-invariant: the sum and
    // the accumulator share the stale maximum, and out = acc / sum and
    // lse = max + log(sum) are unchanged). A first finite maximum (growth
    // +inf) and a NaN take the update; a row whose maximum did not move
    // keeps it, -inf included (padding rows and rows with nothing allowed
    // yet, whose accumulator is zero: they would otherwise make their warp
    // rescale in every block).
    Value keep;
    if (lazyRescale) {
      Value growth = arith::SubFOp::create(e.b, newOffset, oldOffset);
      Value small = arith::CmpFOp::create(e.b, arith::CmpFPredicate::OLE,
                                          growth, e.f32(kLazyRescaleLog2));
      Value same =
          arith::CmpFOp::create(e.b, arith::CmpFPredicate::OEQ, newMax, oldMax);
      keep = arith::OrIOp::create(e.b, small, same);
      newMax = arith::SelectOp::create(e.b, keep, oldMax, newMax);
      newOffset = arith::SelectOp::create(e.b, keep, oldOffset, newOffset);
    }
    // The offset is 0 while nothing is allowed (max = -inf), so that the
    // probabilities of its -inf scores and the rescale factor are
    // exp2(-inf) = 0 rather than NaN.
    Value offset = arith::SelectOp::create(e.b, nones[k], e.f32(0), newOffset);
    Value negOffset = arith::NegFOp::create(e.b, offset);
    negOffsets.push_back(negOffset);
    keeps.push_back(keep);
    alphaArgs.push_back(e.addf(oldOffset, negOffset));
  }
  // Each row's rescale factor and block sum; the probabilities written over
  // the scores. On tensor cores each lane sums its own columns and the
  // quad's sums are combined once, by tile.store (the rescale factor is
  // the quad's).
  for (int k = 0; k < e.t.layout.rowsPerLane; ++k) {
    Value r = e.ownedRow(k);
    Value oldSum = e.loadRowStat(op.getSum(), 1, k, r);
    // A kept maximum's factor is exp2(0) = 1 (a kept -inf's is 0 on a
    // zero accumulator and sum).
    Value alpha = e.exp2(alphaArgs[k]);
    Value blockSum = reduceScores(
        k, r, e.f32(0), [&](Value s, Value sum, function_ref<void(Value)> set) {
          Value p = e.exp2(e.fma(s, scoreUnit, negOffsets[k]));
          set(valueScale ? e.mulf(p, valueScale) : p);
          return e.addf(sum, p);
        });
    if (!e.t.rowStats)
      blockSum = e.quadReduce(blockSum, /*isMax=*/false);
    rows[k] = {r, newMaxima[k], e.fma(alpha, oldSum, blockSum), alpha,
               keeps[k]};
  }
  // Every probability and the V block are in shared memory; every lane has
  // read the old max and sum.
  // V of this block must have landed (the newest group: the next K block
  // is announced below).
  // The TMA ring: this block's V stage has landed (its full barrier), its
  // rows past the block's keys zeroed if it is short; no CTA barrier.
  Value vAddress;
  if (e.t.tma) {
    if (e.t.latent) {
      // V is the K stage tile.qk acquired (and zeroed past the keys).
      vAddress = tmaStageAddress(e, 0, tmaBlockStage(e, 0, op.getStart()));
    } else {
      // Intra-warpgroup overlap: the previous block's P.V (issued by this
      // block's tile.qk) ran during the softmax above; it is retired before
      // the accumulator is rescaled, and its V stage released before this
      // block's is acquired (the ring's consumed count).
      if (pvPending)
        emitWaitForDeferredPV(e);
      Value vStage = emitTmaAcquire(e, 1, op.getStart());
      emitZeroValueTail(e, 1, vStage, op.getCols(), bn, dv);
      vAddress = tmaStageAddress(e, 1, vStage);
    }
  } else if (e.t.tensorCores) {
    // cp.async stages: the op's kvattn.stage_sync (StageSync.cpp). V has
    // landed (wait_group 0: the next K block is announced below), wgmma's
    // proxy fence, the barrier. The latent form has none: V is the K
    // stage, landed and published by tile.qk's barrier, and the scores and
    // statistics are the lane's own; tile.qk's next barrier keeps the next
    // K block out of the stage until every warp's P.V has read it.
    emitStageSync(e, getStageSync(op));
  } else {
    e.barrier(); // the V block this op staged, for every thread
  }
  // Tensor cores: the next K block's copies start here, after the barrier
  // that follows every warp's Q.K^T of this block (the K stage is free),
  // and load while P.V and the next V block's copies run. One barrier per
  // block fewer than issuing them right after Q.K^T.
  if (deferredPrefetch)
    lowerPrefetchOnTensorCores(e, deferredPrefetch);

  // Phase 2: acc = alpha * acc + P . V on the lane's accumulator entries.
  if (e.t.tensorCores) {
    SmallVector<Value, 4> alphas;
    for (const RowUpdate &u : rows)
      alphas.push_back(u.alpha);
    // acc *= alpha, row by row, on the lane's accumulator registers.
    auto rescaleAcc = [&] {
      auto accType = cast<MemRefType>(e.t.acc.getType());
      for (int k = 0; k < accType.getDimSize(0); ++k)
        for (int64_t j = 0; j < accType.getDimSize(1); ++j)
          for (int el = 0; el < accType.getDimSize(2); ++el)
            e.storeAcc(e.mulf(alphas[k], e.loadAcc(k, j, el)), k, j, el);
    };
    if (lazyRescale) {
      // The accumulator is rescaled only when a row of the warp took a new
      // maximum (a warp-uniform branch: vote.any); the P.V then starts
      // from it as it is (a factor of 1 folds away).
      Value update = arith::ConstantIntOp::create(e.b, 0, 1);
      for (const RowUpdate &u : rows)
        update = arith::OrIOp::create(
            e.b, update,
            arith::XOrIOp::create(e.b, u.keep,
                                  arith::ConstantIntOp::create(e.b, 1, 1)));
      e.when(e.warpAny(update), [&] { rescaleAcc(); });
      std::fill(alphas.begin(), alphas.end(), e.f32(1));
    }
    if (e.t.overlapPV) {
      // The P.V waits for the next tile.qk (or the store): the accumulator
      // is rescaled now (lazily: done above), the probabilities kept in
      // registers.
      if (!lazyRescale)
        rescaleAcc();
      emitDeferPV(e, op);
    } else if (e.t.wgmma)
      emitPVWithWgmma(e, op, stage, alphas, vAddress);
    else
      emitPVOnTensorCores(e, op, stage, alphas);
  }
  for (int k = 0, n = static_cast<int>(rows.size()); k < n; ++k) {
    const RowUpdate &u = rows[k];
    if (!e.t.tensorCores)
      e.forAccColumns(dv, [&](int64_t j, int el, Value x) {
        Value pv =
            e.reduce(e.idx(0), op.getCols(), e.f32(0), [&](Value c, Value sum) {
              Value v = e.load(stage, {c, x});
              if (!v.getType().isF32())
                v = arith::ExtFOp::create(e.b, e.b.getF32Type(), v);
              Value p = e.load(scores, {u.row, c});
              // A forbidden key (p == 0) is skipped, not multiplied by zero:
              // its value may be NaN or infinite.
              Value skip = arith::CmpFOp::create(e.b, arith::CmpFPredicate::OEQ,
                                                 p, e.f32(0));
              return arith::SelectOp::create(
                  e.b, skip, sum, e.addf(sum, e.mulf(p, v, true), true));
            });
        e.storeAcc(e.addf(e.mulf(u.alpha, e.loadAcc(k, j, el)), pv), k, j, el);
      });
    if (e.t.rowStats) { // every lane keeps its rows' state
      e.store(u.max, e.t.rowStats, {e.idx(0), e.idx(k)});
      e.store(u.sum, e.t.rowStats, {e.idx(1), e.idx(k)});
      continue;
    }
    // One lane of the quad publishes the row state.
    Value leader = arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq,
                                         e.t.quad, e.idx(0));
    e.when(arith::AndIOp::create(e.b, leader, e.lt(u.row, op.getRows())), [&] {
      e.store(u.max, op.getMax(), u.row);
      e.store(u.sum, op.getSum(), u.row);
    });
  }
  // Tensor cores: no barrier. The scores and row statistics are the lane's
  // own, the next V block is issued after the next tile.qk's barrier (which
  // every warp reaches only after this P.V), the next K block was issued
  // above after this op's barrier. Otherwise the next block overwrites the
  // staging block and the scores, and the published statistics are read.
  if (!e.t.tensorCores)
    e.barrier();
}

/// The LSE of owned row `r` (below the program's rows), by the quad's
/// leader: -inf for a row without any allowed key. `given`: the row's
/// normalisation where the caller has it (else computed here).
void storeRowLse(GpuEmitter &e, TileStoreOp op, int k, Value r,
                 const RowNormalisation *given = nullptr) {
  Value lse = op.getLse();
  if (!lse)
    return;
  Value leader =
      arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq, e.t.quad, e.idx(0));
  // With a value split the row's warps hold the same statistics: the first
  // writes the lse.
  if (e.t.valueSlice)
    leader = arith::AndIOp::create(
        e.b, leader,
        arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq, e.t.valueSlice,
                              e.idx(0)));
  e.when(leader, [&] {
    QueryRow q = queryRowOf(e, op.getHead(), op.getStart(), op.getGroup(), r);
    if (given) {
      e.store(emitRowLse(e, *given), lse, {op.getBatch(), q.head, q.row});
      return;
    }
    // The running max is in base-2 units.
    Value rowMax = e.loadRowStat(op.getMax(), 0, k, r);
    Value sum = e.loadRowStat(op.getSum(), 1, k, r);
    Value sink = loadSink(e, op.getSinks(), q.head);
    Value shift =
        emitAlibiShift(e, op.getAlibiSlopes(), op.getAlibiRef(), q.head);
    RowNormalisation n =
        emitRowNormalisation(e, rowMax, sum, sink, e.t.lseUnit, shift);
    e.store(emitRowLse(e, n), lse, {op.getBatch(), q.head, q.row});
  });
}

/// The output rows of one warp through its own rows of the query tile: each
/// lane writes its normalised entries as 16-bit pairs (swizzled like Q),
/// the warp synchronises, then each lane stores whole 16-byte chunks of
/// rows below `rows` (sectors fully used, 8x fewer store requests). Only
/// the warp's own Q rows are touched, which only its own ldmatrix reads.
/// With a value split (`dv` the warp's columns from `base`) the warps of a
/// row group share its Q rows: each touches only its own columns, after a
/// block barrier (the group's last Q.K^T).
void storeRowsVectorized(GpuEmitter &e, TileStoreOp op, Value staging,
                         int64_t dv, Value base, Value valueScale) {
  Value out = op.getOut();
  Type outType = cast<MemRefType>(out.getType()).getElementType();
  auto pairType = VectorType::get({2}, outType);
  // The warp's last reads of these rows may be its query fragments' ldmatrix
  // right after tile.load_q (no KV block, so no block barrier since): the
  // warp synchronises before overwriting them.
  if (e.t.qFragments)
    NVVM::SyncWarpOp::create(
        e.b, arith::ConstantIntOp::create(e.b, e.b.getI32Type(), -1));
  // sm_90a: the query tile is panelled and read by whole warpgroups, so a
  // warp's output rows share bytes with other warps' query rows: every
  // warpgroup's last Q.K^T first.
  if (e.t.wgmma || e.t.valueSplit > 1)
    e.barrier();
  for (int k = 0; k < e.t.layout.rowsPerLane; ++k) {
    Value r = e.ownedRow(k);
    // A row past `rows` reads its head's sink too (a valid head: the
    // group's), and its values are never stored.
    Value sink, shift;
    if (op.getSinks() || op.getAlibiSlopes()) {
      Value head =
          queryRowOf(e, op.getHead(), op.getStart(), op.getGroup(), r).head;
      sink = loadSink(e, op.getSinks(), head);
      shift = emitAlibiShift(e, op.getAlibiSlopes(), op.getAlibiRef(), head);
    }
    RowNormalisation n = emitRowNormalisation(
        e, e.loadRowStat(op.getMax(), 0, k, r),
        e.loadRowStat(op.getSum(), 1, k, r), sink, e.t.lseUnit, shift);
    // The row's lse from the same normalisation, right away: the row's
    // statistics die here rather than after every row's output (with them
    // live to the end, ptxas spilled the 128-row D = 128 kernels).
    if (op.getLse())
      e.when(e.lt(r, op.getRows()), [&] { storeRowLse(e, op, k, r, &n); });
    Value empty = n.noKey, inv = n.inv;
    if (valueScale)
      inv = e.mulf(inv, valueScale);
    for (int64_t j = 0; j < e.t.layout.slices(dv); ++j) {
      SmallVector<Value, 2> pair;
      for (int el = 0; el < e.t.layout.elementsPerRow; ++el) {
        Value v = e.mulf(e.loadAcc(k, j, el), inv);
        v = arith::SelectOp::create(e.b, empty, e.f32(0), v);
        pair.push_back(arith::TruncFOp::create(e.b, outType, v));
      }
      Value col = e.add(base, e.accColumn(j, 0));
      vector::StoreOp::create(
          e.b, vector::FromElementsOp::create(e.b, pairType, pair), staging,
          ValueRange{r, swizzledCol(e, staging, r, col)},
          /*nontemporal=*/false, llvm::Align(4));
    }
  }
  NVVM::SyncWarpOp::create(
      e.b, arith::ConstantIntOp::create(e.b, e.b.getI32Type(), -1));
  constexpr int64_t kChunk = 8;
  const int64_t chunksPerRow = dv / kChunk;
  auto chunkType = VectorType::get({kChunk}, outType);
  const int64_t warpRows = e.t.layout.warpRows;
  Value firstRow = e.mulIdx(e.t.warp, warpRows);
  // The warp's rows x chunksPerRow chunks, 32 lanes at a time.
  e.loop(e.idx(0), e.idx((warpRows * chunksPerRow + 31) / 32), [&](Value n) {
    Value i = e.add(e.mulIdx(n, 32), e.t.lane);
    Value rr = e.divIdx(i, e.idx(chunksPerRow));
    Value r = e.add(firstRow, rr);
    Value x = e.add(base, e.mulIdx(e.remIdx(i, e.idx(chunksPerRow)), kChunk));
    e.when(arith::AndIOp::create(e.b, e.lt(rr, e.idx(warpRows)),
                                 e.lt(r, op.getRows())),
           [&] {
             Value v = vector::LoadOp::create(
                 e.b, chunkType, staging,
                 ValueRange{r, swizzledCol(e, staging, r, x)},
                 /*nontemporal=*/false, llvm::Align(16));
             QueryRow q =
                 queryRowOf(e, op.getHead(), op.getStart(), op.getGroup(), r);
             vector::StoreOp::create(
                 e.b, v, out, ValueRange{op.getBatch(), q.head, q.row, x},
                 /*nontemporal=*/false, llvm::Align(16));
           });
  });
}

/// tile.store; `valueScale`, when given, multiplies every output (an FP8
/// V's scale that the probabilities did not take: valueScalesAtStore).
void lowerStore(GpuEmitter &e, TileStoreOp op, Value valueScale) {
  // Intra-warpgroup overlap: the last block's P.V.
  if (e.t.overlapPV)
    emitFlushDeferredPV(e);
  // Ping-pong: warpgroup 0's last turn is over (warpgroup 1's last P.V may
  // start).
  emitPingPongEnd(e);
  // Tensor cores: each lane's sums are its own columns' (tile.softmax_update);
  // the row's is the quad's, combined here once (the whole warp is here).
  // Score shares: the score warpgroup summed the probabilities; the row
  // group's other warpgroups take its sums.
  if (e.t.rowStats) {
    auto quadSums = [&] {
      SmallVector<Value, 4> sums;
      for (int k = 0; k < e.t.layout.rowsPerLane; ++k)
        sums.push_back(e.quadReduce(e.load(e.t.rowStats, {e.idx(1), e.idx(k)}),
                                    /*isMax=*/false));
      return sums;
    };
    SmallVector<Value, 4> sums =
        e.t.scoreShares ? exchangeShareStats(e, quadSums) : quadSums();
    for (auto [k, sum] : llvm::enumerate(sums))
      e.store(sum, e.t.rowStats, {e.idx(1), e.idx(k)});
  }
  Value out = op.getOut();
  Type outType = cast<MemRefType>(out.getType()).getElementType();
  const int64_t fullDv = cast<MemRefType>(op.getAcc().getType()).getDimSize(1);
  // The warp's output columns: [base, base + dv) (all of them without a
  // value split).
  const int64_t dv = fullDv / e.t.valueSplit;
  Value base = e.valueColumnBase(fullDv);
  // Tensor cores, a 16-bit output whose rows fit the warp's Q rows: 16-byte
  // stores through shared memory.
  if (e.t.tensorCores && e.t.qTile && outType.getIntOrFloatBitWidth() == 16 &&
      dv % 8 == 0) {
    Value staging = halfView(e, e.t.qTile, outType);
    if (fullDv <= cast<MemRefType>(staging.getType()).getDimSize(1)) {
      // (The lse too.)
      storeRowsVectorized(e, op, staging, dv, base, valueScale);
      return;
    }
  }
  for (int k = 0; k < e.t.layout.rowsPerLane; ++k) {
    Value r = e.ownedRow(k);
    e.when(e.lt(r, op.getRows()), [&] {
      QueryRow q = queryRowOf(e, op.getHead(), op.getStart(), op.getGroup(), r);
      Value rowMax = e.loadRowStat(op.getMax(), 0, k, r);
      Value sum = e.loadRowStat(op.getSum(), 1, k, r);
      Value sink = loadSink(e, op.getSinks(), q.head);
      Value shift =
          emitAlibiShift(e, op.getAlibiSlopes(), op.getAlibiRef(), q.head);
      RowNormalisation n =
          emitRowNormalisation(e, rowMax, sum, sink, e.t.lseUnit, shift);
      Value empty = n.noKey, inv = n.inv;
      if (valueScale)
        inv = e.mulf(inv, valueScale);
      auto normalised = [&](int64_t j, int el) {
        Value v = e.mulf(e.loadAcc(k, j, el), inv);
        v = arith::SelectOp::create(e.b, empty, e.f32(0), v);
        if (!outType.isF32())
          v = arith::TruncFOp::create(e.b, outType, v);
        return v;
      };
      if (dv % 8 == 0) {
        // The lane's two adjacent columns of each 8-column slice as one
        // store: a quad writes 4 x 2 elements of a row (a whole 32-byte
        // sector of an f32 row: split-KV's partial states).
        auto pairType = VectorType::get({2}, outType);
        const unsigned align = 2 * outType.getIntOrFloatBitWidth() / 8;
        for (int64_t j = 0; j < e.t.layout.slices(dv); ++j) {
          Value pair = vector::FromElementsOp::create(
              e.b, pairType, ValueRange{normalised(j, 0), normalised(j, 1)});
          vector::StoreOp::create(e.b, pair, out,
                                  ValueRange{op.getBatch(), q.head, q.row,
                                             e.add(base, e.accColumn(j, 0))},
                                  /*nontemporal=*/false, llvm::Align(align));
        }
      } else {
        e.forAccColumns(dv, [&](int64_t j, int el, Value x) {
          e.store(normalised(j, el), out, {op.getBatch(), q.head, q.row, x});
        });
      }
      storeRowLse(e, op, k, r);
    });
  }
}

/// The merged `out[x .. x + W)` of one row from the parts' row lses, loaded
/// once (`lses`, N values, in part order): the arithmetic of emitMergedRow
/// and emitMergedOut, element by element, with each part's weight
/// `exp(lse_n - peak)` computed once for the W columns.
Value emitMergedChunk(GpuEmitter &e, Value outParts, ArrayRef<Value> lses,
                      const MergedRow &row, Value b, Value h, Value i, Value x,
                      int64_t w) {
  using namespace merge_detail;
  auto vecType = VectorType::get({w}, e.b.getF32Type());
  Value acc = vector::BroadcastOp::create(e.b, vecType, e.f32(0));
  for (auto [p, l] : llvm::enumerate(lses)) {
    Value v = vector::LoadOp::create(
        e.b, vecType, outParts,
        ValueRange{e.idx(static_cast<int64_t>(p)), b, h, i, x},
        /*nontemporal=*/false, llvm::Align(4 * w));
    acc = accumulatePart(e, acc, l, row.peak, v);
  }
  return normalise(e, acc, row.peak, row.sum);
}

/// The same for a part count known at run time (a run-time split: the
/// parts' leading dimension): the part lses are read again in a loop over
/// the parts (the same word for a warp's lanes of one row), the same
/// operations in the same order.
Value emitMergedChunk(GpuEmitter &e, Value outParts, Value lseParts,
                      const MergedRow &row, Value b, Value h, Value i, Value x,
                      int64_t w) {
  using namespace merge_detail;
  auto vecType = VectorType::get({w}, e.b.getF32Type());
  Value zero = vector::BroadcastOp::create(e.b, vecType, e.f32(0));
  Value acc =
      e.reduce(e.idx(0), e.dimOf(lseParts, 0), zero, [&](Value p, Value a) {
        Value l = e.load(lseParts, {p, b, h, i});
        Value v = vector::LoadOp::create(
            e.b, vecType, outParts, ValueRange{p, b, h, i, x},
            /*nontemporal=*/false, llvm::Align(4 * w));
        return accumulatePart(e, a, l, row.peak, v);
      });
  return normalise(e, acc, row.peak, row.sum);
}

/// The merge kernel of a split: all threads together over the (row,
/// chunk) pairs of the block's rows. With Dv % 4 == 0 a thread takes 4
/// adjacent columns: with a static part count N (the tile pass's, up to
/// 64) it loads its row's N part lses once (a warp's lanes of one row read
/// the same word) and keeps them in registers, with a count known at run
/// time it reads them in loops over the parts; then one 16-byte vector per
/// part, and it stores the 4 merged values at once. Otherwise one column
/// per thread, each recomputing the row's lse (N exponentials). The values
/// are the same either way.
LogicalResult lowerMergeKernel(gpu::GPUFuncOp kernel, int64_t numWarps) {
  ImplicitLocOpBuilder b(kernel.getLoc(), kernel.getContext());
  b.setInsertionPointToStart(&kernel.getBody().front());
  Threads t;
  t.count = 32 * numWarps;
  t.tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  SmallVector<TileMergeOp> merges;
  kernel.walk([&](TileMergeOp op) { merges.push_back(op); });
  for (TileMergeOp op : merges) {
    auto partsType = cast<MemRefType>(op.getOutParts().getType());
    int64_t dv = partsType.getDimSize(4);
    if (ShapedType::isDynamic(dv))
      return op.emitOpError() << "kvattn-lower-tile-to-gpu: the merge needs "
                                 "a static value head dim";
    ImplicitLocOpBuilder ob(op.getLoc(), op);
    GpuEmitter e(ob, t);
    Type outType = cast<MemRefType>(op.getOut().getType()).getElementType();
    auto storeLse = [&](Value x, Value i, Value lseValue) {
      if (Value lse = op.getLse())
        e.when(
            arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq, x, e.idx(0)),
            [&] {
              e.store(lseValue, lse, {op.getBatch(), op.getHead(), i});
            });
    };
    constexpr int64_t kChunk = 4, kMaxRegisterParts = 64;
    // Columns x .. x + 4 of row i, and its lse.
    auto storeChunk = [&](Value v, Value x, Value i, Value lseValue) {
      if (!outType.isF32())
        v = arith::TruncFOp::create(e.b, VectorType::get({kChunk}, outType), v);
      vector::StoreOp::create(
          e.b, v, op.getOut(), ValueRange{op.getBatch(), op.getHead(), i, x},
          /*nontemporal=*/false,
          llvm::Align(kChunk * outType.getIntOrFloatBitWidth() / 8));
      storeLse(x, i, lseValue);
    };
    // The part lses stay in registers: up to 64 parts (split-kv = 0's
    // largest count).
    const int64_t parts = partsType.getDimSize(0);
    const bool lsesInRegisters =
        ShapedType::isStatic(parts) && parts <= kMaxRegisterParts;
    if (dv % kChunk == 0) {
      const int64_t chunks = dv / kChunk;
      e.cooperative(e.mulIdx(op.getRows(), chunks), [&](Value n) {
        Value r = e.divIdx(n, e.idx(chunks));
        Value x = e.mulIdx(e.remIdx(n, e.idx(chunks)), kChunk);
        Value i = e.add(op.getStart(), r);
        if (lsesInRegisters) {
          SmallVector<Value> lses;
          for (int64_t p = 0; p < parts; ++p)
            lses.push_back(e.load(op.getLseParts(),
                                  {e.idx(p), op.getBatch(), op.getHead(), i}));
          Value sink = loadSink(e, op.getSinks(), op.getHead());
          Value shift = emitAlibiShift(e, op.getAlibiSlopes(), op.getAlibiRef(),
                                       op.getHead());
          MergedRow row = emitMergedRow(lses, e, sink, shift);
          storeChunk(emitMergedChunk(e, op.getOutParts(), lses, row,
                                     op.getBatch(), op.getHead(), i, x, kChunk),
                     x, i, row.lse);
          return;
        }
        Value sink = loadSink(e, op.getSinks(), op.getHead());
        Value shift = emitAlibiShift(e, op.getAlibiSlopes(), op.getAlibiRef(),
                                     op.getHead());
        MergedRow row = emitMergedRow(e, op.getLseParts(), op.getBatch(),
                                      op.getHead(), i, sink, shift);
        storeChunk(emitMergedChunk(e, op.getOutParts(), op.getLseParts(), row,
                                   op.getBatch(), op.getHead(), i, x, kChunk),
                   x, i, row.lse);
      });
      op->erase();
      continue;
    }
    Value width = e.idx(dv);
    e.cooperative(e.mulIdx(op.getRows(), dv), [&](Value n) {
      Value r = e.divIdx(n, width), x = e.remIdx(n, width);
      Value i = e.add(op.getStart(), r);
      Value sink = loadSink(e, op.getSinks(), op.getHead());
      Value shift = emitAlibiShift(e, op.getAlibiSlopes(), op.getAlibiRef(),
                                   op.getHead());
      MergedRow row = emitMergedRow(e, op.getLseParts(), op.getBatch(),
                                    op.getHead(), i, sink, shift);
      Value v = emitMergedOut(e, op.getOutParts(), op.getLseParts(), row,
                              op.getBatch(), op.getHead(), i, x);
      e.store(truncTo(e, v, outType), op.getOut(),
              {op.getBatch(), op.getHead(), i, x});
      storeLse(x, i, row.lse);
    });
    op->erase();
  }
  return success();
}

} // namespace

/// The lowering state of one kernel, shared by its tile ops' patterns.
class mlir::kvattn::GpuTileLowering {
public:
  gpu::GPUFuncOp kernel;
  TensorCoreMode mode = TensorCoreMode::scalar;
  Threads t;
  ThreadConstants constants;
  /// The tile ops lowered where they stand, in program order (not the
  /// tile.prefetch ops their tile.softmax_update issues).
  SmallVector<Operation *> tileOps;
  /// The schedule's pairings: the tile.softmax_update whose V block a
  /// tile.qk issues, and those whose V is issued (by their tile.qk, lowered
  /// first); the tile.prefetch a tile.softmax_update issues.
  llvm::DenseMap<Operation *, TileSoftmaxOp> valuePrefetch;
  llvm::SmallPtrSet<Operation *, 4> valuePrefetched;
  llvm::DenseMap<Operation *, TilePrefetchOp> deferredPrefetch;
  /// Intra-warpgroup overlap: the tile.softmax_update ops that run while the
  /// previous block's P.V is in flight (their tile.qk issued it).
  llvm::SmallPtrSet<Operation *, 4> pvPending;
  /// Tensor cores, an FP8 V with one scale per tensor or per KV head: the
  /// tile.store that multiplies its rows by that scale (the scale memref and
  /// KV head, both defined before it), and the tile.softmax_update ops that
  /// then leave their probabilities unscaled (valueScalesAtStore).
  llvm::DenseMap<Operation *, std::pair<Value, Value>> storeValueScale;
  llvm::SmallPtrSet<Operation *, 4> valueScaledAtStore;

  /// The tile.softmax_update whose V block `qk` issues, recorded as issued;
  /// null where the schedule pairs none.
  TileSoftmaxOp takeValuePrefetch(TileQKOp qk) {
    TileSoftmaxOp softmax = valuePrefetch.lookup(qk);
    if (softmax)
      valuePrefetched.insert(softmax);
    return softmax;
  }

  /// The tiles that become registers, erased once their uses are lowered.
  memref::AllocaOp accTile, scoreTile;
  SmallVector<memref::AllocaOp> statTiles;
};

/// The tensor-core stages hold an FP8 V's exact codes, and its scale, one
/// per tensor or per KV head, is the same for every key: P.(s V) = s (P.V),
/// so the rows' outputs are multiplied by it once, at tile.store, instead
/// of every probability of every block (one FMUL per row, not one per
/// score; the probabilities keep their f16 range). Recorded for the
/// tile.store whose accumulator's every tile.softmax_update reads such a V
/// with the same scale and KV head, both defined before the store (the
/// store loads the scale); the others scale their probabilities.
static void valueScalesAtStore(GpuTileLowering &state) {
  DominanceInfo dominance(state.kernel);
  for (Operation *op : state.tileOps) {
    auto store = dyn_cast<TileStoreOp>(op);
    if (!store)
      continue;
    SmallVector<TileSoftmaxOp> softmaxes;
    for (Operation *user : store.getAcc().getUsers())
      if (auto softmax = dyn_cast<TileSoftmaxOp>(user))
        softmaxes.push_back(softmax);
    if (softmaxes.empty())
      continue;
    Value scale = softmaxes.front().getKvScale();
    Value kvHead = softmaxes.front().getKvHead();
    bool uniform = llvm::all_of(softmaxes, [&](TileSoftmaxOp softmax) {
      return isFp8(softmax.getValue().getType()) &&
             isUniformKvScale(softmax.getKvScale()) &&
             softmax.getKvScale() == scale && softmax.getKvHead() == kvHead;
    });
    if (!uniform || !dominance.properlyDominates(scale, store) ||
        !dominance.properlyDominates(kvHead, store))
      continue;
    state.storeValueScale[store] = {scale, kvHead};
    for (TileSoftmaxOp softmax : softmaxes)
      state.valueScaledAtStore.insert(softmax);
  }
}

void mlir::kvattn::GpuTileLoweringDeleter::operator()(
    GpuTileLowering *state) const {
  delete state;
}

TensorCoreMode mlir::kvattn::getTensorCoreMode(const GpuTileLowering &state) {
  return state.mode;
}

namespace {

/// Warp specialisation (docs/gpu-lowering.md, "Hopper (sm_90a)"): the
/// program's body (every op from `b`'s insertion point, which follows the
/// entry code prepareGpuTileLowering wrote, to the terminator) moves into
/// the consumers' branch (threads below t.count); a clone of it goes to
/// the producer warpgroup, where its first thread walks the same KV blocks
/// in the same order and issues each block's copies at the block's
/// tile.qk (K) and tile.softmax_update (V), through the rings' empty
/// barriers; every other tile op of the clone, and what only fed them, is
/// dropped. With two consumer warpgroups the producer gives its registers
/// back (setmaxnreg.dec 24) and the consumers take them (setmaxnreg.inc 240).
void specializeProducerWarps(GpuTileLowering &state, ImplicitLocOpBuilder &b) {
  Threads &t = state.t;
  Block &entry = state.kernel.getBody().front();
  // The last op of the entry code (the program's ops follow it).
  Operation *entryCode = &*std::prev(b.getInsertionPoint());
  // The program's memref.alloca_scope opens into the kernel (an automatic
  // allocation scope itself): nested in the roles' branches it would no
  // longer be inlined, and a scope of several blocks does not lower.
  for (auto scope :
       llvm::make_early_inc_range(entry.getOps<memref::AllocaScopeOp>())) {
    Block &body = scope.getBodyRegion().front();
    Operation *ret = body.getTerminator();
    scope->replaceAllUsesWith(ret->getOperands());
    ret->erase();
    entry.getOperations().splice(scope->getIterator(), body.getOperations());
    scope->erase();
  }
  Block::iterator first = std::next(entryCode->getIterator());
  b.setInsertionPoint(&entry, first);
  Operation *terminator = entry.getTerminator();
  Value producer =
      arith::CmpIOp::create(b, arith::CmpIPredicate::uge, t.tid,
                            arith::ConstantIndexOp::create(b, t.count));
  auto roles = scf::IfOp::create(b, TypeRange{}, producer,
                                 /*withElseRegion=*/true);
  Block *consumers = roles.elseBlock();
  consumers->getOperations().splice(consumers->getTerminator()->getIterator(),
                                    entry.getOperations(), first,
                                    terminator->getIterator());
  const bool trade = t.count == 2 * 128; // two consumer warpgroups

  OpBuilder pb = OpBuilder::atBlockBegin(roles.thenBlock());
  if (trade)
    NVVM::SetMaxRegisterOp::create(pb, b.getLoc(), kProducerRegisters,
                                   NVVM::SetMaxRegisterAction::decrease);
  Value issuer = arith::CmpIOp::create(
      pb, b.getLoc(), arith::CmpIPredicate::eq, t.tid,
      arith::ConstantIndexOp::create(pb, b.getLoc(), t.count));
  auto issuing = scf::IfOp::create(pb, b.getLoc(), TypeRange{}, issuer,
                                   /*withElseRegion=*/false);
  OpBuilder ib = OpBuilder::atBlockBegin(issuing.thenBlock());
  IRMapping clones;
  for (Operation &op : consumers->without_terminator())
    ib.clone(op, clones);
  if (trade) {
    OpBuilder cb = OpBuilder::atBlockBegin(consumers);
    NVVM::SetMaxRegisterOp::create(cb, b.getLoc(), kConsumerRegisters,
                                   NVVM::SetMaxRegisterAction::increase);
  }

  // The clone's tile ops: the copies of tile.qk and tile.softmax_update,
  // nothing of the others.
  Threads pt = t;
  pt.inProducer = true;
  SmallVector<Operation *> tileOps;
  issuing.walk([&](Operation *op) {
    if (isa<TileInitOp, TileLoadQOp, TileQKOp, TileMaskOp, TileSoftmaxOp,
            TileStoreOp, TilePrefetchOp>(op))
      tileOps.push_back(op);
  });
  for (Operation *op : tileOps) {
    ImplicitLocOpBuilder ob(op->getLoc(), op);
    GpuEmitter e(ob, pt);
    if (auto qk = dyn_cast<TileQKOp>(op))
      emitTmaIssue(e, 0, qk.getKey(), qk.getBlockTable(), qk.getBatch(),
                   qk.getKvHead(), qk.getStart(), qk.getCols());
    else if (auto softmax = dyn_cast<TileSoftmaxOp>(op);
             softmax && !pt.latent) // (the latent form's V is the K stage)
      emitTmaIssue(e, 1, softmax.getValue(), softmax.getBlockTable(),
                   softmax.getBatch(), softmax.getKvHead(), softmax.getStart(),
                   softmax.getCols());
    op->erase();
  }
  // What fed only the dropped ops (the scratch tiles, the mask's
  // positions, the output's indices).
  bool erased = true;
  while (erased) {
    erased = false;
    issuing.getThenRegion().walk<WalkOrder::PostOrder, ReverseIterator>(
        [&](Operation *op) {
          if (isOpTriviallyDead(op)) {
            op->erase();
            erased = true;
          }
        });
  }
}

} // namespace

/// The shared memory -kvattn-assign-tile-layouts allocated
/// (kvattn.shared_memory, kvattn.shared_offset), checked and put in
/// `layout` in place of its own placement: every region the program needs
/// is recorded, lies within the kernel's bytes (its dynamic shared memory)
/// and has the alignment its accesses need (1024 bytes for wgmma's
/// descriptors and TMA's 128-byte swizzle, 16 for 16-byte copies, 8 for
/// the mbarriers). Which regions may share bytes (the query tile staging
/// the output) is the allocation's: the lowering does not check it.
static LogicalResult applySharedMemory(gpu::GPUFuncOp kernel,
                                       SharedMemoryLayout &layout) {
  SharedMemoryAttr memory = getSharedMemory(kernel);
  if (!memory)
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: the kernel needs its "
           << kSharedMemoryAttrName
           << " (run -kvattn-assign-tile-layouts before the lowering)";
  const int64_t bytes = memory.getBytes();
  if (auto dynamic =
          kernel->getAttrOfType<IntegerAttr>("kvattn.dynamic_smem_bytes");
      dynamic && dynamic.getInt() != bytes)
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: the kernel launches with "
           << dynamic.getInt() << " bytes of dynamic shared memory, its "
           << kSharedMemoryAttrName << " has " << bytes;
  auto region = [&](Operation *at, StringRef what, int64_t offset, int64_t size,
                    int64_t alignment) -> LogicalResult {
    if (offset >= 0 && offset % alignment == 0 && offset + size <= bytes)
      return success();
    return at->emitOpError()
           << "kvattn-lower-tile-to-gpu: " << what << " at byte " << offset
           << " (" << size << " bytes) is not a " << alignment
           << "-byte aligned region of the kernel's " << bytes
           << " bytes of shared memory";
  };
  auto present = [&](StringRef what, bool needed,
                     int64_t offset) -> LogicalResult {
    if (needed == (offset >= 0))
      return success();
    return kernel.emitOpError() << "kvattn-lower-tile-to-gpu: the program "
                                << (needed ? "needs " : "has no ") << what
                                << ", its " << kSharedMemoryAttrName
                                << (needed ? " places none" : " places one");
  };
  const int64_t stageAlign = layout.wgmma ? 1024 : 16;
  for (auto [i, alloca] : llvm::enumerate(layout.tiles)) {
    std::optional<int64_t> offset = getSharedOffset(alloca);
    if (!offset)
      return alloca.emitOpError()
             << "kvattn-lower-tile-to-gpu: a scratch tile in shared memory "
                "needs its "
             << kSharedOffsetAttrName
             << " (run -kvattn-assign-tile-layouts before the lowering)";
    MemRefType type = alloca.getType();
    const int64_t size = type.getNumElements() *
                         type.getElementType().getIntOrFloatBitWidth() / 8;
    // wgmma reads the query tile through 128-byte-swizzle descriptors.
    const int64_t alignment =
        layout.wgmma && getTileRole(alloca) == TileRole::query ? 1024 : 16;
    if (failed(region(alloca, "the tile", *offset, size, alignment)))
      return failure();
    layout.offsets[i] = *offset;
  }
  const int64_t eltBytes = layout.stageElementType.getIntOrFloatBitWidth() / 8;
  const int64_t keyBytes = layout.stageRows * layout.stageCols * eltBytes;
  const int64_t valueBytes = layout.stageRows * layout.valueCols * eltBytes;
  Operation *k = kernel;
  if (failed(region(k, "the K stage", memory.getKeyStage(), keyBytes,
                    stageAlign)) ||
      failed(present("a V stage", layout.separateValueStage,
                     memory.getValueStage())) ||
      (layout.separateValueStage &&
       failed(region(k, "the V stage", memory.getValueStage(), valueBytes,
                     stageAlign))) ||
      failed(present("TMA rings", layout.tmaRing, memory.getBarriers())) ||
      failed(present("a share exchange", layout.shareExchange,
                     memory.getExchange())))
    return failure();
  layout.stageOffset = memory.getKeyStage();
  if (layout.separateValueStage)
    layout.valueStageOffset = memory.getValueStage();
  if (layout.tmaRing) {
    // (The latent form's V is the K stage: its second V stage is K's.)
    const int64_t value1Bytes = layout.latent ? keyBytes : valueBytes;
    if (failed(region(k, "the second K stage", memory.getKeyStage1(), keyBytes,
                      1024)) ||
        failed(region(k, "the second V stage", memory.getValueStage1(),
                      value1Bytes, 1024)) ||
        failed(region(k, "the mbarriers", memory.getBarriers(),
                      8 * kTmaBarriers, 8)))
      return failure();
    // Two stages of a ring are two regions.
    auto apart = [](int64_t a, int64_t b, int64_t size) {
      return a + size <= b || b + size <= a;
    };
    if (!apart(memory.getKeyStage(), memory.getKeyStage1(), keyBytes) ||
        (!layout.latent && layout.tmaValueStages == 2 &&
         !apart(memory.getValueStage(), memory.getValueStage1(), valueBytes)))
      return kernel.emitOpError()
             << "kvattn-lower-tile-to-gpu: the TMA ring's two "
             << (apart(memory.getKeyStage(), memory.getKeyStage1(), keyBytes)
                     ? "V"
                     : "K")
             << " stages share bytes in its " << kSharedMemoryAttrName;
    layout.keyStage1Offset = memory.getKeyStage1();
    layout.valueStage1Offset = memory.getValueStage1();
    layout.barrierOffset = memory.getBarriers();
  }
  if (layout.shareExchange) {
    TileConfigAttr config = getTileConfig(kernel);
    const int64_t bm = config.getBlockM(), bn = config.getBlockN();
    if (failed(region(k, "the share exchange's maxima", memory.getExchange(),
                      layout.valueSplit * bm * 4, 16)) ||
        failed(region(k, "the share exchange's probabilities",
                      memory.getExchangeProbs(), bm * bn * 2, 16)))
      return failure();
    layout.exchangeOffset = memory.getExchange();
    layout.exchangeProbsOffset = memory.getExchangeProbs();
  }
  layout.totalBytes = bytes;
  return success();
}

FailureOr<GpuTileLoweringPtr> mlir::kvattn::prepareGpuTileLowering(
    gpu::GPUFuncOp kernel, bool wideTileAddressBases, bool hardwareFp8) {
  TileConfigAttr config = getTileConfig(kernel);
  if (!config || (config.getKind() != KernelKind::attention &&
                  config.getKind() != KernelKind::attention_varlen))
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: the tile patterns lower attention "
              "kernels (a kvattn.tile_config of kind attention or "
              "attention_varlen)";
  int64_t numWarps = config.getNumWarps();
  // The dialects whose ops the patterns create (the pass has them loaded
  // already: its dependent dialects; an embedder may not).
  kernel.getContext()
      ->loadDialect<arith::ArithDialect, gpu::GPUDialect, LLVM::LLVMDialect,
                    math::MathDialect, memref::MemRefDialect,
                    nvgpu::NVGPUDialect, NVVM::NVVMDialect, scf::SCFDialect,
                    vector::VectorDialect>();
  GpuTileLoweringPtr state(new GpuTileLowering());
  state->kernel = kernel;
  // The schedule (-kvattn-assign-tile-layouts): tensor cores as the
  // outlining decided them (the shared memory layout differs), the copies'
  // pipeline, what stays in registers.
  GpuScheduleAttr schedule = getGpuSchedule(kernel);
  if (!schedule)
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: the kernel needs a "
           << kGpuScheduleAttrName
           << " (run -kvattn-assign-tile-layouts before the lowering)";
  const bool tensorCores = schedule.getMode() != TensorCoreMode::scalar;
  const bool wgmma = schedule.getMode() == TensorCoreMode::wgmma;
  // The tiles' roles and fragment layouts (-kvattn-assign-tile-layouts).
  memref::AllocaOp &accTile = state->accTile, &scoreTile = state->scoreTile;
  SmallVector<memref::AllocaOp> rowStatTiles;
  WalkResult unassigned =
      kernel.walk([&](memref::AllocaOp alloca) {
        std::optional<TileRole> role = getTileRole(alloca);
        if (!role) {
          alloca.emitOpError()
              << "kvattn-lower-tile-to-gpu: this tile has no "
              << kTileRoleAttrName
              << " (run -kvattn-assign-tile-layouts before the lowering)";
          return WalkResult::interrupt();
        }
        if (*role == TileRole::accumulator)
          accTile = alloca;
        else if (*role == TileRole::scores)
          scoreTile = alloca;
        else if (*role == TileRole::row_stats)
          rowStatTiles.push_back(alloca);
        return WalkResult::advance();
      });
  if (unassigned.wasInterrupted())
    return failure();
  FragmentLayoutAttr fragments =
      accTile ? getFragmentLayout(accTile) : FragmentLayoutAttr();
  if (!fragments)
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: the program's accumulator tile needs "
              "a "
           << kFragmentLayoutAttrName
           << " (run -kvattn-assign-tile-layouts before the lowering)";
  FailureOr<SharedMemoryLayout> layout = computeSharedMemoryLayout(
      kernel, /*privateScores=*/false, /*query16=*/false, tileRoleAttrOf);
  if (failed(layout))
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: the program's tiles need static "
              "shapes";
  if (tensorCores && !canUseTensorCores(*layout))
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: marked " << kTensorCoresAttr
           << " but its types or shapes do not allow tensor cores";
  // Tensor cores read the query tile as the mma's 16-bit operand, which
  // -kvattn-assign-tile-layouts made it (and refused a rotated query kept
  // in f32).
  WalkResult f32Query = kernel.walk([&](TileLoadQOp load) {
    return tensorCores &&
                   getElementTypeOrSelf(load.getQTile().getType()).isF32()
               ? WalkResult::interrupt()
               : WalkResult::advance();
  });
  if (f32Query.wasInterrupted())
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: a tensor-core kernel's query tile "
              "holds the query in its 16-bit type, this one is f32 (run "
              "-kvattn-assign-tile-layouts before the lowering)";
  // 32-row warps (two m16 tiles): block-m = 32 x num-warps.
  const int64_t mmaTiles = mmaTilesPerWarp(config);
  layout->mmaTiles = mmaTiles;
  layout->wgmma = wgmma;
  if ((fragments.getShape() == MmaShape::wgmma_m64nNk16) != wgmma ||
      fragments.getTilesPerWarp() != mmaTiles)
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: the accumulator's " << fragments
           << " does not match the kernel (" << (wgmma ? "wgmma" : "mma.sync")
           << ", " << mmaTiles << " m16 tile(s) per warp)";
  // The scores in registers: the outlining gave the score tile no shared
  // memory exactly when keepScoresInRegisters, so the schedule must agree.
  const bool privateScores = schedule.getScoresInRegisters();
  if (privateScores != (tensorCores && keepScoresInRegisters(*layout)))
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: the schedule keeps the scores "
           << (privateScores ? "in registers" : "in shared memory")
           << ", the kernel's shared memory layout the other way";
  if (tensorCores)
    layout = computeTensorCoreLayout(kernel, mmaTiles, wgmma, tileRoleAttrOf);
  if (wgmma && !canUseWgmma(*layout, numWarps, tileRoleAttrOf))
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: marked " << kWgmmaAttr
           << " but the program does not fit the wgmma lowering (whole "
              "warpgroups of 16-row warps, D and Dv multiples of 64 up to "
              "256, block-n a multiple of 16 up to 256, scores in "
              "registers)";
  int64_t bm = config.getBlockM();
  int64_t bn = config.getBlockN();
  // A latent program's value split: valueSplit warps per 16 rows.
  const int64_t valueSplit = layout->valueSplit;
  if (bm * valueSplit != 16 * mmaTiles * numWarps || bn % 8 != 0)
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu maps 16 or 32 query rows to each "
              "warp and 8-column fragments to lanes: block-m must be 16 x "
              "num-warps (or 32 x num-warps on tensor cores) and block-n a "
              "multiple of 8 (got block-m = "
           << bm << ", block-n = " << bn << ", num-warps = " << numWarps << ")";
  if (mmaTiles > 1 && !privateScores)
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: 32 query rows per warp (block-m = "
           << bm << ", num-warps = " << numWarps
           << ") need the tensor-core lowering with the scores in registers "
              "(16-bit K/V, D a multiple of 16, BN + Dv registers of scores "
              "and "
              "accumulator per lane, with the query fragments, within 192); "
              "use block-m = 16 x num-warps";
  // sm_90a: K and V by TMA through the mbarrier rings (decided by the
  // outlining: the tensor maps are a parameter).
  const bool tma = schedule.getTmaKeyStages() > 0;
  int tensorMapsArg = -1;
  for (auto [i, param] : llvm::enumerate(getKernelParams(kernel)))
    if (param.getKind() == ParamKind::tensor_maps)
      tensorMapsArg = static_cast<int>(i);
  if (tma != (tensorMapsArg >= 0))
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: a TMA schedule and a tensor_maps "
              "parameter go together (a wgmma kernel)";
  if (tma) {
    // (Two V stages where the schedule has them and they fit: the
    // two-value-stages choice of the outlining and the schedule.)
    addTmaRing(*layout, schedule.getTmaValueStages() == 2);
    if (schedule.getTmaKeyStages() != kTmaStages ||
        schedule.getTmaValueStages() != layout->tmaValueStages)
      return kernel.emitOpError()
             << "kvattn-lower-tile-to-gpu: the schedule's TMA rings ("
             << schedule.getTmaKeyStages() << " K, "
             << schedule.getTmaValueStages()
             << " V stages) are not the shared memory layout's (" << kTmaStages
             << ", " << layout->tmaValueStages << ")";
  }
  // Where the tiles and stages go: the allocation the schedule's pass
  // recorded.
  if (failed(applySharedMemory(kernel, *layout)))
    return failure();

  MLIRContext *ctx = kernel.getContext();
  // One resident block per SM is all we ask of the register allocator:
  // with only the thread count (.maxntid), ptxas for sm_90 trades
  // registers for occupancy and spills; shared memory bounds the blocks per
  // SM anyway.
  kernel->setAttr("nvvm.minctasm",
                  IntegerAttr::get(IntegerType::get(ctx, 32), 1));
  ImplicitLocOpBuilder b(kernel.getLoc(), ctx);
  b.setInsertionPointToStart(&kernel.getBody().front());
  auto workgroup =
      gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  Value smem = gpu::DynamicSharedMemoryOp::create(
      b, MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                         MemRefLayoutAttrInterface(), workgroup));
  auto view = [&](int64_t offset, ArrayRef<int64_t> shape, Type elt) {
    return memref::ViewOp::create(
        b, MemRefType::get(shape, elt, MemRefLayoutAttrInterface(), workgroup),
        smem, arith::ConstantIndexOp::create(b, offset), ValueRange{});
  };
  // The row-statistic tiles the tensor-core layout leaves out (rowStats).
  SmallVector<memref::AllocaOp> &statTiles = state->statTiles;
  for (memref::AllocaOp alloca : rowStatTiles)
    if (!llvm::is_contained(layout->tiles, alloca))
      statTiles.push_back(alloca);
  for (auto [alloca, offset] : llvm::zip(layout->tiles, layout->offsets)) {
    MemRefType type = alloca.getType();
    alloca.getResult().replaceAllUsesWith(
        view(offset, type.getShape(), type.getElementType()));
    alloca.erase();
  }
  state->mode = schedule.getMode();
  Threads &t = state->t;
  t.count = 32 * numWarps;
  // A producer warpgroup: the warps of the outlining's block past
  // num_warps (kvattn.tma kernels only).
  std::optional<ArrayRef<int32_t>> block = kernel.getKnownBlockSize();
  const int64_t threads = block ? (*block)[0] : 32 * numWarps;
  t.producerWarps = threads / 32 - numWarps;
  if (threads % 32 != 0 ||
      (t.producerWarps != 0 && (t.producerWarps != kProducerWarps || !tma)))
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: the kernel's block (" << threads
           << " threads) is not its " << numWarps
           << " warps, nor (with the TMA rings) those and a producer "
              "warpgroup of "
           << kProducerWarps << " warps";
  if (t.producerWarps != schedule.getProducerWarps())
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: the kernel's block (" << threads
           << " threads) has " << t.producerWarps
           << " warps past its num_warps = " << numWarps
           << ", its schedule producer_warps = " << schedule.getProducerWarps();
  t.layout = fragmentLayoutOf(fragments);
  t.wgmma = wgmma;
  // The accumulator: each lane's entries in private memory indexed by
  // constants only (registers after SROA), replacing the tile.
  // With a value split, only the warp's Dv / valueSplit columns.
  if (accTile) {
    int64_t dv = accTile.getType().getDimSize(1);
    t.acc = memref::AllocaOp::create(
        b, privateTileType(t.layout, dv / valueSplit, b.getF32Type()));
  }
  // On tensor cores, small tiles: the scores too, [2][BN / 8][2] per lane.
  // (A share exchange has no score tile: erased with the private ones.)
  if (!privateScores && !layout->shareExchange)
    scoreTile = {}; // a tile in shared memory: replaced by its view above
  if (privateScores) {
    if (scoreTile)
      t.scores = memref::AllocaOp::create(
          b, privateTileType(t.layout, scoreTile.getType().getDimSize(1),
                             b.getF32Type()));
  }
  // A value split: on mma.sync the warps of a row group compute a share of
  // the keys each and exchange the scores through the shared score tile;
  // then every lane holds all of its rows' scores in registers, as above.
  // On wgmma the row group's first warpgroup computes all of them
  // (Threads::scoreShares).
  const bool scoreShares = wgmma && valueSplit > 1;
  if (tensorCores && valueSplit > 1)
    t.scores = memref::AllocaOp::create(
        b, privateTileType(t.layout, bn, b.getF32Type()));
  t.latent = layout->latent;
  t.latentValueCols = layout->latent ? layout->valueCols : 0;
  t.valueSplit = valueSplit;
  if (scoreShares) {
    if (!layout->shareExchange || bn % 16 != 0)
      return kernel.emitOpError()
             << "kvattn-lower-tile-to-gpu: a wgmma value split exchanges "
                "row maxima and probabilities in whole k16 steps (block-n = "
             << bn << ")";
    t.scoreShares = true;
    t.shareMax = view(layout->exchangeOffset, {bm}, b.getF32Type());
    t.shareProbs =
        view(layout->exchangeProbsOffset, {bm * bn / 2}, b.getI32Type());
  }
  t.stage = view(layout->stageOffset, {layout->stageRows, layout->stageCols},
                 layout->stageElementType);
  if (layout->separateValueStage)
    t.stageV =
        view(layout->valueStageOffset, {layout->stageRows, layout->valueCols},
             layout->stageElementType);
  // Tensor cores: 16-bit K/V (16-byte rows, so the stages are separate),
  // head dim D and block-n multiples of 16 (the k of m16n8k16), Dv of 8.
  kernel.walk([&](TileLoadQOp load) { t.qTile = load.getQTile(); });
  // Tensor cores, D <= 128: the warp's query fragments in registers for
  // the whole program (D / 4 registers per lane: 32 at D = 128).
  // (wgmma reads the query tile itself: no fragments.)
  if (tensorCores && !wgmma && t.qTile) {
    auto qType = cast<MemRefType>(t.qTile.getType());
    Type qElt = layout->stageElementType; // the mma's operand type
    bool sameType = true;
    kernel.walk([&](TileLoadQOp load) {
      sameType &= queryReachesStageType(
          getElementTypeOrSelf(load.getQuery().getType()), qElt);
    });
    if (schedule.getQueryInRegisters()) {
      if (!sameType || !keepQueryInRegisters(*layout))
        return kernel.emitOpError()
               << "kvattn-lower-tile-to-gpu: the schedule keeps the query "
                  "fragments in registers, but they do not fit (more than 32 "
                  "per lane) or the query is not in the mma's operand type";
      t.qFragments = memref::AllocaOp::create(
          b, queryFragmentsType(ctx, qType.getDimSize(1), qElt, mmaTiles));
    }
  }
  // A bf16 query converted into an FP8 cache's f16 stage: the powers of two
  // its rows were scaled by (Threads::queryScale), written by tile.load_q.
  if (tensorCores && t.qTile) {
    bool convert = false;
    kernel.walk([&](TileLoadQOp load) {
      convert |=
          queryConvertsToF16(getElementTypeOrSelf(load.getQuery().getType()),
                             getElementTypeOrSelf(t.qTile.getType()));
    });
    if (convert && t.producerWarps)
      return kernel.emitOpError()
             << "kvattn-lower-tile-to-gpu: a bf16 query converted into an "
                "FP8 cache's f16 stage is checked for overflow by a barrier "
                "of every thread, which a producer warpgroup does not reach";
    if (convert)
      t.queryScale = memref::AllocaOp::create(
          b, MemRefType::get({t.layout.rowsPerLane}, b.getF32Type()));
  }
  if (tensorCores)
    t.rowStats = memref::AllocaOp::create(
        b, MemRefType::get({2, t.layout.rowsPerLane}, b.getF32Type()));
  t.tensorCores = tensorCores;
  // Lazy rescaling as the schedule says (-kvattn-assign-tile-layouts:
  // where the lane's data registers leave room for it).
  t.lazyRescale = tensorCores && schedule.getLazyRescale();
  // Ping-pong needs two consumer warpgroups with their own rows and no
  // consumer barrier before a Q.K^T (the TMA rings; docs/gpu-lowering.md
  // "Ping-pong").
  t.pingPong = schedule.getPingPong();
  if (t.pingPong && (!tma || numWarps != 8 || layout->latent))
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: ping_pong alternates two consumer "
              "warpgroups of their own rows fed by TMA rings (got "
           << numWarps << " warps" << (tma ? "" : ", no TMA rings")
           << (layout->latent ? ", the latent form" : "") << ")";
  // Softmax in FMA form: on tensor cores the scores stay bare dot products
  // and the scale goes into the softmax's FFMA, where it is one constant
  // (no softcap, whose tanh needs the scaled score) and a positive one
  // (the maximum of the bare products is the maximum of the scores).
  kernel.walk([&](TileQKOp qk) {
    double scale = qk.getScale().convertToDouble();
    if (!tensorCores || qk.getSoftcap() || !(scale > 0) ||
        !std::isfinite(1.0 / scale) || !std::isfinite(scale * kLog2E))
      return;
    t.rawScores = true;
    t.expScale = scale * kLog2E;
    t.maskUnit = 1.0 / scale;
    t.lseUnit = scale;
  });
  t.swizzleScores =
      tensorCores && !privateScores && layout->stageRows % 32 == 0;
  bool hasPrefetch = false;
  kernel.walk([&](TilePrefetchOp) { hasPrefetch = true; });
  if (schedule.getPipelineDepth() > 1 && !(t.tensorCores && hasPrefetch))
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: pipeline_depth = "
           << schedule.getPipelineDepth()
           << " needs tensor cores and the program's tile.prefetch";
  // pipeline_depth = 1: each tile.qk loads its K block; the program's
  // tile.prefetch ops are dropped.
  t.prefetchKeys = schedule.getPipelineDepth() > 1;
  if (t.prefetchKeys && layout->latent)
    return kernel.emitOpError()
           << "kvattn-lower-tile-to-gpu: pipeline_depth = "
           << schedule.getPipelineDepth()
           << " with the latent form: P.V reads V from the K stage, so the "
              "next K block cannot be issued before it";
  t.tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value c32 = arith::ConstantIndexOp::create(b, 32);
  t.warp = arith::DivUIOp::create(b, t.tid, c32);
  if (wgmma) {
    // The warpgroup, shuffled from lane 0 (CUTLASS's
    // canonical_warp_group_idx): ptxas then knows it is warp-uniform and
    // keeps what derives from it — the wgmma descriptors of the
    // warpgroup's rows, keys and V columns — in uniform registers.
    Value c4 = arith::ConstantIndexOp::create(b, 4);
    Value group = arith::IndexCastUIOp::create(
        b, b.getI32Type(), arith::DivUIOp::create(b, t.warp, c4));
    group = gpu::ShuffleOp::create(
                b, group, arith::ConstantIntOp::create(b, b.getI32Type(), 0),
                arith::ConstantIntOp::create(b, b.getI32Type(), 32),
                gpu::ShuffleMode::IDX)
                .getShuffleResult();
    group = arith::IndexCastUIOp::create(b, b.getIndexType(), group);
    t.rowGroup = group;
    if (valueSplit > 1) {
      // Whole warpgroups share rows: warpgroup g takes slice g % split of
      // row group g / split (Threads::valueSplit).
      Value split = arith::ConstantIndexOp::create(b, valueSplit);
      t.valueSlice = arith::RemUIOp::create(b, group, split);
      t.rowGroup = arith::DivUIOp::create(b, group, split);
      t.warp =
          arith::AddIOp::create(b, arith::MulIOp::create(b, t.rowGroup, c4),
                                arith::RemUIOp::create(b, t.warp, c4));
    }
  } else if (valueSplit > 1) {
    Value split = arith::ConstantIndexOp::create(b, valueSplit);
    t.valueSlice = arith::RemUIOp::create(b, t.warp, split);
    t.warp = arith::DivUIOp::create(b, t.warp, split);
  }
  t.lane = arith::RemUIOp::create(b, t.tid, c32);
  t.quad =
      arith::RemUIOp::create(b, t.lane, arith::ConstantIndexOp::create(b, 4));
  // The 128-row D = 128 programs (query read per block) sit at 255
  // registers: their thread-constant bases are optional (the pass option).
  t.leanAddresses = wideTileAddressBases || mmaTiles == 1 || t.qFragments;
  t.hardwareFp8 = hardwareFp8;
  // The thread-constant addresses of the tile ops go after the coordinates.
  ThreadConstants &constants = state->constants;
  constants.last = t.quad.getDefiningOp();
  t.constants = &constants;
  if (tma) {
    t.tma = true;
    t.tensorMaps = kernel.getArgument(tensorMapsArg);
    Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, smem);
    t.smemBase = arith::IndexCastUIOp::create(b, b.getI64Type(), base);
    // The dynamic shared memory as an extern shared array of its own (every
    // such array of a module starts at the dynamic shared memory).
    auto gpuModule = kernel->getParentOfType<gpu::GPUModuleOp>();
    constexpr llvm::StringLiteral kRingSmem = "__kvattn_dynamic_smem";
    auto global = gpuModule.lookupSymbol<LLVM::GlobalOp>(kRingSmem);
    if (!global) {
      OpBuilder mb(ctx);
      mb.setInsertionPointToStart(gpuModule.getBody());
      global = LLVM::GlobalOp::create(
          mb, kernel.getLoc(), LLVM::LLVMArrayType::get(b.getI8Type(), 0),
          /*isConstant=*/false, LLVM::Linkage::External, kRingSmem, Attribute(),
          /*alignment=*/1024, /*addrSpace=*/3);
    }
    t.smemPointer = LLVM::AddressOfOp::create(b, global);
    const int64_t eltBytes =
        layout->stageElementType.getIntOrFloatBitWidth() / 8;
    t.smemFlat =
        view(0, {layout->totalBytes / eltBytes}, layout->stageElementType);
    t.ringStage[0][0] = layout->stageOffset;
    t.ringStage[0][1] = layout->keyStage1Offset;
    t.ringStage[1][0] = layout->valueStageOffset;
    t.ringStage[1][1] = layout->valueStage1Offset;
    t.barrierOffset = layout->barrierOffset;
    t.ringStages[1] = layout->tmaValueStages; // 0: the latent form
    // Private index registers, zeroed (constant indices only).
    Value zero = arith::ConstantIndexOp::create(b, 0);
    auto zeroedIndices = [&](int64_t n) -> Value {
      Value regs =
          memref::AllocaOp::create(b, MemRefType::get({n}, b.getIndexType()));
      for (int64_t i = 0; i < n; ++i)
        memref::StoreOp::create(
            b, zero, regs, ValueRange{arith::ConstantIndexOp::create(b, i)});
      return regs;
    };
    t.ringCounters = zeroedIndices(4);
    // The deferred P.V's registers (intra-warpgroup overlap, checked
    // below), in the entry block like every private array (LLVM promotes
    // only those to registers): before the ring's initialisation branches.
    if (schedule.getIntraWarpgroupOverlap()) {
      const int64_t bn = layout->stageRows;
      t.pendingProbs = memref::AllocaOp::create(
          b, MemRefType::get({bn / 16 * 4}, b.getI32Type()));
      t.pendingBlock = zeroedIndices(2);
    }
    GpuEmitter e(b, t);
    emitTmaRingInit(e);
  }
  // Intra-warpgroup overlap: the deferred P.V reads its V stage while the
  // producer refills the other one (docs/gpu-lowering.md, "Intra-warpgroup
  // overlap").
  t.overlapPV = schedule.getIntraWarpgroupOverlap();
  if (t.overlapPV) {
    if (!tma || !t.producerWarps || t.ringStages[1] != 2 || layout->latent)
      return kernel.emitOpError()
             << "kvattn-lower-tile-to-gpu: intra_warpgroup_overlap defers "
                "P.V on TMA rings with two V stages and a producer warpgroup, "
                "not the latent form";
    // Each tile.softmax_update after a tile.qk that issues a pending P.V
    // waits for it; a kernel without such a tile.qk has no KV loop to
    // overlap (its one block's P.V is the store's).
    kernel.walk([&](TileQKOp qk) {
      if (!issuesPendingPV(qk))
        return;
      for (Operation *next = qk->getNextNode(); next;
           next = next->getNextNode())
        if (isa<TileSoftmaxOp>(next)) {
          state->pvPending.insert(next);
          break;
        }
    });
    // Each softmax leaves its P.V in the pending registers, which the next
    // one overwrites: every tile.softmax_update but the program's first must
    // follow a tile.qk that issues the pending P.V, and the first (nothing
    // is pending before it) must not. A schedule without the peeled program
    // would otherwise drop the P.V of every block but the last. The first
    // runs once: not in a loop.
    SmallVector<TileSoftmaxOp> softmaxes;
    kernel.walk([&](TileSoftmaxOp softmax) { softmaxes.push_back(softmax); });
    for (auto [i, softmax] : llvm::enumerate(softmaxes))
      if ((i > 0) != state->pvPending.contains(softmax) ||
          (i == 0 && softmax->getParentOfType<LoopLikeOpInterface>()))
        return softmax.emitOpError()
               << "kvattn-lower-tile-to-gpu: with intra_warpgroup_overlap "
                  "every tile.softmax_update but the program's first follows "
                  "a tile.qk that issues the pending P.V ("
               << kPendingPVAttrName << ") and the first does not; "
               << (i ? "this one's tile.qk issues none"
                     : "the first one runs in a loop, or its tile.qk issues "
                       "one")
               << " (run -kvattn-assign-tile-layouts, which peels the KV "
                  "loop's first block)";
  } else {
    WalkResult marked = kernel.walk([](TileQKOp qk) {
      return issuesPendingPV(qk) ? WalkResult::interrupt()
                                 : WalkResult::advance();
    });
    if (marked.wasInterrupted())
      return kernel.emitOpError()
             << "kvattn-lower-tile-to-gpu: a tile.qk issues a pending P.V "
                "(kvattn.pending_pv) in a kernel whose schedule defers none "
                "(intra_warpgroup_overlap)";
  }

  SmallVector<Operation *> tileOps;
  kernel.walk([&](Operation *op) {
    if (isa<TileInitOp, TileLoadQOp, TileQKOp, TileMaskOp, TileSoftmaxOp,
            TileStoreOp, TilePrefetchOp>(op))
      tileOps.push_back(op);
  });
  // cp.async stages: where each op waits for its stage and meets the other
  // threads is the schedule's (kvattn.stage_sync), not the lowering's.
  if (tensorCores && !tma)
    for (Operation *op : tileOps)
      if (isa<TileQKOp, TileSoftmaxOp>(op) && !getStageSync(op))
        return op->emitOpError()
               << "kvattn-lower-tile-to-gpu: the K/V blocks of this kernel "
                  "arrive by cp.async, and every tile.qk and "
                  "tile.softmax_update needs its "
               << kStageSyncAttrName
               << " (run -kvattn-assign-tile-layouts before the lowering)";
  // Which op issues which copy (the schedule's pairings): a tile.qk the V
  // block of its tile.softmax_update (kvattn.value_prefetch), a
  // tile.softmax_update the tile.prefetch before it (kvattn.key_prefetch).
  FailureOr<PrefetchPairs> pairs = readPrefetchPairs(kernel, tileOps);
  if (failed(pairs))
    return failure();
  state->valuePrefetch = std::move(pairs->valueOfQK);
  for (auto [key, prefetch] : pairs->deferred)
    if (key != prefetch.getOperation())
      state->deferredPrefetch[key] = prefetch;
  for (Operation *op : tileOps)
    if (!isa<TilePrefetchOp>(op) || !pairs->deferred.count(op))
      state->tileOps.push_back(op);
  if (tensorCores)
    valueScalesAtStore(*state);
  if (t.producerWarps)
    specializeProducerWarps(*state, b);
  return FailureOr<GpuTileLoweringPtr>(std::move(state));
}

LogicalResult
mlir::kvattn::applyGpuTilePatterns(GpuTileLowering &state,
                                   const FrozenRewritePatternSet &patterns) {
  PatternApplicator applicator(patterns);
  applicator.applyDefaultCostModel();
  PatternRewriter rewriter(state.kernel.getContext());
  for (Operation *op : state.tileOps) {
    rewriter.setInsertionPoint(op);
    if (failed(applicator.matchAndRewrite(op, rewriter)))
      return op->emitOpError()
             << "kvattn-lower-tile-to-gpu: no pattern of the given sets "
                "lowers this op on a "
             << stringifyTensorCoreMode(state.mode) << " kernel";
  }
  if (state.accTile)
    state.accTile.erase(); // its uses were the tile ops
  if (state.scoreTile)
    state.scoreTile.erase();
  // Tensor cores: the row statistics were the lanes' registers; the tiles
  // of tile.init got no shared memory and have no use left.
  for (memref::AllocaOp alloca : state.statTiles)
    alloca.erase();
  return success();
}

namespace {

/// The lowering of tile op `OpT` on the kernels of one tensor-core mode:
/// `lower` writes the threads' code before the op, which is then erased.
/// It holds a reference to the kernel's lowering state.
template <typename OpT> struct TileOpLowering : OpRewritePattern<OpT> {
  TileOpLowering(MLIRContext *ctx, GpuTileLowering &state, TensorCoreMode mode)
      : OpRewritePattern<OpT>(ctx), state(state), mode(mode) {}

  LogicalResult matchAndRewrite(OpT op, PatternRewriter &rewriter) const final {
    if (state.mode != mode)
      return rewriter.notifyMatchFailure(op, "a kernel of another mode");
    ImplicitLocOpBuilder b(op->getLoc(), op);
    GpuEmitter e(b, state.t);
    lower(e, op, rewriter);
    rewriter.eraseOp(op);
    return success();
  }

  virtual void lower(GpuEmitter &e, OpT op,
                     PatternRewriter &rewriter) const = 0;

protected:
  GpuTileLowering &state;
  TensorCoreMode mode;
};

struct InitLowering : TileOpLowering<TileInitOp> {
  using TileOpLowering::TileOpLowering;
  void lower(GpuEmitter &e, TileInitOp op, PatternRewriter &) const override {
    lowerInit(e, op);
  }
};

struct LoadQLowering : TileOpLowering<TileLoadQOp> {
  using TileOpLowering::TileOpLowering;
  void lower(GpuEmitter &e, TileLoadQOp op, PatternRewriter &) const override {
    lowerLoadQ(e, op);
  }
};

struct QKScalarLowering : TileOpLowering<TileQKOp> {
  using TileOpLowering::TileOpLowering;
  void lower(GpuEmitter &e, TileQKOp op, PatternRewriter &) const override {
    lowerQKScalar(e, op);
  }
};

/// tile.qk on tensor cores; it also issues the V block of the
/// tile.softmax_update it is paired with (kvattn.value_prefetch).
struct QKMmaSyncLowering : TileOpLowering<TileQKOp> {
  using TileOpLowering::TileOpLowering;
  void lower(GpuEmitter &e, TileQKOp op, PatternRewriter &) const override {
    lowerQKOnTensorCores(e, op, state.takeValuePrefetch(op));
  }
};

struct QKWgmmaLowering : TileOpLowering<TileQKOp> {
  using TileOpLowering::TileOpLowering;
  void lower(GpuEmitter &e, TileQKOp op, PatternRewriter &) const override {
    lowerQKWithWgmma(e, op, state.takeValuePrefetch(op));
  }
};

struct MaskLowering : TileOpLowering<TileMaskOp> {
  using TileOpLowering::TileOpLowering;
  void lower(GpuEmitter &e, TileMaskOp op, PatternRewriter &) const override {
    lowerMask(e, op);
  }
};

/// tile.softmax_update; on tensor cores it issues the tile.prefetch it is
/// paired with (kvattn.key_prefetch) after its barrier and erases it.
struct SoftmaxLowering : TileOpLowering<TileSoftmaxOp> {
  using TileOpLowering::TileOpLowering;
  void lower(GpuEmitter &e, TileSoftmaxOp op,
             PatternRewriter &rewriter) const override {
    TilePrefetchOp deferred = state.deferredPrefetch.lookup(op);
    lowerSoftmax(e, op, state.valuePrefetched.contains(op), deferred,
                 state.pvPending.contains(op),
                 state.valueScaledAtStore.contains(op));
    if (deferred)
      rewriter.eraseOp(deferred);
  }
};

struct StoreLowering : TileOpLowering<TileStoreOp> {
  using TileOpLowering::TileOpLowering;
  void lower(GpuEmitter &e, TileStoreOp op, PatternRewriter &) const override {
    Value valueScale;
    auto scaled = state.storeValueScale.find(op);
    if (scaled != state.storeValueScale.end())
      valueScale = loadKvScale(e.b, e.b.getLoc(), scaled->second.first,
                               scaled->second.second, ValueRange{});
    lowerStore(e, op, valueScale);
  }
};

/// tile.prefetch where it stands on tensor cores: the next K block's copies
/// (cp.async, or the TMA ring's issue); with pipeline_depth = 1 nothing
/// (each tile.qk loads its own K block).
struct PrefetchLowering : TileOpLowering<TilePrefetchOp> {
  using TileOpLowering::TileOpLowering;
  void lower(GpuEmitter &e, TilePrefetchOp op,
             PatternRewriter &) const override {
    if (e.t.prefetchKeys)
      lowerPrefetchOnTensorCores(e, op);
  }
};

/// The scalar lowering loads each K block in its tile.qk: tile.prefetch
/// goes.
struct PrefetchScalarLowering : TileOpLowering<TilePrefetchOp> {
  using TileOpLowering::TileOpLowering;
  void lower(GpuEmitter &, TilePrefetchOp, PatternRewriter &) const override {}
};

} // namespace

void mlir::kvattn::populateTileToScalarGpuPatterns(RewritePatternSet &patterns,
                                                   GpuTileLowering &state) {
  patterns.add<InitLowering, LoadQLowering, QKScalarLowering, MaskLowering,
               SoftmaxLowering, StoreLowering, PrefetchScalarLowering>(
      patterns.getContext(), state, TensorCoreMode::scalar);
}

void mlir::kvattn::populateTileToMmaSyncPatterns(RewritePatternSet &patterns,
                                                 GpuTileLowering &state) {
  patterns.add<InitLowering, LoadQLowering, QKMmaSyncLowering, MaskLowering,
               SoftmaxLowering, StoreLowering, PrefetchLowering>(
      patterns.getContext(), state, TensorCoreMode::mma_sync);
}

void mlir::kvattn::populateTileToWgmmaPatterns(RewritePatternSet &patterns,
                                               GpuTileLowering &state) {
  patterns.add<InitLowering, LoadQLowering, QKWgmmaLowering, MaskLowering,
               SoftmaxLowering, StoreLowering, PrefetchLowering>(
      patterns.getContext(), state, TensorCoreMode::wgmma);
}

namespace {

/// One attention kernel through the pattern set of its mode.
LogicalResult lowerKernel(gpu::GPUFuncOp kernel, bool wideTileAddressBases,
                          bool hardwareFp8) {
  TileConfigAttr config = getTileConfig(kernel);
  if (config.getKind() == KernelKind::merge)
    return lowerMergeKernel(kernel, config.getNumWarps());
  FailureOr<GpuTileLoweringPtr> state =
      prepareGpuTileLowering(kernel, wideTileAddressBases, hardwareFp8);
  if (failed(state))
    return failure();
  RewritePatternSet patterns(kernel.getContext());
  switch (getTensorCoreMode(**state)) {
  case TensorCoreMode::scalar:
    populateTileToScalarGpuPatterns(patterns, **state);
    break;
  case TensorCoreMode::mma_sync:
    populateTileToMmaSyncPatterns(patterns, **state);
    break;
  case TensorCoreMode::wgmma:
    populateTileToWgmmaPatterns(patterns, **state);
    break;
  }
  return applyGpuTilePatterns(**state, std::move(patterns));
}

struct LowerTileToGPUPass
    : mlir::kvattn::impl::LowerTileToGPUPassBase<LowerTileToGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<gpu::GPUFuncOp> kernels;
    getOperation()->walk([&](gpu::GPUFuncOp kernel) {
      TileConfigAttr config = getTileConfig(kernel);
      // Append kernels (-kvattn-append-to-gpu) have no tile ops.
      if (config && config.getKind() != KernelKind::append)
        kernels.push_back(kernel);
    });
    for (gpu::GPUFuncOp kernel : kernels)
      if (failed(lowerKernel(kernel, wideTileAddressBases, hardwareFp8)))
        return signalPassFailure();
  }
};

} // namespace
