"""kvattn.drift: the distribution of |actual - expected| that
kvattn-run --check --report writes (test/tools/kvattn-run-report.mlir checks
the two agree on real results)."""
import math

import numpy as np
import pytest

import kvattn


def test_percentiles_are_nearest_rank():
    expected = np.arange(200, dtype=np.float64)
    errors = np.random.default_rng(3).permutation(np.arange(1, 201) / 100)
    stats = kvattn.drift(expected + errors, expected)
    assert stats["elements"] == 200
    assert stats["max_abs"] == pytest.approx(2.00)
    assert stats["p99_abs"] == pytest.approx(1.98)  # the 198th of 200
    assert stats["p95_abs"] == pytest.approx(1.90)  # the 190th
    assert stats["mean_abs"] == pytest.approx(1.005)
    assert stats["non_finite_mismatches"] == 0


def test_one_outlier_moves_only_the_max():
    expected = np.ones((10, 100), np.float32)
    actual = expected.copy()
    actual[3, 7] = 5
    stats = kvattn.drift(actual, expected)
    assert (stats["max_abs"], stats["p99_abs"], stats["p95_abs"]) == (4, 0, 0)
    assert stats["mean_abs"] == pytest.approx(4 / 1000)


def test_non_finite():
    stats = kvattn.drift([np.nan, np.inf, 1.5, np.nan, 2.0],
                         [np.nan, np.inf, 1.0, 4.0, 2.0])
    assert stats["non_finite_mismatches"] == 1
    assert math.isinf(stats["max_abs"])
    assert stats["mean_abs"] == pytest.approx(0.125)


def test_shape_mismatch_is_named():
    with pytest.raises(kvattn.KVAttnValueError, match=r"shape \(2,\).*\(3,\)"):
        kvattn.drift(np.zeros(2), np.zeros(3))
