"""kvattn.torch's FP8 KV caches (docs/semantics.md, "FP8 KV caches"): key
and value as torch.float8_e4m3fn / float8_e5m2 with k_scale / v_scale
(vLLM's and FlashInfer's names) per tensor, per KV head and per token and
head, on the CPU against a float64 reference written with torch over the
dequantised cache (code * scale), through torch.compile and opcheck, and
their misuse by name. Every case is one where ignoring the scales changes
the answer. Tolerances: f32 query 2e-5 relative to the largest |out|
(exact codes times f32 scales, f32 accumulation); bf16 1.6e-2."""

import math

import pytest
import torch

import kvattn.torch as kt
from kvattn.capi import KVAttnError

FORMATS = [torch.float8_e4m3fn, torch.float8_e5m2]


def dequantize(codes, scale, gran):
    """float64 [B, Hkv, S, D] of an FP8 cache (bhsd) and its scale."""
    values = codes.double()
    s = scale.double()
    if gran == "tensor":
        return values * s.reshape(())
    if gran == "head":
        return values * s.reshape(1, -1, 1, 1)
    return values * s[..., None]


def reference(q, k, v, q_offset, kv_len):
    """float64 causal attention over [B, Hkv, S, D] K and V (the NaN codes
    of rows past kv_len are masked and never multiplied: zeroed here)."""
    k, v = k.nan_to_num(0.0), v.nan_to_num(0.0)
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    kk = k.repeat_interleave(Hq // Hkv, 1)
    vv = v.repeat_interleave(Hq // Hkv, 1)
    s = q.double() @ kk.transpose(-1, -2) / math.sqrt(D)
    qp = q_offset[:, None, None, None] + torch.arange(L)[None, None, :, None]
    j = torch.arange(S)[None, None, None, :]
    allowed = (j <= qp) & (j < kv_len[:, None, None, None])
    s = s.masked_fill(~allowed, -math.inf)
    return torch.softmax(s, -1).nan_to_num(0.0) @ vv


def case(fmt, gran, dtype=torch.float32, seed=0, B=2, Hq=8, Hkv=2, L=3,
         S=40, D=32):
    g = torch.Generator().manual_seed(seed)
    q = (torch.rand(B, Hq, L, D, generator=g) * 2 - 1).to(dtype)
    k = (torch.rand(B, Hkv, S, D, generator=g) * 8 - 4).to(fmt)
    v = (torch.rand(B, Hkv, S, D, generator=g) * 8 - 4).to(fmt)
    shape = {"tensor": (1,), "head": (Hkv,), "token": (B, Hkv, S)}[gran]
    ks = torch.rand(shape, generator=g) * 1.75 + 0.25
    vs = torch.rand(shape, generator=g) * 1.75 + 0.25
    kv_len = torch.tensor([S, S - 17])
    # Codes no key owns: NaN (e4m3's S.1111.111, e5m2's S.11111.11).
    k.view(torch.uint8)[1, :, S - 17:] = 0x7F
    v.view(torch.uint8)[1, :, S - 17:] = 0x7F
    return q, k, v, ks, vs, kv_len - L, kv_len


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("gran", ["tensor", "head", "token"])
def test_fp8_cache_matches_float64(fmt, gran):
    q, k, v, ks, vs, qo, kv = case(fmt, gran, seed=len(gran))
    out = kt.attention(q, k, v, q_offset=qo, kv_len=kv, k_scale=ks,
                       v_scale=vs)
    want = reference(q, dequantize(k, ks, gran), dequantize(v, vs, gran), qo,
                     kv)
    assert not torch.isnan(out).any()
    assert (out.double() - want).abs().max() < 2e-5 * want.abs().max()
    one = torch.ones(1)
    plain = reference(q, dequantize(k, one, "tensor"),
                      dequantize(v, one, "tensor"), qo, kv)
    assert (plain - want).abs().max() > 0.05


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("gran", ["tensor", "head", "token"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_cache_with_calibrated_scales(fmt, gran, dtype):
    """Caches quantised as engines quantise them: codes over the whole
    format (e4m3 to 448, e5m2 to 57,344) under scales of about amax / the
    format's largest value, so that the dequantised values are of order 1
    while the codes are not (the kernels convert codes, then scale)."""
    fmax = torch.finfo(fmt).max
    g = torch.Generator().manual_seed(11)
    B, Hq, Hkv, L, S, D = 2, 8, 2, 3, 40, 32
    q = (torch.rand(B, Hq, L, D, generator=g) * 2 - 1).to(dtype)
    shape = {"tensor": (1,), "head": (Hkv,), "token": (B, Hkv, S)}[gran]
    caches, scales = [], []
    for _ in range(2):
        x = torch.rand(B, Hkv, S, D, generator=g) * 8 - 4
        # amax 4 onto at most the format's largest code (from 4 / 2.75 of
        # it: distinct scales).
        scale = (torch.rand(shape, generator=g) * 1.75 + 1) * 4 / fmax
        codes = (x / dequantize(torch.ones_like(x), scale, gran)).to(fmt)
        caches.append(codes)
        scales.append(scale)
    (k, v), (ks, vs) = caches, scales
    assert k.float().abs().max() > fmax / 8  # the codes span the format
    kv = torch.tensor([S, S - 17])
    qo = kv - L
    out = kt.attention(q, k, v, q_offset=qo, kv_len=kv, k_scale=ks,
                       v_scale=vs)
    want = reference(q, dequantize(k, ks, gran), dequantize(v, vs, gran), qo,
                     kv)
    tol = 2e-5 if dtype == torch.float32 else 1.6e-2
    assert (out.double() - want).abs().max() < tol * (1 + want.abs().max())


def test_bf16_query_bshd_layout_and_out():
    """A bf16 query, the bshd layout (per-token scales [B, S, Hkv]) and
    attention_out."""
    fmt = torch.float8_e4m3fn
    q, k, v, ks, vs, qo, kv = case(fmt, "token", torch.bfloat16, seed=5)
    want = reference(q, dequantize(k, ks, "token"),
                     dequantize(v, vs, "token"), qo, kv)
    qb, kb, vb = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out = torch.empty(qb.shape, dtype=torch.bfloat16)
    kt.attention(qb, kb, vb, q_offset=qo, kv_len=kv, layout="bshd",
                 k_scale=ks.transpose(1, 2).contiguous(),
                 v_scale=vs.transpose(1, 2).contiguous(), out=out)
    got = out.transpose(1, 2).double()
    assert (got - want).abs().max() < 1.6e-2 * (1 + want.abs().max())


def test_compile_and_opcheck():
    q, k, v, ks, vs, qo, kv = case(torch.float8_e5m2, "head", seed=9)
    # opcheck compares inputs before and after: no NaN codes there.
    k.view(torch.uint8)[1, :, 23:] = 0
    v.view(torch.uint8)[1, :, 23:] = 0

    def f(q, k, v, ks, vs):
        return kt.attention(q * 2, k, v, q_offset=qo, kv_len=kv, k_scale=ks,
                            v_scale=vs).sum(-1)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.allclose(compiled(q, k, v, ks, vs), f(q, k, v, ks, vs),
                          atol=1e-6)
    # (opcheck's test_schema multiplies the inputs, which torch does not do
    # for float8 tensors: the fake-tensor and autograd-registration checks.)
    torch.library.opcheck(torch.ops.kvattn.attention.default,
                          (q, k, v, qo, kv, None, True, 0, 0.0, None, "bhsd",
                           None, None, None, None, 0.0, 0, False, ks, vs),
                          test_utils=("test_faketensor",
                                      "test_autograd_registration",
                                      "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("change, message", [
    (dict(k_scale=None), r"an FP8 KV cache \(torch.float8_e4m3fn\) needs "
     r"k_scale and v_scale"),
    (dict(k_scale=torch.ones(3)), r"k_scale has shape \(3,\): a KV scale is "
     r"per tensor \[1\], per KV head \[Hkv\] = \[2\] or per token and head "
     r"\[2, 2, 40\]"),
    (dict(v_scale=torch.ones(2, dtype=torch.float16)),
     r"v_scale has dtype torch.float16; it must be torch.float32"),
    (dict(k_scale=torch.tensor([1.0, 0.0])),
     r"k_scale\[1\] = 0 must be positive and finite \(a KV scale divides "
     r"the values it quantises\)"),
    (dict(v_scale=torch.tensor([float("nan"), 1.0])),
     r"v_scale\[0\] = nan must be positive and finite"),
    (dict(k_scale=torch.ones(2, device="meta")), r"k_scale is on meta, "
     r"query on cpu"),
])
def test_misuse_is_refused_by_name(change, message):
    q, k, v, ks, vs, qo, kv = case(torch.float8_e4m3fn, "head", seed=2)
    args = dict(k_scale=ks, v_scale=vs)
    args.update(change)
    with pytest.raises(KVAttnError, match=message):
        kt.attention(q, k, v, q_offset=qo, kv_len=kv, **args)


def test_scales_need_an_fp8_cache_and_one_format():
    q = torch.randn(1, 2, 1, 16)
    k = torch.randn(1, 2, 8, 16)
    with pytest.raises(KVAttnError, match=r"k_scale dequantises an FP8 "
                       r"cache, but key and value are torch.float32"):
        kt.attention(q, k, k, k_scale=torch.ones(1), v_scale=torch.ones(1))
    with pytest.raises(KVAttnError, match=r"key has dtype torch.float8_e4m3fn"
                       r", value torch.float8_e5m2: an FP8 cache stores key "
                       r"and value in one FP8 dtype"):
        kt.attention(q, k.to(torch.float8_e4m3fn), k.to(torch.float8_e5m2),
                     k_scale=torch.ones(1), v_scale=torch.ones(1))
    with pytest.raises(KVAttnError, match=r"key has dtype torch.float16, "
                       r"query torch.float32"):
        kt.attention(q, k.half(), k.half())


@pytest.mark.parametrize("fmt, gran", [(torch.float8_e4m3fn, "head"),
                                       (torch.float8_e5m2, "token")])
def test_plan_with_append_quantises_the_new_tokens(fmt, gran):
    """kt.Plan(kv_dtype=..., append=True) on the CPU: the step quantises
    update_k / update_v into the FP8 caches with k_scale / v_scale (the
    codes equal torch's own f32 -> float8 conversion of update / scale:
    round to nearest even, values in range) and attends over them as
    kt.attention does."""
    g = torch.Generator().manual_seed(17)
    B, Hq, Hkv, L, S, D = 2, 8, 2, 2, 24, 32
    q = torch.randn(B, Hq, L, D, generator=g)
    k = (torch.rand(B, Hkv, S, D, generator=g) * 8 - 4).to(fmt)
    v = (torch.rand(B, Hkv, S, D, generator=g) * 8 - 4).to(fmt)
    uk = torch.randn(B, Hkv, L, D, generator=g) * 3
    uv = torch.randn(B, Hkv, L, D, generator=g) * 3
    shape = (Hkv,) if gran == "head" else (B, Hkv, S)
    ks = torch.rand(shape, generator=g) + 0.25
    vs = torch.rand(shape, generator=g) + 0.25
    pos = torch.tensor([5, 19], dtype=torch.int32)
    kv_len = pos + L
    plan = kt.Plan(dtype=torch.float32, num_query_heads=Hq,
                   num_kv_heads=Hkv, head_dim=D, append=True, kv_dtype=fmt,
                   kv_scales=gran)
    want_k, want_v = k.clone(), v.clone()
    for b in range(B):
        rows = slice(int(pos[b]), int(pos[b]) + L)
        for want, u, s in ((want_k, uk, ks), (want_v, uv, vs)):
            sc = (s.reshape(Hkv, 1, 1) if gran == "head" else
                  s[b, :, rows, None])
            want[b, :, rows] = (u[b] / sc).to(fmt)
    out = plan.run(q, k, v, pos, kv_len, update_k=uk, update_v=uv,
                   k_scale=ks, v_scale=vs)
    assert torch.equal(k.view(torch.uint8), want_k.view(torch.uint8))
    assert torch.equal(v.view(torch.uint8), want_v.view(torch.uint8))
    ref = kt.attention(q, want_k, want_v, q_offset=pos, kv_len=kv_len,
                       k_scale=ks, v_scale=vs)
    assert (out - ref).abs().max() < 1e-6
    with pytest.raises(KVAttnError, match="k_scale is missing"):
        plan.run(q, k, v, pos, kv_len, update_k=uk, update_v=uv,
                 v_scale=vs)
    with pytest.raises(KVAttnError, match=r"key has dtype f32; the plan's "
                       r"cache is f8"):
        plan.run(q, k.float(), v, pos, kv_len, update_k=uk, update_v=uv,
                 k_scale=ks, v_scale=vs)
    plan.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_code_decodes_as_torch_decodes_it(fmt):
    """All 256 codes of a format as one V row (one key: its probability is
    exactly 1, so the output row is V's decoded row times v_scale = 1):
    equal to torch's own decode, code by code — subnormals, the largest
    codes, negative codes, e5m2's infinities; the NaN codes give NaN (the
    accumulator's 0 + p * -0 is +0: zeros compare equal whatever their
    sign). A decode that lost a subnormal, a sign or an exponent bias fails
    it."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    v = codes.view(fmt).reshape(1, 1, 1, 256)
    k = torch.zeros(1, 1, 1, 256).to(fmt)
    q = torch.zeros(1, 1, 1, 256)
    one = torch.ones(1)
    out = kt.attention(q, k, v, q_offset=torch.tensor([0], dtype=torch.int32),
                       causal=True, k_scale=one, v_scale=one)
    expected = v.float()
    nan = expected.isnan()
    assert int(nan.sum()) == (2 if fmt == torch.float8_e4m3fn else 6)
    assert torch.equal(out.isnan(), nan)
    assert torch.equal(out[~nan], expected[~nan])
