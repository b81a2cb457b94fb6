//===- kvattn-bench.cpp - throughput and compile time (CPU and GPU) -------===//
//
//   kvattn-bench [--target=cpu] [--repeats N] [--dtype f32|f16|bf16]
//                [--quick] [--block-m M --block-n N] [--num-threads T]
//                [--batch B] [--heads Hq/Hkv] [--lengths ...]
//                [--prefixes ...] [--head-dims ...] [--vectorize=false]
//
// For a few cached-append shapes (decode P = 4096 L = 1, append P = 1024
// L = 64, prefill L = 1024; D = 64 and 128; GQA 8/2; or the product of
// --lengths, --prefixes and --head-dims) it prints the host's measured f32
// FMA peak (a probe in the same run, one thread and T threads), then:
//   compile_ms  IR -> JIT-ready (the kvattn-to-cpu pipeline plus LLVM)
//   run_ms      median wall time of one call (after a warm-up call)
//   GFLOP/s     4 * D * (allowed query-key pairs) * Hq * B / run time:
//               only scores the causal mask allows are counted.
//   %peak       GFLOP/s over the probe's peak at the same thread count.
//
//   kvattn-bench --target=gpu [--compile-only] [--quick] [--lengths=...]
//                [--prefixes=...] [--head-dims=...] [--repeats N] ...
//
// Cached append L in {1, 8, 64, 512, 2048} x P in {0, 4096, 32768} x D in
// {64, 128}, bf16, GQA 32/8, lower-right causal, the batch sized to fill the
// GPU: PTX from mlir::kvattn::compileToPtx, launched through rt::Runtime, timed
// with CUDA events (median of --repeats after --warmup calls, the L2 cache
// flushed before each). The first line is the device-to-device copy
// bandwidth; per shape: the time, TFLOP/s over allowed scores only, the GB/s
// of the K/V a kernel must read at least and, for decode (L <= 8), that as a
// share of the copy bandwidth. --compile-only builds every shape's PTX
// without a driver and prints compile_ms (the fastest of --compile-repeats
// cold compiles), its phases (mlir_ms: the kvattn passes, the conversion to
// NVVM and the translation to LLVM IR with libdevice; opt_ms: LLVM's
// optimiser; cg_ms: the NVPTX back end) and cached_ms (the same compile
// answered by the kernel cache). See docs/benchmarks.md.
//
//   kvattn-bench --target=gpu-emu [--quick] [--lengths=... --prefixes=...]
//
// The same kernels on the emulated GPU (docs/gpu-emulator.md), batch 1:
// per shape one launch, then its counters ("emu:" lines: instructions,
// mma, ldmatrix, bank conflicts, barriers per KV block, sector
// efficiency). Default shapes: decode P = 4096 L = 1, append P = 1024
// L = 64, prefill L = 512; D = 64 and 128. Times are emulation times.
//
// Figures, not tests: nothing here asserts a speed.
//
//===----------------------------------------------------------------------===//

#include "CompileFlags.h"
#include "FmaProbe.h"
#include "kvattn/CPU/CpuRunner.h"
#include "kvattn/Registration/Registration.h"
#include "kvattn/Runtime/EmulatedGpu.h"
#include "kvattn/Runtime/Runtime.h"
#include "kvattn/Support/HostTensor.h"
#include "kvattn/Target/KernelCache.h"
#include "kvattn/Target/Ptx.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

namespace cl = llvm::cl;

namespace {

cl::OptionCategory benchCategory("kvattn-bench options");
cl::opt<std::string> target("target",
                            cl::desc("cpu (the JIT, default), gpu (the CUDA "
                                     "driver; or --compile-only) or gpu-emu "
                                     "(the emulated GPU's counters)"),
                            cl::init("cpu"), cl::cat(benchCategory));
cl::opt<std::string> dtype("dtype",
                           cl::desc("f32, f16 or bf16 (default: f32 on the "
                                    "CPU, bf16 on the GPU)"),
                           cl::init("f32"), cl::cat(benchCategory));
cl::opt<int> repeats("repeats",
                     cl::desc("Timed calls per shape (median; default 5 on "
                              "the CPU, 20 on the GPU)"),
                     cl::init(5), cl::cat(benchCategory));
cl::opt<bool> quick("quick", cl::desc("Small shapes only (smoke run)"),
                    cl::init(false), cl::cat(benchCategory));
// The compile options shared with kvattn-run and kvattn-compile
// (tools/common).
mlir::kvattn::tools::CompileFlagDefaults benchDefaults() {
  mlir::kvattn::tools::CompileFlagDefaults d;
  d.blockN = 64;
  return d;
}
namespace flag = mlir::kvattn::tools;
flag::CompileFlags flags(benchCategory,
                         flag::kBlockM | flag::kBlockN | flag::kSplitKv |
                             flag::kTensorCores | flag::kGpuSchedule |
                             flag::kIndexBitwidth | flag::kNumThreads |
                             flag::kVectorize,
                         benchDefaults());

// --target=cpu
cl::opt<std::string> heads("heads",
                           cl::desc("cpu: query/KV heads Hq/Hkv (GQA; "
                                    "default 8/2)"),
                           cl::init("8/2"), cl::cat(benchCategory));

// --target=gpu
cl::opt<bool> compileOnly("compile-only",
                          cl::desc("GPU: build every shape's PTX and print "
                                   "compile_ms; needs no driver"),
                          cl::init(false), cl::cat(benchCategory));
cl::list<int64_t> lengths("lengths",
                          cl::desc("New tokens L (GPU default "
                                   "1,8,64,512,2048; CPU 1,64,1024)"),
                          cl::CommaSeparated, cl::cat(benchCategory));
cl::list<int64_t> prefixes("prefixes",
                           cl::desc("Cached tokens P (GPU default "
                                    "0,4096,32768; CPU 0,1024,4096)"),
                           cl::CommaSeparated, cl::cat(benchCategory));
cl::list<int64_t> headDims("head-dims",
                           cl::desc("Head dims D (default 64,128)"),
                           cl::CommaSeparated, cl::cat(benchCategory));
cl::opt<int64_t> batch("batch",
                       cl::desc("Batch size (GPU default 0: sized to fill "
                                "the device; CPU 1)"),
                       cl::init(0), cl::cat(benchCategory));
cl::opt<int> warmup("warmup", cl::desc("GPU: untimed calls before timing"),
                    cl::init(3), cl::cat(benchCategory));
cl::opt<int64_t> flushMiB("flush-mib",
                          cl::desc("GPU: MiB filled before each call to evict "
                                   "the L2 cache (0: no flush)"),
                          cl::init(256), cl::cat(benchCategory));
cl::opt<int64_t> copyMiB("copy-mib",
                         cl::desc("GPU: MiB copied device-to-device for the "
                                  "reference bandwidth"),
                         cl::init(1024), cl::cat(benchCategory));
cl::opt<std::string> chip("chip",
                          cl::desc("GPU: target chip (default: the device's "
                                   "own; sm_90 with --compile-only)"),
                          cl::init(""), cl::cat(benchCategory));
cl::opt<int> compileRepeats("compile-repeats",
                            cl::desc("GPU --compile-only: cold compiles per "
                                     "shape; compile_ms and its phases are "
                                     "the fastest's (default 3)"),
                            cl::init(3), cl::cat(benchCategory));
cl::opt<int> assumedSms("sms",
                        cl::desc("GPU --compile-only: multiprocessors assumed "
                                 "for the batch size (H200: 132)"),
                        cl::init(132), cl::cat(benchCategory));

cl::opt<std::string>
    feature("feature",
            cl::desc("CPU: a feature on every shape: none (default), sinks "
                     "(attention sinks, f32 [Hq]) or alibi (ALiBi slopes, f32 "
                     "[Hq]); their cost against none on the same shapes"),
            cl::init("none"), cl::cat(benchCategory));

cl::opt<int64_t> pageSize(
    "page-size",
    cl::desc("CPU: also run every shape over a paged cache of pages of this "
             "many tokens (block_table, kv_len; the pages in reverse order "
             "over the pool) and print the paged and contiguous minima of the "
             "same run, calls interleaved (0: contiguous only)"),
    cl::init(0), cl::cat(benchCategory));

cl::opt<bool> dynamicShapes(
    "dynamic",
    cl::desc("CPU: compile with run-time batch, query and key lengths (and "
             "page counts), as the serving plans do"),
    cl::init(false), cl::cat(benchCategory));

/// A size in a tensor type: `?` with --dynamic.
std::string dimOf(int64_t v) {
  return dynamicShapes ? std::string("?") : std::to_string(v);
}

cl::opt<bool> checkedRuns(
    "checked",
    cl::desc("CPU: time the checked call (the C API's kvattn_cpu_run: "
             "argument checks, then the kernel) instead of the kernel alone"),
    cl::init(false), cl::cat(benchCategory));

cl::opt<bool>
    mla("mla",
        cl::desc("DeepSeek MLA decode (the latent form: D = 576, Dv = 512, "
                 "one KV head, paged 64) for --batch (default 1,16,64), 16 and "
                 "128 query heads and --prefixes cache lengths (default "
                 "1024,4096); GB/s of cache read and GFLOP/s (CPU) or TFLOP/s "
                 "(--target=gpu, on the device's chip or --chip; gpu-emu: B 1, "
                 "S 256 and the emulator's counters), beside FlashMLA's "
                 "published H800 figures"),
        cl::init(false), cl::cat(benchCategory));

struct Shape {
  const char *name;
  int64_t b, hq, hkv, p, l, d;
};

/// One kvattn.attention over a cache of P + L keys, lower-right causal.
std::string buildIR(const Shape &s, const std::string &elt) {
  int64_t S = s.p + s.l;
  auto t = [&](int64_t b, int64_t h, int64_t n, int64_t d) {
    return llvm::formatv("tensor<{0}x{1}x{2}x{3}x{4}>", dimOf(b), h, dimOf(n),
                         d, elt)
        .str();
  };
  std::string q = t(s.b, s.hq, s.l, s.d), kv = t(s.b, s.hkv, S, s.d);
  // --feature: one more f32 [Hq] argument, the last.
  std::string extraArg, extraUse;
  if (feature != "none") {
    std::string type = llvm::formatv("tensor<{0}xf32>", s.hq).str();
    std::string group = feature == "sinks" ? "sinks" : "alibi_slopes";
    extraArg = ", %f: " + type;
    extraUse = " " + group + "(%f : " + type + ")";
  }
  return llvm::formatv("func.func @main(%q: {0}, %k: {1}, %v: {1}, %pos: "
                       "tensor<{2}xi32>{3}) "
                       "-> {0} {{\n"
                       "  %o = kvattn.attention %q, %k, %v q_offset(%pos : "
                       "tensor<{2}xi32>){4} "
                       "causal : {0}, {1}, {1} -> {0}\n"
                       "  return %o : {0}\n}\n",
                       q, kv, dimOf(s.b), extraArg, extraUse)
      .str();
}

/// The same attention over a paged cache: K and V `[num_pages, page_size,
/// Hkv, D]`, read through `block_table [B, max_pages]` up to `kv_len`.
std::string buildPagedIR(const Shape &s, const std::string &elt, int64_t ps) {
  int64_t maxPages = (s.p + s.l + ps - 1) / ps;
  std::string q = llvm::formatv("tensor<{0}x{1}x{2}x{3}x{4}>", dimOf(s.b), s.hq,
                                dimOf(s.l), s.d, elt)
                      .str();
  std::string kv = llvm::formatv("tensor<{0}x{1}x{2}x{3}x{4}>",
                                 dimOf(s.b * maxPages), ps, s.hkv, s.d, elt)
                       .str();
  std::string vec = llvm::formatv("tensor<{0}xi32>", dimOf(s.b)).str();
  std::string table =
      llvm::formatv("tensor<{0}x{1}xi32>", dimOf(s.b), dimOf(maxPages)).str();
  return llvm::formatv("func.func @main(%q: {0}, %k: {1}, %v: {1}, %pos: {2}, "
                       "%len: {2}, %bt: {3}) -> {0} {{\n"
                       "  %o = kvattn.attention %q, %k, %v q_offset(%pos : "
                       "{2}) kv_len(%len : {2}) block_table(%bt : {3}) "
                       "causal : {0}, {1}, {1} -> {0}\n"
                       "  return %o : {0}\n}\n",
                       q, kv, vec, table)
      .str();
}

/// `cache` `[B, Hkv, S, D]` as pages `[B * max_pages, ps, Hkv, D]`, logical
/// page i of batch b at pool page `table[b][i]`; the pool's slots past S
/// are zero.
mlir::kvattn::HostTensor toPages(const mlir::kvattn::HostTensor &cache,
                                 const mlir::kvattn::HostTensor &table,
                                 int64_t ps) {
  int64_t b = cache.dim(0), hkv = cache.dim(1), S = cache.dim(2),
          d = cache.dim(3), maxPages = table.dim(1);
  mlir::kvattn::HostTensor pages(cache.elementType(),
                                 {b * maxPages, ps, hkv, d});
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t j = 0; j < S; ++j) {
        int64_t page = table.getInt(bi * maxPages + j / ps);
        for (int64_t x = 0; x < d; ++x)
          pages.setDouble(pages.flatIndex({page, j % ps, h, x}),
                          cache.getDouble(cache.flatIndex({bi, h, j, x})));
      }
  return pages;
}

mlir::kvattn::HostTensor random(mlir::kvattn::ElementType type,
                                std::vector<int64_t> shape, uint64_t seed) {
  mlir::kvattn::HostTensor t(type, std::move(shape));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < t.numElements(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t.setDouble(i, static_cast<double>(x >> 11) / 9007199254740992.0 - 0.5);
  }
  return t;
}

//===----------------------------------------------------------------------===//
// --target=cpu
//===----------------------------------------------------------------------===//

std::unique_ptr<mlir::kvattn::CpuProgram>
compileCpu(const std::string &ir, mlir::MLIRContext &context) {
  auto module = mlir::parseSourceString<mlir::ModuleOp>(ir, &context);
  if (!module)
    return nullptr;
  mlir::kvattn::CpuCompileOptions options;
  flags.apply(options);
  std::unique_ptr<mlir::kvattn::CpuProgram> program;
  if (mlir::kvattn::Status st =
          mlir::kvattn::CpuProgram::compile(*module, "main", options, program);
      st.isError()) {
    llvm::errs() << "kvattn-bench: error: " << st.message() << "\n";
    return nullptr;
  }
  return program;
}

/// --page-size: each shape over a contiguous and a paged cache holding the
/// same keys, the calls interleaved (contiguous, paged, contiguous, ...) so
/// that both see the same machine load; the minimum of each, their ratio,
/// and the largest difference of the two outputs (the same keys: 0 up to
/// the summation order, which both programs share).
/// With --checked: the arguments as the C API passes them, views of the
/// caller's memory (a copy of a view shares it, a copy of an owning tensor
/// copies it), so that a timed checked call times the checks, not copies.
/// `owners` keeps the memory.
void passAsViews(
    std::vector<mlir::kvattn::HostTensor> &args,
    std::vector<std::unique_ptr<mlir::kvattn::HostTensor>> &owners) {
  for (mlir::kvattn::HostTensor &t : args) {
    auto *owner = new mlir::kvattn::HostTensor(std::move(t));
    (void)mlir::kvattn::HostTensor::view(owner->elementType(), owner->shape(),
                                         owner->data(), t);
    owners.emplace_back(owner);
  }
}

int runPaged(mlir::kvattn::ElementType elt, mlir::MLIRContext &context,
             const std::vector<Shape> &shapes) {
  llvm::outs() << llvm::formatv("{0,-8} {1,3} {2,6} {3,6} {4,5} {5,4} {6,5} "
                                "{7,10} {8,10} {9,7} {10,9}\n",
                                "shape", "B", "Hq/Hkv", "P", "L", "D", "page",
                                "contig_ms", "paged_ms", "ratio", "max_diff");
  std::vector<std::unique_ptr<mlir::kvattn::HostTensor>> owners;
  for (const Shape &s : shapes) {
    std::unique_ptr<mlir::kvattn::CpuProgram> contig =
        compileCpu(buildIR(s, dtype), context);
    std::unique_ptr<mlir::kvattn::CpuProgram> paged =
        compileCpu(buildPagedIR(s, dtype, pageSize), context);
    if (!contig || !paged)
      return 1;
    int64_t S = s.p + s.l, maxPages = (S + pageSize - 1) / pageSize;
    std::vector<mlir::kvattn::HostTensor> args = {
        random(elt, {s.b, s.hq, s.l, s.d}, 1),
        random(elt, {s.b, s.hkv, S, s.d}, 2),
        random(elt, {s.b, s.hkv, S, s.d}, 3),
        mlir::kvattn::HostTensor(mlir::kvattn::ElementType::I32, {s.b})};
    for (int64_t i = 0; i < s.b; ++i)
      args[3].setInt(i, s.p);
    // The pages in reverse order over the pool.
    mlir::kvattn::HostTensor table(mlir::kvattn::ElementType::I32,
                                   {s.b, maxPages}),
        kvLen(mlir::kvattn::ElementType::I32, {s.b});
    for (int64_t i = 0; i < s.b * maxPages; ++i)
      table.setInt(i, s.b * maxPages - 1 - i);
    for (int64_t i = 0; i < s.b; ++i)
      kvLen.setInt(i, S);
    std::vector<mlir::kvattn::HostTensor> pagedArgs = {
        args[0],
        toPages(args[1], table, pageSize),
        toPages(args[2], table, pageSize),
        args[3],
        kvLen,
        table};
    if (checkedRuns)
      for (auto *list : {&args, &pagedArgs})
        passAsViews(*list, owners);
    std::vector<mlir::kvattn::HostTensor> contigOut, pagedOut;
    double contigMin = 1e300, pagedMin = 1e300;
    for (int r = 0; r <= repeats; ++r) {
      for (int which = 0; which < 2; ++which) {
        auto start = std::chrono::steady_clock::now();
        mlir::kvattn::CpuProgram &program = which ? *paged : *contig;
        auto &a = which ? pagedArgs : args;
        auto &out = which ? pagedOut : contigOut;
        if (mlir::kvattn::Status st = r == 0 || checkedRuns
                                          ? program.run(a, out)
                                          : program.runUnchecked(a, out);
            st.isError()) {
          llvm::errs() << "kvattn-bench: error: " << st.message() << "\n";
          return 1;
        }
        double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - start)
                        .count();
        if (r > 0)
          (which ? pagedMin : contigMin) =
              std::min(which ? pagedMin : contigMin, ms);
      }
    }
    double diff = 0;
    for (int64_t i = 0; i < contigOut[0].numElements(); ++i)
      diff = std::max(diff, std::fabs(contigOut[0].getDouble(i) -
                                      pagedOut[0].getDouble(i)));
    llvm::outs() << llvm::formatv(
        "{0,-8} {1,3} {2,6} {3,6} {4,5} {5,4} {6,5} {7,10:F3} {8,10:F3} "
        "{9,7:F2} {10,9:E1}\n",
        s.name, s.b, llvm::formatv("{0}/{1}", s.hq, s.hkv).str(), s.p, s.l, s.d,
        pageSize, contigMin, pagedMin, pagedMin / contigMin, diff);
  }
  return 0;
}

/// DeepSeek MLA decode in the latent form (docs/semantics.md, "Latent KV"):
/// one new token per sequence, Hq query heads of D = 576 over one paged
/// latent cache [num_pages, 64, 1, 576] whose first 512 columns are V,
/// every sequence S keys long, DeepSeek's scale 1/sqrt(192).
std::string buildMlaIR(int64_t b, int64_t hq, int64_t s,
                       const std::string &elt) {
  constexpr int64_t kPage = 64, kD = 576, kDv = 512;
  int64_t maxPages = (s + kPage - 1) / kPage;
  std::string q =
      llvm::formatv("tensor<{0}x{1}x1x{2}x{3}>", b, hq, kD, elt).str();
  std::string out =
      llvm::formatv("tensor<{0}x{1}x1x{2}x{3}>", b, hq, kDv, elt).str();
  std::string kv =
      llvm::formatv("tensor<{0}x{1}x1x{2}x{3}>", b * maxPages, kPage, kD, elt)
          .str();
  std::string vec = llvm::formatv("tensor<{0}xi32>", b).str();
  std::string table = llvm::formatv("tensor<{0}x{1}xi32>", b, maxPages).str();
  return llvm::formatv("func.func @main(%q: {0}, %ckv: {1}, %len: {2}, %bt: "
                       "{3}) -> {4} {{\n"
                       "  %o = kvattn.attention %q, %ckv value_dim = 512 "
                       "kv_len(%len : {2}) block_table(%bt : {3}) scale = "
                       "0.0721687836 : {0}, {1} -> {4}\n"
                       "  return %o : {4}\n}\n",
                       q, kv, vec, table, out)
      .str();
}

int runMla(mlir::kvattn::ElementType elt, mlir::MLIRContext &context,
           double peakGflops) {
  constexpr int64_t kPage = 64, kD = 576, kDv = 512;
  std::vector<int64_t> batches = {1, 16, 64}, lens = {1024, 4096};
  if (batch)
    batches = {batch};
  else if (quick)
    batches = {1, 4};
  if (!prefixes.empty())
    lens.assign(prefixes.begin(), prefixes.end());
  else if (quick)
    lens = {256};
  const double eltBytes =
      static_cast<double>(mlir::kvattn::elementTypeSize(elt));
  llvm::outs() << llvm::formatv("{0,-10} {1,3} {2,4} {3,6} {4,11} {5,9} "
                                "{6,8} {7,9} {8,6}\n",
                                "shape", "B", "Hq", "S", "compile_ms", "run_ms",
                                "GB/s", "GFLOP/s", "%peak");
  double bestGBs = 0, bestGflops = 0;
  for (int64_t b : batches)
    for (int64_t hq : {16, 128})
      for (int64_t s : lens) {
        if (s < 1) {
          llvm::errs() << "kvattn-bench: error: --mla needs cache lengths "
                          ">= 1\n";
          return 1;
        }
        std::unique_ptr<mlir::kvattn::CpuProgram> program =
            compileCpu(buildMlaIR(b, hq, s, dtype), context);
        if (!program)
          return 1;
        int64_t maxPages = (s + kPage - 1) / kPage;
        mlir::kvattn::HostTensor table(mlir::kvattn::ElementType::I32,
                                       {b, maxPages}),
            kvLen(mlir::kvattn::ElementType::I32, {b});
        // The pages in reverse order over the pool.
        for (int64_t i = 0; i < b * maxPages; ++i)
          table.setInt(i, b * maxPages - 1 - i);
        for (int64_t i = 0; i < b; ++i)
          kvLen.setInt(i, s);
        std::vector<mlir::kvattn::HostTensor> args = {
            random(elt, {b, hq, 1, kD}, 1),
            random(elt, {b * maxPages, kPage, 1, kD}, 2), kvLen, table};
        std::vector<std::unique_ptr<mlir::kvattn::HostTensor>> owners;
        if (checkedRuns)
          passAsViews(args, owners);
        std::vector<mlir::kvattn::HostTensor> results;
        std::vector<double> times;
        for (int r = 0; r <= repeats; ++r) {
          auto start = std::chrono::steady_clock::now();
          if (mlir::kvattn::Status st =
                  r == 0 || checkedRuns ? program->run(args, results)
                                        : program->runUnchecked(args, results);
              st.isError()) {
            llvm::errs() << "kvattn-bench: error: " << st.message() << "\n";
            return 1;
          }
          double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count();
          if (r > 0)
            times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        double median = times[times.size() / 2];
        // FlashMLA's accounting: the latent cache read once (B S 576
        // elements), 2 (D + Dv) FLOPs per query head and key.
        double gbs = b * s * kD * eltBytes / (median * 1e6);
        double gflops = 2.0 * (kD + kDv) * hq * s * b / (median * 1e6);
        bestGBs = std::max(bestGBs, gbs);
        bestGflops = std::max(bestGflops, gflops);
        llvm::outs() << llvm::formatv(
            "{0,-10} {1,3} {2,4} {3,6} {4,11:F1} {5,9:F3} {6,8:F2} {7,9:F2} "
            "{8,6:F1}\n",
            "mla-decode", b, hq, s, program->pipelineMs() + program->jitMs(),
            median, gbs, gflops, 100.0 * gflops / peakGflops);
      }
  // A stated comparison only: FlashMLA's published H800 SXM5 figures
  // (github.com/deepseek-ai/FlashMLA README), not measured here.
  llvm::outs() << llvm::formatv(
      "stated comparison (not measured here, different hardware): FlashMLA "
      "on an H800 publishes 3000 GB/s memory-bound and 580 TFLOP/s "
      "compute-bound decode; the best CPU figures above are {0:F2} GB/s "
      "({1:E1} of it) and {2:F2} GFLOP/s ({3:E1} of it)\n",
      bestGBs, bestGBs / 3000.0, bestGflops, bestGflops / 580000.0);
  return 0;
}

int runCpu(mlir::kvattn::ElementType elt, mlir::MLIRContext &context) {
  if (repeats < 1) {
    llvm::errs() << "kvattn-bench: error: --repeats must be >= 1 (got "
                 << repeats << ")\n";
    return 1;
  }
  if (feature != "none" && feature != "sinks" && feature != "alibi") {
    llvm::errs() << "kvattn-bench: error: --feature must be none, sinks or "
                    "alibi, got '"
                 << feature << "'\n";
    return 1;
  }
  if (pageSize < 0) {
    llvm::errs() << "kvattn-bench: error: --page-size=" << pageSize
                 << " is negative\n";
    return 1;
  }
  if (pageSize > 0 && feature != "none") {
    llvm::errs() << "kvattn-bench: error: --page-size does not combine with "
                    "--feature\n";
    return 1;
  }
  int64_t hq = 0, hkv = 0;
  {
    auto [q, kv] = llvm::StringRef(heads).split('/');
    if (q.getAsInteger(10, hq) || kv.getAsInteger(10, hkv) || hq < 1 ||
        hkv < 1 || hq % hkv) {
      llvm::errs() << "kvattn-bench: error: --heads must be Hq/Hkv with Hkv "
                      "dividing Hq, got '"
                   << heads << "'\n";
      return 1;
    }
  }
  const int64_t b = batch ? batch : 1;
  std::vector<Shape> shapes;
  auto nameOf = [](int64_t p, int64_t l) {
    return l <= 8 ? "decode" : p ? "append" : "prefill";
  };
  if (lengths.empty() && prefixes.empty() && headDims.empty()) {
    if (quick) {
      shapes = {{"decode", b, hq, hkv, 512, 1, 64},
                {"append", b, hq, hkv, 256, 16, 64},
                {"prefill", b, hq, hkv, 0, 128, 64}};
    } else {
      for (int64_t d : {64, 128}) {
        shapes.push_back({"decode", b, hq, hkv, 4096, 1, d});
        shapes.push_back({"append", b, hq, hkv, 1024, 64, d});
        shapes.push_back({"prefill", b, hq, hkv, 0, 1024, d});
      }
    }
  } else {
    std::vector<int64_t> ls(lengths.begin(), lengths.end()),
        ps(prefixes.begin(), prefixes.end()),
        ds(headDims.begin(), headDims.end());
    if (ls.empty())
      ls = {1, 64, 1024};
    if (ps.empty())
      ps = {0, 1024, 4096};
    if (ds.empty())
      ds = {64, 128};
    for (int64_t d : ds)
      for (int64_t p : ps)
        for (int64_t l : ls)
          shapes.push_back({nameOf(p, l), b, hq, hkv, p, l, d});
  }

  // The host's f32 FMA peak at the thread count the programs use.
  const int threads =
      flags.numThreads() > 0
          ? static_cast<int>(flags.numThreads())
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  mlir::kvattn::bench::FmaPeak peak =
      mlir::kvattn::bench::measureFmaPeak(threads);
  const double peakGflops = peak.allThreads;
  llvm::outs() << llvm::formatv(
      "kvattn-bench --target=cpu dtype={0} block-m={1} block-n={2} "
      "threads={3} lowering={4} feature={5}\n",
      dtype.getValue(),
      flags.blockM() ? std::to_string(flags.blockM()) : std::string("auto"),
      flags.blockN(), threads, flags.vectorize() ? "vector" : "scalar",
      feature.getValue());
  llvm::outs() << llvm::formatv(
      "host: {0} ({1} f32 lanes); measured FMA peak {2:F1} GFLOP/s on one "
      "thread, {3:F1} on {4}\n",
      peak.isa, peak.lanes, peak.perThread, peak.allThreads, threads);
  if (mla)
    return runMla(elt, context, peakGflops);
  if (pageSize > 0)
    return runPaged(elt, context, shapes);
  llvm::outs() << llvm::formatv("{0,-8} {1,3} {2,6} {3,6} {4,5} {5,4} {6,11} "
                                "{7,9} {8,9} {9,6}\n",
                                "shape", "B", "Hq/Hkv", "P", "L", "D",
                                "compile_ms", "run_ms", "GFLOP/s", "%peak");
  for (const Shape &s : shapes) {
    auto module =
        mlir::parseSourceString<mlir::ModuleOp>(buildIR(s, dtype), &context);
    if (!module)
      return 1;
    mlir::kvattn::CpuCompileOptions options;
    flags.apply(options);
    std::unique_ptr<mlir::kvattn::CpuProgram> program;
    if (mlir::kvattn::Status st = mlir::kvattn::CpuProgram::compile(
            *module, "main", options, program);
        st.isError()) {
      llvm::errs() << "kvattn-bench: error: " << st.message() << "\n";
      return 1;
    }
    int64_t S = s.p + s.l;
    std::vector<mlir::kvattn::HostTensor> args = {
        random(elt, {s.b, s.hq, s.l, s.d}, 1),
        random(elt, {s.b, s.hkv, S, s.d}, 2),
        random(elt, {s.b, s.hkv, S, s.d}, 3),
        mlir::kvattn::HostTensor(mlir::kvattn::ElementType::I32, {s.b})};
    for (int64_t i = 0; i < s.b; ++i)
      args[3].setInt(i, s.p);
    if (feature != "none") {
      // Sinks near the scores; ALiBi's slopes 2^(-8 (h + 1) / Hq).
      mlir::kvattn::HostTensor perHead(mlir::kvattn::ElementType::F32, {s.hq});
      for (int64_t h = 0; h < s.hq; ++h)
        perHead.setDouble(h, feature == "sinks"
                                 ? 0.25 * static_cast<double>(h % 4)
                                 : std::exp2(-8.0 * (h + 1) / s.hq));
      args.push_back(std::move(perHead));
    }
    std::vector<std::unique_ptr<mlir::kvattn::HostTensor>> owners;
    if (checkedRuns)
      passAsViews(args, owners);
    std::vector<mlir::kvattn::HostTensor> results;
    std::vector<double> times;
    for (int r = 0; r <= repeats; ++r) {
      auto start = std::chrono::steady_clock::now();
      // The warm-up call checks the arguments; the timed calls run only the
      // kernel, or with --checked the checked call.
      if (mlir::kvattn::Status st = r == 0 || checkedRuns
                                        ? program->run(args, results)
                                        : program->runUnchecked(args, results);
          st.isError()) {
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
    double gflops = 4.0 * s.d * pairs * s.hq * s.b / (median * 1e6);
    llvm::outs() << llvm::formatv(
        "{0,-8} {1,3} {2,6} {3,6} {4,5} {5,4} {6,11:F1} {7,9:F3} {8,9:F2} "
        "{9,6:F1}\n",
        s.name, s.b, llvm::formatv("{0}/{1}", s.hq, s.hkv).str(), s.p, s.l, s.d,
        program->pipelineMs() + program->jitMs(), median, gflops,
        100.0 * gflops / peakGflops);
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// --target=gpu
//===----------------------------------------------------------------------===//

constexpr int64_t kHq = 32, kHkv = 8;

/// Allowed query-key pairs of lower-right causal attention of L queries
/// after P cached keys: row i sees min(S, P + i + 1) keys.
double allowedPairs(int64_t p, int64_t l) {
  double pairs = 0;
  for (int64_t i = 0; i < l; ++i)
    pairs += static_cast<double>(std::min(p + l, p + i + 1));
  return pairs;
}

/// Bytes of Q, K, V and out of one batch entry.
double bytesPerBatch(int64_t p, int64_t l, int64_t d, size_t eltBytes) {
  return static_cast<double>(eltBytes) * d *
         (2.0 * kHq * l + 2.0 * kHkv * (p + l));
}

/// The smallest batch with at least 4 programs per multiprocessor (two
/// waves of two resident programs), capped so that its buffers fit in
/// `memoryBytes` and, with 32-bit index arithmetic (`indexBits`), that
/// each cache tensor stays below 2^31 elements (the runtime refuses a
/// larger one at launch). `programs` is the number of programs per batch
/// entry of the compiled kernel.
int64_t batchToFill(int64_t p, int64_t l, int64_t d, size_t eltBytes, int sms,
                    int64_t programs, double memoryBytes, unsigned indexBits) {
  programs = std::max<int64_t>(programs, 1);
  int64_t b = std::max<int64_t>(1, (4 * sms + programs - 1) / programs);
  auto fits =
      static_cast<int64_t>(memoryBytes / bytesPerBatch(p, l, d, eltBytes));
  if (indexBits < 64)
    fits = std::min(fits, ((int64_t(1) << 31) - 1) / (kHkv * (p + l) * d));
  return std::max<int64_t>(1, std::min(b, fits));
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// A rate with one decimal; "-" when nothing was measured (a zero time,
/// e.g. over the fake driver of the tests).
std::string rate(double value) {
  return value > 0 ? llvm::formatv("{0:F1}", value).str() : "-";
}

int gpuError(const std::string &message) {
  llvm::errs() << "kvattn-bench: error: --target=" << target << ": " << message
               << "\n";
  return 1;
}

/// Device buffers released with the object.
class DeviceBuffers {
public:
  explicit DeviceBuffers(mlir::kvattn::rt::Runtime *rt) : rt_(rt) {}
  ~DeviceBuffers() {
    for (mlir::kvattn::rt::DevicePtr p : ptrs_)
      (void)rt_->release(p);
  }
  mlir::kvattn::Status allocate(size_t bytes, mlir::kvattn::rt::DevicePtr &p) {
    KVATTN_RETURN_IF_ERROR(rt_->allocate(bytes, p));
    ptrs_.push_back(p);
    return mlir::kvattn::Status::ok();
  }

private:
  mlir::kvattn::rt::Runtime *rt_;
  std::vector<mlir::kvattn::rt::DevicePtr> ptrs_;
};

/// Each kernel of `manifest`, in order, with the arguments of `args` it
/// names (the sizes: all of them).
std::vector<mlir::kvattn::rt::LaunchArgs>
argsPerKernel(const mlir::kvattn::rt::Manifest &manifest,
              const mlir::kvattn::rt::LaunchArgs &args) {
  std::vector<mlir::kvattn::rt::LaunchArgs> out;
  for (const mlir::kvattn::rt::KernelInfo &k : manifest.kernels) {
    mlir::kvattn::rt::LaunchArgs a;
    a.sizes = args.sizes;
    a.metadataOnDevice = args.metadataOnDevice;
    for (const mlir::kvattn::rt::ParamInfo &param : k.params) {
      if (auto m = args.metadata.find(param.name); m != args.metadata.end())
        a.metadata.insert(*m);
      if (auto buf = args.buffers.find(param.name); buf != args.buffers.end())
        a.buffers.insert(*buf);
    }
    out.push_back(std::move(a));
  }
  return out;
}

/// The emulated GPU's counters of the launches since the last call, one
/// indented line per kernel.
void printCounters(mlir::kvattn::EmulatedGpu &emu) {
  std::string counters = emu.takeCounters();
  for (llvm::StringRef line : llvm::split(counters, '\n'))
    if (!line.empty())
      llvm::outs() << "      " << line << "\n";
  llvm::outs().flush();
}

/// A kernel's tile as the tables print it: BMxBN/Ww[/sN].
std::string tileName(const mlir::kvattn::KernelManifest &km) {
  std::string tile =
      llvm::formatv("{0}x{1}/{2}w", km.blockM, km.blockN, km.numWarps).str();
  if (km.splitKv > 1)
    tile += "/s" + std::to_string(km.splitKv);
  return tile;
}

/// The device a GPU benchmark runs on: the runtime (none with
/// --compile-only), the compile options for its chip, its SMs and the
/// memory a benchmark's buffers may take.
struct GpuDevice {
  std::unique_ptr<mlir::kvattn::rt::Runtime> runtime;
  mlir::kvattn::EmulatedGpu emu;
  mlir::kvattn::PtxOptions options;
  int sms = 0;
  double memoryBytes = 0;
};

/// Opens the GPU (the emulated one with `emulated`; with --compile-only
/// none, sm_90 and an H200's memory assumed) and sets the compile options
/// from the tool's flags and the device's chip (--chip overrides it).
mlir::kvattn::Status openGpu(bool emulated, GpuDevice &d) {
  using mlir::kvattn::Status;
  namespace rt = mlir::kvattn::rt;
  mlir::kvattn::PtxOptions &options = d.options;
  flags.applyGiven(options);
  d.sms = assumedSms;
  // compile_ms is the compiler's time, never a cache lookup.
  options.useKernelCache = false;
  if (emulated) {
    options.image = mlir::kvattn::DeviceImage::LlvmIR;
    rt::RuntimeOptions runtimeOptions;
    runtimeOptions.libraryPath = mlir::kvattn::emulatedDriverPath();
    KVATTN_RETURN_IF_ERROR(rt::Runtime::create(d.runtime, runtimeOptions));
    KVATTN_RETURN_IF_ERROR(
        mlir::kvattn::EmulatedGpu::open(runtimeOptions.libraryPath, d.emu));
    options.chip = chip.empty() ? d.runtime->defaultChip() : chip.getValue();
    d.sms = d.runtime->multiprocessorCount();
    options.numSms = d.sms;
    return Status::ok();
  }
  if (compileOnly) {
    options.chip = chip.empty() ? "sm_90a" : chip.getValue();
    d.memoryBytes = 0.4 * 141e9; // as on an H200
    return Status::ok();
  }
  KVATTN_RETURN_IF_ERROR(rt::Runtime::create(d.runtime));
  options.chip = chip.empty() ? d.runtime->defaultChip() : chip.getValue();
  d.sms = d.runtime->multiprocessorCount();
  options.numSms = d.sms;
  size_t freeBytes = 0, totalBytes = 0;
  KVATTN_RETURN_IF_ERROR(d.runtime->memoryInfo(freeBytes, totalBytes));
  d.memoryBytes = 0.4 * static_cast<double>(freeBytes);
  return Status::ok();
}

/// The reference bandwidth of a real GPU: a device-to-device copy of
/// --copy-mib, 2 x bytes / time (printed).
mlir::kvattn::Status measureCopy(mlir::kvattn::rt::Runtime &runtime, int reps,
                                 double &copyGBs) {
  namespace rt = mlir::kvattn::rt;
  llvm::outs() << llvm::formatv(
      "timing: CUDA events, median of {0} calls after {1} warm-up calls, "
      "{2} MiB filled before each call (L2 flush)\n",
      reps, warmup.getValue(), flushMiB.getValue());
  size_t bytes = static_cast<size_t>(copyMiB) << 20;
  DeviceBuffers copyBuffers(&runtime);
  rt::DevicePtr src = 0, dst = 0;
  std::vector<float> ms;
  KVATTN_RETURN_IF_ERROR(copyBuffers.allocate(bytes, src));
  KVATTN_RETURN_IF_ERROR(copyBuffers.allocate(bytes, dst));
  KVATTN_RETURN_IF_ERROR(runtime.fill(src, 1, bytes));
  KVATTN_RETURN_IF_ERROR(runtime.timeOnStream(
      [&] { return runtime.copyDeviceToDevice(dst, src, bytes); }, warmup, reps,
      ms));
  double t = median(ms);
  copyGBs = t > 0 ? 2.0 * static_cast<double>(bytes) / (t * 1e6) : 0;
  llvm::outs() << llvm::formatv("copy: device-to-device {0} MiB in {1:F3} "
                                "ms: {2} GB/s (2 x bytes / time)\n",
                                copyMiB.getValue(), t, rate(copyGBs));
  return mlir::kvattn::Status::ok();
}

/// Random inputs generated on the host once: a 16 MiB pool copied to the
/// device once, then tiled into every input buffer on the device.
class RandomPool {
public:
  mlir::kvattn::Status upload(mlir::kvattn::rt::Runtime &runtime,
                              DeviceBuffers &buffers,
                              mlir::kvattn::ElementType elt) {
    const size_t eltBytes = mlir::kvattn::elementTypeSize(elt);
    mlir::kvattn::HostTensor host =
        random(elt, {static_cast<int64_t>(kBytes / eltBytes)}, 7);
    KVATTN_RETURN_IF_ERROR(buffers.allocate(kBytes, pool_));
    return runtime.copyToDevice(pool_, host.data(), kBytes);
  }
  mlir::kvattn::Status fill(mlir::kvattn::rt::Runtime &runtime,
                            mlir::kvattn::rt::DevicePtr dst,
                            size_t bytes) const {
    for (size_t at = 0; at < bytes; at += kBytes)
      KVATTN_RETURN_IF_ERROR(runtime.copyDeviceToDevice(
          dst + at, pool_, std::min(kBytes, bytes - at)));
    return mlir::kvattn::Status::ok();
  }

private:
  static constexpr size_t kBytes = size_t(16) << 20;
  mlir::kvattn::rt::DevicePtr pool_ = 0;
};

/// DeepSeek MLA decode on the GPU (--mla --target=gpu, or gpu-emu for the
/// counters): the latent form of buildMlaIR (paged 64, the pages in reverse
/// order over the pool, one new token per sequence), 16 and 128 query heads
/// for --batch (default 1, 16, 64; the emulated GPU 1) and --prefixes cache
/// lengths (default 1024, 4096; emulated 256), on the device's chip or
/// --chip (sm_90a: the wgmma latent kernel at 128 heads). Time: CUDA
/// events, median after warm-up, the L2 flushed; GB/s of cache read
/// (FlashMLA's accounting, the latent row once: B S 576 elements) and
/// TFLOP/s (2 (D + Dv) per head and key), beside FlashMLA's published H800
/// figures (a stated comparison, not measured here).
int runMlaGpu(mlir::kvattn::ElementType elt, const std::string &eltName,
              mlir::MLIRContext &context, bool emulated) {
  using mlir::kvattn::Status;
  namespace rt = mlir::kvattn::rt;
  constexpr int64_t kPage = 64, kD = 576, kDv = 512;
  if (elt == mlir::kvattn::ElementType::F32)
    return gpuError("--mla on the GPU takes --dtype bf16 or f16");
  if (compileOnly)
    return gpuError("--mla does not take --compile-only (kvattn-compile the "
                    "latent form: bench/peers/run.py --shapes mla-decode)");
  const int reps = repeats.getNumOccurrences() ? repeats.getValue() : 20;
  std::vector<int64_t> batches = {1, 16, 64}, lens = {1024, 4096};
  if (emulated)
    batches = {1}, lens = {256};
  if (batch)
    batches = {batch};
  else if (quick && !emulated)
    batches = {1, 64};
  if (!prefixes.empty())
    lens.assign(prefixes.begin(), prefixes.end());
  else if (quick && !emulated)
    lens = {4096};
  for (int64_t s : lens)
    if (s < 1)
      return gpuError("--mla needs cache lengths (--prefixes) >= 1");
  GpuDevice device;
  if (Status s = openGpu(emulated, device); s.isError())
    return gpuError(s.message());
  rt::Runtime &runtime = *device.runtime;
  const size_t eltBytes = mlir::kvattn::elementTypeSize(elt);
  llvm::outs() << llvm::formatv(
      "kvattn-bench --mla --target={0}: {1}, {2} SMs; {3}, DeepSeek MLA "
      "decode (D = 576, Dv = 512, one latent KV head, paged 64)\n",
      target.getValue(), device.options.chip, device.sms, eltName);
  double copyGBs = 0;
  if (emulated)
    llvm::outs() << "emulated: one launch per shape; emu_s is the host's "
                    "time to emulate it (not a GPU time); the counters follow "
                    "each row (docs/gpu-emulator.md)\n";
  else if (Status s = measureCopy(runtime, reps, copyGBs); s.isError())
    return gpuError("measuring the copy bandwidth: " + s.message());
  DeviceBuffers poolBuffer(&runtime);
  RandomPool pool;
  if (Status s = pool.upload(runtime, poolBuffer, elt); s.isError())
    return gpuError("uploading the random inputs: " + s.message());
  if (emulated)
    llvm::outs() << llvm::formatv("{0,-10} {1,3} {2,4} {3,6} {4,-12} {5,11} "
                                  "{6,8}\n",
                                  "shape", "B", "Hq", "S", "tile", "compile_ms",
                                  "emu_s");
  else
    llvm::outs() << llvm::formatv("{0,-10} {1,3} {2,4} {3,6} {4,-12} {5,11} "
                                  "{6,9} {7,8} {8,8} {9,6}\n",
                                  "shape", "B", "Hq", "S", "tile", "compile_ms",
                                  "time_ms", "GB/s", "TFLOP/s", "%copy");
  int status = 0;
  double bestGBs = 0, bestTflops = 0;
  for (int64_t b : batches)
    for (int64_t hq : {16, 128})
      for (int64_t s : lens) {
        auto rowError = [&](const std::string &message) {
          llvm::outs() << llvm::formatv("{0,-10} {1,3} {2,4} {3,6} error: "
                                        "{4}\n",
                                        "mla-decode", b, hq, s, message);
          llvm::outs().flush();
          status = 1;
        };
        mlir::OwningOpRef<mlir::ModuleOp> module =
            mlir::parseSourceString<mlir::ModuleOp>(
                buildMlaIR(b, hq, s, eltName), &context);
        mlir::kvattn::PtxModule ptx;
        Status st =
            module ? mlir::kvattn::compileToPtx(*module, device.options, ptx)
                   : Status::error("the benchmark's IR does not parse");
        if (st.isError()) {
          rowError(st.message());
          continue;
        }
        const mlir::kvattn::KernelManifest &km = ptx.kernels.at(0);
        std::string tile = tileName(km);
        rt::Manifest manifest;
        const rt::Module *loaded = nullptr;
        st = rt::parseManifest(mlir::kvattn::manifestToJson(ptx, "mla.ptx"),
                               manifest);
        if (st.isOk())
          st = runtime.loadModule(ptx.ptx, loaded);
        const int64_t maxPages = (s + kPage - 1) / kPage;
        const size_t qBytes = eltBytes * b * hq * kD,
                     cacheBytes = eltBytes * b * maxPages * kPage * kD;
        DeviceBuffers buffers(&runtime);
        rt::LaunchArgs args;
        args.sizes.B = b;
        args.sizes.Hq = hq;
        args.sizes.Hkv = 1;
        args.sizes.L = 1;
        args.sizes.S = maxPages * kPage;
        args.sizes.numPages = b * maxPages;
        args.sizes.pageSize = kPage;
        args.sizes.maxPages = maxPages;
        std::vector<int32_t> table(b * maxPages);
        for (int64_t i = 0; i < b * maxPages; ++i)
          table[i] = b * maxPages - 1 - i; // the pages in reverse order
        const std::vector<int32_t> kvLen(b, s);
        // The metadata on the device, uploaded once, as a serving engine's
        // plan keeps it (no host validation or copy in the timed calls).
        args.metadataOnDevice = true;
        using Metadata = std::pair<const char *, const std::vector<int32_t> *>;
        for (const auto &[name, values] :
             {Metadata{"block_table", &table}, Metadata{"kv_len", &kvLen}}) {
          if (st.isOk())
            st = buffers.allocate(4 * values->size(), args.buffers[name]);
          if (st.isOk())
            st = runtime.copyToDevice(args.buffers[name], values->data(),
                                      4 * values->size());
        }
        const std::pair<const char *, size_t> inputs[] = {{"query", qBytes},
                                                          {"key", cacheBytes}};
        for (const auto &[name, bytes] : inputs) {
          if (st.isOk())
            st = buffers.allocate(bytes, args.buffers[name]);
          if (st.isOk())
            st = pool.fill(runtime, args.buffers[name], bytes);
        }
        if (st.isOk())
          st = buffers.allocate(eltBytes * b * hq * kDv, args.buffers["out"]);
        const int64_t chunks = km.splitKv;
        if (st.isOk() && chunks > 1)
          st = buffers.allocate(4 * chunks * b * hq * kDv,
                                args.buffers["out_parts"]);
        if (st.isOk() && chunks > 1)
          st = buffers.allocate(4 * chunks * b * hq, args.buffers["lse_parts"]);
        std::vector<rt::LaunchArgs> kernelArgs = argsPerKernel(manifest, args);
        if (st.isOk())
          st = runtime.synchronize();
        auto launchAll = [&] {
          for (size_t k = 0; k < manifest.kernels.size(); ++k)
            KVATTN_RETURN_IF_ERROR(
                runtime.launch(*loaded, manifest.kernels[k], kernelArgs[k]));
          return Status::ok();
        };
        if (emulated) {
          (void)device.emu.takeCounters();
          auto start = std::chrono::steady_clock::now();
          if (st.isOk())
            st = launchAll();
          if (st.isOk())
            st = runtime.synchronize();
          if (st.isError()) {
            rowError(st.message());
            continue;
          }
          double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count();
          llvm::outs() << llvm::formatv("{0,-10} {1,3} {2,4} {3,6} {4,-12} "
                                        "{5,11:F1} {6,8:F1}\n",
                                        "mla-decode", b, hq, s, tile,
                                        ptx.compileMs, seconds);
          printCounters(device.emu);
          continue;
        }
        std::vector<float> ms;
        if (st.isOk())
          st = runtime.timeOnStream(launchAll, warmup, reps, ms,
                                    static_cast<size_t>(flushMiB) << 20);
        if (st.isError()) {
          rowError(st.message());
          continue;
        }
        const double t = median(ms);
        // FlashMLA's accounting: the latent cache read once (B S 576
        // elements), 2 (D + Dv) FLOPs per query head and key.
        const double gbs = t > 0 ? b * s * kD * eltBytes / (t * 1e6) : 0;
        const double tflops =
            t > 0 ? 2.0 * (kD + kDv) * hq * s * b / (t * 1e9) : 0;
        bestGBs = std::max(bestGBs, gbs);
        bestTflops = std::max(bestTflops, tflops);
        std::string share =
            copyGBs > 0 ? llvm::formatv("{0:F0}%", 100.0 * gbs / copyGBs).str()
                        : "-";
        llvm::outs() << llvm::formatv(
            "{0,-10} {1,3} {2,4} {3,6} {4,-12} {5,11:F1} {6,9:F4} {7,8} "
            "{8,8} {9,6}\n",
            "mla-decode", b, hq, s, tile, ptx.compileMs, t, rate(gbs),
            rate(tflops), share);
        llvm::outs().flush();
      }
  if (!emulated)
    // A stated comparison only: FlashMLA's published H800 SXM5 figures
    // (github.com/deepseek-ai/FlashMLA README), not measured here.
    llvm::outs() << llvm::formatv(
        "stated comparison (not measured here, an H800): FlashMLA publishes "
        "3000 GB/s memory-bound and 580 TFLOP/s compute-bound decode; the "
        "best figures above are {0} GB/s and {1} TFLOP/s\n",
        rate(bestGBs), rate(bestTflops));
  return status;
}

int runGpu(mlir::kvattn::ElementType elt, const std::string &eltName,
           mlir::MLIRContext &context, bool emulated) {
  using mlir::kvattn::Status;
  namespace rt = mlir::kvattn::rt;
  std::vector<int64_t> ls = {1, 8, 64, 512, 2048}, ps = {0, 4096, 32768},
                       ds = {64, 128};
  if (quick) {
    ls = {1, 512};
    ps = {4096};
    ds = {128};
  }
  if (!lengths.empty())
    ls.assign(lengths.begin(), lengths.end());
  if (!prefixes.empty())
    ps.assign(prefixes.begin(), prefixes.end());
  if (!headDims.empty())
    ds.assign(headDims.begin(), headDims.end());
  for (int64_t v : ls)
    if (v < 1)
      return gpuError("--lengths must be positive");
  for (int64_t v : ps)
    if (v < 0)
      return gpuError("--prefixes must be non-negative");
  // (P, L) per shape: every P with every L, or on the emulated GPU (slow)
  // the three standard shapes unless --lengths/--prefixes say otherwise.
  std::vector<std::pair<int64_t, int64_t>> pls;
  if (emulated && lengths.empty() && prefixes.empty()) {
    pls = {{4096, 1}, {1024, 64}, {0, 512}};
    if (quick)
      pls = {{4096, 1}, {1024, 64}};
    if (headDims.empty())
      ds = quick ? std::vector<int64_t>{64} : std::vector<int64_t>{64, 128};
  } else {
    for (int64_t p : ps)
      for (int64_t l : ls)
        pls.push_back({p, l});
  }
  for (int64_t v : ds)
    if (v < 1)
      return gpuError("--head-dims must be positive");
  const int reps = repeats.getNumOccurrences() ? repeats.getValue() : 20;
  if (reps < 1 || warmup < 0)
    return gpuError("--repeats must be >= 1 and --warmup >= 0");
  const size_t eltBytes = elt == mlir::kvattn::ElementType::F32 ? 4 : 2;

  GpuDevice device;
  if (Status s = openGpu(emulated, device); s.isError())
    return gpuError(s.message());
  mlir::kvattn::PtxOptions &options = device.options;
  std::unique_ptr<rt::Runtime> &runtime = device.runtime;
  mlir::kvattn::EmulatedGpu &emu = device.emu;
  const int sms = device.sms;
  const double memoryBytes = device.memoryBytes;

  llvm::outs() << llvm::formatv(
      "kvattn-bench --target={0}{1}: {2}, {3} SMs{4}; {5}, Hq/Hkv = {6}/{7}, "
      "lower-right causal (q_offset = P, S = P + L)\n",
      target.getValue(), compileOnly ? " --compile-only" : "", options.chip,
      sms, compileOnly ? " (assumed, for B)" : "", eltName, kHq, kHkv);

  // The reference bandwidth: a device-to-device copy, 2 x bytes / time.
  double copyGBs = 0;
  if (emulated)
    llvm::outs() << "emulated: one launch per shape, batch 1; emu_s is the "
                    "host's time to emulate it (not a GPU time); the counters "
                    "follow each row (docs/gpu-emulator.md)\n";
  if (!compileOnly && !emulated)
    if (Status s = measureCopy(*runtime, reps, copyGBs); s.isError())
      return gpuError("measuring the copy bandwidth: " + s.message());

  // Random inputs, generated on the host once: a pool copied to the device
  // once, then tiled into every input buffer on the device.
  DeviceBuffers poolBuffer(runtime.get());
  RandomPool pool;
  if (!compileOnly)
    if (Status s = pool.upload(*runtime, poolBuffer, elt); s.isError())
      return gpuError("uploading the random inputs: " + s.message());
  auto fillRandom = [&](rt::DevicePtr dst, size_t bytes) {
    return pool.fill(*runtime, dst, bytes);
  };

  if (compileOnly)
    llvm::outs() << llvm::formatv(
        "{0,5} {1,6} {2,5} {3,4} {4,-10} {5,11} {6,8} {7,7} {8,6} {9,10} "
        "{10,8}\n",
        "B", "P", "L", "D", "tile", "compile_ms", "mlir_ms", "opt_ms", "cg_ms",
        "cached_ms", "ptx_kB");
  else if (emulated)
    llvm::outs() << llvm::formatv(
        "{0,5} {1,6} {2,5} {3,4} {4,-10} {5,11} {6,8}\n", "B", "P", "L", "D",
        "tile", "compile_ms", "emu_s");
  else
    llvm::outs() << llvm::formatv(
        "{0,5} {1,6} {2,5} {3,4} {4,-10} {5,11} {6,9} {7,8} {8,9} {9,6}\n", "B",
        "P", "L", "D", "tile", "compile_ms", "time_ms", "TFLOP/s", "KV_GB/s",
        "%copy");
  int status = 0;
  for (int64_t d : ds) {
    for (auto [p, l] : pls) {
      {
        const int64_t S = p + l;
        int64_t b = batch > 0 ? batch.getValue() : 1;
        auto rowError = [&](const std::string &message) {
          llvm::outs() << llvm::formatv("{0,5} {1,6} {2,5} {3,4} error: {4}\n",
                                        b, p, l, d, message);
          llvm::outs().flush();
          status = 1;
        };
        mlir::OwningOpRef<mlir::ModuleOp> module;
        auto compile = [&](int64_t batchSize, mlir::kvattn::PtxModule &ptx) {
          Shape shape{"append", batchSize, kHq, kHkv, p, l, d};
          module = mlir::parseSourceString<mlir::ModuleOp>(
              buildIR(shape, eltName), &context);
          if (!module)
            return Status::error("the benchmark's IR does not parse");
          return mlir::kvattn::compileToPtx(*module, options, ptx);
        };
        mlir::kvattn::PtxModule ptx;
        if (Status s = compile(b, ptx); s.isError()) {
          rowError(s.message());
          continue;
        }
        if (batch <= 0 && !emulated) {
          // The tile the compiler chose (block-m, GQA packing) decides the
          // programs per batch entry, hence the batch that fills the GPU.
          const mlir::kvattn::KernelManifest &probe = ptx.kernels.at(0);
          int64_t programs =
              kHq / probe.group *
              ((probe.group * l + probe.blockM - 1) / probe.blockM);
          b = batchToFill(p, l, d, eltBytes, sms, programs, memoryBytes,
                          options.indexBitwidth);
          if (b != 1) {
            if (Status s = compile(b, ptx); s.isError()) {
              rowError(s.message());
              continue;
            }
          }
        }
        const mlir::kvattn::KernelManifest &km = ptx.kernels.at(0);
        std::string tile = tileName(km);
        if (compileOnly) {
          // The cold figure: the fastest of a few compiles (this machine
          // may be shared).
          for (int i = 1; i < compileRepeats; ++i) {
            mlir::kvattn::PtxModule again;
            if (mlir::kvattn::compileToPtx(*module, options, again).isOk() &&
                again.compileMs < ptx.compileMs)
              ptx = std::move(again);
          }
          // The warm figure: the same compilation answered by the kernel
          // cache (the environment's; "-" when it is off), after storing
          // this result in it.
          std::string cached = "-";
          if (std::optional<mlir::kvattn::KernelCache> cache =
                  mlir::kvattn::KernelCache::fromEnvironment()) {
            mlir::kvattn::PtxOptions warm = options;
            warm.useKernelCache = true;
            std::string key = mlir::kvattn::KernelCache::key(*module, warm);
            mlir::kvattn::PtxModule hit;
            if (cache->store(key, ptx).isOk() &&
                mlir::kvattn::compileToPtx(*module, warm, hit).isOk() &&
                hit.cache == "hit")
              cached = llvm::formatv("{0:F2}", hit.compileMs).str();
          }
          llvm::outs() << llvm::formatv(
              "{0,5} {1,6} {2,5} {3,4} {4,-10} {5,11:F1} {6,8:F1} {7,7:F1} "
              "{8,6:F1} {9,10} {10,8:F1}\n",
              b, p, l, d, tile, ptx.compileMs,
              ptx.kernelsMs + ptx.nvvmMs + ptx.translateMs + ptx.linkMs,
              ptx.optimizeMs, ptx.codegenMs, cached, ptx.ptx.size() / 1024.0);
          llvm::outs().flush();
          continue;
        }

        // Through the JSON on purpose: launched from the manifest as an
        // embedder would.
        rt::Manifest manifest;
        const rt::Module *loaded = nullptr;
        Status s = rt::parseManifest(
            mlir::kvattn::manifestToJson(ptx, "bench.ptx"), manifest);
        if (s.isOk())
          s = runtime->loadModule(ptx.ptx, loaded);
        DeviceBuffers buffers(runtime.get());
        const size_t qBytes = eltBytes * b * kHq * l * d,
                     kvBytes = eltBytes * b * kHkv * S * d;
        rt::LaunchArgs args;
        args.sizes = {b, kHq, kHkv, l, S};
        args.metadata["q_offset"] = std::vector<int64_t>(b, p);
        const std::pair<const char *, size_t> inputs[] = {
            {"query", qBytes}, {"key", kvBytes}, {"value", kvBytes}};
        for (const auto &[name, bytes] : inputs) {
          if (s.isOk())
            s = buffers.allocate(bytes, args.buffers[name]);
          if (s.isOk())
            s = fillRandom(args.buffers[name], bytes);
        }
        if (s.isOk())
          s = buffers.allocate(qBytes, args.buffers["out"]);
        // Split-KV: the f32 partial states between the attention kernel and
        // the merge kernel (N chunks of out and lse).
        const int64_t chunks = ptx.kernels.at(0).splitKv;
        if (s.isOk() && chunks > 1)
          s = buffers.allocate(4 * chunks * b * kHq * l * d,
                               args.buffers["out_parts"]);
        if (s.isOk() && chunks > 1)
          s = buffers.allocate(4 * chunks * b * kHq * l,
                               args.buffers["lse_parts"]);
        std::vector<rt::LaunchArgs> kernelArgs = argsPerKernel(manifest, args);
        if (s.isOk())
          s = runtime->synchronize();
        if (emulated) {
          // One launch of each kernel; the emulator counted them.
          (void)emu.takeCounters();
          auto start = std::chrono::steady_clock::now();
          for (size_t k = 0; s.isOk() && k < manifest.kernels.size(); ++k)
            s = runtime->launch(*loaded, manifest.kernels[k], kernelArgs[k]);
          if (s.isOk())
            s = runtime->synchronize();
          if (s.isError()) {
            rowError(s.message());
            continue;
          }
          double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count();
          llvm::outs() << llvm::formatv(
              "{0,5} {1,6} {2,5} {3,4} {4,-10} {5,11:F1} {6,8:F1}\n", b, p, l,
              d, tile, ptx.compileMs, seconds);
          printCounters(emu);
          continue;
        }
        std::vector<float> ms;
        if (s.isOk())
          s = runtime->timeOnStream(
              [&] {
                for (size_t k = 0; k < manifest.kernels.size(); ++k)
                  KVATTN_RETURN_IF_ERROR(runtime->launch(
                      *loaded, manifest.kernels[k], kernelArgs[k]));
                return Status::ok();
              },
              warmup, reps, ms, static_cast<size_t>(flushMiB) << 20);
        if (s.isError()) {
          rowError(s.message());
          continue;
        }
        double t = median(ms);
        double flops = 4.0 * d * allowedPairs(p, l) * kHq * b;
        double kvGBs =
            t > 0 ? 2.0 * static_cast<double>(kvBytes) / (t * 1e6) : 0;
        std::string share =
            l <= 8 && copyGBs > 0 && kvGBs > 0
                ? llvm::formatv("{0:F0}%", 100.0 * kvGBs / copyGBs).str()
                : "-";
        llvm::outs() << llvm::formatv("{0,5} {1,6} {2,5} {3,4} {4,-10} "
                                      "{5,11:F1} {6,9:F4} {7,8} {8,9} "
                                      "{9,6}\n",
                                      b, p, l, d, tile, ptx.compileMs, t,
                                      rate(t > 0 ? flops / (t * 1e9) : 0),
                                      rate(kvGBs), share);
        llvm::outs().flush();
      }
    }
  }
  return status;
}

} // namespace

static int runTool(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(benchCategory);
  cl::ParseCommandLineOptions(argc, argv, "kvattn-bench\n");
  if (target != "cpu" && target != "gpu" && target != "gpu-emu") {
    llvm::errs() << "kvattn-bench: error: --target must be cpu, gpu or "
                    "gpu-emu, not '"
                 << target << "'\n";
    return 1;
  }
  // Every numeric option in its range, by name.
  auto below = [](const char *name, int64_t value, int64_t least) {
    if (value >= least)
      return false;
    llvm::errs() << "kvattn-bench: error: --" << name << "=" << value
                 << (least == 0 ? " is negative" : " must be at least 1")
                 << "\n";
    return true;
  };
  if (below("repeats", repeats, 1) || below("warmup", warmup, 0) ||
      below("compile-repeats", compileRepeats, 1) ||
      below("sms", assumedSms, 1) || below("batch", batch, 0) ||
      below("flush-mib", flushMiB, 0) || below("copy-mib", copyMiB, 0))
    return 1;
  for (int64_t l : lengths)
    if (below("lengths", l, 1))
      return 1;
  for (int64_t p : prefixes)
    if (below("prefixes", p, 0))
      return 1;
  for (int64_t d : headDims)
    if (below("head-dims", d, 1))
      return 1;
  // The compile options, by name (tools/common).
  if (std::optional<std::string> bad = flags.outOfRange()) {
    llvm::errs() << "kvattn-bench: error: " << *bad << "\n";
    return 1;
  }
  if (compileOnly && target != "gpu") {
    llvm::errs() << "kvattn-bench: error: --compile-only needs --target=gpu\n";
    return 1;
  }
  if (feature != "none" && target != "cpu") {
    llvm::errs() << "kvattn-bench: error: --feature needs --target=cpu (the "
                    "emulated GPU's counters of a feature: kvattn-run "
                    "--target=gpu-emu --stats, docs/benchmarks.md)\n";
    return 1;
  }
  // The GPU benchmark is bf16 unless --dtype says otherwise.
  std::string eltName =
      target != "cpu" && !dtype.getNumOccurrences() ? "bf16" : dtype.getValue();
  std::optional<mlir::kvattn::ElementType> elt =
      mlir::kvattn::parseElementType(eltName);
  if (!elt || !mlir::kvattn::isFloatType(*elt) ||
      *elt == mlir::kvattn::ElementType::F64) {
    llvm::errs() << "kvattn-bench: error: --dtype must be f32, f16 or bf16\n";
    return 1;
  }

  mlir::registerAllPasses();
  mlir::kvattn::registerAllKVAttnPasses();
  mlir::DialectRegistry registry;
  mlir::kvattn::registerAllKVAttnDialects(registry);
  mlir::MLIRContext context(registry);
  if (target != "cpu" && mla)
    return runMlaGpu(*elt, eltName, context, target == "gpu-emu");
  if (target != "cpu")
    return runGpu(*elt, eltName, context, target == "gpu-emu");
  return runCpu(*elt, context);
}

int main(int argc, char **argv) {
  int status = runTool(argc, argv);
  // A full disk or a closed pipe behind the standard output is an error
  // that names it, not "LLVM ERROR: IO failure" when the stream is
  // destroyed at exit.
  llvm::outs().flush();
  if (llvm::outs().has_error()) {
    llvm::errs() << "kvattn-bench: error: writing the standard output failed: "
                 << llvm::outs().error().message() << "\n";
    llvm::outs().clear_error();
    return 1;
  }
  return status;
}
