//===- kvattn-opt.cpp - the kvattn optimizer driver -----------------------===//
//
// mlir-opt with the kvattn dialect, its passes and pipelines, and the
// upstream dialects and passes the pipelines lower through.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Registration/Registration.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::kvattn::registerAllKVAttnPasses();

  mlir::DialectRegistry registry;
  mlir::kvattn::registerAllKVAttnDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "kvattn optimizer driver\n", registry));
}
