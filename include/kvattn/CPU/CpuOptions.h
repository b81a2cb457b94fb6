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

namespace kvattn {

struct CpuCompileOptions {
  int64_t blockM = 64;
  int64_t blockN = 64;
  /// KV chunks per program, merged in chunk order (kvattn.merge).
  int64_t splitKv = 1;
  /// GQA packing of few query rows (-kvattn-tile pack-gqa).
  bool packGqa = true;
  /// Count loaded/masked/skipped KV blocks (see CpuProgram::stats).
  bool stats = false;
  bool fixUpperLeftAppends = false;
  /// LLVM optimisation level of the JIT (0 to 3).
  unsigned optLevel = 3;
};

} // namespace kvattn

#endif // KVATTN_CPU_CPUOPTIONS_H
