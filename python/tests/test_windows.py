"""Two-sided windows (window_right) against a NumPy float64 reference of
the formula (row at position qp sees the keys qp - window < kp <= qp +
window_right), on the CPU path and the emulated GPU (bf16 tensor cores and
f32), and through an attention description. The cases are chosen so that
ignoring either bound changes the answer (asserted)."""
import math

import numpy as np
import pytest

import kvattn
from conftest import distinct

IR = """
func.func @main(%q: tensor<{b}x{hq}x{l}x{d}x{t}>, %k: tensor<{b}x{hkv}x{s}x{d}x{t}>,
                %v: tensor<{b}x{hkv}x{s}x{d}x{t}>, %pos: tensor<{b}xi32>)
    -> (tensor<{b}x{hq}x{l}x{d}x{t}>, tensor<{b}x{hq}x{l}xf32>) {{
  %o, %lse = kvattn.attention %q, %k, %v q_offset(%pos : tensor<{b}xi32>)
      {attrs}
      : tensor<{b}x{hq}x{l}x{d}x{t}>, tensor<{b}x{hkv}x{s}x{d}x{t}>,
        tensor<{b}x{hkv}x{s}x{d}x{t}>
      -> tensor<{b}x{hq}x{l}x{d}x{t}>, tensor<{b}x{hq}x{l}xf32>
  return %o, %lse : tensor<{b}x{hq}x{l}x{d}x{t}>, tensor<{b}x{hq}x{l}xf32>
}}
"""


def reference(q, k, v, q_offset, window=None, window_right=None):
    """float64 (out, lse); rows with no visible key: (0, -inf)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    out = np.zeros((B, Hq, L, v.shape[3]))
    lse = np.full((B, Hq, L), -np.inf)
    kp = np.arange(S)
    for b in range(B):
        qp = q_offset[b] + np.arange(L)
        seen = np.ones((L, S), bool)
        if window is not None:
            seen &= qp[:, None] - kp[None, :] < window
        if window_right is not None:
            seen &= kp[None, :] - qp[:, None] <= window_right
        for h in range(Hq):
            g = h // (Hq // Hkv)
            s = np.where(seen, q[b, h] @ k[b, g].T / math.sqrt(D), -np.inf)
            for i in range(L):
                if not seen[i].any():
                    continue
                m = s[i].max()
                p = np.exp(s[i] - m)
                out[b, h, i] = p @ v[b, g] / p.sum()
                lse[b, h, i] = m + math.log(p.sum())
    return out, lse


CASES = [
    # (B, Hq, Hkv, L, S, D, q_offset, window, window_right)
    (2, 4, 2, 5, 48, 16, [11, 30], 1, 0),     # window (0, 0): itself only
    (2, 4, 2, 6, 200, 16, [70, 131], 40, 25),  # two-sided, several blocks
    (1, 2, 1, 9, 96, 32, [40], None, 3),       # a right bound alone
]


def ir(dtype, case):
    b, hq, hkv, l, s, d, _, window, right = case
    attrs = []
    if window is not None:
        attrs.append(f"window = {window}")
    attrs.append(f"window_right = {right}")
    return IR.format(b=b, hq=hq, hkv=hkv, l=l, s=s, d=d, t=dtype,
                     attrs=" ".join(attrs))


def inputs(case, seed):
    b, hq, hkv, l, s, d = case[:6]
    return (distinct((b, hq, l, d), seed), distinct((b, hkv, s, d), seed + 1),
            distinct((b, hkv, s, d), seed + 2))


@pytest.mark.parametrize("case", CASES)
def test_cpu_matches_the_formula(case):
    q, k, v = inputs(case, 10)
    pos = np.array(case[6], np.int32)
    out, lse = kvattn.compile(ir("f32", case)).run(q, k, v, pos)
    want_out, want_lse = reference(q, k, v, pos, case[7], case[8])
    np.testing.assert_allclose(out, want_out, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    # Either bound ignored gives another answer.
    for w, r in ((None, case[8]), (case[7], None)):
        if (w, r) != (case[7], case[8]):
            other, _ = reference(q, k, v, pos, w, r)
            assert np.abs(other - want_out).max() > 0.05


@pytest.mark.parametrize("case", CASES)
def test_emulated_gpu_matches_the_formula(emulated_runtime, case):
    q, k, v = inputs(case, 20)
    pos = np.array(case[6], np.int32)
    want_out, want_lse = reference(q, k, v, pos, case[7], case[8])
    prog = kvattn.compile(ir("f32", case), target="gpu",
                          runtime=emulated_runtime)
    out, lse = prog.run(query=q, key=k, value=v, q_offset=pos)
    np.testing.assert_allclose(out, want_out, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    prog.close()
    qb, kb, vb = (kvattn.to_bf16(x) for x in (q, k, v))
    prog = kvattn.compile(ir("bf16", case), target="gpu",
                          runtime=emulated_runtime)
    out, lse = prog.run(query=qb, key=kb, value=vb, q_offset=pos)
    want_out, _ = reference(*(kvattn.from_bf16(x) for x in (qb, kb, vb)),
                            pos, case[7], case[8])
    np.testing.assert_allclose(kvattn.from_bf16(out), want_out, atol=3e-2,
                               rtol=2e-2)
    prog.close()


def test_description_and_its_errors():
    text = kvattn.attention_ir(dtype="f32", num_query_heads=4, num_kv_heads=2,
                               head_dim=16, window=8, window_right=2)
    assert "window = 8 window_right = 2" in text
    assert "causal" not in text
    with pytest.raises(kvattn.KVAttnError, match="window_right = 2 with "
                       "causal: causal allows no key after the query"):
        kvattn.attention_ir(dtype="f32", num_query_heads=4, num_kv_heads=2,
                            head_dim=16, causal=True, window_right=2)
    with pytest.raises(kvattn.KVAttnError, match=r"window_right = -3 must be "
                       r"-1 \(none\) or a key count >= 0"):
        kvattn.attention_ir(dtype="f32", num_query_heads=4, num_kv_heads=2,
                            head_dim=16, window_right=-3)
    with pytest.raises(kvattn.KVAttnError, match="window = 8 needs causal or "
                       "window_right"):
        kvattn.attention_ir(dtype="f32", num_query_heads=4, num_kv_heads=2,
                            head_dim=16, window=8)
