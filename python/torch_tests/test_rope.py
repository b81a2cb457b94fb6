"""kvattn.torch's rotary keywords (rotary_theta, rotary_dim,
rotary_interleaved): the query rotated inside the kernel at its positions,
on the CPU, against a float64 reference written with torch (HF's
rotate_half convention for the halves, GPT-J's pairs), with positions in the
thousands so that a position error changes the answer; torch.compile traces
through; misuse raises. Tolerances: f32 1e-4, bf16 3e-2 absolute."""

import math

import pytest
import torch

import kvattn.torch as kt
from kvattn.capi import KVAttnError


def rotate(x, positions, rotary_dim, theta=10000.0, interleaved=False):
    """x [B, H, L, D] rotated at positions [B, L]: the f32 angle, float64
    rotation."""
    x = x.double().clone()
    half = rotary_dim // 2
    k = torch.arange(half, dtype=torch.float64)
    inv_freq = (theta ** (-2.0 * k / rotary_dim)).float()
    angle = (positions.float()[..., None] * inv_freq).double()[:, None]
    c, s = angle.cos(), angle.sin()
    if interleaved:
        a, b = x[..., 0:rotary_dim:2].clone(), x[..., 1:rotary_dim:2].clone()
        x[..., 0:rotary_dim:2] = a * c - b * s
        x[..., 1:rotary_dim:2] = b * c + a * s
    else:
        a, b = x[..., :half].clone(), x[..., half:rotary_dim].clone()
        x[..., :half] = a * c - b * s
        x[..., half:rotary_dim] = b * c + a * s
    return x


def reference(q, k, v, q_offset, kv_len):
    q, k, v = (t.double() for t in (q, k, v))
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    out = torch.zeros(B, Hq, L, v.shape[3], dtype=torch.float64)
    for b in range(B):
        kk = k[b].repeat_interleave(Hq // Hkv, 0)
        vv = v[b].repeat_interleave(Hq // Hkv, 0)
        s = q[b] @ kk.transpose(-1, -2) / math.sqrt(D)
        qp = int(q_offset[b]) + torch.arange(L)[:, None]
        kp = torch.arange(S)[None, :]
        allowed = (kp < int(kv_len[b])) & (kp <= qp)
        p = torch.softmax(s.masked_fill(~allowed, -math.inf), -1)
        out[b] = p @ vv
    return out


def make(B=2, Hq=4, Hkv=2, L=3, S=2500, D=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, Hq, L, D, generator=g),
            torch.randn(B, Hkv, S, D, generator=g),
            torch.randn(B, Hkv, S, D, generator=g))


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4),
                                        (torch.bfloat16, 3e-2)])
def test_query_rotated_in_the_kernel(interleaved, dtype, tol):
    q, k, v = make(seed=3)
    q = q * 4  # peaked rows: a rotation error shows through the softmax
    kv = torch.tensor([2500, 2107])
    qo = kv - 3
    S = k.shape[2]
    # Keys rotated at their positions (what the cache holds).
    k = rotate(k, torch.arange(S).expand(2, S), 16,
               interleaved=interleaved).float()
    q, k, v = (t.to(dtype) for t in (q, k, v))
    out = kt.attention(q, k, v, q_offset=qo, kv_len=kv, rotary_theta=10000.0,
                       rotary_dim=16, rotary_interleaved=interleaved)
    qp = qo[:, None] + torch.arange(3)[None, :]
    rq = rotate(q, qp, 16, interleaved=interleaved)
    if dtype != torch.float32:
        rq = rq.to(dtype)  # rounded after the rotation, as a framework would
    want = reference(rq, k, v, qo, kv)
    assert (out.double() - want).abs().max() < tol
    # One position off changes the answer.
    off = reference(rotate(q, qp + 1, 16, interleaved=interleaved), k, v, qo,
                    kv)
    assert (off - want).abs().max() > 3 * tol


def test_compiles_and_rejects_misuse():
    q, k, v = make(S=64, seed=4)
    kv = torch.tensor([64, 50])

    def step(q, k, v):
        return kt.attention(q, k, v, kv_len=kv, rotary_theta=500000.0)

    out = torch.compile(step, fullgraph=True)(q, k, v)
    assert torch.equal(out, step(q, k, v))
    with pytest.raises(KVAttnError, match="rotary_dim = 31 must be even"):
        kt.attention(q, k, v, kv_len=kv, rotary_theta=1e4, rotary_dim=31)
    with pytest.raises(KVAttnError, match="at most the head dim D = 32"):
        kt.attention(q, k, v, kv_len=kv, rotary_theta=1e4, rotary_dim=64)
    with pytest.raises(KVAttnError, match="need rotary_theta"):
        kt.attention(q, k, v, kv_len=kv, rotary_dim=16)
