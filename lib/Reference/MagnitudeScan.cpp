//===- MagnitudeScan.cpp - the largest finite magnitude of a buffer -------===//

#include "MagnitudeScan.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace mlir {
namespace kvattn {
namespace reference {
namespace {

/// The scan: one integer maximum per element over signed lanes (the
/// magnitudes without the sign are below the type's largest value), a loop
/// the compiler vectorises; inlined into each ISA's copy below.
template <typename Bits>
__attribute__((always_inline)) inline Bits scan(const uint8_t *p, int64_t n,
                                                Bits inf) {
  const Bits signMask = std::numeric_limits<Bits>::max();
  Bits m = 0;
  for (int64_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, p + i * sizeof(Bits), sizeof(Bits));
    bits &= signMask;
    Bits keep = bits < inf ? bits : 0;
    m = m > keep ? m : keep;
  }
  return m;
}

/// The baseline ISA's copy (SSE2 on x86-64: no packed 32-bit maximum, so a
/// compare and a blend per step, bound by their latency: ~11 GB/s here).
template <typename Bits>
Bits baselineScan(const uint8_t *p, int64_t n, Bits inf) {
  return scan<Bits>(p, n, inf);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/// The AVX2 copy (vpmaxs*: one instruction per 32 bytes, bound by the
/// memory), used where the host has it.
template <typename Bits>
__attribute__((target("avx2"))) Bits avx2Scan(const uint8_t *p, int64_t n,
                                              Bits inf) {
  return scan<Bits>(p, n, inf);
}

bool hostHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#define KVATTN_SCAN_AVX2 1
#endif

template <typename Bits>
uint32_t bitsMax(const uint8_t *p, int64_t n, uint32_t inf) {
  const auto limit = static_cast<Bits>(inf);
#ifdef KVATTN_SCAN_AVX2
  if (hostHasAvx2())
    return static_cast<uint32_t>(avx2Scan<Bits>(p, n, limit));
#endif
  return static_cast<uint32_t>(baselineScan<Bits>(p, n, limit));
}

} // namespace

uint32_t finiteMagnitudeBitsMax(const uint8_t *p, int64_t n, int width,
                                uint32_t inf) {
  switch (width) {
  case 4:
    return bitsMax<int32_t>(p, n, inf);
  case 2:
    return bitsMax<int16_t>(p, n, inf);
  default:
    return bitsMax<int8_t>(p, n, inf);
  }
}

} // namespace reference
} // namespace kvattn
} // namespace mlir
