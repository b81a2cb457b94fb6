//===- AppendToGPU.cpp - kvattn.append -> a GPU copy kernel ---------------===//
//
// The cache write on the GPU (docs/gpu-lowering.md, "The cache write"): each
// kvattn.append becomes a kernel of the gpu.module @kvattn_kernels and the
// gpu.launch_func that runs it, writing the update rows into the cache
// buffer in place. One warp per new token, 16-byte vector copies, one
// warp-uniform block-table load per token when paged; tokens whose
// positions fall outside the cache are skipped (the runtime rejects them
// before a launch, with the reference's messages).
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"
#include "passes/Conversion/Fp8.h"
#include "passes/GPU/KernelAbi.h"
#include "passes/RotaryEmbedding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_APPENDTOGPUPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

namespace {

/// Tokens (warps) per thread block.
constexpr int64_t kTokensPerBlock = 4;
constexpr int64_t kWarpSize = 32;

/// The sizes an append kernel takes after its pointers.
enum SizeIndex { kB, kHkv, kL, kS, kNumPages, kPageSize, kMaxPages };
const char *const kSizeNames[] = {"B",         "Hkv",       "L",        "S",
                                  "num_pages", "page_size", "max_pages"};

/// The symbolic shape of an append operand (-1: a static dim, D).
SmallVector<int> symbolicShape(StringRef role, bool paged) {
  if (role == "update")
    return {kB, kHkv, kL, -1};
  if (role == "cache")
    return paged ? SmallVector<int>{kNumPages, kPageSize, kHkv, -1}
                 : SmallVector<int>{kB, kHkv, kS, -1};
  if (role == "pos")
    return {kB};
  if (role == "k_rope_pos") // the RoPE record [B, S]
    return {kB, kS};
  if (role == "rotary_cos" || role == "rotary_sin") // [P, R/2], static
    return {-1, -1};
  return {kB, kMaxPages}; // block_table
}

/// The symbolic shape of an FP8 cache's scale of rank `rank`: per tensor
/// ([1] static, or rank 0), per head [Hkv], or the cache's shape without D.
SmallVector<int> scaleShape(int64_t rank, bool paged) {
  if (rank == 0)
    return {};
  if (rank == 1) // [1] is static: only [Hkv] can be dynamic
    return {kHkv};
  SmallVector<int> rows = symbolicShape("cache", paged);
  rows.pop_back();
  return rows;
}

/// Elements per copy: the widest power of two up to 16 bytes that divides
/// the head dim (8 for f16/bf16 and 4 for f32 when D allows).
int64_t vectorWidth(Type elt, int64_t headDim) {
  int64_t bytes = elt.getIntOrFloatBitWidth() / 8;
  int64_t v = 16 / bytes;
  while (v > 1 && headDim % v != 0)
    v /= 2;
  return v;
}

/// f32 `values` (a vector of n) as n FP8 codes of `fp8`: two a convert with
/// cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (`hardware`, sm_89+), else the
/// software quantisation (castF32ToFp8, bit-exact with it).
Value quantize(ImplicitLocOpBuilder &b, Value values, Type fp8, bool hardware) {
  auto type = cast<VectorType>(values.getType());
  const int64_t n = type.getNumElements();
  if (!hardware)
    return castF32ToFp8(b, b.getLoc(), values, fp8);
  auto pairType = VectorType::get({2}, b.getI8Type());
  SmallVector<Value> bytes;
  for (int64_t p = 0; p < n; p += 2) {
    // cvt packs its first operand into the upper byte: (x[p + 1], x[p])
    // gives the codes of x[p], x[p + 1] at increasing addresses. An odd
    // last element pairs with 0 (its code is the low byte).
    Value lo = vector::ExtractOp::create(b, values, p);
    Value hi =
        p + 1 < n
            ? vector::ExtractOp::create(b, values, p + 1).getResult()
            : arith::ConstantOp::create(b, b.getF32FloatAttr(0)).getResult();
    Value pair = NVVM::ConvertF32x2ToF8x2Op::create(
        b, Type(pairType), hi, lo, NVVM::FPRoundingMode::RN,
        NVVM::SaturationMode::SATFINITE, /*relu=*/false, fp8);
    bytes.push_back(vector::ExtractOp::create(b, pair, 0));
    if (p + 1 < n)
      bytes.push_back(vector::ExtractOp::create(b, pair, 1));
  }
  Value codes = vector::FromElementsOp::create(
      b, VectorType::get({n}, b.getI8Type()), bytes);
  return arith::BitcastOp::create(b, VectorType::get({n}, fp8), codes);
}

/// The kernel body: warp w of block x copies token n = 4x + w. With
/// `rope`, the token's key rows are rotated at its position in f32 (one
/// element and its partner per lane, cos/sin by the f64-reduced polynomial
/// of the attention kernels) and rounded at the write; with a `record`
/// view, lane 0 writes record[b, p] = p.
void buildKernelBody(ImplicitLocOpBuilder &b, ArrayRef<Value> views,
                     ArrayRef<Value> sizes, bool paged, int64_t headDim,
                     Type elt, RopeAttr rope, RotaryTables tables, Value record,
                     Value scale, bool hardwareFp8) {
  Value update = views[0], cache = views[1], pos = views[2];
  // An FP8 cache: each value (f32) divided by its row's scale, quantised.
  Type cacheElt = cast<MemRefType>(cache.getType()).getElementType();
  auto c = [&](int64_t v) {
    return arith::ConstantIndexOp::create(b, v).getResult();
  };
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value warp = arith::DivUIOp::create(b, tid, c(kWarpSize));
  Value lane = arith::RemUIOp::create(b, tid, c(kWarpSize));
  Value token = arith::AddIOp::create(
      b, arith::MulIOp::create(b, bid, c(kTokensPerBlock)), warp);
  Value tokens = arith::MulIOp::create(b, sizes[kB], sizes[kL]);
  Value live =
      arith::CmpIOp::create(b, arith::CmpIPredicate::ult, token, tokens);
  auto inToken = scf::IfOp::create(b, live, /*withElseRegion=*/false);
  b.setInsertionPointToStart(&inToken.getThenRegion().front());

  Value batch = arith::DivUIOp::create(b, token, sizes[kL]);
  Value t = arith::RemUIOp::create(b, token, sizes[kL]);
  Value p0 = memref::LoadOp::create(b, pos, ValueRange{batch});
  p0 = arith::IndexCastOp::create(b, b.getIndexType(), p0);
  Value p = arith::AddIOp::create(b, p0, t);
  auto sge = [&](Value x, Value y) {
    return arith::CmpIOp::create(b, arith::CmpIPredicate::sge, x, y)
        .getResult();
  };
  auto slt = [&](Value x, Value y) {
    return arith::CmpIOp::create(b, arith::CmpIPredicate::slt, x, y)
        .getResult();
  };
  // 0 <= x < hi, the compares created in a fixed order (the order in which
  // a call's arguments are evaluated differs between compilers).
  auto inRange = [&](Value x, Value hi) {
    Value below = slt(x, hi);
    Value nonNegative = sge(x, c(0));
    return arith::AndIOp::create(b, nonNegative, below).getResult();
  };
  // In the cache: 0 <= p < S (paged: S = max_pages * page_size, so the
  // slot is below max_pages).
  Value ok = inRange(p, sizes[kS]);
  Value page, row;
  if (paged) {
    Value table = views[3];
    Value slot = arith::DivUIOp::create(b, p, sizes[kPageSize]);
    row = arith::RemUIOp::create(b, p, sizes[kPageSize]);
    // One lookup per token, the same address for the whole warp (one
    // request); nothing is read for a token outside the table.
    auto lookup = scf::IfOp::create(
        b, ok,
        [&](OpBuilder &ob, Location loc) {
          Value entry =
              memref::LoadOp::create(ob, loc, table, ValueRange{batch, slot});
          entry = arith::IndexCastOp::create(ob, loc, ob.getIndexType(), entry);
          scf::YieldOp::create(ob, loc, entry);
        },
        [&](OpBuilder &ob, Location loc) {
          scf::YieldOp::create(
              ob, loc, ValueRange{arith::ConstantIndexOp::create(ob, loc, -1)});
        });
    page = lookup.getResult(0);
    Value pageOk = inRange(page, sizes[kNumPages]);
    ok = arith::AndIOp::create(b, ok, pageOk);
  }
  auto inCache = scf::IfOp::create(b, ok, /*withElseRegion=*/false);
  b.setInsertionPointToStart(&inCache.getThenRegion().front());

  if (record) {
    // The RoPE record: the key at position p was rotated at p.
    Value isLeader =
        arith::CmpIOp::create(b, arith::CmpIPredicate::eq, lane, c(0));
    auto lead = scf::IfOp::create(b, isLeader, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&lead.getThenRegion().front());
    Type recordType = cast<MemRefType>(record.getType()).getElementType();
    Value at = arith::IndexCastOp::create(b, recordType, p);
    memref::StoreOp::create(b, at, record, ValueRange{batch, p});
  }
  if (rope) {
    // One element per lane and step: h = i / D, x = i % D.
    Value elements = arith::MulIOp::create(b, sizes[kHkv], c(headDim));
    auto loop = scf::ForOp::create(b, lane, elements, c(kWarpSize));
    b.setInsertionPointToStart(loop.getBody());
    Value i = loop.getInductionVar();
    Value h = arith::DivUIOp::create(b, i, c(headDim));
    Value x = arith::RemUIOp::create(b, i, c(headDim));
    Type f32 = b.getF32Type();
    auto load = [&](Value col) {
      Value v = memref::LoadOp::create(b, update, ValueRange{batch, h, t, col});
      return elt.isF32() ? v : arith::ExtFOp::create(b, f32, v).getResult();
    };
    RotaryElement e = emitRotaryElement(b, b.getLoc(), rope, p, x,
                                        SinCos::Polynomial, tables);
    Value self = load(x);
    Value partner = load(e.partner);
    Value v = emitRotate(b, b.getLoc(), e, self, partner);
    SmallVector<Value> dst = paged ? SmallVector<Value>{page, row, h, x}
                                   : SmallVector<Value>{batch, h, p, x};
    if (scale) {
      // The f32 rotation quantised (no rounding in between).
      Value sc = loadKvScale(b, b.getLoc(), scale, h, ValueRange(dst));
      Value q = arith::DivFOp::create(b, v, sc);
      q = vector::BroadcastOp::create(b, VectorType::get({1}, f32), q);
      q = quantize(b, q, cacheElt, hardwareFp8);
      memref::StoreOp::create(b, vector::ExtractOp::create(b, q, 0), cache,
                              dst);
      return;
    }
    if (!elt.isF32())
      v = arith::TruncFOp::create(b, elt, v);
    memref::StoreOp::create(b, v, cache, dst);
    return;
  }

  const int64_t width = vectorWidth(elt, headDim);
  const int64_t chunksPerRow = headDim / width;
  auto vecType = VectorType::get({width}, elt);
  const llvm::Align align(width * (elt.getIntOrFloatBitWidth() / 8));
  Value chunks = arith::MulIOp::create(b, sizes[kHkv], c(chunksPerRow));
  auto loop = scf::ForOp::create(b, lane, chunks, c(kWarpSize));
  b.setInsertionPointToStart(loop.getBody());
  Value i = loop.getInductionVar();
  Value h = arith::DivUIOp::create(b, i, c(chunksPerRow));
  Value d = arith::MulIOp::create(
      b, arith::RemUIOp::create(b, i, c(chunksPerRow)), c(width));
  Value v =
      vector::LoadOp::create(b, vecType, update, ValueRange{batch, h, t, d},
                             /*nontemporal=*/false, align);
  SmallVector<Value> dst = paged ? SmallVector<Value>{page, row, h, d}
                                 : SmallVector<Value>{batch, h, p, d};
  if (scale) {
    // `width` values in, `width` codes out (a quarter or half of the bytes,
    // aligned to their count).
    Value sc = loadKvScale(b, b.getLoc(), scale, h, ValueRange(dst));
    auto f32Type = VectorType::get({width}, b.getF32Type());
    Value f =
        elt.isF32() ? v : arith::ExtFOp::create(b, f32Type, v).getResult();
    Value q = arith::DivFOp::create(
        b, f, vector::BroadcastOp::create(b, f32Type, sc));
    q = quantize(b, q, cacheElt, hardwareFp8);
    vector::StoreOp::create(b, q, cache, dst, /*nontemporal=*/false,
                            llvm::Align(width));
    return;
  }
  vector::StoreOp::create(b, v, cache, dst, /*nontemporal=*/false, align);
}

LogicalResult lowerAppend(AppendOp op, gpu::GPUModuleOp gpuModule,
                          StringRef kernelName, bool hardwareFp8) {
  MLIRContext *ctx = op.getContext();
  const bool paged = op.isPaged();
  auto updateType = cast<RankedTensorType>(op.getUpdate().getType());
  auto cacheType = cast<RankedTensorType>(op.getCache().getType());
  const int64_t headDim = updateType.getDimSize(3);
  if (ShapedType::isDynamic(headDim))
    return op.emitOpError()
           << "kvattn-append-to-gpu: the head dim must be static";
  Type elt = updateType.getElementType();

  // Host side: the operands' buffers, the cache written in place.
  ImplicitLocOpBuilder hb(op.getLoc(), op);
  auto toBuffer = [&](Value tensor, BufferRole role, bool readOnly) {
    auto type = cast<RankedTensorType>(tensor.getType());
    auto buffer = bufferization::ToBufferOp::create(
        hb, MemRefType::get(type.getShape(), type.getElementType()), tensor,
        readOnly);
    setBufferRole(buffer, role);
    return buffer.getResult();
  };
  SmallVector<StringRef> roles = {"update", "cache", "pos"};
  SmallVector<Value> buffers = {
      toBuffer(op.getUpdate(), BufferRole::update, true),
      toBuffer(op.getCache(), BufferRole::cache, false),
      toBuffer(op.getPos(), BufferRole::pos, true)};
  if (paged) {
    roles.push_back("block_table");
    buffers.push_back(
        toBuffer(op.getBlockTable(), BufferRole::block_table, true));
  }
  // RoPE: the record [B, S], written in place (role k_rope_pos: it is the
  // attention's k_rope_pos).
  const bool hasRecord = static_cast<bool>(op.getRopePos());
  if (hasRecord) {
    roles.push_back("k_rope_pos");
    buffers.push_back(toBuffer(op.getRopePos(), BufferRole::k_rope_pos, false));
  }
  // FP8: the scales (role k_scale: a plan binds the V append's to
  // v_scale, planBufferNames), read only.
  const bool hasScale = static_cast<bool>(op.getKvScale());
  if (hasScale) {
    roles.push_back("k_scale");
    buffers.push_back(toBuffer(op.getKvScale(), BufferRole::k_scale, true));
  }
  // RoPE's tables [P, R/2], read only; their rows are compiled in.
  if (op.hasRotaryTables()) {
    for (Value table : {op.getRotaryCos(), op.getRotarySin()})
      if (!cast<RankedTensorType>(table.getType()).hasStaticShape())
        return op.emitOpError()
               << "kvattn-append-to-gpu: rotary_cos and rotary_sin need a "
                  "static shape [P, rotary_dim / 2] on the GPU (the kernel "
                  "compiles the table's rows in)";
    roles.append({"rotary_cos", "rotary_sin"});
    buffers.push_back(
        toBuffer(op.getRotaryCos(), BufferRole::rotary_cos, true));
    buffers.push_back(
        toBuffer(op.getRotarySin(), BufferRole::rotary_sin, true));
  }
  SmallVector<int> sizeIds = {kB, kHkv, kL, kS};
  if (paged)
    sizeIds.append({kNumPages, kPageSize, kMaxPages});

  // The kernel: a warp per token (num_warps = block_m, tokens per thread
  // block); the vector width in elements.
  KernelSignature signature(ctx);
  auto shapeOf = [&](StringRef role, Value buffer) {
    return role == "k_scale"
               ? scaleShape(cast<MemRefType>(buffer.getType()).getRank(), paged)
               : symbolicShape(role, paged);
  };
  for (auto [role, buffer] : llvm::zip(roles, buffers))
    signature.addBuffer(role, cast<MemRefType>(buffer.getType()),
                        shapeOf(role, buffer), kSizeNames,
                        /*written=*/role == "cache" || role == "k_rope_pos");
  for (int id : sizeIds)
    signature.addSize(kSizeNames[id]);
  auto kernel = createKernel(
      gpuModule, op.getLoc(), kernelName, signature,
      TileConfigAttr::get(ctx, KernelKind::append, kTokensPerBlock,
                          /*block_n=*/0, /*num_warps=*/kTokensPerBlock,
                          /*num_stages=*/1, /*split_kv=*/1,
                          /*group=*/1, vectorWidth(elt, headDim),
                          SplitRuleAttr(), FlatSymbolRefAttr()),
      /*dynamicSharedMemoryBytes=*/0);
  // The kernel already writes nothing for a page outside [0, num_pages);
  // the attribute tells the validation (and the manifest) that a -1 page
  // is padding rather than an error.
  if (op.getSkipPadding())
    kernel->setAttr(kSkipPaddingAttr, UnitAttr::get(ctx));
  const int32_t threads = threadsPerBlock(getTileConfig(kernel));

  Block &entry = kernel.getBody().front();
  ImplicitLocOpBuilder kb(op.getLoc(), ctx);
  kb.setInsertionPointToStart(&entry);
  SmallVector<Value> sizes(std::size(kSizeNames));
  for (auto [i, id] : llvm::enumerate(sizeIds))
    sizes[id] = entry.getArgument(roles.size() + i);
  SmallVector<Value> views;
  for (auto [i, role] : llvm::enumerate(roles))
    views.push_back(rebuildRowMajorView(kb, entry.getArgument(i),
                                        cast<MemRefType>(buffers[i].getType()),
                                        shapeOf(role, buffers[i]), sizes));
  {
    OpBuilder::InsertionGuard guard(kb);
    Value record, scale;
    RotaryTables tables;
    for (auto [role, view] : llvm::zip(roles, views)) {
      if (role == "k_rope_pos")
        record = view;
      if (role == "k_scale")
        scale = view;
      if (role == "rotary_cos")
        tables.cos = view;
      if (role == "rotary_sin")
        tables.sin = view;
    }
    buildKernelBody(kb, views, sizes, paged, headDim, elt, op.getRopeAttr(),
                    tables, record, scale, hardwareFp8);
  }
  gpu::ReturnOp::create(kb);

  // The launch, then the result: the cache buffer, now holding the rows.
  SmallVector<Value> operands;
  for (Value buffer : buffers) {
    auto type = cast<MemRefType>(buffer.getType());
    operands.push_back(memref::ReinterpretCastOp::create(
        hb, MemRefType::get({1}, type.getElementType()), buffer,
        hb.getIndexAttr(0), ArrayRef<OpFoldResult>{hb.getIndexAttr(1)},
        ArrayRef<OpFoldResult>{hb.getIndexAttr(1)}));
  }
  auto dim = [&](Value src, int64_t d) {
    return hb.createOrFold<memref::DimOp>(src, d);
  };
  Value u = buffers[0], cacheBuffer = buffers[1];
  Value numTokens = hb.createOrFold<arith::MulIOp>(dim(u, 0), dim(u, 2));
  if (paged) {
    Value table = buffers[3];
    Value maxPages = dim(table, 1), pageSize = dim(cacheBuffer, 1);
    operands.append({dim(u, 0), dim(u, 1), dim(u, 2),
                     hb.createOrFold<arith::MulIOp>(maxPages, pageSize),
                     dim(cacheBuffer, 0), pageSize, maxPages});
  } else {
    operands.append({dim(u, 0), dim(u, 1), dim(u, 2), dim(cacheBuffer, 2)});
  }
  Value one = arith::ConstantIndexOp::create(hb, 1);
  Value grid = hb.createOrFold<arith::CeilDivUIOp>(
      numTokens, arith::ConstantIndexOp::create(hb, kTokensPerBlock));
  Value smem = arith::ConstantIntOp::create(hb, hb.getI32Type(), 0);
  gpu::LaunchFuncOp::create(
      hb, hb.getLoc(), kernel, gpu::KernelDim3{grid, one, one},
      gpu::KernelDim3{arith::ConstantIndexOp::create(hb, threads), one, one},
      smem, operands);
  Value result = bufferization::ToTensorOp::create(
      hb, cacheType, cacheBuffer, /*restrict=*/true, /*writable=*/true);
  op.getResult().replaceAllUsesWith(result);
  if (hasRecord) {
    const size_t record = llvm::find(roles, "k_rope_pos") - roles.begin();
    op->getResult(1).replaceAllUsesWith(bufferization::ToTensorOp::create(
        hb, op->getResult(1).getType(), buffers[record],
        /*restrict=*/true,
        /*writable=*/true));
  }
  op.erase();
  return success();
}

struct AppendToGPUPass
    : mlir::kvattn::impl::AppendToGPUPassBase<AppendToGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<AppendOp> appends;
    module.walk([&](AppendOp op) { appends.push_back(op); });
    if (appends.empty())
      return;
    gpu::GPUModuleOp gpuModule = getOrCreateKernelModule(module);
    llvm::StringMap<unsigned> counts;
    for (AppendOp op : appends) {
      std::string name = uniqueKernelName(counts, op, "kvattn_append");
      if (failed(lowerAppend(op, gpuModule, name, hardwareFp8)))
        return signalPassFailure();
    }
  }
};

} // namespace
