//===- Float16.h - f16 and bf16 conversions ---------------------*- C++ -*-===//
//
// Bit-exact conversions between float and the 16-bit formats, rounding to
// nearest even on the way down. NaN stays NaN, overflow becomes infinity.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_FLOAT16_H
#define KVATTN_SUPPORT_FLOAT16_H

#include <cstdint>

namespace mlir {
namespace kvattn {

/// IEEE binary16 bits -> float (exact).
float halfBitsToFloat(uint16_t bits);
/// float -> IEEE binary16 bits, round to nearest even.
uint16_t floatToHalfBits(float value);
/// bfloat16 bits -> float (exact).
float bfloat16BitsToFloat(uint16_t bits);
/// float -> bfloat16 bits, round to nearest even.
uint16_t floatToBFloat16Bits(float value);

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
