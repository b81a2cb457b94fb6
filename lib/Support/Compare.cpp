//===- Compare.cpp - compare results with the reference -------------------===//

#include "kvattn/Support/Compare.h"

#include <algorithm>
#include <cmath>

namespace mlir {
namespace kvattn {

Tolerance toleranceFor(ElementType type, double magnitude) {
  const double m = std::max(1.0, magnitude);
  switch (type) {
  case ElementType::F32:
    return {2e-5 * m * m * m, 2e-5};
  case ElementType::F16:
    return {2e-3 * m, 4e-3};
  case ElementType::BF16:
    return {1.6e-2 * m, 1.6e-2};
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

} // namespace kvattn
} // namespace mlir
