//===- Tile.cpp - kvattn.attention -> the tile program --------------------===//
//
// Writes the schedule once: program grid, visible KV-block range from the
// positions, full/partial classification, online-softmax loop, epilogue.
// The CPU lowering and the GPU lowering both consume what this file emits,
// so the CPU numerics tests exercise the very schedule the GPU runs.
//
//===----------------------------------------------------------------------===//

#include "dialect/KVAttnOps.h"
#include "passes/Passes.h"

#include "kvattn/Support/Limits.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"

#include <algorithm>

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_TILEPASS
#include "passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

/// Name of the global that collects block statistics (stats=true): loaded,
/// masked and skipped KV blocks, K/V bytes read.
static constexpr StringLiteral kStatsGlobal = "kvattn_tile_stats";
static constexpr int64_t kNumStats = 4;
/// The role of a program operand, on the op that defines its buffer.
static constexpr StringLiteral kRoleAttr = "kvattn.role";

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
  Value lt(Value x, Value y) {
    return b.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::slt, x, y);
  }
  Value ge(Value x, Value y) {
    return b.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::sge, x, y);
  }
  /// Loads element `index` of a rank-1 integer buffer as an index.
  Value loadIndex(Value buffer, Value index) {
    Value v = memref::LoadOp::create(b, buffer, ValueRange{index});
    return arith::IndexCastOp::create(b, b.getIndexType(), v);
  }
  Value dim(Value buffer, int64_t d) {
    return b.createOrFold<memref::DimOp>(buffer, d);
  }
};

/// The buffers of one attention op.
struct Buffers {
  Value q, k, v, qOffset, kOffset, qPos, kPos, kvLen, keyValid, mask, out, lse;
  Value blockTable; ///< paged K/V: [B, max_pages]
};

/// Marks the op that defines a program operand with its role (`query`,
/// `kv_len`, `out`, ...), so that a later outlining (kvattn-to-ptx) can name
/// the kernel parameters and derive their shapes.
void setRole(Operation *op, StringRef role) {
  op->setAttr(kRoleAttr, StringAttr::get(op->getContext(), role));
}

Value toBuffer(ImplicitLocOpBuilder &b, Value tensor, StringRef role) {
  if (!tensor)
    return {};
  auto type = cast<RankedTensorType>(tensor.getType());
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  auto op = bufferization::ToBufferOp::create(b, memrefType, tensor,
                                              /*read_only=*/true);
  setRole(op, role);
  return op;
}

Value allocLike(ImplicitLocOpBuilder &b, RankedTensorType type,
                ArrayRef<Value> sizes, StringRef role) {
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  SmallVector<Value> dynamic;
  for (auto [i, size] : llvm::enumerate(type.getShape()))
    if (ShapedType::isDynamic(size))
      dynamic.push_back(sizes[i]);
  auto op = memref::AllocOp::create(b, memrefType, dynamic);
  setRole(op, role);
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

/// split-kv = 0: enough chunks for `warpsPerSm` resident warps per
/// multiprocessor (0: two programs per multiprocessor), no more chunks than
/// KV blocks nor than leave each chunk `minKeys` keys, at most 64 (the
/// GPU merge keeps a row's part lses in registers up to that); 1 when
/// the shapes are dynamic (decided at compile time, so it needs static B,
/// Hq, L, S).
static int64_t automaticSplit(RankedTensorType q, int64_t logicalKeys,
                              int64_t group, int64_t bm, int64_t bn,
                              int64_t numWarps, const TileConfig &cfg) {
  // With GQA packing a program takes `group` heads' rows.
  if (ShapedType::isDynamic(q.getDimSize(0)) ||
      ShapedType::isDynamic(q.getDimSize(1)) ||
      ShapedType::isDynamic(q.getDimSize(2)) ||
      ShapedType::isDynamic(logicalKeys))
    return 1;
  int64_t b = q.getDimSize(0), hq = q.getDimSize(1) / group,
          l = q.getDimSize(2) * group, s = logicalKeys;
  int64_t programs = std::max<int64_t>(b * hq * ((l + bm - 1) / bm), 1);
  int64_t chunks = (s + bn - 1) / bn;
  if (cfg.splitMinKeys > 0)
    chunks = std::min(chunks, s / cfg.splitMinKeys);
  // (block-m < 16 records 0 warps: count one.)
  const int64_t warps = std::max<int64_t>(numWarps, 1);
  int64_t perSm =
      cfg.splitWarpsPerSm > 0 ? (cfg.splitWarpsPerSm + warps - 1) / warps : 2;
  int64_t wanted = (perSm * cfg.numSms + programs - 1) / programs;
  constexpr int64_t kMaxAutomaticSplit = 64;
  return std::clamp<int64_t>(std::min(wanted, chunks), 1, kMaxAutomaticSplit);
}

/// The largest block-m the automatic choice takes: with the f32 query and
/// score tiles in shared memory, 64 rows of D = 128 already need about
/// 82 KB on the GPU (and 187-194 registers per thread).
static constexpr int64_t kMaxAutoBlockM = 64;

/// block-m = 0: the fewest 16-row warps that hold the program's rows (its
/// query rows, or the packed rows of a GQA group) up to kMaxAutoBlockM:
/// decode and short appends get 16- or 32-row programs instead of 64-row
/// ones that are mostly empty. Dynamic L: kMaxAutoBlockM.
static int64_t automaticBlockM(int64_t rows) {
  if (ShapedType::isDynamic(rows))
    return kMaxAutoBlockM;
  for (int64_t bm = 16; bm < kMaxAutoBlockM; bm *= 2)
    if (rows <= bm)
      return bm;
  return kMaxAutoBlockM;
}

/// block-n = 0: 64 keys for head dims up to 128, else 32 (the K/V staging
/// blocks and the score tile stay within shared memory); 32 as well for
/// one-warp programs (block-m = 16: decode, GQA-packed) with D > 64, whose
/// 64-key K and V blocks alone (32 KB at D = 128, 16-bit) would leave room
/// for 5 of them in a 227 KB multiprocessor: 8 fit with 32 keys (the GPU's
/// shared memory per program is docs/gpu-lowering.md's formula).
static int64_t automaticBlockN(int64_t headDim, int64_t bm) {
  if (headDim > 128)
    return 32;
  return bm == 16 && headDim > 64 ? 32 : 64;
}

/// Emits the tile program of one op and replaces it.
static LogicalResult tileAttention(RewriterBase &rewriter, AttentionOp op,
                                   const TileConfig &cfg) {
  auto qType = op.getQuery().getType();
  auto vType = op.getValue().getType();
  int64_t headDim = qType.getDimSize(3), valueDim = vType.getDimSize(3);
  if (ShapedType::isDynamic(headDim) || ShapedType::isDynamic(valueDim))
    return op.emitOpError()
           << "kvattn-tile needs static head dims D and Dv (they size the "
              "per-program tiles), got D = "
           << (ShapedType::isDynamic(headDim) ? std::string("?")
                                              : std::to_string(headDim))
           << ", Dv = "
           << (ShapedType::isDynamic(valueDim) ? std::string("?")
                                               : std::to_string(valueDim));
  if (headDim > ::kvattn::limits::kMaxHeadDim ||
      valueDim > ::kvattn::limits::kMaxHeadDim)
    return op.emitOpError()
           << "kvattn-tile: head dims above " << ::kvattn::limits::kMaxHeadDim
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
    if (!::kvattn::limits::elementCount(
            std::vector<int64_t>(dims.begin(), dims.end())))
      return op.emitOpError()
             << "kvattn-tile: operand " << index << " (" << operand.getType()
             << ") has more than 2^48 elements";
  }
  std::optional<double> scale = op.getEffectiveScale();
  std::optional<float> softcap;
  if (std::optional<APFloat> cap = op.getSoftcap())
    softcap = cap->convertToFloat();
  std::optional<int64_t> window = op.getWindow();
  const bool causal = op.getCausal();
  const bool offsetForm = static_cast<bool>(op.getQOffset());
  const bool explicitForm = static_cast<bool>(op.getQPos());
  // A block is "full" when no query of the program needs a mask for any of
  // its keys. That can be decided from positions only in the offset form
  // (monotone positions) and only without per-key validity or a general
  // mask.
  const bool canBeFull = !op.getKeyValid() && !op.getMask() &&
                         !(explicitForm && (causal || window));
  // GQA packing: G = Hq / Hkv heads per program, for few query rows. It
  // needs only the head counts static: B and S may be dynamic, and so may
  // L (a serving step's query length is known only at run time; packing
  // never reads more K/V than the unpacked schedule, and G times less for
  // few rows).
  int64_t kvHeadsStatic = op.getKey().getType().getDimSize(op.getKeyHeadDim());
  const int64_t qHeadsStatic = qType.getDimSize(1),
                qLenStatic = qType.getDimSize(2);
  int64_t group = 1;
  if (cfg.packGqa && ShapedType::isStatic(qHeadsStatic) &&
      ShapedType::isStatic(kvHeadsStatic) && kvHeadsStatic > 0 &&
      (ShapedType::isDynamic(qLenStatic) ||
       qLenStatic < (cfg.blockM ? cfg.blockM : kMaxAutoBlockM)))
    group = qHeadsStatic / kvHeadsStatic;
  const bool packed = group > 1;
  // The block sizes: the options, or chosen for this op (0).
  const int64_t bm =
      cfg.blockM ? cfg.blockM
                 : automaticBlockM(ShapedType::isDynamic(qType.getDimSize(2))
                                       ? ShapedType::kDynamic
                                       : qType.getDimSize(2) * group);
  const int64_t bn = cfg.blockN ? cfg.blockN : automaticBlockN(headDim, bm);
  const int64_t numWarps = cfg.numWarps ? cfg.numWarps : bm / 16;
  const int64_t numStages = cfg.numStages;
  IntegerAttr groupAttr =
      packed ? rewriter.getI64IntegerAttr(group) : IntegerAttr();

  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  b.setInsertionPoint(op);
  IndexMath m{b};

  Buffers buf;
  buf.q = toBuffer(b, op.getQuery(), "query");
  buf.k = toBuffer(b, op.getKey(), "key");
  buf.v = toBuffer(b, op.getValue(), "value");
  buf.qOffset = toBuffer(b, op.getQOffset(), "q_offset");
  buf.kOffset = toBuffer(b, op.getKOffset(), "k_offset");
  buf.qPos = toBuffer(b, op.getQPos(), "q_pos");
  buf.kPos = toBuffer(b, op.getKPos(), "k_pos");
  buf.kvLen = toBuffer(b, op.getKvLen(), "kv_len");
  buf.keyValid = toBuffer(b, op.getKeyValid(), "key_valid");
  buf.mask = toBuffer(b, op.getMask(), "mask");
  buf.blockTable = toBuffer(b, op.getBlockTable(), "block_table");
  const bool paged = op.isPaged();

  Value batch = m.dim(buf.q, 0), qHeads = m.dim(buf.q, 1),
        qLen = m.dim(buf.q, 2);
  buf.out = allocLike(b, op.getOut().getType(),
                      {batch, qHeads, qLen, m.c(valueDim)}, "out");
  if (Value lse = op.getLse())
    buf.lse = allocLike(b, cast<RankedTensorType>(lse.getType()),
                        {batch, qHeads, qLen}, "lse");

  Value numPrograms =
      m.mul(batch, packed ? m.c(qType.getDimSize(1) / group) : qHeads);
  Value numQBlocks =
      m.ceilDiv(packed ? m.mul(qLen, m.c(group)) : qLen, bm);

  auto f32 = b.getF32Type();
  auto scoresType = MemRefType::get({bm, bn}, f32);
  auto qTileType = MemRefType::get({bm, headDim}, f32);
  auto rowType = MemRefType::get({bm}, f32);
  auto accType = MemRefType::get({bm, valueDim}, f32);

  // Split-KV: each program's visible range is cut into `splits` chunks,
  // each computed by its own program instance into a partial state
  // (f32 out and lse), merged afterwards in chunk order (kvattn.merge).
  // With a statically empty B, Hq or L there is no program, and no part
  // buffer to index: no split.
  bool emptyGrid = llvm::any_of(qType.getShape().take_front(3),
                                [](int64_t d) { return d == 0; });
  const int64_t splits = emptyGrid ? 1
                         : cfg.splitKv == 0
                             ? automaticSplit(qType, op.getLogicalKeyLength(),
                                              group, bm, bn, numWarps, cfg)
                             : cfg.splitKv;
  Value outParts, lseParts;
  if (splits > 1) {
    auto partsType = [&](ArrayRef<int64_t> shape) {
      SmallVector<int64_t> full{splits};
      full.append(shape.begin(), shape.end());
      return MemRefType::get(full, f32);
    };
    SmallVector<Value> dynamic;
    auto qShape = qType.getShape();
    // A named array: an ArrayRef of a braced list would dangle in the loop.
    const Value sizes[] = {batch, qHeads, qLen};
    for (auto [i, v] : llvm::enumerate(sizes))
      if (ShapedType::isDynamic(qShape[i]))
        dynamic.push_back(v);
    auto outAlloc = memref::AllocOp::create(
        b, partsType({qShape[0], qShape[1], qShape[2], valueDim}), dynamic);
    auto lseAlloc = memref::AllocOp::create(
        b, partsType({qShape[0], qShape[1], qShape[2]}), dynamic);
    setRole(outAlloc, "out_parts");
    setRole(lseAlloc, "lse_parts");
    outParts = outAlloc;
    lseParts = lseAlloc;
  }
  SmallVector<OpFoldResult> gridSizes = {getAsOpFoldResult(numPrograms),
                                         getAsOpFoldResult(numQBlocks)};
  if (splits > 1)
    gridSizes.push_back(b.getIndexAttr(splits));

  auto grid = scf::ForallOp::create(
      b, b.getLoc(), gridSizes, ValueRange{}, std::nullopt,
      [&](OpBuilder &nested, Location loc, ValueRange ivs) {
        ImplicitLocOpBuilder pb(loc, nested);
        // Scratch tiles live on the stack of one program instance.
        auto scope = memref::AllocaScopeOp::create(pb, TypeRange{});
        Block *body = pb.createBlock(&scope.getBodyRegion());
        pb.setInsertionPointToStart(body);
        IndexMath p{pb};

        // The program body captures nothing but the operand buffers: sizes
        // are re-read from them, so the body can be outlined as a kernel.
        // Paged: K is [num_pages, page_size, Hkv, D] and the logical key
        // count is max_pages * page_size.
        Value qHeads = p.dim(buf.q, 1), qLen = p.dim(buf.q, 2),
              kvHeads = p.dim(buf.k, paged ? 2 : 1),
              kLen = paged ? p.mul(p.dim(buf.blockTable, 1), p.dim(buf.k, 1))
                           : p.dim(buf.k, 2);
        Value totalKBlocks = p.ceilDiv(kLen, bn);
        Value bh = ivs[0], qBlock = ivs[1];
        // Unpacked: program (b, head), rows = query rows. Packed: program
        // (b, kv head), rows = packed rows of the group's heads; `head` is
        // the group's first head.
        Value bIdx, head, kvHead, rowCount;
        if (packed) {
          bIdx = pb.createOrFold<arith::DivUIOp>(bh, kvHeads);
          kvHead = pb.createOrFold<arith::RemUIOp>(bh, kvHeads);
          head = p.mul(kvHead, p.c(group));
          rowCount = p.mul(qLen, p.c(group));
        } else {
          Value heads = pb.createOrFold<arith::DivUIOp>(qHeads, kvHeads);
          bIdx = pb.createOrFold<arith::DivUIOp>(bh, qHeads);
          head = pb.createOrFold<arith::RemUIOp>(bh, qHeads);
          kvHead = pb.createOrFold<arith::DivUIOp>(head, heads);
          rowCount = qLen;
        }
        Value qStart = p.mul(qBlock, p.c(bm));
        Value rows = p.min(p.c(bm), p.sub(rowCount, qStart));
        Value kvLen = buf.kvLen ? p.loadIndex(buf.kvLen, bIdx) : kLen;

        // The visible key range [lo, hi) and the full blocks
        // [fullLo, fullHi), from the positions of the program's rows.
        Value zero = p.c(0);
        Value lo = zero, hi = kvLen, fullLo = zero;
        Value fullHi = canBeFull ? p.floorDiv(kvLen, bn) : zero;
        Value qBase, kBase;
        if (offsetForm) {
          Value qOff = p.loadIndex(buf.qOffset, bIdx);
          Value kOff = buf.kOffset ? p.loadIndex(buf.kOffset, bIdx) : zero;
          // The program's query rows: [qStart, qStart + rows), or with
          // packing [qStart / G, (qStart + rows - 1) / G].
          Value firstRow = packed ? p.floorDiv(qStart, group) : qStart;
          Value lastRow = p.sub(p.add(qStart, rows), p.c(1));
          if (packed)
            lastRow = p.floorDiv(lastRow, group);
          Value qFirst = p.add(qOff, firstRow); // smallest qp
          Value qLast = p.add(qOff, lastRow);   // largest qp
          // tile.mask: qp = q_base + r, or packed q_base + (t / G).
          qBase = packed ? qOff : qFirst;
          kBase = kOff;
          if (causal) {
            // kp = kOff + j <= qLast  <=>  j < qLast - kOff + 1.
            hi = p.min(hi, p.max(p.add(p.sub(qLast, kOff), p.c(1)), zero));
            if (canBeFull)
              fullHi = p.floorDiv(
                  p.min(kvLen, p.max(p.add(p.sub(qFirst, kOff), p.c(1)), zero)),
                  bn);
          }
          if (window) {
            // qFirst - kp < window  <=>  j >= qFirst - window + 1 - kOff.
            Value w = p.c(*window);
            lo = p.min(
                hi, p.max(p.sub(p.add(p.sub(qFirst, w), p.c(1)), kOff), zero));
            if (canBeFull)
              fullLo = p.ceilDiv(
                  p.max(p.sub(p.add(p.sub(qLast, w), p.c(1)), kOff), zero), bn);
          }
        }
        Value nLo = p.floorDiv(lo, bn);
        Value nHi = p.max(p.ceilDiv(hi, bn), nLo);
        // This program's blocks: all of [nLo, nHi), or its chunk of them.
        Value loopLo = nLo, loopHi = nHi;
        if (splits > 1) {
          Value chunk = p.ceilDiv(p.sub(nHi, nLo), splits);
          loopLo = p.min(p.add(nLo, p.mul(ivs[2], chunk)), nHi);
          loopHi = p.min(p.add(loopLo, chunk), nHi);
        }

        // Keys are read up to kv_len, never past it: cache slots past it
        // are not trusted (NaN there must not reach a tensor-core product,
        // where a masked key still multiplies its V row by zero).
        Value readEnd = kvLen;

        if (cfg.stats) {
          // The counts below are computed from loopLo, loopHi, fullLo,
          // fullHi: the bounds of the loop and of its scf.if. Skipped
          // blocks are counted once per (batch, head, query block).
          Value loaded = p.sub(loopHi, loopLo);
          Value full =
              p.max(p.sub(p.min(fullHi, loopHi), p.max(fullLo, loopLo)), zero);
          Value masked = p.sub(loaded, full);
          Value skipped = p.sub(totalKBlocks, p.sub(nHi, nLo));
          if (splits > 1)
            skipped = arith::SelectOp::create(
                pb,
                arith::CmpIOp::create(pb, arith::CmpIPredicate::eq, ivs[2],
                                      zero),
                skipped, zero);
          // K/V bytes: the keys of the loaded blocks that are read (up to
          // kv_len), D + Dv elements each.
          Value keysRead = p.max(p.sub(p.min(p.mul(loopHi, p.c(bn)), readEnd),
                                       p.mul(loopLo, p.c(bn))),
                                 zero);
          int64_t eltBytes = qType.getElementType().getIntOrFloatBitWidth() / 8;
          Value bytes = p.mul(keysRead, p.c((headDim + valueDim) * eltBytes));
          Value global = memref::GetGlobalOp::create(
              pb, MemRefType::get({kNumStats}, pb.getI64Type()), kStatsGlobal);
          Value counts[kNumStats] = {loaded, masked, skipped, bytes};
          for (auto [slot, count] : llvm::enumerate(counts)) {
            Value v = arith::IndexCastOp::create(pb, pb.getI64Type(), count);
            memref::AtomicRMWOp::create(pb, arith::AtomicRMWKind::addi, v,
                                        global, ValueRange{p.c(slot)});
          }
        }

        Value qTile = memref::AllocaOp::create(pb, qTileType);
        Value scores = memref::AllocaOp::create(pb, scoresType);
        Value rowMax = memref::AllocaOp::create(pb, rowType);
        Value rowSum = memref::AllocaOp::create(pb, rowType);
        Value acc = memref::AllocaOp::create(pb, accType);
        TileInitOp::create(pb, rowMax, rowSum, acc);
        TileLoadQOp::create(pb, buf.q, bIdx, head, qStart, rows, qTile,
                            groupAttr);

        // The keys block `kBlock` reads: paged, never past kv_len, where
        // table entries may be -1; the columns past `cols` score -inf.
        auto blockCols = [&](IndexMath &f, Value kStart) {
          return f.min(f.c(bn), f.sub(readEnd, kStart));
        };
        // num-stages >= 2: announce each block one step ahead (before the
        // loop, the first; after each tile.qk, the next, or none: cols 0)
        // so that a target can load it while the current block computes.
        const bool prefetch = numStages >= 2;
        auto announce = [&](ImplicitLocOpBuilder &fb, IndexMath &f,
                            Value block) {
          Value has = f.lt(block, loopHi);
          Value start = f.mul(block, f.c(bn));
          Value cols =
              arith::SelectOp::create(fb, has, blockCols(f, start), f.c(0));
          TilePrefetchOp::create(fb, buf.k, bIdx, kvHead, start, cols,
                                 buf.blockTable);
        };
        if (prefetch)
          announce(pb, p, loopLo);

        scf::ForOp::create(
            pb, loopLo, loopHi, p.c(1), ValueRange{},
            [&](OpBuilder &lb, Location l, Value kBlock, ValueRange) {
              ImplicitLocOpBuilder fb(l, lb);
              IndexMath f{fb};
              Value kStart = f.mul(kBlock, f.c(bn));
              Value cols = blockCols(f, kStart);
              TileQKOp::create(fb, qTile, buf.k, bIdx, kvHead, kStart, rows,
                               cols, scores, buf.blockTable,
                               fb.getF32FloatAttr(static_cast<float>(*scale)),
                               softcap ? fb.getF32FloatAttr(*softcap)
                                       : FloatAttr());
              if (prefetch)
                announce(fb, f, f.add(kBlock, f.c(1)));
              // Partial blocks only: full ones carry no mask arithmetic.
              Value isFull = fb.createOrFold<arith::AndIOp>(
                  f.ge(kBlock, fullLo), f.lt(kBlock, fullHi));
              auto ifPartial = scf::IfOp::create(
                  fb,
                  fb.createOrFold<arith::XOrIOp>(
                      isFull, arith::ConstantIntOp::create(fb, 1, 1)),
                  /*withElseRegion=*/false);
              {
                OpBuilder::InsertionGuard guard(fb);
                fb.setInsertionPointToStart(ifPartial.thenBlock());
                TileMaskOp::create(
                    fb, scores, bIdx, head, qStart, kStart, rows, cols, kvLen,
                    qBase, kBase ? f.add(kBase, kStart) : Value(), buf.qPos,
                    buf.kPos, buf.keyValid, buf.mask, causal,
                    window ? fb.getI64IntegerAttr(*window) : IntegerAttr(),
                    groupAttr);
              }
              // The full-block test goes with the update: a target may
              // multiply every value of a full block without testing its
              // probability for 0.
              TileSoftmaxOp::create(fb, scores, buf.v, bIdx, kvHead, kStart,
                                    rows, cols, rowMax, rowSum, acc,
                                    buf.blockTable, buf.keyValid,
                                    canBeFull ? isFull : Value());
              scf::YieldOp::create(fb);
            });

        if (splits > 1) {
          // The chunk's partial state: views of part ivs[2].
          auto part = [&](Value parts) {
            auto type = cast<MemRefType>(parts.getType());
            SmallVector<OpFoldResult> offsets(type.getRank(),
                                              pb.getIndexAttr(0));
            offsets[0] = ivs[2];
            SmallVector<OpFoldResult> sizes = {pb.getIndexAttr(1)};
            for (int64_t d = 1; d < type.getRank(); ++d)
              sizes.push_back(getAsOpFoldResult(p.dim(parts, d)));
            SmallVector<OpFoldResult> strides(type.getRank(),
                                              pb.getIndexAttr(1));
            auto viewType = memref::SubViewOp::inferRankReducedResultType(
                type.getShape().drop_front(), type, offsets, sizes, strides);
            return memref::SubViewOp::create(pb, cast<MemRefType>(viewType),
                                             parts, offsets, sizes, strides)
                .getResult();
          };
          TileStoreOp::create(pb, rowMax, rowSum, acc, part(outParts),
                              part(lseParts), bIdx, head, qStart, rows,
                              groupAttr);
        } else {
          TileStoreOp::create(pb, rowMax, rowSum, acc, buf.out, buf.lse, bIdx,
                              head, qStart, rows, groupAttr);
        }
        memref::AllocaScopeReturnOp::create(pb, ValueRange{});
        pb.setInsertionPointAfter(scope);
        scf::InParallelOp::create(pb);
      });
  auto config = [&](int64_t splitKv, int64_t heads, StringRef kind) {
    return b.getDictionaryAttr({
        b.getNamedAttr("block_m", b.getI64IntegerAttr(bm)),
        b.getNamedAttr("block_n", b.getI64IntegerAttr(bn)),
        b.getNamedAttr("num_warps", b.getI64IntegerAttr(numWarps)),
        b.getNamedAttr("num_stages", b.getI64IntegerAttr(numStages)),
        b.getNamedAttr("split_kv", b.getI64IntegerAttr(splitKv)),
        b.getNamedAttr("group", b.getI64IntegerAttr(heads)),
        b.getNamedAttr("kind", b.getStringAttr(kind)),
    });
  };
  grid->setAttr("kvattn.tile_config", config(splits, group, "attention"));

  if (splits > 1) {
    // The merge program: one instance per (batch x head, query block)
    // merges its rows' partial states in chunk order (deterministic,
    // (0, -inf) the identity) into out and lse.
    auto merge = scf::ForallOp::create(
        b, b.getLoc(),
        ArrayRef<OpFoldResult>{getAsOpFoldResult(m.mul(batch, qHeads)),
                               getAsOpFoldResult(m.ceilDiv(qLen, bm))},
        ValueRange{}, std::nullopt,
        [&](OpBuilder &nested, Location loc, ValueRange ivs) {
          ImplicitLocOpBuilder pb(loc, nested);
          IndexMath p{pb};
          // Sizes from the operand buffers only, as in the main program.
          Value qHeads = p.dim(buf.out, 1), qLen = p.dim(buf.out, 2);
          Value bIdx = pb.createOrFold<arith::DivUIOp>(ivs[0], qHeads);
          Value head = pb.createOrFold<arith::RemUIOp>(ivs[0], qHeads);
          Value qStart = p.mul(ivs[1], p.c(bm));
          Value rows = p.min(p.c(bm), p.sub(qLen, qStart));
          TileMergeOp::create(pb, outParts, lseParts, buf.out, buf.lse, bIdx,
                              head, qStart, rows);
          scf::InParallelOp::create(pb);
        });
    merge->setAttr("kvattn.tile_config", config(1, 1, "merge"));
    memref::DeallocOp::create(b, outParts);
    memref::DeallocOp::create(b, lseParts);
  }

  SmallVector<Value> results;
  results.push_back(bufferization::ToTensorOp::create(
      b, op.getOut().getType(), buf.out, /*restrict=*/true,
      /*writable=*/true));
  if (Value lse = op.getLse())
    results.push_back(bufferization::ToTensorOp::create(
        b, lse.getType(), buf.lse, /*restrict=*/true, /*writable=*/true));
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
    using namespace ::kvattn::limits;
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
    TileConfig cfg{blockM,  blockN, numWarps, numStages,    stats,
                   splitKv, numSms, packGqa,  splitMinKeys, splitWarpsPerSm};
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
    IRRewriter rewriter(&getContext());
    for (AttentionOp op : ops)
      if (failed(tileAttention(rewriter, op, cfg)))
        return signalPassFailure();
  }
};

} // namespace
