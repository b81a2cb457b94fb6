//===- Registration.cpp - register everything kvattn provides -------------===//

#include "kvattn/Registration/Registration.h"

#include "kvattn/Dialect/KVAttnDialect.h"
#include "kvattn/Passes/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

void mlir::kvattn::registerAllKVAttnDialects(mlir::DialectRegistry &registry) {
  registry.insert<mlir::kvattn::KVAttnDialect>();
  // The upstream dialects kvattn's pipelines lower through (tensor, memref,
  // scf, vector, gpu, nvvm, llvm, ...) together with the external interface
  // models the passes look up at run time: bufferization of func/scf/arith/
  // tensor ops, ConvertToLLVM, NVVM targets. registerAllDialects only
  // declares them; nothing is loaded until used.
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  // Translation to LLVM IR (CPU JIT, gpu-module-to-binary) and the NVVM
  // target of gpu-module-to-binary: without the latter that pass crashes.
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::NVVM::registerNVVMTargetInterfaceExternalModels(registry);
}

void mlir::kvattn::registerAllKVAttnPasses() {
  mlir::kvattn::registerKVAttnPasses();
  mlir::kvattn::registerKVAttnPipelines();
}
