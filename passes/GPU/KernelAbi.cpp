//===- KernelAbi.cpp - kernel parameters and their manifest entries -------===//

#include "passes/GPU/KernelAbi.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace mlir::kvattn;

Value mlir::kvattn::rebuildRowMajorView(ImplicitLocOpBuilder &b, Value ptr,
                                        MemRefType type, ArrayRef<int> symbolic,
                                        ArrayRef<Value> sizes) {
  SmallVector<OpFoldResult> dims, strides(type.getRank());
  for (int64_t d = 0; d < type.getRank(); ++d)
    dims.push_back(type.isDynamicDim(d)
                       ? OpFoldResult(sizes[symbolic[d]])
                       : OpFoldResult(b.getIndexAttr(type.getDimSize(d))));
  OpFoldResult stride = b.getIndexAttr(1);
  for (int64_t d = type.getRank() - 1; d >= 0; --d) {
    strides[d] = stride;
    auto cs = getConstantIntValue(stride), cd = getConstantIntValue(dims[d]);
    if (cs && cd)
      stride = b.getIndexAttr(*cs * *cd);
    else
      stride = arith::MulIOp::create(
                   b, getValueOrCreateConstantIndexOp(b, b.getLoc(), stride),
                   getValueOrCreateConstantIndexOp(b, b.getLoc(), dims[d]))
                   .getResult();
  }
  return memref::ReinterpretCastOp::create(b, type, ptr, b.getIndexAttr(0),
                                           dims, strides);
}

static KernelParamAttr pointerParam(MLIRContext *ctx, StringRef role,
                                    MemRefType type, ArrayRef<int> symbolic,
                                    ArrayRef<const char *> sizeNames,
                                    bool written) {
  SmallVector<Attribute> shape;
  for (int64_t d = 0; d < type.getRank(); ++d)
    shape.push_back(
        type.isDynamicDim(d)
            ? Attribute(StringAttr::get(ctx, sizeNames[symbolic[d]]))
            : Attribute(IntegerAttr::get(IntegerType::get(ctx, 64),
                                         type.getDimSize(d))));
  return KernelParamAttr::getPointer(
      ctx, role, type.getElementType(), ArrayAttr::get(ctx, shape),
      written ? ParamAccess::write : ParamAccess::read);
}

void KernelSignature::addBuffer(StringRef role, MemRefType type,
                                ArrayRef<int> symbolic,
                                ArrayRef<const char *> sizeNames,
                                bool written) {
  addPointer(pointerParam(ctx, role, type, symbolic, sizeNames, written),
             MemRefType::get({1}, type.getElementType()));
}

void KernelSignature::addPointer(KernelParamAttr param, Type argument) {
  params.push_back(param);
  arguments.push_back(argument);
}

void KernelSignature::addSize(StringRef name) {
  params.push_back(KernelParamAttr::getScalar(ctx, name));
  arguments.push_back(IndexType::get(ctx));
}

void KernelSignature::addTensorMaps(StringRef name, ArrayAttr maps) {
  addPointer(KernelParamAttr::getTensorMaps(ctx, name, maps),
             LLVM::LLVMPointerType::get(ctx));
}

int32_t mlir::kvattn::threadsPerBlock(TileConfigAttr config,
                                      int64_t producerWarps) {
  return static_cast<int32_t>(32 * (config.getNumWarps() + producerWarps));
}

gpu::GPUFuncOp mlir::kvattn::createKernel(gpu::GPUModuleOp gpuModule,
                                          Location loc, StringRef name,
                                          const KernelSignature &signature,
                                          TileConfigAttr config,
                                          int64_t dynamicSharedMemoryBytes,
                                          int64_t producerWarps) {
  MLIRContext *ctx = gpuModule.getContext();
  OpBuilder b = OpBuilder::atBlockEnd(gpuModule.getBody());
  auto kernel = gpu::GPUFuncOp::create(
      b, loc, name, FunctionType::get(ctx, signature.getArgumentTypes(), {}));
  kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  kernel.setKnownBlockSizeAttr(
      b.getDenseI32ArrayAttr({threadsPerBlock(config, producerWarps), 1, 1}));
  setKernelParams(kernel, signature.getParams());
  setTileConfig(kernel, config);
  kernel->setAttr("kvattn.dynamic_smem_bytes",
                  b.getI64IntegerAttr(dynamicSharedMemoryBytes));
  return kernel;
}

gpu::GPUModuleOp mlir::kvattn::getOrCreateKernelModule(ModuleOp module) {
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                  UnitAttr::get(module.getContext()));
  if (auto existing = module.lookupSymbol<gpu::GPUModuleOp>("kvattn_kernels"))
    return existing;
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  return gpu::GPUModuleOp::create(b, module.getLoc(), "kvattn_kernels");
}

std::string mlir::kvattn::uniqueKernelName(llvm::StringMap<unsigned> &counts,
                                           Operation *op, StringRef suffix) {
  auto func = op->getParentOfType<FunctionOpInterface>();
  std::string base = (func ? func.getName().str() : std::string("program")) +
                     "_" + suffix.str();
  return base + "_" + std::to_string(counts[base]++);
}
