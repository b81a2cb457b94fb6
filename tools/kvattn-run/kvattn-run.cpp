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

#include "kvattn/Evaluator/Evaluator.h"
#include "kvattn/Registration/Registration.h"
#include "kvattn/Support/Float16.h"
#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/Npy.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
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

enum class Target { Reference, Cpu, Gpu };

cl::OptionCategory runCategory("kvattn-run options");

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input .mlir>"),
                               cl::Required, cl::cat(runCategory));
cl::opt<Target> target(
    "target", cl::desc("Where to run the function"),
    cl::values(clEnumValN(Target::Reference, "reference",
                          "evaluate with the scalar reference"),
               clEnumValN(Target::Cpu, "cpu",
                          "JIT-compile for the host (not available yet)"),
               clEnumValN(Target::Gpu, "gpu",
                          "compile to PTX and launch (not available yet)")),
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
cl::opt<uint64_t> seed("seed", cl::desc("Seed of generated float inputs"),
                       cl::init(0), cl::cat(runCategory));
cl::opt<std::string> dumpDir("dump-outputs",
                             cl::desc("Write the results as DIR/outN.npy"),
                             cl::cat(runCategory));
cl::opt<bool> printOutputs("print-outputs",
                           cl::desc("Print every result value"),
                           cl::init(false), cl::cat(runCategory));

int fail(const std::string &message) {
  llvm::errs() << "kvattn-run: error: " << message << "\n";
  return 1;
}

/// splitmix64: a small, well-mixed, platform-independent generator.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Distinct values in [-1, 1) for argument `arg`, element `i`.
double generated(uint64_t arg, int64_t i) {
  uint64_t bits = mix(mix(seed ^ (arg * 0x100000001b3ull)) + uint64_t(i));
  return static_cast<double>(bits >> 11) * (2.0 / 9007199254740992.0) - 1.0;
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
kvattn::Status makeArgument(unsigned index, RankedTensorType type,
                            const std::string *spec, kvattn::HostTensor &out) {
  std::optional<kvattn::ElementType> elt =
      kvattn::toElementType(type.getElementType());
  std::string what =
      "argument " + std::to_string(index) + " (" + typeString(type) + ")";
  if (!elt)
    return kvattn::Status::error(what + " has an unsupported element type");

  auto checkShape = [&](const kvattn::HostTensor &t) {
    if (t.rank() != type.getRank())
      return kvattn::Status::error(what + ": given rank " +
                                   std::to_string(t.rank()));
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (!type.isDynamicDim(d) && type.getDimSize(d) != t.dim(d))
        return kvattn::Status::error(what + ": given shape " + t.shapeString());
    return kvattn::Status::ok();
  };

  if (spec && llvm::StringRef(*spec).ends_with(".npy")) {
    KVATTN_RETURN_IF_ERROR(kvattn::readNpyAs(*spec, *elt, out));
    return checkShape(out).withContext("--input " + std::to_string(index));
  }

  if (!type.hasStaticShape())
    return kvattn::Status::error(what +
                                 " has a dynamic shape: give it with --input " +
                                 std::to_string(index) + "=FILE.npy");
  out = kvattn::HostTensor(*elt, std::vector<int64_t>(type.getShape().begin(),
                                                      type.getShape().end()));
  if (spec) {
    llvm::SmallVector<llvm::StringRef> items;
    llvm::StringRef(*spec).split(items, ',');
    if (items.size() != 1 &&
        static_cast<int64_t>(items.size()) != out.numElements())
      return kvattn::Status::error(
          what + ": " + std::to_string(items.size()) + " values given, " +
          std::to_string(out.numElements()) + " needed (or one to fill it)");
    for (int64_t i = 0; i < out.numElements(); ++i) {
      llvm::StringRef item = items.size() == 1 ? items[0] : items[i];
      item = item.trim();
      if (kvattn::isFloatType(*elt)) {
        double v;
        if (item.getAsDouble(v))
          return kvattn::Status::error(what + ": '" + item.str() +
                                       "' is not a number");
        out.setDouble(i, v);
      } else {
        int64_t v;
        if (item == "true" || item == "false")
          v = item == "true";
        else if (item.getAsInteger(10, v))
          return kvattn::Status::error(what + ": '" + item.str() +
                                       "' is not an integer");
        out.setInt(i, v);
      }
    }
    return kvattn::Status::ok();
  }

  if (!kvattn::isFloatType(*elt))
    return kvattn::Status::error(
        what +
        " holds positions, lengths or a mask and is not generated: "
        "give it with --input " +
        std::to_string(index) + "=FILE.npy or --input " +
        std::to_string(index) + "=v0,v1,...");
  for (int64_t i = 0; i < out.numElements(); ++i)
    out.setDouble(i, generated(index, i));
  return kvattn::Status::ok();
}

void printTensor(llvm::raw_ostream &os, const kvattn::HostTensor &t) {
  os << "[";
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (i)
      os << ", ";
    if (kvattn::isFloatType(t.elementType()))
      os << llvm::format("%.6g", t.getDouble(i));
    else
      os << t.getInt(i);
  }
  os << "]";
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(runCategory);
  cl::ParseCommandLineOptions(argc, argv,
                              "kvattn-run: evaluate kvattn IR on inputs\n");

  if (target != Target::Reference)
    return fail(std::string("--target=") +
                (target == Target::Cpu ? "cpu" : "gpu") +
                " is not available in this build yet; use "
                "--target=reference");

  DialectRegistry registry;
  kvattn::registerAllKVAttnDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();

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
    specs[*arg] = in.substr(eq + 1);
  }

  std::vector<kvattn::HostTensor> arguments(numArgs);
  for (unsigned i = 0; i < numArgs; ++i) {
    auto type = dyn_cast<RankedTensorType>(func.getArgumentTypes()[i]);
    if (!type)
      return fail("argument " + std::to_string(i) + " is not a ranked tensor");
    auto it = specs.find(i);
    kvattn::Status s = makeArgument(
        i, type, it == specs.end() ? nullptr : &it->second, arguments[i]);
    if (s.isError())
      return fail(s.message());
  }

  std::vector<kvattn::HostTensor> results;
  if (kvattn::Status s = kvattn::evaluateFunction(func, arguments, results);
      s.isError())
    return fail(s.message());

  if (!dumpDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(dumpDir))
      return fail("cannot create '" + dumpDir + "': " + ec.message());
  }
  for (size_t r = 0; r < results.size(); ++r) {
    const kvattn::HostTensor &t = results[r];
    llvm::outs() << "out" << r << ": " << t.shapeString();
    if (!dumpDir.empty()) {
      std::string path = dumpDir + "/out" + std::to_string(r) + ".npy";
      if (kvattn::Status s = kvattn::writeNpy(path, t); s.isError())
        return fail(s.message());
      llvm::outs() << " -> " << path;
    }
    if (printOutputs) {
      llvm::outs() << " = ";
      printTensor(llvm::outs(), t);
    }
    llvm::outs() << "\n";
  }
  return 0;
}
