//===- Passes.h - kvattn passes ---------------------------------*- C++ -*-===//

#ifndef KVATTN_PASSES_PASSES_H
#define KVATTN_PASSES_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include "kvattn/Passes/CpuOptions.h"
#include "kvattn/Passes/PtxOptions.h"

#include <string>

namespace mlir {
class RewritePatternSet;
namespace kvattn {

#define GEN_PASS_DECL
#include "kvattn/Passes/Passes.h.inc"

/// The discardable attribute of an scf.for that carries its
/// #llvm.loop_annotation (e.g. unroll disable) to LLVM IR:
/// -convert-scf-to-cf copies it to the latch's branch and
/// -kvattn-gpu-to-nvvm makes it that llvm.br's `loop_annotation`.
inline constexpr llvm::StringLiteral kLoopAnnotationAttr =
    "llvm.loop_annotation";

/// Where -kvattn-gpu-module-to-ptx spent its time, in milliseconds summed
/// over the gpu.modules it compiled: translation to LLVM IR, libdevice
/// linking, LLVM's optimiser, the NVPTX back end (PTX printing included).
struct DeviceCodegenTimes {
  double translateMs = 0, linkMs = 0, optimizeMs = 0, codegenMs = 0;
};
/// -kvattn-gpu-module-to-ptx that adds its phase times to `*times`.
std::unique_ptr<Pass>
createGpuModuleToPtxPass(const GpuModuleToPtxPassOptions &options,
                         DeviceCodegenTimes *times);

/// Patterns of -kvattn-resolve-cached-append, usable without the pass
/// (`fuseRope`: the pass's fuse-rope option).
void populateResolveCachedAppendPatterns(RewritePatternSet &patterns,
                                         bool fixUpperLeftAppends,
                                         bool fuseRope = true);

/// Patterns of -kvattn-raise-sdpa (linalg and TOSA SDPA to kvattn.sdpa);
/// as patterns they emit no remarks.
void populateRaiseSdpaPatterns(RewritePatternSet &patterns);

/// kvattn.cascade -> two kvattn.attention and a kvattn.merge
/// (-kvattn-expand-cascade).
void populateExpandCascadePatterns(RewritePatternSet &patterns);

class AttentionOp;
class CascadeOp;
/// The two attentions of a kvattn.cascade, created at `builder`'s insertion
/// point: (a) every packed row over the shared prefix (one batch, no mask,
/// no positions), (b) each sequence's rows over its suffix (q_start,
/// q_offset, kv_len, causal as the cascade). Each has results out (the
/// cascade's type) and lse. -kvattn-expand-cascade merges them with
/// kvattn.merge; -kvattn-tile (the GPU pipeline) tiles them into the parts
/// of the cascade's merge kernel.
std::pair<AttentionOp, AttentionOp> createCascadeAttentions(OpBuilder &builder,
                                                            CascadeOp op);

/// The results of a kvattn.cascade without query rows (a static T of 0),
/// created at `builder`'s insertion point: empty out (and lse) tensors,
/// which -kvattn-expand-cascade replaces such a cascade with (there is
/// nothing to compute, and the slices of its concatenated parts would
/// start at row 0 of a zero-size dimension, which the slice verifiers
/// refuse). Empty when T is not statically 0.
SmallVector<Value> emptyCascadeResults(OpBuilder &builder, CascadeOp op);

/// Patterns of -kvattn-lower-append.
void populateLowerAppendPatterns(RewritePatternSet &patterns);

/// Patterns of -kvattn-lower-tile-to-loops.
void populateLowerTileToLoopsPatterns(RewritePatternSet &patterns);
/// The scalar lowerings of the tile ops that do not depend on the layout of
/// the scratch tiles (init, merge, prefetch): shared by both CPU lowerings.
void populateLowerTileStateToLoopsPatterns(RewritePatternSet &patterns);
/// Patterns of -kvattn-lower-tile-to-vectors: each tile op in its tiles'
/// #kvattn.vector_layout (assignVectorLayouts, which the caller runs first;
/// an op whose layouts are missing or disagree is left in place, and the
/// pass refuses it by name before applying these); the math they create is
/// expanded by the pass itself. With
/// `pagedBlocks`, paged blocks that a loop re-reads are read from a
/// contiguous copy and tile.prefetch of a paged cache prefetches its rows.
void populateLowerTileToVectorsPatterns(RewritePatternSet &patterns,
                                        bool pagedBlocks = true);
/// -kvattn-assign-vector-layouts on `root`: a #kvattn.vector_layout on every
/// tile of its CPU tile ops that has none, vectors of at most `maxWidth`
/// f32 lanes (a power of two up to 16), programs of at most `fewRows` rows
/// in the few-rows form (0: none). Emits an error and fails on a tile two
/// uses give different layouts, and on a width or bound out of range.
LogicalResult assignVectorLayouts(Operation *root, int64_t maxWidth,
                                  int64_t fewRows = 8);
/// The widest f32 vector of the host: 16 with AVX-512, 8 with AVX, else 4.
int64_t hostVectorWidth();

/// kvattn -> tile program -> loops -> LLVM dialect, ready for the
/// ExecutionEngine (the kvattn-to-cpu pipeline; optLevel is the JIT's).
/// Built from pass constructors: needs no pass registration.
void buildKVAttnToCpuPipeline(OpPassManager &pm,
                              const ::mlir::kvattn::CpuCompileOptions &options);

/// kvattn -> tile program -> outlined kernels with the tile ops lowered to
/// threads and shared memory (still in the gpu/scf/memref dialects).
void buildKVAttnToGpuKernelsPipeline(OpPassManager &pm,
                                     const ::mlir::kvattn::PtxOptions &options);
/// Kernels -> NVVM -> PTX text (gpu.binary, format=isa).
/// `times`, when given, receives -kvattn-gpu-module-to-ptx's phase times.
void buildGpuKernelsToPtxPipeline(OpPassManager &pm,
                                  const ::mlir::kvattn::PtxOptions &options,
                                  const std::string &libdevice,
                                  DeviceCodegenTimes *times = nullptr);
/// libdevice.10.bc: `explicitPath` if it exists, else from $CUDA_HOME,
/// $CUDA_PATH or /usr/local/cuda; empty when not found.
std::string findLibdevice(const std::string &explicitPath);

/// Why kvattn cannot generate code for `chip` ("sm_80", ...), or "" when it
/// can: sm_80 or newer, known to LLVM's NVPTX back end.
std::string unsupportedChipReason(llvm::StringRef chip);

/// The dynamic shared memory one block may use on `chip` (the opt-in
/// maximum), in bytes; 0 for a name that is not "sm_<digits>...".
int64_t maxSharedMemoryPerBlock(llvm::StringRef chip);

/// Registers the kvattn-to-cpu and kvattn-to-ptx pipelines.
void registerKVAttnPipelines();

#define GEN_PASS_REGISTRATION
#include "kvattn/Passes/Passes.h.inc"

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_PASSES_H
