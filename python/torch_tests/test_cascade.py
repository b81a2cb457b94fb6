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


def paged_case(dtype, P=70, page_size=16, seed=11):
    """case()'s sequences with the prefix and the suffixes scattered over
    one pool of permuted pages (three spare ones); every slot no key owns
    holds NaN (K) and inf (V). Returns (q, k_cache, v_cache, prefix_pages,
    block_table, cu, lens) and the contiguous (pk, pv, k, v) they hold."""
    q, pk, pv, k, v, cu, lens = case(dtype, P=P)
    Hkv, D = pk.shape[1], pk.shape[3]
    pages = lambda n: -(-n // page_size)  # noqa: E731
    total = pages(P) + sum(pages(int(n)) for n in lens) + 3
    order = iter(torch.randperm(total, generator=torch.Generator()
                                .manual_seed(seed)).tolist())
    kc = torch.full((total, page_size, Hkv, D), float("nan"), dtype=dtype)
    vc = torch.full((total, page_size, Hkv, D), float("inf"), dtype=dtype)

    def place(keys, values, n):
        ids = [next(order) for _ in range(pages(n))]
        for j in range(n):
            kc[ids[j // page_size], j % page_size] = keys[:, j]
            vc[ids[j // page_size], j % page_size] = values[:, j]
        return ids

    prefix_pages = torch.tensor(place(pk[0], pv[0], P) + [-1])
    width = max(pages(int(n)) for n in lens) + 1
    table = torch.full((len(lens), width), -1, dtype=torch.int64)
    for b, n in enumerate(lens):
        ids = place(k[b], v[b], int(n))
        table[b, :len(ids)] = torch.tensor(ids)
    return (q, kc, vc, prefix_pages, table, cu, lens), (pk, pv, k, v)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5),
                                        (torch.bfloat16, 2e-2)])
def test_paged_cascade_attention(dtype, tol):
    """kt.paged_cascade_attention on the CPU: a 70-key prefix and suffixes
    of 1 ... 150 keys in one pool of permuted 16-token pages, NaN/inf
    wherever no key lives, against the float64 attention over prefix +
    suffix; a prefix page swapped with a suffix page is far off."""
    (q, kc, vc, pages, table, cu, lens), (pk, pv, k, v) = paged_case(dtype)
    out = kt.paged_cascade_attention(q, kc, vc, pages, 70, table, cu, lens)
    want = reference(q, pk, pv, k, v, cu, lens)
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    # prefix_len as a [1] tensor, int32 tables: the same answer.
    again = kt.paged_cascade_attention(q, kc, vc, pages.int(),
                                       torch.tensor([70]), table.int(), cu,
                                       lens)
    torch.testing.assert_close(again, out, rtol=0, atol=0)
    swapped, swapped_table = pages.clone(), table.clone()
    swapped[0], swapped_table[1, 0] = table[1, 0], pages[0]
    wrong = kt.paged_cascade_attention(q, kc, vc, swapped, 70, swapped_table,
                                       cu, lens)
    assert (wrong.double() - want).abs().max() > 0.05


def test_paged_cascade_attention_misuse():
    (q, kc, vc, pages, table, cu, lens), _ = paged_case(torch.float32)
    with pytest.raises(KVAttnError, match=r"prefix_pages\[1\] = 99: page id "
                       r"out of range"):
        bad = pages.clone()
        bad[1] = 99
        kt.paged_cascade_attention(q, kc, vc, bad, 70, table, cu, lens)
    with pytest.raises(KVAttnError, match=r"prefix_len\[0\] = 81 does not "
                       r"fit the 5 page\(s\) of prefix_pages"):
        kt.paged_cascade_attention(q, kc, vc, pages, 81, table, cu, lens)
    with pytest.raises(KVAttnValueError, match=r"block_table must have "
                       r"shape \[B, max_pages\], got \(44,\)"):
        kt.paged_cascade_attention(q, kc, vc, pages, 70, table.flatten(), cu,
                                   lens)
    with pytest.raises(KVAttnTypeError, match=r"prefix_pages has dtype "
                       r"torch.float32"):
        kt.paged_cascade_attention(q, kc, vc, pages.float(), 70, table, cu,
                                   lens)
    with pytest.raises(KVAttnValueError, match=r"k_cache/v_cache must be "
                       r"pages \[num_pages, page_size, Hkv, D\|Dv\]"):
        kt.paged_cascade_attention(q, kc, vc[:, :8], pages, 70, table, cu,
                                   lens)


def test_cascade_ops_are_torch_ops():
    """Both cascades are torch custom ops (torch.ops.kvattn.*) with fake
    kernels: their output shape is known without running them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    (q, kc, vc, pages, table, cu, lens), (pk, pv, k, v) = \
        paged_case(torch.float32)
    with FakeTensorMode(allow_non_fake_inputs=True):
        out = torch.ops.kvattn.paged_cascade_attention(
            q, kc, vc, pages, torch.tensor([70]), table, cu, lens, None,
            True, None, None)
        assert tuple(out.shape) == (q.shape[0], q.shape[1], vc.shape[3])
        out = torch.ops.kvattn.cascade_attention(q, pk, pv, k, v, cu, lens,
                                                 None, True, None, None)
        assert tuple(out.shape) == (q.shape[0], q.shape[1], v.shape[3])
