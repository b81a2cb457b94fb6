//===- KernelAbi.h - kernel parameters --------------------------*- C++ -*-===//
//
// The kernels kvattn outlines (attention programs, the split merge, the cache
// write) take each tensor as a bare pointer (memref<1xT>) followed by i64
// sizes; a tensor's shape is static or names one of the sizes. These helpers
// rebuild the row-major view inside a kernel and describe the parameters in
// the `kvattn.params` attribute (#kvattn.param) the launch manifest is
// written from
// (docs/kernel-abi.md). Every kernel kvattn makes is created here
// (createKernel): -kvattn-outline-tile-programs, -kvattn-append-to-gpu and
// -kvattn-device-validation.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_CONVERSION_KERNELABI_H
#define KVATTN_PASSES_CONVERSION_KERNELABI_H

#include "kvattn/Dialect/KVAttnAttrs.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir {
namespace kvattn {

/// A row-major view of `ptr` (memref<1xT>) with the shape of `type`: dim d
/// is static, or `sizes[symbolic[d]]` when dynamic.
Value rebuildRowMajorView(ImplicitLocOpBuilder &b, Value ptr, MemRefType type,
                          ArrayRef<int> symbolic, ArrayRef<Value> sizes);

/// A kernel's parameters as they are added, each with its argument type and
/// its kvattn.params entry (the launch manifest's): the attention, merge,
/// append and validation kernels all declare their ABI this way.
class KernelSignature {
public:
  explicit KernelSignature(MLIRContext *ctx) : ctx(ctx) {}

  /// A buffer as a bare pointer (memref<1xT>). Its entry: the name `role`,
  /// the element type, the shape (static dims as integers, dynamic ones by
  /// the name of their size, `sizeNames[symbolic[d]]`) and the access.
  void addBuffer(StringRef role, MemRefType type, ArrayRef<int> symbolic,
                 ArrayRef<const char *> sizeNames, bool written);
  /// A pointer parameter with its own argument type (a validation kernel
  /// reads key_valid's bytes through an !llvm.ptr, the status word as
  /// memref<16xi64>).
  void addPointer(KernelParamAttr param, Type argument);
  /// An i64 size, taken as an index.
  void addSize(StringRef name);
  /// The device address of the launch's TMA tensor maps (kind tensor_maps,
  /// an !llvm.ptr argument; map i at address + 128 i).
  void addTensorMaps(StringRef name, ArrayAttr maps);

  ArrayRef<Type> getArgumentTypes() const { return arguments; }
  ArrayRef<KernelParamAttr> getParams() const { return params; }

private:
  MLIRContext *ctx;
  SmallVector<Type> arguments;
  SmallVector<KernelParamAttr> params;
};

/// Threads a block of a kernel with `config`: 32 x num_warps, plus 32 per
/// producer warp (the TMA issuers after the consumers' warps).
int32_t threadsPerBlock(TileConfigAttr config, int64_t producerWarps = 0);

/// The kernel `name` at the end of `gpuModule` with `signature`'s arguments
/// (an empty entry block), marked a GPU kernel of
/// threadsPerBlock(config, producerWarps) threads (known_block_size), and
/// its ABI: kvattn.params, kvattn.tile_config (`config`) and
/// kvattn.dynamic_smem_bytes.
gpu::GPUFuncOp createKernel(gpu::GPUModuleOp gpuModule, Location loc,
                            StringRef name, const KernelSignature &signature,
                            TileConfigAttr config,
                            int64_t dynamicSharedMemoryBytes,
                            int64_t producerWarps = 0);

/// The gpu.module every kvattn kernel goes into ("kvattn_kernels"), created
/// at the end of `module` (marked a GPU container module) when missing.
gpu::GPUModuleOp getOrCreateKernelModule(ModuleOp module);

/// A kernel name unique in the module: `<function>_<suffix>_<n>` with n
/// counted per base name in `counts`, for the function enclosing `op`.
std::string uniqueKernelName(llvm::StringMap<unsigned> &counts, Operation *op,
                             StringRef suffix);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_KERNELABI_H
