// Links KVAttn::KVAttnRegistration and KVAttn::KVAttnCPU: parses kvattn IR,
// runs the resolve pass, prints the result, then compiles it for the host
// and runs it on the 2x5 example of docs/semantics.md; raises an SDPA
// written in linalg to kvattn with -kvattn-raise-sdpa.
#include "kvattn/CPU/CpuRunner.h"
#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"
#include "kvattn/Registration/Registration.h"
#include "kvattn/Support/HostTensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/Format.h"
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

  // Zero queries and keys weigh the allowed values equally; value j is
  // 10 (j + 1), so row 0 (position 3) averages 10..40 and row 1 10..50.
  using mlir::kvattn::ElementType;
  using mlir::kvattn::HostTensor;
  std::vector<HostTensor> args = {HostTensor(ElementType::F32, {1, 1, 2, 8}),
                                  HostTensor(ElementType::F32, {1, 1, 5, 8}),
                                  HostTensor(ElementType::F32, {1, 1, 5, 8})};
  for (int64_t i = 0; i < args[2].numElements(); ++i)
    args[2].setDouble(i, 10.0 * (i / 8 + 1));
  std::unique_ptr<mlir::kvattn::CpuProgram> program;
  std::vector<HostTensor> results;
  if (mlir::kvattn::Status s = mlir::kvattn::CpuProgram::compile(
          *module, "f", mlir::kvattn::CpuCompileOptions(), program);
      s.isError()) {
    llvm::errs() << s.message() << "\n";
    return 1;
  }
  if (mlir::kvattn::Status s = program->run(args, results); s.isError()) {
    llvm::errs() << s.message() << "\n";
    return 1;
  }
  // %g: raw_ostream prints a double in exponent form (2.500000e+01).
  llvm::outs() << llvm::format("cpu: %g %g\n", results[0].getDouble(0),
                               results[0].getDouble(8));

  // SDPA as a linalg front end writes it: Q K^T, a constant scale,
  // linalg.softmax over the keys, P V.
  const char *linalgIR = R"(
    func.func @g(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>,
                 %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
      %zero = arith.constant 0.0 : f32
      %e0 = tensor.empty() : tensor<2x2x5xf32>
      %f0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
      %et = tensor.empty() : tensor<2x4x5xf32>
      %kt = linalg.transpose ins(%k : tensor<2x5x4xf32>)
          outs(%et : tensor<2x4x5xf32>) permutation = [0, 2, 1]
      %s = linalg.batch_matmul ins(%q, %kt : tensor<2x2x4xf32>, tensor<2x4x5xf32>)
          outs(%f0 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
      %e1 = tensor.empty() : tensor<2x2x5xf32>
      %scaled = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>,
          affine_map<(a, b, c) -> (a, b, c)>],
          iterator_types = ["parallel", "parallel", "parallel"]}
          ins(%s : tensor<2x2x5xf32>) outs(%e1 : tensor<2x2x5xf32>) {
      ^bb0(%x: f32, %o: f32):
        %c = arith.constant 0.5 : f32
        %m = arith.mulf %x, %c : f32
        linalg.yield %m : f32
      } -> tensor<2x2x5xf32>
      %e2 = tensor.empty() : tensor<2x2x5xf32>
      %p = linalg.softmax dimension(2) ins(%scaled : tensor<2x2x5xf32>)
          outs(%e2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
      %e3 = tensor.empty() : tensor<2x2x4xf32>
      %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
      %o = linalg.batch_matmul ins(%p, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>)
          outs(%f3 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
      return %o : tensor<2x2x4xf32>
    })";
  auto linalgModule =
      mlir::parseSourceString<mlir::ModuleOp>(linalgIR, &context);
  if (!linalgModule)
    return 1;
  mlir::PassManager raise(&context);
  raise.addPass(mlir::kvattn::createRaiseSdpaPass());
  if (mlir::failed(raise.run(*linalgModule)))
    return 1;
  bool raised = false;
  linalgModule->walk([&](mlir::kvattn::SdpaOp) { raised = true; });
  llvm::outs() << "raised: " << (raised ? "kvattn.sdpa" : "nothing") << "\n";
  return 0;
}
