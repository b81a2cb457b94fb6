//===- Ptx.h - PTX and launch manifests from kvattn IR ----------*- C++ -*-===//
//
// Compiles every kvattn.attention (or kvattn.sdpa) of a module into PTX
// through the kvattn-to-ptx pipeline and describes how to launch each
// kernel: the launch manifest (docs/kernel-abi.md), a versioned JSON file
// that the runtime reads without any MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_TARGET_PTX_H
#define KVATTN_TARGET_PTX_H

#include "kvattn/Passes/PtxOptions.h"
#include "kvattn/Support/CompilerDiagnostic.h"
#include "kvattn/Support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace mlir {
namespace kvattn {

/// Version of the manifest format written by manifestToJson.
constexpr int kManifestVersion = 1;
/// The version of a manifest with a run-time split (kernel parameter `N`,
/// grid z `"N"`, the `split` rule): docs/kernel-abi.md.
constexpr int kManifestVersionRunTimeSplit = 2;

struct KernelParam {
  std::string name;        ///< query, key, ..., out, lse, B, Hq, Hkv, L, S
  std::string kind;        ///< "pointer", "scalar" or "tensor_maps"
  std::string elementType; ///< f32/f16/bf16/i1/i32/i64 (scalars: i64)
  /// Pointers: one entry per dimension, a size name or a number.
  std::vector<std::string> shape;
  std::string access; ///< pointers: "read" or "write"
  /// "tensor_maps": the manifest's `maps` array, as JSON on one line
  /// (docs/kernel-abi.md, "Tensor maps").
  std::string mapsJson;
};

struct KernelManifest {
  std::string name;
  std::vector<KernelParam> params;
  int64_t blockM = 0, blockN = 0, numWarps = 0, numStages = 0;
  /// Query heads per program (GQA packing; 1: one head per program).
  int64_t group = 1;
  /// KV chunks (split-KV): the grid's z dimension; 1 without a split, 0
  /// chosen at run time (splitRule).
  int64_t splitKv = 1;
  /// A run-time split's rule (both its kernels; maxSplits 0: none): the
  /// runtime's rt::splitCount computes the chunk count N from it.
  struct SplitRule {
    int64_t maxSplits = 0, blockM = 0, blockN = 0, group = 1, programsPerSm = 0,
            minKeys = 0, numSms = 0;
  } splitRule;
  /// "attention", or "merge" for the kernel that merges a split's parts
  /// ("merge_varlen" for a ragged batch's; docs/kernel-abi.md lists all).
  std::string kind = "attention";
  /// An append kernel whose -1 pages are padding (kSkipPaddingAttr).
  bool skipPadding = false;
  int64_t threadsPerBlock = 0;
  int64_t dynamicSharedMemoryBytes = 0;
};

struct PtxModule {
  std::string chip;
  /// PTX text, or with DeviceImage::LlvmIR the device LLVM IR as text.
  std::string ptx;
  DeviceImage image = DeviceImage::Ptx;
  /// Bits of the kernels' index arithmetic (PtxOptions::indexBitwidth; the
  /// manifest's `index_bits`).
  int indexBits = 64;
  std::vector<KernelManifest> kernels;
  /// IR -> PTX text, or the cache lookup's time on a hit.
  double compileMs = 0;
  /// Of compileMs, when compiled (0 on a hit): the kvattn passes to GPU
  /// kernels (buildKVAttnToGpuKernelsPipeline), the MLIR conversion to
  /// NVVM/LLVM dialect, and -kvattn-gpu-module-to-ptx's translation to LLVM
  /// IR, libdevice linking, LLVM optimiser and NVPTX back end.
  double kernelsMs = 0, nvvmMs = 0, translateMs = 0, linkMs = 0, optimizeMs = 0,
         codegenMs = 0;
  /// The kernel cache's part: "hit", "miss" (compiled and stored),
  /// "replaced" (the entry did not read back whole: compiled and stored
  /// again), "off" (no cache), or "unwritable: <why>" (compiled, not
  /// stored).
  std::string cache = "off";
  /// What the compiler said (warnings, remarks, their notes; the manifest's
  /// "diagnostics"): kept in the kernel cache, so a hit says it again.
  std::vector<CompilerDiagnostic> diagnostics;
};

/// Compiles `module` (cloned, not changed), or loads the result from the
/// kernel cache (options.useKernelCache). Fails with the pipeline's
/// diagnostics; failures are never cached.
Status compileToPtx(mlir::ModuleOp module, const PtxOptions &options,
                    PtxModule &result);

/// The launch manifest of `module` as JSON; `ptxFile` is recorded as the
/// name of the PTX file it describes.
std::string manifestToJson(const PtxModule &module, const std::string &ptxFile);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_TARGET_PTX_H
