//===- Float8Test.cpp - f8E4M3FN / f8E5M2 conversions ---------------------===//
//
// The FP8 codec of kvattn/Support/Float8.h (the reference's and the emulated
// GPU's PTX conversions) against known values of the formats and against an
// independent nearest-value search over every code (round to nearest, ties
// to the even code, saturation to the largest finite value).
//
//===----------------------------------------------------------------------===//

#include "kvattn/Support/Float8.h"

#include "gtest/gtest.h"

#include <cfenv>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace mlir::kvattn;

namespace {

/// The finite non-negative values of a format with their codes, by search
/// (no arithmetic shared with the codec): the decoded codes 0x00..0x7F.
std::vector<std::pair<double, uint8_t>> finiteValues(Float8Format f) {
  std::vector<std::pair<double, uint8_t>> v;
  for (int c = 0; c < 0x80; ++c) {
    float x = float8ToFloat(static_cast<uint8_t>(c), f);
    if (std::isfinite(x))
      v.push_back({x, static_cast<uint8_t>(c)});
  }
  return v;
}

/// Round to nearest (ties to the even code), saturating: by search.
uint8_t nearest(double x, Float8Format f,
                const std::vector<std::pair<double, uint8_t>> &values) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  double a = std::fabs(x);
  uint8_t best = 0;
  double bestDistance = std::numeric_limits<double>::infinity();
  for (auto [value, code] : values) {
    double d = std::fabs(value - a);
    if (d < bestDistance || (d == bestDistance && (code & 1) == 0)) {
      bestDistance = d;
      best = code;
    }
  }
  return sign | best;
}

} // namespace

TEST(Float8, KnownValues) {
  const auto e4 = Float8Format::E4M3FN, e5 = Float8Format::E5M2;
  EXPECT_EQ(floatToFloat8(1.0f, e4), 0x38);
  EXPECT_EQ(floatToFloat8(-2.0f, e4), 0xc0);
  EXPECT_EQ(floatToFloat8(448.0f, e4), 0x7e);
  EXPECT_EQ(float8ToFloat(0x7e, e4), 448.0f);
  EXPECT_EQ(float8ToFloat(0x01, e4), std::ldexp(1.0f, -9));
  EXPECT_EQ(floatToFloat8(1.0f, e5), 0x3c);
  EXPECT_EQ(floatToFloat8(57344.0f, e5), 0x7b);
  EXPECT_EQ(float8ToFloat(0x01, e5), std::ldexp(1.0f, -16));
  EXPECT_EQ(float8ToFloat(0x7c, e5), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(float8ToFloat(0x7f, e4)));
  EXPECT_TRUE(std::isnan(float8ToFloat(0xff, e4)));
  EXPECT_TRUE(std::isnan(float8ToFloat(0x7d, e5)));
  // Ties to even: 1 + 1/16 lies between 1 (0x38) and 1.125 (0x39).
  EXPECT_EQ(floatToFloat8(1.0625f, e4), 0x38);
  EXPECT_EQ(floatToFloat8(1.1875f, e4), 0x3a);
  // Half the smallest subnormal rounds to 0 (even), 0.75 of it up.
  EXPECT_EQ(floatToFloat8(std::ldexp(1.0f, -10), e4), 0x00);
  EXPECT_EQ(floatToFloat8(std::ldexp(1.5f, -10), e4), 0x01);
  EXPECT_EQ(floatToFloat8(-0.0f, e4), 0x80);
}

TEST(Float8, SaturatesAndCanonicalNaN) {
  for (Float8Format f : {Float8Format::E4M3FN, Float8Format::E5M2}) {
    const uint8_t max = f == Float8Format::E4M3FN ? 0x7e : 0x7b;
    EXPECT_EQ(floatToFloat8(float8Max(f) * 1.03f, f), max);
    EXPECT_EQ(floatToFloat8(1e30f, f), max);
    EXPECT_EQ(floatToFloat8(-1e30f, f), 0x80 | max);
    EXPECT_EQ(floatToFloat8(std::numeric_limits<float>::infinity(), f), max);
    EXPECT_EQ(floatToFloat8(-std::numeric_limits<float>::infinity(), f),
              0x80 | max);
    EXPECT_EQ(floatToFloat8(std::numeric_limits<float>::quiet_NaN(), f),
              kFloat8NaN);
    EXPECT_EQ(floatToFloat8(-std::numeric_limits<float>::quiet_NaN(), f),
              kFloat8NaN);
    EXPECT_EQ(floatToFloat8(1e-30f, f), 0x00);
    EXPECT_EQ(floatToFloat8(std::numeric_limits<float>::denorm_min(), f), 0);
  }
}

TEST(Float8, EveryCodeRoundTrips) {
  for (Float8Format f : {Float8Format::E4M3FN, Float8Format::E5M2})
    for (int c = 0; c < 256; ++c) {
      float x = float8ToFloat(static_cast<uint8_t>(c), f);
      if (!std::isfinite(x))
        continue;
      EXPECT_EQ(floatToFloat8(x, f), c) << "code " << c;
    }
}

TEST(Float8, RoundsToTheNearestCodeInEveryRoundingMode) {
  std::mt19937 rng(7);
  for (Float8Format f : {Float8Format::E4M3FN, Float8Format::E5M2}) {
    const auto values = finiteValues(f);
    std::vector<float> inputs;
    // Every midpoint and its neighbours, and random magnitudes.
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      float mid =
          static_cast<float>((values[i].first + values[i + 1].first) / 2);
      for (float x :
           {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)})
        inputs.insert(inputs.end(), {x, -x});
    }
    std::uniform_real_distribution<float> exponent(-20, 17);
    for (int n = 0; n < 20000; ++n)
      inputs.push_back(std::ldexp(1.0f + (rng() % 4096) / 4096.0f,
                                  static_cast<int>(exponent(rng))));
    for (int mode : {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO}) {
      std::fesetround(mode);
      for (float x : inputs)
        ASSERT_EQ(floatToFloat8(x, f), nearest(x, f, values))
            << x << " in mode " << mode;
    }
    std::fesetround(FE_TONEAREST);
  }
}
