"""kvattn.torch.tree_attention: speculative-decoding tree masks as
`tree_parents` or FlashInfer's packed `custom_mask`, on the CPU against a
float64 reference written with torch from the dense (qo_len x kv_len) mask,
and their misuse. Tolerances as test_ops.py: f32 1e-5, bf16 2e-2."""

import math

import numpy as np
import pytest
import torch

import kvattn.torch as kt
from kvattn import tree as ktree
from kvattn.capi import KVAttnError, KVAttnTypeError, KVAttnValueError


full_tree = ktree.complete_tree


def dense_masks(parents, cu, kv_len):
    """Per request the (qo_len x kv_len) bool mask of the tree."""
    masks = []
    for b in range(len(cu) - 1):
        lo, L, K = cu[b], cu[b + 1] - cu[b], kv_len[b]
        m = torch.zeros(L, K, dtype=torch.bool)
        m[:, :K - L] = True
        for i in range(L):
            x = i
            while x >= 0:
                m[i, K - L + x] = True
                x = parents[lo + x]
        masks.append(m)
    return masks


def reference(q, k, v, cu, kv_len, masks, depth):
    """float64 out [T, Hq, Dv]: row i of request b at position kv_len - L +
    depth(i); the mask says which keys it sees (FlashInfer's semantics)."""
    q, k, v = q.double(), k.double(), v.double()
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    out = torch.zeros(T, Hq, v.shape[3], dtype=torch.float64)
    for b in range(len(cu) - 1):
        lo, hi, K = cu[b], cu[b + 1], kv_len[b]
        for h in range(Hq):
            g = h // (Hq // Hkv)
            s = q[lo:hi, h] @ k[b, g, :K].T / math.sqrt(D)
            s = s.masked_fill(~masks[b], float("-inf"))
            out[lo:hi, h] = torch.softmax(s, dim=1) @ v[b, g, :K]
    return out


def case(dtype=torch.float32):
    parents = [-1] + full_tree(4, 3) + [-1]
    cu = [0, 1, 122, 123]
    kv_len = [300, 380, 77]
    g = torch.Generator().manual_seed(5)
    T, Hq, Hkv, S, D = 123, 4, 2, 400, 16
    q = torch.randn(T, Hq, D, generator=g).to(dtype)
    k = torch.randn(3, Hkv, S, D, generator=g).to(dtype)
    v = torch.randn(3, Hkv, S, D, generator=g).to(dtype)
    return parents, cu, kv_len, q, k, v


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5),
                                        (torch.bfloat16, 2e-2)])
def test_parents_and_packed_mask_agree_with_the_reference(dtype, tol):
    parents, cu, kv_len, q, k, v = case(dtype)
    masks = dense_masks(parents, cu, kv_len)
    want = reference(q, k, v, cu, kv_len, masks, None)
    out = kt.tree_attention(q, k, v, torch.tensor(cu), torch.tensor(kv_len),
                            tree_parents=torch.tensor(parents))
    assert out.shape == (123, 4, 16) and out.dtype == dtype
    assert (out.double() - want).abs().max() < tol
    # FlashInfer's packed form: per request the row-major mask packed
    # little-endian, requests at byte offsets.
    packed = torch.cat([torch.from_numpy(np.packbits(
        m.reshape(-1).numpy(), bitorder="little")) for m in masks])
    out2 = kt.tree_attention(q, k, v, cu, kv_len, custom_mask=packed)
    assert torch.equal(out, out2)
    # A wrong tree (every draft token a root) changes the answer.
    roots = dense_masks([-1] * 123, cu, kv_len)
    wrong = reference(q, k, v, cu, kv_len, roots, None)
    assert (wrong - want).abs().max() > 0.05


def test_misuse_is_named():
    parents, cu, kv_len, q, k, v = case()
    with pytest.raises(KVAttnValueError, match="exactly one of tree_parents "
                       "and custom_mask"):
        kt.tree_attention(q, k, v, cu, kv_len)
    with pytest.raises(KVAttnTypeError, match="custom_mask must be "
                       "FlashInfer's packed mask"):
        kt.tree_attention(q, k, v, cu, kv_len,
                          custom_mask=torch.ones(10, dtype=torch.bool))
    masks = dense_masks(parents, cu, kv_len)
    masks[1][5, 3] = False  # hides a cache key
    packed = torch.cat([torch.from_numpy(np.packbits(
        m.reshape(-1).numpy(), bitorder="little")) for m in masks])
    with pytest.raises(KVAttnValueError, match="custom_mask of request 1 "
                       "hides cache key 3 from draft row 5"):
        kt.tree_attention(q, k, v, cu, kv_len, custom_mask=packed)
    bad = list(parents)
    bad[7] = 9  # local row 6 of request 1 names a later row
    with pytest.raises(KVAttnError, match=r"tree_parents\[7\] = 9 is not a "
                       r"row before local row 6 of its sequence"):
        kt.tree_attention(q, k, v, cu, kv_len, tree_parents=bad)
    with pytest.raises(KVAttnValueError, match=r"query must have shape "
                       r"\[T, Hq, D\]"):
        kt.tree_attention(q[None], k, v, cu, kv_len, tree_parents=parents)
    # The draft tokens as packed indices check their sequence's length.
    assert ktree.tree_depths(parents, cu)[1 + 4] == 2


def test_torch_compile_fullgraph_and_opcheck():
    """kvattn::tree_attention is a torch.library op: torch.compile traces a
    step through it without a graph break (the fake kernel gives [T, Hq,
    Dv]), and opcheck accepts its schema, fake tensor and autograd
    registration."""
    parents, cu, kv_len, q, k, v = case()
    cu_t, kv_t = torch.tensor(cu), torch.tensor(kv_len)
    tp = torch.tensor(parents)
    want = kt.tree_attention(q, k, v, cu_t, kv_t, tree_parents=tp)

    def step(q, k, v, cu, kv, tp):
        return kt.tree_attention(q, k, v, cu, kv, tree_parents=tp) * 2.0

    torch._dynamo.reset()
    got = torch.compile(step, fullgraph=True)(q, k, v, cu_t, kv_t, tp)
    assert torch.allclose(got, 2 * want)
    args = (q, k, v, cu_t, kv_t, tp, None, None, True, 0, 0.0, None)
    torch.library.opcheck(torch.ops.kvattn.tree_attention, args,
                          test_utils=("test_schema", "test_faketensor",
                                      "test_autograd_registration"))
