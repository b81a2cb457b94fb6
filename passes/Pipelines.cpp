//===- Pipelines.cpp - registered kvattn pipelines ------------------------===//

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>

using namespace mlir;

namespace {

struct CpuPipelineOptions : public PassPipelineOptions<CpuPipelineOptions> {
  Option<int64_t> blockM{*this, "block-m",
                         llvm::cl::desc("Query rows per program"),
                         llvm::cl::init(64)};
  Option<int64_t> blockN{*this, "block-n", llvm::cl::desc("Keys per KV block"),
                         llvm::cl::init(64)};
  Option<bool> stats{*this, "stats",
                     llvm::cl::desc("Count loaded/masked/skipped KV blocks"),
                     llvm::cl::init(false)};
  Option<int64_t> splitKv{*this, "split-kv",
                          llvm::cl::desc("KV chunks per program, merged in "
                                         "chunk order"),
                          llvm::cl::init(1)};
  Option<bool> packGqa{*this, "pack-gqa",
                       llvm::cl::desc("GQA packing of few query rows"),
                       llvm::cl::init(true)};
  Option<bool> fixUpperLeftAppends{
      *this, "fix-upper-left-appends",
      llvm::cl::desc("Passed to -kvattn-resolve-cached-append"),
      llvm::cl::init(false)};
};

/// kvattn -> tile program -> loops -> LLVM dialect, ready for the
/// ExecutionEngine. Upstream passes are named textually so that this file
/// does not pull in every conversion header.
void buildKVAttnToCpuPipeline(OpPassManager &pm,
                              const CpuPipelineOptions &options) {
  std::string text = llvm::formatv(
      "kvattn-resolve-cached-append{{fix-upper-left-appends={0}},"
      "kvattn-lower-append,"
      "kvattn-tile{{block-m={1} block-n={2} stats={3} split-kv={4} "
      "pack-gqa={5}},"
      "kvattn-lower-merge,"
      // No canonicalization before scf-forall-to-for: it would inline the
      // per-program alloca scope into the forall and, after the forall
      // becomes a loop, the scratch tiles would grow the stack per program.
      "func.func(convert-elementwise-to-linalg),"
      "one-shot-bufferize{{bufferize-function-boundaries "
      "function-boundary-type-conversion=identity-layout-map},"
      "kvattn-lower-tile-to-loops,"
      "func.func(scf-forall-to-for,convert-linalg-to-loops),"
      "canonicalize,"
      // The sequential grid reuses one set of scratch tiles: hoist them to
      // the function entry. (scf.for is an automatic allocation scope, so
      // canonicalization inlines the per-program alloca_scope into the
      // loop body, but the LLVM lowering of the loop restores no stack:
      // left there, the tiles of every program would pile up.)
      "func.func(buffer-loop-hoisting),"
      "expand-strided-metadata,"
      "lower-affine,"
      // memref.alloca_scope holds one block: lower the scopes (a program
      // whose grid folded to one instance keeps its scope) before the scf
      // loops inside them become branches.
      "finalize-memref-to-llvm,"
      "convert-scf-to-cf,"
      "convert-math-to-llvm,"
      "convert-math-to-libm,"
      "convert-arith-to-llvm,"
      "convert-index-to-llvm,"
      "convert-func-to-llvm,"
      "convert-cf-to-llvm,"
      "reconcile-unrealized-casts",
      options.fixUpperLeftAppends ? "true" : "false", options.blockM.getValue(),
      options.blockN.getValue(), options.stats ? "true" : "false",
      options.splitKv.getValue(), options.packGqa ? "true" : "false");
  if (failed(parsePassPipeline(text, pm, llvm::errs())))
    llvm::report_fatal_error("kvattn-to-cpu: invalid pipeline text");
}

struct PtxPipelineOptionsCL : public PassPipelineOptions<PtxPipelineOptionsCL> {
  Option<std::string> chip{*this, "chip",
                           llvm::cl::desc("Target SM, e.g. sm_80, sm_90"),
                           llvm::cl::init("sm_80")};
  Option<std::string> features{
      *this, "features",
      llvm::cl::desc("PTX features, e.g. +ptx80 (default: the minimum PTX "
                     "ISA of the chip)"),
      llvm::cl::init("")};
  Option<std::string> libdevice{
      *this, "libdevice",
      llvm::cl::desc("libdevice.10.bc (default: $CUDA_HOME, $CUDA_PATH or "
                     "/usr/local/cuda)"),
      llvm::cl::init("")};
  Option<int64_t> blockM{*this, "block-m",
                         llvm::cl::desc("Query rows per program (16 x "
                                        "num-warps); 0: chosen per op"),
                         llvm::cl::init(0)};
  Option<int64_t> blockN{*this, "block-n",
                         llvm::cl::desc("Keys per KV block (multiple of 8); "
                                        "0: chosen from D"),
                         llvm::cl::init(0)};
  Option<int64_t> numWarps{*this, "num-warps",
                           llvm::cl::desc("Warps per program; 0: block-m / "
                                          "16"),
                           llvm::cl::init(0)};
  Option<int64_t> numStages{*this, "num-stages",
                            llvm::cl::desc("K/V pipeline depth (recorded)"),
                            llvm::cl::init(2)};
  Option<bool> packGqa{*this, "pack-gqa",
                       llvm::cl::desc("GQA packing of few query rows"),
                       llvm::cl::init(true)};
  Option<int64_t> splitKv{*this, "split-kv",
                          llvm::cl::desc("KV chunks per program, merged by "
                                         "a second kernel (0: automatic)"),
                          llvm::cl::init(1)};
  Option<int64_t> numSms{*this, "num-sms",
                         llvm::cl::desc("Multiprocessors, for split-kv=0"),
                         llvm::cl::init(132)};
  Option<bool> tensorCores{
      *this, "tensor-cores",
      llvm::cl::desc("mma.sync, ldmatrix and cp.async for f16/bf16 where the "
                     "head dims allow"),
      llvm::cl::init(true)};

  Option<bool> deviceIR{
      *this, "device-ir",
      llvm::cl::desc("Make the gpu.binary hold the device LLVM IR (bitcode) "
                     "that NVPTX would compile, the emulated GPU's input, "
                     "instead of PTX"),
      llvm::cl::init(false)};

  ::kvattn::PtxOptions get() const {
    ::kvattn::PtxOptions o;
    o.chip = chip;
    o.features = features;
    o.libdevice = libdevice;
    o.blockM = blockM;
    o.blockN = blockN;
    o.numWarps = numWarps;
    o.numStages = numStages;
    o.packGqa = packGqa;
    o.splitKv = splitKv;
    o.numSms = numSms;
    o.tensorCores = tensorCores;
    if (deviceIR)
      o.image = ::kvattn::DeviceImage::LlvmIR;
    return o;
  }
};

void addPipeline(OpPassManager &pm, const std::string &text) {
  if (failed(parsePassPipeline(text, pm, llvm::errs())))
    llvm::report_fatal_error("kvattn: invalid pipeline text: " +
                             llvm::Twine(text));
}

} // namespace

std::string mlir::kvattn::findLibdevice(const std::string &explicitPath) {
  if (!explicitPath.empty())
    return llvm::sys::fs::exists(explicitPath) ? explicitPath : "";
  SmallVector<std::string> roots;
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *value = std::getenv(var))
      roots.push_back(value);
  roots.push_back("/usr/local/cuda");
  for (const std::string &root : roots) {
    std::string path = root + "/nvvm/libdevice/libdevice.10.bc";
    if (llvm::sys::fs::exists(path))
      return path;
  }
  return "";
}

void mlir::kvattn::buildKVAttnToGpuKernelsPipeline(
    OpPassManager &pm, const ::kvattn::PtxOptions &options) {
  addPipeline(pm, llvm::formatv(
                      "kvattn-resolve-cached-append,"
                      "kvattn-tile{{block-m={0} block-n={1} num-warps={2} "
                      "num-stages={3} pack-gqa={4} split-kv={5} "
                      "num-sms={6}},"
                      "kvattn-outline-tile-programs{{tensor-cores={7}},"
                      "gpu.module(kvattn-lower-tile-to-gpu,"
                      "canonicalize,cse)",
                      options.blockM, options.blockN, options.numWarps,
                      options.numStages, options.packGqa ? "true" : "false",
                      options.splitKv, options.numSms,
                      options.tensorCores ? "true" : "false")
                      .str());
}

void mlir::kvattn::buildGpuKernelsToPtxPipeline(
    OpPassManager &pm, const ::kvattn::PtxOptions &options,
    const std::string &libdevice) {
  std::string target = "chip=" + options.chip;
  if (!options.features.empty())
    target += " features=" + options.features;
  if (!libdevice.empty())
    target += " l=" + libdevice;
  addPipeline(pm, "nvvm-attach-target{" + target +
                      " O=3},"
                      "kvattn-verify-target,"
                      "gpu.module(convert-scf-to-cf,expand-strided-metadata,"
                      "lower-affine,convert-nvgpu-to-nvvm,"
                      "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=true},"
                      "kvattn-extern-dynamic-shared-memory,"
                      "canonicalize,cse,reconcile-unrealized-casts),"
                      "gpu-module-to-binary{format=" +
                      (options.image == ::kvattn::DeviceImage::LlvmIR
                           ? "llvm"
                           : "isa") +
                      "}");
}

void mlir::kvattn::registerKVAttnPipelines() {
  PassPipelineRegistration<CpuPipelineOptions>(
      "kvattn-to-cpu",
      "kvattn (sdpa/append/attention) -> tile program -> loops -> LLVM "
      "dialect for the CPU JIT",
      buildKVAttnToCpuPipeline);
  PassPipelineRegistration<PtxPipelineOptionsCL>(
      "kvattn-to-ptx",
      "kvattn (sdpa/attention) -> tile program -> GPU kernels (threads, "
      "warps, shared memory) -> NVVM -> PTX text in a gpu.binary",
      [](OpPassManager &pm, const PtxPipelineOptionsCL &cl) {
        ::kvattn::PtxOptions options = cl.get();
        std::string libdevice = mlir::kvattn::findLibdevice(options.libdevice);
        if (libdevice.empty())
          llvm::errs() << "kvattn-to-ptx: warning: libdevice.10.bc not found "
                          "(set CUDA_HOME or libdevice=PATH); math functions "
                          "stay external in the PTX\n";
        mlir::kvattn::buildKVAttnToGpuKernelsPipeline(pm, options);
        mlir::kvattn::buildGpuKernelsToPtxPipeline(pm, options, libdevice);
      });
}
