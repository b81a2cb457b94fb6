//===- GpuModuleToPtx.cpp - gpu.module -> PTX with a short LLVM pipeline --===//
//
// -kvattn-gpu-module-to-ptx: what gpu-module-to-binary does for an
// #nvvm.target, through MLIR's own NVVM serializer base class (translation,
// lazy libdevice linking with internalization), with kvattn's short LLVM
// pipeline instead of default<O3> and libdevice read only when the module
// calls it. docs/runtime.md "Kernel cache" has the measurements.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Passes/Passes.h"

#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/Target/LLVM/NVVM/Utils.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Target/TargetMachine.h"

#include <chrono>

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_GPUMODULETOPTXPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

/// The LLVM pipeline of llvm-pipeline=kvattn: default<O3>'s function
/// simplification and late loop passes, without what does nothing for
/// kvattn's kernels (no calls but libdevice's, so no CGSCC inliner walk or
/// attribute inference; no vectorizers: the back end's load/store
/// vectorizer does the shared-memory vectors) and with instcombine run once
/// where O3 runs it to a fixpoint. The kernels arrive canonicalized and
/// CSE'd by MLIR. What it must do: inline libdevice (always-inline),
/// resolve __nvvm_reflect, fully unroll the fragment loops (constant trip
/// counts) so that SROA puts the accumulators in registers, remove the
/// loads and stores the unrolling makes redundant (merged load/store
/// motion, GVN, DSE: without them the emulator counts 11 % more
/// shared-memory requests per KV block in decode), fold the address
/// arithmetic, hoist the loop-invariant part out of the KV loop (LICM) and
/// unroll that loop as O3 does (loop-unroll<O3>: 17 % fewer warp
/// instructions per KV block in decode). docs/runtime.md "Kernel cache"
/// has the measurements, and the emulator counters it keeps.
constexpr const char *kKvattnPipeline =
    "always-inline,nvvm-reflect,"
    "function(sroa,early-cse,simplifycfg,"
    "instcombine<max-iterations=1;no-verify-fixpoint>,"
    "loop-mssa(licm,loop-rotate,licm),loop(indvars,loop-unroll-full),sroa,"
    "mldst-motion<no-split-footer-bb>,gvn,sccp,bdce,"
    "instcombine<max-iterations=1;no-verify-fixpoint>,jump-threading,"
    "correlated-propagation,adce,dse,early-cse,loop-mssa(licm),simplifycfg,"
    // O3's late loop passes, without the vectorizers.
    "loop(loop-rotate<header-duplication;no-prepare-for-lto>,loop-deletion),"
    "infer-alignment,instcombine<max-iterations=1;no-verify-fixpoint>,"
    "simplifycfg<bonus-inst-threshold=1;forward-switch-cond;"
    "switch-range-to-icmp;switch-to-arithmetic;switch-to-lookup;"
    "no-keep-loops;hoist-common-insts;sink-common-insts;speculate-blocks;"
    "simplify-cond-branch>,"
    "instcombine<max-iterations=1;no-verify-fixpoint>,loop-unroll<O3>,"
    "sroa<preserve-cfg>,infer-alignment,"
    "instcombine<max-iterations=1;no-verify-fixpoint>,"
    "loop-mssa(licm<allowspeculation>),loop-sink,instsimplify,div-rem-pairs,"
    "simplifycfg<bonus-inst-threshold=1;switch-range-to-icmp;"
    "switch-to-arithmetic;keep-loops;hoist-loads-stores-with-cond-faulting;"
    "speculate-blocks;simplify-cond-branch;speculate-unpredictables>),"
    "globaldce";

class Serializer : public NVVM::SerializeGPUModuleBase {
public:
  Serializer(gpu::GPUModuleOp module, NVVM::NVVMTargetAttr target,
             const gpu::TargetOptions &options, bool kvattnPipeline,
             mlir::kvattn::DeviceCodegenTimes &times)
      : SerializeGPUModuleBase(*module, target, options),
        format(options.getCompilationTarget()), kvattnPipeline(kvattnPipeline),
        times(times), start(Clock::now()) {}

protected:
  /// libdevice only for a module that calls it: reading its lazy module
  /// costs milliseconds, and linking it adds nothing otherwise.
  std::optional<SmallVector<std::unique_ptr<llvm::Module>>>
  loadBitcodeFiles(llvm::Module &module) override {
    bool callsLibdevice = llvm::any_of(module, [](llvm::Function &f) {
      return f.isDeclaration() && f.getName().starts_with("__nv_");
    });
    if (!callsLibdevice)
      return SmallVector<std::unique_ptr<llvm::Module>>();
    return SerializeGPUModuleBase::loadBitcodeFiles(module);
  }

  void handleModulePreLink(llvm::Module &) override {
    times.translateMs += msSince(start);
    start = Clock::now();
  }

  void handleModulePostLink(llvm::Module &) override {
    times.linkMs += msSince(start);
  }

  LogicalResult optimizeModule(llvm::Module &module, int level) override {
    Clock::time_point optStart = Clock::now();
    LogicalResult result = kvattnPipeline
                               ? runKvattnPipeline(module)
                               : ModuleToObject::optimizeModule(module, level);
    times.optimizeMs += msSince(optStart);
    return result;
  }

  FailureOr<SmallVector<char, 0>>
  moduleToObject(llvm::Module &module) override {
    if (format == gpu::CompilationTarget::Offload)
      return ModuleToObject::moduleToObject(module);
    Clock::time_point codegenStart = Clock::now();
    FailureOr<llvm::TargetMachine *> machine = getOrCreateTargetMachine();
    if (failed(machine))
      return getOperation().emitError()
             << "no LLVM target machine for triple '" << triple << "'";
    FailureOr<SmallString<0>> ptx = translateModuleToISA(
        module, **machine, [&] { return getOperation().emitError(); });
    times.codegenMs += msSince(codegenStart);
    if (failed(ptx))
      return getOperation().emitError()
             << "LLVM's NVPTX back end failed on the kernels";
    return SmallVector<char, 0>(ptx->begin(), ptx->end());
  }

private:
  LogicalResult runKvattnPipeline(llvm::Module &module) {
    FailureOr<llvm::TargetMachine *> machine = getOrCreateTargetMachine();
    if (failed(machine))
      return getOperation().emitError()
             << "no LLVM target machine for triple '" << triple << "'";
    // The back end at O2: early CSE instead of GVN in its IR passes
    // (ptxas -v: no more registers, docs/runtime.md).
    (*machine)->setOptLevel(llvm::CodeGenOptLevel::Default);
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    // With the target machine: NVPTX's passes (nvvm-reflect) parse, and its
    // alias analysis and TTI are used.
    llvm::PassBuilder builder(*machine);
    builder.registerModuleAnalyses(mam);
    builder.registerCGSCCAnalyses(cgam);
    builder.registerFunctionAnalyses(fam);
    builder.registerLoopAnalyses(lam);
    builder.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager passes;
    if (llvm::Error error =
            builder.parsePassPipeline(passes, kKvattnPipeline)) {
      InFlightDiagnostic diag = getOperation().emitError()
                                << "kvattn's LLVM pipeline does not parse: ";
      diag << llvm::toString(std::move(error));
      return diag;
    }
    passes.run(module, mam);
    return success();
  }

  gpu::CompilationTarget format;
  bool kvattnPipeline;
  mlir::kvattn::DeviceCodegenTimes &times;
  Clock::time_point start;
};

struct GpuModuleToPtxPass
    : mlir::kvattn::impl::GpuModuleToPtxPassBase<GpuModuleToPtxPass> {
  using GpuModuleToPtxPassBase::GpuModuleToPtxPassBase;
  GpuModuleToPtxPass(const mlir::kvattn::GpuModuleToPtxPassOptions &options,
                     mlir::kvattn::DeviceCodegenTimes *sink)
      : GpuModuleToPtxPassBase(options), sink(sink) {}

  void runOnOperation() override {
    std::optional<gpu::CompilationTarget> target =
        llvm::StringSwitch<std::optional<gpu::CompilationTarget>>(format)
            .Case("isa", gpu::CompilationTarget::Assembly)
            .Case("llvm", gpu::CompilationTarget::Offload)
            .Default(std::nullopt);
    if (!target) {
      getOperation().emitError()
          << "kvattn-gpu-module-to-ptx: format must be isa or llvm, not '"
          << format << "'";
      return signalPassFailure();
    }
    if (llvmPipeline != "kvattn" && llvmPipeline != "standard") {
      getOperation().emitError() << "kvattn-gpu-module-to-ptx: llvm-pipeline "
                                    "must be kvattn or standard, not '"
                                 << llvmPipeline << "'";
      return signalPassFailure();
    }
    NVVM::SerializeGPUModuleBase::init();
    mlir::kvattn::DeviceCodegenTimes times;
    SmallVector<gpu::GPUModuleOp> modules(
        getOperation().getOps<gpu::GPUModuleOp>());
    for (gpu::GPUModuleOp module : modules) {
      ArrayAttr targets = module.getTargetsAttr();
      if (!targets || targets.empty()) {
        module.emitError() << "gpu.module '" << module.getName()
                           << "' has no target: run nvvm-attach-target first";
        return signalPassFailure();
      }
      gpu::TargetOptions options({}, {}, {}, {}, *target);
      SmallVector<Attribute> objects;
      for (Attribute attr : targets) {
        auto nvvm = dyn_cast<NVVM::NVVMTargetAttr>(attr);
        if (!nvvm) {
          module.emitError() << "kvattn-gpu-module-to-ptx compiles for "
                                "#nvvm.target only, not "
                             << attr;
          return signalPassFailure();
        }
        Serializer serializer(module, nvvm, options, llvmPipeline == "kvattn",
                              times);
        std::optional<SmallVector<char, 0>> object = serializer.run();
        if (!object) {
          module.emitError() << "compiling gpu.module '" << module.getName()
                             << "' for " << nvvm.getChip() << " failed";
          return signalPassFailure();
        }
        // The object gpu-module-to-binary makes: the target's O recorded
        // with PTX.
        Builder builder(&getContext());
        DictionaryAttr properties;
        if (*target == gpu::CompilationTarget::Assembly)
          properties = builder.getDictionaryAttr(builder.getNamedAttr(
              "O", builder.getI32IntegerAttr(nvvm.getO())));
        objects.push_back(gpu::ObjectAttr::get(
            &getContext(), nvvm, *target,
            builder.getStringAttr(StringRef(object->data(), object->size())),
            properties, nullptr));
      }
      OpBuilder builder(module);
      gpu::BinaryOp::create(builder, module.getLoc(), module.getName(),
                            /*offloadingHandler=*/nullptr,
                            builder.getArrayAttr(objects));
      module.erase();
    }
    if (sink) {
      sink->translateMs += times.translateMs;
      sink->linkMs += times.linkMs;
      sink->optimizeMs += times.optimizeMs;
      sink->codegenMs += times.codegenMs;
    }
  }

  mlir::kvattn::DeviceCodegenTimes *sink = nullptr;
};

} // namespace

std::unique_ptr<Pass>
mlir::kvattn::createGpuModuleToPtxPass(const GpuModuleToPtxPassOptions &options,
                                       DeviceCodegenTimes *times) {
  return std::make_unique<GpuModuleToPtxPass>(options, times);
}
