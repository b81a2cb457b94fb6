//===- CompareTest.cpp - tolerances and drift statistics ------------------===//

#include "kvattn/Support/Compare.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace mlir::kvattn;

namespace {

HostTensor tensorOf(const std::vector<double> &values) {
  HostTensor t(ElementType::F32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i)
    t.setDouble(static_cast<int64_t>(i), values[i]);
  return t;
}

TEST(ToleranceTest, OneMagnitudeIsThreeEqualOperandMagnitudes) {
  for (ElementType type :
       {ElementType::F32, ElementType::F16, ElementType::BF16}) {
    for (double m : {0.5, 1.0, 4.0}) {
      Tolerance one = toleranceFor(type, m);
      Tolerance three = toleranceFor(type, OperandMagnitudes{m, m, m});
      EXPECT_EQ(one.atol, three.atol);
      EXPECT_EQ(one.rtol, three.rtol);
    }
  }
  EXPECT_DOUBLE_EQ(toleranceFor(ElementType::F32, 4).atol, 2e-5 * 64);
  EXPECT_DOUBLE_EQ(toleranceFor(ElementType::BF16, 4).atol, 1.6e-2 * 4);
}

TEST(ToleranceTest, ScaledValuesWidenTheAbsolutePart) {
  // An FP8 cache read with v_scale 512: the outputs mix values 512 times
  // the inputs', and their 16-bit rounding with them; f32's error is the
  // scores' (query times keys) times the values.
  const OperandMagnitudes scaled{1, 1, 512};
  EXPECT_DOUBLE_EQ(toleranceFor(ElementType::BF16, scaled).atol, 1.6e-2 * 512);
  EXPECT_DOUBLE_EQ(toleranceFor(ElementType::F16, scaled).atol, 2e-3 * 512);
  EXPECT_DOUBLE_EQ(
      toleranceFor(ElementType::F32, OperandMagnitudes{2, 3, 512}).atol,
      2e-5 * 2 * 3 * 512);
  // The relative part does not move; factors below 1 count as 1; the
  // exact types stay exact.
  EXPECT_EQ(toleranceFor(ElementType::BF16, scaled).rtol, 1.6e-2);
  EXPECT_DOUBLE_EQ(
      toleranceFor(ElementType::F32, OperandMagnitudes{0.5, 0.25, 0.1}).atol,
      2e-5);
  EXPECT_EQ(toleranceFor(ElementType::I32, scaled).atol, 0);
}

TEST(DriftTest, PercentilesAreNearestRankOfTheAbsoluteErrors) {
  // 100 elements with errors 0.01, 0.02, ..., 1.00 (in shuffled order):
  // p95 is the 95th smallest, p99 the 99th, mean 0.505.
  std::vector<double> expected(100), actual(100);
  for (int i = 0; i < 100; ++i) {
    int k = (i * 37) % 100; // a permutation of 0..99
    expected[i] = i - 50.0;
    actual[i] = expected[i] + (k % 2 ? 1 : -1) * (k + 1) / 100.0;
  }
  Drift d = measureDrift(tensorOf(actual), tensorOf(expected));
  EXPECT_EQ(d.elements, 100);
  EXPECT_EQ(d.nonFiniteMismatches, 0);
  EXPECT_FALSE(d.shapeMismatch);
  EXPECT_NEAR(d.max, 1.00, 1e-5); // f32 storage of values up to 50
  EXPECT_NEAR(d.p99, 0.99, 1e-5);
  EXPECT_NEAR(d.p95, 0.95, 1e-5);
  EXPECT_NEAR(d.mean, 0.505, 1e-5);
}

TEST(DriftTest, OneOutlierMovesTheMaxNotTheMeanOrPercentiles) {
  std::vector<double> expected(1000, 1.0), actual(1000, 1.0);
  actual[17] = 3.0;
  Drift d = measureDrift(tensorOf(actual), tensorOf(expected));
  EXPECT_DOUBLE_EQ(d.max, 2.0);
  EXPECT_DOUBLE_EQ(d.p99, 0.0);
  EXPECT_DOUBLE_EQ(d.p95, 0.0);
  EXPECT_NEAR(d.mean, 0.002, 1e-12);
}

TEST(DriftTest, NonFiniteValues) {
  // Equal NaNs and equal infinities count as exact; a NaN against a
  // number is a non-finite mismatch and makes max infinite, while mean and
  // the percentiles stay those of the comparable elements.
  Drift d = measureDrift(tensorOf({NAN, INFINITY, 1.5, NAN, 2.0}),
                         tensorOf({NAN, INFINITY, 1.0, 4.0, 2.0}));
  EXPECT_EQ(d.elements, 5);
  EXPECT_EQ(d.nonFiniteMismatches, 1);
  EXPECT_TRUE(std::isinf(d.max));
  EXPECT_DOUBLE_EQ(d.mean, 0.5 / 4);
  EXPECT_DOUBLE_EQ(d.p99, 0.5);
}

TEST(DriftTest, ShapeMismatch) {
  Drift d = measureDrift(tensorOf({1, 2}), tensorOf({1, 2, 3}));
  EXPECT_TRUE(d.shapeMismatch);
  EXPECT_TRUE(std::isinf(d.max));
}

TEST(DriftTest, Empty) {
  Drift d = measureDrift(tensorOf({}), tensorOf({}));
  EXPECT_EQ(d.elements, 0);
  EXPECT_EQ(d.max, 0);
  EXPECT_EQ(d.p99, 0);
}

} // namespace
