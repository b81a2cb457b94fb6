//===- Tile.cpp - kvattn.attention -> the tile program --------------------===//
//
// Writes the schedule once: program grid, visible KV-block range from the
// positions, full/partial classification, online-softmax loop, epilogue.
// The CPU lowering and the GPU lowering both consume what this file emits,
// so the CPU numerics tests exercise the very schedule the GPU runs.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"

#include "kvattn/Support/Limits.h"
#include "kvattn/Support/Schedule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"

#include <algorithm>

static_assert(mlir::kvattn::schedule::kDynamic == mlir::ShapedType::kDynamic,
              "the schedule's dynamic size is MLIR's");

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_TILEPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

/// Name of the global that collects block statistics (stats=true): loaded,
/// masked and skipped KV blocks, K/V bytes read.
static constexpr StringLiteral kStatsGlobal = "kvattn_tile_stats";
static constexpr int64_t kNumStats = 4;

namespace {

struct TileConfig {
  int64_t blockM, blockN, numWarps, numStages;
  bool stats;
  /// KV chunks per program (1: no split, 0: automatic).
  int64_t splitKv;
  int64_t numSms;
  bool packGqa;
  /// split-kv = 0: the fewest keys a chunk may cover, and the resident
  /// warps per multiprocessor to aim at (0: two programs per
  /// multiprocessor).
  int64_t splitMinKeys, splitWarpsPerSm;
  /// The largest position the kernels compute (kMaxPosition; 2^31 - 2 for
  /// 32-bit GPU kernels): a window above it + 1 admits every earlier key and
  /// is emitted as max-position + 1, which the index arithmetic holds.
  int64_t maxPosition;
  /// The most query rows per warp of the automatic choice (16 or 32), and
  /// the shared memory per multiprocessor two 128-row programs must fit.
  int64_t maxWarpRows, sharedMemoryPerSm;
  /// sm_90a's wgmma lowering: up to 128 rows and 128 keys for whole
  /// warpgroups (schedule::wgmmaFits, wgmmaBlockN).
  bool wgmma;
  /// The tensor-core lowering: 64-key blocks for 128 < D <= 256
  /// (schedule::largeHeadDimBlocks).
  bool tensorCores;

  schedule::Options scheduleOptions() const {
    schedule::Options o;
    o.blockM = blockM;
    o.blockN = blockN;
    o.numWarps = numWarps;
    o.numStages = numStages;
    o.splitKv = splitKv;
    o.numSms = numSms;
    o.packGqa = packGqa;
    o.splitMinKeys = splitMinKeys;
    o.splitWarpsPerSm = splitWarpsPerSm;
    o.maxWarpRows = maxWarpRows;
    o.sharedMemoryPerSm = sharedMemoryPerSm;
    o.wgmma = wgmma;
    o.tensorCores = tensorCores;
    return o;
  }
};

/// Index arithmetic with folding, on an ImplicitLocOpBuilder.
struct IndexMath {
  ImplicitLocOpBuilder &b;

  Value c(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value add(Value x, Value y) { return b.createOrFold<arith::AddIOp>(x, y); }
  Value sub(Value x, Value y) { return b.createOrFold<arith::SubIOp>(x, y); }
  Value mul(Value x, Value y) { return b.createOrFold<arith::MulIOp>(x, y); }
  Value min(Value x, Value y) { return b.createOrFold<arith::MinSIOp>(x, y); }
  Value max(Value x, Value y) { return b.createOrFold<arith::MaxSIOp>(x, y); }
  /// Floor division (x may be negative).
  Value floorDiv(Value x, int64_t d) {
    return b.createOrFold<arith::FloorDivSIOp>(x, c(d));
  }
  /// Ceiling division (x may be negative).
  Value ceilDiv(Value x, int64_t d) {
    return b.createOrFold<arith::CeilDivSIOp>(x, c(d));
  }
  Value ceilDiv(Value x, Value d) {
    return b.createOrFold<arith::CeilDivSIOp>(x, d);
  }
  Value lt(Value x, Value y) {
    return b.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::slt, x, y);
  }
  Value ge(Value x, Value y) {
    return b.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::sge, x, y);
  }
  /// Loads element `index` of a rank-1 integer buffer as an index.
  Value loadIndex(Value buffer, ValueRange indices) {
    Value v = memref::LoadOp::create(b, buffer, indices);
    return arith::IndexCastOp::create(b, b.getIndexType(), v);
  }
  /// A static dim folds to a constant; a dynamic one stays a memref.dim
  /// of `buffer` (not folded into an alloc's size operand), so that a
  /// program that reads it captures the buffer only.
  Value dim(Value buffer, int64_t d) {
    auto type = cast<MemRefType>(buffer.getType());
    if (type.isDynamicDim(d))
      return memref::DimOp::create(b, buffer, d);
    return c(type.getDimSize(d));
  }
};

/// The buffers of one attention op.
struct Buffers {
  Value q, k, v, qOffset, kOffset, qPos, kPos, kvLen, keyValid, mask, out, lse;
  Value blockTable;     ///< paged K/V: [B, max_pages]
  Value qStart;         ///< varlen: [B + 1] starts of the packed query rows
  Value sinks;          ///< attention sinks: f32 [Hq]
  Value alibiSlopes;    ///< ALiBi slopes: f32 [Hq]
  Value treeParents;    ///< speculative decoding: [T] parents' local rows
  Value kStart;         ///< ragged keys: [B + 1] starts of the packed keys
  Value cacheBatchIdx;  ///< batch-to-cache map: [B]
  Value kScale, vScale; ///< FP8 K / V: f32 scales
  Value kRopePos;       ///< RoPE's record [B, S]: checked, never read
  Value rotaryCos, rotarySin; ///< RoPE's tables [P, R/2]
};

/// The buffer of a program operand, marked with its role (kvattn.role), so
/// that a later outlining (kvattn-to-ptx) can name the kernel parameters and
/// derive their shapes.
Value toBuffer(ImplicitLocOpBuilder &b, Value tensor, BufferRole role) {
  if (!tensor)
    return {};
  auto type = cast<RankedTensorType>(tensor.getType());
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  auto op = bufferization::ToBufferOp::create(b, memrefType, tensor,
                                              /*read_only=*/true);
  setBufferRole(op, role);
  return op;
}

Value allocLike(ImplicitLocOpBuilder &b, RankedTensorType type,
                ArrayRef<Value> sizes, BufferRole role) {
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  SmallVector<Value> dynamic;
  for (auto [i, size] : llvm::enumerate(type.getShape()))
    if (ShapedType::isDynamic(size))
      dynamic.push_back(sizes[i]);
  auto op = memref::AllocOp::create(b, memrefType, dynamic);
  setBufferRole(op, role);
  return op;
}

/// The public statistics global, created once per module.
void ensureStatsGlobal(ModuleOp module) {
  if (module.lookupSymbol(kStatsGlobal))
    return;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  auto type = MemRefType::get({kNumStats}, b.getI64Type());
  memref::GlobalOp::create(
      b, module.getLoc(), kStatsGlobal, /*sym_visibility=*/StringAttr(), type,
      DenseElementsAttr::get(RankedTensorType::get({kNumStats}, b.getI64Type()),
                             ArrayRef<int64_t>{0, 0, 0, 0}),
      /*constant=*/false, /*alignment=*/IntegerAttr());
}

} // namespace

namespace {

/// What the schedule decides for one op, before any IR is written: the
/// semantics it needs (positions, mask, scale), GQA packing, the block
/// sizes, warps, stages and the split (docs/tile-program.md).
struct Schedule {
  int64_t headDim = 0, valueDim = 0;
  std::optional<double> scale;
  std::optional<float> softcap;
  std::optional<int64_t> window;
  /// Two-sided windows: keys at most this many positions after the query.
  std::optional<int64_t> windowRight;
  bool causal = false, offsetForm = false, paged = false;
  /// A ragged batch (q_start): the query is packed [1, Hq, T, D] and each
  /// program finds its sequence from its query-block id.
  bool varlen = false;
  /// Speculative decoding (varlen): the rows of each sequence are draft
  /// tokens of a tree (tree_parents).
  bool tree = false;
  /// Whether a block can be full (no mask for any row of the program):
  /// decidable from positions in the offset form only, and only without
  /// per-key validity or a general mask.
  bool canBeFull = false;
  /// GQA packing: `group` query heads per program (1: none).
  int64_t group = 1;
  bool packed() const { return group > 1; }
  int64_t bm = 0, bn = 0, numWarps = 0, numStages = 0;
  /// KV chunks per program (split-KV); 1: none. With a run-time split,
  /// the most chunks (N_max, the part buffers' bound).
  int64_t splits = 1;
  /// A run-time split (split-kv = 0, dynamic sizes): the chunk count n is
  /// computed on the host from the run-time sizes (the grid's third
  /// dimension, the part buffers' leading dimension), `splits` bounds it.
  bool runTimeSplit = false;
  /// The rule's programs per multiprocessor (a run-time split).
  int64_t splitPerSm = 0;
};

/// Where one program instance stands: its batch entry, heads and query
/// rows, and the KV blocks it visits.
struct ProgramRange {
  Value bIdx, head, kvHead, qStart, rows, kvLen;
  /// Where the batch's keys live in K and V: batch kvBatch (bIdx, or its
  /// cache row with cache_batch_idx, or 0 for packed keys) from row
  /// kRowBase (k_start[b]; null: 0).
  Value kvBatch, kRowBase;
  /// Where the rows live in the query and the results: batch qBatch, rows
  /// from qRowStart. The program's own batch and qStart, except for a
  /// ragged batch (batch 0, the sequence's first packed row + qStart).
  Value qBatch, qRowStart;
  /// All KV blocks of the cache, the visible ones [nLo, nHi), this
  /// instance's [loopLo, loopHi) (its chunk with a split), the full ones
  /// [fullLo, fullHi).
  Value totalKBlocks, nLo, nHi, loopLo, loopHi, fullLo, fullHi;
  /// tile.mask's position bases (offset form; null otherwise).
  Value qBase, kBase;
  /// The sequence's q_offset (offset form; null otherwise): the position of
  /// its query row 0, where tile.load_q's RoPE counts from.
  Value qOff;
  /// Keys are read up to here (kv_len), never past it.
  Value readEnd;
  /// A tree: the sequence's first packed row, its rows L_b (unpacked) and
  /// its first draft key kv_len - L_b (null without a tree).
  Value treeRow0, treeRows, treeDraftBase;
  /// ALiBi: the batch's reference distance (alibiReference; null without).
  Value alibiRef;
  Value zero;
};

/// The tile program of one kvattn.attention, emitted in phases that read
/// top-down (run()): refuse what cannot be compiled, choose the schedule,
/// create the buffers, then the grid, whose program body finds its range
/// of rows and KV blocks, counts statistics, runs the KV loop and stores;
/// then, with a split, the merge program.
/// One part of a shared-prefix (cascade) attention on the GPU: the
/// attention stores its state (unnormalised by nothing: the final out and
/// lse of its keys) into part `index` of the cascade's f32 part buffers
/// [2, 1, Hq, T, Dv] / [2, 1, Hq, T] instead of results of its own; the
/// cascade's merge program combines the parts.
struct CascadePart {
  Value outParts, lseParts;
  int64_t index = 0;
};

class AttentionTiler {
public:
  AttentionTiler(RewriterBase &rewriter, AttentionOp op, const TileConfig &cfg,
                 std::optional<CascadePart> cascade = std::nullopt)
      : rewriter(rewriter), op(op), cfg(cfg), qType(op.getQuery().getType()),
        cascade(cascade) {}

  LogicalResult run() {
    if (failed(refuseUnsupported()))
      return failure();
    chooseSchedule();
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    b.setInsertionPoint(op);
    IndexMath m{b};
    createBuffers(b, m);
    auto grid = emitGrid(b, m);
    setTileConfig(grid, tileConfig(b, s.runTimeSplit ? 0 : s.splits, s.group,
                                   s.varlen ? KernelKind::attention_varlen
                                            : KernelKind::attention));
    if (cascade) {
      // The prefix part runs with B = 1 over the P prefix keys: the
      // manifest's kind "cascade_prefix" tells the runtime so.
      if (cascade->index == 0)
        grid->setAttr(kCascadeAttr, b.getStringAttr("prefix"));
      rewriter.eraseOp(op);
      return success();
    }
    if (s.splits > 1)
      emitMergeProgram(b, m);
    replaceOp(b);
    return success();
  }

private:
  //===--------------------------------------------------------------------===//
  // Before any IR: what cannot be compiled, and the schedule.
  //===--------------------------------------------------------------------===//

  LogicalResult refuseUnsupported() {
    // The latent form's Dv is its value_dim (V: the key's first columns).
    int64_t headDim = qType.getDimSize(3), valueDim = op.getValueHeadDim();
    if (ShapedType::isDynamic(headDim) || ShapedType::isDynamic(valueDim))
      return op.emitOpError()
             << "kvattn-tile needs static head dims D and Dv (they size the "
                "per-program tiles), got D = "
             << (ShapedType::isDynamic(headDim) ? std::string("?")
                                                : std::to_string(headDim))
             << ", Dv = "
             << (ShapedType::isDynamic(valueDim) ? std::string("?")
                                                 : std::to_string(valueDim));
    if (headDim > ::mlir::kvattn::limits::kMaxHeadDim ||
        valueDim > ::mlir::kvattn::limits::kMaxHeadDim)
      return op.emitOpError()
             << "kvattn-tile: head dims above "
             << ::mlir::kvattn::limits::kMaxHeadDim
             << " are not compiled (D = " << headDim << ", Dv = " << valueDim
             << "; docs/robustness.md)";
    for (auto [index, operand] : llvm::enumerate(op->getOperands())) {
      auto shaped = dyn_cast<ShapedType>(operand.getType());
      if (!shaped || !shaped.hasRank())
        continue;
      SmallVector<int64_t> dims;
      for (int64_t d : shaped.getShape())
        if (ShapedType::isStatic(d))
          dims.push_back(d);
      if (!::mlir::kvattn::limits::elementCount(
              std::vector<int64_t>(dims.begin(), dims.end())))
        return op.emitOpError()
               << "kvattn-tile: operand " << index << " (" << operand.getType()
               << ") has more than 2^48 elements (counting its non-zero "
                  "dims)";
    }
    s.headDim = headDim;
    s.valueDim = valueDim;
    return success();
  }

  void chooseSchedule() {
    s.scale = op.getEffectiveScale();
    if (std::optional<APFloat> cap = op.getSoftcap())
      s.softcap = cap->convertToFloat();
    s.window = op.getWindow();
    // qp - kp <= maxPosition for every pair: a wider window is this one (a
    // 2^31 window truncated in 32-bit index arithmetic admitted no key).
    if (s.window && *s.window > cfg.maxPosition)
      s.window = cfg.maxPosition + 1;
    s.windowRight = op.getWindowRight();
    if (s.windowRight && *s.windowRight > cfg.maxPosition)
      s.windowRight = cfg.maxPosition;
    s.causal = op.getCausal();
    s.offsetForm = static_cast<bool>(op.getQOffset());
    s.paged = op.isPaged();
    s.varlen = op.isVarlen();
    s.tree = static_cast<bool>(op.getTreeParents());
    const bool explicitForm = static_cast<bool>(op.getQPos());
    // An ALiBi bias touches every score: no block is mask-free.
    s.canBeFull = !op.getKeyValid() && !op.getMask() && !op.getAlibiSlopes() &&
                  !(explicitForm && (s.causal || s.window || s.windowRight));
    // The block sizes, warps, GQA packing and split: the options, or chosen
    // for this op (kvattn/Support/Schedule.h).
    schedule::Problem problem;
    problem.batch = qType.getDimSize(0);
    problem.qHeads = qType.getDimSize(1);
    problem.kvHeads = op.getKey().getType().getDimSize(op.getKeyHeadDim());
    problem.qLen = qType.getDimSize(2);
    problem.logicalKeys = op.getLogicalKeyLength();
    problem.headDim = s.headDim;
    problem.valueHeadDim = s.valueDim;
    problem.kvElementBits =
        op.getKey().getType().getElementType().getIntOrFloatBitWidth();
    problem.queryInKvType =
        qType.getElementType() == op.getKey().getType().getElementType();
    problem.varlen = s.varlen;
    if (s.varlen) {
      int64_t starts = cast<ShapedType>(op.getQStart().getType()).getDimSize(0);
      problem.sequences =
          ShapedType::isDynamic(starts) ? schedule::kDynamic : starts - 1;
    }
    problem.tree = s.tree;
    problem.alibi = static_cast<bool>(op.getAlibiSlopes());
    problem.latent = op.isLatent();
    problem.queryElementBits = qType.getElementType().getIntOrFloatBitWidth();
    schedule::Blocks blocks = schedule::choose(problem, cfg.scheduleOptions());
    s.group = blocks.group;
    s.bm = blocks.bm;
    s.bn = blocks.bn;
    s.numWarps = blocks.numWarps;
    s.numStages = blocks.numStages;
    s.splits = blocks.splits;
    s.runTimeSplit = blocks.runTimeSplit;
    // A cascade part is itself one part of a merge: no split inside it.
    if (cascade) {
      s.splits = 1;
      s.runTimeSplit = false;
    }
    s.splitPerSm = blocks.splitPerSm;
    groupAttr =
        s.packed() ? rewriter.getI64IntegerAttr(s.group) : IntegerAttr();
  }

  //===--------------------------------------------------------------------===//
  // The buffers: operands, results and a split's partial states.
  //===--------------------------------------------------------------------===//

  void createBuffers(ImplicitLocOpBuilder &b, IndexMath &m) {
    buf.q = toBuffer(b, op.getQuery(), BufferRole::query);
    buf.k = toBuffer(b, op.getKey(), BufferRole::key);
    // The latent form reads V from the key cache itself (tile.softmax_update
    // latent): one cache operand, one buffer.
    buf.v =
        op.isLatent() ? buf.k : toBuffer(b, op.getValue(), BufferRole::value);
    buf.qOffset = toBuffer(b, op.getQOffset(), BufferRole::q_offset);
    buf.kOffset = toBuffer(b, op.getKOffset(), BufferRole::k_offset);
    buf.qPos = toBuffer(b, op.getQPos(), BufferRole::q_pos);
    buf.kPos = toBuffer(b, op.getKPos(), BufferRole::k_pos);
    buf.kvLen = toBuffer(b, op.getKvLen(), BufferRole::kv_len);
    buf.keyValid = toBuffer(b, op.getKeyValid(), BufferRole::key_valid);
    buf.mask = toBuffer(b, op.getMask(), BufferRole::mask);
    buf.blockTable = toBuffer(b, op.getBlockTable(), BufferRole::block_table);
    buf.qStart = toBuffer(b, op.getQStart(), BufferRole::q_start);
    buf.sinks = toBuffer(b, op.getSinks(), BufferRole::sinks);
    buf.alibiSlopes =
        toBuffer(b, op.getAlibiSlopes(), BufferRole::alibi_slopes);
    buf.treeParents =
        toBuffer(b, op.getTreeParents(), BufferRole::tree_parents);
    buf.kStart = toBuffer(b, op.getKStart(), BufferRole::k_start);
    buf.cacheBatchIdx =
        toBuffer(b, op.getCacheBatchIdx(), BufferRole::cache_batch_idx);
    buf.kScale = toBuffer(b, op.getKScale(), BufferRole::k_scale);
    buf.vScale = toBuffer(b, op.getVScale(), BufferRole::v_scale);
    buf.kRopePos = toBuffer(b, op.getKRopePos(), BufferRole::k_rope_pos);
    buf.rotaryCos = toBuffer(b, op.getRotaryCos(), BufferRole::rotary_cos);
    buf.rotarySin = toBuffer(b, op.getRotarySin(), BufferRole::rotary_sin);

    batch = m.dim(buf.q, 0);
    qHeads = m.dim(buf.q, 1);
    qLen = m.dim(buf.q, 2);
    if (cascade) // the cascade's part buffers instead of results
      return;
    buf.out =
        allocLike(b, op.getOut().getType(),
                  {batch, qHeads, qLen, m.c(s.valueDim)}, BufferRole::out);
    if (Value lse = op.getLse())
      buf.lse = allocLike(b, cast<RankedTensorType>(lse.getType()),
                          {batch, qHeads, qLen}, BufferRole::lse);
  }

  /// out_parts [N, B, Hq, L, Dv] and lse_parts [N, B, Hq, L] in f32; with
  /// a run-time split N is dynamic: the run's count `chunks`.
  void createPartBuffers(ImplicitLocOpBuilder &b, Value chunks) {
    auto partsType = [&](ArrayRef<int64_t> shape) {
      SmallVector<int64_t> full{s.runTimeSplit ? ShapedType::kDynamic
                                               : s.splits};
      full.append(shape.begin(), shape.end());
      return MemRefType::get(full, b.getF32Type());
    };
    SmallVector<Value> dynamic;
    if (s.runTimeSplit)
      dynamic.push_back(chunks);
    auto qShape = qType.getShape();
    // A named array: an ArrayRef of a braced list would dangle in the loop.
    const Value sizes[] = {batch, qHeads, qLen};
    for (auto [i, v] : llvm::enumerate(sizes))
      if (ShapedType::isDynamic(qShape[i]))
        dynamic.push_back(v);
    auto outAlloc = memref::AllocOp::create(
        b, partsType({qShape[0], qShape[1], qShape[2], s.valueDim}), dynamic);
    auto lseAlloc = memref::AllocOp::create(
        b, partsType({qShape[0], qShape[1], qShape[2]}), dynamic);
    setBufferRole(outAlloc, BufferRole::out_parts);
    setBufferRole(lseAlloc, BufferRole::lse_parts);
    outParts = outAlloc;
    lseParts = lseAlloc;
  }

  //===--------------------------------------------------------------------===//
  // The grid and one program instance.
  //===--------------------------------------------------------------------===//

  /// scf.forall over (batch x head, query block[, KV chunk]): unpacked one
  /// instance per query head, packed one per kv head.
  scf::ForallOp emitGrid(ImplicitLocOpBuilder &b, IndexMath &m) {
    Value numPrograms =
        m.mul(batch, s.packed() ? m.c(qType.getDimSize(1) / s.group) : qHeads);
    Value numQBlocks =
        m.ceilDiv(s.packed() ? m.mul(qLen, m.c(s.group)) : qLen, s.bm);
    if (s.varlen) {
      // Sequence b owns the query blocks [P(b), P(b + 1)) with
      // P(b) = floor(G * q_start[b] / BM) + b: at least its
      // ceil(G * L_b / BM) blocks, at most one more (empty). The grid is
      // P(B) = floor(G * T / BM) + B, whatever the lengths.
      Value sequences = m.sub(m.dim(buf.qStart, 0), m.c(1));
      numQBlocks =
          m.add(m.floorDiv(s.packed() ? m.mul(qLen, m.c(s.group)) : qLen, s.bm),
                sequences);
    }
    Value chunks = runTimeN =
        s.runTimeSplit ? runTimeChunks(b, m, numPrograms, numQBlocks) : Value();
    if (s.splits > 1)
      createPartBuffers(b, chunks);
    SmallVector<OpFoldResult> gridSizes = {getAsOpFoldResult(numPrograms),
                                           getAsOpFoldResult(numQBlocks)};
    if (s.runTimeSplit)
      gridSizes.push_back(chunks);
    else if (s.splits > 1)
      gridSizes.push_back(b.getIndexAttr(s.splits));
    return scf::ForallOp::create(
        b, b.getLoc(), gridSizes, ValueRange{}, std::nullopt,
        [&](OpBuilder &nested, Location loc, ValueRange ivs) {
          ImplicitLocOpBuilder pb(loc, nested);
          // Scratch tiles live on the stack of one program instance.
          auto scope = memref::AllocaScopeOp::create(pb, TypeRange{});
          Block *body = pb.createBlock(&scope.getBodyRegion());
          pb.setInsertionPointToStart(body);
          IndexMath p{pb};
          ProgramRange r = programRange(pb, p, ivs);
          if (buf.alibiSlopes)
            r.alibiRef = alibiReference(p, r.bIdx, r.kvLen);
          if (cfg.stats)
            emitStats(pb, p, r, ivs);
          emitProgramBody(pb, p, r, ivs);
          memref::AllocaScopeReturnOp::create(pb, ValueRange{});
          pb.setInsertionPointAfter(scope);
          scf::InParallelOp::create(pb);
        });
  }

  /// A run-time split's chunk count n, on the host from the run-time sizes:
  /// splitRule with P = programs x query blocks, S the logical keys, clamped
  /// to [1, N_max] (the runtime's rt::splitCount computes the same).
  Value runTimeChunks(ImplicitLocOpBuilder &b, IndexMath &m, Value numPrograms,
                      Value numQBlocks) {
    Value one = m.c(1);
    // (Named locals: the IR order must not depend on the compiler's
    // argument evaluation order.)
    Value keys;
    if (s.paged) {
      Value maxPages = m.dim(buf.blockTable, 1);
      Value pageSize = m.dim(buf.k, 1);
      keys = m.mul(maxPages, pageSize);
    } else {
      keys = m.dim(buf.k, 2);
    }
    Value programs = m.max(m.mul(numPrograms, numQBlocks), one);
    Value chunks = m.ceilDiv(keys, s.bn);
    if (cfg.splitMinKeys > 0) {
      Value minKeys = m.c(cfg.splitMinKeys);
      Value byKeys = b.createOrFold<arith::DivSIOp>(keys, minKeys);
      chunks = m.min(chunks, byKeys);
    }
    Value slots = m.c(s.splitPerSm * cfg.numSms);
    Value wanted = m.ceilDiv(slots, programs);
    Value capped = m.min(wanted, chunks);
    Value maxSplits = m.c(s.splits);
    return m.max(m.min(capped, maxSplits), one);
  }

  /// The chunk count inside a program: static, or a run-time split's n,
  /// read back from the part buffers' leading dimension.
  Value chunkCount(IndexMath &p) {
    return s.runTimeSplit ? p.dim(outParts, 0) : p.c(s.splits);
  }

  /// The instance's rows (from its grid ids) and its KV blocks (from the
  /// positions of its rows). The program body captures nothing but the
  /// operand buffers: sizes are re-read from them, so that the body can be
  /// outlined as a kernel.
  ProgramRange programRange(ImplicitLocOpBuilder &pb, IndexMath &p,
                            ValueRange ivs) {
    const int64_t bn = s.bn;
    // Paged: K is [num_pages, page_size, Hkv, D] and the logical key count
    // is max_pages * page_size.
    Value qHeads = p.dim(buf.q, 1), qLen = p.dim(buf.q, 2),
          kvHeads = p.dim(buf.k, s.paged ? 2 : 1),
          kLen = s.paged ? p.mul(p.dim(buf.blockTable, 1), p.dim(buf.k, 1))
                         : p.dim(buf.k, 2);
    if (s.varlen)
      return varlenProgramRange(pb, p, ivs, qHeads, qLen, kvHeads, kLen);
    ProgramRange r;
    r.totalKBlocks = p.ceilDiv(kLen, bn);
    Value bh = ivs[0], qBlock = ivs[1];
    // Unpacked: program (b, head), rows = query rows. Packed: program
    // (b, kv head), rows = packed rows of the group's heads; `head` is the
    // group's first head.
    Value rowCount;
    if (s.packed()) {
      r.bIdx = pb.createOrFold<arith::DivUIOp>(bh, kvHeads);
      r.kvHead = pb.createOrFold<arith::RemUIOp>(bh, kvHeads);
      r.head = p.mul(r.kvHead, p.c(s.group));
      rowCount = p.mul(qLen, p.c(s.group));
    } else {
      Value heads = pb.createOrFold<arith::DivUIOp>(qHeads, kvHeads);
      r.bIdx = pb.createOrFold<arith::DivUIOp>(bh, qHeads);
      r.head = pb.createOrFold<arith::RemUIOp>(bh, qHeads);
      r.kvHead = pb.createOrFold<arith::DivUIOp>(r.head, heads);
      rowCount = qLen;
    }
    r.qStart = p.mul(qBlock, p.c(s.bm));
    r.rows = p.min(p.c(s.bm), p.sub(rowCount, r.qStart));
    r.qBatch = r.bIdx;
    r.qRowStart = r.qStart;
    r.kvLen = buf.kvLen ? p.loadIndex(buf.kvLen, r.bIdx) : kLen;
    keyRows(p, r, kLen);
    visibleRange(pb, p, r, kLen, ivs);
    return r;
  }

  /// A ragged batch: program (head, query block q) finds its sequence b, the
  /// largest with P(b) <= q (P as in emitGrid, strictly increasing), by
  /// binary search over q_start; its rows are the sequence's packed rows
  /// [(q - P(b)) * BM, ...) (in units of G packed rows per query row).
  /// Every q_start value read is clamped into [0, T] and the rows into
  /// [0, BM] so that even invalid metadata (which the reference and the
  /// runtime refuse) never reads or writes outside the buffers.
  ProgramRange varlenProgramRange(ImplicitLocOpBuilder &pb, IndexMath &p,
                                  ValueRange ivs, Value qHeads, Value qLen,
                                  Value kvHeads, Value kLen) {
    ProgramRange r;
    r.totalKBlocks = p.ceilDiv(kLen, s.bn);
    Value head = ivs[0], qBlock = ivs[1];
    if (s.packed()) {
      r.kvHead = head;
      r.head = p.mul(r.kvHead, p.c(s.group));
    } else {
      r.head = head;
      r.kvHead = pb.createOrFold<arith::DivUIOp>(
          r.head, pb.createOrFold<arith::DivUIOp>(qHeads, kvHeads));
    }
    Value zero = p.c(0), one = p.c(1);
    Value sequences = p.sub(p.dim(buf.qStart, 0), one);
    auto start = [&](ImplicitLocOpBuilder &b, Value slot) {
      IndexMath f{b};
      return f.min(f.max(f.loadIndex(buf.qStart, slot), f.c(0)), qLen);
    };
    auto firstBlock = [&](ImplicitLocOpBuilder &b, Value slot, Value cu) {
      IndexMath f{b};
      Value rows = s.packed() ? f.mul(cu, f.c(s.group)) : cu;
      return f.add(f.floorDiv(rows, s.bm), slot);
    };
    // lo = 0, hi = B; while (hi - lo > 1) { mid = (lo + hi) / 2;
    // P(mid) <= q ? lo = mid : hi = mid; }
    Type index = pb.getIndexType();
    auto search = scf::WhileOp::create(
        pb, TypeRange{index, index}, ValueRange{zero, sequences},
        [&](OpBuilder &nested, Location loc, ValueRange args) {
          ImplicitLocOpBuilder cb(loc, nested);
          IndexMath f{cb};
          Value more = cb.createOrFold<arith::CmpIOp>(
              arith::CmpIPredicate::sgt, f.sub(args[1], args[0]), f.c(1));
          scf::ConditionOp::create(cb, more, args);
        },
        [&](OpBuilder &nested, Location loc, ValueRange args) {
          ImplicitLocOpBuilder wb(loc, nested);
          IndexMath f{wb};
          Value mid =
              wb.createOrFold<arith::DivUIOp>(f.add(args[0], args[1]), f.c(2));
          Value below = wb.createOrFold<arith::CmpIOp>(
              arith::CmpIPredicate::sle, firstBlock(wb, mid, start(wb, mid)),
              qBlock);
          Value lo = arith::SelectOp::create(wb, below, mid, args[0]);
          Value hi = arith::SelectOp::create(wb, below, args[1], mid);
          scf::YieldOp::create(wb, ValueRange{lo, hi});
        });
    r.bIdx = search.getResult(0);
    Value cuLo = start(pb, r.bIdx);
    Value cuHi = p.max(start(pb, p.add(r.bIdx, one)), cuLo);
    Value rowCount = p.sub(cuHi, cuLo);
    Value packedBase = cuLo;
    if (s.packed()) {
      rowCount = p.mul(rowCount, p.c(s.group));
      packedBase = p.mul(cuLo, p.c(s.group));
    }
    Value local = p.max(p.sub(qBlock, firstBlock(pb, r.bIdx, cuLo)), zero);
    r.qStart = p.mul(local, p.c(s.bm));
    r.rows = p.max(p.min(p.c(s.bm), p.sub(rowCount, r.qStart)), zero);
    r.qBatch = zero;
    r.qRowStart = p.add(packedBase, r.qStart);
    r.kvLen = buf.kvLen ? p.loadIndex(buf.kvLen, r.bIdx) : kLen;
    if (s.tree) {
      r.treeRow0 = cuLo;
      r.treeRows = p.sub(cuHi, cuLo);
      r.treeDraftBase = p.max(p.sub(r.kvLen, r.treeRows), zero);
    }
    keyRows(p, r, kLen);
    visibleRange(pb, p, r, kLen, ivs);
    // An empty program (the spare block of a sequence, or a sequence
    // without rows) visits no KV block: with a split, none of its chunks
    // (each stores the identity (0, -inf) for rows it does not have: none).
    Value empty =
        pb.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::eq, r.rows, zero);
    Value nHi = arith::SelectOp::create(pb, empty, r.nLo, r.nHi);
    r.nHi = nHi;
    r.loopLo = p.min(r.loopLo, nHi);
    r.loopHi = p.min(r.loopHi, nHi);
    return r;
  }

  /// Where the batch's keys live (kvattn/Support/KeyRows.h): with k_start
  /// [B + 1] rows k_start[b] .. of the packed K/V (batch 0), its length
  /// kv_len[b] or k_start[b + 1] - k_start[b]; with cache_batch_idx, cache
  /// row cache_batch_idx[b]. Values read are clamped into the buffers so
  /// that invalid metadata (which the reference and the runtime refuse)
  /// never reads outside them.
  void keyRows(IndexMath &p, ProgramRange &r, Value kLen) {
    r.kvBatch = r.bIdx;
    if (buf.kStart) {
      Value zero = p.c(0);
      Value lo = p.min(p.max(p.loadIndex(buf.kStart, r.bIdx), zero), kLen);
      Value hi = p.min(
          p.max(p.loadIndex(buf.kStart, p.add(r.bIdx, p.c(1))), lo), kLen);
      Value owned = p.sub(hi, lo);
      r.kvBatch = zero;
      r.kRowBase = lo;
      r.kvLen = buf.kvLen ? p.min(p.max(r.kvLen, zero), owned) : owned;
    } else if (buf.cacheBatchIdx) {
      Value last = p.sub(p.dim(buf.k, 0), p.c(1));
      r.kvBatch =
          p.min(p.max(p.loadIndex(buf.cacheBatchIdx, r.bIdx), p.c(0)), last);
    }
  }

  /// ALiBi's reference distance of batch `b` (tile.mask): the distance of
  /// its first query's position (q_offset[b], or q_pos[b, 0]) to the range
  /// of its first and last keys' positions (k_offset[b] .. k_offset[b] +
  /// kv_len - 1, or k_pos[b, 0] and k_pos[b, kv_len - 1]); 0 when the query
  /// lies inside it. Every program, chunk and merge of the batch computes
  /// the same one.
  Value alibiReference(IndexMath &p, Value b, Value kvLen) {
    Value zero = p.c(0);
    Value last = p.max(p.sub(kvLen, p.c(1)), zero);
    Value qRef, kLo, kHi;
    if (s.offsetForm) {
      qRef = p.loadIndex(buf.qOffset, b);
      kLo = buf.kOffset ? p.loadIndex(buf.kOffset, b) : zero;
      kHi = p.add(kLo, last);
    } else {
      qRef = p.loadIndex(buf.qPos, ValueRange{b, zero});
      // Programs run whenever L >= 1, also over S = 0, where k_pos holds
      // no entry to read: the keys' positions are read only when the batch
      // has keys (kv_len >= 1, and kv_len <= S); without keys the
      // reference weights no score, and is 0.
      Type index = p.b.getIndexType();
      auto ifKeys =
          scf::IfOp::create(p.b, TypeRange{index, index}, p.lt(zero, kvLen),
                            /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard guard(p.b);
        p.b.setInsertionPointToStart(ifKeys.thenBlock());
        Value first = p.loadIndex(buf.kPos, ValueRange{b, zero});
        Value end = p.loadIndex(buf.kPos, ValueRange{b, last});
        scf::YieldOp::create(p.b,
                             ValueRange{p.min(first, end), p.max(first, end)});
        p.b.setInsertionPointToStart(ifKeys.elseBlock());
        scf::YieldOp::create(p.b, ValueRange{qRef, qRef});
      }
      kLo = ifKeys.getResult(0);
      kHi = ifKeys.getResult(1);
    }
    return p.max(p.max(p.sub(kLo, qRef), p.sub(qRef, kHi)), zero);
  }

  /// The row of K/V where the batch's key `kStart` lives.
  Value keyRow(IndexMath &f, const ProgramRange &r, Value kStart) {
    return r.kRowBase ? f.add(r.kRowBase, kStart) : kStart;
  }

  /// The visible key range of the program's rows, its full blocks and its
  /// chunk of them (split-KV).
  void visibleRange(ImplicitLocOpBuilder &pb, IndexMath &p, ProgramRange &r,
                    Value kLen, ValueRange ivs) {
    const int64_t bn = s.bn;

    // The visible key range [lo, hi) and the full blocks [fullLo, fullHi),
    // from the positions of the program's rows.
    Value zero = r.zero = p.c(0);
    Value lo = zero, hi = r.kvLen;
    r.fullLo = zero;
    r.fullHi = s.canBeFull ? p.floorDiv(r.kvLen, bn) : zero;
    if (s.offsetForm) {
      Value qOff = r.qOff = p.loadIndex(buf.qOffset, r.bIdx);
      Value kOff = buf.kOffset ? p.loadIndex(buf.kOffset, r.bIdx) : zero;
      // The program's query rows: [qStart, qStart + rows), or with packing
      // [qStart / G, (qStart + rows - 1) / G].
      Value firstRow = s.packed() ? p.floorDiv(r.qStart, s.group) : r.qStart;
      // A tree row sits at q_offset + its depth, which is at most its row
      // (and at least 0): the bounds below stay bounds with the first row
      // taken as 0.
      if (s.tree)
        firstRow = zero;
      Value lastRow = p.sub(p.add(r.qStart, r.rows), p.c(1));
      if (s.packed())
        lastRow = p.floorDiv(lastRow, s.group);
      Value qFirst = p.add(qOff, firstRow); // smallest qp
      Value qLast = p.add(qOff, lastRow);   // largest qp
      // tile.mask: qp = q_base + r, or packed q_base + (t / G); a tree's
      // q_base is the position of its local row 0.
      r.qBase = s.packed() || s.tree ? qOff : qFirst;
      r.kBase = kOff;
      if (s.causal) {
        // kp = kOff + j <= qLast  <=>  j < qLast - kOff + 1.
        hi = p.min(hi, p.max(p.add(p.sub(qLast, kOff), p.c(1)), zero));
        if (s.canBeFull)
          r.fullHi = p.floorDiv(
              p.min(r.kvLen, p.max(p.add(p.sub(qFirst, kOff), p.c(1)), zero)),
              bn);
      }
      if (s.windowRight) {
        // kp - qLast <= right  <=>  j < qLast + right + 1 - kOff; every
        // row sees the keys j < qFirst + right + 1 - kOff.
        Value right = p.add(p.c(*s.windowRight), p.c(1));
        hi = p.min(hi, p.max(p.sub(p.add(qLast, right), kOff), zero));
        if (s.canBeFull)
          r.fullHi = p.min(
              r.fullHi,
              p.floorDiv(p.min(r.kvLen,
                               p.max(p.sub(p.add(qFirst, right), kOff), zero)),
                         bn));
      }
      if (s.window) {
        // qFirst - kp < window  <=>  j >= qFirst - window + 1 - kOff.
        Value w = p.c(*s.window);
        lo = p.min(hi,
                   p.max(p.sub(p.add(p.sub(qFirst, w), p.c(1)), kOff), zero));
        if (s.canBeFull)
          r.fullLo = p.ceilDiv(
              p.max(p.sub(p.add(p.sub(qLast, w), p.c(1)), kOff), zero), bn);
      }
    }
    // A tree: only the blocks before the draft keys can be mask-free.
    if (s.tree && s.canBeFull)
      r.fullHi = p.min(r.fullHi, p.floorDiv(r.treeDraftBase, bn));
    r.nLo = p.floorDiv(lo, bn);
    r.nHi = p.max(p.ceilDiv(hi, bn), r.nLo);
    // This program's blocks: all of [nLo, nHi), or its chunk of them.
    r.loopLo = r.nLo;
    r.loopHi = r.nHi;
    if (s.splits > 1) {
      Value chunk = p.ceilDiv(p.sub(r.nHi, r.nLo), chunkCount(p));
      r.loopLo = p.min(p.add(r.nLo, p.mul(ivs[2], chunk)), r.nHi);
      r.loopHi = p.min(p.add(r.loopLo, chunk), r.nHi);
    }
    // Keys are read up to kv_len, never past it: cache slots past it are
    // not trusted (NaN there must not reach a tensor-core product, where a
    // masked key still multiplies its V row by zero).
    r.readEnd = r.kvLen;
  }

  /// stats = true: the instance's loaded, masked and skipped blocks and K/V
  /// bytes, added atomically to @kvattn_tile_stats. The counts come from
  /// the bounds of the loop and of its scf.if; skipped blocks are counted
  /// once per (batch, head, query block).
  void emitStats(ImplicitLocOpBuilder &pb, IndexMath &p, const ProgramRange &r,
                 ValueRange ivs) {
    Value zero = r.zero;
    Value loaded = p.sub(r.loopHi, r.loopLo);
    Value full = p.max(
        p.sub(p.min(r.fullHi, r.loopHi), p.max(r.fullLo, r.loopLo)), zero);
    Value masked = p.sub(loaded, full);
    Value skipped = p.sub(r.totalKBlocks, p.sub(r.nHi, r.nLo));
    if (s.splits > 1)
      skipped = arith::SelectOp::create(
          pb, arith::CmpIOp::create(pb, arith::CmpIPredicate::eq, ivs[2], zero),
          skipped, zero);
    // K/V bytes: the keys of the loaded blocks that are read (up to kv_len),
    // D + Dv elements each.
    Value keysRead = p.max(p.sub(p.min(p.mul(r.loopHi, p.c(s.bn)), r.readEnd),
                                 p.mul(r.loopLo, p.c(s.bn))),
                           zero);
    int64_t eltBytes = qType.getElementType().getIntOrFloatBitWidth() / 8;
    // The latent form reads one row of D per key (V is inside it).
    Value bytes =
        p.mul(keysRead,
              p.c((s.headDim + (op.isLatent() ? 0 : s.valueDim)) * eltBytes));
    Value global = memref::GetGlobalOp::create(
        pb, MemRefType::get({kNumStats}, pb.getI64Type()), kStatsGlobal);
    Value counts[kNumStats] = {loaded, masked, skipped, bytes};
    for (auto [slot, count] : llvm::enumerate(counts)) {
      Value v = arith::IndexCastOp::create(pb, pb.getI64Type(), count);
      memref::AtomicRMWOp::create(pb, arith::AtomicRMWKind::addi, v, global,
                                  ValueRange{p.c(slot)});
    }
  }

  /// The scratch tiles, the query tile, the KV loop (prefetch, scores,
  /// mask of partial blocks, online softmax) and the store.
  void emitProgramBody(ImplicitLocOpBuilder &pb, IndexMath &p,
                       const ProgramRange &r, ValueRange ivs) {
    auto f32 = pb.getF32Type();
    Tiles t;
    t.q = memref::AllocaOp::create(pb, MemRefType::get({s.bm, s.headDim}, f32));
    t.scores = memref::AllocaOp::create(pb, MemRefType::get({s.bm, s.bn}, f32));
    t.rowMax = memref::AllocaOp::create(pb, MemRefType::get({s.bm}, f32));
    t.rowSum = memref::AllocaOp::create(pb, MemRefType::get({s.bm}, f32));
    t.acc =
        memref::AllocaOp::create(pb, MemRefType::get({s.bm, s.valueDim}, f32));
    TileInitOp::create(pb, t.rowMax, t.rowSum, t.acc);
    // RoPE's record: a precondition checked before the program (the
    // reference's checks, a GPU kernel's validation kernel), never read.
    if (buf.kRopePos)
      TileKeyRecordOp::create(pb, buf.kRopePos);
    // RoPE: the query rows rotated as they are loaded, at their positions.
    RopeAttr rope = op.getRopeAttr();
    TileLoadQOp::create(pb, buf.q, r.qBatch, r.head, r.qRowStart, r.rows, t.q,
                        rope ? r.qStart : Value(),
                        rope && s.offsetForm ? r.qOff : Value(),
                        rope && !s.offsetForm ? buf.qPos : Value(), groupAttr,
                        rope, buf.rotaryCos, buf.rotarySin);
    emitKvLoop(pb, p, r, t);
    emitStore(pb, p, r, t, ivs);
  }

  /// The per-program scratch tiles (f32).
  struct Tiles {
    Value q, scores, rowMax, rowSum, acc;
  };

  /// The keys block `kBlock` reads: paged, never past kv_len, where table
  /// entries may be -1; the columns past `cols` score -inf.
  Value blockCols(IndexMath &f, const ProgramRange &r, Value kStart) {
    return f.min(f.c(s.bn), f.sub(r.readEnd, kStart));
  }

  /// num-stages >= 2: each block is announced one step ahead (before the
  /// loop, the first; after each tile.qk, the next, or none: cols 0) so
  /// that a target can load it while the current block computes.
  void announce(ImplicitLocOpBuilder &fb, IndexMath &f, const ProgramRange &r,
                Value block) {
    Value has = f.lt(block, r.loopHi);
    Value start = f.mul(block, f.c(s.bn));
    Value cols =
        arith::SelectOp::create(fb, has, blockCols(f, r, start), f.c(0));
    TilePrefetchOp::create(fb, buf.k, r.kvBatch, r.kvHead, keyRow(f, r, start),
                           cols, buf.blockTable);
  }

  void emitKvLoop(ImplicitLocOpBuilder &pb, IndexMath &p, const ProgramRange &r,
                  const Tiles &t) {
    // An FP8 cache is converted while staged (by plain loads, not
    // cp.async): nothing to announce.
    const bool prefetch = s.numStages >= 2 && !buf.kScale;
    if (prefetch)
      announce(pb, p, r, r.loopLo);
    scf::ForOp::create(
        pb, r.loopLo, r.loopHi, p.c(1), ValueRange{},
        [&](OpBuilder &lb, Location l, Value kBlock, ValueRange) {
          ImplicitLocOpBuilder fb(l, lb);
          IndexMath f{fb};
          Value kStart = f.mul(kBlock, f.c(s.bn));
          Value cols = blockCols(f, r, kStart);
          Value kRow = keyRow(f, r, kStart);
          TileQKOp::create(fb, t.q, buf.k, r.kvBatch, r.kvHead, kRow, r.rows,
                           cols, t.scores, buf.blockTable, buf.kScale,
                           fb.getF32FloatAttr(static_cast<float>(*s.scale)),
                           s.softcap ? fb.getF32FloatAttr(*s.softcap)
                                     : FloatAttr());
          if (prefetch)
            announce(fb, f, r, f.add(kBlock, f.c(1)));
          // Partial blocks only: full ones carry no mask arithmetic.
          Value isFull = fb.createOrFold<arith::AndIOp>(f.ge(kBlock, r.fullLo),
                                                        f.lt(kBlock, r.fullHi));
          auto ifPartial = scf::IfOp::create(
              fb,
              fb.createOrFold<arith::XOrIOp>(
                  isFull, arith::ConstantIntOp::create(fb, 1, 1)),
              /*withElseRegion=*/false);
          {
            OpBuilder::InsertionGuard guard(fb);
            fb.setInsertionPointToStart(ifPartial.thenBlock());
            TileMaskOp::create(
                fb, t.scores, r.bIdx, r.head, r.qStart, kStart, r.rows, cols,
                r.kvLen, r.qBase, r.kBase ? f.add(r.kBase, kStart) : Value(),
                buf.qPos, buf.kPos, buf.keyValid, buf.mask, s.causal,
                s.window ? fb.getI64IntegerAttr(*s.window) : IntegerAttr(),
                groupAttr,
                s.windowRight ? fb.getI64IntegerAttr(*s.windowRight)
                              : IntegerAttr(),
                buf.alibiSlopes, r.alibiRef, buf.treeParents, r.treeRow0,
                r.treeDraftBase);
          }
          // The full-block test goes with the update: a target may multiply
          // every value of a full block without testing its probability
          // for 0.
          TileSoftmaxOp::create(
              fb, t.scores, buf.v, r.kvBatch, r.kvHead, kRow, r.rows, cols,
              t.rowMax, t.rowSum, t.acc, buf.blockTable, buf.keyValid,
              s.canBeFull ? isFull : Value(),
              // The latent form's V is the key cache: its scale is k_scale.
              op.isLatent() ? buf.kScale : buf.vScale, op.isLatent());
          scf::YieldOp::create(fb);
        });
  }

  /// The epilogue: out (and lse), or with a split the chunk's partial
  /// state, views of part ivs[2].
  void emitStore(ImplicitLocOpBuilder &pb, IndexMath &p, const ProgramRange &r,
                 const Tiles &t, ValueRange ivs) {
    if (cascade) {
      // The part's final state (no sink, no ALiBi in a cascade) at the
      // rows out would have: [1, Hq, T] indexed like out.
      Value index = p.c(cascade->index);
      // (One view per statement: the IR's order must not depend on the
      // C++ compiler's order of evaluating arguments.)
      Value outPart = partView(pb, p, cascade->outParts, index);
      Value lsePart = partView(pb, p, cascade->lseParts, index);
      TileStoreOp::create(pb, t.rowMax, t.rowSum, t.acc, outPart, lsePart,
                          r.qBatch, r.head, r.qRowStart, r.rows, groupAttr,
                          /*sinks=*/Value(), /*alibi_slopes=*/Value(),
                          /*alibi_ref=*/Value());
      return;
    }
    if (s.splits <= 1) {
      TileStoreOp::create(pb, t.rowMax, t.rowSum, t.acc, buf.out, buf.lse,
                          r.qBatch, r.head, r.qRowStart, r.rows, groupAttr,
                          buf.sinks, buf.alibiSlopes, r.alibiRef);
      return;
    }
    auto part = [&](Value parts) { return partView(pb, p, parts, ivs[2]); };
    // The chunks' raw states: a sink joins once, in the merge, and so does
    // ALiBi's constant (the parts stay relative to it). The parts are
    // indexed like out: a ragged batch's at its packed rows (batch 0, row
    // q_start[b] + i), which the merge reads back as rows of one batch.
    // That merge does not know a row's sequence, so a ragged batch's chunk,
    // which does, adds its sequence's ALiBi constant to the lse it stores
    // (absolute parts; the merge takes no ALiBi).
    const bool absoluteParts = s.varlen && buf.alibiSlopes;
    auto storeParts = [&] {
      Value outPart = part(outParts);
      Value lsePart = part(lseParts);
      TileStoreOp::create(pb, t.rowMax, t.rowSum, t.acc, outPart, lsePart,
                          r.qBatch, r.head, r.qRowStart, r.rows, groupAttr,
                          /*sinks=*/Value(),
                          absoluteParts ? buf.alibiSlopes : Value(),
                          absoluteParts ? r.alibiRef : Value());
    };
    if (!s.runTimeSplit) {
      storeParts();
      return;
    }
    // A run-time split of n = 1 chunk: the program's state is final, it
    // goes to out (and lse) directly and the merge is skipped (as
    // FlashAttention does with num_splits = 1). n is uniform over the grid.
    Value chunks = chunkCount(p);
    Value one = p.c(1);
    Value single =
        pb.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::eq, chunks, one);
    auto ifSingle = scf::IfOp::create(pb, single, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(pb);
    pb.setInsertionPointToStart(ifSingle.thenBlock());
    TileStoreOp::create(pb, t.rowMax, t.rowSum, t.acc, buf.out, buf.lse,
                        r.qBatch, r.head, r.qRowStart, r.rows, groupAttr,
                        buf.sinks, buf.alibiSlopes, r.alibiRef);
    pb.setInsertionPointToStart(ifSingle.elseBlock());
    storeParts();
  }

  /// Part `index` of a part buffer [N, ...] as a view [...].
  static Value partView(ImplicitLocOpBuilder &pb, IndexMath &p, Value parts,
                        Value index) {
    auto type = cast<MemRefType>(parts.getType());
    SmallVector<OpFoldResult> offsets(type.getRank(), pb.getIndexAttr(0));
    offsets[0] = index;
    SmallVector<OpFoldResult> sizes = {pb.getIndexAttr(1)};
    for (int64_t d = 1; d < type.getRank(); ++d)
      sizes.push_back(getAsOpFoldResult(p.dim(parts, d)));
    SmallVector<OpFoldResult> strides(type.getRank(), pb.getIndexAttr(1));
    auto viewType = memref::SubViewOp::inferRankReducedResultType(
        type.getShape().drop_front(), type, offsets, sizes, strides);
    return memref::SubViewOp::create(pb, cast<MemRefType>(viewType), parts,
                                     offsets, sizes, strides)
        .getResult();
  }

  //===--------------------------------------------------------------------===//
  // After the grid: the merge of a split, the results.
  //===--------------------------------------------------------------------===//

  /// split_kv: the grid's chunks (0: chosen at run time). A run-time
  /// split's programs (attention and merge) also carry `split_rule`, what
  /// the runtime needs to compute n: N_max, the attention's block_m,
  /// block_n and group, programs per multiprocessor, min keys and the
  /// multiprocessors planned for (docs/kernel-abi.md).
  TileConfigAttr tileConfig(Builder &b, int64_t splitKv, int64_t heads,
                            KernelKind kind) {
    SplitRuleAttr rule;
    if (s.runTimeSplit)
      rule = SplitRuleAttr::get(b.getContext(), s.splits, s.bm, s.bn, s.group,
                                s.splitPerSm, cfg.splitMinKeys, cfg.numSms);
    return TileConfigAttr::get(b.getContext(), kind, s.bm, s.bn, s.numWarps,
                               s.numStages, splitKv, heads,
                               /*vector_width=*/0, rule,
                               /*validates=*/FlatSymbolRefAttr());
  }

  /// One instance per (batch x head, query block) merges its rows' partial
  /// states in chunk order (deterministic, (0, -inf) the identity) into out
  /// and lse; the part buffers are freed after it. A run-time split merges
  /// only when n > 1 (n = 1 stored out directly).
  void emitMergeProgram(ImplicitLocOpBuilder &b, IndexMath &m) {
    std::optional<OpBuilder::InsertionGuard> guard;
    if (s.runTimeSplit) {
      Value one = m.c(1);
      Value many = b.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::sgt,
                                                 runTimeN, one);
      auto ifSplit = scf::IfOp::create(b, many, /*withElseRegion=*/false);
      guard.emplace(b);
      b.setInsertionPointToStart(ifSplit.thenBlock());
    }
    auto merge = scf::ForallOp::create(
        b, b.getLoc(),
        ArrayRef<OpFoldResult>{getAsOpFoldResult(m.mul(batch, qHeads)),
                               getAsOpFoldResult(m.ceilDiv(qLen, s.bm))},
        ValueRange{}, std::nullopt,
        [&](OpBuilder &nested, Location loc, ValueRange ivs) {
          ImplicitLocOpBuilder pb(loc, nested);
          IndexMath p{pb};
          // Sizes from the operand buffers only, as in the main program.
          Value qHeads = p.dim(buf.out, 1), qLen = p.dim(buf.out, 2);
          Value bIdx = pb.createOrFold<arith::DivUIOp>(ivs[0], qHeads);
          Value head = pb.createOrFold<arith::RemUIOp>(ivs[0], qHeads);
          Value qStart = p.mul(ivs[1], p.c(s.bm));
          Value rows = p.min(p.c(s.bm), p.sub(qLen, qStart));
          // ALiBi: the batch's reference distance, as its programs had it
          // (a ragged batch's parts are absolute: none).
          Value alibiRef, alibiSlopes;
          if (buf.alibiSlopes && !s.varlen) {
            alibiSlopes = buf.alibiSlopes;
            ProgramRange r;
            r.bIdx = bIdx;
            Value kLen = s.paged
                             ? p.mul(p.dim(buf.blockTable, 1), p.dim(buf.k, 1))
                             : p.dim(buf.k, 2);
            r.kvLen = buf.kvLen ? p.loadIndex(buf.kvLen, bIdx) : kLen;
            keyRows(p, r, kLen);
            alibiRef = alibiReference(p, bIdx, r.kvLen);
          }
          TileMergeOp::create(pb, outParts, lseParts, buf.out, buf.lse, bIdx,
                              head, qStart, rows, buf.sinks, alibiSlopes,
                              alibiRef);
          scf::InParallelOp::create(pb);
        });
    setTileConfig(merge, tileConfig(b, 1, 1, KernelKind::merge));
    // A ragged batch's merge: its rows are the packed ones (B = 1 in the
    // grid and the buffers, the sequence count only in the split rule).
    if (s.varlen)
      merge->setAttr(kVarlenMergeAttr, b.getUnitAttr());
    guard.reset();
    memref::DeallocOp::create(b, outParts);
    memref::DeallocOp::create(b, lseParts);
  }

  void replaceOp(ImplicitLocOpBuilder &b) {
    SmallVector<Value> results;
    results.push_back(bufferization::ToTensorOp::create(
        b, op.getOut().getType(), buf.out, /*restrict=*/true,
        /*writable=*/true));
    if (Value lse = op.getLse())
      results.push_back(bufferization::ToTensorOp::create(
          b, lse.getType(), buf.lse, /*restrict=*/true, /*writable=*/true));
    rewriter.replaceOp(op, results);
  }

  RewriterBase &rewriter;
  AttentionOp op;
  const TileConfig &cfg;
  RankedTensorType qType;
  Schedule s;
  IntegerAttr groupAttr;
  Buffers buf;
  /// Sizes at the op, outside the grid.
  Value batch, qHeads, qLen;
  /// A split's partial states (null without a split).
  Value outParts, lseParts;
  /// A run-time split's chunk count n, on the host.
  Value runTimeN;
  /// Set when the op is one part of a cascade (tileCascade).
  std::optional<CascadePart> cascade;
};

} // namespace

/// Emits the tile program of one op and replaces it.
static LogicalResult tileAttention(RewriterBase &rewriter, AttentionOp op,
                                   const TileConfig &cfg) {
  return AttentionTiler(rewriter, op, cfg).run();
}

/// Shared-prefix (cascade) attention as three programs (the GPU pipeline;
/// kvattn-to-cpu expands it first): the attention of every packed row over
/// the prefix (B = 1: the prefix K/V read once per KV head and row block)
/// and the ragged attention over the suffixes store their states into
/// parts 0 and 1 of f32 part buffers [2, 1, Hq, T, Dv] / [2, 1, Hq, T]
/// (the layout of a split's), which a merge program combines in that order
/// into out and lse: the split merge's tile.merge, with N = 2.
static LogicalResult tileCascade(RewriterBase &rewriter, CascadeOp op,
                                 const TileConfig &cfg) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  b.setInsertionPoint(op);
  IndexMath m{b};
  auto outType = cast<RankedTensorType>(op.getOut().getType());
  auto vType = cast<RankedTensorType>(op.getValue().getType());
  if (outType.isDynamicDim(3) || vType.isDynamicDim(3))
    return op.emitOpError() << "kvattn-tile needs a static value head dim Dv "
                               "(it sizes the per-program tiles)";
  // Hq and T of the query, on the host.
  SmallVector<Value> dynamic;
  for (int64_t d : {1, 2})
    if (outType.isDynamicDim(d))
      dynamic.push_back(tensor::DimOp::create(b, op.getQuery(), d));
  auto parts = [&](ArrayRef<int64_t> shape, BufferRole role) {
    SmallVector<int64_t> full = {2};
    full.append(shape.begin(), shape.end());
    auto alloc = memref::AllocOp::create(
        b, MemRefType::get(full, b.getF32Type()), dynamic);
    setBufferRole(alloc, role);
    return alloc.getResult();
  };
  ArrayRef<int64_t> shape = outType.getShape();
  CascadePart part;
  part.outParts = parts(shape, BufferRole::out_parts);
  part.lseParts = parts(shape.drop_back(), BufferRole::lse_parts);
  // The two attentions into the parts, unless there are no query rows (a
  // static T of 0): their programs would have no instances, and the views
  // of their parts would start at row 0 of a zero-size dimension, which
  // the subview verifier refuses. The merge program (no instances either)
  // stays: the launch of an empty grid.
  if (outType.getDimSize(2) != 0) {
    auto [prefix, suffix] = createCascadeAttentions(b, op);
    if (failed(AttentionTiler(rewriter, prefix, cfg, part).run()))
      return failure();
    part.index = 1;
    if (failed(AttentionTiler(rewriter, suffix, cfg, part).run()))
      return failure();
  }

  // The results and the merge program: one instance per (head, block of
  // 64 rows), B = 1.
  auto alloc = [&](RankedTensorType type, BufferRole role) {
    auto op = memref::AllocOp::create(
        b, MemRefType::get(type.getShape(), type.getElementType()), dynamic);
    setBufferRole(op, role);
    return op.getResult();
  };
  Value out = alloc(outType, BufferRole::out);
  Value lse;
  if (Value result = op.getLse())
    lse = alloc(cast<RankedTensorType>(result.getType()), BufferRole::lse);
  constexpr int64_t kMergeRows = 64, kMergeWarps = 4;
  Value heads = m.dim(out, 1), rows = m.dim(out, 2);
  auto merge = scf::ForallOp::create(
      b, b.getLoc(),
      ArrayRef<OpFoldResult>{getAsOpFoldResult(heads),
                             getAsOpFoldResult(m.ceilDiv(rows, kMergeRows))},
      ValueRange{}, std::nullopt,
      [&](OpBuilder &nested, Location loc, ValueRange ivs) {
        ImplicitLocOpBuilder pb(loc, nested);
        IndexMath p{pb};
        // Sizes from the operand buffers only.
        Value qLen = p.dim(out, 2);
        Value qStart = p.mul(ivs[1], p.c(kMergeRows));
        Value count = p.min(p.c(kMergeRows), p.sub(qLen, qStart));
        TileMergeOp::create(pb, part.outParts, part.lseParts, out, lse, p.c(0),
                            ivs[0], qStart, count, /*sinks=*/Value(),
                            /*alibi_slopes=*/Value(), /*alibi_ref=*/Value());
        scf::InParallelOp::create(pb);
      });
  setTileConfig(merge, TileConfigAttr::get(
                           b.getContext(), KernelKind::merge, kMergeRows,
                           /*block_n=*/0, kMergeWarps, /*num_stages=*/1,
                           /*split_kv=*/1, /*group=*/1, /*vector_width=*/0,
                           SplitRuleAttr(), FlatSymbolRefAttr()));
  merge->setAttr(kCascadeAttr, b.getStringAttr("merge"));
  memref::DeallocOp::create(b, part.outParts);
  memref::DeallocOp::create(b, part.lseParts);
  SmallVector<Value> results = {bufferization::ToTensorOp::create(
      b, outType, out, /*restrict=*/true, /*writable=*/true)};
  if (lse)
    results.push_back(bufferization::ToTensorOp::create(
        b, op.getLse().getType(), lse, /*restrict=*/true, /*writable=*/true));
  rewriter.replaceOp(op, results);
  return success();
}

namespace {

struct TilePass : mlir::kvattn::impl::TilePassBase<TilePass> {
  using Base::Base;

  void runOnOperation() override {
    if (blockM < 0 || blockN < 0 || numWarps < 0 || numStages <= 0 ||
        (blockM == 0 && numWarps != 0)) {
      getOperation().emitError()
          << "kvattn-tile: block-m, block-n and num-warps must be positive or "
             "0 (automatic; num-warps automatic with block-m), num-stages "
             "positive (got "
          << static_cast<int64_t>(blockM) << ", "
          << static_cast<int64_t>(blockN) << ", "
          << static_cast<int64_t>(numWarps) << ", "
          << static_cast<int64_t>(numStages) << ")";
      return signalPassFailure();
    }
    using namespace ::mlir::kvattn::limits;
    auto above = [&](const char *name, int64_t value, int64_t limit) {
      if (value <= limit)
        return false;
      getOperation().emitError()
          << "kvattn-tile: " << name << " = " << value << " is above the limit "
          << limit << " (docs/robustness.md)";
      return true;
    };
    if (above("block-m", blockM, kMaxBlockM) ||
        above("block-n", blockN, kMaxBlockN) ||
        above("num-warps", numWarps, kMaxNumWarps) ||
        above("num-stages", numStages, kMaxNumStages) ||
        above("split-kv", splitKv, kMaxSplitKv))
      return signalPassFailure();
    if (splitKv < 0 || numSms < 1) {
      getOperation().emitError()
          << "kvattn-tile: split-kv must be 0 (automatic) or positive and "
             "num-sms positive, got "
          << static_cast<int64_t>(splitKv) << " and "
          << static_cast<int64_t>(numSms);
      return signalPassFailure();
    }
    if (splitMinKeys < 0 || splitWarpsPerSm < 0) {
      getOperation().emitError()
          << "kvattn-tile: split-min-keys and split-warps-per-sm must not be "
             "negative, got "
          << static_cast<int64_t>(splitMinKeys) << " and "
          << static_cast<int64_t>(splitWarpsPerSm);
      return signalPassFailure();
    }
    if (maxWarpRows != 16 && maxWarpRows != 32) {
      getOperation().emitError()
          << "kvattn-tile: max-warp-rows must be 16 or 32, got "
          << static_cast<int64_t>(maxWarpRows);
      return signalPassFailure();
    }
    if (sharedMemoryPerSm < 0) {
      getOperation().emitError()
          << "kvattn-tile: shared-memory-per-sm must not be negative, got "
          << static_cast<int64_t>(sharedMemoryPerSm);
      return signalPassFailure();
    }
    if (maxPosition < 1 || maxPosition > kMaxPosition) {
      getOperation().emitError()
          << "kvattn-tile: max-position must be 1 to 2^62, got "
          << static_cast<int64_t>(maxPosition);
      return signalPassFailure();
    }
    TileConfig cfg{blockM,
                   blockN,
                   numWarps,
                   numStages,
                   stats,
                   splitKv,
                   numSms,
                   packGqa,
                   splitMinKeys,
                   splitWarpsPerSm,
                   maxPosition,
                   maxWarpRows,
                   sharedMemoryPerSm,
                   wgmma,
                   tensorCores};
    SmallVector<AttentionOp> ops;
    getOperation()->walk([&](AttentionOp op) { ops.push_back(op); });
    bool sdpaLeft = false;
    getOperation()->walk([&](SdpaOp op) {
      op.emitOpError() << "kvattn-tile takes kvattn.attention; run "
                          "-kvattn-resolve-cached-append first";
      sdpaLeft = true;
    });
    if (sdpaLeft)
      return signalPassFailure();
    if (cfg.stats && !ops.empty())
      ensureStatsGlobal(getOperation());
    SmallVector<CascadeOp> cascades;
    getOperation()->walk([&](CascadeOp op) { cascades.push_back(op); });
    if (cfg.stats && !cascades.empty())
      ensureStatsGlobal(getOperation());
    IRRewriter rewriter(&getContext());
    for (AttentionOp op : ops)
      if (failed(tileAttention(rewriter, op, cfg)))
        return signalPassFailure();
    for (CascadeOp op : cascades)
      if (failed(tileCascade(rewriter, op, cfg)))
        return signalPassFailure();
  }
};

} // namespace
