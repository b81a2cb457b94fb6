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


# --- kvattn.append into an FP8 cache --------------------------------------

# Values at the edges of both formats: the largest finite values and the
# ties beyond them, infinities, NaN, -0, subnormal ties, rounding ties.
EDGE = [448.0, 464.0, 465.0, 57344.0, 61440.0, 1e6, np.inf, -np.inf, np.nan,
        -0.0, 2.0 ** -10, 3 * 2.0 ** -10, 2.0 ** -17, 3 * 2.0 ** -17, 17.0,
        1.0625]


def append_ir(fmt, dtype, b, h, l, c, d, scale_shape):
    u = f"tensor<{b}x{h}x{l}x{d}x{dtype}>"
    kv = f"tensor<{b}x{h}x{c}x{d}x{fmt}>"
    sc = "tensor<" + "x".join(str(n) for n in scale_shape) + "xf32>"
    return (f"func.func @main(%u: {u}, %c: {kv}, %pos: tensor<{b}xi32>, "
            f"%s: {sc}) -> {kv} {{\n"
            f"  %r = kvattn.append %u into %c at %pos kv_scale(%s : {sc}) : "
            f"{u} into {kv}, tensor<{b}xi32>\n"
            f"  return %r : {kv}\n}}\n")


def quantised_cache(cache, update, pos, scale, fmt):
    """The cache codes after the append, by NumPy: f32 quotients (IEEE
    division in float32), then kvattn.to_fp8 (an explicit table of the
    format's values: nearest, ties to even, saturating, NaN -> 0x7F)."""
    want = cache.copy()
    b, h, l, _ = update.shape
    s = np.asarray(scale, np.float32)
    for bi in range(b):
        for t in range(l):
            row = pos[bi] + t
            if s.size == 1:
                sc = s.reshape(())
            elif s.ndim == 1:
                sc = s.reshape(h, 1)
            else:
                sc = s[bi, :, row].reshape(h, 1)
            x = update[bi, :, t].astype(np.float32) / sc.astype(np.float32)
            want[bi, :, row] = kvattn.to_fp8(x.astype(np.float32), fmt)
    return want


@pytest.mark.parametrize("fmt", ["f8E4M3FN", "f8E5M2"])
@pytest.mark.parametrize("granularity", ["tensor", "head", "token"])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_append_quantises_like_numpy(fmt, granularity, dtype):
    """kvattn.append into an FP8 cache on the CPU path: the written codes
    equal NumPy's byte for byte (edge values, NaN and Inf among them), every
    other code is kept."""
    rng = np.random.default_rng(36)
    b, h, l, c, d = 2, 2, 3, 12, 16
    shape = {"tensor": (1,), "head": (h,), "token": (b, h, c)}[granularity]
    scale = rng.uniform(0.3, 3.0, shape).astype(np.float32)
    np_dtype = np.float32 if dtype == "f32" else np.float16
    update = rng.uniform(-600, 600, (b, h, l, d)).astype(np.float32)
    update[0, 0, 0] = EDGE
    update[1, 1, 2] = [-v for v in EDGE]
    with np.errstate(over="ignore"):  # 1e6 is +-inf in f16
        update = update.astype(np_dtype)
    cache = rng.integers(0, 256, (b, h, c, d)).astype(np.uint8)
    pos = np.array([4, 9], np.int32)
    prog = kvattn.compile(append_ir(fmt, dtype, b, h, l, c, d, shape))
    got = prog.run(update, cache, pos, scale)
    if isinstance(got, (tuple, list)):
        got = got[0]
    assert got.dtype == np.uint8
    want = quantised_cache(cache, update, pos, scale, fmt)
    assert np.array_equal(got, want), np.argwhere(got != want)[:8]
    # The scales matter: quantising with 1 gives other codes.
    assert not np.array_equal(
        want, quantised_cache(cache, update, pos, np.ones(1, np.float32), fmt))
    # NaN in -> 0x7F (sign dropped); infinities saturate.
    top = 0x7E if fmt == "f8E4M3FN" else 0x7B
    assert got[0, 0, 4, EDGE.index(np.inf)] == top
    assert got[0, 0, 4, EDGE.index(-np.inf)] == 0x80 | top
    assert got[0, 0, 4, 8] == 0x7F and got[1, 1, 11, 8] == 0x7F


def test_append_bad_scale_is_refused_by_name():
    prog = kvattn.compile(append_ir("f8E4M3FN", "f32", 1, 2, 1, 4, 16, (2,)))
    u = np.zeros((1, 2, 1, 16), np.float32)
    cache = np.zeros((1, 2, 4, 16), np.uint8)
    with pytest.raises(kvattn.KVAttnError,
                       match=r"kv_scale\[1\] = 0 must be positive and finite"):
        prog.run(u, cache, np.array([0], np.int32),
                 np.array([1.0, 0.0], np.float32))
    with pytest.raises(kvattn.KVAttnError,
                       match=r"pos\[0\] = 4 writes rows \[4, 5\) outside"):
        prog.run(u, cache, np.array([4], np.int32),
                 np.array([1.0, 2.0], np.float32))


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
    # With append the new tokens are quantised with the same scales.
    text = kvattn.attention_ir(dtype="bf16", num_query_heads=2,
                               num_kv_heads=2, head_dim=16,
                               kv_dtype="f8E4M3FN", append=True)
    assert "kv_scale(" in text and text.count("kvattn.append") == 2


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


def test_append_plan_on_the_emulated_gpu(emulated_runtime):
    """A decode step from a description with append and an FP8 cache on the
    emulated GPU: the append kernels quantise update_k / update_v with
    k_scale / v_scale (per token and head) into the caches in place, byte
    for byte as NumPy does, and the attention reads them."""
    rt = emulated_runtime
    rng = np.random.default_rng(12)
    b, hq, hkv, l, s, d = 2, 8, 2, 1, 48, 32
    fmt = "f8E4M3FN"
    q = rng.uniform(-1, 1, (b, hq, l, d)).astype(np.float16)
    k = kvattn.to_fp8(rng.uniform(-4, 4, (b, hkv, s, d)), fmt)
    v = kvattn.to_fp8(rng.uniform(-4, 4, (b, hkv, s, d)), fmt)
    uk = rng.uniform(-8, 8, (b, hkv, l, d)).astype(np.float16)
    uv = rng.uniform(-8, 8, (b, hkv, l, d)).astype(np.float16)
    uk[0, 0, 0, :4] = [np.inf, -np.inf, np.nan, 1e4]
    k_scale = rng.uniform(0.25, 2.0, (b, hkv, s)).astype(np.float32)
    v_scale = rng.uniform(0.25, 2.0, (b, hkv, s)).astype(np.float32)
    pos = np.array([20, 47], np.int32)
    kv_len = pos + l
    plan = kvattn.plan(dict(dtype="f16", num_query_heads=hq,
                            num_kv_heads=hkv, head_dim=d, causal=True,
                            kv_dtype=fmt, kv_scales="token", append=True),
                       runtime=rt, max_sizes={"B": 2, "L": 1, "S": s})
    dk = kvattn.to_device(k, rt, dtype=fmt)
    dv = kvattn.to_device(v, rt, dtype=fmt)
    dout = rt.empty(q.shape, "f16")
    dpos = kvattn.to_device(pos, rt)
    plan.run(query=kvattn.to_device(q, rt), key=dk, value=dv, out=dout,
             update_k=kvattn.to_device(uk, rt),
             update_v=kvattn.to_device(uv, rt),
             k_scale=kvattn.to_device(k_scale, rt),
             v_scale=kvattn.to_device(v_scale, rt),
             q_offset=dpos, pos=dpos,  # the appends write at q_offset
             kv_len=kvattn.to_device(kv_len, rt))
    assert plan.status() is None
    want_k = quantised_cache(k, uk, pos, k_scale, fmt)
    want_v = quantised_cache(v, uv, pos, v_scale, fmt)
    got_k = dk.numpy().view(np.uint8).reshape(k.shape)
    got_v = dv.numpy().view(np.uint8).reshape(v.shape)
    assert np.array_equal(got_k, want_k)
    assert np.array_equal(got_v, want_v)
    assert got_k[0, 0, 20, 2] == 0x7F
    want, _ = reference(q, dequantize(want_k, fmt, k_scale, hkv),
                        dequantize(want_v, fmt, v_scale, hkv), pos, kv_len)
    got = dout.numpy().astype(np.float64)
    assert not np.isnan(want[1]).any()
    # Batch 0 reads the NaN code it wrote: NaN rows stay NaN; batch 1 is
    # finite and within the f16 tolerance.
    assert np.all(np.abs(got[1] - want[1]) <= 2e-3 + 4e-3 * np.abs(want[1]))
    plan.close()
