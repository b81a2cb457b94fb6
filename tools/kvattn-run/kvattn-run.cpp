//===- kvattn-run.cpp - run kvattn IR on .npy inputs ----------------------===//
//
//   kvattn-run FILE.mlir --target=reference [--entry NAME]
//       [--input ARG=FILE.npy | --input ARG=v0,v1,...]... [--seed N]
//       [--dump-outputs DIR] [--print-outputs]
//
// Evaluates one function of FILE.mlir. Every argument may be given as a
// .npy file or as inline comma-separated values (a single value fills the
// tensor); float arguments that are not given are generated from the seed,
// with distinct values so that a wrong mask changes the output. Results
// are written as DIR/out0.npy, DIR/out1.npy, ... in result order.
//
//===----------------------------------------------------------------------===//

#include "kvattn/CPU/CpuRunner.h"
#include "kvattn/Evaluator/Evaluator.h"
#include "kvattn/GPU/GpuExecutor.h"
#include "kvattn/Passes/Passes.h"
#include "kvattn/Registration/CommandLine.h"
#include "kvattn/Registration/Registration.h"
#include "kvattn/Runtime/EmulatedGpu.h"
#include "kvattn/Support/Compare.h"
#include "kvattn/Support/Float16.h"
#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/Npy.h"
#include "kvattn/Support/Random.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <map>

using namespace mlir;
namespace cl = llvm::cl;

namespace {

enum class Target { Reference, Cpu, Gpu, GpuEmu };

cl::OptionCategory runCategory("kvattn-run options");

cl::opt<unsigned>
    indexBitwidth("index-bitwidth",
                  cl::desc("gpu targets: bits of the kernels' index "
                           "arithmetic, 32 (the default) or 64"),
                  cl::init(32), cl::cat(runCategory));
cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input .mlir>"),
                               cl::Required, cl::cat(runCategory));
cl::opt<Target> target(
    "target", cl::desc("Where to run the function"),
    cl::values(clEnumValN(Target::Reference, "reference",
                          "evaluate with the scalar reference"),
               clEnumValN(Target::Cpu, "cpu",
                          "compile with kvattn-to-cpu and run on the host "
                          "JIT"),
               clEnumValN(Target::Gpu, "gpu",
                          "compile each attention to PTX and launch it "
                          "through the CUDA driver"),
               clEnumValN(Target::GpuEmu, "gpu-emu",
                          "as gpu, but the device LLVM IR runs on the "
                          "emulated GPU (memcheck, racecheck, counters)")),
    cl::init(Target::Reference), cl::cat(runCategory));
cl::opt<std::string> entry("entry",
                           cl::desc("Function to run (default: the only "
                                    "public function with a body)"),
                           cl::cat(runCategory));
cl::list<std::string>
    inputs("input",
           cl::desc("ARG=FILE.npy or ARG=v0,v1,...; ARG is the argument "
                    "number N, argN or %argN"),
           cl::cat(runCategory));
cl::list<std::string> fills(
    "fill",
    cl::desc("ARG=START:COUNT:VALUE: overwrite COUNT elements of float "
             "argument ARG from flat index START with VALUE (a number, nan, "
             "inf or -inf), after it is read or generated (e.g. poison the "
             "cache slots past kv_len)"),
    cl::cat(runCategory));
cl::opt<uint64_t> seed("seed", cl::desc("Seed of generated float inputs"),
                       cl::init(0), cl::cat(runCategory));
cl::opt<double> magnitude(
    "magnitude",
    cl::desc("Scale of generated float inputs: values in [-M, M) (default 1)"),
    cl::init(1.0), cl::cat(runCategory));
cl::opt<std::string> dumpDir("dump-outputs",
                             cl::desc("Write the results as DIR/outN.npy"),
                             cl::cat(runCategory));
cl::opt<bool> printOutputs("print-outputs",
                           cl::desc("Print every result value"),
                           cl::init(false), cl::cat(runCategory));
cl::opt<bool> check("check",
                    cl::desc("Compare the target's results with the "
                             "reference; exit 1 on a mismatch"),
                    cl::init(false), cl::cat(runCategory));
cl::list<std::string> expectSame(
    "expect-same",
    cl::desc("I,J: results I and J of the run must agree within the "
             "tolerance of their element type (e.g. chunked appends and a "
             "full forward); exit 1 otherwise"),
    cl::cat(runCategory));
cl::opt<int64_t> blockM("block-m", cl::desc("Query rows per program"),
                        cl::init(64), cl::cat(runCategory));
cl::opt<int64_t> blockN("block-n",
                        cl::desc("Keys per KV block (cpu default 64; gpu "
                                 "default: chosen per op)"),
                        cl::init(64), cl::cat(runCategory));
cl::opt<int64_t> splitKv("split-kv",
                         cl::desc("KV chunks per program, merged in chunk "
                                  "order (0: automatic; cpu default 1, gpu "
                                  "default 0)"),
                         cl::init(1), cl::cat(runCategory));
cl::opt<bool> packGqa("pack-gqa",
                      cl::desc("GQA packing: one program per kv head for "
                               "few query rows (cpu and gpu targets)"),
                      cl::init(true), cl::cat(runCategory));
cl::opt<bool> specializeShapes(
    "specialize-shapes",
    cl::desc("gpu targets: compile each attention for its inputs' shapes "
             "(default); false: once with its dynamic dimensions, as a "
             "serving engine does (split-KV then chosen at run time)"),
    cl::init(true), cl::cat(runCategory));
cl::opt<bool> tensorCores("tensor-cores",
                          cl::desc("gpu target: mma.sync, ldmatrix and "
                                   "cp.async for f16/bf16 (false: the scalar "
                                   "lowering)"),
                          cl::init(true), cl::cat(runCategory));
cl::opt<std::string>
    emuFault("emu-fault",
             cl::desc("gpu-emu target: plant a fault in the device code to "
                      "prove the checks catch it (drop-barrier:N, "
                      "wait-group:N, global-offset:N)"),
             cl::cat(runCategory));
cl::opt<bool> vectorize("vectorize",
                        cl::desc("cpu target: the vectorised lowering "
                                 "(false: the scalar loops)"),
                        cl::init(true), cl::cat(runCategory));
cl::opt<int64_t> vectorWidth("vector-width",
                             cl::desc("cpu target: f32 lanes per vector at "
                                      "most (0: the host's widest)"),
                             cl::init(0), cl::cat(runCategory));
cl::opt<int64_t> threads("num-threads",
                         cl::desc("cpu target: threads of the grid (0: all "
                                  "cores; 1: the calling thread)"),
                         cl::init(0), cl::cat(runCategory));
cl::opt<bool> fixUpperLeftAppends(
    "fix-upper-left-appends",
    cl::desc("Run an upper-left causal kvattn.sdpa over a KV-cache write "
             "with lower-right positions (-kvattn-resolve-cached-append's "
             "fix, a remark says so) on every target; without it the lint "
             "prints a warning and torch's is_causal meaning is kept"),
    cl::init(false), cl::cat(runCategory));
cl::opt<unsigned> optLevel("opt-level",
                           cl::desc("LLVM optimisation level of the JIT"),
                           cl::init(3), cl::cat(runCategory));

int fail(const std::string &message) {
  llvm::errs() << "kvattn-run: error: " << message << "\n";
  return 1;
}

/// Distinct values in [-M, M) for argument `arg`, element `i`.
double generated(uint64_t arg, int64_t i) {
  return ::mlir::kvattn::seededValue(seed, arg, i) * magnitude;
}

std::optional<unsigned> parseArgName(llvm::StringRef name) {
  name.consume_front("%");
  name.consume_front("arg");
  unsigned n;
  if (name.getAsInteger(10, n))
    return std::nullopt;
  return n;
}

std::string typeString(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  type.print(os);
  return s;
}

/// Builds argument `index` of type `type` from a --input spec (or nullptr).
::mlir::kvattn::Status makeArgument(unsigned index, RankedTensorType type,
                                    const std::string *spec,
                                    ::mlir::kvattn::HostTensor &out) {
  std::optional<::mlir::kvattn::ElementType> elt =
      ::mlir::kvattn::toElementType(type.getElementType());
  std::string what =
      "argument " + std::to_string(index) + " (" + typeString(type) + ")";
  if (!elt)
    return ::mlir::kvattn::Status::error(what +
                                         " has an unsupported element type");

  auto checkShape = [&](const ::mlir::kvattn::HostTensor &t) {
    if (t.rank() != type.getRank())
      return ::mlir::kvattn::Status::error(what + ": given rank " +
                                           std::to_string(t.rank()));
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (!type.isDynamicDim(d) && type.getDimSize(d) != t.dim(d))
        return ::mlir::kvattn::Status::error(what + ": given shape " +
                                             t.shapeString());
    return ::mlir::kvattn::Status::ok();
  };

  if (spec && llvm::StringRef(*spec).ends_with(".npy")) {
    KVATTN_RETURN_IF_ERROR(::mlir::kvattn::readNpyAs(*spec, *elt, out));
    return checkShape(out).withContext("--input " + std::to_string(index));
  }

  if (!type.hasStaticShape())
    return ::mlir::kvattn::Status::error(
        what + " has a dynamic shape: give it with --input " +
        std::to_string(index) + "=FILE.npy");
  KVATTN_RETURN_IF_ERROR(
      ::mlir::kvattn::HostTensor::make(
          *elt,
          std::vector<int64_t>(type.getShape().begin(), type.getShape().end()),
          out)
          .withContext(what));
  if (spec) {
    llvm::SmallVector<llvm::StringRef> items;
    llvm::StringRef(*spec).split(items, ',');
    if (items.size() != 1 &&
        static_cast<int64_t>(items.size()) != out.numElements())
      return ::mlir::kvattn::Status::error(
          what + ": " + std::to_string(items.size()) + " values given, " +
          std::to_string(out.numElements()) + " needed (or one to fill it)");
    for (int64_t i = 0; i < out.numElements(); ++i) {
      llvm::StringRef item = items.size() == 1 ? items[0] : items[i];
      item = item.trim();
      if (::mlir::kvattn::isFloatType(*elt)) {
        double v;
        if (item.getAsDouble(v))
          return ::mlir::kvattn::Status::error(what + ": '" + item.str() +
                                               "' is not a number");
        out.setDouble(i, v);
      } else {
        int64_t v;
        if (item == "true" || item == "false")
          v = item == "true";
        else if (item.getAsInteger(10, v))
          return ::mlir::kvattn::Status::error(what + ": '" + item.str() +
                                               "' is not an integer");
        if (!::mlir::kvattn::fitsIn(*elt, v))
          return ::mlir::kvattn::Status::error(
              what + ": " + item.str() + " does not fit in " +
              ::mlir::kvattn::elementTypeName(*elt));
        out.setInt(i, v);
      }
    }
    return ::mlir::kvattn::Status::ok();
  }

  if (!::mlir::kvattn::isFloatType(*elt))
    return ::mlir::kvattn::Status::error(
        what +
        " holds positions, lengths or a mask and is not generated: "
        "give it with --input " +
        std::to_string(index) + "=FILE.npy or --input " +
        std::to_string(index) + "=v0,v1,...");
  for (int64_t i = 0; i < out.numElements(); ++i)
    out.setDouble(i, generated(index, i));
  return ::mlir::kvattn::Status::ok();
}

void printTensor(llvm::raw_ostream &os, const ::mlir::kvattn::HostTensor &t) {
  os << "[";
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (i)
      os << ", ";
    if (::mlir::kvattn::isFloatType(t.elementType()))
      os << llvm::format("%.6g", t.getDouble(i));
    else
      os << t.getInt(i);
  }
  os << "]";
}

} // namespace

static int runTool(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // LLVM's own -stats (pass statistics) is registered lazily by the
  // command-line library; move it aside before defining kvattn's --stats.
  cl::HideUnrelatedOptions(runCategory);
  if (cl::Option *llvmStats = cl::getRegisteredOptions().lookup("stats")) {
    llvmStats->setArgStr("llvm-stats");
  }
  static cl::opt<bool> printStats(
      "stats",
      cl::desc(
          "Print the KV blocks the schedule loaded, masked and "
          "skipped (cpu target), or the emulated GPU's counters (gpu-emu)"),
      cl::init(false), cl::cat(runCategory));
  // MLIR's own flags (--mlir-timing, --mlir-print-ir-after-all, ...) for the
  // compilations of the cpu and gpu targets, as in kvattn-compile.
  mlir::registerAllPasses();
  ::mlir::kvattn::registerAllKVAttnPasses();
  ::mlir::kvattn::registerMLIRCommandLineOptions();
  cl::ParseCommandLineOptions(
      argc, argv,
      "kvattn-run: evaluate kvattn IR on inputs\n\nAlso takes MLIR's "
      "--mlir-* flags (--mlir-timing, --mlir-print-ir-after-all with "
      "--mlir-disable-threading, ...) for the compilations of the cpu and "
      "gpu targets.\n");

  if (check && target == Target::Reference)
    return fail("--check compares a compiled target with the reference: "
                "use it with --target=cpu, gpu or gpu-emu");
  if (printStats && target != Target::Cpu && target != Target::GpuEmu)
    return fail("--stats reports the compiled schedule: use it with "
                "--target=cpu or --target=gpu-emu");
  if (emuFault.getNumOccurrences() && target != Target::GpuEmu)
    return fail("--emu-fault needs --target=gpu-emu");
  // Every numeric option in its range, by name (the C API's limits where
  // it has the same option: kvattn_compile_options).
  if (optLevel > 3)
    return fail("--opt-level=" + std::to_string(optLevel) +
                " is outside [0, 3]");
  if (blockM < 0 || blockN < 0 || splitKv < 0)
    return fail(std::string(blockM < 0   ? "--block-m="
                            : blockN < 0 ? "--block-n="
                                         : "--split-kv=") +
                std::to_string(blockM < 0   ? blockM
                               : blockN < 0 ? blockN
                                            : splitKv) +
                " is negative");
  // --vector-width and --num-threads: CpuProgram::compile checks them.
  if (indexBitwidth != 32 && indexBitwidth != 64)
    return fail("--index-bitwidth=" + std::to_string(indexBitwidth) +
                " is not 32 or 64");
  if (!std::isfinite(magnitude) || magnitude <= 0)
    return fail("--magnitude=" + std::to_string(magnitude) +
                " is not a positive finite number");
  // An empty --emu-fault= plants nothing: say so rather than run unfaulted
  // (the emulator refuses a fault with no kind, ":N").
  if (emuFault.getNumOccurrences() && emuFault.empty())
    return fail("--emu-fault='" + emuFault +
                "' names no fault (drop-barrier, wait-group or "
                "global-offset, with an optional :N)");

  DialectRegistry registry;
  ::mlir::kvattn::registerAllKVAttnDialects(registry);
  MLIRContext context(registry);

  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(inputFile, sourceMgr, &context);
  if (!module)
    return 1; // The parser reported the error.

  func::FuncOp func;
  for (auto f : module->getOps<func::FuncOp>()) {
    if (f.isExternal())
      continue;
    if (!entry.empty() ? f.getName() == entry : f.isPublic()) {
      if (func && entry.empty())
        return fail("several public functions in '" + inputFile +
                    "': choose one with --entry");
      func = f;
    }
  }
  if (!func)
    return fail(entry.empty()
                    ? "no public function with a body in '" + inputFile + "'"
                    : "no function '" + entry + "' in '" + inputFile + "'");

  // The lint of -kvattn-resolve-cached-append on the function that runs, on
  // every target: its warnings (an upper-left causal kvattn.sdpa over a
  // cache write) or, with --fix-upper-left-appends, the remarks of the fix
  // go to stderr through the handler above; with the fix the resolved
  // function is what runs.
  {
    OwningOpRef<ModuleOp> resolved = module->clone();
    // The lint points at the user's op; its generic form adds nothing.
    const bool printOp = context.shouldPrintOpOnDiagnostic();
    context.printOpOnDiagnostic(false);
    llvm::scope_exit restore([&] { context.printOpOnDiagnostic(printOp); });
    auto resolvedFunc = resolved->lookupSymbol<func::FuncOp>(func.getName());
    PassManager pm(&context, func::FuncOp::getOperationName());
    mlir::kvattn::ResolveCachedAppendPassOptions resolve;
    resolve.fixUpperLeftAppends = fixUpperLeftAppends;
    pm.addPass(mlir::kvattn::createResolveCachedAppendPass(resolve));
    if (failed(pm.run(resolvedFunc)))
      return fail("-kvattn-resolve-cached-append failed on '" + inputFile +
                  "'");
    if (fixUpperLeftAppends) {
      module = std::move(resolved);
      func = resolvedFunc;
    }
  }

  unsigned numArgs = func.getNumArguments();
  std::map<unsigned, std::string> specs;
  for (const std::string &in : inputs) {
    size_t eq = in.find('=');
    std::optional<unsigned> arg =
        eq == std::string::npos
            ? std::nullopt
            : parseArgName(llvm::StringRef(in).take_front(eq));
    if (!arg)
      return fail("--input '" + in + "': expected ARG=FILE.npy or ARG=values");
    if (*arg >= numArgs)
      return fail("--input '" + in + "': the function has " +
                  std::to_string(numArgs) + " arguments");
    if (specs.count(*arg))
      return fail("--input '" + in + "': argument " + std::to_string(*arg) +
                  " is already given (--input " + std::to_string(*arg) + "=" +
                  specs[*arg] + ")");
    specs[*arg] = in.substr(eq + 1);
  }

  std::vector<::mlir::kvattn::HostTensor> arguments(numArgs);
  for (unsigned i = 0; i < numArgs; ++i) {
    auto type = dyn_cast<RankedTensorType>(func.getArgumentTypes()[i]);
    if (!type)
      return fail("argument " + std::to_string(i) + " is not a ranked tensor");
    auto it = specs.find(i);
    ::mlir::kvattn::Status s = makeArgument(
        i, type, it == specs.end() ? nullptr : &it->second, arguments[i]);
    if (s.isError())
      return fail(s.message());
  }

  for (const std::string &fill : fills) {
    llvm::StringRef arg, rest, start, count, value;
    std::tie(arg, rest) = llvm::StringRef(fill).split('=');
    std::tie(start, rest) = rest.split(':');
    std::tie(count, value) = rest.split(':');
    std::optional<unsigned> index = parseArgName(arg);
    int64_t first, n;
    if (!index || start.getAsInteger(10, first) || count.getAsInteger(10, n) ||
        value.empty())
      return fail("--fill '" + fill + "': expected ARG=START:COUNT:VALUE");
    if (*index >= numArgs)
      return fail("--fill '" + fill + "': the function has " +
                  std::to_string(numArgs) + " arguments");
    ::mlir::kvattn::HostTensor &t = arguments[*index];
    if (!::mlir::kvattn::isFloatType(t.elementType()))
      return fail("--fill '" + fill + "': argument " + std::to_string(*index) +
                  " is not a float tensor");
    if (first < 0 || n < 0 || first > t.numElements() ||
        n > t.numElements() - first)
      return fail("--fill '" + fill + "': [" + std::to_string(first) + ", +" +
                  std::to_string(n) + ") is outside the " +
                  std::to_string(t.numElements()) + " elements of argument " +
                  std::to_string(*index));
    std::string text = value.str();
    char *end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (*end)
      return fail("--fill '" + fill + "': '" + text + "' is not a number");
    for (int64_t i = first; i < first + n; ++i)
      t.setDouble(i, v);
  }

  // The reference's checks run first on every target: they validate the
  // run-time values (offsets, lengths, block tables, cache writes) with
  // errors that name them. Its values are computed only when a result
  // needs them (--target=reference, --check).
  std::vector<::mlir::kvattn::HostTensor> expected;
  if (target == Target::Reference || check) {
    if (::mlir::kvattn::Status s =
            ::mlir::kvattn::evaluateFunction(func, arguments, expected);
        s.isError())
      return fail(s.message());
  } else if (::mlir::kvattn::Status s =
                 ::mlir::kvattn::validateFunction(func, arguments);
             s.isError()) {
    return fail(s.message());
  }

  std::vector<::mlir::kvattn::HostTensor> results;
  std::unique_ptr<::mlir::kvattn::CpuProgram> program;
  ::mlir::kvattn::EmulatedGpu emu;
  std::string emuCounters;
  if (target == Target::Reference) {
    results = expected;
  } else if (target == Target::Gpu || target == Target::GpuEmu) {
    const bool emulated = target == Target::GpuEmu;
    const std::string targetFlag =
        emulated ? "--target=gpu-emu: " : "--target=gpu: ";
    // The GPU's defaults are the compiler's choices (block-n and split-kv
    // 0), as for kvattn-compile; the flags override them.
    ::mlir::kvattn::PtxOptions options;
    if (blockN.getNumOccurrences())
      options.blockN = blockN;
    options.packGqa = packGqa;
    if (splitKv.getNumOccurrences())
      options.splitKv = splitKv;
    options.tensorCores = tensorCores;
    options.indexBitwidth = indexBitwidth;
    options.configurePassManager = ::mlir::kvattn::mlirFlagsPassManagerHook();
    if (emulated)
      options.image = ::mlir::kvattn::DeviceImage::LlvmIR;
    std::unique_ptr<::mlir::kvattn::GpuExecutor> gpu;
    if (::mlir::kvattn::Status s =
            ::mlir::kvattn::GpuExecutor::create(options, gpu);
        s.isError())
      return fail(targetFlag + s.message());
    gpu->setKeepDynamicShapes(!specializeShapes);
    if (emulated) {
      if (::mlir::kvattn::Status s = ::mlir::kvattn::EmulatedGpu::open(
              ::mlir::kvattn::emulatedDriverPath(), emu);
          s.isError())
        return fail(targetFlag + s.message());
      if (emuFault.getNumOccurrences())
        if (::mlir::kvattn::Status s = emu.configure("fault", emuFault);
            s.isError())
          return fail("--emu-fault=" + emuFault + ": " + s.message());
      // Grouping accesses into warp requests serves only the counters.
      if (::mlir::kvattn::Status s =
              emu.configure("count-requests", printStats ? "1" : "0");
          s.isError())
        return fail(targetFlag + s.message());
    }
    ::mlir::kvattn::AttentionExecutor executor =
        [&](Operation *op,
            const std::vector<const ::mlir::kvattn::HostTensor *> &in,
            std::vector<::mlir::kvattn::HostTensor> &out) {
          return gpu->run(op, in, out);
        };
    // Attention and the cache writes (kvattn.append) are compiled and
    // launched on the GPU, on device-resident values: an append writes the
    // cache buffer in place and the attention after it reads that buffer
    // (GpuExecutor::beginFunction). Everything else (concatenations,
    // slices) runs on the host.
    OwningOpRef<ModuleOp> resolved = module->clone();
    {
      // Same meaning as the reference run, which printed no lint either.
      ScopedDiagnosticHandler quiet(&context, [](Diagnostic &diag) {
        return success(diag.getSeverity() != DiagnosticSeverity::Error);
      });
      PassManager pm(&context);
      pm.addPass(mlir::kvattn::createResolveCachedAppendPass());
      if (failed(pm.run(*resolved)))
        return fail("resolving kvattn.sdpa for the GPU failed");
    }
    auto gpuFunc = resolved->lookupSymbol<func::FuncOp>(func.getName());
    gpu->beginFunction();
    ::mlir::kvattn::Status ran =
        ::mlir::kvattn::evaluateFunction(gpuFunc, arguments, results, executor);
    ::mlir::kvattn::Status freed = gpu->endFunction();
    if (ran.isError())
      return fail(ran.message());
    if (freed.isError())
      return fail(freed.message());
    if (emulated) {
      emuCounters = emu.takeCounters();
      // Reports that did not fail a launch (fail-on-report off) still fail
      // the run.
      if (std::string reports = emu.takeReports(); !reports.empty())
        return fail("the emulated GPU reported:\n" + reports);
    }
  } else {
    ::mlir::kvattn::CpuCompileOptions options;
    options.blockM = blockM;
    options.blockN = blockN;
    options.stats = printStats;
    options.splitKv = splitKv;
    options.packGqa = packGqa;
    options.optLevel = optLevel;
    options.vectorize = vectorize;
    options.vectorWidth = vectorWidth;
    options.threads = threads;
    options.configurePassManager = ::mlir::kvattn::mlirFlagsPassManagerHook();
    if (::mlir::kvattn::Status s = ::mlir::kvattn::CpuProgram::compile(
            *module, func.getName().str(), options, program);
        s.isError())
      return fail(s.message());
    // validateFunction (or evaluateFunction) checked these arguments above.
    if (::mlir::kvattn::Status s = program->runUnchecked(arguments, results);
        s.isError())
      return fail(s.message());
  }

  if (!dumpDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(dumpDir))
      return fail("cannot create '" + dumpDir + "': " + ec.message());
  }
  for (size_t r = 0; r < results.size(); ++r) {
    const ::mlir::kvattn::HostTensor &t = results[r];
    llvm::outs() << "out" << r << ": " << t.shapeString();
    if (!dumpDir.empty()) {
      std::string path = dumpDir + "/out" + std::to_string(r) + ".npy";
      if (::mlir::kvattn::Status s = ::mlir::kvattn::writeNpy(path, t);
          s.isError())
        return fail(s.message());
      llvm::outs() << " -> " << path;
    }
    if (printOutputs) {
      llvm::outs() << " = ";
      printTensor(llvm::outs(), t);
    }
    llvm::outs() << "\n";
  }

  if (printStats && target == Target::GpuEmu) {
    llvm::outs() << emuCounters;
  } else if (printStats) {
    ::mlir::kvattn::BlockStats st = program->stats();
    llvm::outs() << "stats: kv blocks loaded=" << st.loaded
                 << " masked=" << st.masked << " skipped=" << st.skipped
                 << " kv_bytes=" << st.kvBytes << " (block-m=" << blockM
                 << " block-n=" << blockN << ")\n";
  }

  bool sameFailed = false;
  for (const std::string &pair : expectSame) {
    llvm::StringRef first, second;
    std::tie(first, second) = llvm::StringRef(pair).split(',');
    unsigned i, j;
    if (first.getAsInteger(10, i) || second.getAsInteger(10, j) ||
        i >= results.size() || j >= results.size())
      return fail("--expect-same '" + pair +
                  "': expected two result "
                  "numbers below " +
                  std::to_string(results.size()));
    ::mlir::kvattn::Tolerance tol =
        ::mlir::kvattn::toleranceFor(results[i].elementType(), magnitude);
    ::mlir::kvattn::Comparison c =
        ::mlir::kvattn::compare(results[j], results[i], tol);
    llvm::outs() << "same out" << i << " out" << j
                 << ": max_abs_err=" << llvm::format("%.3g", c.maxAbsErr) << " "
                 << (c.pass() ? "PASS" : "FAIL") << "\n";
    sameFailed |= !c.pass();
  }
  if (sameFailed)
    return 1;

  if (check) {
    bool allPass = true;
    for (size_t r = 0; r < results.size(); ++r) {
      ::mlir::kvattn::Tolerance tol =
          ::mlir::kvattn::toleranceFor(expected[r].elementType(), magnitude);
      ::mlir::kvattn::Comparison c =
          ::mlir::kvattn::compare(results[r], expected[r], tol);
      allPass &= c.pass();
      llvm::outs() << "check out" << r
                   << ": max_abs_err=" << llvm::format("%.3g", c.maxAbsErr)
                   << " max_rel_err=" << llvm::format("%.3g", c.maxRelErr)
                   << " tolerance("
                   << ::mlir::kvattn::elementTypeName(expected[r].elementType())
                   << ")=atol " << llvm::format("%g", tol.atol) << " + rtol "
                   << llvm::format("%g", tol.rtol) << " * |ref| "
                   << (c.pass() ? "PASS" : "FAIL");
      if (!c.pass())
        llvm::outs() << " (" << c.mismatches << " mismatches, first at "
                     << c.firstMismatch << ": got "
                     << results[r].getDouble(c.firstMismatch) << ", want "
                     << expected[r].getDouble(c.firstMismatch) << ")";
      llvm::outs() << "\n";
    }
    llvm::outs() << (allPass ? "PASS" : "FAIL") << "\n";
    if (!allPass)
      return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  int status = runTool(argc, argv);
  // A full disk or a closed pipe behind the standard output is an error
  // that names it, not "LLVM ERROR: IO failure" when the stream is
  // destroyed at exit.
  llvm::outs().flush();
  if (llvm::outs().has_error()) {
    llvm::errs() << "kvattn-run: error: writing the standard output failed: "
                 << llvm::outs().error().message() << "\n";
    llvm::outs().clear_error();
    return 1;
  }
  return status;
}
