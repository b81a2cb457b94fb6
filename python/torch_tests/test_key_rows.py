"""kvattn.torch's `k_start` / `cu_seqlens_k` (ragged keys without pages) and
`cache_batch_idx` (a batch-to-cache map) keywords on the CPU against a
float64 reference written with torch that slices each batch's keys itself,
through torch.compile and opcheck, and their misuse. Rows no batch owns
hold NaN. Tolerance: f32 1e-5 absolute (as test_ops.py)."""

import math

import pytest
import torch

import kvattn.torch as kt
from kvattn.capi import KVAttnError


def reference(q, keys, values, q_offset):
    """float64, one batch at a time: keys[b] [Hkv, n_b, D], causal with
    the queries at q_offset[b] + i."""
    B, Hq, L, D = q.shape
    out = torch.zeros(B, Hq, L, values[0].shape[-1], dtype=torch.float64)
    for b in range(B):
        k, v = keys[b].double(), values[b].double()
        Hkv, n = k.shape[0], k.shape[1]
        kk = k.repeat_interleave(Hq // Hkv, 0)
        vv = v.repeat_interleave(Hq // Hkv, 0)
        s = q[b].double() @ kk.transpose(-1, -2) / math.sqrt(D)
        qp = int(q_offset[b]) + torch.arange(L)[:, None]
        s = s.masked_fill(torch.arange(n)[None, :] > qp, -math.inf)
        out[b] = torch.softmax(s, -1).nan_to_num(0.0) @ vv
    return out


def packed(lens, gap=2, Hkv=2, D=16, seed=0):
    """K/V [1, Hkv, N, D]: `gap` NaN rows before the first sequence and after
    the last (no sequence owns them); k_start [B + 1]."""
    g = torch.Generator().manual_seed(seed)
    starts = [gap]
    for n in lens:
        starts.append(starts[-1] + n)
    total = starts[-1] + gap
    k = torch.randn(1, Hkv, total, D, generator=g)
    v = torch.randn(1, Hkv, total, D, generator=g)
    for t in (k, v):
        t[:, :, :gap] = math.nan
        t[:, :, starts[-1]:] = math.nan
    return k, v, torch.tensor(starts, dtype=torch.int32)


@pytest.mark.parametrize("keyword", ["k_start", "cu_seqlens_k"])
def test_ragged_keys(keyword):
    lens, L = [20, 5, 33], 3
    k, v, ks = packed(lens, seed=1)
    q = torch.randn(3, 8, L, 16, generator=torch.Generator().manual_seed(2))
    # q_offset defaults to kv_len - L, kv_len to each sequence's rows.
    out = kt.attention(q, k, v, **{keyword: ks})
    keys = [k[0, :, ks[b]:ks[b] + n] for b, n in enumerate(lens)]
    values = [v[0, :, ks[b]:ks[b] + n] for b, n in enumerate(lens)]
    qo = [n - L for n in lens]
    want = reference(q, keys, values, qo)
    assert (out.double() - want).abs().max() < 1e-5
    # bshd layout: the same.
    out2 = kt.attention(q.transpose(1, 2), k.transpose(1, 2),
                        v.transpose(1, 2), layout="bshd", **{keyword: ks})
    assert (out2.transpose(1, 2).double() - want).abs().max() < 1e-5
    # Ignoring k_start (every batch from row 0) gives another answer.
    wrong = reference(q, [k[0, :, :n] for n in lens],
                      [v[0, :, :n] for n in lens], qo)
    assert not torch.allclose(wrong, want, equal_nan=True)


def test_ragged_keys_with_kv_len():
    lens = [20, 5, 33]
    k, v, ks = packed(lens, seed=3)
    q = torch.randn(3, 8, 2, 16, generator=torch.Generator().manual_seed(4))
    kv = torch.tensor([12, 5, 30])
    out = kt.attention(q, k, v, k_start=ks, kv_len=kv)
    keys = [k[0, :, ks[b]:ks[b] + int(n)] for b, n in enumerate(kv)]
    values = [v[0, :, ks[b]:ks[b] + int(n)] for b, n in enumerate(kv)]
    want = reference(q, keys, values, kv - 2)
    assert (out.double() - want).abs().max() < 1e-5


def test_cache_batch_idx():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(3, 8, 2, 16, generator=g)
    k = torch.randn(5, 2, 24, 16, generator=g)
    v = torch.randn(5, 2, 24, 16, generator=g)
    idx = torch.tensor([3, 0, 3])
    for row in (1, 2, 4):  # rows no batch reads
        k[row] = math.nan
        v[row] = math.nan
    kv = torch.tensor([24, 17, 9])
    out = kt.attention(q, k, v, kv_len=kv, cache_batch_idx=idx)
    want = reference(q, [k[int(c), :, :int(n)] for c, n in zip(idx, kv)],
                     [v[int(c), :, :int(n)] for c, n in zip(idx, kv)], kv - 2)
    assert (out.double() - want).abs().max() < 1e-5
    plain = reference(q[:1], [k[0, :, :24]], [v[0, :, :24]], kv[:1] - 2)
    assert (plain - want[:1]).abs().max() > 0.05


def test_compile_and_opcheck():
    lens = [20, 5, 33]
    k, v, ks = packed(lens, seed=6)
    q = torch.randn(3, 8, 1, 16, generator=torch.Generator().manual_seed(7))

    def f(q, k, v, ks):
        return kt.attention(q * 2, k, v, cu_seqlens_k=ks).sum(-1)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.allclose(compiled(q, k, v, ks), f(q, k, v, ks), atol=1e-6)
    kc = torch.nan_to_num(k)
    vc = torch.nan_to_num(v)
    torch.library.opcheck(torch.ops.kvattn.attention.default,
                          (q, kc, vc, None, None, None, True, 0, 0.0, None,
                           "bhsd", None, None, ks.long(), None))


@pytest.mark.parametrize("kwargs, message", [
    (dict(k_start=torch.tensor([0, 9, 4, 60])),
     r"k_start\[2\] = 4 is below k_start\[1\] = 9: key starts must not "
     r"decrease \(batch 1\)"),
    (dict(k_start=torch.tensor([0, 9, 14, 70])),
     r"k_start\[3\] = 70 is past the packed key rows N = 62 \(batch 2\)"),
    (dict(k_start=torch.tensor([0, 9, 14])),
     r"k_start has 3 values for a batch of 4|k_start must have shape \[B\] = "
     r"\[4\]"),
    (dict(k_start=torch.tensor([0, 9, 14, 60]), cache_batch_idx=[0, 0, 0]),
     "k_start .cu_seqlens_k. and cache_batch_idx do not combine"),
    (dict(k_start=torch.tensor([0, 9, 14, 60]),
          cu_seqlens_k=torch.tensor([0, 9, 14, 60])),
     "give k_start or its alias cu_seqlens_k, not both"),
])
def test_misuse_ragged(kwargs, message):
    k, v, _ = packed([20, 5, 33], seed=8)
    q = torch.randn(3, 8, 1, 16)
    with pytest.raises(KVAttnError, match=message):
        kt.attention(q, torch.nan_to_num(k), torch.nan_to_num(v), **kwargs)


def test_misuse_cache_batch_idx():
    q = torch.randn(2, 4, 1, 16)
    k = torch.randn(3, 2, 8, 16)
    with pytest.raises(KVAttnError, match=r"cache_batch_idx\[1\] = 3 is "
                       r"outside \[0, C = 3\): the cache has 3 row\(s\) "
                       r"\(batch 1\)"):
        kt.attention(q, k, k, cache_batch_idx=torch.tensor([0, 3]))
    with pytest.raises(KVAttnError, match="with k_start .cu_seqlens_k. key "
                       "and value are one packed buffer"):
        kt.attention(q, k, k, k_start=torch.tensor([0, 3, 8]))
