//===- CompileFlags.cpp - the tools' shared compile options ---------------===//

#include "CompileFlags.h"

#include "kvattn/Support/Limits.h"

#include <cassert>
#include <limits>

using namespace mlir::kvattn;
using namespace mlir::kvattn::tools;
namespace cl = llvm::cl;

namespace {

/// One integer flag: name, description, range.
struct IntSpec {
  CompileFlag flag;
  const char *name, *description;
  int64_t min, max;
};

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

// The ranges are -kvattn-tile's and the CPU runner's (kvattn/Support/
// Limits.h); 0 is the compiler's own choice where the description says so.
constexpr IntSpec kIntSpecs[] = {
    {kBlockM, "block-m", "Query rows per program (0: chosen per attention)", 0,
     limits::kMaxBlockM},
    {kBlockN, "block-n", "Keys per KV block (0: chosen from the head dims)", 0,
     limits::kMaxBlockN},
    {kNumWarps, "num-warps", "GPU: warps per program (0: block-m / 16)", 0,
     limits::kMaxNumWarps},
    {kNumStages, "num-stages", "GPU: K/V pipeline depth", 1,
     limits::kMaxNumStages},
    {kSplitKv, "split-kv",
     "KV chunks per program, merged in chunk order by a second program (1: "
     "no split; 0: chosen from the sizes and the multiprocessors)",
     0, limits::kMaxSplitKv},
    {kNumSms, "num-sms", "GPU: multiprocessors, for --split-kv=0", 0,
     kUnbounded},
    {kVectorWidth, "vector-width",
     "CPU: f32 lanes per vector at most (0: the host's widest; a power of "
     "two)",
     0, 16},
    {kNumThreads, "num-threads",
     "CPU: threads of the grid (0: all cores; 1: the calling thread)", 0,
     limits::kMaxThreads},
};

} // namespace

struct CompileFlags::Options {
  unsigned which;
  std::unique_ptr<cl::opt<int64_t>> ints[std::size(kIntSpecs)];
  std::unique_ptr<cl::opt<bool>> packGqa, tensorCores, vectorize;
  std::unique_ptr<cl::opt<unsigned>> indexBitwidth, optLevel;

  const cl::opt<int64_t> &integer(CompileFlag flag) const {
    for (auto [spec, option] : llvm::zip(kIntSpecs, ints))
      if (spec.flag == flag) {
        assert(option && "the tool does not take this flag");
        return *option;
      }
    llvm_unreachable("not an integer flag");
  }
};

CompileFlags::CompileFlags(cl::OptionCategory &category, unsigned which,
                           const CompileFlagDefaults &defaults)
    : options(std::make_unique<Options>()) {
  options->which = which;
  const int64_t intDefaults[] = {defaults.blockM,      defaults.blockN,
                                 defaults.numWarps,    defaults.numStages,
                                 defaults.splitKv,     defaults.numSms,
                                 defaults.vectorWidth, defaults.numThreads};
  static_assert(std::size(intDefaults) == std::size(kIntSpecs));
  for (auto [i, spec] : llvm::enumerate(kIntSpecs))
    if (which & spec.flag)
      options->ints[i] = std::make_unique<cl::opt<int64_t>>(
          llvm::StringRef(spec.name), cl::desc(spec.description),
          cl::init(intDefaults[i]), cl::cat(category));
  auto flag = [&](CompileFlag f, const char *name, const char *description,
                  bool init) -> std::unique_ptr<cl::opt<bool>> {
    if (!(which & f))
      return nullptr;
    return std::make_unique<cl::opt<bool>>(llvm::StringRef(name),
                                           cl::desc(description),
                                           cl::init(init), cl::cat(category));
  };
  options->packGqa =
      flag(kPackGqa, "pack-gqa",
           "GQA packing: one program per kv head for few query rows",
           defaults.packGqa);
  options->tensorCores =
      flag(kTensorCores, "tensor-cores",
           "GPU: mma.sync, ldmatrix and cp.async for f16/bf16 where the head "
           "dims allow (false: the scalar lowering)",
           defaults.tensorCores);
  options->vectorize = flag(kVectorize, "vectorize",
                            "CPU: the vectorised lowering (false: the scalar "
                            "loops)",
                            defaults.vectorize);
  if (which & kIndexBitwidth)
    options->indexBitwidth = std::make_unique<cl::opt<unsigned>>(
        "index-bitwidth",
        cl::desc("GPU: bits of the kernels' index arithmetic: 32 (every "
                 "buffer under 2^31 elements, checked at launch) or 64 "
                 "(larger caches)"),
        cl::init(defaults.indexBitwidth), cl::cat(category));
  if (which & kOptLevel)
    options->optLevel = std::make_unique<cl::opt<unsigned>>(
        "opt-level",
        cl::desc("CPU: LLVM optimisation level of the JIT (0 to "
                 "3)"),
        cl::init(defaults.optLevel), cl::cat(category));
}

CompileFlags::~CompileFlags() = default;

std::optional<std::string> CompileFlags::outOfRange() const {
  if (options->optLevel && *options->optLevel > 3)
    return "--opt-level=" + std::to_string(*options->optLevel) +
           " is outside [0, 3]";
  for (auto [spec, option] : llvm::zip(kIntSpecs, options->ints)) {
    if (!option)
      continue;
    const int64_t value = *option;
    const std::string flag =
        "--" + std::string(spec.name) + "=" + std::to_string(value);
    if (value < 0 && spec.min == 0)
      return flag + " is negative";
    if (value < spec.min || value > spec.max)
      return flag + " is outside [" + std::to_string(spec.min) + ", " +
             std::to_string(spec.max) + "]";
  }
  if (options->indexBitwidth && *options->indexBitwidth != 32 &&
      *options->indexBitwidth != 64)
    return "--index-bitwidth=" + std::to_string(*options->indexBitwidth) +
           " is not 32 or 64";
  return std::nullopt;
}

bool CompileFlags::given(CompileFlag flag) const {
  const cl::Option *option = nullptr;
  for (auto [spec, o] : llvm::zip(kIntSpecs, options->ints))
    if (spec.flag == flag)
      option = o.get();
  if (flag == kPackGqa)
    option = options->packGqa.get();
  else if (flag == kTensorCores)
    option = options->tensorCores.get();
  else if (flag == kVectorize)
    option = options->vectorize.get();
  else if (flag == kIndexBitwidth)
    option = options->indexBitwidth.get();
  else if (flag == kOptLevel)
    option = options->optLevel.get();
  return option && option->getNumOccurrences();
}

int64_t CompileFlags::blockM() const { return options->integer(kBlockM); }
int64_t CompileFlags::blockN() const { return options->integer(kBlockN); }
int64_t CompileFlags::numWarps() const { return options->integer(kNumWarps); }
int64_t CompileFlags::numStages() const { return options->integer(kNumStages); }
int64_t CompileFlags::splitKv() const { return options->integer(kSplitKv); }
int64_t CompileFlags::numSms() const { return options->integer(kNumSms); }
int64_t CompileFlags::vectorWidth() const {
  return options->integer(kVectorWidth);
}
int64_t CompileFlags::numThreads() const {
  return options->integer(kNumThreads);
}
bool CompileFlags::packGqa() const { return *options->packGqa; }
bool CompileFlags::tensorCores() const { return *options->tensorCores; }
bool CompileFlags::vectorize() const { return *options->vectorize; }
unsigned CompileFlags::indexBitwidth() const { return *options->indexBitwidth; }
unsigned CompileFlags::optLevel() const { return *options->optLevel; }
