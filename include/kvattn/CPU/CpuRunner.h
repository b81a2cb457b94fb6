//===- CpuRunner.h - compile kvattn IR for the host and run it --*- C++ -*-===//
//
// The CPU path: a function of kvattn IR goes through the kvattn-to-cpu
// pipeline (resolve, tile, bufferize, loops, LLVM) and the MLIR
// ExecutionEngine; it is then called on HostTensors. The schedule it runs
// is the tile program of -kvattn-tile, the one the GPU runs.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_CPU_CPURUNNER_H
#define KVATTN_CPU_CPURUNNER_H

#include "kvattn/Passes/CpuOptions.h"
#include "kvattn/Support/CompilerDiagnostic.h"
#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/Status.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir {
class ExecutionEngine;
class ModuleOp;
class Operation;
} // namespace mlir

namespace mlir {
namespace kvattn {

/// KV-block counts accumulated over runs (stats=true).
struct BlockStats {
  int64_t loaded = 0;
  int64_t masked = 0;
  int64_t skipped = 0;
  /// Bytes of K and V read by the loaded blocks.
  int64_t kvBytes = 0;
};

class CpuProgram {
public:
  /// Compiles function `entry` of `module` (which is cloned, not changed).
  static Status compile(mlir::ModuleOp module, const std::string &entry,
                        const CpuCompileOptions &options,
                        std::unique_ptr<CpuProgram> &program);
  ~CpuProgram();

  /// Runs the function on `arguments`, after the checks of the C API
  /// (kvattn_cpu_run): their number, each one's element type, rank and
  /// static dims, i1 bytes 0 or 1 (checkArguments), and the run-time values
  /// -- offsets, positions, lengths, block tables, cache writes, value
  /// ranges -- as the reference checks them (validateFunction). A failed
  /// check is an error naming the value; nothing runs. Results come back in
  /// the result element types.
  Status run(const std::vector<HostTensor> &arguments,
             std::vector<HostTensor> &results);

  /// run() without its checks, for a caller that has run validateFunction
  /// on these very arguments (kvattn-run, a timing loop). Arguments that
  /// fail those checks are undefined behaviour.
  Status runUnchecked(const std::vector<HostTensor> &arguments,
                      std::vector<HostTensor> &results);

  /// Block counts since compile() or resetStats(); zero unless compiled
  /// with stats=true.
  BlockStats stats() const;
  void resetStats();

  /// What the compiler said while compiling (warnings, remarks and their
  /// notes, in order: the upper-left append lint of
  /// -kvattn-resolve-cached-append, the remark of its fix). compile()
  /// handles every diagnostic itself, so none is lost when the caller's
  /// MLIRContext has no handler.
  const std::vector<CompilerDiagnostic> &diagnostics() const {
    return diagnostics_;
  }

  /// Wall time of compile(): pipeline, and LLVM to machine code.
  double pipelineMs() const { return pipelineMs_; }
  double jitMs() const { return jitMs_; }
  /// The arguments an in-place append writes (CpuCompileOptions::
  /// inPlaceAppends; empty otherwise), in increasing order.
  const std::vector<unsigned> &writtenArguments() const {
    return writtenArguments_;
  }

private:
  CpuProgram() = default;
  std::unique_ptr<mlir::ExecutionEngine> engine_;
  /// A clone of the module compile() was given (owned; in the caller's
  /// context, which must outlive the program): run() validates against its
  /// function.
  mlir::Operation *source_ = nullptr;
  std::string entry_;
  std::vector<std::pair<ElementType, int64_t>> resultTypes_; // type, rank
  int64_t *statsGlobal_ = nullptr;
  /// CpuCompileOptions::inPlaceAppends: a result in an argument's memory
  /// is returned as a view of it.
  bool inPlaceAppends_ = false;
  /// With inPlaceAppends: the arguments the appends write (run() refuses
  /// any other argument sharing their memory).
  std::vector<unsigned> writtenArguments_;
  std::vector<CompilerDiagnostic> diagnostics_;
  double pipelineMs_ = 0, jitMs_ = 0;
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_CPU_CPURUNNER_H
