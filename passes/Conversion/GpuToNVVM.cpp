//===- GpuToNVVM.cpp - the kernels to NVVM with one index width -----------===//
//
// -kvattn-gpu-to-nvvm (passes/Passes.td): the GPU, NVGPU,
// memref, arith, cf, func, index, ub and vector patterns to LLVM/NVVM with
// ONE LLVMTypeConverter configured with the index bitwidth, applied in one
// partial conversion per gpu.module, the way upstream's convert-gpu-to-nvvm
// combines the dialects it lowers (mlir/lib/Conversion/GPUToNVVM). With
// separate NVGPU and GPU conversion passes a 32-bit index left casts between
// i32 and i64 (docs/gpu-lowering.md, "Index width").
//
//===----------------------------------------------------------------------===//

#include "kvattn/Passes/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/LoweringOptions.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/NVGPUToNVVM/NVGPUToNVVM.h"
#include "mlir/Conversion/UBToLLVM/UBToLLVM.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVM.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Vector/Transforms/VectorRewritePatterns.h"
#include "mlir/Interfaces/DataLayoutInterfaces.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_GPUTONVVMPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;

namespace {

/// The kernel ABI keeps 64-bit scalars whatever the index width
/// (docs/kernel-abi.md): each `index` parameter of `kernel` becomes `i64`
/// and is cast to `index` once, at the entry.
void widenIndexParameters(gpu::GPUFuncOp kernel) {
  FunctionType type = kernel.getFunctionType();
  SmallVector<Type> inputs(type.getInputs());
  Block &entry = kernel.getBody().front();
  OpBuilder b = OpBuilder::atBlockBegin(&entry);
  Type i64 = b.getI64Type();
  for (auto [i, input] : llvm::enumerate(inputs)) {
    if (!input.isIndex())
      continue;
    BlockArgument arg = entry.getArgument(i);
    arg.setType(i64);
    Value index =
        arith::IndexCastOp::create(b, arg.getLoc(), b.getIndexType(), arg);
    arg.replaceAllUsesExcept(index, index.getDefiningOp());
    input = i64;
  }
  kernel.setFunctionTypeAttr(
      TypeAttr::get(b.getFunctionType(inputs, type.getResults())));
}

/// The host's launches pass `i64` where the kernel now takes it.
void widenLaunchOperands(gpu::LaunchFuncOp launch) {
  OpBuilder b(launch);
  for (OpOperand &operand : launch.getKernelOperandsMutable()) {
    if (!operand.get().getType().isIndex())
      continue;
    Value wide = arith::IndexCastOp::create(b, launch.getLoc(), b.getI64Type(),
                                            operand.get());
    operand.set(wide);
  }
}

/// The NVGPU types, as convert-nvgpu-to-nvvm converts them (the ones
/// kvattn's kernels use: the cp.async token; descriptors and barriers for
/// completeness).
void addNVGPUTypeConversions(LLVMTypeConverter &converter) {
  MLIRContext *ctx = &converter.getContext();
  // A cp.async token has no value in NVVM: an i32 that the lowering drops.
  converter.addConversion([&converter, ctx](nvgpu::DeviceAsyncTokenType) {
    return converter.convertType(IntegerType::get(ctx, 32));
  });
  converter.addConversion([ctx](nvgpu::TensorMapDescriptorType) -> Type {
    return LLVM::LLVMPointerType::get(ctx);
  });
  converter.addConversion([&converter, ctx](nvgpu::MBarrierGroupType type) {
    return converter.convertType(nvgpu::getMBarrierMemrefType(ctx, type));
  });
  converter.addConversion(
      [&converter, ctx](nvgpu::WarpgroupMatrixDescriptorType) {
        return converter.convertType(IntegerType::get(ctx, 64));
      });
}

struct GpuToNVVMPass : mlir::kvattn::impl::GpuToNVVMPassBase<GpuToNVVMPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<gpu::GPUModuleOp> gpuModules;
    module.walk([&](gpu::GPUModuleOp m) { gpuModules.push_back(m); });
    const unsigned bits = indexBitwidth;
    if (bits != 32 && bits != 64) {
      for (gpu::GPUModuleOp m : gpuModules)
        m.emitError() << "kvattn-gpu-to-nvvm: index-bitwidth must be 32 or "
                         "64, got "
                      << bits;
      if (gpuModules.empty())
        module.emitError() << "kvattn-gpu-to-nvvm: index-bitwidth must be "
                              "32 or 64, got "
                           << bits;
      return signalPassFailure();
    }
    for (gpu::GPUModuleOp m : gpuModules)
      for (gpu::GPUFuncOp f : m.getOps<gpu::GPUFuncOp>())
        if (f.isKernel())
          widenIndexParameters(f);
    module.walk([](gpu::LaunchFuncOp launch) { widenLaunchOperands(launch); });
    for (gpu::GPUModuleOp m : gpuModules)
      if (failed(convert(m)))
        return signalPassFailure();
  }

  LogicalResult convert(gpu::GPUModuleOp m) {
    MLIRContext *ctx = &getContext();
    // In-dialect rewrites first (gpu.all_reduce etc., N-D from_elements,
    // signed floor/ceil divisions),
    // as upstream does: one conversion cannot both create and lower them.
    {
      RewritePatternSet patterns(ctx);
      populateGpuRewritePatterns(patterns);
      // arith-to-llvm has no lowering of floordivsi/ceildivsi (from
      // lower-affine): expand them into arith first.
      arith::populateCeilFloorDivExpandOpsPatterns(patterns);
      vector::populateVectorFromElementsUnrollPatterns(patterns);
      if (failed(applyPatternsGreedily(m, std::move(patterns))))
        return failure();
    }

    LowerToLLVMOptions options(
        ctx, DataLayout(cast<DataLayoutOpInterface>(m.getOperation())));
    options.overrideIndexBitwidth(indexBitwidth);
    options.useBarePtrCallConv = true;
    LLVMTypeConverter converter(ctx, options);
    configureGpuToNVVMTypeConverter(converter);
    addNVGPUTypeConversions(converter);

    RewritePatternSet patterns(ctx);
    // The GPU patterns (and libdevice math) before the generic ones.
    populateGpuToNVVMConversionPatterns(converter, patterns, /*benefit=*/10);
    populateGpuWMMAToNVVMConversionPatterns(converter, patterns);
    populateNVGPUToNVVMConversionPatterns(converter, patterns);
    arith::populateArithToLLVMConversionPatterns(converter, patterns);
    cf::populateControlFlowToLLVMConversionPatterns(converter, patterns);
    populateFinalizeMemRefToLLVMConversionPatterns(converter, patterns);
    populateFuncToLLVMConversionPatterns(converter, patterns);
    index::populateIndexToLLVMConversionPatterns(converter, patterns);
    ub::populateUBToLLVMConversionPatterns(converter, patterns);
    populateVectorToLLVMConversionPatterns(converter, patterns);

    LLVMConversionTarget target(*ctx);
    configureGpuToNVVMConversionLegality(target);
    // Nothing of these dialects may stay behind a cast: an op without a
    // lowering is an error naming it, not a cast PTX generation trips on.
    target.addIllegalDialect<
        arith::ArithDialect, cf::ControlFlowDialect, func::FuncDialect,
        index::IndexDialect, math::MathDialect, memref::MemRefDialect,
        nvgpu::NVGPUDialect, ub::UBDialect, vector::VectorDialect>();
    if (failed(applyPartialConversion(m, target, std::move(patterns))))
      return failure();
    // Patterns written for a 64-bit index truncate or extend to i32 values
    // that already are i32 (cp.async's zero-fill count): drop those no-ops.
    m.walk([](Operation *op) {
      if (isa<LLVM::TruncOp, LLVM::SExtOp, LLVM::ZExtOp>(op) &&
          op->getOperand(0).getType() == op->getResult(0).getType()) {
        op->getResult(0).replaceAllUsesWith(op->getOperand(0));
        op->erase();
      }
    });
    // A loop's LLVM annotation (scf.for's `llvm.loop_annotation`, which
    // -convert-scf-to-cf carries to the latch's cf.br) arrives on llvm.br
    // as a discardable attribute that the translation ignores: make it the
    // branch's `loop_annotation`.
    m.walk([](LLVM::BrOp br) {
      if (auto annotation = br->getAttrOfType<LLVM::LoopAnnotationAttr>(
              kvattn::kLoopAnnotationAttr)) {
        br.setLoopAnnotationAttr(annotation);
        br->removeAttr(kvattn::kLoopAnnotationAttr);
      }
    });
    return success();
  }
};

} // namespace
