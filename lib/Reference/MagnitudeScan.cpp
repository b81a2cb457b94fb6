//===- MagnitudeScan.cpp - the largest finite magnitude of a buffer -------===//

#include "MagnitudeScan.h"

#include <algorithm>
#include <cstring>
#include <limits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVATTN_SCAN_AVX2 1
#include <immintrin.h>
#endif

namespace mlir {
namespace kvattn {
namespace reference {
namespace {

/// The portable scan: one integer maximum per element over signed lanes
/// (the magnitudes without the sign are below the type's largest value),
/// which the compiler vectorises for the baseline ISA.
template <typename Bits>
Bits portableBitsMax(const uint8_t *p, int64_t n, Bits inf) {
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

#ifdef KVATTN_SCAN_AVX2
// 32 bytes per vector, four independent maxima per iteration (the loop is
// bound by the loads, not by one maximum's latency).
#define KVATTN_AVX2 __attribute__((target("avx2")))

template <int Width> struct Lanes;
template <> struct Lanes<4> {
  KVATTN_AVX2 static __m256i splat(uint32_t x) {
    return _mm256_set1_epi32(static_cast<int32_t>(x));
  }
  KVATTN_AVX2 static __m256i less(__m256i a, __m256i b) {
    return _mm256_cmpgt_epi32(b, a);
  }
  KVATTN_AVX2 static __m256i max(__m256i a, __m256i b) {
    return _mm256_max_epi32(a, b);
  }
};
template <> struct Lanes<2> {
  KVATTN_AVX2 static __m256i splat(uint32_t x) {
    return _mm256_set1_epi16(static_cast<int16_t>(x));
  }
  KVATTN_AVX2 static __m256i less(__m256i a, __m256i b) {
    return _mm256_cmpgt_epi16(b, a);
  }
  KVATTN_AVX2 static __m256i max(__m256i a, __m256i b) {
    return _mm256_max_epi16(a, b);
  }
};
template <> struct Lanes<1> {
  KVATTN_AVX2 static __m256i splat(uint32_t x) {
    return _mm256_set1_epi8(static_cast<int8_t>(x));
  }
  KVATTN_AVX2 static __m256i less(__m256i a, __m256i b) {
    return _mm256_cmpgt_epi8(b, a);
  }
  KVATTN_AVX2 static __m256i max(__m256i a, __m256i b) {
    return _mm256_max_epi8(a, b);
  }
};

template <int Width, typename Bits>
KVATTN_AVX2 Bits avx2BitsMax(const uint8_t *p, int64_t n, Bits inf) {
  using L = Lanes<Width>;
  constexpr int64_t perVector = 32 / Width, perStep = 4 * perVector;
  const __m256i signMask =
      L::splat(static_cast<uint32_t>(std::numeric_limits<Bits>::max()));
  const __m256i limit = L::splat(static_cast<uint32_t>(inf));
  __m256i m[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(),
                  _mm256_setzero_si256(), _mm256_setzero_si256()};
  int64_t i = 0;
  for (; i + perStep <= n; i += perStep) {
    for (int k = 0; k < 4; ++k) {
      __m256i v = _mm256_loadu_si256(
          reinterpret_cast<const __m256i *>(p + (i + k * perVector) * Width));
      v = _mm256_and_si256(v, signMask);
      m[k] = L::max(m[k], _mm256_and_si256(v, L::less(v, limit)));
    }
  }
  __m256i all = L::max(L::max(m[0], m[1]), L::max(m[2], m[3]));
  alignas(32) Bits lanes[perVector];
  _mm256_store_si256(reinterpret_cast<__m256i *>(lanes), all);
  Bits result = portableBitsMax<Bits>(p + i * Width, n - i, inf);
  for (Bits lane : lanes)
    result = std::max(result, lane);
  return result;
}
#undef KVATTN_AVX2

bool hostHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

template <int Width, typename Bits>
uint32_t bitsMax(const uint8_t *p, int64_t n, uint32_t inf) {
  const auto limit = static_cast<Bits>(inf);
#ifdef KVATTN_SCAN_AVX2
  if (hostHasAvx2())
    return static_cast<uint32_t>(avx2BitsMax<Width, Bits>(p, n, limit));
#endif
  return static_cast<uint32_t>(portableBitsMax<Bits>(p, n, limit));
}

} // namespace

uint32_t finiteMagnitudeBitsMax(const uint8_t *p, int64_t n, int width,
                                uint32_t inf) {
  switch (width) {
  case 4:
    return bitsMax<4, int32_t>(p, n, inf);
  case 2:
    return bitsMax<2, int16_t>(p, n, inf);
  default:
    return bitsMax<1, int8_t>(p, n, inf);
  }
}

} // namespace reference
} // namespace kvattn
} // namespace mlir
