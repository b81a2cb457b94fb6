//===- Random.h - the seeded input generator --------------------*- C++ -*-===//
//
// The values kvattn-run generates for float arguments that are not given,
// shared with the differential fuzzer so that a failure it prints can be
// replayed with kvattn-run --seed.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_RANDOM_H
#define KVATTN_SUPPORT_RANDOM_H

#include <cstdint>

namespace mlir {
namespace kvattn {

/// splitmix64: a small, well-mixed, platform-independent generator.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Element `i` of generated argument `arg`: distinct values in [-1, 1).
inline double seededValue(uint64_t seed, uint64_t arg, int64_t i) {
  uint64_t bits =
      mix64(mix64(seed ^ (arg * 0x100000001b3ull)) + static_cast<uint64_t>(i));
  return static_cast<double>(bits >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_RANDOM_H
