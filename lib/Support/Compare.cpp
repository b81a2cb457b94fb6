//===- Compare.cpp - compare results with the reference -------------------===//

#include "kvattn/Support/Compare.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mlir {
namespace kvattn {

Tolerance toleranceFor(ElementType type, double magnitude) {
  return toleranceFor(type, {magnitude, magnitude, magnitude});
}

Tolerance toleranceFor(ElementType type, const OperandMagnitudes &magnitudes) {
  const double q = std::max(1.0, magnitudes.query);
  const double k = std::max(1.0, magnitudes.key);
  const double v = std::max(1.0, magnitudes.value);
  switch (type) {
  case ElementType::F32:
    return {2e-5 * q * k * v, 2e-5};
  case ElementType::F16:
    return {2e-3 * v, 4e-3};
  case ElementType::BF16:
    return {1.6e-2 * v, 1.6e-2};
  default:
    return {0, 0};
  }
}

Comparison compare(const HostTensor &actual, const HostTensor &expected,
                   Tolerance tolerance) {
  Comparison c;
  if (actual.shape() != expected.shape()) {
    c.mismatches = std::max<int64_t>(1, expected.numElements());
    c.firstMismatch = 0;
    c.maxAbsErr = c.maxRelErr = INFINITY;
    return c;
  }
  for (int64_t i = 0; i < expected.numElements(); ++i) {
    double a = actual.getDouble(i), e = expected.getDouble(i);
    bool ok;
    double abs = 0;
    if (std::isnan(e) || std::isnan(a)) {
      ok = std::isnan(e) && std::isnan(a);
      abs = ok ? 0 : INFINITY;
    } else if (std::isinf(e) || std::isinf(a)) {
      ok = a == e;
      abs = ok ? 0 : INFINITY;
    } else {
      abs = std::fabs(a - e);
      ok = abs <= tolerance.atol + tolerance.rtol * std::fabs(e);
      if (std::fabs(e) > tolerance.atol)
        c.maxRelErr = std::max(c.maxRelErr, abs / std::fabs(e));
    }
    c.maxAbsErr = std::max(c.maxAbsErr, abs);
    if (!ok) {
      if (c.firstMismatch < 0)
        c.firstMismatch = i;
      ++c.mismatches;
    }
  }
  return c;
}

Drift measureDrift(const HostTensor &actual, const HostTensor &expected) {
  Drift d;
  if (actual.shape() != expected.shape()) {
    d.shapeMismatch = true;
    d.max = INFINITY;
    return d;
  }
  std::vector<double> errors;
  errors.reserve(expected.numElements());
  for (int64_t i = 0; i < expected.numElements(); ++i) {
    double a = actual.getDouble(i), e = expected.getDouble(i);
    if (std::isfinite(a) && std::isfinite(e)) {
      errors.push_back(std::fabs(a - e));
    } else if ((std::isnan(a) && std::isnan(e)) || a == e) {
      errors.push_back(0);
    } else {
      ++d.nonFiniteMismatches;
    }
  }
  d.elements = expected.numElements();
  if (!errors.empty()) {
    double sum = 0;
    for (double e : errors)
      sum += e;
    d.mean = sum / static_cast<double>(errors.size());
    // Nearest rank: the ceil(p * n)-th smallest error.
    auto percentile = [&](double p) {
      size_t rank = static_cast<size_t>(
          std::ceil(p * static_cast<double>(errors.size())));
      size_t k = std::clamp<size_t>(rank, 1, errors.size()) - 1;
      std::nth_element(errors.begin(), errors.begin() + k, errors.end());
      return errors[k];
    };
    d.p95 = percentile(0.95);
    d.p99 = percentile(0.99);
    d.max = *std::max_element(errors.begin(), errors.end());
  }
  if (d.nonFiniteMismatches)
    d.max = INFINITY;
  return d;
}

} // namespace kvattn
} // namespace mlir
