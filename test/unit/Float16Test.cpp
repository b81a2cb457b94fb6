//===- Float16Test.cpp - f16/bf16 conversions -----------------------------===//

#include "kvattn/Support/Float16.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>

using namespace mlir::kvattn;

TEST(Float16, ExactValues) {
  EXPECT_EQ(floatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalfBits(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalfBits(65504.0f), 0x7bff); // largest finite half
  EXPECT_EQ(floatToHalfBits(0.0f), 0x0000);
  EXPECT_EQ(floatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(halfBitsToFloat(0x3c00), 1.0f);
  EXPECT_EQ(halfBitsToFloat(0x7bff), 65504.0f);
}

TEST(Float16, RoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even 1.
  EXPECT_EQ(floatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9: up.
  EXPECT_EQ(floatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Just above the halfway point rounds up.
  EXPECT_EQ(
      floatToHalfBits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)),
      0x3c01);
}

TEST(Float16, OverflowSubnormalsAndNaN) {
  EXPECT_EQ(floatToHalfBits(65519.0f), 0x7bff); // rounds down to 65504
  EXPECT_EQ(floatToHalfBits(65520.0f), 0x7c00); // rounds to +inf
  EXPECT_EQ(floatToHalfBits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -24)), 0x0001); // min subnormal
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -26)), 0x0000); // underflow
  EXPECT_EQ(halfBitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -14)), 0x0400); // min normal
  EXPECT_TRUE(std::isnan(halfBitsToFloat(floatToHalfBits(std::nanf("")))));
}

TEST(BFloat16, RoundTripAndRounding) {
  EXPECT_EQ(floatToBFloat16Bits(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16BitsToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(floatToBFloat16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(floatToBFloat16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(roundToBFloat16(std::nanf(""))));
  EXPECT_EQ(roundToBFloat16(3.0f), 3.0f);
}
