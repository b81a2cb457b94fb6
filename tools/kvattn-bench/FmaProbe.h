//===- FmaProbe.h - the host's measured f32 FMA throughput ------*- C++ -*-===//
//
// kvattn-bench --target=cpu states its GFLOP/s as a fraction of what the
// host's cores can do: a short loop of independent f32 FMAs at the host's
// widest vector (AVX-512, AVX2+FMA, or the compiler's baseline), timed on
// one thread and on `threads` threads at once.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_BENCH_FMAPROBE_H
#define KVATTN_BENCH_FMAPROBE_H

#include <string>

namespace mlir::kvattn::bench {

struct FmaPeak {
  /// "AVX-512", "AVX2+FMA" or "baseline".
  std::string isa;
  /// f32 lanes per vector of that ISA.
  int lanes = 0;
  /// GFLOP/s (an FMA counts 2) of one thread, and of `threads` threads
  /// running at once (their sum).
  double perThread = 0, allThreads = 0;
  int threads = 0;
};

/// Runs the probe for about 0.2 s per measurement.
FmaPeak measureFmaPeak(int threads);

} // namespace mlir::kvattn::bench

#endif // KVATTN_BENCH_FMAPROBE_H
