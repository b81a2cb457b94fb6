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

#include "CompileFlags.h"
#include "kvattn/CPU/CpuRunner.h"
#include "kvattn/Dialect/KVAttnOps.h"
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
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <map>

using namespace mlir;
namespace cl = llvm::cl;

namespace {

enum class Target { Reference, Cpu, Gpu, GpuEmu };

cl::OptionCategory runCategory("kvattn-run options");

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
cl::opt<double> fp8Magnitude(
    "fp8-magnitude",
    cl::desc("Scale of generated FP8 inputs (an FP8 cache's codes): values "
             "in [-C, C) rounded to the FP8 type, e.g. 448 for codes over "
             "e4m3's range (default: --magnitude)"),
    cl::init(0.0), cl::cat(runCategory));
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
cl::opt<std::string> reportFile(
    "report",
    cl::desc("With --check: also write the comparison to FILE as JSON (per "
             "result: name, dtype, shape, the max, mean, p95 and p99 of the "
             "absolute drift, the max relative error, mismatches, tolerance, "
             "verdict)"),
    cl::value_desc("FILE"), cl::cat(runCategory));
cl::list<std::string> expectSame(
    "expect-same",
    cl::desc("I,J: results I and J of the run must agree within the "
             "tolerance of their element type (e.g. chunked appends and a "
             "full forward); exit 1 otherwise"),
    cl::cat(runCategory));
cl::opt<bool> specializeShapes(
    "specialize-shapes",
    cl::desc("gpu targets: compile each attention for its inputs' shapes "
             "(default); false: once with its dynamic dimensions, as a "
             "serving engine does (split-KV then chosen at run time)"),
    cl::init(true), cl::cat(runCategory));
enum class PlanFlag { None, Device, Host };
cl::opt<PlanFlag> throughPlan(
    "plan",
    cl::desc("gpu targets: run the function (kvattn.append ops and one "
             "attention: a serving step) through one plan, as a serving "
             "engine does (kvattn_plan_create: device validation, bounds the "
             "run's sizes plus --plan-slack; outputs filled with NaN before "
             "each run; the status word read after): its metadata in device "
             "buffers (device) or on the host (host)"),
    cl::values(clEnumValN(PlanFlag::None, "none", "no plan (default)"),
               clEnumValN(PlanFlag::Device, "device",
                          "metadata in device buffers (Plan::run)"),
               clEnumValN(PlanFlag::Host, "host",
                          "metadata on the host (Plan::runWithHostMetadata)")),
    cl::init(PlanFlag::None), cl::cat(runCategory));
cl::opt<int64_t> planSlack(
    "plan-slack",
    cl::desc("--plan: the plan's bounds exceed the run's B, L and S by this "
             "much"),
    cl::init(0), cl::cat(runCategory));
cl::opt<int64_t>
    planRuns("plan-runs",
             cl::desc("--plan: runs of the plan (the last one's results "
                      "are read)"),
             cl::init(1), cl::cat(runCategory));
cl::opt<std::string>
    chip("chip",
         cl::desc("gpu targets: the device's chip or its architecture-"
                  "specific variant to compile for; default sm_90a on a "
                  "compute capability 9.0 GPU (the wgmma kernels; sm_90: "
                  "the mma.sync ones), else, and on the emulated GPU, the "
                  "device's own chip (sm_90a runs the wgmma kernels there)"),
         cl::cat(runCategory));
cl::opt<std::string>
    emuFault("emu-fault",
             cl::desc("gpu-emu target: plant a fault in the device code to "
                      "prove the checks catch it (drop-barrier:N, "
                      "wait-group:N, global-offset:N, drop-mbarrier-wait:N, "
                      "drop-wgmma-wait:N, drop-fence-proxy:N, expect-tx:N)"),
             cl::cat(runCategory));
// The compile options shared with kvattn-compile and kvattn-bench
// (tools/common); the CPU's schedule by default (block-m and block-n 64, no
// split), the GPU's choices unless a flag is given.
mlir::kvattn::tools::CompileFlagDefaults runDefaults() {
  mlir::kvattn::tools::CompileFlagDefaults d;
  d.blockM = 64;
  d.blockN = 64;
  d.splitKv = 1;
  return d;
}
namespace flag = mlir::kvattn::tools;
flag::CompileFlags flags(runCategory,
                         flag::kBlockM | flag::kBlockN | flag::kNumWarps |
                             flag::kSplitKv | flag::kPackGqa |
                             flag::kTensorCores | flag::kGpuSchedule |
                             flag::kIndexBitwidth | flag::kVectorize |
                             flag::kVectorWidth | flag::kNumThreads |
                             flag::kOptLevel,
                         runDefaults());
cl::opt<bool> fixUpperLeftAppends(
    "fix-upper-left-appends",
    cl::desc("Run an upper-left causal kvattn.sdpa over a KV-cache write "
             "with lower-right positions (-kvattn-resolve-cached-append's "
             "fix, a remark says so) on every target; without it the lint "
             "prints a warning and torch's is_causal meaning is kept"),
    cl::init(false), cl::cat(runCategory));

int fail(const std::string &message) {
  llvm::errs() << "kvattn-run: error: " << message << "\n";
  return 1;
}

/// Distinct values in [-M, M) for argument `arg`, element `i` (M the
/// --fp8-magnitude of an FP8 argument when given).
double generated(uint64_t arg, int64_t i, ::mlir::kvattn::ElementType type) {
  const double m = ::mlir::kvattn::isFp8Type(type) && fp8Magnitude > 0
                       ? fp8Magnitude
                       : magnitude;
  return ::mlir::kvattn::seededValue(seed, arg, i) * m;
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
    out.setDouble(i, generated(index, i, *elt));
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

/// What result `r` of `func` is, for the reports: the attention's `out` or
/// `lse`, an appended `cache`, or `result` for anything else.
std::string resultName(func::FuncOp func, unsigned r) {
  Value v = func.front().getTerminator()->getOperand(r);
  auto res = dyn_cast<OpResult>(v);
  if (!res)
    return "result";
  Operation *op = res.getOwner();
  if (isa<::mlir::kvattn::AttentionOp, ::mlir::kvattn::SdpaOp,
          ::mlir::kvattn::MergeOp>(op))
    return res.getResultNumber() == 0 ? "out" : "lse";
  if (isa<::mlir::kvattn::AppendOp>(op))
    return "cache";
  return "result";
}

/// A finite double as a JSON number, else null (JSON has no infinities).
llvm::json::Value jsonNumber(double x) {
  if (std::isfinite(x))
    return x;
  return nullptr;
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

  if (!reportFile.empty() && !check)
    return fail("--report writes the comparison of --check: add --check");
  if (check && target == Target::Reference)
    return fail("--check compares a compiled target with the reference: "
                "use it with --target=cpu, gpu or gpu-emu");
  if (printStats && target != Target::Cpu && target != Target::GpuEmu)
    return fail("--stats reports the compiled schedule: use it with "
                "--target=cpu or --target=gpu-emu");
  if (emuFault.getNumOccurrences() && target != Target::GpuEmu)
    return fail("--emu-fault needs --target=gpu-emu");
  if ((throughPlan != PlanFlag::None || planSlack.getNumOccurrences() ||
       planRuns.getNumOccurrences()) &&
      target != Target::Gpu && target != Target::GpuEmu)
    return fail("--plan, --plan-slack and --plan-runs run plans on a GPU: use "
                "them with --target=gpu or --target=gpu-emu");
  // Every numeric option in its range, by name (the C API's limits where
  // it has the same option: kvattn_compile_options).
  if (std::optional<std::string> bad = flags.outOfRange())
    return fail(*bad);
  if (!std::isfinite(magnitude) || magnitude <= 0)
    return fail("--magnitude=" + std::to_string(magnitude) +
                " is not a positive finite number");
  if (!std::isfinite(fp8Magnitude) || fp8Magnitude < 0)
    return fail("--fp8-magnitude=" + std::to_string(fp8Magnitude) +
                " is not a positive finite number (or 0: --magnitude)");
  // An empty --emu-fault= plants nothing: say so rather than run unfaulted
  // (the emulator refuses a fault with no kind, ":N").
  if (emuFault.getNumOccurrences() && emuFault.empty())
    return fail("--emu-fault='" + emuFault +
                "' names no fault (drop-barrier, wait-group, "
                "global-offset, drop-mbarrier-wait, drop-wgmma-wait, "
                "drop-fence-proxy or expect-tx, with an optional :N)");

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

  // Named before any compilation touches the module.
  std::string entryName = func.getName().str();
  std::vector<std::string> resultNames;
  for (unsigned r = 0; r < func.getNumResults(); ++r)
    resultNames.push_back(resultName(func, r));

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

  // What the check's tolerances grow with: --magnitude, an FP8 cache's
  // dequantised values where they are larger (a large v_scale).
  const ::mlir::kvattn::OperandMagnitudes magnitudes =
      ::mlir::kvattn::operandMagnitudes(func, arguments, magnitude);
  // An lse mixes no values: the values' factor stays --magnitude's.
  auto toleranceOf = [&](size_t r, ::mlir::kvattn::ElementType type) {
    ::mlir::kvattn::OperandMagnitudes m = magnitudes;
    if (resultNames[r] == "lse")
      m.value = magnitude;
    return ::mlir::kvattn::toleranceFor(type, m);
  };

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
    // 0), as for kvattn-compile; the flags given override them.
    ::mlir::kvattn::PtxOptions options;
    flags.applyGiven(options);
    options.configurePassManager = ::mlir::kvattn::mlirFlagsPassManagerHook();
    if (!chip.empty())
      options.chip = chip;
    if (emulated)
      options.image = ::mlir::kvattn::DeviceImage::LlvmIR;
    std::unique_ptr<::mlir::kvattn::GpuExecutor> gpu;
    if (::mlir::kvattn::Status s =
            ::mlir::kvattn::GpuExecutor::create(options, gpu);
        s.isError())
      return fail(targetFlag + s.message());
    gpu->setKeepDynamicShapes(!specializeShapes);
    if (planSlack < 0 || planRuns < 1)
      return fail("--plan-slack must be at least 0 and --plan-runs at least "
                  "1");
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
    // --plan: all of the function through one plan, as an engine plans
    // its step.
    if (throughPlan != PlanFlag::None &&
        !::mlir::kvattn::GpuExecutor::isPlannableFunction(gpuFunc))
      return fail("--plan runs a function whose body is kvattn.append ops and "
                  "one kvattn.attention or kvattn.cascade (a serving step); "
                  "@" +
                  func.getName().str() + " has other ops");
    using PlanMetadata = ::mlir::kvattn::GpuExecutor::PlanMetadata;
    gpu->beginFunction();
    ::mlir::kvattn::Status ran =
        throughPlan != PlanFlag::None
            ? gpu->runFunctionThroughPlan(gpuFunc, arguments, results,
                                          throughPlan == PlanFlag::Device
                                              ? PlanMetadata::Device
                                              : PlanMetadata::Host,
                                          planSlack, planRuns)
            : ::mlir::kvattn::evaluateFunction(gpuFunc, arguments, results,
                                               executor);
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
    flags.apply(options);
    options.stats = printStats;
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
                 << " kv_bytes=" << st.kvBytes << " (block-m=" << flags.blockM()
                 << " block-n=" << flags.blockN() << ")\n";
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
    ::mlir::kvattn::Tolerance tol = toleranceOf(i, results[i].elementType());
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
    llvm::json::Array reportOutputs;
    for (size_t r = 0; r < results.size(); ++r) {
      ::mlir::kvattn::Tolerance tol = toleranceOf(r, expected[r].elementType());
      ::mlir::kvattn::Comparison c =
          ::mlir::kvattn::compare(results[r], expected[r], tol);
      ::mlir::kvattn::Drift d =
          ::mlir::kvattn::measureDrift(results[r], expected[r]);
      const std::string &name = resultNames[r];
      const char *dtype =
          ::mlir::kvattn::elementTypeName(expected[r].elementType());
      allPass &= c.pass();
      llvm::outs() << "check out" << r
                   << ": max_abs_err=" << llvm::format("%.3g", c.maxAbsErr)
                   << " max_rel_err=" << llvm::format("%.3g", c.maxRelErr)
                   << " tolerance(" << dtype << ")=atol "
                   << llvm::format("%g", tol.atol) << " + rtol "
                   << llvm::format("%g", tol.rtol) << " * |ref| "
                   << (c.pass() ? "PASS" : "FAIL");
      if (!c.pass())
        llvm::outs() << " (" << c.mismatches << " mismatches, first at "
                     << c.firstMismatch << ": got "
                     << results[r].getDouble(c.firstMismatch) << ", want "
                     << expected[r].getDouble(c.firstMismatch) << ")";
      llvm::outs() << "\n";
      llvm::outs() << "drift out" << r << " (" << name << ", " << d.elements
                   << " elements): max=" << llvm::format("%.3g", d.max)
                   << " mean=" << llvm::format("%.3g", d.mean)
                   << " p95=" << llvm::format("%.3g", d.p95)
                   << " p99=" << llvm::format("%.3g", d.p99);
      if (d.nonFiniteMismatches)
        llvm::outs() << " non_finite_mismatches=" << d.nonFiniteMismatches;
      llvm::outs() << "\n";
      if (!reportFile.empty()) {
        llvm::json::Array shape;
        for (int64_t extent : expected[r].shape())
          shape.push_back(extent);
        reportOutputs.push_back(llvm::json::Object{
            {"index", static_cast<int64_t>(r)},
            {"name", name},
            {"dtype", dtype},
            {"shape", std::move(shape)},
            {"elements", d.elements},
            {"max_abs", jsonNumber(d.max)},
            {"mean_abs", jsonNumber(d.mean)},
            {"p95_abs", jsonNumber(d.p95)},
            {"p99_abs", jsonNumber(d.p99)},
            {"max_rel", jsonNumber(c.maxRelErr)},
            {"mismatches", c.mismatches},
            {"non_finite_mismatches", d.nonFiniteMismatches},
            {"shape_mismatch", d.shapeMismatch},
            {"tolerance",
             llvm::json::Object{{"atol", tol.atol}, {"rtol", tol.rtol}}},
            {"pass", c.pass()},
        });
      }
    }
    llvm::outs() << (allPass ? "PASS" : "FAIL") << "\n";
    if (!reportFile.empty()) {
      static const char *const targetNames[] = {"reference", "cpu", "gpu",
                                                "gpu-emu"};
      llvm::json::Object report{
          {"file", inputFile.getValue()},
          {"entry", entryName},
          {"target", targetNames[static_cast<int>(target.getValue())]},
          {"magnitude", magnitude.getValue()},
          {"operand_magnitudes",
           llvm::json::Object{{"query", magnitudes.query},
                              {"key", magnitudes.key},
                              {"value", magnitudes.value}}},
          {"pass", allPass},
          {"outputs", std::move(reportOutputs)},
      };
      std::error_code ec;
      llvm::raw_fd_ostream os(reportFile, ec);
      if (ec)
        return fail("--report: cannot open '" + reportFile +
                    "': " + ec.message());
      os << llvm::formatv("{0:2}", llvm::json::Value(std::move(report)))
         << "\n";
      os.close();
      if (os.has_error()) {
        std::string message = os.error().message();
        os.clear_error();
        return fail("--report: writing '" + reportFile +
                    "' failed: " + message);
      }
    }
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
