//===- Compare.h - compare results with the reference -----------*- C++ -*-===//
//
// The tolerances of every numerics check, stated in one place, per element
// type of the result: |actual - expected| <= atol + rtol * |expected|.
// `expected` is the reference (computed in double, rounded to the result
// type). NaN matches NaN and infinities match equal infinities.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_COMPARE_H
#define KVATTN_SUPPORT_COMPARE_H

#include "kvattn/Support/HostTensor.h"

#include <cstdint>
#include <string>

namespace mlir {
namespace kvattn {

struct Tolerance {
  double atol;
  double rtol;
};

/// f32: 2e-5 / 2e-5 (f32 accumulation over thousands of keys);
/// f16: 2e-3 / 4e-3 (two f16 roundings: 2^-11 each, plus accumulation);
/// bf16: 1.6e-2 / 1.6e-2 (two bf16 roundings: 2^-8 each);
/// f64, integers and i1: exact.
///
/// For inputs scaled to [-m, m) (`magnitude` m > 1: kvattn-run --magnitude,
/// the differential fuzzer) the absolute part grows with them. The values,
/// and with them the outputs, grow as m: the 16-bit types' rounding error
/// (relative to the values) grows as m. In f32 the scores' own rounding
/// dominates: a score of `D` products carries an error up to about
/// `eps * D * m^2 * |scale|`, which shifts every probability by that
/// fraction, and the output (a weighted mean of values up to m) by up to
/// twice that times m: f32's atol grows as m^3.
Tolerance toleranceFor(ElementType type, double magnitude = 1);

/// The magnitudes of an attention's operands that its results' rounding
/// grows with: the query's and the keys' (the scores' error), the values'
/// (the output is a weighted mean of them). Generated inputs in [-m, m)
/// give {m, m, m}; an FP8 cache's keys and values are its codes times
/// their scales, which can reach far past m (a `v_scale` of 3,000, or
/// codes over e4m3's range with scales of amax / 448).
struct OperandMagnitudes {
  double query = 1, key = 1, value = 1;
};

/// As above for each operand's magnitude: f32's atol grows as
/// query * key * value (the scores' error times the values), f16's and
/// bf16's as value; each factor at least 1. {m, m, m} is the magnitude m.
Tolerance toleranceFor(ElementType type, const OperandMagnitudes &magnitudes);

struct Comparison {
  double maxAbsErr = 0;
  double maxRelErr = 0;
  int64_t mismatches = 0;
  int64_t firstMismatch = -1; ///< flat index, or -1
  bool pass() const { return mismatches == 0; }
};

/// Compares two tensors of the same shape; a shape mismatch is reported as
/// every element mismatching. max_rel_err is over elements with
/// |expected| > atol (elsewhere the relative error is meaningless).
Comparison compare(const HostTensor &actual, const HostTensor &expected,
                   Tolerance tolerance);

/// The distribution of |actual - expected| over a result's elements: a
/// single maximum hides whether one element or all of them drifted.
/// Percentiles are nearest-rank (the smallest error e such that at least
/// p % of the elements are at or below e). Elements where both sides are
/// the same NaN or infinity count as 0; a NaN or infinity on one side only
/// is a non-finite mismatch, counted apart, and makes `max` infinite (it
/// does not enter mean or the percentiles, which stay those of the
/// comparable elements). A shape mismatch: `shapeMismatch`, nothing else.
struct Drift {
  int64_t elements = 0;            ///< the elements compared
  int64_t nonFiniteMismatches = 0; ///< NaN/Inf on one side only
  double max = 0, mean = 0, p95 = 0, p99 = 0;
  bool shapeMismatch = false;
};

Drift measureDrift(const HostTensor &actual, const HostTensor &expected);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_COMPARE_H
