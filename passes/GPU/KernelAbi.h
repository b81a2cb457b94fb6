//===- KernelAbi.h - kernel parameters --------------------------*- C++ -*-===//
//
// The kernels kvattn outlines (attention programs, the split merge, the cache
// write) take each tensor as a bare pointer (memref<1xT>) followed by i64
// sizes; a tensor's shape is static or names one of the sizes. These helpers
// rebuild the row-major view inside a kernel and describe the parameters in
// the `kvattn.params` attribute (#kvattn.param) the launch manifest is
// written from
// (docs/kernel-abi.md). Shared by -kvattn-outline-tile-programs and
// -kvattn-append-to-gpu.
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

/// The kvattn.params entry of a pointer parameter: its name (`role`),
/// element type, shape (static dims as integers, dynamic ones by the name of
/// their size, `sizeNames[symbolic[d]]`) and access (written or read).
KernelParamAttr pointerParam(MLIRContext *ctx, StringRef role, MemRefType type,
                             ArrayRef<int> symbolic,
                             ArrayRef<const char *> sizeNames, bool written);

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
