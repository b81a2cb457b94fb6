//===- FmaProbe.cpp - the host's measured f32 FMA throughput --------------===//
//
// 24 independent accumulators (enough to cover the FMA latency of two
// pipes), each updated by acc = acc * x + y, with GCC/Clang vector types
// compiled for the ISA of each variant; the variant is chosen at run time
// from the CPU's features.
//
//===----------------------------------------------------------------------===//

#include "FmaProbe.h"

#include <chrono>
#include <thread>
#include <vector>

namespace mlir::kvattn::bench {
namespace {

constexpr int kChains = 24;

/// The chains are loop-carried and floating-point addition does not
/// reassociate, so every FMA executes; x and y come through volatiles so
/// that nothing folds.
template <typename V, int Lanes>
__attribute__((always_inline)) inline double runChains(long iterations) {
  static volatile float xs = 0.999f, ys = 1e-4f;
  V acc[kChains], x, y;
  for (int l = 0; l < Lanes; ++l) {
    x[l] = xs;
    y[l] = ys;
  }
  for (int c = 0; c < kChains; ++c)
    for (int l = 0; l < Lanes; ++l)
      acc[c][l] = 1e-3f * static_cast<float>(c);
  for (long n = 0; n < iterations; ++n) {
#pragma GCC unroll 24
    for (int c = 0; c < kChains; ++c)
      acc[c] = acc[c] * x + y; // Contracted to one FMA (GNU C++ default).
  }
  float sum = 0;
  for (int c = 0; c < kChains; ++c)
    sum += acc[c][0];
  return sum;
}

typedef float V16 __attribute__((vector_size(64)));
typedef float V8 __attribute__((vector_size(32)));
typedef float V4 __attribute__((vector_size(16)));

__attribute__((target("avx512f,fma"), noinline)) double avx512(long n) {
  return runChains<V16, 16>(n);
}
__attribute__((target("avx2,fma"), noinline)) double avx2(long n) {
  return runChains<V8, 8>(n);
}
__attribute__((noinline)) double baseline(long n) {
  return runChains<V4, 4>(n);
}

struct Variant {
  const char *isa;
  int lanes;
  double (*run)(long);
};

Variant hostVariant() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    return {"AVX-512", 16, avx512};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {"AVX2+FMA", 8, avx2};
  return {"baseline", 4, baseline};
}

/// GFLOP/s of `threads` threads running `iterations` each, at once.
double measure(const Variant &v, int threads, long iterations) {
  std::vector<std::thread> pool;
  volatile double sink = 0;
  auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] { sink = sink + v.run(iterations); });
  for (std::thread &t : pool)
    t.join();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  double flops =
      2.0 * kChains * v.lanes * static_cast<double>(iterations) * threads;
  return flops / seconds * 1e-9;
}

} // namespace

FmaPeak measureFmaPeak(int threads) {
  Variant v = hostVariant();
  // Size the run to about 0.2 s on one thread.
  long iterations = 1 << 20;
  double gflops = measure(v, 1, iterations);
  double perIteration = 2.0 * kChains * v.lanes / (gflops * 1e9);
  iterations = static_cast<long>(0.2 / perIteration) + 1;
  FmaPeak peak;
  peak.isa = v.isa;
  peak.lanes = v.lanes;
  peak.threads = threads;
  peak.perThread = measure(v, 1, iterations);
  peak.allThreads =
      threads > 1 ? measure(v, threads, iterations) : peak.perThread;
  return peak;
}

} // namespace mlir::kvattn::bench
