//===- CommandLine.cpp - MLIR's --mlir-* flags in kvattn's tools ----------===//

#include "kvattn/Registration/CommandLine.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/CommandLine.h"

void mlir::kvattn::registerMLIRCommandLineOptions() {
  mlir::registerPassManagerCLOptions();
  mlir::registerDefaultTimingManagerCLOptions();
  mlir::registerMLIRContextCLOptions();
  mlir::registerAsmPrinterCLOptions();
}

bool mlir::kvattn::mlirFlagsGiven() {
  for (const auto &[name, option] : llvm::cl::getRegisteredOptions())
    if (name.starts_with("mlir-") && option->getNumOccurrences())
      return true;
  return false;
}

std::function<bool(mlir::PassManager &)>
mlir::kvattn::mlirFlagsPassManagerHook() {
  if (!mlirFlagsGiven())
    return {};
  return [](mlir::PassManager &pm) {
    if (mlir::failed(mlir::applyPassManagerCLOptions(pm)))
      return false;
    mlir::applyDefaultTimingPassManagerCLOptions(pm);
    return true;
  };
}
