"""Drift statistics: the distribution of |actual - expected|, as
`kvattn-run --check --report` writes it (docs/kvattn-run.md)."""
import math

__all__ = ["drift"]


def drift(actual, expected):
    """Max, mean, p95 and p99 of |actual - expected| (nearest-rank
    percentiles), with kvattn-run --report's field names:
    {"elements", "max_abs", "mean_abs", "p95_abs", "p99_abs",
    "non_finite_mismatches"}. Equal NaNs or infinities count as 0; a NaN or
    infinity on one side only is a non-finite mismatch (max_abs becomes
    inf; mean and percentiles stay those of the comparable elements).
    Raises ValueError for shapes that differ."""
    import numpy as np

    from . import KVAttnValueError

    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        raise KVAttnValueError(f"drift: actual has shape {a.shape}, expected "
                               f"{e.shape}")
    a, e = a.ravel(), e.ravel()
    finite = np.isfinite(a) & np.isfinite(e)
    same = (np.isnan(a) & np.isnan(e)) | (~finite & (a == e))
    errors = np.sort(np.concatenate([np.abs(a[finite] - e[finite]),
                                     np.zeros(int(np.count_nonzero(same)))]))
    mismatches = int(a.size - errors.size)
    n = errors.size
    stats = {
        "elements": int(a.size),
        "max_abs": float(errors[-1]) if n else 0.0,
        "mean_abs": float(errors.mean()) if n else 0.0,
        "p95_abs": float(errors[max(1, math.ceil(0.95 * n)) - 1]) if n else 0.0,
        "p99_abs": float(errors[max(1, math.ceil(0.99 * n)) - 1]) if n else 0.0,
        "non_finite_mismatches": mismatches,
    }
    if mismatches:
        stats["max_abs"] = math.inf
    return stats
