"""kvattn.torch's rotary_cos / rotary_sin (FlashAttention's
flash_attn_with_kvcache tables, [P, rotary_dim / 2], row = position): the
query rotated inside the kernel by row q_offset[b] + i of the tables, on the
CPU, against a float64 reference written with torch; the tables hold Llama
3 scaled frequencies (no theta gives them: the plain theta rotation
differs, asserted); torch.compile traces through, opcheck passes; misuse
raises by name. Tolerances: f32 1e-4, bf16 3e-2 absolute."""

import math

import pytest
import torch

import kvattn.torch as kt
from kvattn.capi import KVAttnError
from test_rope import make, reference, rotate as theta_rotate


def llama3_tables(rows, rotary_dim, dtype=torch.float32, theta=500000.0,
                  factor=8.0, low=1.0, high=4.0, original=8192):
    """cos, sin [rows, rotary_dim / 2] of Llama 3's scaled frequencies."""
    inv = 1.0 / theta ** (torch.arange(0, rotary_dim, 2,
                                       dtype=torch.float64) / rotary_dim)
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > original / low, inv / factor, inv)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv / factor + smooth * inv
    medium = (wavelen >= original / high) & (wavelen <= original / low)
    inv = torch.where(medium, smoothed, scaled)
    angle = torch.arange(rows, dtype=torch.float64)[:, None] * inv[None, :]
    return angle.cos().to(dtype), angle.sin().to(dtype)


def rotate(x, positions, cos, sin, interleaved=False):
    """x [B, H, L, D] rotated by the tables' rows at positions [B, L]
    (float64)."""
    x = x.double().clone()
    rotary_dim = 2 * cos.shape[1]
    half = rotary_dim // 2
    c = cos.double()[positions][:, None]
    s = sin.double()[positions][:, None]
    if interleaved:
        a, b = x[..., 0:rotary_dim:2].clone(), x[..., 1:rotary_dim:2].clone()
        x[..., 0:rotary_dim:2] = a * c - b * s
        x[..., 1:rotary_dim:2] = b * c + a * s
    else:
        a, b = x[..., :half].clone(), x[..., half:rotary_dim].clone()
        x[..., :half] = a * c - b * s
        x[..., half:rotary_dim] = b * c + a * s
    return x


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4),
                                        (torch.bfloat16, 3e-2)])
def test_query_rotated_by_the_tables(interleaved, dtype, tol):
    q, k, v = make(seed=3)
    q = q * 4  # peaked rows: a rotation error shows through the softmax
    kv = torch.tensor([2500, 2107])
    qo = kv - 3
    S = k.shape[2]
    cos, sin = llama3_tables(2500, 16, dtype)
    k = rotate(k, torch.arange(S).expand(2, S), cos, sin, interleaved).float()
    q, k, v = (t.to(dtype) for t in (q, k, v))
    out = kt.attention(q, k, v, q_offset=qo, kv_len=kv, rotary_cos=cos,
                       rotary_sin=sin, rotary_interleaved=interleaved)
    qp = qo[:, None] + torch.arange(3)[None, :]
    rq = rotate(q, qp, cos, sin, interleaved)
    if dtype != torch.float32:
        rq = rq.to(dtype)  # rounded after the rotation, as a framework would
    want = reference(rq, k, v, qo, kv)
    assert (out.double() - want).abs().max() < tol
    # The plain theta = 500000 rotation (a path ignoring the tables).
    plain = reference(theta_rotate(q, qp, 16, 500000.0, interleaved), k, v,
                      qo, kv)
    assert (plain - want).abs().max() > 3 * tol


def test_compiles_opchecks_and_rejects_misuse():
    q, k, v = make(S=64, seed=4)
    kv = torch.tensor([64, 50])
    cos, sin = llama3_tables(64, 16)

    def step(q, k, v):
        return kt.attention(q, k, v, kv_len=kv, rotary_cos=cos,
                            rotary_sin=sin)

    out = torch.compile(step, fullgraph=True)(q, k, v)
    assert torch.equal(out, step(q, k, v))
    torch.library.opcheck(
        torch.ops.kvattn.attention.default,
        (q, k, v, None, kv, None, True, 0, 0.0, None, "bhsd"),
        {"rotary_cos": cos, "rotary_sin": sin},
        test_utils=("test_faketensor", "test_aot_dispatch_static"))
    # A position past the tables: named before anything runs.
    with pytest.raises(KVAttnError, match=r"rotary_cos: position 64 of batch "
                                          r"0, row 2 is outside the table's "
                                          r"64 rows"):
        kt.attention(q, k, v, q_offset=torch.tensor([62, 40]), kv_len=kv,
                     rotary_cos=cos, rotary_sin=sin)
    bad = [(dict(rotary_cos=cos), "rotary_sin is missing"),
           (dict(rotary_cos=cos, rotary_sin=sin, rotary_theta=1e4),
            "rotary_theta and rotary_cos / rotary_sin are exclusive"),
           (dict(rotary_cos=cos, rotary_sin=sin.double()),
            "rotary_sin has dtype torch.float64"),
           (dict(rotary_cos=cos, rotary_sin=sin[:32]),
            r"rotary_sin has shape \(32, 8\), rotary_cos \(64, 8\)"),
           (dict(rotary_cos=cos[None], rotary_sin=sin[None]),
            r"rotary_cos must be \[P, rotary_dim / 2\]"),
           (dict(rotary_cos=cos, rotary_sin=sin, rotary_dim=32),
            "rotary_dim = 32 but rotary_cos has 8 columns"),
           (dict(rotary_cos=torch.zeros(64, 32), rotary_sin=torch.zeros(64, 32)),
            "at most the head dim D = 32")]
    for kwargs, message in bad:
        with pytest.raises(KVAttnError, match=message):
            kt.attention(q, k, v, kv_len=kv, **kwargs)


@pytest.mark.parametrize("interleaved", [False, True])
def test_append_rotates_the_keys_by_the_tables(interleaved):
    """kt.append(..., rotary_cos=, rotary_sin=) rotates the written rows at
    pos[b] + t (flash_attn_with_kvcache's k rotation), then an attention
    with the same tables reads them: both against float64."""
    g = torch.Generator().manual_seed(7)
    B, Hq, H, L, S, D, R = 2, 4, 2, 3, 3000, 32, 24
    cos, sin = llama3_tables(2990, R)
    cache = torch.randn(B, H, S, D, generator=g)
    values = torch.randn(B, H, S, D, generator=g)
    new = torch.randn(B, H, L, D, generator=g)
    q = torch.randn(B, Hq, L, D, generator=g) * 4
    pos = torch.tensor([2987, 1500])
    before = cache.clone()
    kt.append(cache, new, pos, rotary_cos=cos, rotary_sin=sin,
              rotary_interleaved=interleaved)
    rows = pos[:, None] + torch.arange(L)[None, :]
    want_rows = rotate(new, rows, cos, sin, interleaved)
    for b in range(B):
        p = int(pos[b])
        got = cache[b, :, p:p + L].double()
        assert (got - want_rows[b]).abs().max() < 1e-5
        # Every other row untouched.
        assert torch.equal(cache[b, :, :p], before[b, :, :p])
        assert torch.equal(cache[b, :, p + L:], before[b, :, p + L:])
    kv = pos + L
    out = kt.attention(q, cache, values, q_offset=pos, kv_len=kv,
                       rotary_cos=cos, rotary_sin=sin,
                       rotary_interleaved=interleaved)
    want = reference(rotate(q, rows, cos, sin, interleaved), cache, values,
                     pos, kv)
    assert (out.double() - want).abs().max() < 1e-4
    # One more token than the tables hold; nothing is written.
    snapshot = cache.clone()
    with pytest.raises(KVAttnError, match=r"rotary_cos: position 2990 of "
                                          r"batch 0, row 3 is outside the "
                                          r"table's 2990 rows"):
        kt.append(cache, torch.randn(B, H, L + 1, D, generator=g), pos,
                  rotary_cos=cos, rotary_sin=sin)
    assert torch.equal(cache, snapshot)
    with pytest.raises(KVAttnError, match="rotary_interleaved needs "
                                          "rotary_cos and rotary_sin"):
        kt.append(cache, new, pos, rotary_interleaved=True)
