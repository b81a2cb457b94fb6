//===- OutlineTilePrograms.cpp - tile programs -> GPU kernels -------------===//
//
// Each program instance of the tile program becomes one thread block. The
// program body is moved as is (its KV-block range, full/partial split and
// online softmax are not rewritten); only its operands change, from the
// host's buffers to views rebuilt from kernel parameters.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"
#include "kvattn/Support/Limits.h"
#include "passes/Conversion/TileToGPU/SharedMemoryLayout.h"
#include "passes/GPU/KernelAbi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/StringSwitch.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_OUTLINETILEPROGRAMSPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

/// The operand roles in kernel-parameter order.
static const char *const kRoles[] = {
    "query",        "key",     "value",        "q_offset",   "k_offset",
    "q_pos",        "k_pos",   "kv_len",       "key_valid",  "mask",
    "block_table",  "q_start", "out",          "lse",        "out_parts",
    "lse_parts",    "sinks",   "alibi_slopes", "k_start",    "cache_batch_idx",
    "tree_parents", "k_scale", "v_scale",      "k_rope_pos", "rotary_cos",
    "rotary_sin"};
/// The sizes a kernel may take after its pointers.
static const char *const kSizes[] = {"B",
                                     "Hq",
                                     "Hkv",
                                     "L",
                                     "S",
                                     "num_pages",
                                     "page_size",
                                     "max_pages",
                                     "B+1",
                                     "N",
                                     "cache_rows",
                                     "P",
                                     "prefix_num_pages",
                                     "prefix_page_size",
                                     "prefix_max_pages"};
/// kBPlus1 is no parameter: the length of q_start, named in the manifest.
/// kN: a run-time split's chunk count (the part buffers' leading dim).
enum SizeIndex {
  kB,
  kHq,
  kHkv,
  kL,
  kS,
  kNumPages,
  kPageSize,
  kMaxPages,
  kBPlus1,
  kN,
  kCacheRows,
  /// A cascade's shared prefix keys (its prefix kernel's S).
  kP,
  /// A paged prefix (prefix_pages): its pool [prefix_num_pages,
  /// prefix_page_size, Hkv, D] and its table [1, prefix_max_pages].
  kPrefixNumPages,
  kPrefixPageSize,
  kPrefixMaxPages
};

/// Where K and V hold a batch's keys: [B, Hkv, S, D] (or pages), packed
/// ragged keys [1, Hkv, S = N, D] (k_start), or cache rows
/// [cache_rows, Hkv, S, D] (cache_batch_idx).
enum class KeyLayout { plain, packed, cacheRows };

static KeyLayout keyLayoutOf(const llvm::StringMap<Value> &buffers) {
  if (buffers.count("k_start"))
    return KeyLayout::packed;
  if (buffers.count("cache_batch_idx"))
    return KeyLayout::cacheRows;
  return KeyLayout::plain;
}

/// The symbolic shape of an operand: each dimension is one of the sizes, or
/// -1 for a static dimension (head dims, broadcast dims of the mask); the
/// split count of the partial states is N (dynamic with a run-time split).
static SmallVector<int> symbolicShape(StringRef role, int64_t rank, bool paged,
                                      KeyLayout keys = KeyLayout::plain,
                                      bool prefix = false) {
  // A cascade's prefix kernel: the shared prefix [1, Hkv, P, D], or its
  // pool [prefix_num_pages, prefix_page_size, Hkv, D] read through the
  // one-sequence table [1, prefix_max_pages] (prefix_pages) of prefix_len
  // [1] keys.
  if (prefix && (role == "key" || role == "value"))
    return paged ? SmallVector<int>{kPrefixNumPages, kPrefixPageSize, kHkv, -1}
                 : SmallVector<int>{-1, kHkv, kP, -1};
  if (prefix && role == "block_table")
    return {-1, kPrefixMaxPages};
  if (prefix && role == "kv_len")
    return {-1};
  if (role == "query")
    return {kB, kHq, kL, -1};
  if (role == "key" || role == "value") {
    if (keys == KeyLayout::packed) // [1, Hkv, N, D]: dim 0 is static
      return {-1, kHkv, kS, -1};
    if (keys == KeyLayout::cacheRows)
      return {kCacheRows, kHkv, kS, -1};
    return paged ? SmallVector<int>{kNumPages, kPageSize, kHkv, -1}
                 : SmallVector<int>{kB, kHkv, kS, -1};
  }
  if (role == "cache_batch_idx")
    return {kB};
  if (role == "block_table")
    return {kB, kMaxPages};
  if (role == "q_offset" || role == "k_offset" || role == "kv_len")
    return {kB};
  if (role == "q_start" || role == "k_start") // [B + 1]: see rebuildView
    return {kBPlus1};
  if (role == "q_pos")
    return {kB, kL};
  if (role == "tree_parents") // [T]: the packed rows
    return {kL};
  if (role == "k_pos" || role == "key_valid" || role == "k_rope_pos")
    return {kB, kS};
  if (role == "rotary_cos" || role == "rotary_sin") // [P, R/2], static
    return {-1, -1};
  if (role == "out")
    return {kB, kHq, kL, -1};
  if (role == "lse")
    return {kB, kHq, kL};
  if (role == "out_parts")
    return {kN, kB, kHq, kL, -1};
  if (role == "lse_parts")
    return {kN, kB, kHq, kL};
  if (role == "sinks" || role == "alibi_slopes")
    return {kHq};
  if (role == "k_scale" || role == "v_scale") {
    // Per tensor [1] (or rank 0), per KV head [Hkv], or per token and head:
    // the cache's shape without D.
    if (rank == 0)
      return {};
    if (rank == 1) // [1] is static: only [Hkv] can be dynamic
      return {static_cast<int>(kHkv)};
    SmallVector<int> rows = symbolicShape("key", 4, paged, keys);
    rows.pop_back();
    return rows;
  }
  // mask: right-aligned against [B, Hq, L, S].
  SmallVector<int> full = {kB, kHq, kL, kS};
  return SmallVector<int>(full.end() - rank, full.end());
}

/// The kernel-parameter name of a cascade's prefix kernel's operand `role`:
/// its K/V and a paged prefix's table and length are the cascade's own
/// operands (docs/kernel-abi.md, "Cascade kernels").
static StringRef prefixParameterName(StringRef role) {
  return llvm::StringSwitch<StringRef>(role)
      .Case("key", "prefix_key")
      .Case("value", "prefix_value")
      .Case("block_table", "prefix_pages")
      .Case("kv_len", "prefix_len")
      .Default(role);
}

/// A row-major view of `ptr` (memref<1xT>) with the operand's shape.
static Value rebuildView(ImplicitLocOpBuilder &b, Value ptr, MemRefType type,
                         StringRef role, ArrayRef<Value> sizes, bool paged,
                         KeyLayout keys, bool prefix) {
  SmallVector<int> symbolic =
      symbolicShape(role, type.getRank(), paged, keys, prefix);
  if (role != "q_start" && role != "k_start")
    return rebuildRowMajorView(b, ptr, type, symbolic, sizes);
  // q_start (k_start) holds B + 1 entries: a size computed here, not a
  // parameter.
  SmallVector<Value> withCount(sizes.begin(), sizes.end());
  withCount[kBPlus1] =
      arith::AddIOp::create(b, sizes[kB], arith::ConstantIndexOp::create(b, 1));
  return rebuildRowMajorView(b, ptr, type, symbolic, withCount);
}

static LogicalResult outlineProgram(scf::ForallOp forall,
                                    gpu::GPUModuleOp gpuModule,
                                    StringRef kernelName, bool tensorCores,
                                    bool wgmma, bool producerWarpgroup,
                                    bool heaviestFirst, bool twoValueStages) {
  TileConfigAttr config = getTileConfig(forall);
  MLIRContext *ctx = forall.getContext();
  // An attention program (grid: programs x query blocks [x KV chunks]) or
  // the merge program of a split (grid: B * Hq x query blocks).
  const bool isMerge = config.getKind() == KernelKind::merge;
  // A cascade's B = 1 programs: the attention over the shared prefix (its
  // keys are P, not S) and the merge of its two parts.
  auto cascade = forall->getAttrOfType<StringAttr>(kCascadeAttr);
  const bool prefix = cascade && cascade.getValue() == "prefix";

  // What the program uses from outside: operand buffers and constants.
  SetVector<Value> captured;
  getUsedValuesDefinedAbove(forall.getRegion(), captured);
  llvm::StringMap<Value> buffers;
  SmallVector<Value> constants;
  for (Value v : captured) {
    Operation *def = v.getDefiningOp();
    std::optional<BufferRole> role = def ? getBufferRole(def) : std::nullopt;
    if (role) {
      buffers[stringifyBufferRole(*role)] = v;
    } else if (def && def->hasTrait<OpTrait::ConstantLike>()) {
      constants.push_back(v);
    } else {
      return forall.emitOpError()
             << "kvattn-outline-tile-programs: the program uses a value that "
                "is neither an operand buffer nor a constant";
    }
  }
  // RoPE's record is a parameter now (for the validation kernel of device
  // validation); the program reads nothing of it.
  SmallVector<TileKeyRecordOp> records;
  forall.walk([&](TileKeyRecordOp record) { records.push_back(record); });
  for (TileKeyRecordOp record : records)
    record.erase();
  if (isMerge ? !buffers.count("out_parts") || !buffers.count("lse_parts") ||
                    !buffers.count("out")
              : !buffers.count("query") || !buffers.count("key") ||
                    (!buffers.count("out") && !buffers.count("out_parts")))
    return forall.emitOpError()
           << "kvattn-outline-tile-programs: not a kvattn tile program (no "
           << (isMerge ? "out_parts/lse_parts/out" : "query/key/out") << ")";
  // GPU limits on the head dims, before any lowering. The latent form
  // (DeepSeek MLA: V is the key cache's first Dv columns, D = 576 with
  // Dv = 512) has its own: its value split keeps the accumulator of a wide
  // Dv within the registers (docs/gpu-lowering.md, "The latent form"); the
  // merge of a split costs no more per column at any Dv.
  const bool latent = !isMerge && isLatentProgram(forall);
  const int64_t maxHeadDim = latent || isMerge
                                 ? ::mlir::kvattn::limits::kMaxGpuLatentHeadDim
                                 : ::mlir::kvattn::limits::kMaxGpuHeadDim;
  for (StringRef role : {"query", "value", "out_parts"}) {
    auto it = buffers.find(role);
    if (it == buffers.end())
      continue;
    auto type = cast<MemRefType>(it->second.getType());
    int64_t dim = type.getDimSize(type.getRank() - 1);
    if (ShapedType::isStatic(dim) && dim > maxHeadDim)
      return forall.emitOpError()
             << "kvattn-outline-tile-programs: GPU kernels take head dims up "
                "to "
             << maxHeadDim << (latent ? " in the latent form" : "") << ", the "
             << role << " has " << dim << " (docs/robustness.md)";
  }
  // RoPE's tables: their rows are compiled in (a model's table,
  // FlashAttention's [seqlen_ro, rotary_dim / 2], has a fixed size).
  for (StringRef role : {"rotary_cos", "rotary_sin"}) {
    auto it = buffers.find(role);
    if (it != buffers.end() &&
        !cast<MemRefType>(it->second.getType()).hasStaticShape())
      return forall.emitOpError()
             << "kvattn-outline-tile-programs: " << role
             << " needs a static shape [P, rotary_dim / 2] on the GPU (the "
                "kernel compiles the table's rows in)";
  }
  int64_t sharedMemoryBytes = 0;
  bool useTensorCores = false, useWgmma = false, useTma = false;
  int64_t tmaBlockN = 0;
  if (!isMerge) {
    FailureOr<SharedMemoryLayout> layout = computeSharedMemoryLayout(forall);
    if (failed(layout))
      return forall.emitOpError()
             << "kvattn-outline-tile-programs: the program's tiles need "
                "static shapes";
    // Decided here, recorded on the kernel: the tensor-core lowering keeps
    // the query tile in 16 bits and the scores in registers, so the shared
    // memory differs.
    useTensorCores = tensorCores && canUseTensorCores(*layout);
    // A latent program's warp keeps Dv / valueSplit accumulator columns in
    // registers: more than 256 (128 registers a lane) cannot stay there.
    if (useTensorCores && layout->latent &&
        layout->valueCols / layout->valueSplit > 256)
      return forall.emitOpError()
             << "kvattn-outline-tile-programs: the latent form's warps would "
                "each keep "
             << layout->valueCols / layout->valueSplit
             << " accumulator columns (Dv = " << layout->valueCols
             << ", block-m = " << config.getBlockM()
             << ", num-warps = " << config.getNumWarps()
             << "), more than the registers hold (256): give num-warps = "
                "block-m / 16 x "
             << (layout->valueCols + 255) / 256
             << " or more, or leave block-m and num-warps automatic";
    if (useTensorCores)
      layout = computeTensorCoreLayout(forall, mmaTilesPerWarp(config));
    // sm_90a: wgmma where the program fits it (the same shared memory).
    if (useTensorCores && wgmma) {
      bool sameType = true;
      forall.walk([&](TileLoadQOp load) {
        sameType &= queryReachesStageType(
            getElementTypeOrSelf(load.getQuery().getType()),
            layout->stageElementType);
      });
      // (An FP8 cache is converted into the 16-bit stages by plain loads,
      // as on mma.sync, and keeps that staging: canUseTmaRing. The query
      // stays in shared memory: the scores may take its registers, e.g.
      // 128-key blocks at D = 128.)
      FailureOr<SharedMemoryLayout> wgmmaLayout = computeTensorCoreLayout(
          forall, mmaTilesPerWarp(config), /*wgmma=*/true);
      useWgmma = sameType && canUseWgmma(*wgmmaLayout, config.getNumWarps());
      if (useWgmma)
        layout = wgmmaLayout;
    }
    // ... and K/V by TMA through an mbarrier ring where the caches allow.
    if (useWgmma) {
      SharedMemoryLayout ring = *layout;
      addTmaRing(ring, twoValueStages && producerWarpgroup);
      if (canUseTmaRing(forall, ring)) {
        useTma = true;
        tmaBlockN = ring.stageRows;
        *layout = ring;
      }
    }
    sharedMemoryBytes = layout->totalBytes;
  }

  // The sizes this kernel takes: B, Hq, L for a merge; B, Hq, Hkv, L, S
  // for attention, plus num_pages, page_size, max_pages when paged.
  const bool paged = buffers.count("block_table");
  SmallVector<int> sizeIds = isMerge  ? SmallVector<int>{kB, kHq, kL}
                             : prefix ? SmallVector<int>{kB, kHq, kHkv, kL, kP}
                                      : SmallVector<int>{kB, kHq, kHkv, kL, kS};
  if (paged && prefix)
    sizeIds.append({kPrefixNumPages, kPrefixPageSize, kPrefixMaxPages});
  else if (paged)
    sizeIds.append({kNumPages, kPageSize, kMaxPages});
  const KeyLayout keys = keyLayoutOf(buffers);
  // Every size a dynamic dimension of a buffer needs, also where the kind's
  // list above lacks it: a merge with ALiBi reads the positions k_pos
  // [B, S] (its rows' reference distance), so it takes S. The host passes
  // each such size as the dimension it was found in.
  struct ExtraSize {
    StringRef role;
    int64_t dim;
  };
  SmallVector<ExtraSize> extraSizes;
  for (const char *role : kRoles) {
    auto it = buffers.find(role);
    if (it == buffers.end())
      continue;
    auto type = cast<MemRefType>(it->second.getType());
    SmallVector<int> symbolic =
        symbolicShape(role, type.getRank(), paged, keys, prefix);
    for (auto [d, id] : llvm::enumerate(symbolic)) {
      // (N and cache_rows come last, below; B, of B + 1, is in every
      // kind's list.)
      if (id < 0 || !type.isDynamicDim(d) || id == kN || id == kCacheRows ||
          id == kBPlus1 || llvm::is_contained(sizeIds, id))
        continue;
      sizeIds.push_back(id);
      extraSizes.push_back({role, static_cast<int64_t>(d)});
    }
  }
  // A run-time split: both kernels take its chunk count N last (the
  // runtime computes it per launch: docs/kernel-abi.md).
  const bool runTimeSplit = static_cast<bool>(config.getSplitRule());
  if (runTimeSplit) {
    auto parts = buffers.find("out_parts");
    if (parts == buffers.end() ||
        !cast<MemRefType>(parts->second.getType()).isDynamicDim(0))
      return forall.emitOpError()
             << "kvattn-outline-tile-programs: a run-time split needs part "
                "buffers with a dynamic leading dim";
    sizeIds.push_back(kN);
  }
  // A batch-to-cache map: the cache rows C of K and V, last.
  if (!isMerge && keys == KeyLayout::cacheRows)
    sizeIds.push_back(kCacheRows);

  // The kernel and its ABI, for the launch manifest: each pointer with its
  // element type, symbolic shape and access, then the sizes.
  SmallVector<StringRef> roles;
  KernelSignature signature(ctx);
  for (const char *role : kRoles) {
    auto it = buffers.find(role);
    if (it == buffers.end())
      continue;
    roles.push_back(role);
    auto type = cast<MemRefType>(it->second.getType());
    SmallVector<int> symbolic =
        symbolicShape(role, type.getRank(), paged, keys, prefix);
    StringRef name(role);
    bool parts = name == "out_parts" || name == "lse_parts";
    bool written = name == "out" || name == "lse" || (parts && !isMerge);
    // The prefix kernel's K/V are the cascade's prefix_key/prefix_value,
    // and a paged prefix's table and length its prefix_pages/prefix_len:
    // one plan binds them beside the suffix's key/value, block_table and
    // kv_len.
    if (prefix && name == "block_table") {
      // prefix_pages [prefix_max_pages]: the cascade's operand, which the
      // kernel views as the one-sequence table [1, prefix_max_pages].
      type =
          MemRefType::get(type.getShape().drop_front(), type.getElementType());
      symbolic.erase(symbolic.begin());
    }
    signature.addBuffer(prefix ? prefixParameterName(name) : name, type,
                        symbolic, kSizes, written);
  }
  // The TMA ring's tensor maps (docs/kernel-abi.md, "Tensor maps"): K and
  // V as {D, S, Hkv, B} (buffer dims 3, 2, 1, 0), boxes of 64 columns
  // (128 bytes: the 128-byte swizzle's span, the wgmma panels) by block-n
  // rows; rows past the cache read as zeros. The latent form has K only
  // (its V is the K stage).
  const bool tensorMaps = useTma;
  if (tensorMaps) {
    SmallVector<Attribute> maps;
    Builder mb(ctx);
    SmallVector<StringRef, 2> mapped = {"key"};
    if (!latent)
      mapped.push_back("value");
    for (StringRef role : mapped) {
      auto type = cast<MemRefType>(buffers[role].getType());
      NamedAttrList map;
      map.append("name", mb.getStringAttr(role == "key" ? "k_load" : "v_load"));
      map.append("buffer",
                 mb.getStringAttr(prefix ? prefixParameterName(role) : role));
      map.append("dims", mb.getI64ArrayAttr({3, 2, 1, 0}));
      // (Paged [pages, page_size, Hkv, D]: {D, Hkv, page_size, pages}, the
      // box {64, 1, block-n, 1}.)
      const int64_t pageRows = tmaPageBoxRows(type.getDimSize(1), tmaBlockN);
      map.append("box", paged ? mb.getI64ArrayAttr({64, 1, pageRows, 1})
                              : mb.getI64ArrayAttr({64, tmaBlockN, 1, 1}));
      map.append("swizzle", mb.getStringAttr("128B"));
      map.append("element_type", TypeAttr::get(type.getElementType()));
      map.append("oob_fill", mb.getStringAttr("zero"));
      maps.push_back(map.getDictionary(ctx));
    }
    signature.addTensorMaps("tensor_maps", mb.getArrayAttr(maps));
  }
  for (int id : sizeIds)
    signature.addSize(kSizes[id]);
  // The TMA ring's copies from a producer warpgroup after the consumers'
  // warps (docs/gpu-lowering.md, "Hopper (sm_90a)"): the block grows by 128
  // threads.
  const int64_t producerWarps =
      useTma && producerWarpgroup ? kProducerWarps : 0;
  gpu::GPUFuncOp kernel =
      createKernel(gpuModule, forall.getLoc(), kernelName, signature, config,
                   sharedMemoryBytes, producerWarps);
  const int32_t threads = threadsPerBlock(config, producerWarps);
  if (useTensorCores)
    kernel->setAttr(kTensorCoresAttr, UnitAttr::get(ctx));
  if (useWgmma)
    kernel->setAttr(kWgmmaAttr, UnitAttr::get(ctx));
  if (useTma)
    kernel->setAttr(kTmaAttr, UnitAttr::get(ctx));
  if (cascade)
    kernel->setAttr(kCascadeAttr, cascade);
  if (forall->hasAttr(kVarlenMergeAttr))
    kernel->setAttr(kVarlenMergeAttr, UnitAttr::get(ctx));

  // The kernel body: views from the parameters, the program's ids from the
  // block ids, then the program itself.
  Block &entry = kernel.getBody().front();
  ImplicitLocOpBuilder kb(forall.getLoc(), ctx);
  kb.setInsertionPointToStart(&entry);
  SmallVector<Value> sizes(std::size(kSizes));
  const unsigned firstSize = roles.size() + (tensorMaps ? 1 : 0);
  for (auto [i, id] : llvm::enumerate(sizeIds))
    sizes[id] = entry.getArgument(firstSize + i);
  IRMapping mapping;
  for (auto [i, role] : llvm::enumerate(roles)) {
    Value host = buffers[role];
    mapping.map(host, rebuildView(kb, entry.getArgument(i),
                                  cast<MemRefType>(host.getType()), role, sizes,
                                  paged, keys, prefix));
  }
  for (Value c : constants)
    mapping.map(c, kb.clone(*c.getDefiningOp())->getResult(0));
  SmallVector<Value> ivs = forall.getInductionVars();
  const gpu::Dimension dims[] = {gpu::Dimension::x, gpu::Dimension::y,
                                 gpu::Dimension::z};
  for (auto [iv, dim] : llvm::zip(ivs, dims)) {
    Value id = gpu::BlockIdOp::create(kb, dim);
    // The query blocks from the last (the option's description): the
    // heaviest programs of a causal launch are started first. The wgmma
    // kernels only: the mma.sync ones keep blockIdx.y, a special register
    // ptxas rereads for free, where the computed id would stay live in a
    // register (sm_90's 128-row hd 128 program, at 254 registers, spilled).
    if (heaviestFirst && useWgmma && !isMerge && dim == gpu::Dimension::y) {
      Value count = gpu::GridDimOp::create(kb, dim);
      Value one = arith::ConstantIndexOp::create(kb, 1);
      id = arith::SubIOp::create(kb, arith::SubIOp::create(kb, count, one), id);
    }
    mapping.map(iv, id);
  }
  for (Operation &op : forall.getBody()->without_terminator())
    kb.clone(op, mapping);
  gpu::ReturnOp::create(kb);

  // The host launches it.
  ImplicitLocOpBuilder hb(forall.getLoc(), forall);
  SmallVector<Value> operands;
  for (StringRef role : roles) {
    Value host = buffers[role];
    auto type = cast<MemRefType>(host.getType());
    operands.push_back(memref::ReinterpretCastOp::create(
        hb, MemRefType::get({1}, type.getElementType()), host,
        hb.getIndexAttr(0), ArrayRef<OpFoldResult>{hb.getIndexAttr(1)},
        ArrayRef<OpFoldResult>{hb.getIndexAttr(1)}));
  }
  // The tensor maps' device buffer: the runtime encodes and passes it
  // (Runtime::launch); on the host side of the IR a placeholder of its
  // bytes.
  if (tensorMaps) {
    Value bytes =
        memref::AllocOp::create(hb, MemRefType::get({2 * 128}, hb.getI8Type()));
    Value address =
        memref::ExtractAlignedPointerAsIndexOp::create(hb, bytes).getResult();
    Value wide = arith::IndexCastOp::create(hb, hb.getI64Type(), address);
    operands.push_back(
        LLVM::IntToPtrOp::create(hb, LLVM::LLVMPointerType::get(ctx), wide));
  }
  auto dim = [&](Value src, int64_t d) {
    return hb.createOrFold<memref::DimOp>(src, d);
  };
  // B: the query's batch, or for a ragged batch (q_start [B + 1]) the
  // sequences.
  auto batch = [&]() -> Value {
    auto it = buffers.find("q_start");
    if (it == buffers.end())
      return dim(buffers["query"], 0);
    return hb.createOrFold<arith::SubIOp>(
        dim(it->second, 0), arith::ConstantIndexOp::create(hb, 1));
  };
  if (isMerge) {
    Value out = buffers["out"];
    operands.append({dim(out, 0), dim(out, 1), dim(out, 2)});
  } else if (paged) {
    // S is the logical key count, max_pages * page_size.
    Value q = buffers["query"], k = buffers["key"];
    Value table = buffers["block_table"];
    Value maxPages = dim(table, 1), pageSize = dim(k, 1);
    operands.append({batch(), dim(q, 1), dim(k, 2), dim(q, 2),
                     hb.createOrFold<arith::MulIOp>(maxPages, pageSize),
                     dim(k, 0), pageSize, maxPages});
  } else {
    Value q = buffers["query"], k = buffers["key"];
    operands.append({batch(), dim(q, 1), dim(k, 1), dim(q, 2), dim(k, 2)});
  }
  for (const ExtraSize &extra : extraSizes)
    operands.push_back(dim(buffers[extra.role], extra.dim));
  if (runTimeSplit)
    operands.push_back(dim(buffers["out_parts"], 0));
  if (!isMerge && keys == KeyLayout::cacheRows)
    operands.push_back(dim(buffers["key"], 0));
  auto bound = [&](OpFoldResult ofr) {
    return getValueOrCreateConstantIndexOp(hb, hb.getLoc(), ofr);
  };
  SmallVector<OpFoldResult> ubs = forall.getMixedUpperBound();
  Value one = arith::ConstantIndexOp::create(hb, 1);
  Value smem =
      arith::ConstantIntOp::create(hb, hb.getI32Type(), sharedMemoryBytes);
  gpu::LaunchFuncOp::create(
      hb, hb.getLoc(), kernel,
      gpu::KernelDim3{bound(ubs[0]), bound(ubs[1]),
                      ubs.size() > 2 ? bound(ubs[2]) : one},
      gpu::KernelDim3{arith::ConstantIndexOp::create(hb, threads), one, one},
      smem, operands);
  forall.erase();
  return success();
}

namespace {

struct OutlineTileProgramsPass
    : mlir::kvattn::impl::OutlineTileProgramsPassBase<OutlineTileProgramsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<scf::ForallOp> programs;
    module.walk([&](scf::ForallOp forall) {
      if (getTileConfig(forall))
        programs.push_back(forall);
    });
    if (programs.empty())
      return;
    gpu::GPUModuleOp gpuModule = getOrCreateKernelModule(module);
    llvm::StringMap<unsigned> counts;
    for (scf::ForallOp forall : programs) {
      std::string name = uniqueKernelName(counts, forall, "kvattn");
      if (failed(outlineProgram(forall, gpuModule, name, tensorCores, wgmma,
                                producerWarpgroup, heaviestFirst,
                                twoValueStages)))
        return signalPassFailure();
    }
  }
};

} // namespace
