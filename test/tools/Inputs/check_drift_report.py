"""Recomputes kvattn-run --report's drift statistics from the results and
the reference it dumped (--dump-outputs), independently of the C++ code:
    check_drift_report.py REPORT.json ACTUAL_DIR EXPECTED_DIR
Fails (exit 1, naming the field) unless every output's max, mean, p95 and
p99 of |actual - expected| match numpy's nearest-rank computation, and the
report's structure is what docs/kvattn-run.md says."""
import json
import math
import sys

import numpy as np

sys.path.insert(0, __import__("os").path.join(
    __import__("os").path.dirname(__file__), "..", "..", "..", "python"))
from kvattn import drift  # noqa: E402  (the Python side of the same report)

report = json.load(open(sys.argv[1]))
actual_dir, expected_dir = sys.argv[2], sys.argv[3]


def load(path):
    return np.load(path).astype(np.float64)  # bf16 results are dumped as f4


failed = False
for out in report["outputs"]:
    i = out["index"]
    a = load(f"{actual_dir}/out{i}.npy")
    e = load(f"{expected_dir}/out{i}.npy")
    err = np.sort(np.abs(a - e).ravel())
    n = err.size
    want = {
        "max_abs": err[-1],
        "mean_abs": err.mean(),
        "p95_abs": err[math.ceil(0.95 * n) - 1],
        "p99_abs": err[math.ceil(0.99 * n) - 1],
    }
    py = drift(a, e)
    for key, value in want.items():
        if not math.isclose(out[key], value, rel_tol=1e-9, abs_tol=1e-300):
            print(f"out{i} {key}: report {out[key]!r}, numpy {value!r}")
            failed = True
        if not math.isclose(py[key], value, rel_tol=1e-9, abs_tol=1e-300):
            print(f"out{i} {key}: kvattn.drift {py[key]!r}, numpy {value!r}")
            failed = True
    if out["elements"] != n or list(out["shape"]) != list(e.shape):
        print(f"out{i}: elements/shape {out['elements']} {out['shape']}")
        failed = True
    print(f"out{i} {out['name']} {out['dtype']}: max={want['max_abs']:.3g} "
          f"p99={want['p99_abs']:.3g} p95={want['p95_abs']:.3g} "
          f"nonzero={int(np.count_nonzero(err))}")
print("FAIL" if failed else "OK")
sys.exit(1 if failed else 0)
