//===- CpuOptions.h - options of the CPU compilation ------------*- C++ -*-===//
//
// The one options struct of the CPU path: used by the kvattn-to-cpu
// pipeline (passes/Pipelines.cpp), CpuProgram::compile (CpuRunner.h),
// kvattn-run and kvattn-bench. Plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_CPU_CPUOPTIONS_H
#define KVATTN_CPU_CPUOPTIONS_H

#include <cstdint>
#include <functional>

namespace mlir {
class PassManager;
} // namespace mlir

namespace mlir {
namespace kvattn {

struct CpuCompileOptions {
  /// Query rows per program; 0: chosen per op (16 to 64, the fewest that
  /// hold the op's rows, GQA-packed).
  int64_t blockM = 0;
  int64_t blockN = 64;
  /// KV chunks per program, merged in chunk order (kvattn.merge); 0:
  /// automatic, enough chunks for about one program instance per thread
  /// when the grid alone is smaller (never with one thread).
  int64_t splitKv = 0;
  /// GQA packing of few query rows (-kvattn-tile pack-gqa).
  bool packGqa = true;
  /// Count loaded/masked/skipped KV blocks (see CpuProgram::stats).
  bool stats = false;
  bool fixUpperLeftAppends = false;
  /// Each kvattn.append whose cache is an argument of the entry function
  /// writes that argument in place (One-Shot Bufferize keeps it unless a
  /// later read of the old cache needs a copy), and CpuProgram::run returns
  /// a result that is an argument's memory as a view of it, not a copy: an
  /// append step costs its update, not its cache. Off, the compiled code
  /// never writes its arguments (it copies a cache before writing it).
  bool inPlaceAppends = false;
  /// LLVM optimisation level of the JIT (0 to 3).
  unsigned optLevel = 3;
  /// The vectorised lowering (-kvattn-lower-tile-to-vectors); false: the
  /// scalar loops of -kvattn-lower-tile-to-loops.
  bool vectorize = true;
  /// f32 lanes per vector at most (power of two up to 16); 0: the host's.
  int64_t vectorWidth = 0;
  /// Threads that run the programs of the grid (OpenMP); 0: all cores (or
  /// OMP_NUM_THREADS), 1: the calling thread only, without OpenMP. Results
  /// do not depend on it: each program runs whole on one thread.
  int64_t threads = 0;
  /// Called on the kvattn-to-cpu pass manager before it runs (instrumentation,
  /// IR printing, timing: e.g. mlirFlagsPassManagerHook() of
  /// kvattn/Registration/CommandLine.h); returning false fails the compile.
  std::function<bool(mlir::PassManager &)> configurePassManager;
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_CPU_CPUOPTIONS_H
