//===- kvattn-compile.cpp - kvattn IR -> NAME.ptx + NAME.json -------------===//
//
//   kvattn-compile FILE.mlir -o DIR/NAME [--chip=sm_90] [--features=+ptx80]
//       [--block-m=64 --block-n=64 --num-warps=4 --num-stages=2]
//       [--libdevice=PATH] [--repeat=N]
//
// Compiles every kvattn.attention / kvattn.sdpa of FILE.mlir with the
// kvattn-to-ptx pipeline and writes the PTX text (DIR/NAME.ptx) and its
// launch manifest (DIR/NAME.json, docs/kernel-abi.md).
//
//===----------------------------------------------------------------------===//

#include "CompileFlags.h"
#include "kvattn/Registration/CommandLine.h"
#include "kvattn/Registration/Registration.h"
#include "kvattn/Target/Ptx.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace cl = llvm::cl;

static cl::OptionCategory category("kvattn-compile options");
static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input .mlir>"),
                                      cl::Required, cl::cat(category));
static cl::opt<std::string>
    output("o",
           cl::desc("Output path without extension: writes PATH.ptx (or "
                    "PATH.ll with --device-ir) and PATH.json"),
           cl::Required, cl::cat(category));
static cl::opt<std::string> chip("chip", cl::desc("Target SM (sm_80, sm_90)"),
                                 cl::init("sm_80"), cl::cat(category));
static cl::opt<std::string> features("features",
                                     cl::desc("PTX features, e.g. +ptx80"),
                                     cl::init(""), cl::cat(category));
static cl::opt<std::string> libdevice("libdevice",
                                      cl::desc("Path of libdevice.10.bc"),
                                      cl::init(""), cl::cat(category));
static mlir::kvattn::tools::CompileFlags
    flags(category,
          mlir::kvattn::tools::kBlockM | mlir::kvattn::tools::kBlockN |
              mlir::kvattn::tools::kNumWarps | mlir::kvattn::tools::kNumStages |
              mlir::kvattn::tools::kSplitKv | mlir::kvattn::tools::kNumSms |
              mlir::kvattn::tools::kPackGqa |
              mlir::kvattn::tools::kTensorCores |
              mlir::kvattn::tools::kGpuSchedule |
              mlir::kvattn::tools::kIndexBitwidth);
static cl::opt<unsigned>
    llvmOptLevel("llvm-opt-level",
                 cl::desc("LLVM optimisation level of the device code before "
                          "the NVPTX back end with --llvm-pipeline=standard "
                          "(0 to 3)"),
                 cl::init(3), cl::cat(category));
static cl::opt<std::string> llvmPipeline(
    "llvm-pipeline",
    cl::desc("LLVM optimisation of the device code: kvattn (the short "
             "pipeline, back end at O2; the default) or standard "
             "(default<On> and the back end at On, n = --llvm-opt-level)"),
    cl::init("kvattn"), cl::cat(category));
static cl::opt<bool>
    deviceIR("device-ir",
             cl::desc("Write the device LLVM IR that NVPTX would compile "
                      "(the emulated GPU's image) instead of PTX"),
             cl::init(false), cl::cat(category));
static cl::opt<bool> kernelCache(
    "kernel-cache",
    cl::desc("Read and write the on-disk kernel cache ($KVATTN_CACHE_DIR, "
             "default under $XDG_CACHE_HOME; false: always compile)"),
    cl::init(true), cl::cat(category));
static cl::opt<unsigned>
    repeat("repeat",
           cl::desc("Compile N times and report the median time (for the "
                    "compile-time figure)"),
           cl::init(1), cl::cat(category));

static int fail(const std::string &message) {
  llvm::errs() << "kvattn-compile: error: " << message << "\n";
  return 1;
}

/// Writes `text` to `path`; the error, checked after the last flush (a full
/// disk fails there, not at `<<`), or "".
static std::string writeFile(const std::string &path, const std::string &text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return "cannot write '" + path + "': " + ec.message();
  os << text;
  os.close();
  if (os.has_error()) {
    std::string why = os.error().message();
    os.clear_error();
    return "writing '" + path + "' failed: " + why;
  }
  return "";
}

static int runTool(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // MLIR's own flags (--mlir-timing, --mlir-print-ir-after-all,
  // --mlir-disable-threading, --mlir-print-debuginfo, ...), applied to the
  // compilation's pass managers (which then bypass the kernel cache).
  // Registered before parsing: --mlir-print-ir-after=PASS names passes.
  mlir::registerAllPasses();
  mlir::kvattn::registerAllKVAttnPasses();
  mlir::kvattn::registerMLIRCommandLineOptions();
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "kvattn-compile\n\nAlso takes MLIR's --mlir-* flags (--mlir-timing, "
      "--mlir-print-ir-after-all with --mlir-disable-threading, ...); "
      "KVATTN_DUMP_DIR=DIR writes the IR after each stage, the image and the "
      "manifest there.\n");

  // Every numeric option in its range, by name.
  if (std::optional<std::string> bad = flags.outOfRange())
    return fail(*bad);

  mlir::DialectRegistry registry;
  mlir::kvattn::registerAllKVAttnDialects(registry);
  mlir::MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  auto module =
      mlir::parseSourceFile<mlir::ModuleOp>(inputFile, sourceMgr, &context);
  if (!module)
    return 1;

  mlir::kvattn::PtxOptions options;
  options.chip = chip;
  options.features = features;
  options.libdevice = libdevice;
  flags.applyGiven(options);
  if (llvmOptLevel > 3)
    return fail("--llvm-opt-level must be 0 to 3, not " +
                std::to_string(llvmOptLevel));
  options.llvmOptLevel = llvmOptLevel;
  if (llvmPipeline == "standard")
    options.llvmPipeline = mlir::kvattn::LlvmPipeline::Standard;
  else if (llvmPipeline != "kvattn")
    return fail("--llvm-pipeline must be kvattn or standard, not '" +
                llvmPipeline + "'");
  if (deviceIR)
    options.image = mlir::kvattn::DeviceImage::LlvmIR;
  options.useKernelCache = kernelCache;
  options.configurePassManager = mlir::kvattn::mlirFlagsPassManagerHook();

  mlir::kvattn::PtxModule result;
  std::string cacheStatus;
  std::vector<double> times;
  // The phases of the fastest compilation (not a cache hit).
  mlir::kvattn::PtxModule fastest;
  bool compiled = false;
  for (unsigned i = 0; i < std::max(1u, repeat.getValue()); ++i) {
    if (mlir::kvattn::Status s =
            mlir::kvattn::compileToPtx(*module, options, result);
        s.isError())
      return fail(s.message());
    if (i == 0)
      cacheStatus = result.cache;
    if (result.cache != "hit" &&
        (!compiled || result.compileMs < fastest.compileMs)) {
      fastest = result;
      compiled = true;
    }
    times.push_back(result.compileMs);
  }
  std::sort(times.begin(), times.end());
  // What the compiler said (the upper-left append lint, ...), from the
  // compilation or the kernel cache alike.
  for (const mlir::kvattn::CompilerDiagnostic &d : result.diagnostics)
    llvm::errs() << d.str() << "\n";

  std::string ptxPath = output + (deviceIR ? ".ll" : ".ptx"),
              jsonPath = output + ".json";
  llvm::StringRef dir = llvm::sys::path::parent_path(output);
  if (!dir.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(dir))
      return fail("cannot create '" + dir.str() + "': " + ec.message());
  if (std::string error = writeFile(ptxPath, result.ptx); !error.empty())
    return fail(error);
  if (std::string error = writeFile(
          jsonPath, mlir::kvattn::manifestToJson(
                        result, llvm::sys::path::filename(ptxPath).str()));
      !error.empty())
    return fail(error);

  llvm::outs() << "wrote " << ptxPath << " (" << result.kernels.size()
               << " kernel" << (result.kernels.size() == 1 ? "" : "s") << ", "
               << result.chip << ") and " << jsonPath << "\n";
  for (const mlir::kvattn::KernelManifest &k : result.kernels)
    llvm::outs() << "  " << k.name << ": " << k.params.size()
                 << " params, block " << k.threadsPerBlock
                 << " threads, dynamic shared memory "
                 << k.dynamicSharedMemoryBytes << " bytes\n";
  llvm::outs() << "compile time IR -> " << (deviceIR ? "device IR" : "PTX")
               << ": " << llvm::format("%.1f", times[times.size() / 2])
               << " ms (median of " << times.size() << ", min "
               << llvm::format("%.1f", times.front()) << ")\n";
  if (compiled)
    llvm::outs() << llvm::format(
        "phases of the fastest, ms: kernels %.1f, nvvm %.1f, translate %.1f, "
        "link %.1f, llvm-opt %.1f, codegen %.1f\n",
        fastest.kernelsMs, fastest.nvvmMs, fastest.translateMs, fastest.linkMs,
        fastest.optimizeMs, fastest.codegenMs);
  llvm::outs() << "kernel cache: " << cacheStatus << "\n";
  return 0;
}

int main(int argc, char **argv) {
  int status = runTool(argc, argv);
  // A full disk or a closed pipe behind the standard output is an error
  // that names it, not "LLVM ERROR: IO failure" when the stream is
  // destroyed at exit.
  llvm::outs().flush();
  if (llvm::outs().has_error()) {
    llvm::errs()
        << "kvattn-compile: error: writing the standard output failed: "
        << llvm::outs().error().message() << "\n";
    llvm::outs().clear_error();
    return 1;
  }
  return status;
}
