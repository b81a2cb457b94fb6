//===- kvattn-bench.cpp - throughput and compile time of the CPU path -----===//
//
//   kvattn-bench [--target=cpu] [--repeats N] [--dtype f32|f16|bf16]
//                [--quick] [--block-m M --block-n N]
//
// For a few cached-append shapes (decode P = 4096 L = 1, append P = 1024
// L = 64, prefill L = 1024; D = 64 and 128; GQA 8/2) it prints:
//   compile_ms  IR -> JIT-ready (the kvattn-to-cpu pipeline plus LLVM)
//   run_ms      median wall time of one call (after a warm-up call)
//   GFLOP/s     4 * D * (allowed query-key pairs) * Hq * B / run time:
//               only scores the causal mask allows are counted.
// Figures, not tests: nothing here asserts a speed.
//
//===----------------------------------------------------------------------===//

#include "kvattn/CPU/CpuRunner.h"
#include "kvattn/Registration/Registration.h"
#include "kvattn/Support/HostTensor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace cl = llvm::cl;

namespace {

cl::OptionCategory benchCategory("kvattn-bench options");
cl::opt<std::string> target("target",
                            cl::desc("cpu (the GPU benchmark is not written "
                                     "yet)"),
                            cl::init("cpu"), cl::cat(benchCategory));
cl::opt<std::string> dtype("dtype", cl::desc("f32, f16 or bf16"),
                           cl::init("f32"), cl::cat(benchCategory));
cl::opt<int> repeats("repeats", cl::desc("Timed calls per shape (median)"),
                     cl::init(5), cl::cat(benchCategory));
cl::opt<bool> quick("quick", cl::desc("Small shapes only (smoke run)"),
                    cl::init(false), cl::cat(benchCategory));
cl::opt<int64_t> blockM("block-m", cl::init(64), cl::cat(benchCategory));
cl::opt<int64_t> blockN("block-n", cl::init(64), cl::cat(benchCategory));

struct Shape {
  const char *name;
  int64_t b, hq, hkv, p, l, d;
};

/// One kvattn.attention over a cache of P + L keys, lower-right causal.
std::string buildIR(const Shape &s, const std::string &elt) {
  int64_t S = s.p + s.l;
  auto t = [&](int64_t b, int64_t h, int64_t n, int64_t d) {
    return llvm::formatv("tensor<{0}x{1}x{2}x{3}x{4}>", b, h, n, d, elt).str();
  };
  std::string q = t(s.b, s.hq, s.l, s.d), kv = t(s.b, s.hkv, S, s.d);
  return llvm::formatv("func.func @main(%q: {0}, %k: {1}, %v: {1}, %pos: "
                       "tensor<{2}xi32>) "
                       "-> {0} {{\n"
                       "  %o = kvattn.attention %q, %k, %v q_offset(%pos : "
                       "tensor<{2}xi32>) "
                       "causal : {0}, {1}, {1} -> {0}\n"
                       "  return %o : {0}\n}\n",
                       q, kv, s.b)
      .str();
}

kvattn::HostTensor random(kvattn::ElementType type, std::vector<int64_t> shape,
                          uint64_t seed) {
  kvattn::HostTensor t(type, std::move(shape));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < t.numElements(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t.setDouble(i, static_cast<double>(x >> 11) / 9007199254740992.0 - 0.5);
  }
  return t;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(benchCategory);
  cl::ParseCommandLineOptions(argc, argv, "kvattn-bench\n");
  if (target != "cpu") {
    llvm::errs() << "kvattn-bench: error: --target=" << target
                 << " is not available: the GPU benchmark (tensor cores, "
                    "CUDA-event timing) is not written yet\n";
    return 1;
  }
  std::optional<kvattn::ElementType> elt = kvattn::parseElementType(dtype);
  if (!elt || !kvattn::isFloatType(*elt) || *elt == kvattn::ElementType::F64) {
    llvm::errs() << "kvattn-bench: error: --dtype must be f32, f16 or bf16\n";
    return 1;
  }

  mlir::registerAllPasses();
  kvattn::registerAllKVAttnPasses();
  mlir::DialectRegistry registry;
  kvattn::registerAllKVAttnDialects(registry);
  mlir::MLIRContext context(registry);

  std::vector<Shape> shapes;
  if (quick) {
    shapes = {{"decode", 1, 8, 2, 512, 1, 64},
              {"append", 1, 8, 2, 256, 16, 64},
              {"prefill", 1, 8, 2, 0, 128, 64}};
  } else {
    for (int64_t d : {64, 128}) {
      shapes.push_back({"decode", 1, 8, 2, 4096, 1, d});
      shapes.push_back({"append", 1, 8, 2, 1024, 64, d});
      shapes.push_back({"prefill", 1, 8, 2, 0, 1024, d});
    }
  }

  llvm::outs() << llvm::formatv(
      "kvattn-bench --target=cpu dtype={0} blocks={1}x{2} (one thread)\n",
      dtype.getValue(), blockM.getValue(), blockN.getValue());
  llvm::outs() << llvm::formatv("{0,-8} {1,3} {2,6} {3,6} {4,5} {5,4} {6,11} "
                                "{7,9} {8,9}\n",
                                "shape", "B", "Hq/Hkv", "P", "L", "D",
                                "compile_ms", "run_ms", "GFLOP/s");
  for (const Shape &s : shapes) {
    auto module =
        mlir::parseSourceString<mlir::ModuleOp>(buildIR(s, dtype), &context);
    if (!module)
      return 1;
    kvattn::CpuCompileOptions options;
    options.blockM = blockM;
    options.blockN = blockN;
    std::unique_ptr<kvattn::CpuProgram> program;
    if (kvattn::Status st =
            kvattn::CpuProgram::compile(*module, "main", options, program);
        st.isError()) {
      llvm::errs() << "kvattn-bench: error: " << st.message() << "\n";
      return 1;
    }
    int64_t S = s.p + s.l;
    std::vector<kvattn::HostTensor> args = {
        random(*elt, {s.b, s.hq, s.l, s.d}, 1),
        random(*elt, {s.b, s.hkv, S, s.d}, 2),
        random(*elt, {s.b, s.hkv, S, s.d}, 3),
        kvattn::HostTensor(kvattn::ElementType::I32, {s.b})};
    for (int64_t b = 0; b < s.b; ++b)
      args[3].setInt(b, s.p);
    std::vector<kvattn::HostTensor> results;
    std::vector<double> times;
    for (int r = 0; r <= repeats; ++r) {
      auto start = std::chrono::steady_clock::now();
      if (kvattn::Status st = program->run(args, results); st.isError()) {
        llvm::errs() << "kvattn-bench: error: " << st.message() << "\n";
        return 1;
      }
      double ms = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - start)
                      .count();
      if (r > 0) // The first call is the warm-up.
        times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    // Allowed pairs of a lower-right causal block: row i sees P + i + 1 keys.
    double pairs = 0;
    for (int64_t i = 0; i < s.l; ++i)
      pairs += static_cast<double>(std::min<int64_t>(S, s.p + i + 1));
    double flops = 4.0 * s.d * pairs * s.hq * s.b;
    llvm::outs() << llvm::formatv(
        "{0,-8} {1,3} {2,6} {3,6} {4,5} {5,4} {6,11:F1} {7,9:F3} {8,9:F2}\n",
        s.name, s.b, llvm::formatv("{0}/{1}", s.hq, s.hkv).str(), s.p, s.l, s.d,
        program->pipelineMs() + program->jitMs(), median,
        flops / (median * 1e6));
  }
  return 0;
}
