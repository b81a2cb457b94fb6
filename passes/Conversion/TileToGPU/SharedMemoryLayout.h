//===- SharedMemoryLayout.h - tiles in shared memory ------------*- C++ -*-===//
//
// On the GPU every scratch tile of a program (the memref.alloca's that
// -kvattn-tile creates: query tile, scores, running max and sum,
// accumulator) lives in dynamic shared memory, followed by one staging
// buffer for a K or V block ([BN, max(D, Dv)] of the input element type).
// The outlining pass needs the total (the launch's dynamic shared memory
// and the manifest) and the GPU lowering needs the offsets; both call this.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_CONVERSION_SHAREDMEMORYLAYOUT_H
#define KVATTN_PASSES_CONVERSION_SHAREDMEMORYLAYOUT_H

#include "kvattn/Dialect/KVAttnAttrs.h"
#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Support/Schedule.h"
#include "passes/Conversion/Fp8.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/SmallVector.h"

namespace mlir {
namespace kvattn {

struct SharedMemoryLayout {
  /// The scratch allocas in walk order and their byte offsets.
  SmallVector<memref::AllocaOp> tiles;
  SmallVector<int64_t> offsets;
  /// The K/V staging block.
  int64_t stageOffset = 0;
  int64_t stageRows = 0, stageCols = 0;
  Type stageElementType;
  /// 16-bit K and V whose head dims are multiples of 8 (16-byte rows for
  /// cp.async): K is staged in [stageRows, keyCols] at stageOffset and V in
  /// its own [stageRows, valueCols] block at valueStageOffset, so the V
  /// block can be in flight while Q.K^T runs.
  bool separateValueStage = false;
  int64_t keyCols = 0, valueCols = 0, valueStageOffset = 0;
  int64_t totalBytes = 0;
  /// m16 tiles per warp (FragmentLayout::mmaTiles): 2 for 32-row warps.
  int64_t mmaTiles = 1;
  /// sm_90a's wgmma lowering: Q.K^T reads the query tile from shared
  /// memory (no query fragments in registers), so the scores and the
  /// accumulator may take all of keepScoresInRegisters's budget.
  bool wgmma = false;
  /// sm_90a's TMA ring (addTmaRing): K and V each in two stages (the
  /// second ones at these offsets, 1024-byte aligned) and the mbarriers,
  /// 8 bytes each: full K, full V, empty K, empty V, two of each.
  bool tmaRing = false;
  int64_t keyStage1Offset = 0, valueStage1Offset = 0, barrierOffset = 0;
  /// Stages of the V ring: 2, or 1 where a second V stage would cost a
  /// resident program per multiprocessor (addTmaRing); 0 in the latent
  /// form, whose V is the K stage.
  int64_t tmaValueStages = 2;
  /// The latent form (DeepSeek MLA, tile.softmax_update latent): V is the
  /// first Dv columns of the K stage, which has no V stage beside it;
  /// `valueCols` is then Dv. `latentStage`: a 16-bit K stage with 16-byte
  /// rows (cp.async), which the tensor cores read for both products.
  bool latent = false, latentStage = false;
  /// The warps that share each warp's rows (latentValueSplit): each owns
  /// valueCols / valueSplit output columns; the score tile then stays in
  /// shared memory, where the warps of a row group exchange their scores.
  /// On wgmma the sharing warps are whole warpgroups (warpgroup g owns
  /// slice g % valueSplit of row group g / valueSplit).
  int64_t valueSplit = 1;
  /// The score warpgroup of a wgmma value split (it computes all of a
  /// block's scores) gives the other warpgroups of its row group, in place
  /// of the score tile, the row maxima ([block-m] f32 at `exchangeOffset`;
  /// the row sums at the store) and the probabilities rounded to the 16-bit
  /// operand type (block-m x block-n of them, as the A fragments of P.V, at
  /// `exchangeProbsOffset`): docs/gpu-lowering.md, "The latent form on
  /// wgmma".
  bool shareExchange = false;
  int64_t exchangeOffset = 0, exchangeProbsOffset = 0;
};

/// The bytes of a share exchange (SharedMemoryLayout::shareExchange) for
/// `bm` rows and `bn` keys: the maxima, 16-byte aligned, then the
/// probabilities, padded to 1024 bytes (the K stage after it keeps the
/// 128-byte swizzle's alignment; schedule::latentWgmmaSharedBytes counts
/// the same).
inline int64_t shareExchangeBytes(int64_t bm, int64_t bn) {
  return ((bm * 4 + 15) / 16 * 16 + bm * bn * 2 + 1023) / 1024 * 1024;
}

/// Stages per ring of the TMA lowering and its mbarriers.
inline constexpr int64_t kTmaStages = 2;
/// The producer warpgroup of a TMA kernel (warp specialisation): its warps
/// follow the consumers' and only issue the rings' copies. With two consumer
/// warpgroups (384 threads, 168 registers each at entry) the producer gives
/// registers back and the consumers take them: setmaxnreg to 24 and 240
/// (128 x 24 + 256 x 240 <= 65,536).
inline constexpr int64_t kProducerWarps = 4;
inline constexpr int32_t kProducerRegisters = 24;
inline constexpr int32_t kConsumerRegisters = 240;
inline constexpr int64_t kTmaBarriers = 4 * kTmaStages;

/// The m16 tiles per warp a tile configuration asks for: 2 when block-m is
/// 32 x num-warps (FlashAttention-2's 128-row, 4-warp programs: each K/V
/// fragment loaded from shared memory feeds two mma), else 1.
inline int64_t mmaTilesPerWarp(TileConfigAttr config) {
  return config && config.getNumWarps() > 0 &&
                 config.getBlockM() == 32 * config.getNumWarps()
             ? 2
             : 1;
}

inline int64_t alignTo16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

/// Whether the program rooted at `root` is the latent form (DeepSeek MLA):
/// its tile.softmax_update reads V from the key cache (`latent`).
inline bool isLatentProgram(Operation *root) {
  return root
      ->walk([](TileSoftmaxOp op) {
        return op.getLatent() ? WalkResult::interrupt() : WalkResult::advance();
      })
      .wasInterrupted();
}

/// The warps that share each warp's query rows in a latent program: the
/// tile configuration's warps beyond block-m / 16 (schedule::latentBlocks
/// gives block-m / 16 x latentValueSplit(Dv)); 1 for any other program.
inline int64_t valueSplitOf(TileConfigAttr config, bool latent) {
  if (!latent || !config || config.getBlockM() % 16 != 0 ||
      config.getBlockM() == 0)
    return 1;
  const int64_t rowWarps = config.getBlockM() / 16;
  const int64_t warps = config.getNumWarps();
  return warps > rowWarps && warps % rowWarps == 0 ? warps / rowWarps : 1;
}

/// What a scratch tile holds, inferred from its uses by the tile ops: the
/// acc, max or sum of a tile.init, the tile of a tile.load_q, the scores of a
/// tile.qk; none for anything else. -kvattn-assign-tile-layouts writes it
/// as kvattn.tile_role (and refuses a tile with two roles or none); the
/// outlining, which runs before, infers it.
inline std::optional<TileRole> inferTileRole(memref::AllocaOp alloca) {
  std::optional<TileRole> role;
  Value tile = alloca.getResult();
  for (Operation *user : alloca->getUsers()) {
    if (auto init = dyn_cast<TileInitOp>(user)) {
      if (init.getAcc() == tile)
        return TileRole::accumulator;
      if (init.getMax() == tile || init.getSum() == tile)
        role = TileRole::row_stats;
    } else if (auto load = dyn_cast<TileLoadQOp>(user)) {
      if (load.getQTile() == tile && !role)
        role = TileRole::query;
    } else if (auto qk = dyn_cast<TileQKOp>(user)) {
      if (qk.getScores() == tile && !role)
        role = TileRole::scores;
    }
  }
  return role;
}

/// The role of a tile as a layout computation sees it: inferTileRole
/// before -kvattn-assign-tile-layouts, getTileRole (the attribute) after.
using TileRoleFn =
    llvm::function_ref<std::optional<TileRole>(memref::AllocaOp)>;

inline std::optional<TileRole> tileRoleAttrOf(memref::AllocaOp alloca) {
  return getTileRole(alloca);
}

/// The type an FP8 cache is staged in under `root`, converted by the
/// hardware's cvt.rn.f16x2.{e4m3x2,e5m2x2} or the software decode: f16 where
/// the stage holds the exact codes (no scale, or one per tensor or per KV
/// head that foldedKvScale applies outside it; every FP8 value is an f16)
/// and the query is f16, or bf16 without RoPE — tile.load_q's lowering
/// then converts it into f16 for the tensor cores (queryConvertsToF16; the
/// rotation's element-wise path does not) — else the query's type
/// (per-token scales multiply each row before it is stored: bf16's range,
/// not f16's). Null without a query.
inline Type fp8StageType(Operation *root) {
  Type query;
  bool rope = false;
  root->walk([&](TileLoadQOp op) {
    query = cast<MemRefType>(op.getQuery().getType()).getElementType();
    rope |= static_cast<bool>(op.getRopeAttr());
  });
  if (!query || !(query.isBF16() || query.isF16()) || (query.isBF16() && rope))
    return query;
  bool uniform = true;
  root->walk([&](TileQKOp op) {
    uniform &= !op.getKvScale() || isUniformKvScale(op.getKvScale());
  });
  root->walk([&](TileSoftmaxOp op) {
    uniform &= !op.getKvScale() || isUniformKvScale(op.getKvScale());
  });
  return uniform ? FloatType(Float16Type::get(root->getContext())) : query;
}

/// Whether tile.load_q's lowering converts a tensor-core kernel's query of
/// type `query` into the stage's type `stage`: a bf16 query and the f16
/// stage of an FP8 cache (fp8StageType; its rows scaled by powers of two
/// that keep them finite in f16).
inline bool queryConvertsToF16(Type query, Type stage) {
  return query.isBF16() && stage.isF16();
}
/// Whether the query reaches the mma in the stage's type: its own, or
/// converted (queryConvertsToF16).
inline bool queryReachesStageType(Type query, Type stage) {
  return query == stage || queryConvertsToF16(query, stage);
}

/// Computes the layout of the program rooted at `root` (an scf.forall body
/// or a kernel). Fails when the program has no tile.qk / softmax_update
/// (nothing to stage) or a tile has a dynamic shape.
/// With `privateScores` (the tensor-core lowering) the score tile gets no
/// shared memory either; with `query16` (tensor cores) the query tile
/// takes the bytes of its rows in the 16-bit K/V type, not in f32, and the
/// row statistics (registers on tensor cores) none.
inline FailureOr<SharedMemoryLayout> computeSharedMemoryLayout(
    Operation *root, bool privateScores = false, bool query16 = false,
    TileRoleFn roleOf = inferTileRole, bool shareExchange = false) {
  SharedMemoryLayout layout;
  layout.shareExchange = shareExchange;
  int64_t offset = 0;
  bool ok = true;
  int64_t rows = 0, keyCols = 0, valueCols = 0;
  Type elementType;
  root->walk([&](TileQKOp op) {
    auto scores = cast<MemRefType>(op.getScores().getType());
    auto key = cast<MemRefType>(op.getKey().getType());
    rows = std::max(rows, scores.getDimSize(1));
    keyCols = std::max(keyCols, key.getDimSize(3));
    elementType = key.getElementType();
  });
  // An FP8 cache is staged converted (fp8StageType).
  if (elementType && isa<Float8E4M3FNType, Float8E5M2Type>(elementType))
    elementType = fp8StageType(root);
  // The latent form's V is the K stage's first Dv columns (the
  // accumulator's width): no V stage of its own.
  const bool latent = isLatentProgram(root);
  root->walk([&](TileSoftmaxOp op) {
    auto value = cast<MemRefType>(latent ? op.getAcc().getType()
                                         : op.getValue().getType());
    valueCols = std::max(valueCols, value.getDimSize(latent ? 1 : 3));
  });
  if (!elementType || ShapedType::isDynamic(keyCols) ||
      ShapedType::isDynamic(valueCols))
    return failure();
  const int64_t eltBytes = elementType.getIntOrFloatBitWidth() / 8;
  root->walk([&](memref::AllocaOp alloca) {
    // The accumulator is per thread (registers), not shared.
    std::optional<TileRole> role = roleOf(alloca);
    if (role == TileRole::accumulator ||
        (privateScores && role == TileRole::scores) ||
        (query16 && role == TileRole::row_stats))
      return;
    MemRefType type = alloca.getType();
    if (!type.hasStaticShape() || !type.getElementType().isIntOrFloat()) {
      ok = false;
      return;
    }
    const int64_t bits = query16 && eltBytes == 2 && role == TileRole::query
                             ? 16
                             : type.getElementType().getIntOrFloatBitWidth();
    if (shareExchange && role == TileRole::scores) {
      // The share exchange replaces the [block-m, block-n] f32 score tile
      // (which gets no shared memory: the lowering erases it).
      layout.exchangeOffset = offset;
      layout.exchangeProbsOffset = offset + alignTo16(type.getDimSize(0) * 4);
      offset += shareExchangeBytes(type.getDimSize(0), type.getDimSize(1));
      return;
    }
    layout.tiles.push_back(alloca);
    layout.offsets.push_back(offset);
    offset += alignTo16(type.getNumElements() * bits / 8);
  });
  if (!ok)
    return failure();
  layout.stageOffset = offset;
  layout.stageRows = rows;
  layout.stageCols = std::max(keyCols, valueCols);
  layout.stageElementType = elementType;
  layout.keyCols = keyCols;
  layout.valueCols = valueCols;
  layout.latent = latent;
  layout.valueSplit = valueSplitOf(getTileConfig(root), latent);
  layout.latentStage =
      latent && eltBytes == 2 && keyCols % 8 == 0 && valueCols % 8 == 0;
  layout.separateValueStage =
      !latent && eltBytes == 2 && keyCols % 8 == 0 && valueCols % 8 == 0;
  if (layout.latentStage)
    layout.stageCols = keyCols;
  if (layout.separateValueStage) {
    layout.stageCols = keyCols;
    layout.valueStageOffset = offset + alignTo16(rows * keyCols * eltBytes);
    layout.totalBytes =
        layout.valueStageOffset + alignTo16(rows * valueCols * eltBytes);
  } else {
    layout.totalBytes = offset + alignTo16(rows * layout.stageCols * eltBytes);
  }
  return layout;
}

/// Whether the tensor-core lowering applies to a program with this layout:
/// 16-bit K and V with 16-byte rows (separate stages), D a multiple of 16
/// (the k of m16n8k16) and block-n a multiple of 16.
/// A latent program also needs Dv / valueSplit a multiple of 16 (each
/// warp's output columns in pairs of 8-column slices) and, with a value
/// split, block-n / 8 a multiple of it (each warp's keys of Q.K^T whole
/// 8-key slices).
inline bool canUseTensorCores(const SharedMemoryLayout &layout) {
  if (layout.latent && (!layout.latentStage ||
                        layout.valueCols % (16 * layout.valueSplit) != 0 ||
                        (layout.stageRows / 8) % layout.valueSplit != 0))
    return false;
  return (layout.separateValueStage || layout.latentStage) &&
         layout.keyCols % 16 == 0 && layout.stageRows % 16 == 0;
}

/// Whether the tensor-core lowering keeps each warp's query A fragments in
/// registers for the whole program (D / 4 per lane and m16 tile: 32 at
/// D = 128) instead of reading them from the shared query tile in every KV
/// block: up to 32 registers (D = 128 with 16-row warps, D = 64 with
/// 32-row warps; at D = 256 they would take 64 registers beside a
/// 128-register accumulator).
inline bool keepQueryInRegisters(const SharedMemoryLayout &layout) {
  return canUseTensorCores(layout) && !layout.wgmma &&
         layout.mmaTiles * layout.keyCols / 4 <= 32;
}

/// Whether the tensor-core lowering also keeps the lane's scores in
/// registers (the score tile then gets no shared memory): when they, the
/// accumulator and the query fragments (`BN / 2 + Dv / 2 + D / 4` 32-bit
/// registers per lane and m16 tile) stay within 128 for a 16-row warp,
/// which leaves room below ptxas's 255 for the K/V operand fragments and
/// the addresses: 64-key blocks up to D = Dv = 128, 32-key blocks (decode)
/// at D = 128. A 16-row warp whose query fragments are read from shared
/// memory in every block (D > 128) may take 160: at D = Dv = 256 the 128
/// accumulator and 16 (32-key blocks) or 32 (64-key blocks) score
/// registers, FlashAttention-2's hd256 budget (ptxas: 239-251 registers, 0
/// spills on sm_80/86/89/90; test/Target/ptxas-hd256.test). A 32-row warp
/// (two m16 tiles) may take 192 — 64 x 64 blocks at D = 128 with the query
/// fragments read from shared memory in every block, FlashAttention-2's
/// sm_80 budget — since nothing else grows with its rows but the row
/// statistics. Larger tiles keep the scores in shared memory (and only
/// 16-row warps take them).
inline bool keepScoresInRegisters(const SharedMemoryLayout &layout) {
  // A value split exchanges the scores through the shared score tile.
  if (layout.valueSplit > 1)
    return false;
  const int64_t query =
      keepQueryInRegisters(layout) ? layout.mmaTiles * layout.keyCols / 4 : 0;
  // (wgmma: the consumers' 240 registers, no query fragments, no ldmatrix
  // addresses; schedule::kWgmmaDataRegisters.)
  const int64_t budget = layout.wgmma           ? schedule::kWgmmaDataRegisters
                         : layout.mmaTiles == 1 ? (query ? 128 : 160)
                                                : 192;
  return canUseTensorCores(layout) &&
         layout.mmaTiles * (layout.stageRows / 2 + layout.valueCols / 2) +
                 query <=
             budget;
}

/// The data registers a lane of a tensor-core program keeps across the KV
/// loop: its accumulator (Dv / valueSplit / 2 per m16 tile, or per wgmma
/// warpgroup's 64 rows), its private scores (block-n / 2: `scores`, or a
/// value split's exchanged scores) and its query fragments (D / 4 per m16
/// tile: `query`).
inline int64_t laneDataRegisters(const SharedMemoryLayout &layout, bool scores,
                                 bool query) {
  const int64_t valueSplit = std::max<int64_t>(layout.valueSplit, 1);
  int64_t registers = layout.mmaTiles * (layout.valueCols / valueSplit / 2);
  if (scores || valueSplit > 1)
    registers += layout.mmaTiles * (layout.stageRows / 2);
  if (query)
    registers += layout.mmaTiles * (layout.keyCols / 4);
  return registers;
}

/// Intra-warpgroup overlap (docs/gpu-lowering.md) keeps a block's
/// probabilities, packed to 16-bit pairs (block-n / 4 registers), beside the
/// next block's scores and the accumulator: only on wgmma programs with
/// their scores in registers where the three fit the consumers' data
/// registers (schedule::kWgmmaDataRegisters): hd 64 and 128 with 128-key
/// blocks (128 and 160), not hd 192 or 256 (168 and 176: ptxas spilled 4
/// bytes at hd 256, test/Target/ptxas-hd256.test).
inline bool fitsDeferredPV(const SharedMemoryLayout &layout, bool scores) {
  return layout.wgmma && scores &&
         laneDataRegisters(layout, scores, /*query=*/false) +
                 layout.stageRows / 4 <=
             schedule::kWgmmaDataRegisters;
}

/// Lazy rescaling (docs/gpu-lowering.md) only where a lane's data
/// registers (laneDataRegisters) are at most this many: it adds per-row
/// flags and a branch, which ptxas spilled in the 128-row D = 128 kernels
/// of 64-key blocks (192 data registers) on sm_80 and sm_90.
inline constexpr int64_t kLazyRescaleRegisters = 160;

/// The layout of a program lowered on tensor cores (canUseTensorCores of
/// its generic layout) with `mmaTiles` m16 tiles per warp: the query tile
/// in 16 bits, no row statistics and, where keepScoresInRegisters allows,
/// no score tile. With `wgmma` (the sm_90a lowering) the query stays in
/// shared memory (SharedMemoryLayout::wgmma).
inline FailureOr<SharedMemoryLayout>
computeTensorCoreLayout(Operation *root, int64_t mmaTiles = 1,
                        bool wgmma = false, TileRoleFn roleOf = inferTileRole) {
  FailureOr<SharedMemoryLayout> layout = computeSharedMemoryLayout(
      root, /*privateScores=*/false, /*query16=*/true, roleOf);
  if (failed(layout))
    return layout;
  layout->mmaTiles = mmaTiles;
  layout->wgmma = wgmma;
  // The warpgroups of a wgmma value split exchange row maxima and
  // probabilities instead of keeping a score tile
  // (SharedMemoryLayout::shareExchange).
  if (wgmma && layout->valueSplit > 1) {
    layout = computeSharedMemoryLayout(root, /*privateScores=*/false,
                                       /*query16=*/true, roleOf,
                                       /*shareExchange=*/true);
    layout->mmaTiles = mmaTiles;
    layout->wgmma = wgmma;
    return layout;
  }
  if (keepScoresInRegisters(*layout)) {
    layout = computeSharedMemoryLayout(root, /*privateScores=*/true,
                                       /*query16=*/true, roleOf);
    layout->mmaTiles = mmaTiles;
    layout->wgmma = wgmma;
  }
  return layout;
}

/// The name of the unit attribute with which -kvattn-outline-tile-programs
/// marks kernels that -kvattn-lower-tile-to-gpu lowers on tensor cores.
inline constexpr llvm::StringLiteral kTensorCoresAttr = "kvattn.tensor_cores";

/// The unit attribute of kernels lowered with sm_90a's wgmma (WgmmaTiles.cpp;
/// set with kTensorCoresAttr when the chip is sm_90a and canUseWgmma).
inline constexpr llvm::StringLiteral kWgmmaAttr = "kvattn.wgmma";

/// Whether the wgmma lowering takes a tensor-core program with this layout
/// and `numWarps` 16-row warps: whole warpgroups (a multiple of 4 warps of
/// 16 rows: m64 per warpgroup), D and Dv multiples of 64 up to 256
/// (64-column panels, N of P.V), block-n a multiple of 16 up to 256 (N of
/// Q.K^T), the scores in registers (the accumulator of Q.K^T is the A operand
/// of P.V), and the query tile and both stages 1024-byte aligned (the 128-byte
/// swizzle's pattern; the dynamic shared memory is 1024-aligned on sm_90a).
/// Other programs keep mma.sync, assembled for sm_90a.
inline bool canUseWgmma(const SharedMemoryLayout &layout, int64_t numWarps,
                        TileRoleFn roleOf = inferTileRole) {
  auto panelled = [](int64_t cols) {
    return cols > 0 && cols % 64 == 0 && cols <= 256;
  };
  // The latent form (V = the K stage's first Dv columns): any D of whole
  // panels (Q.K^T chains D / 16 steps), each warpgroup's Dv / valueSplit
  // columns one P.V's N (the block's keys whole k16 steps of P.V, below),
  // and whole warpgroups per value slice (numWarps = 4 x row groups x
  // valueSplit).
  const int64_t split = std::max<int64_t>(layout.valueSplit, 1);
  const bool columns =
      layout.latent ? layout.keyCols % 64 == 0 && layout.keyCols > 0 &&
                          layout.valueCols % split == 0 &&
                          panelled(layout.valueCols / split) &&
                          numWarps % (4 * split) == 0 && layout.latentStage
                    : panelled(layout.keyCols) && panelled(layout.valueCols);
  // The scores in registers (the accumulator of Q.K^T is the A operand of
  // P.V); with a value split the score warpgroup's, given to the others
  // through the share exchange.
  const bool scores =
      split > 1 ? layout.shareExchange : keepScoresInRegisters(layout);
  if (!columns || !canUseTensorCores(layout) || layout.mmaTiles != 1 ||
      numWarps <= 0 || numWarps % 4 != 0 || layout.stageRows % 16 != 0 ||
      layout.stageRows > 256 || !scores || layout.stageOffset % 1024 != 0 ||
      layout.valueStageOffset % 1024 != 0)
    return false;
  for (auto [alloca, offset] : llvm::zip(layout.tiles, layout.offsets))
    if (roleOf(alloca) == TileRole::query && offset % 1024 != 0)
      return false;
  return true;
}

/// The unit attribute of wgmma kernels whose K and V arrive by TMA through
/// an mbarrier ring (WgmmaTiles.cpp; set by the outlining with kWgmmaAttr
/// where canUseTmaRing).
inline constexpr llvm::StringLiteral kTmaAttr = "kvattn.tma";

/// The bytes a CTA may use on sm_90 (227 KB).
inline constexpr int64_t kHopperSharedMemoryBytes = 227 * 1024;

/// Adds the TMA ring's second K and V stages and its mbarriers after the
/// tiles of a wgmma layout. `twoValueStages`: keep two V stages wherever
/// they fit in 227 KB (the schedule's two-value-stages, for kernels with a
/// producer warpgroup, which are bound to one CTA per multiprocessor by
/// their registers: docs/gpu-lowering.md, "The TMA ring as built").
inline void addTmaRing(SharedMemoryLayout &layout,
                       bool twoValueStages = false) {
  const int64_t eltBytes = layout.stageElementType.getIntOrFloatBitWidth() / 8;
  auto align1024 = [](int64_t v) { return (v + 1023) / 1024 * 1024; };
  layout.tmaRing = true;
  layout.keyStage1Offset = align1024(layout.totalBytes);
  // The latent form's V is the K stage: a K ring only.
  if (layout.latent) {
    layout.tmaValueStages = 0;
    layout.valueStage1Offset = layout.keyStage1Offset;
    layout.barrierOffset = align1024(
        layout.keyStage1Offset + layout.stageRows * layout.keyCols * eltBytes);
    layout.totalBytes = layout.barrierOffset + 8 * kTmaBarriers;
    return;
  }
  layout.valueStage1Offset = align1024(
      layout.keyStage1Offset + layout.stageRows * layout.keyCols * eltBytes);
  layout.barrierOffset =
      align1024(layout.valueStage1Offset +
                layout.stageRows * layout.valueCols * eltBytes);
  layout.totalBytes = layout.barrierOffset + 8 * kTmaBarriers;
  // One V stage where two would leave fewer programs per multiprocessor
  // (hd 128: 80 KB -> 64 KB, 2 -> 3 programs): without a producer warp the
  // V block is issued at its Q.K^T, after every warp released the previous
  // one, so a second V stage buys no overlap.
  const int64_t oneValueStage = layout.valueStage1Offset + 8 * kTmaBarriers;
  const bool fewerPrograms = kHopperSharedMemoryBytes / layout.totalBytes <
                             kHopperSharedMemoryBytes / oneValueStage;
  if (layout.totalBytes > kHopperSharedMemoryBytes ||
      (fewerPrograms && !twoValueStages)) {
    layout.tmaValueStages = 1;
    layout.barrierOffset = layout.valueStage1Offset;
    layout.valueStage1Offset = layout.valueStageOffset;
    layout.totalBytes = layout.barrierOffset + 8 * kTmaBarriers;
  }
}

/// The rows of one TMA box of a paged cache with static page size
/// `pageSize` and blocks of `bn` keys: the block (one box per page-block)
/// when the page is a multiple of it, the page (bn / pageSize boxes per
/// block, one per page, each 8-row aligned in the stage so that the
/// 128-byte swizzle's pattern is the stage's) when it divides the block in
/// whole swizzle atoms; 0 otherwise (the cp.async staging).
inline int64_t tmaPageBoxRows(int64_t pageSize, int64_t bn) {
  if (ShapedType::isDynamic(pageSize) || pageSize <= 0 || bn <= 0)
    return 0;
  if (pageSize % bn == 0)
    return bn;
  return bn % pageSize == 0 && pageSize % 8 == 0 ? pageSize : 0;
}

/// Whether the K and V of a wgmma program (its tile ops under `root`) can
/// arrive by TMA: contiguous 16-bit [B, Hkv, S, D] caches (also the ragged
/// [1, Hkv, N, D] and cache_batch_idx [C, Hkv, S, D] ones: one box of
/// block-n rows per 64 columns at (x, row, head, batch)), no key-validity
/// flags (an invalid key's V row must be zero, which cp.async's src-size 0
/// gives), a static S no smaller than block-n (the box), and the ring
/// within the shared memory (`layoutWithRing`). Paged caches take it when
/// their page size is static and a multiple of block-n (one box per
/// page-block) or a divisor of it in multiples of 8 rows (one box per page:
/// tmaPageBoxRows); other page sizes keep cp.async.
inline bool canUseTmaRing(Operation *root,
                          const SharedMemoryLayout &layoutWithRing) {
  if (layoutWithRing.totalBytes > kHopperSharedMemoryBytes)
    return false;
  const int64_t bn = layoutWithRing.stageRows;
  bool ok = true;
  auto contiguous = [&](Value cache, Value blockTable) {
    auto type = cast<MemRefType>(cache.getType());
    // (An FP8 cache is converted while staged: no TMA.)
    if (type.getRank() != 4 || !type.getLayout().isIdentity() ||
        ShapedType::isDynamic(type.getDimSize(3)) ||
        type.getElementType() != layoutWithRing.stageElementType)
      ok = false;
    else if (blockTable) // [pages, page_size, Hkv, D]
      ok &= tmaPageBoxRows(type.getDimSize(1), bn) > 0;
    else if (!ShapedType::isDynamic(type.getDimSize(2)) &&
             type.getDimSize(2) < bn)
      ok = false;
  };
  root->walk([&](Operation *op) {
    if (auto qk = dyn_cast<TileQKOp>(op))
      contiguous(qk.getKey(), qk.getBlockTable());
    else if (auto prefetch = dyn_cast<TilePrefetchOp>(op))
      contiguous(prefetch.getKey(), prefetch.getBlockTable());
    else if (auto softmax = dyn_cast<TileSoftmaxOp>(op)) {
      contiguous(softmax.getValue(), softmax.getBlockTable());
      if (softmax.getKeyValid())
        ok = false;
    }
  });
  return ok;
}

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_SHAREDMEMORYLAYOUT_H
