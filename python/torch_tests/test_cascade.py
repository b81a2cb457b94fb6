"""kvattn.torch.cascade_attention (shared-prefix attention) on the CPU
against a float64 torch attention over prefix + suffix, and its misuse.
Tolerances as test_ops.py: f32 1e-5, bf16 2e-2."""

import math

import pytest
import torch

import kvattn.torch as kt
from kvattn.capi import KVAttnError, KVAttnTypeError, KVAttnValueError


def reference(q, pk, pv, k, v, cu, kv_len, causal=True):
    """float64 out [T, Hq, Dv]: each sequence's rows (the last L_b tokens
    of prefix + suffix) over prefix + its first kv_len[b] suffix keys."""
    q, pk, pv, k, v = (x.double() for x in (q, pk, pv, k, v))
    T, Hq, D = q.shape
    Hkv, P = pk.shape[1], pk.shape[2]
    out = torch.zeros(T, Hq, v.shape[3], dtype=torch.float64)
    for b in range(len(cu) - 1):
        lo, hi = int(cu[b]), int(cu[b + 1])
        n = P + int(kv_len[b])
        for h in range(Hq):
            g = h // (Hq // Hkv)
            keys = torch.cat([pk[0, g], k[b, g, :int(kv_len[b])]])
            vals = torch.cat([pv[0, g], v[b, g, :int(kv_len[b])]])
            for i in range(hi - lo):
                qp = n - (hi - lo) + i
                end = qp + 1 if causal else n
                s = keys[:end] @ q[lo + i, h] / math.sqrt(D)
                out[lo + i, h] = torch.softmax(s, 0) @ vals[:end]
    return out


def case(dtype, P=512):
    g = torch.Generator().manual_seed(7)
    lens, rows = [1, 30, 70, 150], [1, 2, 4, 1]
    B, Hq, Hkv, D, S = 4, 4, 2, 32, 160
    cu = torch.tensor([0, 1, 3, 7, 8])
    q = torch.randn(sum(rows), Hq, D, generator=g).to(dtype)
    pk = torch.randn(1, Hkv, P, D, generator=g).to(dtype)
    pv = torch.randn(1, Hkv, P, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, S, D, generator=g).to(dtype)
    v = torch.randn(B, Hkv, S, D, generator=g).to(dtype)
    for b, n in enumerate(lens):  # slots past kv_len: never read
        k[b, :, n:] = float("nan")
        v[b, :, n:] = float("inf")
    return q, pk, pv, k, v, cu, torch.tensor(lens)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5),
                                        (torch.bfloat16, 2e-2)])
def test_cascade_attention(dtype, tol):
    q, pk, pv, k, v, cu, lens = case(dtype)
    out = kt.cascade_attention(q, pk, pv, k, v, cu, lens)
    want = reference(q, pk, pv, k, v, cu, lens)
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    # Without the prefix the answer is far off.
    alone = reference(q, pk[:, :, :0], pv[:, :, :0], k, v, cu, lens)
    assert (alone - want).abs().max() > 0.1


def test_cascade_attention_noncausal_explicit_offsets():
    q, pk, pv, k, v, cu, lens = case(torch.float32, P=64)
    out = kt.cascade_attention(q, pk, pv, k, v, cu, lens, causal=False,
                               q_offset=lens - torch.diff(cu))
    want = reference(q, pk, pv, k, v, cu, lens, causal=False)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


def test_cascade_attention_misuse():
    q, pk, pv, k, v, cu, lens = case(torch.float32, P=16)
    with pytest.raises(KVAttnTypeError, match="prefix_key has dtype"):
        kt.cascade_attention(q, pk.double(), pv, k, v, cu, lens)
    with pytest.raises(KVAttnValueError, match=r"prefix_key/prefix_value "
                       r"must be \[1, Hkv, P, D\|Dv\]"):
        kt.cascade_attention(q, pk.expand(2, -1, -1, -1), pv, k, v, cu, lens)
    with pytest.raises(KVAttnError, match=r"q_offset\[1\] = -1 is negative"):
        kt.cascade_attention(q, pk, pv, k, v, cu, lens,
                             q_offset=torch.tensor([0, -1, 0, 0]))
