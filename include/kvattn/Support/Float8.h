//===- Float8.h - the FP8 formats of KV caches ------------------*- C++ -*-===//
//
// Bit-exact conversions between float and the two 8-bit formats of FP8 KV
// caches (docs/semantics.md, "FP8 KV caches"), shared by the scalar
// reference and the emulated GPU's PTX conversions (cvt.rn.satfinite.
// {e4m3x2,e5m2x2}.f32, cvt.rn.f16x2.{e4m3x2,e5m2x2}):
//
// - f8E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinity,
//   NaN is S.1111.111; largest finite 448, smallest subnormal 2^-9.
// - f8E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits (IEEE-like: the
//   top byte of binary16); infinities S.11111.00, NaN S.11111.xx (xx != 0);
//   largest finite 57344, smallest subnormal 2^-16.
//
// float -> FP8 rounds to nearest, ties to even, and saturates (PTX's
// .satfinite, which its FP8 conversions require): a finite value or an
// infinity beyond the largest finite value becomes the largest finite value
// of its sign; NaN becomes the canonical NaN 0x7F (sign dropped). FP8 ->
// float is exact. Integer arithmetic only: the result does not depend on
// the floating-point rounding mode (the emulated GPU changes it).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_FLOAT8_H
#define KVATTN_SUPPORT_FLOAT8_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace mlir {
namespace kvattn {

enum class Float8Format { E4M3FN, E5M2 };

namespace detail {
struct Float8Spec {
  int mantissaBits, bias;
  uint8_t maxFinite; ///< the largest finite code (sign clear)
  bool hasInfinity;
};
inline Float8Spec float8Spec(Float8Format f) {
  return f == Float8Format::E4M3FN ? Float8Spec{3, 7, 0x7e, false}
                                   : Float8Spec{2, 15, 0x7b, true};
}
} // namespace detail

/// The largest finite value of the format (448, 57344).
inline float float8Max(Float8Format f) {
  return f == Float8Format::E4M3FN ? 448.0f : 57344.0f;
}

/// The canonical NaN code that conversions produce.
constexpr uint8_t kFloat8NaN = 0x7f;

/// FP8 code -> float (exact; NaN for NaN codes, +-inf for E5M2's).
inline float float8ToFloat(uint8_t code, Float8Format f) {
  const detail::Float8Spec s = detail::float8Spec(f);
  const bool negative = code & 0x80;
  const int magnitude = code & 0x7f;
  const int expField = magnitude >> s.mantissaBits;
  const int frac = magnitude & ((1 << s.mantissaBits) - 1);
  const int maxExp = (1 << (7 - s.mantissaBits)) - 1;
  float v;
  if (!s.hasInfinity && magnitude == 0x7f) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (s.hasInfinity && expField == maxExp) {
    v = frac ? std::numeric_limits<float>::quiet_NaN()
             : std::numeric_limits<float>::infinity();
  } else if (expField == 0) {
    v = std::ldexp(static_cast<float>(frac), 1 - s.bias - s.mantissaBits);
  } else {
    v = std::ldexp(static_cast<float>((1 << s.mantissaBits) | frac),
                   expField - s.bias - s.mantissaBits);
  }
  return negative ? -v : v;
}

/// float -> FP8 code: round to nearest even, saturate to the largest finite
/// value (infinities too), NaN -> 0x7F.
inline uint8_t floatToFloat8(float value, Float8Format f) {
  const detail::Float8Spec s = detail::float8Spec(f);
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t e = (bits >> 23) & 0xff, frac = bits & 0x7fffff;
  if (e == 0xff)
    return frac ? kFloat8NaN : static_cast<uint8_t>(sign | s.maxFinite);
  if (e == 0 && frac == 0)
    return sign;
  // |value| = m * 2^(eEff - 150), m < 2^24.
  const int64_t m = e ? (frac | 0x800000u) : frac;
  const int eEff = e ? static_cast<int>(e) : 1;
  int log2m = 0;
  while ((int64_t(1) << (log2m + 1)) <= m)
    ++log2m;
  const int exponent = eEff - 150 + log2m; // floor(log2 |value|)
  const int minExponent = 1 - s.bias;
  const int target = exponent > minExponent ? exponent : minExponent;
  // r = |value| / 2^(target - mantissaBits), rounded to nearest even.
  const int shift = (target - s.mantissaBits) + 150 - eEff;
  int64_t r;
  if (shift <= 0) {
    r = m << -shift;
  } else if (shift > 40) {
    r = 0;
  } else {
    r = m >> shift;
    const int64_t rest = m & ((int64_t(1) << shift) - 1);
    const int64_t half = int64_t(1) << (shift - 1);
    if (rest > half || (rest == half && (r & 1)))
      ++r;
  }
  const int64_t code =
      (static_cast<int64_t>(target - minExponent) << s.mantissaBits) + r;
  if (code > s.maxFinite)
    return static_cast<uint8_t>(sign | s.maxFinite);
  return static_cast<uint8_t>(sign | code);
}

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_FLOAT8_H
