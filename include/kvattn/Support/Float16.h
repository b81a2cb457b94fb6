//===- Float16.h - f16 and bf16 conversions ---------------------*- C++ -*-===//
//
// Bit-exact conversions between float and the 16-bit formats, rounding to
// nearest even on the way down (on the bits, whatever the thread's rounding
// mode). NaN stays NaN, overflow becomes infinity. Inline, so that the
// emulated GPU, built without the sanitizers of the rest (lib/GpuEmu),
// compiles the same definitions: the one implementation kvattn has.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_FLOAT16_H
#define KVATTN_SUPPORT_FLOAT16_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mlir {
namespace kvattn {

namespace detail {
inline uint32_t floatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

inline float bitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

} // namespace detail

/// IEEE binary16 bits -> float (exact).
inline float halfBitsToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) // Inf or NaN (payload kept).
    return detail::bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return detail::bitsToFloat(sign | ((exponent - 15 + 127) << 23) |
                             (mantissa << 13));
}

/// float -> IEEE binary16 bits, round to nearest even.
inline uint16_t floatToHalfBits(float value) {
  uint32_t x = detail::floatBits(value);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) { // Inf or NaN: keep NaN quiet.
    if (magnitude == 0x7f800000u)
      return sign | 0x7c00u;
    return sign | 0x7e00u | static_cast<uint16_t>((magnitude >> 13) & 0x3ffu);
  }
  if (magnitude >= 0x477ff000u) // >= 65520 rounds to infinity.
    return sign | 0x7c00u;
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal in units of
    // 2^-24, rounded to nearest even on the bits (whatever the thread's
    // floating-point rounding mode: the emulated GPU changes it for the
    // directed-rounding PTX instructions). A result of 1024 is the bit
    // pattern of the smallest normal, as wanted.
    if (magnitude < 0x33000000u) // below 2^-25: rounds to zero
      return sign;
    uint32_t exponent = magnitude >> 23;
    uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exponent; // 14..24 for this range
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u)))
      ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t exponent = (magnitude >> 23) - 127 + 15;
  uint32_t mantissa = magnitude & 0x7fffffu;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
    ++half; // A carry into the exponent is the correct result.
  return sign | static_cast<uint16_t>(half);
}

/// bfloat16 bits -> float (exact).
inline float bfloat16BitsToFloat(uint16_t bits) {
  return detail::bitsToFloat(static_cast<uint32_t>(bits) << 16);
}

/// float -> bfloat16 bits, round to nearest even.
inline uint16_t floatToBFloat16Bits(float value) {
  uint32_t x = detail::floatBits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) // NaN: truncate, keep it quiet.
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t roundingBias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + roundingBias) >> 16);
}

/// Rounds a float to the nearest representable f16 / bf16 value.
inline float roundToHalf(float v) {
  return halfBitsToFloat(floatToHalfBits(v));
}
inline float roundToBFloat16(float v) {
  return bfloat16BitsToFloat(floatToBFloat16Bits(v));
}

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_FLOAT16_H
