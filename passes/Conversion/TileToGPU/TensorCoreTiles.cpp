//===- TensorCoreTiles.cpp - tile ops on tensor cores ---------------------===//
//
// mma.sync.m16n8k16 fragments (PTX ISA, "Matrix fragments for mma.m16n8k16"),
// for lane l, g = l / 4, q = l % 4:
//
//   A (16 x 16, row-major): a0 a1 = (g, 2q..2q+1), a2 a3 = (g + 8, 2q..),
//                           a4 a5 = (g, 2q + 8..), a6 a7 = (g + 8, 2q + 8..)
//   B (16 x 8, "col"):      b0 b1 = (k = 2q..2q+1, n = g), b2 b3 = (k + 8, g)
//   C (16 x 8, f32):        c0 c1 = (g, 2q..2q+1),  c2 c3 = (g + 8, 2q..)
//
// C is the ownership of the scalar lowering (rows 16w + g and 16w + g + 8,
// columns 8j + 2q + {0, 1}; FragmentLayout.h), so scores and accumulators
// stay where they were. ldmatrix.x4 over the 16-bit query tile gives A
// (once per program into registers up to D = 128); ldmatrix.x4 over the K
// stage ([key, dim] row-major: an n-major B) gives B of Q.K^T for two
// 8-key slices; ldmatrix.x4.trans over the V stage ([key, dim]: a k-major
// B) gives B of P.V for two 8-column slices (x2 for an odd last slice); A
// of P.V is the lane's own probabilities (the C fragments of two 8-key
// slices of Q.K^T), rounded to 16 bits: in registers up to D = 128, read
// back from the lane's entries of the score tile otherwise.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/TileToGPU/TensorCoreTiles.h"
#include "passes/Conversion/Fp8.h"
#include "passes/Conversion/TileToGPU/WgmmaLayout.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::kvattn;

namespace {

/// A pair of 16-bit values as one mma operand register: vector<2xf16> for
/// f16, an i32 holding two bf16 for bf16.
Value operandRegister(GpuEmitter &e, Value pair) {
  auto type = cast<VectorType>(pair.getType());
  if (type.getElementType().isF16())
    return pair;
  Value word = vector::BitCastOp::create(
      e.b, VectorType::get({1}, e.b.getI32Type()), pair);
  return vector::ExtractOp::create(e.b, word, ArrayRef<int64_t>{0});
}

/// The operand registers of an ldmatrix result vector<Nx2xT>.
SmallVector<Value> operandRegisters(GpuEmitter &e, Value fragment) {
  auto type = cast<VectorType>(fragment.getType());
  SmallVector<Value> regs;
  for (int64_t i = 0; i < type.getDimSize(0); ++i)
    regs.push_back(operandRegister(
        e, vector::ExtractOp::create(e.b, fragment, ArrayRef<int64_t>{i})));
  return regs;
}

/// d = a * b + c (m16n8k16, f32 accumulation); returns d0..d3.
SmallVector<Value> emitMma(GpuEmitter &e, Type elt, ValueRange a, ValueRange b,
                           ValueRange c) {
  MLIRContext *ctx = e.b.getContext();
  Type f32 = e.b.getF32Type();
  auto resultType = LLVM::LLVMStructType::getLiteral(ctx, {f32, f32, f32, f32});
  NVVM::MMATypes ptxType =
      elt.isF16() ? NVVM::MMATypes::f16 : NVVM::MMATypes::bf16;
  auto mma = NVVM::MmaOp::create(
      e.b, resultType, a, b, c, ArrayRef<int64_t>{16, 8, 16},
      /*b1Op=*/std::nullopt, /*intOverflow=*/std::nullopt,
      std::array<NVVM::MMATypes, 2>{ptxType, ptxType},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                     NVVM::MMALayout::col});
  SmallVector<Value> d;
  for (int64_t i = 0; i < 4; ++i)
    d.push_back(LLVM::ExtractValueOp::create(e.b, mma, ArrayRef<int64_t>{i}));
  return d;
}

/// for (i = 0; i < n; ++i) values = body(i, values), carrying f32 values.
SmallVector<Value>
carry(GpuEmitter &e, int64_t n, ValueRange init,
      function_ref<SmallVector<Value>(Value, ValueRange)> body) {
  auto loop = scf::ForOp::create(
      e.b, e.idx(0), e.idx(n), e.idx(1), init,
      [&](OpBuilder &nested, Location loc, Value iv, ValueRange iter) {
        OpBuilder::InsertionGuard guard(e.b);
        e.b.setInsertionPointToEnd(nested.getInsertionBlock());
        scf::YieldOp::create(e.b, body(iv, iter));
      });
  return SmallVector<Value>(loop.getResults());
}

/// Stores the lane's score entry (row k, slice j, element el): into its
/// register, or into the score tile at (its row k, column 8j + 2q + el).
void storeLaneScore(GpuEmitter &e, Value v, Value tile, int k, int64_t j,
                    int el) {
  if (e.t.scores)
    return e.storeScore(v, k, j, el);
  Value r = e.ownedRow(k);
  e.store(v, tile, {r, e.scoreColumn(r, e.accColumn(j, el))});
}

/// Lane coordinates: g = lane / 4, q = lane % 4, the warp's first row.
struct Lane {
  Value g, q, row0;
};
Lane laneOf(GpuEmitter &e) {
  const FragmentLayout &layout = e.t.layout;
  return {e.divIdx(e.t.lane, e.idx(layout.lanesPerRow)), e.t.quad,
          e.mulIdx(e.t.warp, layout.warpRows)};
}

} // namespace

/// A view of a shared tile's storage in the 16-bit type `elt` (the tile is
/// a memref.view of the dynamic shared memory, with at least the bytes).
Value mlir::kvattn::halfView(GpuEmitter &e, Value f32Tile, Type elt) {
  auto view = f32Tile.getDefiningOp<memref::ViewOp>();
  assert(view && "tiles are views of the dynamic shared memory");
  auto type = cast<MemRefType>(f32Tile.getType());
  if (type.getElementType() == elt)
    return f32Tile; // already that tile (the tensor-core query tile)
  return memref::ViewOp::create(
      e.b,
      MemRefType::get(type.getShape(), elt, MemRefLayoutAttrInterface(),
                      type.getMemorySpace()),
      view.getSource(), view.getByteShift(), ValueRange{});
}

/// The column at which element (row, col) of a 16-bit shared tile
/// [rows, width] is stored: its 16-byte chunk is XORed with the row (modulo
/// the chunks per row, at most 8). The 8 rows one ldmatrix matrix reads at
/// one column, `width * 2` bytes apart (a multiple of 128 for width 64 or
/// 128: one bank), then fall on 8 different 16-byte bank groups. Identity
/// when the chunks per row are neither a power of two nor a multiple of 8
/// (576 columns, the latent form's 72 chunks, swizzle each group of 8
/// chunks as 64 columns do). Every access of the 16-bit tiles (cp.async, the
/// query writes, ldmatrix) goes through it.
Value mlir::kvattn::swizzledCol(GpuEmitter &e, Value tile, Value row,
                                Value col) {
  int64_t width = cast<MemRefType>(tile.getType()).getDimSize(1);
  int64_t chunks = width / 8;
  if (chunks < 2 || (!llvm::isPowerOf2_64(chunks) && chunks % 8 != 0))
    return col;
  int64_t period = std::min<int64_t>(chunks, 8);
  Value key = e.mulIdx(e.remIdx(row, e.idx(period)), 8);
  return arith::XOrIOp::create(e.b, col, key);
}

namespace {

/// The swizzle of a 16-bit shared tile of `width` columns (swizzledCol):
/// the chunk key 8 * (row % period) is XORed into the column's bits below
/// `group` (= 8 * period); no swizzle: period = group = 1.
struct Swizzle {
  int64_t width, period, group;
};
Swizzle swizzleOf(Value tile) {
  int64_t width = cast<MemRefType>(tile.getType()).getDimSize(1);
  int64_t chunks = width / 8;
  if (chunks < 2 || (!llvm::isPowerOf2_64(chunks) && chunks % 8 != 0))
    return {width, 1, 1};
  int64_t period = std::min<int64_t>(chunks, 8);
  return {width, period, 8 * period};
}

/// A thread constant's key part naming an SSA value.
std::string nameOf(Value v) {
  return std::to_string(reinterpret_cast<uintptr_t>(v.getAsOpaquePointer()));
}

/// The flat view, in the 16-bit element type, of the dynamic shared memory
/// that holds the 16-bit tile `tile` (a memref.view at a constant byte
/// offset), created once per program, and the tile's first element in it;
/// null for any other tile. All tiles of one element type share the view,
/// so tiles read with the same lane pattern share their thread-constant
/// bases too (the K and V stages' cp.async destinations: one base).
struct FlatTile {
  Value view;
  int64_t first = 0;
  explicit operator bool() const { return static_cast<bool>(view); }
};
FlatTile flatTile(GpuEmitter &e, Value tile) {
  auto view = tile.getDefiningOp<memref::ViewOp>();
  if (!view)
    return {};
  std::optional<int64_t> shift = getConstantIntValue(view.getByteShift());
  auto type = cast<MemRefType>(tile.getType());
  Type elt = type.getElementType();
  const int64_t bytes = elt.getIntOrFloatBitWidth() / 8;
  if (!shift || *shift % bytes || !type.hasStaticShape() || type.getRank() != 2)
    return {};
  Value source = view.getSource();
  std::string key;
  llvm::raw_string_ostream os(key);
  os << "flat:" << nameOf(source) << ":" << elt;
  Value flat = e.threadConstant(key, [&](GpuEmitter &h) -> Value {
    return memref::ViewOp::create(
        h.b,
        MemRefType::get({ShapedType::kDynamic}, elt,
                        MemRefLayoutAttrInterface(), type.getMemorySpace()),
        source, h.idx(0),
        ValueRange{h.b.createOrFold<arith::DivUIOp>(h.dimOf(source, 0),
                                                    h.idx(bytes))});
  });
  return {flat, *shift / bytes};
}

/// The element offset of (rowT + rowC, colT + colC) in the flat view of the
/// swizzled 16-bit tile `tile`, for thread constants rowT, colT and
/// compile-time rowC, colC: a thread-constant base (computed once per
/// program) plus a constant. The swizzle reads the row modulo the period
/// and changes the column's bits below the group only, so
///   (colT + colC) ^ key(rowT + rowC)
///     = ((colT + colC % group) ^ key(rowT + rowC % period))
///       + colC - colC % group
/// and the row's multiples of the period are a constant too: the K/V/Q
/// operand addresses of a block are a handful of bases (one per k step
/// modulo the group) plus immediates.
struct TileOffset {
  Value base;
  int64_t constant;
};
TileOffset swizzledOffset(GpuEmitter &e, const FlatTile &flat, const Swizzle &s,
                          Value rowT, Value colT, int64_t rowC, int64_t colC) {
  const int64_t rowLow = rowC % s.period, colLow = colC % s.group;
  std::string key = "offset:" + nameOf(flat.view) + ":" +
                    std::to_string(s.width) + ":" + std::to_string(s.period) +
                    ":" + nameOf(rowT) + ":" + nameOf(colT) + ":" +
                    std::to_string(rowLow) + ":" + std::to_string(colLow);
  Value base = e.threadConstant(key, [&](GpuEmitter &h) -> Value {
    Value row = h.addOffset(rowT, rowLow);
    Value col = h.addOffset(colT, colLow);
    if (s.period > 1)
      col = arith::XOrIOp::create(h.b, col,
                                  h.mulIdx(h.remIdx(row, h.idx(s.period)), 8));
    return h.addOffset(h.mulOffset(row, s.width), col);
  });
  return {base, flat.first + (rowC - rowLow) * s.width + (colC - colLow)};
}

/// The lane-derived thread constants of the operand addresses, by name.
Value laneConstant(GpuEmitter &e, StringRef name,
                   function_ref<Value(GpuEmitter &)> compute) {
  return e.threadConstant(("lane:" + name).str(), compute);
}

/// An ldmatrix (`numTiles` 8x8 matrices, `type`) whose lane address is
/// element (rowT + rowC, colT + colC) of the 16-bit tile `tile`, rowT and
/// colT thread constants: through the tile's flat view at a thread-constant
/// base plus an immediate; with a `dynamicCol` (a k step of a loop) the
/// column is colT + dynamicCol, swizzled in place.
Value ldmatrixAt(GpuEmitter &e, Type type, Value tile, Value rowT, Value colT,
                 int64_t rowC, int64_t colC, bool transpose, int numTiles,
                 Value dynamicCol = Value(), Value warpRow = Value()) {
  FlatTile flat =
      dynamicCol || !e.t.leanAddresses ? FlatTile() : flatTile(e, tile);
  Swizzle s = swizzleOf(tile);
  if (flat) {
    TileOffset o = swizzledOffset(e, flat, s, rowT, colT, rowC, colC);
    Value at = o.base;
    if (warpRow) // a multiple of the period: no swizzle change
      at = e.addOffset(
          at,
          e.threadConstant(
              "rowoffset:" + nameOf(warpRow) + ":" + std::to_string(s.width),
              [&](GpuEmitter &h) { return h.mulOffset(warpRow, s.width); }));
    return nvgpu::LdMatrixOp::create(e.b, type, flat.view,
                                     ValueRange{e.addOffset(at, o.constant)},
                                     transpose, numTiles);
  }
  if (warpRow)
    rowT = e.add(rowT, warpRow);
  Value row = e.add(rowT, e.idx(rowC));
  Value col = e.add(colT, e.idx(colC));
  if (dynamicCol)
    col = e.add(col, dynamicCol);
  return nvgpu::LdMatrixOp::create(
      e.b, type, tile, ValueRange{row, swizzledCol(e, tile, row, col)},
      transpose, numTiles);
}

/// The page of key row `row` of a paged cache, `block_table[batch, row /
/// page_size]`, looked up only when the row's slot differs from the one of
/// the previous lookup (`last`, updated): a thread's copies of one KV block
/// walk its rows upwards, so it reads each table entry once, not once per
/// 16-byte copy.
struct PageLookup {
  Value slot, page;
};

PageLookup lookUpPage(GpuEmitter &e, Value cache, Value blockTable, Value batch,
                      Value row, const PageLookup &last) {
  Value slot = e.divIdx(row, e.dimOf(cache, 1));
  auto load = [&]() -> Value {
    return arith::IndexCastOp::create(
        e.b, e.b.getIndexType(), e.load(blockTable, ValueRange{batch, slot}));
  };
  if (!last.slot)
    return {slot, load()};
  Value same =
      arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq, slot, last.slot);
  auto ifOp = scf::IfOp::create(e.b, TypeRange{e.b.getIndexType()}, same,
                                /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(e.b);
    e.b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(e.b, last.page);
    e.b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(e.b, load());
  }
  return {slot, ifOp.getResult(0)};
}

} // namespace

/// emitAsyncStage for an FP8 cache: each thread loads 8 codes of a row (8
/// bytes), decodes them (Fp8.h) and stores them in the stage's 16-bit type
/// at the swizzled column: exact with a scale per tensor or per KV head
/// (foldedKvScale applies it to the scores and probabilities), multiplied by
/// the row's scale in f32 and rounded with a per-token one; rows past
/// `cols` and invalid keys' rows become zeros.
static void emitFp8Stage(GpuEmitter &e, Value source, Value blockTable,
                         Value batch, Value head, Value start, Value cols,
                         Value stage, Value keyValid, Value scale) {
  auto stageType = cast<MemRefType>(stage.getType());
  int64_t bn = stageType.getDimSize(0), width = stageType.getDimSize(1);
  Type elt = stageType.getElementType();
  constexpr int64_t kChunk = 8;
  const int64_t perRow = width / kChunk;
  auto sourceType = cast<MemRefType>(source.getType());
  auto codesType = VectorType::get({kChunk}, sourceType.getElementType());
  auto f32Type = VectorType::get({kChunk}, e.b.getF32Type());
  auto stagedType = VectorType::get({kChunk}, elt);
  Value chunks = e.idx(perRow);
  // A chunk's 8 codes in one 8-byte load where the cache's rows keep them
  // 8-byte aligned (an identity layout whose rows are whole chunks: every
  // chunk starts at a multiple of 8 elements; the runtime passes 16-byte
  // aligned buffers); otherwise byte loads. A scale per tensor or per KV
  // head is the block's: loaded once, not per chunk.
  const int64_t inner = sourceType.getShape().back();
  const bool alignedChunks = sourceType.getLayout().isIdentity() &&
                             ShapedType::isStatic(inner) && inner % kChunk == 0;
  // A scale per tensor or per KV head is applied outside the stage, which
  // then holds the exact codes (every FP8 value is an f16 and a bf16): to
  // the scores of tile.qk and the probabilities of tile.softmax_update
  // (foldedKvScale). A per-token scale multiplies each chunk here.
  const bool perRowScale = scale && !isUniformKvScale(scale);
  // A paged cache: the block's first page read once; a block that lies in
  // that page (start mod P + BN <= P: every block when P is a multiple of
  // BN, as DeepSeek's 64-token pages under 64-key blocks) looks nothing up
  // per chunk; one that crosses pages looks each chunk's row up.
  Value pageSize, blockPage, crossesPages;
  if (blockTable) {
    pageSize = e.dimOf(source, 1);
    blockPage = arith::IndexCastOp::create(
        e.b, e.b.getIndexType(),
        e.load(blockTable, ValueRange{batch, e.divIdx(start, pageSize)}));
    crossesPages = arith::CmpIOp::create(
        e.b, arith::CmpIPredicate::ugt,
        e.addOffset(e.remIdx(start, pageSize), bn), pageSize);
  }
  // Chunk (c, x): row c of the block, columns x .. x + 7, stored at `dst`
  // (the stage's indices of the chunk when not given).
  // With `branchFree` every chunk is loaded, rows past `cols` from the
  // block's first row (a row of the sequence: its page is the block's), and
  // the codes of the rows that are not keys are selected to zeros (code 0
  // is +0) and their scale to 1 before the conversion: no branch around the
  // load or the store, and whatever such a row holds (NaN codes, a scale of
  // Inf) never reaches the stage. Without it a branch skips the load of a
  // row that is no key and stores zeros (ptxas predicates it; the
  // cooperative loop of one-warp programs, where two SEL per chunk cost
  // more: sm_80 FP8 decode 1733 against 1625 GB/s in the SASS model).
  auto stageChunk = [&](bool branchFree, Value c, Value x,
                        Value dstView = Value(), Value dstOffset = Value()) {
    Value inside = e.lt(c, cols);
    Value row = arith::SelectOp::create(e.b, inside, e.add(start, c), start);
    if (keyValid)
      inside = arith::AndIOp::create(
          e.b, inside,
          memref::LoadOp::create(e.b, keyValid, ValueRange{batch, row}));
    auto loadAndConvert = [&]() -> Value {
      SmallVector<Value, 4> at;
      if (blockTable) {
        Value page = e.ifElse(
            crossesPages,
            [&] {
              return arith::IndexCastOp::create(
                         e.b, e.b.getIndexType(),
                         e.load(blockTable,
                                ValueRange{batch, e.divIdx(row, pageSize)}))
                  .getResult();
            },
            blockPage);
        at = {page, e.remIdx(row, pageSize), head, x};
      } else {
        at = e.kvIndices(source, blockTable, batch, head, row, x);
      }
      Value codes =
          alignedChunks
              ? vector::LoadOp::create(e.b, codesType, source, at,
                                       /*nontemporal=*/false,
                                       llvm::Align(kChunk))
                    .getResult()
              : vector::LoadOp::create(e.b, codesType, source, at).getResult();
      if (branchFree)
        codes =
            arith::SelectOp::create(e.b, inside, codes, e.zeroOf(codesType));
      Value rowScale;
      if (perRowScale) {
        rowScale = loadKvScale(e.b, e.b.getLoc(), scale, head, at);
        if (branchFree)
          rowScale = arith::SelectOp::create(e.b, inside, rowScale, e.f32(1));
      }
      Value f;
      if (e.t.hardwareFp8) {
        // sm_89+: cvt.rn.f16x2.{e4m3x2,e5m2x2}, two codes a convert
        // (exact: every FP8 value is an f16): an f16 stage of exact
        // codes takes them as they are, the others through f32.
        Value bytes = arith::BitcastOp::create(
            e.b, VectorType::get({kChunk}, e.b.getI8Type()), codes);
        SmallVector<Value> lanes;
        for (int64_t p = 0; p < kChunk; p += 2) {
          Value lo = vector::ExtractOp::create(e.b, bytes, p);
          Value hi = vector::ExtractOp::create(e.b, bytes, p + 1);
          Value pair = vector::FromElementsOp::create(
              e.b, VectorType::get({2}, e.b.getI8Type()), ValueRange{lo, hi});
          Value halves = NVVM::ConvertF8x2ToF16x2Op::create(
              e.b, VectorType::get({2}, e.b.getF16Type()), pair,
              /*relu=*/false, sourceType.getElementType());
          for (int64_t i = 0; i < 2; ++i)
            lanes.push_back(vector::ExtractOp::create(e.b, halves, i));
        }
        Value h = vector::FromElementsOp::create(
            e.b, VectorType::get({kChunk}, e.b.getF16Type()), lanes);
        if (!rowScale && elt.isF16())
          return h;
        f = arith::ExtFOp::create(e.b, f32Type, h);
        if (rowScale)
          f = arith::MulFOp::create(
              e.b, f, vector::BroadcastOp::create(e.b, f32Type, rowScale));
      } else if (!rowScale && elt.isF16()) {
        // sm_80/sm_86, an f16 stage of exact codes: decoded in f16.
        return decodeFp8ToF16Packed(e.b, e.b.getLoc(), codes);
      } else {
        f = dequantizeFp8Packed(e.b, e.b.getLoc(), codes, rowScale);
      }
      return elt.isF32()
                 ? f
                 : arith::TruncFOp::create(e.b, stagedType, f).getResult();
    };
    Value v = branchFree
                  ? loadAndConvert()
                  : e.ifElse(inside, loadAndConvert, e.zeroOf(stagedType));
    // 16 bytes at a multiple of 16: the stages' rows are whole chunks.
    if (dstView) {
      vector::StoreOp::create(e.b, v, dstView, ValueRange{dstOffset},
                              /*nontemporal=*/false, llvm::Align(16));
      return;
    }
    // (The wgmma kernels' stages are 64-column panels: WgmmaLayout.h.)
    SmallVector<Value, 2> at =
        e.t.wgmma ? panelIndices(e, stage, c, x)
                  : SmallVector<Value, 2>{c, swizzledCol(e, stage, c, x)};
    vector::StoreOp::create(e.b, v, stage, at, /*nontemporal=*/false,
                            llvm::Align(16));
  };
  // Fixed column groups: thread t takes the chunk columns t mod 8 + 8m (one
  // 16-byte column of every 64 columns: of every 128-byte panel row on the
  // wgmma kernels' panel stages, of every swizzle group of the mma.sync
  // stages) of rows t / 8 + k * count / 8. Its row modulo 8 (the swizzle's
  // period) and its column within 64 are thread constants, so chunk (k, m)
  // sits at a thread constant plus k and m times constants in the cache
  // and in the flat stage: no division by the row's chunk count (72 at
  // DeepSeek's 576 columns) and no panel or swizzle arithmetic per chunk.
  // Otherwise (rows per pass no multiple of 8 or not dividing the block,
  // an mma.sync stage of fewer than 64 columns or not swizzled by 8-chunk
  // groups) the cooperative loop over all chunks.
  constexpr int64_t kGroup = 8;
  const int64_t count = e.t.count;
  const int64_t rowsPerPass = count % kGroup == 0 ? count / kGroup : 0;
  FlatTile flat = flatTile(e, stage);
  const bool groupsSwizzle =
      e.t.wgmma || (swizzleOf(stage).period == 8 && width % 64 == 0);
  if (flat && groupsSwizzle && perRow % kGroup == 0 && rowsPerPass &&
      rowsPerPass % 8 == 0 && bn % rowsPerPass == 0) {
    const int64_t perThread = perRow / kGroup, passes = bn / rowsPerPass;
    const int64_t panel = wgmma::kPanelColumns;
    // A row's and a 64-column step's elements in the flat stage: panels of
    // 64 columns (bn rows each) on wgmma, rows of `width` on mma.sync.
    const int64_t rowStride = e.t.wgmma ? panel : width;
    const int64_t columnStep = e.t.wgmma ? bn * panel : panel;
    Value r0 = e.threadConstant("fp8:r0", [&](GpuEmitter &h) {
      return h.divIdx(h.t.tid, h.idx(kGroup));
    });
    Value x0 = e.threadConstant("fp8:x0", [&](GpuEmitter &h) {
      return h.mulIdx(h.remIdx(h.t.tid, h.idx(kGroup)), kChunk);
    });
    // The offset of (r0, x0): r0 * rowStride + (x0 ^ 8 (r0 mod 8)) (the
    // XOR of panelIndices and of swizzledCol, within 64 columns both).
    Value base = e.threadConstant(
        "fp8:base:" + std::to_string(rowStride), [&](GpuEmitter &h) {
          Value swizzled = arith::XOrIOp::create(
              h.b, x0, h.mulIdx(h.remIdx(r0, h.idx(8)), 8));
          return h.add(h.mulIdx(r0, rowStride), swizzled);
        });
    Value first = e.addOffset(base, flat.first);
    auto forRange = [&](int64_t n, function_ref<void(Value)> body) {
      scf::ForOp::create(
          e.b, e.idx(0), e.idx(n), e.idx(1), ValueRange{},
          [&](OpBuilder &nested, Location loc, Value iv, ValueRange) {
            OpBuilder::InsertionGuard guard(e.b);
            e.b.setInsertionPoint(scf::YieldOp::create(nested, loc));
            body(iv);
          });
    };
    forRange(passes, [&](Value k) {
      Value c = e.addOffset(r0, e.mulOffset(k, rowsPerPass));
      Value rowPart =
          e.addOffset(first, e.mulOffset(k, rowsPerPass * rowStride));
      forRange(perThread, [&](Value m) {
        stageChunk(/*branchFree=*/true, c,
                   e.addOffset(x0, e.mulOffset(m, panel)), flat.view,
                   e.addOffset(rowPart, e.mulOffset(m, columnStep)));
      });
      NVVM::SyncWarpOp::create(
          e.b, arith::ConstantIntOp::create(e.b, e.b.getI32Type(), -1));
    });
    return;
  }
  e.cooperative(e.idx(bn * perRow), [&](Value i) {
    stageChunk(/*branchFree=*/false, e.divIdx(i, chunks),
               e.mulIdx(e.remIdx(i, chunks), kChunk));
  });
}

void mlir::kvattn::emitAsyncStage(GpuEmitter &e, Value source, Value blockTable,
                                  Value batch, Value head, Value start,
                                  Value cols, Value stage, bool commit,
                                  Value keyValid, Value scale) {
  if (isFp8(source.getType())) {
    // Plain loads and stores: landed for this thread when issued, no copy
    // group (StageSync.cpp gives such stages no wait).
    emitFp8Stage(e, source, blockTable, batch, head, start, cols, stage,
                 keyValid, scale);
    return;
  }
  auto stageType = cast<MemRefType>(stage.getType());
  int64_t bn = stageType.getDimSize(0), width = stageType.getDimSize(1);
  constexpr int64_t kChunk = 8; // 16-bit elements per 16-byte copy
  const int64_t perRow = width / kChunk, copies = bn * perRow;
  // One 16-byte copy of key row `c` of the block into `dst` (the stage at
  // its swizzled indices, or its flat view at a thread-constant offset).
  auto copy = [&](Value c, Value x, Value dst, ValueRange dstIndices,
                  PageLookup *pages) {
    // Rows past the block read nothing; their address is the block's first
    // row, which exists (and, paged, has a valid table entry).
    Value inside = e.lt(c, cols);
    Value row = arith::SelectOp::create(e.b, inside, e.add(start, c), start);
    // An invalid key's row is zero-filled: its value never reaches P.V,
    // where a zero probability times NaN would still be NaN. (The flag of
    // `row` is in range: rows past the block read the block's first key.)
    if (keyValid)
      inside = arith::AndIOp::create(
          e.b, inside,
          memref::LoadOp::create(e.b, keyValid, ValueRange{batch, row}));
    Value srcElements =
        arith::SelectOp::create(e.b, inside, e.idx(kChunk), e.idx(0));
    SmallVector<Value, 4> src;
    if (blockTable && pages) {
      *pages = lookUpPage(e, source, blockTable, batch, row, *pages);
      src = {pages->page, e.remIdx(row, e.dimOf(source, 1)), head, x};
    } else {
      src = e.kvIndices(source, blockTable, batch, head, row, x);
    }
    // The wgmma kernels stage K/V as 64-column panels (WgmmaLayout.h): their
    // copies index the stage itself, whatever the caller's addressing.
    SmallVector<Value, 2> dstAt(dstIndices.begin(), dstIndices.end());
    if (e.t.wgmma) {
      dst = stage;
      dstAt = panelIndices(e, stage, c, x);
    }
    nvgpu::DeviceAsyncCopyOp::create(
        e.b, nvgpu::DeviceAsyncTokenType::get(e.b.getContext()), dst, dstAt,
        source, src, e.b.getIndexAttr(kChunk), srcElements,
        /*bypassL1=*/UnitAttr());
  };
  if (copies % e.t.count == 0 && e.t.count % perRow == 0) {
    // Constant strides: the thread's column is fixed and its rows step by
    // `rowStep`. The thread's first row and column are thread constants.
    const int64_t rowStep = e.t.count / perRow;
    const int64_t n = copies / e.t.count;
    std::string tag = std::to_string(perRow);
    Value r0 = e.threadConstant("copy:r0:" + tag, [&](GpuEmitter &h) {
      return h.divIdx(h.t.tid, h.idx(perRow));
    });
    Value x = e.threadConstant("copy:x:" + tag, [&](GpuEmitter &h) {
      return h.mulIdx(h.remIdx(h.t.tid, h.idx(perRow)), kChunk);
    });
    // The swizzle depends on the row modulo its period (a power of two up
    // to 8): constant per thread when the step is a multiple of it, and
    // then copy k lands at one thread-constant offset of the flat stage
    // plus k * rowStep * width (an immediate once unrolled).
    const int64_t period = std::min<int64_t>(perRow, 8);
    const bool fixedSwizzle = rowStep % period == 0;
    // (The wgmma kernels' panel-major stages keep per-copy indices.)
    FlatTile flat = fixedSwizzle && e.t.leanAddresses && !e.t.wgmma
                        ? flatTile(e, stage)
                        : FlatTile();
    auto destination = [&](Value k, Value c) -> std::pair<Value, Value> {
      if (!flat)
        return {stage, swizzledCol(e, stage, fixedSwizzle ? r0 : c, x)};
      TileOffset o = swizzledOffset(e, flat, swizzleOf(stage), r0, x, 0, 0);
      // One statement per op: the IR's order must not depend on the C++
      // compiler's order of evaluating arguments.
      Value step = e.mulOffset(k, rowStep * width);
      Value at = e.addOffset(o.base, o.constant);
      return {flat.view, e.addOffset(at, step)};
    };
    auto copyLoop = [&](function_ref<void(Value k, Value c, PageLookup *)> body,
                        bool lookUp = true) {
      // A loop, carrying the last page lookup: LLVM unrolls the short ones
      // (measured in docs/benchmarks.md: unrolling decode's 16 copies in
      // the IR saves a fifth of its instructions but takes it to 255
      // registers).
      PageLookup first;
      SmallVector<Value> inits;
      const bool carry = blockTable && lookUp;
      if (carry) {
        first = lookUpPage(e, source, blockTable, batch, start, {});
        inits = {first.slot, first.page};
      }
      scf::ForOp::create(
          e.b, e.idx(0), e.idx(n), e.idx(1), inits,
          [&](OpBuilder &nested, Location loc, Value k, ValueRange iter) {
            OpBuilder::InsertionGuard guard(e.b);
            e.b.setInsertionPointToEnd(nested.getInsertionBlock());
            PageLookup last;
            if (carry)
              last = {iter[0], iter[1]};
            body(k, e.addOffset(r0, e.mulOffset(k, rowStep)), &last);
            SmallVector<Value> yields;
            if (carry)
              yields = {last.slot, last.page};
            scf::YieldOp::create(e.b, yields);
          });
    };
    // A contiguous [B, H, S, D] cache and no key-validity flags: copy k
    // reads element ((b * H + h) * S + start + r0 + k * rowStep) * D + x of
    // the flat cache, a base per block plus an immediate. In a full block
    // (cols == BN, every block but the last, shorter one) that is all; in
    // the other the rows past `cols` get src-size 0: cp.async reads nothing
    // and zero-fills (PTX ISA), so their address, past the block's keys, is
    // never dereferenced (the emulated GPU faults a cp.async that reads
    // outside a buffer).
    auto sourceType = cast<MemRefType>(source.getType());
    const bool contiguous = flat && !blockTable && !keyValid &&
                            sourceType.getRank() == 4 &&
                            sourceType.getLayout().isIdentity() &&
                            !ShapedType::isDynamic(sourceType.getDimSize(3));
    // A paged [pages, P, H, D] cache with static P, H, D and no
    // key-validity flags: when the block's rows lie in one page
    // (start mod P + BN <= P: every block when P is a multiple of BN, the
    // block starts being multiples of BN) the block reads one table entry
    // and copy k reads element ((page * P + start mod P) * H + h) * D (a
    // base per block) + r0 * H * D + x (a thread constant) +
    // k * rowStep * H * D (an immediate): no per-copy page arithmetic.
    // Other blocks keep the per-copy lookup below. Not at D > 128: the
    // hd 256 kernels sit at 254-255 registers and ptxas spilled 4 bytes of
    // the sm_86/sm_89 one with both paths.
    const bool pagedFlat = blockTable && !e.t.wgmma && !keyValid &&
                           sourceType.getRank() == 4 &&
                           sourceType.getLayout().isIdentity() &&
                           !ShapedType::isDynamic(sourceType.getDimSize(1)) &&
                           !ShapedType::isDynamic(sourceType.getDimSize(2)) &&
                           !ShapedType::isDynamic(sourceType.getDimSize(3)) &&
                           sourceType.getDimSize(3) <= 128;
    auto perCopy = [&] {
      copyLoop([&](Value k, Value c, PageLookup *last) {
        auto [dst, at] = destination(k, c);
        SmallVector<Value, 2> dstIndices =
            flat ? SmallVector<Value, 2>{at} : SmallVector<Value, 2>{c, at};
        copy(c, x, dst, dstIndices, last);
      });
    };
    auto flatView = [&] {
      Value elements = e.dimOf(source, 0);
      for (int64_t i = 1; i < 4; ++i)
        elements =
            e.b.createOrFold<arith::MulIOp>(elements, e.dimOf(source, i));
      return memref::ReinterpretCastOp::create(
                 e.b,
                 MemRefType::get({ShapedType::kDynamic},
                                 sourceType.getElementType()),
                 source, e.b.getIndexAttr(0), ArrayRef<OpFoldResult>{elements},
                 ArrayRef<OpFoldResult>{e.b.getIndexAttr(1)})
          .getResult();
    };
    // Copy k (block row c) from element `offset` of the flat cache
    // `flatSource`; a row past `cols` reads nothing (src-size 0).
    auto copyFromFlat = [&](Value k, Value c, Value flatSource, Value offset) {
      auto [dst, at] = destination(k, c);
      SmallVector<Value, 2> dstIndices =
          flat ? SmallVector<Value, 2>{at} : SmallVector<Value, 2>{c, at};
      Value srcElements =
          arith::SelectOp::create(e.b, e.lt(c, cols), e.idx(kChunk), e.idx(0));
      nvgpu::DeviceAsyncCopyOp::create(
          e.b, nvgpu::DeviceAsyncTokenType::get(e.b.getContext()), dst,
          dstIndices, flatSource, ValueRange{offset}, e.b.getIndexAttr(kChunk),
          srcElements, /*bypassL1=*/UnitAttr());
    };
    // A block over several pages (page size P < BN, dividing it, and a
    // multiple of `rowStep`, as vLLM's and SGLang's 16-token pages under
    // 32- and 64-key blocks): when the block starts on a page boundary
    // (every block but one after an unaligned start), copy k's row
    // r0 + k * rowStep lies in the block's page (k * rowStep) / P, a
    // constant per copy since r0 < rowStep. The block loads its BN / P
    // table entries first, all independent, then issues its copies with no
    // lookup among them: the per-copy path's loop-carried lookup waited for
    // each new page's entry before its copies (a global load's latency
    // per page) and kept the copies in a loop LLVM did not unroll.
    // Entries of pages past the block's keys are not read (they can lie
    // past the table's row): those pages repeat the first, whose rows
    // their copies (src-size 0) never read. At most kMaxBlockPages
    // entries live in registers.
    constexpr int64_t kMaxBlockPages = 4;
    const int64_t pageRows = pagedFlat ? sourceType.getDimSize(1) : 0;
    const bool multiPage = pagedFlat && pageRows < bn && bn % pageRows == 0 &&
                           pageRows % rowStep == 0 &&
                           bn / pageRows <= kMaxBlockPages;
    if (multiPage) {
      const int64_t rowStride =
          sourceType.getDimSize(2) * sourceType.getDimSize(3);
      Value aligned =
          arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq,
                                e.remIdx(start, e.idx(pageRows)), e.idx(0));
      auto ifOp = scf::IfOp::create(e.b, TypeRange{}, aligned,
                                    /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard guard(e.b);
        e.b.setInsertionPointToStart(ifOp.thenBlock());
        Value flatSource = flatView();
        Value threadPart = e.addOffset(e.mulOffset(r0, rowStride), x);
        Value headPart = e.addOffset(
            e.mulOffset(head, sourceType.getDimSize(3)), threadPart);
        Value firstSlot = e.divIdx(start, e.idx(pageRows));
        SmallVector<Value, kMaxBlockPages> pageBases;
        for (int64_t j = 0; j < bn / pageRows; ++j) {
          Value slot = firstSlot;
          if (j > 0)
            slot =
                arith::SelectOp::create(e.b, e.lt(e.idx(j * pageRows), cols),
                                        e.addOffset(firstSlot, j), firstSlot);
          Value page = arith::IndexCastOp::create(
              e.b, e.b.getIndexType(),
              e.load(blockTable, ValueRange{batch, slot}));
          pageBases.push_back(
              e.addOffset(e.mulOffset(page, pageRows * rowStride), headPart));
        }
        copyLoop(
            [&](Value k, Value c, PageLookup *) {
              // The copy's page and row in it: constants once unrolled.
              Value blockRow = e.mulOffset(k, rowStep);
              Value j = e.divIdx(blockRow, e.idx(pageRows));
              Value base = pageBases[0];
              for (int64_t i = 1; i < static_cast<int64_t>(pageBases.size());
                   ++i)
                base = arith::SelectOp::create(
                    e.b,
                    arith::CmpIOp::create(e.b, arith::CmpIPredicate::eq, j,
                                          e.idx(i)),
                    pageBases[i], base);
              Value inPageRow = e.remIdx(blockRow, e.idx(pageRows));
              copyFromFlat(
                  k, c, flatSource,
                  e.addOffset(base, e.mulOffset(inPageRow, rowStride)));
            },
            /*lookUp=*/false);
        e.b.setInsertionPointToStart(ifOp.elseBlock());
        perCopy();
      }
    } else if (pagedFlat) {
      const int64_t pageSize = sourceType.getDimSize(1);
      const int64_t rowStride =
          sourceType.getDimSize(2) * sourceType.getDimSize(3);
      Value inPage = arith::CmpIOp::create(
          e.b, arith::CmpIPredicate::ule,
          e.addOffset(e.remIdx(start, e.idx(pageSize)), bn), e.idx(pageSize));
      auto ifOp = scf::IfOp::create(e.b, TypeRange{}, inPage,
                                    /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard guard(e.b);
        e.b.setInsertionPointToStart(ifOp.thenBlock());
        Value flatSource = flatView();
        // (Per block, not a thread constant: the 255-register kernels have
        // no register to keep it in.)
        Value threadPart = e.addOffset(e.mulOffset(r0, rowStride), x);
        Value page = arith::IndexCastOp::create(
            e.b, e.b.getIndexType(),
            e.load(blockTable,
                   ValueRange{batch, e.divIdx(start, e.idx(pageSize))}));
        Value pageRow = e.addOffset(e.mulOffset(page, pageSize),
                                    e.remIdx(start, e.idx(pageSize)));
        Value headRow =
            e.addOffset(e.mulOffset(pageRow, rowStride),
                        e.mulOffset(head, sourceType.getDimSize(3)));
        Value base = e.addOffset(headRow, threadPart);
        copyLoop(
            [&](Value k, Value c, PageLookup *) {
              copyFromFlat(
                  k, c, flatSource,
                  e.addOffset(base, e.mulOffset(k, rowStep * rowStride)));
            },
            /*lookUp=*/false);
        e.b.setInsertionPointToStart(ifOp.elseBlock());
        perCopy();
      }
    } else if (!contiguous) {
      perCopy();
    } else {
      const int64_t d = sourceType.getDimSize(3);
      auto mul = [&](Value x, Value y) {
        return e.b.createOrFold<arith::MulIOp>(x, y);
      };
      Value elements = e.dimOf(source, 0);
      for (int64_t i = 1; i < 4; ++i)
        elements = mul(elements, e.dimOf(source, i));
      Value flatSource = memref::ReinterpretCastOp::create(
          e.b,
          MemRefType::get({ShapedType::kDynamic}, sourceType.getElementType()),
          source, e.b.getIndexAttr(0), ArrayRef<OpFoldResult>{elements},
          ArrayRef<OpFoldResult>{e.b.getIndexAttr(1)});
      // The block's part (program-uniform) plus the thread's r0 * D + x.
      Value threadPart = e.threadConstant(
          "copy:src:" + tag + ":" + std::to_string(d),
          [&](GpuEmitter &h) { return h.addOffset(h.mulOffset(r0, d), x); });
      Value heads = e.dimOf(source, 1), rowsPerHead = e.dimOf(source, 2);
      Value row =
          e.add(mul(e.add(mul(batch, heads), head), rowsPerHead), start);
      Value base = e.addOffset(mul(row, e.idx(d)), threadPart);
      auto fast = [&](bool full) {
        copyLoop([&](Value k, Value c, PageLookup *) {
          auto [dst, at] = destination(k, Value());
          Value srcElements;
          if (!full)
            srcElements = arith::SelectOp::create(e.b, e.lt(c, cols),
                                                  e.idx(kChunk), e.idx(0));
          nvgpu::DeviceAsyncCopyOp::create(
              e.b, nvgpu::DeviceAsyncTokenType::get(e.b.getContext()), dst,
              ValueRange{at}, flatSource,
              ValueRange{e.addOffset(base, e.mulOffset(k, rowStep * d))},
              e.b.getIndexAttr(kChunk), srcElements,
              /*bypassL1=*/UnitAttr());
        });
      };
      fast(/*full=*/false);
    }
  } else {
    Value chunks = e.idx(perRow);
    e.cooperative(e.idx(copies), [&](Value i) {
      Value c = e.divIdx(i, chunks);
      Value x = e.mulIdx(e.remIdx(i, chunks), kChunk);
      copy(c, x, stage, ValueRange{c, swizzledCol(e, stage, c, x)},
           /*pages=*/nullptr);
    });
  }
  if (commit)
    NVVM::CpAsyncCommitGroupOp::create(e.b);
}

void mlir::kvattn::emitAsyncWait(GpuEmitter &e, int32_t pending) {
  NVVM::CpAsyncWaitGroupOp::create(e.b, pending);
}

void mlir::kvattn::emitStageSync(GpuEmitter &e, StageSyncAttr sync) {
  if (sync.getWaitCopies() >= 0)
    emitAsyncWait(e, static_cast<int32_t>(sync.getWaitCopies()));
  if (sync.getProxyFence())
    emitProxyFence(e);
  if (sync.getBarrier())
    e.barrier();
}

void mlir::kvattn::emitQKStageCopies(GpuEmitter &e, TileQKOp op,
                                     TileSoftmaxOp prefetch) {
  StageSyncAttr sync = getStageSync(op);
  if (sync.getBarrierBeforeCopies())
    e.barrier();
  if (!e.t.prefetchKeys)
    emitAsyncStage(e, op.getKey(), op.getBlockTable(), op.getBatch(),
                   op.getKvHead(), op.getStart(), op.getCols(), e.t.stage,
                   /*commit=*/true, Value(), op.getKvScale());
  emitStageSync(e, sync);
  if (prefetch)
    emitAsyncStage(e, prefetch.getValue(), prefetch.getBlockTable(),
                   prefetch.getBatch(), prefetch.getKvHead(),
                   prefetch.getStart(), prefetch.getCols(), e.t.stageV,
                   /*commit=*/true, prefetch.getKeyValid(),
                   prefetch.getKvScale());
}

void mlir::kvattn::lowerPrefetchOnTensorCores(GpuEmitter &e,
                                              TilePrefetchOp op) {
  if (e.t.tma && e.t.producerWarps) // the producer warpgroup issues it
    return;
  if (e.t.tma) // sm_90a's TMA ring (WgmmaTiles.cpp)
    return emitTmaIssue(e, 0, op.getKey(), op.getBlockTable(), op.getBatch(),
                        op.getKvHead(), op.getStart(), op.getCols());
  // Nothing to copy (no next block): no address is formed, not even of the
  // table entry; the empty group still counts.
  Value any = arith::CmpIOp::create(e.b, arith::CmpIPredicate::ugt,
                                    op.getCols(), e.idx(0));
  e.when(any, [&] {
    emitAsyncStage(e, op.getKey(), op.getBlockTable(), op.getBatch(),
                   op.getKvHead(), op.getStart(), op.getCols(), e.t.stage,
                   /*commit=*/false);
  });
  NVVM::CpAsyncCommitGroupOp::create(e.b);
}

namespace {
/// The ldmatrix.x4 address of the warp's A fragment of m16 tile `tile` at
/// k step `k0`: lane l reads row 16 tile + (l / 8 % 2) * 8 + l % 8, column
/// (l / 16) * 8 of the warp's 16 x 16 slice; the thread constants
/// rowT = (the warp's first row) + (l / 8 % 2) * 8 + l % 8, colT =
/// (l / 16) * 8 and the constant row 16 tile.
/// The lane part is the V stage's ldmatrix.x4.trans pattern (row l % 16,
/// column (l / 16) * 8): with D = Dv the query reads use the V reads'
/// bases plus the warp's row offset (one add, which ptxas may recompute
/// instead of keeping four more registers).
struct QueryAddress {
  Value row, col, warpRow;
  int64_t rowC;
};
QueryAddress queryAddress(GpuEmitter &e, int64_t tile) {
  Value row = laneConstant(
      e, "lo16", [](GpuEmitter &h) { return h.remIdx(h.t.lane, h.idx(16)); });
  Value col = laneConstant(e, "hi8", [](GpuEmitter &h) {
    return h.mulIdx(h.divIdx(h.t.lane, h.idx(16)), 8);
  });
  Value warpRow = laneConstant(e, "warprow", [](GpuEmitter &h) {
    return h.mulIdx(h.t.warp, h.t.layout.warpRows);
  });
  return {row, col, warpRow, 16 * tile};
}

/// The A fragment at k step k0 (a constant), or at the loop's `dynamicK0`.
SmallVector<Value> loadQueryFragment(GpuEmitter &e, Value q16,
                                     const QueryAddress &at, int64_t k0,
                                     Value dynamicK0 = Value()) {
  Type elt = cast<MemRefType>(q16.getType()).getElementType();
  Type type = VectorType::get({4, 2}, elt);
  FlatTile flat =
      dynamicK0 || !e.t.leanAddresses ? FlatTile() : flatTile(e, q16);
  Swizzle s = swizzleOf(q16);
  if (flat && k0 % 16 == 0 && s.width % s.group == 0) {
    // One thread-constant base for every fragment of the warp's rows:
    // (warpRow + lane % 16) * width + ((lane / 16) * 8 ^ key), the key
    // 8 * (row % period) the same for every tile (16 rows apart). The k
    // step's column bits below the group (multiples of 16) are disjoint
    // from the lane's (8), so (8 * hi + colLow) ^ key = (8 * hi ^ key) ^
    // colLow: an XOR with an immediate, then an immediate (the tile's rows,
    // the k step's multiples of the group, the tile's place in the view).
    // With the 2-D indices (ldmatrixAt's swizzledCol per fragment) LLVM
    // hoisted one address per k step out of the KV loop, and ptxas gave the
    // 128-row D = 128 kernels a stack frame for them.
    Value base = e.threadConstant(
        "qbase:" + nameOf(flat.view) + ":" + std::to_string(s.width) + ":" +
            std::to_string(s.period),
        [&](GpuEmitter &h) -> Value {
          Value row = h.addOffset(at.warpRow, at.row);
          Value col = at.col;
          if (s.period > 1)
            col = arith::XOrIOp::create(
                h.b, col, h.mulIdx(h.remIdx(at.row, h.idx(s.period)), 8));
          return h.addOffset(h.mulOffset(row, s.width), col);
        });
    const int64_t colLow = k0 % s.group;
    Value addr = base;
    if (colLow)
      addr = arith::XOrIOp::create(e.b, addr, e.idx(colLow));
    addr = e.addOffset(addr, flat.first + at.rowC * s.width + (k0 - colLow));
    Value a = nvgpu::LdMatrixOp::create(e.b, type, flat.view, ValueRange{addr},
                                        /*transpose=*/false, /*numTiles=*/4);
    return operandRegisters(e, a);
  }
  Value a =
      ldmatrixAt(e, type, q16, at.row, at.col, at.rowC, k0, /*transpose=*/false,
                 /*numTiles=*/4, dynamicK0 ? dynamicK0 : e.idx(0), at.warpRow);
  return operandRegisters(e, a);
}
} // namespace

MemRefType mlir::kvattn::queryFragmentsType(MLIRContext *ctx, int64_t d,
                                            Type elt, int64_t mmaTiles) {
  Type reg = elt.isF16() ? Type(VectorType::get({2}, elt))
                         : Type(IntegerType::get(ctx, 32));
  return MemRefType::get({mmaTiles * (d / 16), 4}, reg);
}

void mlir::kvattn::emitLoadQueryFragments(GpuEmitter &e, Value q16) {
  int64_t d = cast<MemRefType>(q16.getType()).getDimSize(1);
  for (int64_t tile = 0; tile < e.t.layout.mmaTiles(); ++tile) {
    QueryAddress at = queryAddress(e, tile);
    for (int64_t kk = 0; kk < d / 16; ++kk) {
      SmallVector<Value> regs = loadQueryFragment(e, q16, at, 16 * kk);
      for (auto [i, reg] : llvm::enumerate(regs))
        e.store(reg, e.t.qFragments,
                {e.idx(tile * (d / 16) + kk), e.idx(static_cast<int64_t>(i))});
    }
  }
}

void mlir::kvattn::lowerQKOnTensorCores(GpuEmitter &e, TileQKOp op,
                                        TileSoftmaxOp prefetch) {
  // The staged type (an FP8 cache's K is converted to the query's).
  Type elt = cast<MemRefType>(e.t.stage.getType()).getElementType();
  // An FP8 K's scale per tensor or per KV head, on the dot products, times
  // the power of two each row of a query converted into f16 was scaled
  // down by (dotFactors: one per row of the lane).
  SmallVector<Value> dotFactors = e.dotFactors(foldedKvScale(
      e.b, e.b.getLoc(), op.getKey(), op.getKvScale(), op.getKvHead()));
  auto scoresType = cast<MemRefType>(op.getScores().getType());
  int64_t bn = scoresType.getDimSize(1);
  int64_t d = cast<MemRefType>(op.getQTile().getType()).getDimSize(1);
  // Copy groups per iteration: K of this block (issued here, or by the
  // previous block's tile.softmax_update for the tile.prefetch after the
  // previous tile.qk), waited for here before the barrier; V of this block,
  // issued here right after that barrier (when its softmax is known) and
  // waited for by the softmax; K of the next block, issued by the softmax
  // after its barrier. Two barriers per block (FlashAttention-2's count).
  // The waits and barriers are the op's kvattn.stage_sync (StageSync.cpp):
  // wait_group 0 and a barrier here (K visible to every thread, every
  // warp's previous P.V done: the V stage is free); in the latent form,
  // which reads V from the K stage, also a barrier before this block's K
  // copies (every warp's previous P.V has read the stage).
  emitQKStageCopies(e, op, prefetch);

  // ldmatrix.x2 addresses of B (K rows are n): row l % 8, column
  // (l / 8 % 2) * 8 of the 8 x 16 slice.
  // (Thread constants: the addresses are a base per k step modulo the
  // swizzle group plus immediates, swizzledOffset.)
  Value bRow = laneConstant(
      e, "lo8", [](GpuEmitter &h) { return h.remIdx(h.t.lane, h.idx(8)); });
  Value bCol = laneConstant(e, "mid8", [](GpuEmitter &h) {
    return h.mulIdx(h.remIdx(h.divIdx(h.t.lane, h.idx(8)), h.idx(2)), 8);
  });
  auto bType = VectorType::get({2, 2}, elt);

  // The score fragments, a group of 8-key slices at a time, carried
  // through the D / 16 k steps; the query fragment is read once per step
  // and group (from registers when tile.load_q kept them there). With the
  // scores in registers they are all live anyway: one group of all slices.
  // Otherwise groups of 2 keep the registers down.
  // A value split: the warp computes its share of the block's 8-key slices
  // (`split` warps of a row group, keys from `keyBase` on; canUseTensorCores
  // made the shares whole slices), all of them at once.
  const int64_t split = e.t.valueSplit;
  const int64_t slices = bn / 8 / split;
  Value keyBase;
  if (split > 1) {
    keyBase = laneConstant(e, "latentkeys", [&](GpuEmitter &h) {
      return h.mulIdx(h.t.valueSlice, 8 * slices);
    });
    bRow = laneConstant(e, "latentlo8", [&](GpuEmitter &h) {
      return h.add(h.remIdx(h.t.lane, h.idx(8)), keyBase);
    });
  }
  const int64_t group = e.t.scores ? slices : std::min<int64_t>(2, slices);
  // One k step of a group: its query fragment, then per slice the K
  // fragment and the mma.
  // Two slices at a time: one ldmatrix.x4 whose matrices 2 and 3 are the
  // next slice's 8 keys (lanes 16..31 give rows 8 further down), half the
  // instructions of two x2. (Matrices 0 and 1 must be one slice's: the
  // mma's B operand is a register pair.)
  Value bRowPair = laneConstant(e, "krow", [](GpuEmitter &h) {
    return h.add(h.mulIdx(h.divIdx(h.t.lane, h.idx(16)), 8),
                 h.remIdx(h.t.lane, h.idx(8)));
  });
  if (split > 1)
    bRowPair = laneConstant(e, "latentkrow", [&](GpuEmitter &h) {
      return h.add(bRowPair, keyBase);
    });
  Value bColPair = bCol;
  auto bPairType = VectorType::get({4, 2}, elt);
  // The fragments of the m16 tiles of the warp (one or two): a K fragment
  // feeds each tile's mma. `aRegs` holds 4 A registers per tile and the
  // carried C values are [tile][slice][4].
  const int64_t tiles = e.t.layout.mmaTiles();
  // k0: the step's first column (a constant), or `dynamicK0` in a loop.
  auto kStep = [&](int64_t j0, int64_t width, int64_t k0, Value dynamicK0,
                   ArrayRef<Value> aRegs, ValueRange c) {
    SmallVector<Value> next(c.begin(), c.end());
    for (int64_t j = 0; j < width; j += 2) {
      const bool pair = j + 1 < width;
      Value b = ldmatrixAt(
          e, pair ? bPairType : bType, e.t.stage, pair ? bRowPair : bRow,
          pair ? bColPair : bCol, 8 * (j0 + j), k0,
          /*transpose=*/false, /*numTiles=*/pair ? 4 : 2, dynamicK0);
      SmallVector<Value> regs = operandRegisters(e, b);
      for (int64_t tile = 0; tile < tiles; ++tile)
        for (int64_t h = 0; h < (pair ? 2 : 1); ++h) {
          const int64_t at = 4 * (tile * width + j + h);
          SmallVector<Value> d =
              emitMma(e, elt, aRegs.slice(4 * tile, 4),
                      ArrayRef<Value>(regs).slice(2 * h, 2), c.slice(at, 4));
          std::copy(d.begin(), d.end(), next.begin() + at);
        }
    }
    return next;
  };
  for (int64_t j0 = 0; j0 < slices; j0 += group) {
    const int64_t width = std::min(group, slices - j0);
    SmallVector<Value> init(4 * tiles * width, e.f32(0));
    SmallVector<Value> acc;
    if (e.t.qFragments) {
      // The query fragments are registers: the k steps unrolled (constant
      // indices).
      acc = init;
      for (int64_t kk = 0; kk < d / 16; ++kk) {
        SmallVector<Value> aRegs;
        for (int64_t tile = 0; tile < tiles; ++tile)
          for (int64_t i = 0; i < 4; ++i)
            aRegs.push_back(e.load(e.t.qFragments,
                                   {e.idx(tile * (d / 16) + kk), e.idx(i)}));
        acc = kStep(j0, width, 16 * kk, Value(), aRegs, acc);
      }
    } else {
      Value q16 = op.getQTile(); // in the operand type (assign-tile-layouts)
      SmallVector<QueryAddress, 2> qAt;
      for (int64_t tile = 0; tile < tiles; ++tile)
        qAt.push_back(queryAddress(e, tile));
      if (d / 16 <= 8 && e.t.leanAddresses) {
        // Unrolled (D <= 128): every address a base plus an immediate.
        acc = init;
        for (int64_t kk = 0; kk < d / 16; ++kk) {
          SmallVector<Value> aRegs;
          for (int64_t tile = 0; tile < tiles; ++tile)
            llvm::append_range(aRegs,
                               loadQueryFragment(e, q16, qAt[tile], 16 * kk));
          acc = kStep(j0, width, 16 * kk, Value(), aRegs, acc);
        }
      } else {
        acc = carry(e, d / 16, init, [&](Value kk, ValueRange c) {
          Value k0 = e.mulIdx(kk, 16);
          SmallVector<Value> aRegs;
          for (int64_t tile = 0; tile < tiles; ++tile)
            llvm::append_range(aRegs,
                               loadQueryFragment(e, q16, qAt[tile], 0, k0));
          return kStep(j0, width, 0, k0, aRegs, c);
        });
      }
    }
    // The lane's scores: rows g and g + 8 (k = i / 2), columns
    // 8j + 2q + {0, 1} (el = i % 2), into the lane's registers (small
    // tiles) or its entries of the score tile. The bare dot products when
    // the softmax folds the scale into its FFMA (Threads::rawScores), else
    // in base-2 units as the scalar lowering's.
    const FragmentLayout &layout = e.t.layout;
    const int regs = layout.registersPerSlice();
    for (int64_t tile = 0; tile < tiles; ++tile)
      for (int64_t j = 0; j < width; ++j)
        for (int i = 0; i < regs; ++i) {
          Value dot = acc[regs * (tile * width + j) + i];
          if (!dotFactors.empty()) // the FP8 K stage's exact codes
            dot = e.mulf(dot, dotFactors[layout.rowOfRegister(i, tile)]);
          Value s = e.t.rawScores ? dot : emitScaledScore(e, op, dot, kLog2E);
          if (split > 1) {
            // Into the shared score tile, at the warp's keys.
            Value r = e.ownedRow(layout.rowOfRegister(i, tile));
            Value c = e.add(keyBase,
                            e.accColumn(j0 + j, layout.elementOfRegister(i)));
            e.store(s, op.getScores(), {r, e.scoreColumn(r, c)});
            continue;
          }
          storeLaneScore(e, s, op.getScores(), layout.rowOfRegister(i, tile),
                         j0 + j, layout.elementOfRegister(i));
        }
  }
  // A value split: every warp of the row group has written its keys' scores
  // (and, before, read its last operand of the K stage: no warp waits for
  // it); each lane then reads all of its rows' scores into its registers,
  // after which the mask, the softmax and P.V run as without a split (the
  // row group's warps compute the same statistics). The next writes of the
  // tile come after the next block's first barrier.
  if (split > 1) {
    e.barrier();
    const FragmentLayout &layout = e.t.layout;
    for (int k = 0; k < layout.rowsPerLane; ++k) {
      Value r = e.ownedRow(k);
      for (int64_t j = 0; j < bn / 8; ++j)
        for (int el = 0; el < layout.elementsPerRow; ++el)
          e.storeScore(
              e.load(op.getScores(), {r, e.scoreColumn(r, e.accColumn(j, el))}),
              k, j, el);
    }
  }
  // -inf past the block's keys: only a block shorter than block-n (the
  // last one; the condition is the same for the whole program) pays for
  // the compares.
  e.when(e.lt(op.getCols(), e.idx(bn)), [&] {
    for (int64_t j = 0; j < bn / 8; ++j)
      for (int k = 0; k < e.t.layout.rowsPerLane; ++k)
        for (int el = 0; el < e.t.layout.elementsPerRow; ++el) {
          Value inside = e.lt(e.accColumn(j, el), op.getCols());
          if (e.t.scores) {
            e.storeScore(arith::SelectOp::create(
                             e.b, inside, e.loadScore(k, j, el), e.negInf()),
                         k, j, el);
            continue;
          }
          e.when(
              arith::XOrIOp::create(e.b, inside,
                                    arith::ConstantIntOp::create(e.b, 1, 1)),
              [&] { storeLaneScore(e, e.negInf(), op.getScores(), k, j, el); });
        }
  });
  // No barrier: the scores are the lane's own, and the next copy into the
  // K stage (the deferred tile.prefetch, or the next tile.qk) is issued
  // after the barrier of tile.softmax_update, which every warp reaches only
  // after its last ldmatrix of this block.
}

void mlir::kvattn::emitPVOnTensorCores(GpuEmitter &e, TileSoftmaxOp op,
                                       Value stage, ArrayRef<Value> alpha) {
  // The staged type (an FP8 cache's V is converted to the query's).
  Type elt = cast<MemRefType>(stage.getType()).getElementType();
  int64_t bn = cast<MemRefType>(op.getScores().getType()).getDimSize(1);
  // With a value split, the warp's Dv / split columns from `base` (the
  // latent form's V: columns of the K stage).
  const int64_t fullDv = cast<MemRefType>(op.getAcc().getType()).getDimSize(1);
  int64_t dv = fullDv / e.t.valueSplit;
  int64_t slices = dv / 8;
  Value base = e.valueColumnBase(fullDv);
  // ldmatrix.x2.trans addresses of B (V rows are k): row l % 16, the
  // slice's first column.
  Value bRow = laneConstant(
      e, "lo16", [](GpuEmitter &h) { return h.remIdx(h.t.lane, h.idx(16)); });
  auto bType = VectorType::get({2, 2}, elt);
  // Two 8-column slices at a time: ldmatrix.x4.trans, lanes 16..31 giving
  // the rows of the next slice (8 columns further).
  Value vColPair = laneConstant(e, "hi8", [](GpuEmitter &h) {
    return h.mulIdx(h.divIdx(h.t.lane, h.idx(16)), 8);
  });
  Value zero = laneConstant(e, "zero", [](GpuEmitter &h) { return h.idx(0); });
  if (e.t.valueSplit > 1) {
    vColPair = laneConstant(
        e, "latenthi8", [&](GpuEmitter &h) { return h.add(vColPair, base); });
    zero = base;
  }
  auto bPairType = VectorType::get({4, 2}, elt);
  auto pairType = VectorType::get({2}, elt);

  // The lane's accumulator entries, rescaled: for each 8-column slice xg,
  // c0..c3 = rows g, g + 8 and columns 8xg + 2q + {0, 1} (the private
  // accumulator's [k][xg][el]).
  // With two m16 tiles per warp the values are [tile][xg][c0..c3].
  SmallVector<Value> out;
  const FragmentLayout &layout = e.t.layout;
  const int64_t tiles = layout.mmaTiles();
  const int regsPerSlice = layout.registersPerSlice();
  for (int64_t tile = 0; tile < tiles; ++tile)
    for (int64_t xg = 0; xg < slices; ++xg)
      for (int i = 0; i < regsPerSlice; ++i) {
        const int k = layout.rowOfRegister(i, tile);
        out.push_back(
            e.mulf(alpha[k], e.loadAcc(k, xg, layout.elementOfRegister(i))));
      }
  // One k step (16 keys at k0 = 16kk): the probabilities of the lane's
  // rows, columns k0 + 2q + {0, 1} and + 8 — the lane's score entries of
  // slices 2kk and 2kk + 1 (the C fragment of Q.K^T is the A fragment of
  // P.V) — rounded to the operand type, then per 8-column slice of V an
  // ldmatrix.trans and an mma.
  // k0: the step's first key (a constant), or `dynamicK0` in a loop.
  auto step = [&](int64_t k0, Value dynamicK0,
                  function_ref<Value(int k, int64_t half, int el)> probability,
                  ValueRange c) {
    // The A registers a0a1 .. a6a7 of each m16 tile in the layout's order
    // (step 0: the slice within the step is `half`).
    SmallVector<Value> a;
    for (int64_t tile = 0; tile < tiles; ++tile)
      for (FragmentLayout::Entry entry :
           layout.aOperandEntries(/*kk=*/0, tile)) {
        Value p0 = arith::TruncFOp::create(
            e.b, elt, probability(entry.k, entry.slice, 0));
        Value p1 = arith::TruncFOp::create(
            e.b, elt, probability(entry.k, entry.slice, 1));
        a.push_back(operandRegister(e, vector::FromElementsOp::create(
                                           e.b, pairType, ValueRange{p0, p1})));
      }
    SmallVector<Value> next(c.begin(), c.end());
    for (int64_t xg = 0; xg < slices; xg += 2) {
      const bool pair = xg + 1 < slices;
      Value b;
      if (!dynamicK0) {
        b = ldmatrixAt(e, pair ? bPairType : bType, stage, bRow,
                       pair ? vColPair : zero, k0, 8 * xg, /*transpose=*/true,
                       /*numTiles=*/pair ? 4 : 2);
      } else {
        Value vRow = e.add(dynamicK0, bRow);
        Value col = e.idx(8 * xg);
        if (pair)
          col = e.add(col, vColPair);
        else if (e.t.valueSplit > 1)
          col = e.add(col, zero); // the warp's first column
        b = nvgpu::LdMatrixOp::create(
            e.b, pair ? bPairType : bType, stage,
            ValueRange{vRow, swizzledCol(e, stage, vRow, col)},
            /*transpose=*/true, /*numTiles=*/pair ? 4 : 2);
      }
      SmallVector<Value> regs = operandRegisters(e, b);
      for (int64_t tile = 0; tile < tiles; ++tile)
        for (int64_t h = 0; h < (pair ? 2 : 1); ++h) {
          const int64_t at = 4 * (tile * slices + xg + h);
          SmallVector<Value> d =
              emitMma(e, elt, ArrayRef<Value>(a).slice(4 * tile, 4),
                      ArrayRef<Value>(regs).slice(2 * h, 2), c.slice(at, 4));
          std::copy(d.begin(), d.end(), next.begin() + at);
        }
    }
    return next;
  };
  if (e.t.scores) {
    // Scores in registers: the steps unrolled (constant indices).
    for (int64_t kk = 0; kk < bn / 16; ++kk)
      out = step(
          16 * kk, Value(),
          [&](int k, int64_t half, int el) {
            return e.loadScore(k, 2 * kk + half, el);
          },
          out);
  } else {
    // Scores in the shared tile: a loop over the steps (fewer registers).
    Lane l = laneOf(e);
    out = carry(e, bn / 16, out, [&](Value kk, ValueRange c) {
      Value k0 = e.mulIdx(kk, 16);
      return step(
          0, k0,
          [&](int k, int64_t half, int el) {
            Value col =
                e.add(e.add(k0, e.mulIdx(l.q, 2)), e.idx(8 * half + el));
            Value r = e.ownedRow(k);
            return e.load(op.getScores(), {r, e.scoreColumn(r, col)});
          },
          c);
    });
  }
  for (int64_t tile = 0; tile < tiles; ++tile)
    for (int64_t xg = 0; xg < slices; ++xg)
      for (int i = 0; i < regsPerSlice; ++i)
        e.storeAcc(out[regsPerSlice * (tile * slices + xg) + i],
                   layout.rowOfRegister(i, tile), xg,
                   layout.elementOfRegister(i));
}
