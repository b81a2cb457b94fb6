"""FP8 KV caches (docs/semantics.md, "FP8 KV caches") from Python: K and V
as np.uint8 codes (kvattn.to_fp8 quantises as the reference does: round to
nearest even, saturate, NaN -> 0x7F), f32 k_scale / v_scale per tensor, per
KV head and per token and head, compared with a NumPy float64 attention of
the dequantised cache (code * scale). Every case is one where ignoring the
scales changes the answer (asserted next to the comparison)."""
import math

import numpy as np
import pytest

import kvattn


def dequantize(codes, fmt, scale, hkv):
    """f64 [B, Hkv, S, D]: every code times its row's scale."""
    values = kvattn.from_fp8(codes, fmt).astype(np.float64)
    s = np.asarray(scale, np.float64)
    if s.size == 1:
        return values * s.reshape(())
    if s.ndim == 1:
        return values * s.reshape(1, hkv, 1, 1)
    return values * s[..., None]


def reference(q, k, v, q_offset, kv_len):
    """float64 causal (out, lse) with offsets, [B, Hkv, S, D] caches."""
    q = np.asarray(q, np.float64)
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    out = np.zeros((B, Hq, L, v.shape[3]))
    lse = np.full((B, Hq, L), -np.inf)
    for b in range(B):
        for h in range(Hq):
            g = h // (Hq // Hkv)
            s = q[b, h] @ k[b, g].T / math.sqrt(D)
            for i in range(L):
                seen = (np.arange(S) < kv_len[b]) & \
                    (np.arange(S) <= q_offset[b] + i)
                if not seen.any():
                    continue
                m = s[i][seen].max()
                p = np.exp(s[i][seen] - m)
                out[b, h, i] = p @ v[b, g][seen] / p.sum()
                lse[b, h, i] = m + math.log(p.sum())
    return out, lse


def ir(fmt, b, hq, hkv, l, s, d, scale_shape):
    q = f"tensor<{b}x{hq}x{l}x{d}xf32>"
    kv = f"tensor<{b}x{hkv}x{s}x{d}x{fmt}>"
    sc = "tensor<" + "x".join(str(n) for n in scale_shape) + "xf32>"
    lse = f"tensor<{b}x{hq}x{l}xf32>"
    return (f"func.func @main(%q: {q}, %k: {kv}, %v: {kv}, "
            f"%qo: tensor<{b}xi32>, %len: tensor<{b}xi32>, %ks: {sc}, "
            f"%vs: {sc}) -> ({q}, {lse}) {{\n"
            f"  %o, %lse = kvattn.attention %q, %k, %v q_offset(%qo : "
            f"tensor<{b}xi32>) kv_len(%len : tensor<{b}xi32>) k_scale(%ks : "
            f"{sc}) v_scale(%vs : {sc}) causal : {q}, {kv}, {kv} -> {q}, "
            f"{lse}\n  return %o, %lse : {q}, {lse}\n}}\n")


def test_codec_matches_the_reference_rules():
    # e4m3: 448 is the largest finite value, beyond saturates, NaN -> 0x7F,
    # 2^-9 the smallest subnormal; ties to even (0.5 * (1 + 1.125) = 1.0625
    # lies between codes 0x38 (1.0) and 0x39 (1.125): even 0x38).
    codes = kvattn.to_fp8([448.0, 1e6, -np.inf, np.nan, 2.0 ** -9, 1.0625,
                           -0.0], "f8E4M3FN")
    assert list(codes) == [0x7E, 0x7E, 0xFE, 0x7F, 0x01, 0x38, 0x80]
    # e5m2: 57344 the largest finite; infinities saturate too.
    codes = kvattn.to_fp8([57344.0, np.inf, 2.0 ** -16], "f8E5M2")
    assert list(codes) == [0x7B, 0x7B, 0x01]
    # Every finite code decodes and re-encodes to itself.
    for fmt in ("f8E4M3FN", "f8E5M2"):
        table = kvattn.from_fp8(np.arange(256, dtype=np.uint8), fmt)
        finite = np.isfinite(table)
        back = kvattn.to_fp8(table[finite], fmt)
        want = np.arange(256)[finite]
        # -0 and +0 both exist; everything else round-trips exactly.
        assert np.array_equal(back, want.astype(np.uint8))


@pytest.mark.parametrize("fmt", ["f8E4M3FN", "f8E5M2"])
@pytest.mark.parametrize("granularity", ["tensor", "head", "token"])
@pytest.mark.parametrize("vectorize", [True, False])
def test_cpu_matches_float64(fmt, granularity, vectorize):
    rng = np.random.default_rng(7)
    b, hq, hkv, l, s, d = 2, 4, 2, 3, 40, 16
    shape = {"tensor": (1,), "head": (hkv,), "token": (b, hkv, s)}[granularity]
    k_scale = rng.uniform(0.25, 2.0, shape).astype(np.float32)
    v_scale = rng.uniform(0.25, 2.0, shape).astype(np.float32)
    q = rng.uniform(-1, 1, (b, hq, l, d)).astype(np.float32)
    k = kvattn.to_fp8(rng.uniform(-4, 4, (b, hkv, s, d)), fmt)
    v = kvattn.to_fp8(rng.uniform(-4, 4, (b, hkv, s, d)), fmt)
    # NaN codes in the slots past kv_len: never read.
    kv_len = np.array([40, 23], np.int32)
    k[1, :, 23:] = 0x7F
    v[1, :, 23:] = 0x7F
    q_offset = kv_len - l
    prog = kvattn.compile(ir(fmt, b, hq, hkv, l, s, d, shape),
                          vectorize=vectorize)
    out, lse = prog.run(q, k, v, q_offset, kv_len, k_scale, v_scale)
    kd = dequantize(k, fmt, k_scale, hkv)
    vd = dequantize(v, fmt, v_scale, hkv)
    want_out, want_lse = reference(q, kd, vd, q_offset, kv_len)
    # f32 query: products of exact codes and f32 scales, f32 accumulation.
    assert np.max(np.abs(out - want_out)) < 2e-5 * np.max(np.abs(want_out))
    assert np.max(np.abs(lse - want_lse)) < 2e-5
    # Ignoring the scales would change the answer.
    plain_out, _ = reference(q, dequantize(k, fmt, [1.0], hkv),
                             dequantize(v, fmt, [1.0], hkv), q_offset, kv_len)
    assert np.max(np.abs(plain_out - want_out)) > 0.05


def test_bad_scale_is_refused_by_name():
    b, hq, hkv, l, s, d = 1, 2, 2, 1, 8, 16
    prog = kvattn.compile(ir("f8E4M3FN", b, hq, hkv, l, s, d, (hkv,)))
    q = np.zeros((b, hq, l, d), np.float32)
    k = np.zeros((b, hkv, s, d), np.uint8)
    with pytest.raises(kvattn.KVAttnError,
                       match=r"k_scale\[1\] = -1 must be positive and finite"):
        prog.run(q, k, k, np.array([7], np.int32), np.array([8], np.int32),
                 np.array([1.0, -1.0], np.float32),
                 np.array([1.0, 1.0], np.float32))


def test_description_builds_an_fp8_cache():
    text = kvattn.attention_ir(dtype="bf16", num_query_heads=32,
                               num_kv_heads=8, head_dim=128, causal=True,
                               kv_dtype="f8E5M2", kv_scales="token",
                               paged=True, page_size=16)
    assert "tensor<?x16x8x128xf8E5M2>" in text
    assert "k_scale(%arg6 : tensor<?x16x8xf32>) v_scale(%arg7 : tensor<?x16x8xf32>)" in text
    with pytest.raises(kvattn.KVAttnError, match="kv_dtype must be None"):
        kvattn.attention_ir(dtype="bf16", num_query_heads=2, num_kv_heads=2,
                            head_dim=16, kv_dtype="f8")
    with pytest.raises(kvattn.KVAttnError, match="with append"):
        kvattn.attention_ir(dtype="bf16", num_query_heads=2, num_kv_heads=2,
                            head_dim=16, kv_dtype="f8E4M3FN", append=True)


def test_plan_on_the_emulated_gpu(emulated_runtime):
    """A serving plan from a description (f16 query, e4m3 cache, per-head
    scales) on the emulated GPU: the mma.sync kernel against float64, then a
    bad scale on the device is recorded in the status word with the
    reference's message (rules 25-27)."""
    rt = emulated_runtime
    rng = np.random.default_rng(11)
    b, hq, hkv, l, s, d = 2, 8, 2, 1, 64, 32
    fmt = "f8E4M3FN"
    q = rng.uniform(-1, 1, (b, hq, l, d)).astype(np.float16)
    k = kvattn.to_fp8(rng.uniform(-4, 4, (b, hkv, s, d)), fmt)
    v = kvattn.to_fp8(rng.uniform(-4, 4, (b, hkv, s, d)), fmt)
    k_scale = np.array([0.5, 1.75], np.float32)
    v_scale = np.array([1.25, 0.375], np.float32)
    kv_len = np.array([64, 37], np.int32)
    q_offset = kv_len - l
    plan = kvattn.plan(dict(dtype="f16", num_query_heads=hq,
                            num_kv_heads=hkv, head_dim=d, causal=True,
                            kv_dtype=fmt, kv_scales="head"),
                       runtime=rt, max_sizes={"B": 2, "L": 1, "S": 64})
    dq = kvattn.to_device(q, rt)
    dk = kvattn.to_device(k, rt, dtype=fmt)
    dv = kvattn.to_device(v, rt, dtype=fmt)
    dks = kvattn.to_device(k_scale, rt)
    dvs = kvattn.to_device(v_scale, rt)
    dout = rt.empty(q.shape, "f16")
    meta = dict(q_offset=kvattn.to_device(q_offset, rt),
                kv_len=kvattn.to_device(kv_len, rt))
    plan.run(query=dq, key=dk, value=dv, out=dout, k_scale=dks, v_scale=dvs,
             **meta)
    assert plan.status() is None
    want, _ = reference(q, dequantize(k, fmt, k_scale, hkv),
                        dequantize(v, fmt, v_scale, hkv), q_offset, kv_len)
    got = dout.numpy().astype(np.float64)
    # f16 output; K/V converted to f16 in shared memory (e4m3 codes times
    # the scale, rounded): 2e-3 + 4e-3 |ref|.
    assert np.all(np.abs(got - want) <= 2e-3 + 4e-3 * np.abs(want))
    plain, _ = reference(q, dequantize(k, fmt, [1.0], hkv),
                         dequantize(v, fmt, [1.0], hkv), q_offset, kv_len)
    assert np.max(np.abs(plain - want)) > 0.05
    for bad, message in ((np.array([0.5, 0.0], np.float32),
                          r"k_scale\[1\] = 0 must be positive and finite"),
                         (np.array([np.nan, 1.0], np.float32),
                          r"k_scale\[0\] = nan must be positive and finite"),
                         (np.array([1.0, -np.inf], np.float32),
                          r"k_scale\[1\] = -inf must be positive and finite")):
        plan.run(query=dq, key=dk, value=dv, out=dout,
                 k_scale=kvattn.to_device(bad, rt), v_scale=dvs, **meta)
        import re
        status = plan.status()
        assert status and re.search(message, status), status
        assert "(a KV scale divides the values it quantises)" in status
        plan.clear_status()
    plan.close()
