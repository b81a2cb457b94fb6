//===- KVAttnPlugin.cpp - kvattn as an mlir-opt plugin --------------------===//
//
// One shared library that upstream tools load at run time:
//
//   mlir-opt --load-dialect-plugin=KVAttnPlugin.so \
//            --load-pass-plugin=KVAttnPlugin.so \
//            --kvattn-resolve-cached-append input.mlir
//
// The dialect plugin adds the kvattn dialect (and the upstream dialects and
// interface models its pipelines use) to the tool's registry; the pass
// plugin registers kvattn's passes and pipelines. The library links
// libMLIR.so dynamically, as Debian's mlir-opt does, so both share one MLIR.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Registration/Registration.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/Plugins/DialectPlugin.h"
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/Compiler.h"

extern "C" LLVM_ATTRIBUTE_WEAK mlir::DialectPluginLibraryInfo
mlirGetDialectPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "KVAttn", LLVM_VERSION_STRING,
          [](mlir::DialectRegistry *registry) {
            mlir::kvattn::registerAllKVAttnDialects(*registry);
          }};
}

extern "C" LLVM_ATTRIBUTE_WEAK mlir::PassPluginLibraryInfo
mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "KVAttnPasses", LLVM_VERSION_STRING,
          []() { mlir::kvattn::registerAllKVAttnPasses(); }};
}
