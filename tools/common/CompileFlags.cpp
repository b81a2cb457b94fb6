//===- CompileFlags.cpp - the tools' shared compile options ---------------===//

#include "CompileFlags.h"

#include "kvattn/Passes/CompileOptionSpecs.h"
#include "kvattn/Passes/CpuOptions.h"
#include "kvattn/Passes/PtxOptions.h"

#include <cassert>

using namespace mlir::kvattn;
using namespace mlir::kvattn::tools;
namespace cl = llvm::cl;

namespace {

/// One integer flag: which, and its spec (name, description, range).
struct IntSpec {
  CompileFlag flag;
  const CompileOptionSpec &spec;
};

// In the order the ranges are checked.
const IntSpec kIntSpecs[] = {
    {kBlockM, compile_options::kBlockM},
    {kBlockN, compile_options::kBlockN},
    {kNumWarps, compile_options::kNumWarps},
    {kNumStages, compile_options::kNumStages},
    {kSplitKv, compile_options::kSplitKv},
    {kNumSms, compile_options::kNumSms},
    {kVectorWidth, compile_options::kVectorWidth},
    {kNumThreads, compile_options::kNumThreads},
};

} // namespace

struct CompileFlags::Options {
  unsigned which;
  std::unique_ptr<cl::opt<int64_t>> ints[std::size(kIntSpecs)];
  std::unique_ptr<cl::opt<bool>> packGqa, tensorCores, vectorize;
  std::unique_ptr<cl::opt<bool>> producerWarpgroup, lazyRescale, pingPong,
      intraWarpgroupOverlap, twoValueStages, heaviestFirst;
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
          llvm::StringRef(spec.spec.name), cl::desc(spec.spec.description),
          cl::init(intDefaults[i]), cl::cat(category));
  auto flag = [&](CompileFlag f, const CompileOptionSpec &spec,
                  bool init) -> std::unique_ptr<cl::opt<bool>> {
    if (!(which & f))
      return nullptr;
    return std::make_unique<cl::opt<bool>>(llvm::StringRef(spec.name),
                                           cl::desc(spec.description),
                                           cl::init(init), cl::cat(category));
  };
  options->packGqa =
      flag(kPackGqa, compile_options::kPackGqa, defaults.packGqa);
  options->tensorCores =
      flag(kTensorCores, compile_options::kTensorCores, defaults.tensorCores);
  options->vectorize =
      flag(kVectorize, compile_options::kVectorize, defaults.vectorize);
  options->producerWarpgroup =
      flag(kGpuSchedule, compile_options::kProducerWarpgroup,
           defaults.producerWarpgroup);
  options->lazyRescale =
      flag(kGpuSchedule, compile_options::kLazyRescale, defaults.lazyRescale);
  options->pingPong =
      flag(kGpuSchedule, compile_options::kPingPong, defaults.pingPong);
  options->intraWarpgroupOverlap =
      flag(kGpuSchedule, compile_options::kIntraWarpgroupOverlap,
           defaults.intraWarpgroupOverlap);
  options->twoValueStages = flag(kGpuSchedule, compile_options::kTwoValueStages,
                                 defaults.twoValueStages);
  options->heaviestFirst = flag(kGpuSchedule, compile_options::kHeaviestFirst,
                                defaults.heaviestFirst);
  auto unsignedFlag = [&](CompileFlag f, const CompileOptionSpec &spec,
                          unsigned init) -> std::unique_ptr<cl::opt<unsigned>> {
    if (!(which & f))
      return nullptr;
    return std::make_unique<cl::opt<unsigned>>(
        llvm::StringRef(spec.name), cl::desc(spec.description), cl::init(init),
        cl::cat(category));
  };
  options->indexBitwidth = unsignedFlag(
      kIndexBitwidth, compile_options::kIndexBitwidth, defaults.indexBitwidth);
  options->optLevel =
      unsignedFlag(kOptLevel, compile_options::kOptLevel, defaults.optLevel);
}

CompileFlags::~CompileFlags() = default;

std::optional<std::string> CompileFlags::outOfRange() const {
  auto check = [](const CompileOptionSpec &spec,
                  int64_t value) -> std::optional<std::string> {
    const std::string flag =
        "--" + std::string(spec.name) + "=" + std::to_string(value);
    if (value < 0 && spec.min == 0)
      return flag + " is negative";
    if (value < spec.min || value > spec.max)
      return flag + " is outside [" + std::to_string(spec.min) + ", " +
             std::to_string(spec.max) + "]";
    return std::nullopt;
  };
  if (options->optLevel)
    if (auto bad = check(compile_options::kOptLevel, *options->optLevel))
      return bad;
  for (auto [spec, option] : llvm::zip(kIntSpecs, options->ints))
    if (option)
      if (auto bad = check(spec.spec, *option))
        return bad;
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
  else if (flag == kGpuSchedule)
    return llvm::any_of(
        std::initializer_list<const cl::opt<bool> *>{
            options->producerWarpgroup.get(), options->lazyRescale.get(),
            options->pingPong.get(), options->intraWarpgroupOverlap.get(),
            options->twoValueStages.get(), options->heaviestFirst.get()},
        [](const cl::opt<bool> *o) { return o && o->getNumOccurrences(); });
  return option && option->getNumOccurrences();
}

void CompileFlags::applyGiven(PtxOptions &o) const {
  if (given(kBlockM))
    o.blockM = blockM();
  if (given(kBlockN))
    o.blockN = blockN();
  if (given(kNumWarps))
    o.numWarps = numWarps();
  if (given(kNumStages))
    o.numStages = numStages();
  if (given(kSplitKv))
    o.splitKv = splitKv();
  if (given(kNumSms))
    o.numSms = numSms();
  if (given(kPackGqa))
    o.packGqa = packGqa();
  if (given(kTensorCores))
    o.tensorCores = tensorCores();
  if (options->producerWarpgroup &&
      options->producerWarpgroup->getNumOccurrences())
    o.producerWarpgroup = producerWarpgroup();
  if (options->lazyRescale && options->lazyRescale->getNumOccurrences())
    o.lazyRescale = lazyRescale();
  if (options->pingPong && options->pingPong->getNumOccurrences())
    o.pingPong = pingPong();
  if (options->intraWarpgroupOverlap &&
      options->intraWarpgroupOverlap->getNumOccurrences())
    o.intraWarpgroupOverlap = intraWarpgroupOverlap();
  if (options->twoValueStages && options->twoValueStages->getNumOccurrences())
    o.twoValueStages = twoValueStages();
  if (options->heaviestFirst && options->heaviestFirst->getNumOccurrences())
    o.heaviestFirst = heaviestFirst();
  if (given(kIndexBitwidth))
    o.indexBitwidth = indexBitwidth();
}

void CompileFlags::apply(CpuCompileOptions &o) const {
  const unsigned which = options->which;
  if (which & kBlockM)
    o.blockM = blockM();
  if (which & kBlockN)
    o.blockN = blockN();
  if (which & kSplitKv)
    o.splitKv = splitKv();
  if (which & kPackGqa)
    o.packGqa = packGqa();
  if (which & kOptLevel)
    o.optLevel = optLevel();
  if (which & kVectorize)
    o.vectorize = vectorize();
  if (which & kVectorWidth)
    o.vectorWidth = vectorWidth();
  if (which & kNumThreads)
    o.threads = numThreads();
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
bool CompileFlags::producerWarpgroup() const {
  return !options->producerWarpgroup || *options->producerWarpgroup;
}
bool CompileFlags::lazyRescale() const {
  return !options->lazyRescale || *options->lazyRescale;
}
bool CompileFlags::pingPong() const {
  return !options->pingPong || *options->pingPong;
}
bool CompileFlags::intraWarpgroupOverlap() const {
  return !options->intraWarpgroupOverlap || *options->intraWarpgroupOverlap;
}
bool CompileFlags::twoValueStages() const {
  return options->twoValueStages && *options->twoValueStages;
}
bool CompileFlags::heaviestFirst() const {
  return !options->heaviestFirst || *options->heaviestFirst;
}
unsigned CompileFlags::indexBitwidth() const { return *options->indexBitwidth; }
unsigned CompileFlags::optLevel() const { return *options->optLevel; }
