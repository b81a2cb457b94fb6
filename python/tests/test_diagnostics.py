"""The compiler's diagnostics in Python: the upper-left append lint of
-kvattn-resolve-cached-append is on every compiled program (`diagnostics`)
and issued as a kvattn.KVAttnWarning, on the CPU and the emulated GPU (also
when the kernel cache answers); fix_upper_left_appends=True compiles the
fix. The seeds' 2x5 example: 2 tokens (values 40, 50) appended to a cache
holding 10, 20, 30, zero logits: upper-left gives 10 and 15, lower-right 25
and 30."""

import warnings

import numpy as np
import pytest

import kvattn

STEP = """
func.func @step(%q: tensor<1x1x2x1xf32>, %kc: tensor<1x1x5x1xf32>,
    %vc: tensor<1x1x5x1xf32>, %kn: tensor<1x1x2x1xf32>,
    %vn: tensor<1x1x2x1xf32>, %pos: tensor<1xi32>) -> tensor<1x1x2x1xf32> {
  %k = kvattn.append %kn into %kc at %pos
      : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %v = kvattn.append %vn into %vc at %pos
      : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %o = kvattn.sdpa %q, %k, %v causal = CAUSAL
      : tensor<1x1x2x1xf32>, tensor<1x1x5x1xf32>, tensor<1x1x5x1xf32>
      -> tensor<1x1x2x1xf32>
  return %o : tensor<1x1x2x1xf32>
}
"""

# The same written with tensor.insert_slice (a GpuProgram runs one attention
# and no kvattn.append kernel).
GPU_STEP = """
func.func @step(%q: tensor<1x1x2x1xf32>, %kc: tensor<1x1x5x1xf32>,
    %vc: tensor<1x1x5x1xf32>, %kn: tensor<1x1x2x1xf32>,
    %vn: tensor<1x1x2x1xf32>) -> tensor<1x1x2x1xf32> {
  %k = tensor.insert_slice %kn into %kc[0, 0, 3, 0] [1, 1, 2, 1] [1, 1, 1, 1]
      : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>
  %v = tensor.insert_slice %vn into %vc[0, 0, 3, 0] [1, 1, 2, 1] [1, 1, 1, 1]
      : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>
  %o = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<1x1x2x1xf32>, tensor<1x1x5x1xf32>, tensor<1x1x5x1xf32>
      -> tensor<1x1x2x1xf32>
  return %o : tensor<1x1x2x1xf32>
}
"""


def sdpa_line(ir):
    """The line of the kvattn.sdpa in `ir` (1-based, as MLIR counts)."""
    return next(i + 1 for i, line in enumerate(ir.split("\n"))
                if "kvattn.sdpa" in line)


def inputs():
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    return (z(1, 1, 2, 1), z(1, 1, 5, 1),
            np.array([10, 20, 30, 0, 0], np.float32).reshape(1, 1, 5, 1),
            z(1, 1, 2, 1), np.array([40, 50], np.float32).reshape(1, 1, 2, 1),
            np.array([3], np.int32))


def test_cpu_lint_warns_and_is_kept():
    with pytest.warns(kvattn.KVAttnWarning, match=r"input:\d+:\d+: warning: "
                      "upper-left causal attention over a KV-cache write"):
        prog = kvattn.compile(STEP.replace("CAUSAL", "upper_left"),
                              threads=1)
    assert [d.severity for d in prog.diagnostics] == ["warning"]
    d = prog.diagnostics[0]
    assert d.location == f"input:{sdpa_line(STEP)}:8"
    assert "fix-upper-left-appends=true" in d.message
    # torch's is_causal meaning kept: the appended rows miss the cache.
    np.testing.assert_allclose(prog.run(*inputs()).ravel(), [10, 15],
                               rtol=1e-6)


def test_cpu_fix_upper_left_appends():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a remark is no warning
        prog = kvattn.compile(STEP.replace("CAUSAL", "upper_left"),
                              threads=1, fix_upper_left_appends=True)
    assert [d.severity for d in prog.diagnostics] == ["remark"]
    assert prog.diagnostics[0].message.startswith(
        "rewrote upper-left causal attention over a KV-cache write")
    np.testing.assert_allclose(prog.run(*inputs()).ravel(), [25, 30],
                               rtol=1e-6)


def test_cpu_lower_right_says_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prog = kvattn.compile(STEP.replace("CAUSAL", "lower_right"),
                              threads=1)
    assert prog.diagnostics == []
    np.testing.assert_allclose(prog.run(*inputs()).ravel(), [25, 30],
                               rtol=1e-6)


def test_fix_option_checked():
    with pytest.raises(kvattn.KVAttnValueError,
                       match="option fix_upper_left_appends must be a bool"):
        kvattn.compile(STEP.replace("CAUSAL", "upper_left"),
                       fix_upper_left_appends=2)


def test_gpu_lint_in_manifest_and_from_the_cache(emulated_runtime):
    q, kc, vc, kn, vn, _ = inputs()
    for attempt in range(2):  # the second compile is a kernel-cache hit
        with pytest.warns(kvattn.KVAttnWarning,
                          match="upper-left causal attention over a "
                          "KV-cache write \\(tensor.insert_slice"):
            prog = kvattn.compile(GPU_STEP, target="gpu",
                                  runtime=emulated_runtime)
        assert [d.severity for d in prog.diagnostics] == ["warning"]
        assert prog.manifest["diagnostics"][0]["location"] == \
            f"input:{sdpa_line(GPU_STEP)}:8"
    fixed = kvattn.compile(GPU_STEP, target="gpu", runtime=emulated_runtime,
                           fix_upper_left_appends=True)
    assert [d.severity for d in fixed.diagnostics] == ["remark"]
    assert fixed.manifest["diagnostics"][0]["severity"] == "remark"


def test_capi_is_a_module():
    import importlib
    capi = importlib.import_module("kvattn.capi")
    assert capi is kvattn.capi
    assert "fix_upper_left_appends" in kvattn.capi.CPU_OPTIONS
