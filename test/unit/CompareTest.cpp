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
