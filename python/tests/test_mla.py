"""DeepSeek MLA in its absorbed (latent) form (docs/semantics.md, "Latent
KV"): query heads of D = 576 (512 latent + 64 rotary) over ONE shared KV
"head" of 576 per token, whose first Dv = 512 columns are also V
(`kvattn.attention ... value_dim = 512`, no value operand); paged with
FlashMLA's page size 64, ragged kv_len, decode and short appends, 16 and 128
query heads, the caller's softmax scale, lse. On the CPU path against a
NumPy float64 reference that builds V from the cache itself; every slot no
key owns holds NaN or Inf. Each case also asserts that reading V from
anything else (another buffer, the wrong columns) changes the answer."""
import math

import numpy as np
import pytest

import kvattn
from conftest import distinct

D, DV, PAGE = 576, 512, 64
# DeepSeek-V2/V3's softmax scale: 1 / sqrt(qk_head_dim = 128 + 64).
SCALE = 1.0 / math.sqrt(192.0)


def gather(pool, table, kv_len):
    """The logical caches [B, S_b, D] (a list) of paged `pool`
    [num_pages, page, 1, D] through `table` [B, max_pages], up to kv_len."""
    caches = []
    for b, n in enumerate(kv_len):
        rows = [pool[table[b, j // PAGE], j % PAGE, 0] for j in range(n)]
        caches.append(np.array(rows, np.float64).reshape(n, pool.shape[-1]))
    return caches


def reference(q, caches, q_offset, scale=SCALE, dv=DV, value=None):
    """float64 (out [B, Hq, L, dv], lse [B, Hq, L]): row i of batch b at
    position q_offset[b] + i sees keys j <= it (causal) of caches[b]
    [S_b, D]; V is caches[b][:, :dv] (or `value(b)` to show what a wrong V
    gives)."""
    q = np.asarray(q, np.float64)
    B, Hq, L, _ = q.shape
    out = np.zeros((B, Hq, L, dv))
    lse = np.full((B, Hq, L), -np.inf)
    for b in range(B):
        k = caches[b]
        v = k[:, :dv] if value is None else value(b)
        n = k.shape[0]
        s = np.einsum("hld,sd->hls", q[b], k) * scale
        for i in range(L):
            seen = np.arange(n) <= q_offset[b] + i
            if not seen.any():
                continue
            row = s[:, i][:, seen]
            m = row.max(axis=1, keepdims=True)
            p = np.exp(row - m)
            out[b, :, i] = p @ v[seen] / p.sum(axis=1, keepdims=True)
            lse[b, :, i] = m[:, 0] + np.log(p.sum(axis=1))
    return out, lse


def paged_case(B, Hq, L, kv_len, seed, poison=np.nan, extra_pages=3):
    """q [B, Hq, L, 576], the pool [num_pages, 64, 1, 576] with the pages of
    every sequence drawn at random, table [B, max_pages] (-1 tails), and
    `poison` in every slot no key owns: past kv_len in a sequence's last
    page, and whole unused pages."""
    rng = np.random.default_rng(seed)
    kv_len = np.asarray(kv_len, np.int32)
    max_pages = max(1, -(-int(kv_len.max()) // PAGE))
    need = [-(-int(n) // PAGE) for n in kv_len]
    num_pages = sum(need) + extra_pages
    pool = distinct((num_pages, PAGE, 1, D), seed + 1)
    # The rotary columns a bit larger, as in a real cache: a V read from
    # the wrong columns differs all the more.
    pool[..., DV:] *= 2.0
    order = rng.permutation(num_pages)
    table = np.full((B, max_pages), -1, np.int32)
    owned = np.zeros((num_pages, PAGE), bool)
    at = 0
    for b in range(B):
        for j in range(need[b]):
            page = order[at]
            at += 1
            table[b, j] = page
            live = min(PAGE, int(kv_len[b]) - j * PAGE)
            owned[page, :live] = True
    pool[~owned] = poison
    q = distinct((B, Hq, L, D), seed + 2)
    return q, pool, table, kv_len


def mla_ir(dtype, B, Hq, L, num_pages, max_pages, with_lse=True,
           scale=SCALE):
    q = f"tensor<{B}x{Hq}x{L}x{D}x{dtype}>"
    kv = f"tensor<{num_pages}x{PAGE}x1x{D}x{dtype}>"
    out = f"tensor<{B}x{Hq}x{L}x{DV}x{dtype}>"
    lse = f"tensor<{B}x{Hq}x{L}xf32>"
    bt = f"tensor<{B}x{max_pages}xi32>"
    idx = f"tensor<{B}xi32>"
    results = f"{out}, {lse}" if with_lse else out
    names = "%o, %lse" if with_lse else "%o"
    return (f"func.func @main(%q: {q}, %ckv: {kv}, %qo: {idx}, %len: {idx}, "
            f"%bt: {bt}) -> ({results}) {{\n"
            f"  {names} = kvattn.attention %q, %ckv value_dim = {DV} "
            f"q_offset(%qo : {idx}) kv_len(%len : {idx}) "
            f"block_table(%bt : {bt}) causal scale = {scale!r} : {q}, {kv} "
            f"-> {results}\n"
            f"  return {names} : {results}\n}}\n")


def check_wrong_values_differ(q, caches, qo, want):
    """V read from another buffer, or from the cache's wrong columns (the
    last 512, which hold the 64 rotary ones), gives another answer."""
    rng = np.random.default_rng(0)
    other = [rng.standard_normal((c.shape[0], DV)) for c in caches]
    for value in (lambda b: other[b], lambda b: caches[b][:, D - DV:]):
        wrong, _ = reference(q, caches, qo, value=value)
        rows = np.isfinite(want)
        assert np.abs(wrong[rows] - want[rows]).max() > 0.05


DECODE = [
    # (B, Hq, kv_len): page boundaries, a sequence of one key, ragged.
    (1, 16, [200]),
    (4, 128, [1, 64, 65, 191]),
    (64, 16, list(np.random.default_rng(7).integers(1, 160, 64))),
    (64, 128, list(np.random.default_rng(8).integers(1, 100, 64))),
]


@pytest.mark.parametrize("B,Hq,kv_len", DECODE)
def test_mla_decode_paged_cpu(B, Hq, kv_len):
    q, pool, table, kv_len = paged_case(B, Hq, 1, kv_len, seed=B + Hq)
    qo = kv_len - 1
    prog = kvattn.compile(mla_ir("f32", B, Hq, 1, pool.shape[0],
                                 table.shape[1]))
    out, lse = prog.run(q, pool, qo, kv_len, table)
    caches = gather(pool, table, kv_len)
    want, want_lse = reference(q, caches, qo)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    check_wrong_values_differ(q, caches, qo, want)


@pytest.mark.parametrize("options", [{"vectorize": False}, {"split_kv": 3},
                                     {"block_n": 32}])
def test_mla_decode_lowerings_inf_poison(options):
    q, pool, table, kv_len = paged_case(3, 16, 1, [130, 5, 192], seed=3,
                                        poison=np.inf)
    qo = kv_len - 1
    prog = kvattn.compile(mla_ir("f32", 3, 16, 1, pool.shape[0],
                                 table.shape[1]), **options)
    out, lse = prog.run(q, pool, qo, kv_len, table)
    want, want_lse = reference(q, gather(pool, table, kv_len), qo)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)


def test_mla_short_append_causal_cpu():
    """L = 3 new tokens (MTP / speculative) per sequence, causal at their
    positions; one sequence whose queries sit before every key (out = 0,
    lse = -inf: a position before the cache)."""
    B, Hq, L = 3, 16, 3
    q, pool, table, kv_len = paged_case(B, Hq, L, [100, 3, 64], seed=30)
    qo = np.array([97, 0, 61], np.int32)
    prog = kvattn.compile(mla_ir("f32", B, Hq, L, pool.shape[0],
                                 table.shape[1]))
    out, lse = prog.run(q, pool, qo, kv_len, table)
    caches = gather(pool, table, kv_len)
    want, want_lse = reference(q, caches, qo)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    # Causality matters: row 0 of batch 0 must not see keys 98 and 99.
    full, _ = reference(q, caches, kv_len - 1)
    assert np.abs(full[0, :, 0] - want[0, :, 0]).max() > 1e-3
    check_wrong_values_differ(q, caches, qo, want)


def test_mla_bf16_cpu():
    B, Hq = 2, 128
    q, pool, table, kv_len = paged_case(B, Hq, 1, [150, 64], seed=40)
    qb, pb = kvattn.to_bf16(q), kvattn.to_bf16(pool)
    qo = kv_len - 1
    prog = kvattn.compile(mla_ir("bf16", B, Hq, 1, pool.shape[0],
                                 table.shape[1]))
    out, lse = prog.run(qb, pb, qo, kv_len, table)
    want, want_lse = reference(kvattn.from_bf16(qb),
                               gather(kvattn.from_bf16(pb), table, kv_len), qo)
    # bf16 out (8 mantissa bits): atol 2e-2 + rtol 2e-2.
    np.testing.assert_allclose(kvattn.from_bf16(out), want, atol=2e-2,
                               rtol=2e-2)
    np.testing.assert_allclose(lse, want_lse, atol=1e-3, rtol=1e-3)


def test_mla_description_cpu():
    """kvattn_attention_desc with latent = 1: the key cache alone, V its
    first value_head_dim columns; the IR runs on the CPU."""
    text = kvattn.attention_ir(dtype="f32", num_query_heads=16,
                               num_kv_heads=1, head_dim=D, value_head_dim=DV,
                               paged=True, page_size=PAGE, causal=True,
                               with_lse=True, scale=SCALE, latent=True)
    assert f"value_dim = {DV}" in text
    assert f"tensor<?x{PAGE}x1x{D}xbf16>" not in text  # dtype f32
    assert f"tensor<?x{PAGE}x1x{DV}x" not in text  # no value argument
    q, pool, table, kv_len = paged_case(2, 16, 1, [70, 128], seed=50)
    qo = kv_len - 1
    out, lse = kvattn.compile(text).run(q, pool, qo, kv_len, table)
    want, want_lse = reference(q, gather(pool, table, kv_len), qo)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)


def test_mla_description_emulated_gpu(emulated_runtime):
    """The description's IR (latent = 1, bf16, every size dynamic) on the
    emulated GPU: the kernel compiled once for dynamic shapes, as a serving
    plan does, with the split chosen per launch."""
    text = kvattn.attention_ir(dtype="bf16", num_query_heads=16,
                               num_kv_heads=1, head_dim=D, value_head_dim=DV,
                               paged=True, page_size=PAGE, causal=True,
                               with_lse=True, scale=SCALE, latent=True)
    q, pool, table, kv_len = paged_case(2, 16, 1, [70, 128], seed=51)
    qb, pb = kvattn.to_bf16(q), kvattn.to_bf16(pool)
    qo = kv_len - 1
    prog = kvattn.compile(text, target="gpu", runtime=emulated_runtime)
    out, lse = prog.run(qb, pb, qo, kv_len, table)
    prog.close()
    qf = kvattn.from_bf16(qb).astype(np.float64)
    caches = gather(kvattn.from_bf16(pb), table, kv_len)
    want, want_lse = reference(qf, caches, qo)
    # bf16 out (8 mantissa bits): atol 2e-2 + rtol 2e-2.
    np.testing.assert_allclose(kvattn.from_bf16(out), want, atol=2e-2,
                               rtol=2e-2)
    np.testing.assert_allclose(lse, want_lse, atol=1e-3, rtol=1e-3)


def append_case(B, Hq, kv_len, seed):
    """A decode step that appends: the pages own kv_len keys, the last one
    (at q_offset = kv_len - 1) NaN in the pool and given as update_k [B,
    1, 1, 576]; returns q, pool, update, table, kv_len, q_offset and the
    logical caches with the new rows in place (float64)."""
    q, pool, table, kv_len = paged_case(B, Hq, 1, kv_len, seed)
    update = distinct((B, 1, 1, D), seed + 3)
    qo = kv_len - 1
    for b in range(B):
        pool[table[b, qo[b] // PAGE], qo[b] % PAGE, 0] = np.nan
    full = pool.copy()
    for b in range(B):
        full[table[b, qo[b] // PAGE], qo[b] % PAGE, 0] = update[b, 0, 0]
    return q, pool, update, table, kv_len, qo, gather(full, table, kv_len)


def latent_append_ir(dtype):
    return kvattn.attention_ir(dtype=dtype, num_query_heads=16,
                               num_kv_heads=1, head_dim=D, value_head_dim=DV,
                               paged=True, page_size=PAGE, causal=True,
                               with_lse=True, scale=SCALE, latent=True,
                               append=True)


def test_mla_description_append_cpu():
    """latent = 1 with append: one kvattn.append writes the new tokens'
    whole 576-wide rows (update_k; no update_v) into the latent cache, then
    the attention reads them, V included (f32 against float64: 2e-5). The
    slot is NaN before the step: a missed write cannot pass."""
    text = latent_append_ir("f32")
    assert text.count("kvattn.append") == 1
    q, pool, update, table, kv_len, qo, caches = append_case(
        2, 16, [70, 128], seed=52)
    out, lse, cache = kvattn.compile(text).run(q, pool, update, qo, kv_len,
                                               table)
    want, want_lse = reference(q, caches, qo)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    for b in range(2):
        np.testing.assert_array_equal(
            cache[table[b, qo[b] // PAGE], qo[b] % PAGE, 0], update[b, 0, 0])
    check_wrong_values_differ(q, caches, qo, want)


def test_mla_description_append_emulated_gpu(emulated_runtime):
    """The same step on the emulated GPU (bf16): the append kernel writes
    the rows bit for bit, the latent kernel attends over them (bf16 out
    2e-2, lse 1e-3)."""
    q, pool, update, table, kv_len, qo, _ = append_case(2, 16, [70, 128],
                                                        seed=53)
    qb, pb, ub = kvattn.to_bf16(q), kvattn.to_bf16(pool), \
        kvattn.to_bf16(update)
    rt = emulated_runtime
    plan = kvattn.plan(latent_append_ir("bf16"), runtime=rt,
                       max_sizes={"B": 2, "L": 1})
    dev = {n: kvattn.to_device(x, rt, "bf16")
           for n, x in (("query", qb), ("key", pb), ("update_k", ub))}
    meta = {n: kvattn.to_device(np.asarray(x, np.int32), rt)
            for n, x in (("q_offset", qo), ("pos", qo), ("kv_len", kv_len),
                         ("block_table", table))}
    dout = rt.empty((2, 16, 1, DV), "bf16")
    dlse = rt.empty((2, 16, 1), "f32")
    plan.run(out=dout, lse=dlse, **dev, **meta)
    out, lse, cache = dout.numpy(), dlse.numpy(), dev["key"].numpy()
    plan.close()
    for b in range(2):
        np.testing.assert_array_equal(
            cache[table[b, qo[b] // PAGE], qo[b] % PAGE, 0], ub[b, 0, 0])
    caches = gather(kvattn.from_bf16(cache), table, kv_len)
    want, want_lse = reference(kvattn.from_bf16(qb).astype(np.float64),
                               caches, qo)
    np.testing.assert_allclose(kvattn.from_bf16(out), want, atol=2e-2,
                               rtol=2e-2)
    np.testing.assert_allclose(lse, want_lse, atol=1e-3, rtol=1e-3)


def test_mla_errors():
    base = dict(dtype="bf16", num_query_heads=16, num_kv_heads=1,
                head_dim=D, paged=True, page_size=PAGE, latent=True)
    with pytest.raises(kvattn.KVAttnError,
                       match=r"value_head_dim = 640 exceeds head_dim = 576 "
                             r"with latent"):
        kvattn.attention_ir(value_head_dim=640, **base)
    # An FP8 latent cache takes k_scale alone (no v_scale argument).
    text = kvattn.attention_ir(value_head_dim=DV, kv_dtype="f8E4M3FN",
                               **base)
    assert "k_scale(" in text and "v_scale" not in text
    with pytest.raises(kvattn.KVAttnError,
                       match=r"head_dim = 576 is outside \[1, 256\]"):
        kvattn.attention_ir(**dict(base, latent=False))
    # IR: a V given with the latent form, Dv above D.
    q = f"tensor<1x16x1x{D}xf32>"
    k = f"tensor<1x1x64x{D}xf32>"
    v = f"tensor<1x1x64x{DV}xf32>"
    o = f"tensor<1x16x1x{DV}xf32>"
    with pytest.raises(kvattn.KVAttnError,
                       match=r"value_dim = 512 declares the latent form .* "
                             r"but a value operand is given"):
        kvattn.compile(
            f"func.func @main(%q: {q}, %k: {k}, %v: {v}) -> {o} {{\n"
            f"  %o = kvattn.attention %q, %k, %v value_dim = {DV} : {q}, {k}, "
            f"{v} -> {o}\n  return %o : {o}\n}}\n")
    big = f"tensor<1x16x1x640xf32>"
    with pytest.raises(kvattn.KVAttnError,
                       match=r"value_dim = 640 exceeds the key's head dim "
                             r"D = 576"):
        kvattn.compile(
            f"func.func @main(%q: {q}, %k: {k}) -> {big} {{\n"
            f"  %o = kvattn.attention %q, %k value_dim = 640 : {q}, {k} -> "
            f"{big}\n  return %o : {big}\n}}\n")


@pytest.mark.parametrize("Hq,kv_len", [(16, [130, 5]), (128, [64, 200])])
def test_mla_decode_emulated_gpu(emulated_runtime, Hq, kv_len):
    """The GPU kernel of the latent form (docs/gpu-lowering.md, "The latent
    form") on the emulated GPU: bf16, paged 64 with -1 table tails and NaN
    in every unowned slot, 16 heads (one program, 4 warps sharing Dv) and
    128 (two programs of 64 rows). The tolerance is bf16's (the output's 8
    mantissa bits); V read from the wrong columns is far outside it."""
    B = len(kv_len)
    q, pool, table, kv_len = paged_case(B, Hq, 1, kv_len, seed=60 + Hq)
    qb, pb = kvattn.to_bf16(q), kvattn.to_bf16(pool)
    qo = kv_len - 1
    prog = kvattn.compile(mla_ir("bf16", B, Hq, 1, pool.shape[0],
                                 table.shape[1]),
                          target="gpu", runtime=emulated_runtime)
    out, lse = prog.run(qb, pb, qo, kv_len, table)
    prog.close()
    qf = kvattn.from_bf16(qb).astype(np.float64)
    caches = gather(kvattn.from_bf16(pb), table, kv_len)
    want, want_lse = reference(qf, caches, qo)
    np.testing.assert_allclose(kvattn.from_bf16(out), want, atol=2e-2,
                               rtol=2e-2)
    np.testing.assert_allclose(lse, want_lse, atol=1e-3, rtol=1e-3)
    check_wrong_values_differ(qf, caches, qo, want)


# --- FP8 latent caches (docs/semantics.md, "Latent KV": k_scale alone
# dequantises the cache, the scores' K and the V columns inside it) -------

FP8 = ["f8E4M3FN", "f8E5M2"]


def fp8_case(fmt, gran, B, Hq, kv_len, seed, L=1):
    """paged_case's pool quantised to `fmt` with a k_scale of granularity
    "tensor" ([1]) or "token" ([num_pages, page, 1]), distinct in [0.25, 2]
    (unowned slots: NaN codes 0x7F, or e5m2's +Inf 0x7C); returns q, codes,
    scale, table, kv_len and the dequantised pool (float64)."""
    q, pool, table, kv_len = paged_case(B, Hq, L, kv_len, seed)
    rng = np.random.default_rng(seed + 9)
    shape = (1,) if gran == "tensor" else pool.shape[:3]
    scale = (0.25 + rng.integers(0, 8, shape) * 0.25).astype(np.float32)
    # Values of a few units: the codes' relative step stays 2^-3 / 2^-2.
    codes = kvattn.to_fp8(np.nan_to_num(pool * 3.0, nan=0.0) /
                          (scale if gran == "tensor" else scale[..., None]),
                          fmt)
    bad = np.isnan(pool)
    codes[bad] = 0x7F if fmt == "f8E4M3FN" else 0x7C
    deq = kvattn.from_fp8(codes, fmt).astype(np.float64) * (
        scale if gran == "tensor" else scale[..., None])
    return q, codes, scale, table, kv_len, deq


def mla_fp8_ir(dtype, fmt, gran, B, Hq, L, num_pages, max_pages):
    text = mla_ir(dtype, B, Hq, L, num_pages, max_pages)
    kv = f"tensor<{num_pages}x{PAGE}x1x{D}x{dtype}>"
    s = "tensor<1xf32>" if gran == "tensor" else \
        f"tensor<{num_pages}x{PAGE}x1xf32>"
    bt = f"tensor<{B}x{max_pages}xi32>"
    return (text.replace(kv, f"tensor<{num_pages}x{PAGE}x1x{D}x{fmt}>")
            .replace(f"%bt: {bt})", f"%bt: {bt}, %ks: {s})")
            .replace(f"block_table(%bt : {bt})",
                     f"block_table(%bt : {bt}) k_scale(%ks : {s})"))


@pytest.mark.parametrize("fmt", FP8)
@pytest.mark.parametrize("gran", ["tensor", "token"])
def test_mla_fp8_cache_cpu(fmt, gran):
    """The FP8 latent cache on the CPU against the float64 reference over
    the dequantised cache (code * k_scale): f32 query 2e-5; a path that
    ignored the scale, or read V undequantised, is far outside it."""
    B, Hq = 3, 16
    q, codes, scale, table, kv_len, deq = fp8_case(fmt, gran, B, Hq,
                                                   [130, 5, 64], seed=70)
    qo = kv_len - 1
    prog = kvattn.compile(mla_fp8_ir("f32", fmt, gran, B, Hq, 1,
                                     codes.shape[0], table.shape[1]))
    out, lse = prog.run(q, codes, qo, kv_len, table, scale)
    caches = gather(deq, table, kv_len)
    want, want_lse = reference(q, caches, qo)
    # f32 accumulation over 576 products of values up to ~8: 2e-5 of the
    # largest |out| (as python/torch_tests/test_fp8.py).
    np.testing.assert_allclose(out, want, rtol=0,
                               atol=2e-5 * np.abs(want).max())
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    # The scales matter: the undequantised codes give another answer.
    raw = gather(kvattn.from_fp8(codes, fmt).astype(np.float64), table,
                 kv_len)
    plain, _ = reference(q, raw, qo)
    assert np.abs(plain - want).max() > 0.05
    check_wrong_values_differ(q, caches, qo, want)


@pytest.mark.parametrize("fmt,gran,Hq", [("f8E4M3FN", "token", 16),
                                         ("f8E5M2", "tensor", 128)])
def test_mla_fp8_cache_emulated_gpu(emulated_runtime, fmt, gran, Hq):
    """The latent form's mma.sync kernel over an FP8 cache on the emulated
    GPU (K staged as FP8 bytes and converted to bf16 with its row's scale;
    P.V reads the same converted stage): bf16 query, NaN / +Inf codes in
    every unowned slot, against the float64 reference over code * k_scale
    (bf16 tolerance 2e-2, lse 1e-3). Accuracy against the f32 cache the
    codes quantise is reported by docs/semantics.md."""
    B = 2
    q, codes, scale, table, kv_len, deq = fp8_case(fmt, gran, B, Hq,
                                                   [130, 64], seed=80 + Hq)
    qb = kvattn.to_bf16(q)
    qo = kv_len - 1
    prog = kvattn.compile(mla_fp8_ir("bf16", fmt, gran, B, Hq, 1,
                                     codes.shape[0], table.shape[1]),
                          target="gpu", runtime=emulated_runtime)
    out, lse = prog.run(qb, codes, qo, kv_len, table, scale)
    prog.close()
    qf = kvattn.from_bf16(qb).astype(np.float64)
    caches = gather(deq, table, kv_len)
    want, want_lse = reference(qf, caches, qo)
    got = kvattn.from_bf16(out)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=2e-2, rtol=2e-2)
    np.testing.assert_allclose(lse, want_lse, atol=1e-3, rtol=1e-3)
    check_wrong_values_differ(qf, caches, qo, want)


def test_mla_fp8_description_cpu():
    """kvattn_attention_desc with latent = 1 and kv_dtype (C API): the IR
    takes k_scale alone (per token here, kv_scales = "token": [num_pages,
    page, 1]) and runs on the CPU against the reference."""
    fmt = "f8E5M2"
    text = kvattn.attention_ir(dtype="f32", num_query_heads=16,
                               num_kv_heads=1, head_dim=D, value_head_dim=DV,
                               paged=True, page_size=PAGE, causal=True,
                               with_lse=True, scale=SCALE, latent=True,
                               kv_dtype=fmt, kv_scales="token")
    assert "k_scale(" in text and "v_scale" not in text
    q, codes, scale, table, kv_len, deq = fp8_case(fmt, "token", 2, 16,
                                                   [70, 128], seed=90)
    qo = kv_len - 1
    out, lse = kvattn.compile(text).run(q, codes, qo, kv_len, table, scale)
    want, want_lse = reference(q, gather(deq, table, kv_len), qo)
    np.testing.assert_allclose(out, want, rtol=0,
                               atol=2e-5 * np.abs(want).max())
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
