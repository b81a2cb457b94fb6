//===- Pipelines.cpp - registered kvattn pipelines ------------------------===//

#include "kvattn/Passes/CompileOptionSpecs.h"
#include "kvattn/Passes/DeviceValidation.h"
#include "kvattn/Passes/Passes.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/NVGPUToNVVM/NVGPUToNVVM.h"
#include "mlir/Conversion/OpenMPToLLVM/ConvertOpenMPToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/SCFToOpenMP/SCFToOpenMP.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FileSystem.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

using namespace mlir;
namespace compile_options = ::mlir::kvattn::compile_options;

namespace {

/// split-kv = 0 on the GPU: a chunk covers at least this many keys (below,
/// its partial state and the merge cost more than the parallelism gains),
/// and the chunks aim at this many resident warps per multiprocessor (the
/// occupancy a memory-bound decode needs to keep loads in flight).
constexpr int64_t kGpuSplitMinKeys = 512;
constexpr int64_t kGpuSplitWarpsPerSm = 8;

struct CpuPipelineOptions : public PassPipelineOptions<CpuPipelineOptions> {
  // The shared options: name, description, range declared once
  // (kvattn/Passes/CompileOptionSpecs.h).
  Option<int64_t> blockM{*this, compile_options::kBlockM.name,
                         llvm::cl::desc(compile_options::kBlockM.description),
                         llvm::cl::init(0)};
  Option<int64_t> blockN{*this, compile_options::kBlockN.name,
                         llvm::cl::desc(compile_options::kBlockN.description),
                         llvm::cl::init(64)};
  Option<bool> vectorize{
      *this, compile_options::kVectorize.name,
      llvm::cl::desc(compile_options::kVectorize.description),
      llvm::cl::init(true)};
  Option<int64_t> vectorWidth{
      *this, compile_options::kVectorWidth.name,
      llvm::cl::desc(compile_options::kVectorWidth.description),
      llvm::cl::init(0)};
  // kvattn-run's --num-threads: `threads` here, as the pipeline always
  // spelled it.
  Option<int64_t> threads{
      *this, "threads",
      llvm::cl::desc(compile_options::kNumThreads.description),
      llvm::cl::init(0)};
  Option<bool> stats{*this, "stats",
                     llvm::cl::desc("Count loaded/masked/skipped KV blocks"),
                     llvm::cl::init(false)};
  Option<int64_t> splitKv{*this, compile_options::kSplitKv.name,
                          llvm::cl::desc(compile_options::kSplitKv.description),
                          llvm::cl::init(1)};
  Option<bool> packGqa{*this, compile_options::kPackGqa.name,
                       llvm::cl::desc(compile_options::kPackGqa.description),
                       llvm::cl::init(true)};
  Option<bool> fixUpperLeftAppends{
      *this, "fix-upper-left-appends",
      llvm::cl::desc("Passed to -kvattn-resolve-cached-append"),
      llvm::cl::init(false)};

  ::mlir::kvattn::CpuCompileOptions get() const {
    ::mlir::kvattn::CpuCompileOptions o;
    o.blockM = blockM;
    o.blockN = blockN;
    o.stats = stats;
    o.splitKv = splitKv;
    o.packGqa = packGqa;
    o.fixUpperLeftAppends = fixUpperLeftAppends;
    o.vectorize = vectorize;
    o.vectorWidth = vectorWidth;
    o.threads = threads;
    return o;
  }
};

} // namespace

// Both pipelines are built from pass constructors: no pass registry is
// consulted, so embedders need not register upstream passes, and building
// cannot fail.
void mlir::kvattn::buildKVAttnToCpuPipeline(
    OpPassManager &pm, const ::mlir::kvattn::CpuCompileOptions &options) {
  mlir::kvattn::ResolveCachedAppendPassOptions resolve;
  resolve.fixUpperLeftAppends = options.fixUpperLeftAppends;
  pm.addPass(mlir::kvattn::createResolveCachedAppendPass(resolve));
  pm.addPass(mlir::kvattn::createExpandCascadePass());
  pm.addPass(mlir::kvattn::createLowerAppendPass());
  mlir::kvattn::TilePassOptions tile;
  tile.blockM = options.blockM;
  tile.blockN = options.blockN;
  tile.stats = options.stats;
  tile.splitKv = options.splitKv;
  tile.packGqa = options.packGqa;
  // split-kv = 0: the tile pass aims at two program instances per
  // "multiprocessor"; with half the threads as multiprocessors, a grid
  // smaller than the thread count is split to about one per thread.
  const int64_t threads =
      options.threads > 0
          ? options.threads
          : std::max<int64_t>(1, std::thread::hardware_concurrency());
  if (options.splitKv == 0 && threads == 1)
    tile.splitKv = 1;
  tile.numSms = std::max<int64_t>(1, (threads + 1) / 2);
  pm.addPass(mlir::kvattn::createTilePass(tile));
  pm.addPass(mlir::kvattn::createLowerMergePass());
  // No canonicalization before scf-forall-to-for: it would inline the
  // per-program alloca scope into the forall and, after the forall becomes
  // a loop, the scratch tiles would grow the stack per program.
  pm.addNestedPass<func::FuncOp>(createConvertElementwiseToLinalgPass());
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  // Bufferization orders (and names) its constant globals differently from
  // run to run in a module of several functions: one order for the output.
  pm.addPass(mlir::kvattn::createOrderConstantGlobalsPass());
  if (options.vectorize) {
    AssignVectorLayoutsPassOptions layouts;
    layouts.vectorWidth = options.vectorWidth;
    pm.addPass(mlir::kvattn::createAssignVectorLayoutsPass(layouts));
    pm.addPass(mlir::kvattn::createLowerTileToVectorsPass());
  } else {
    pm.addPass(mlir::kvattn::createLowerTileToLoopsPass());
  }
  if (options.threads == 1) {
    pm.addNestedPass<func::FuncOp>(createForallToForLoopPass());
  } else {
    // The grid becomes an OpenMP work-sharing loop; each iteration (one
    // program) gets its own alloca scope, so every thread has its own
    // scratch tiles.
    pm.addNestedPass<func::FuncOp>(createForallToParallelLoopPass());
    ConvertSCFToOpenMPPassOptions omp;
    omp.numThreads = static_cast<unsigned>(options.threads);
    pm.addPass(createConvertSCFToOpenMPPass(omp));
  }
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  pm.addPass(createCanonicalizerPass());
  // The sequential grid reuses one set of scratch tiles: hoist them to the
  // function entry. (scf.for is an automatic allocation scope, so
  // canonicalization inlines the per-program alloca_scope into the loop
  // body, but the LLVM lowering of the loop restores no stack: left there,
  // the tiles of every program would pile up.) The OpenMP grid keeps them
  // in its per-program scope.
  if (options.threads == 1)
    pm.addNestedPass<func::FuncOp>(
        bufferization::createBufferLoopHoistingPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createConvertVectorToLLVMPass());
  // memref.alloca_scope holds one block: lower the scopes (a program whose
  // grid folded to one instance keeps its scope) before the scf loops
  // inside them become branches.
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  if (options.threads != 1)
    pm.addPass(createConvertOpenMPToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

namespace {

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
  // The shared options (kvattn/Passes/CompileOptionSpecs.h).
  Option<int64_t> blockM{*this, compile_options::kBlockM.name,
                         llvm::cl::desc(compile_options::kBlockM.description),
                         llvm::cl::init(0)};
  Option<int64_t> blockN{*this, compile_options::kBlockN.name,
                         llvm::cl::desc(compile_options::kBlockN.description),
                         llvm::cl::init(0)};
  Option<int64_t> numWarps{
      *this, compile_options::kNumWarps.name,
      llvm::cl::desc(compile_options::kNumWarps.description),
      llvm::cl::init(0)};
  Option<int64_t> numStages{
      *this, compile_options::kNumStages.name,
      llvm::cl::desc(compile_options::kNumStages.description),
      llvm::cl::init(2)};
  Option<bool> packGqa{*this, compile_options::kPackGqa.name,
                       llvm::cl::desc(compile_options::kPackGqa.description),
                       llvm::cl::init(true)};
  Option<int64_t> splitKv{*this, compile_options::kSplitKv.name,
                          llvm::cl::desc(compile_options::kSplitKv.description),
                          llvm::cl::init(0)};
  Option<int64_t> numSms{*this, compile_options::kNumSms.name,
                         llvm::cl::desc(compile_options::kNumSms.description),
                         llvm::cl::init(132)};
  Option<bool> tensorCores{
      *this, compile_options::kTensorCores.name,
      llvm::cl::desc(compile_options::kTensorCores.description),
      llvm::cl::init(true)};
  Option<bool> producerWarpgroup{
      *this, compile_options::kProducerWarpgroup.name,
      llvm::cl::desc(compile_options::kProducerWarpgroup.description),
      llvm::cl::init(true)};
  Option<bool> lazyRescale{
      *this, compile_options::kLazyRescale.name,
      llvm::cl::desc(compile_options::kLazyRescale.description),
      llvm::cl::init(true)};
  Option<bool> pingPong{*this, compile_options::kPingPong.name,
                        llvm::cl::desc(compile_options::kPingPong.description),
                        llvm::cl::init(true)};
  Option<bool> intraWarpgroupOverlap{
      *this, compile_options::kIntraWarpgroupOverlap.name,
      llvm::cl::desc(compile_options::kIntraWarpgroupOverlap.description),
      llvm::cl::init(true)};
  Option<bool> twoValueStages{
      *this, compile_options::kTwoValueStages.name,
      llvm::cl::desc(compile_options::kTwoValueStages.description),
      llvm::cl::init(false)};
  Option<bool> heaviestFirst{
      *this, compile_options::kHeaviestFirst.name,
      llvm::cl::desc(compile_options::kHeaviestFirst.description),
      llvm::cl::init(true)};
  Option<unsigned> indexBitwidth{
      *this, compile_options::kIndexBitwidth.name,
      llvm::cl::desc(compile_options::kIndexBitwidth.description),
      llvm::cl::init(32)};

  Option<std::string> llvmPipeline{
      *this, "llvm-pipeline",
      llvm::cl::desc("kvattn (the short LLVM pipeline, the default) or "
                     "standard (default<O3>, as gpu-module-to-binary)"),
      llvm::cl::init("kvattn")};

  Option<bool> fixUpperLeftAppends{
      *this, "fix-upper-left-appends",
      llvm::cl::desc("Passed to -kvattn-resolve-cached-append"),
      llvm::cl::init(false)};
  Option<bool> deviceIR{
      *this, "device-ir",
      llvm::cl::desc("Make the gpu.binary hold the device LLVM IR (bitcode) "
                     "that NVPTX would compile, the emulated GPU's input, "
                     "instead of PTX"),
      llvm::cl::init(false)};

  ::mlir::kvattn::PtxOptions get() const {
    ::mlir::kvattn::PtxOptions o;
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
    o.producerWarpgroup = producerWarpgroup;
    o.lazyRescale = lazyRescale;
    o.pingPong = pingPong;
    o.intraWarpgroupOverlap = intraWarpgroupOverlap;
    o.twoValueStages = twoValueStages;
    o.heaviestFirst = heaviestFirst;
    o.indexBitwidth = indexBitwidth;
    o.fixUpperLeftAppends = fixUpperLeftAppends;
    if (deviceIR)
      o.image = ::mlir::kvattn::DeviceImage::LlvmIR;
    if (llvmPipeline == "standard")
      o.llvmPipeline = ::mlir::kvattn::LlvmPipeline::Standard;
    return o;
  }
};

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

/// FP8 conversions in hardware (cvt.rn.f16x2.{e4m3x2,e5m2x2} and
/// cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32): sm_90 and later, and sm_89 with
/// PTX 8.1 or later (LLVM's NVPTX selects the conversions on sm_89 only from
/// PTX 8.1; the chip's default there is 7.8); software otherwise.
static bool hasHardwareFp8(const ::mlir::kvattn::PtxOptions &options) {
  auto number = [](llvm::StringRef text, llvm::StringRef prefix) {
    unsigned n = 0;
    if (!text.consume_front(prefix))
      return 0u;
    text = text.take_while([](char c) { return c >= '0' && c <= '9'; });
    return text.getAsInteger(10, n) ? 0u : n;
  };
  const unsigned sm = number(options.chip, "sm_");
  unsigned ptx = 0;
  llvm::SmallVector<llvm::StringRef> features;
  llvm::StringRef(options.features).split(features, ',');
  for (llvm::StringRef f : features)
    ptx = std::max(ptx, number(f.trim(), "+ptx"));
  return sm >= 90 || (sm >= 89 && ptx >= 81);
}

void mlir::kvattn::buildKVAttnToGpuKernelsPipeline(
    OpPassManager &pm, const ::mlir::kvattn::PtxOptions &options) {
  ResolveCachedAppendPassOptions resolve;
  resolve.fixUpperLeftAppends = options.fixUpperLeftAppends;
  pm.addPass(createResolveCachedAppendPass(resolve));
  // The cache writes first: each kvattn.append becomes a kernel writing the
  // cache buffer in place, which the attention kernels then read (an FP8
  // cache quantised with the chip's conversions where it has them).
  AppendToGPUPassOptions append;
  append.hardwareFp8 = hasHardwareFp8(options);
  pm.addPass(createAppendToGPUPass(append));
  TilePassOptions tile;
  tile.blockM = options.blockM;
  tile.blockN = options.blockN;
  tile.numWarps = options.numWarps;
  tile.numStages = options.numStages;
  tile.packGqa = options.packGqa;
  tile.splitKv = options.splitKv;
  tile.numSms = options.numSms;
  // split-kv = 0 on the GPU: enough chunks for 8 resident warps per
  // multiprocessor, each chunk at least 512 keys (docs/gpu-lowering.md,
  // "Split-KV").
  tile.splitMinKeys = kGpuSplitMinKeys;
  tile.splitWarpsPerSm = kGpuSplitWarpsPerSm;
  // FlashAttention-2's choice per chip: 128-row programs of 32-row warps
  // where two of them fit a multiprocessor's shared memory (the per-block
  // maximum + 1 KB: 164 KB on sm_80, 228 KB on sm_90, 100 KB on sm_86 and
  // sm_89, where D = 128 keeps 64-row programs of 16-row warps; D = 64
  // takes 128 rows everywhere; docs/gpu-lowering.md, "Block sizes"). Only
  // the tensor-core lowering takes 32-row warps.
  // sm_90a: 16-row warps, whole warpgroups (wgmma's m64; docs/gpu-lowering.md,
  // "Hopper (sm_90a)").
  const bool hopper = options.chip == "sm_90a";
  tile.maxWarpRows = options.tensorCores && !hopper ? 32 : 16;
  // ... and 128-key blocks for its wgmma programs at D = Dv = 64.
  tile.wgmma = options.tensorCores && hopper;
  tile.sharedMemoryPerSm = maxSharedMemoryPerBlock(options.chip) + 1024;
  // D = 129 ... 256 on tensor cores: 64-key blocks with the scores in
  // registers, 128 x 64 on 8 warps where it fits (sm_80, sm_90), 64 x 64 on
  // sm_86/sm_89 (schedule::largeHeadDimBlocks).
  tile.tensorCores = options.tensorCores;
  // 32-bit kernels compute positions up to 2^31 - 2 (the runtime refuses
  // more): a window constant stays within i32.
  if (options.indexBitwidth == 32)
    tile.maxPosition = kIndex32PositionLimit - 1;
  pm.addPass(createTilePass(tile));
  OutlineTileProgramsPassOptions outline;
  outline.tensorCores = options.tensorCores;
  outline.wgmma = options.tensorCores && hopper;
  outline.producerWarpgroup = options.producerWarpgroup;
  outline.heaviestFirst = options.heaviestFirst;
  outline.twoValueStages = options.twoValueStages;
  pm.addPass(createOutlineTileProgramsPass(outline));
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  // Thread-constant K/V bases on every chip: sm_90's 128-row D = 128
  // mma.sync programs kept per-access addresses while ptxas spilled them
  // with those bases, until tile.mask took per-row key intervals
  // (lowerMaskByDistance); with both they assemble without local memory
  // (docs/gpu-lowering.md, "Registers").
  LowerTileToGPUPassOptions lower;
  lower.wideTileAddressBases = true;
  // FP8 K/V with cvt.rn.f16x2.{e4m3x2,e5m2x2}: the software decode where
  // the chip has no conversion (hasHardwareFp8).
  lower.hardwareFp8 = hasHardwareFp8(options);
  AssignTileLayoutsPassOptions assign;
  assign.lazyRescale = options.lazyRescale;
  assign.pingPong = options.pingPong;
  assign.intraWarpgroupOverlap = options.intraWarpgroupOverlap;
  assign.twoValueStages = options.twoValueStages;
  kernels.addPass(createAssignTileLayoutsPass(assign));
  kernels.addPass(createLowerTileToGPUPass(lower));
  kernels.addPass(createCanonicalizerPass());
  kernels.addPass(createCSEPass());
  if (options.deviceValidation)
    pm.addPass(createDeviceValidationPass(options.indexBitwidth));
}

void mlir::kvattn::buildGpuKernelsToPtxPipeline(
    OpPassManager &pm, const ::mlir::kvattn::PtxOptions &options,
    const std::string &libdevice, DeviceCodegenTimes *times) {
  GpuNVVMAttachTargetOptions target;
  target.chip = options.chip;
  target.features = options.features;
  if (!libdevice.empty())
    target.linkLibs.push_back(libdevice);
  target.optLevel = options.llvmOptLevel;
  // The chip first: nvvm-attach-target's verifier crashes on some names.
  VerifyTargetPassOptions chipCheck;
  chipCheck.checkChip = true;
  chipCheck.chip = options.chip;
  pm.addPass(createVerifyTargetPass(chipCheck));
  pm.addPass(createGpuNVVMAttachTarget(target));
  pm.addPass(createVerifyTargetPass());
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  kernels.addPass(createSCFToControlFlowPass());
  kernels.addPass(memref::createExpandStridedMetadataPass());
  kernels.addPass(createLowerAffinePass());
  // GPU, NVGPU, memref, arith, ... -> NVVM with one type converter whose
  // index has options.indexBitwidth bits (docs/gpu-lowering.md, "Index
  // width"); a module pass, for it keeps the host's launches matching the
  // kernels' i64 scalars.
  GpuToNVVMPassOptions toNvvm;
  toNvvm.indexBitwidth = options.indexBitwidth;
  pm.addPass(createGpuToNVVMPass(toNvvm));
  OpPassManager &llvmKernels = pm.nest<gpu::GPUModuleOp>();
  llvmKernels.addPass(createExternDynamicSharedMemoryPass());
  llvmKernels.addPass(createCanonicalizerPass());
  llvmKernels.addPass(createCSEPass());
  llvmKernels.addPass(createReconcileUnrealizedCastsPass());
  // gpu-module-to-binary's work with kvattn's short LLVM pipeline
  // (docs/runtime.md, "Kernel cache").
  GpuModuleToPtxPassOptions binary;
  binary.format =
      options.image == ::mlir::kvattn::DeviceImage::LlvmIR ? "llvm" : "isa";
  binary.llvmPipeline =
      options.llvmPipeline == ::mlir::kvattn::LlvmPipeline::Kvattn ? "kvattn"
                                                                   : "standard";
  pm.addPass(createGpuModuleToPtxPass(binary, times));
}

void mlir::kvattn::registerKVAttnPipelines() {
  PassPipelineRegistration<CpuPipelineOptions>(
      "kvattn-to-cpu",
      "kvattn (sdpa/append/attention) -> tile program -> loops -> LLVM "
      "dialect for the CPU JIT",
      [](OpPassManager &pm, const CpuPipelineOptions &cl) {
        mlir::kvattn::buildKVAttnToCpuPipeline(pm, cl.get());
      });
  PassPipelineRegistration<PtxPipelineOptionsCL>(
      "kvattn-to-ptx",
      "kvattn (sdpa/append/attention) -> tile program -> GPU kernels (threads, "
      "warps, shared memory) -> NVVM -> PTX text in a gpu.binary",
      [](OpPassManager &pm, const PtxPipelineOptionsCL &cl) {
        ::mlir::kvattn::PtxOptions options = cl.get();
        if (cl.llvmPipeline != "kvattn" && cl.llvmPipeline != "standard")
          llvm::errs() << "kvattn-to-ptx: warning: llvm-pipeline must be "
                          "kvattn or standard, not '"
                       << cl.llvmPipeline << "': using kvattn\n";
        std::string libdevice = mlir::kvattn::findLibdevice(options.libdevice);
        if (libdevice.empty())
          llvm::errs() << "kvattn-to-ptx: warning: libdevice.10.bc not found "
                          "(set CUDA_HOME or libdevice=PATH); math functions "
                          "stay external in the PTX\n";
        mlir::kvattn::buildKVAttnToGpuKernelsPipeline(pm, options);
        mlir::kvattn::buildGpuKernelsToPtxPipeline(pm, options, libdevice);
      });
}
