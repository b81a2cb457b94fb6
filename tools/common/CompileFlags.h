//===- CompileFlags.h - the tools' shared compile options -------*- C++ -*-===//
//
// The compile options kvattn-run, kvattn-bench and kvattn-compile share
// with each other and with kvattn-opt's pipelines: each flag's name,
// description and range come from kvattn/Passes/CompileOptionSpecs.h, where
// they are declared once. A tool names the flags it takes and its defaults;
// they become llvm::cl options of its category, checked with one message per
// flag ("--block-m=-1 is negative",
// "--opt-level=9 is outside [0, 3]") and applied to the compilers' option
// structs in one place: on the GPU a flag overrides the compiler's own
// choice only when given (applyGiven), on the CPU every flag the tool takes
// applies, its default included (apply).
//
//   static tools::CompileFlags flags(category, kBlockM | kSplitKv, defaults);
//   ...
//   if (std::optional<std::string> bad = flags.outOfRange()) fail(*bad);
//   flags.applyGiven(ptxOptions);
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_TOOLS_COMMON_COMPILEFLAGS_H
#define KVATTN_TOOLS_COMMON_COMPILEFLAGS_H

#include "llvm/Support/CommandLine.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace mlir::kvattn {
struct PtxOptions;
struct CpuCompileOptions;
} // namespace mlir::kvattn

namespace mlir::kvattn::tools {

/// The shared flags, as a set a tool takes.
enum CompileFlag : unsigned {
  kBlockM = 1u << 0,        ///< --block-m
  kBlockN = 1u << 1,        ///< --block-n
  kNumWarps = 1u << 2,      ///< --num-warps (GPU)
  kNumStages = 1u << 3,     ///< --num-stages (GPU)
  kSplitKv = 1u << 4,       ///< --split-kv
  kNumSms = 1u << 5,        ///< --num-sms (GPU)
  kPackGqa = 1u << 6,       ///< --pack-gqa
  kTensorCores = 1u << 7,   ///< --tensor-cores (GPU)
  kIndexBitwidth = 1u << 8, ///< --index-bitwidth (GPU)
  kVectorize = 1u << 9,     ///< --vectorize (CPU)
  kVectorWidth = 1u << 10,  ///< --vector-width (CPU)
  kNumThreads = 1u << 11,   ///< --num-threads (CPU)
  kOptLevel = 1u << 12,     ///< --opt-level (CPU JIT)
  /// --producer-warpgroup, --lazy-rescale, --ping-pong,
  /// --intra-warpgroup-overlap, --two-value-stages and --heaviest-first (GPU
  /// schedule switches)
  kGpuSchedule = 1u << 13,
};

/// A tool's defaults (those of the compilers' option structs unless a tool
/// says otherwise).
struct CompileFlagDefaults {
  int64_t blockM = 0, blockN = 0, numWarps = 0, numStages = 2, splitKv = 0,
          numSms = 132, vectorWidth = 0, numThreads = 0;
  bool packGqa = true, tensorCores = true, vectorize = true;
  bool producerWarpgroup = true, lazyRescale = true, pingPong = true,
       intraWarpgroupOverlap = true, twoValueStages = false,
       heaviestFirst = true;
  unsigned indexBitwidth = 32, optLevel = 3;
};

class CompileFlags {
public:
  /// Registers the flags in `which` (CompileFlag bits) in `category`.
  CompileFlags(llvm::cl::OptionCategory &category, unsigned which,
               const CompileFlagDefaults &defaults = {});
  ~CompileFlags();

  /// The first flag outside its range, as "--NAME=VALUE is ..."; none when
  /// every flag is in range.
  std::optional<std::string> outOfRange() const;

  /// Whether the command line gave `flag` (the tool then overrides the
  /// compiler's own choice).
  bool given(CompileFlag flag) const;

  /// The GPU compile options of the flags the command line gave (block
  /// sizes, warps, stages, split, SMs, GQA packing, tensor cores, the GPU
  /// schedule switches, index width); the others keep `options`' values,
  /// the compiler's choices unless the tool set them.
  void applyGiven(PtxOptions &options) const;
  /// The CPU compile options of every flag the tool takes (block sizes,
  /// split, GQA packing, opt level, vectorisation, vector width, threads),
  /// from the command line or the tool's defaults.
  void apply(CpuCompileOptions &options) const;

  int64_t blockM() const;
  int64_t blockN() const;
  int64_t numWarps() const;
  int64_t numStages() const;
  int64_t splitKv() const;
  int64_t numSms() const;
  bool packGqa() const;
  bool tensorCores() const;
  /// kGpuSchedule: true (the default) where the tool does not take them.
  bool producerWarpgroup() const;
  bool lazyRescale() const;
  bool pingPong() const;
  bool intraWarpgroupOverlap() const;
  /// false (the default) where the tool does not take it.
  bool twoValueStages() const;
  bool heaviestFirst() const;
  unsigned indexBitwidth() const;
  bool vectorize() const;
  int64_t vectorWidth() const;
  int64_t numThreads() const;
  unsigned optLevel() const;

private:
  struct Options;
  std::unique_ptr<Options> options;
};

} // namespace mlir::kvattn::tools

#endif // KVATTN_TOOLS_COMMON_COMPILEFLAGS_H
