// Links KVAttn::KVAttnRegistration: parses kvattn IR, runs the resolve pass
// and prints the result.
#include "kvattn/Registration/Registration.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

// Ordinary MLIR code (`using namespace mlir;`) names kvattn as `kvattn::`:
// the whole of kvattn is one namespace, mlir::kvattn.
namespace consumer {
using namespace mlir;
static void registerKVAttn(DialectRegistry &registry) {
  kvattn::registerAllKVAttnPasses();
  kvattn::registerAllKVAttnDialects(registry);
}
} // namespace consumer

int main() {
  mlir::DialectRegistry registry;
  consumer::registerKVAttn(registry);
  mlir::MLIRContext context(registry);
  const char *ir = R"(
    func.func @f(%q: tensor<1x1x2x8xf32>, %k: tensor<1x1x5x8xf32>,
                 %v: tensor<1x1x5x8xf32>) -> tensor<1x1x2x8xf32> {
      %o = kvattn.sdpa %q, %k, %v causal = lower_right
          : tensor<1x1x2x8xf32>, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32>
          -> tensor<1x1x2x8xf32>
      return %o : tensor<1x1x2x8xf32>
    })";
  auto module = mlir::parseSourceString<mlir::ModuleOp>(ir, &context);
  if (!module)
    return 1;
  mlir::PassManager pm(&context);
  if (mlir::failed(
          mlir::parsePassPipeline("kvattn-resolve-cached-append", pm)) ||
      mlir::failed(pm.run(*module)))
    return 1;
  module->print(llvm::outs());
  return 0;
}
