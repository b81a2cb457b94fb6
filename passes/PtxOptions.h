//===- PtxOptions.h - options of the PTX compilation ------------*- C++ -*-===//
//
// The one options struct of the GPU path: used by the kvattn-to-ptx
// pipeline (passes/Pipelines.cpp), compileToPtx (Ptx.h), kvattn-compile,
// kvattn-run --target=gpu and kvattn-bench. Plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_TARGET_PTXOPTIONS_H
#define KVATTN_TARGET_PTXOPTIONS_H

#include <cstdint>
#include <functional>
#include <string>

namespace mlir {
class PassManager;
} // namespace mlir

namespace mlir {
namespace kvattn {

/// What the device compilation produces.
enum class DeviceImage {
  /// PTX text from LLVM's NVPTX back end, for the CUDA driver.
  Ptx,
  /// The device LLVM IR that the NVPTX back end would compile (NVVM,
  /// libdevice linked, optimised), as text: the image of the emulated GPU
  /// (lib/GpuEmu, docs/gpu-emulator.md).
  LlvmIR,
};

/// Which LLVM optimisation the device code gets before the NVPTX back end
/// (-kvattn-gpu-module-to-ptx's llvm-pipeline).
enum class LlvmPipeline {
  /// kvattn's shorter pipeline and the back end at O2: 10-30 % less LLVM
  /// time than O3 for kernels the emulator counts the same or smaller
  /// (docs/runtime.md, "Kernel cache").
  Kvattn,
  /// LLVM's default<On> and the back end at On, n = llvmOptLevel, as
  /// gpu-module-to-binary does.
  Standard,
};

struct PtxOptions {
  std::string chip = "sm_80";
  std::string features;  ///< e.g. "+ptx80"; empty: the chip's minimum
  std::string libdevice; ///< empty: found from $CUDA_HOME etc.
  /// 0: chosen per attention (docs/gpu-lowering.md, "Block sizes").
  int64_t blockM = 0, blockN = 0, numWarps = 0, numStages = 2;
  bool packGqa = true; ///< GQA packing of few query rows
  /// KV chunks per program, merged by a second kernel (1: no split, 0:
  /// automatic from numSms, the default: docs/gpu-lowering.md, "Split-KV").
  /// GpuExecutor sets numSms from the device.
  int64_t splitKv = 0, numSms = 132;
  /// Tensor cores (mma.sync, ldmatrix, cp.async) for f16/bf16 where the
  /// head dims allow; false: the scalar lowering.
  bool tensorCores = true;
  /// sm_90a: the TMA kernels' producer warpgroup (false: the consumers'
  /// thread 0 issues the boxes; -kvattn-outline-tile-programs'
  /// producer-warpgroup).
  bool producerWarpgroup = true;
  /// Tensor cores: lazy rescaling where the registers allow
  /// (-kvattn-assign-tile-layouts' lazy-rescale).
  bool lazyRescale = true;
  /// sm_90a: the two consumer warpgroups of a kernel with a producer
  /// warpgroup take turns at the tensor cores (-kvattn-assign-tile-layouts'
  /// ping-pong).
  bool pingPong = true;
  /// sm_90a: each block's P.V issued after the next block's Q.K^T, running
  /// during that block's softmax (-kvattn-assign-tile-layouts'
  /// intra-warpgroup-overlap).
  bool intraWarpgroupOverlap = true;
  /// sm_90a: TMA kernels with a producer warpgroup keep two V stages
  /// wherever they fit (-kvattn-outline-tile-programs' and
  /// -kvattn-assign-tile-layouts' two-value-stages).
  bool twoValueStages = false;
  /// An attention's query blocks numbered from the last, so a causal
  /// launch starts its longest programs first
  /// (-kvattn-outline-tile-programs' heaviest-first).
  bool heaviestFirst = true;
  DeviceImage image = DeviceImage::Ptx;
  /// Bits of the kernels' index arithmetic (-kvattn-gpu-to-nvvm,
  /// docs/gpu-lowering.md "Index width"): 32, the default, for buffers of
  /// fewer than 2^31 elements each (the runtime refuses a larger launch of
  /// such kernels; the manifest's `index_bits`), or 64 for larger caches.
  /// The kernel ABI (i64 scalars, 64-bit pointers) is the same for both.
  unsigned indexBitwidth = 32;
  LlvmPipeline llvmPipeline = LlvmPipeline::Kvattn;
  /// LLVM's optimisation level for the device code with
  /// LlvmPipeline::Standard (0 to 3: the NVVM target's `O`; ptxas optimises
  /// the PTX again). Recorded in the target attribute either way.
  unsigned llvmOptLevel = 3;
  /// Metadata validated on the device (-kvattn-device-validation,
  /// docs/kernel-abi.md "The status word"): every kernel takes a `status`
  /// pointer and does nothing when it is set, and every kernel that reads
  /// metadata gets a validation kernel (kind "validate"). What a serving
  /// plan compiles (rt::Plan, kvattn_plan_create).
  bool deviceValidation = false;
  /// compileToPtx reads and writes the on-disk kernel cache that the
  /// environment selects (KernelCache.h; KVATTN_CACHE_DIR=off: none).
  /// False: always compile, touch no file.
  bool useKernelCache = true;
  /// -kvattn-resolve-cached-append's fix-upper-left-appends: an upper-left
  /// causal kvattn.sdpa over a cache write is compiled with lower-right
  /// positions (a remark says so) instead of kept with a warning.
  bool fixUpperLeftAppends = false;
  /// Applied to each pass manager compileToPtx runs (kvattn-compile: MLIR's
  /// --mlir-timing, --mlir-print-ir-*, ... flags); false refuses the
  /// compilation. A compilation with it, or with $KVATTN_DUMP_DIR set (the
  /// IR after each stage, the image and the manifest, written there), runs
  /// the pipelines and bypasses the kernel cache.
  std::function<bool(mlir::PassManager &)> configurePassManager;
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_TARGET_PTXOPTIONS_H
