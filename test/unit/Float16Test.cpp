//===- Float16Test.cpp - f16/bf16 conversions -----------------------------===//

#include "kvattn/Support/Float16.h"
#include "kvattn/Support/HostLibcalls.h"

#include "gtest/gtest.h"

#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

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

// The conversions round to nearest even on the bits, whatever the thread's
// rounding mode: the emulated GPU calls them while a directed-rounding PTX
// instruction has changed it. Every f32 whose f16 is subnormal (below
// 2^-14, a sweep with a stride prime to the mantissa) is compared with the
// exact rule computed in double under FE_TONEAREST, then converted again
// under each directed mode.
TEST(Float16, SubnormalsIndependentOfRoundingMode) {
  auto floatOf = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  const int saved = std::fegetround();
  int checked = 0;
  for (uint32_t u = 0; u < 0x38800000u; u += 4099) {
    const float x = floatOf(u);
    std::fesetround(FE_TONEAREST);
    const uint16_t expected =
        static_cast<uint16_t>(std::nearbyint(std::ldexp(double(x), 24)));
    for (int mode : {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO}) {
      std::fesetround(mode);
      const uint16_t got = floatToHalfBits(x);
      const uint16_t gotNeg = floatToHalfBits(floatOf(u | 0x80000000u));
      std::fesetround(saved);
      ASSERT_EQ(got, expected) << "x = " << x << " (0x" << std::hex << u
                               << "), rounding mode " << mode;
      ASSERT_EQ(gotNeg, expected | 0x8000u) << "x = -" << x;
    }
    ++checked;
  }
  std::fesetround(saved);
  EXPECT_GT(checked, 200000);
}

// The libcalls the JITs define for host code (HostLibcalls.h): the 16-bit
// value in the low bits of a float's register, rounded as above. A CPU
// without AVX512-BF16 calls __truncsfbf2 for every bf16 the CPU target
// writes (the JIT failed with "Symbols not found: [ __truncsfbf2 ]" before
// it defined it).
TEST(HostLibcalls, SixteenBitValuesInTheLowBits) {
  auto low = [](float packed) {
    uint32_t bits;
    std::memcpy(&bits, &packed, sizeof(bits));
    return bits;
  };
  using namespace host_libcalls;
  EXPECT_EQ(low(truncsfbf2(1.0f + 3 * std::ldexp(1.0f, -8))), 0x3f82u);
  EXPECT_EQ(low(truncsfbf2(-2.0f)), 0xc000u);
  EXPECT_EQ(low(truncsfhf2(1.0f)), 0x3c00u);
  EXPECT_TRUE(std::isnan(extendbfsf2(truncsfbf2(std::nanf("")))));
  EXPECT_EQ(extendhfsf2(truncsfhf2(0.5f)), 0.5f);
  EXPECT_EQ(extendbfsf2(truncsfbf2(3.0f)), 3.0f);
  std::vector<std::string> names;
  for (const HostLibcall &call : hostFloat16Libcalls()) {
    names.push_back(call.name);
    EXPECT_NE(call.address, nullptr);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"__truncsfbf2", "__truncsfhf2",
                                      "__extendhfsf2", "__extendbfsf2"}));
}
