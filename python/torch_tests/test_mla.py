"""kvattn.torch's MLA op (torch.ops.kvattn.mla_attention, kt.mla_attention;
docs/torch.md "MLA"): DeepSeek's absorbed decode, query heads of D = 576
(512 latent + 64 rotary) over one shared latent row per token whose first
Dv = 512 columns are V. On the CPU against a NumPy float64 reference of the
absorbed formula written here (V built from the cache's own first Dv
columns); paged (FlashMLA's page size 64, block tables in random order,
NaN/Inf in every slot no key owns) and plain caches in both layouts,
B = 1 .. 64, 16 and 128 query heads, f32 and bf16, decode and causal MTP
rows at explicit positions, lse, out=, torch.compile(fullgraph=True),
opcheck, FlashInfer's split form without a copy, and the misuse by name.
Each case asserts that V read from the wrong columns changes the answer.
Tolerances: f32 2e-5 (f32 accumulation over 576 products); bf16 out 2e-2
absolute + relative (8 mantissa bits), lse 1e-3."""

import math

import numpy as np
import pytest
import torch

import kvattn.torch as kt
from kvattn.capi import KVAttnError

D, DV, PAGE = 576, 512, 64
SCALE = 1.0 / math.sqrt(192.0)  # DeepSeek-V2/V3: 1/sqrt(128 + 64)


def reference(q, caches, q_offset, scale=SCALE, dv=DV, causal=True,
              value_cols=None):
    """float64 (out [B, Hq, L, dv], lse [B, Hq, L]) of the absorbed
    formula: q [B, Hq, L, D] (bhsd), caches[b] the logical latent rows [S_b,
    D] of batch b (every KV head the same: Hkv = 1 here); row i sits at
    q_offset[b] + i; V = caches[b][:, :dv] (or the columns `value_cols`, to
    show what a wrong V gives)."""
    q = np.asarray(q, np.float64)
    B, Hq, L, _ = q.shape
    out = np.zeros((B, Hq, L, dv))
    lse = np.full((B, Hq, L), -np.inf)
    for b in range(B):
        k = np.asarray(caches[b], np.float64)
        v = k[:, :dv] if value_cols is None else k[:, value_cols]
        s = np.einsum("hld,sd->hls", q[b], k) * scale
        for i in range(L):
            seen = np.ones(k.shape[0], bool)
            if causal:
                seen &= np.arange(k.shape[0]) <= q_offset[b] + i
            if not seen.any():
                continue
            row = s[:, i][:, seen]
            m = row.max(axis=1, keepdims=True)
            p = np.exp(row - m)
            out[b, :, i] = p @ v[seen] / p.sum(axis=1, keepdims=True)
            lse[b, :, i] = m[:, 0] + np.log(p.sum(axis=1))
    return out, lse


def paged(B, Hq, L, kv_len, seed, dtype=torch.float32, poison=math.nan,
          extra_pages=3):
    """q [B, Hq, L, D], the pool [num_pages, 64, 1, D] with each sequence's
    pages drawn at random, block_table int32 [B, max_pages] (-1 tails),
    `poison` in every slot no key owns (past kv_len in a last page, whole
    unused pages); the logical caches [S_b, D] (float64, as rounded to
    `dtype`)."""
    g = torch.Generator().manual_seed(seed)
    kv_len = [int(n) for n in kv_len]
    need = [-(-n // PAGE) for n in kv_len]
    max_pages = max(1, max(need))
    num_pages = sum(need) + extra_pages
    pool = torch.randn(num_pages, PAGE, 1, D, generator=g)
    pool[..., DV:] *= 2.0  # a wrong V (the rotary columns) differs more
    pool = pool.to(dtype)
    order = torch.randperm(num_pages, generator=g).tolist()
    table = torch.full((B, max_pages), -1, dtype=torch.int32)
    owned = torch.zeros(num_pages, PAGE, dtype=torch.bool)
    caches, at = [], 0
    for b in range(B):
        rows = []
        for j in range(need[b]):
            page = order[at]
            at += 1
            table[b, j] = page
            live = min(PAGE, kv_len[b] - j * PAGE)
            owned[page, :live] = True
            rows.append(pool[page, :live, 0].double())
        caches.append(torch.cat(rows).numpy() if rows else np.zeros((0, D)))
    pool[~owned] = poison
    q = torch.randn(B, Hq, L, D, generator=g).to(dtype)
    return q, pool, table, torch.tensor(kv_len, dtype=torch.int32), caches


def wrong_values_differ(q, caches, qo, want):
    """V read from the cache's last 512 columns (which hold the 64 rotary
    ones) gives another answer: the test can fail."""
    wrong, _ = reference(q, caches, qo, value_cols=slice(D - DV, D))
    rows = np.isfinite(want)
    assert np.abs(wrong[rows] - want[rows]).max() > 0.05


DECODE = [
    # (B, Hq, kv_len): page boundaries, a sequence of one key, ragged.
    (1, 16, [200]),
    (4, 128, [1, 64, 65, 191]),
    (64, 16, list(np.random.default_rng(7).integers(1, 160, 64))),
    (64, 128, list(np.random.default_rng(8).integers(1, 40, 64))),
]


@pytest.mark.parametrize("B,Hq,kv_len", DECODE)
def test_mla_decode_paged_f32(B, Hq, kv_len):
    q, pool, table, kv, caches = paged(B, Hq, 1, kv_len, seed=B + Hq)
    out, lse = kt.mla_attention(q, pool, block_table=table, kv_len=kv,
                                scale=SCALE, return_lse=True)
    assert out.shape == (B, Hq, 1, DV) and lse.shape == (B, Hq, 1)
    assert lse.dtype == torch.float32
    qo = kv.numpy() - 1
    want, want_lse = reference(q, caches, qo)
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=2e-5, atol=2e-5)
    wrong_values_differ(q, caches, qo, want)


@pytest.mark.parametrize("Hq", [16, 128])
def test_mla_decode_paged_bf16_inf_poison(Hq):
    q, pool, table, kv, caches = paged(3, Hq, 1, [150, 64, 7], seed=40,
                                       dtype=torch.bfloat16, poison=math.inf)
    out, lse = kt.mla_attention(q, pool, block_table=table,
                                cache_seqlens=kv, softmax_scale=SCALE,
                                return_lse=True)
    assert out.dtype == torch.bfloat16
    qo = kv.numpy() - 1
    want, want_lse = reference(q.double(), caches, qo)
    np.testing.assert_allclose(out.double().numpy(), want, atol=2e-2,
                               rtol=2e-2)
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=1e-3, rtol=1e-3)


def test_mla_mtp_rows_causal_at_explicit_positions():
    """L = 3 rows per sequence (MTP / speculative decoding) at explicit
    q_offset, causal: row 0 of batch 0 must not see keys 98 and 99; batch
    1's rows sit before every key but its first (position 0 sees key 0
    only); an f32 plain cache."""
    B, Hq, L, S = 2, 16, 3, 100
    g = torch.Generator().manual_seed(5)
    q = torch.randn(B, Hq, L, D, generator=g)
    cache = torch.randn(B, 1, S, D, generator=g)
    kv = torch.tensor([100, 40])
    qo = torch.tensor([97, 0])
    cache[1, :, 40:] = math.nan  # past kv_len[1]: never trusted
    out, lse = kt.mla_attention(q, cache, kv_len=kv, q_offset=qo,
                                scale=SCALE, return_lse=True)
    caches = [cache[0, 0].numpy(), cache[1, 0, :40].numpy()]
    want, want_lse = reference(q, caches, qo.numpy())
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=2e-5, atol=2e-5)
    full, _ = reference(q, caches, kv.numpy() - 1)
    assert np.abs(full[0, :, 0] - want[0, :, 0]).max() > 1e-3
    wrong_values_differ(q, caches, qo.numpy(), want)
    # Not causal: every valid key, whatever the positions.
    nc = kt.mla_attention(q, cache, kv_len=kv, q_offset=qo, causal=False,
                          scale=SCALE)
    want_nc, _ = reference(q, caches, qo.numpy(), causal=False)
    np.testing.assert_allclose(nc.numpy(), want_nc, rtol=2e-5, atol=2e-5)


def test_mla_bshd_layout_gqa_and_default_scale():
    """FlashMLA's layouts: q [B, L, Hq, D], a plain cache [B, S, Hkv, D]
    with Hkv = 2 latent heads (each its query group's), out [B, L, Hq, Dv],
    lse [B, Hq, L]; the default scale 1/sqrt(D); a smaller D and Dv."""
    B, L, Hq, Hkv, S, d, dv = 2, 2, 8, 2, 33, 80, 48
    g = torch.Generator().manual_seed(9)
    q = torch.randn(B, L, Hq, d, generator=g)
    cache = torch.randn(B, S, Hkv, d, generator=g)
    kv = torch.tensor([33, 20])
    out, lse = kt.mla_attention(q, cache, head_dim_v=dv, kv_len=kv,
                                layout="bshd", return_lse=True)
    assert out.shape == (B, L, Hq, dv) and lse.shape == (B, Hq, L)
    qb = q.transpose(1, 2).double().numpy()
    for h in range(Hkv):
        rows = slice(h * 4, h * 4 + 4)
        caches = [cache[b, :int(kv[b]), h].double().numpy() for b in range(B)]
        want, want_lse = reference(qb[:, rows], caches, kv.numpy() - L,
                                   scale=1 / math.sqrt(d), dv=dv)
        np.testing.assert_allclose(out.transpose(1, 2)[:, rows].numpy(), want,
                                   rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(lse[:, rows].numpy(), want_lse, rtol=2e-5,
                                   atol=2e-5)


def test_mla_out_and_lse_in_place():
    q, pool, table, kv, caches = paged(2, 16, 1, [70, 5], seed=11)
    out = torch.full((2, 16, 1, DV), 7.0)
    lse = torch.full((2, 16, 1), 7.0)
    got = kt.mla_attention(q, pool, block_table=table, kv_len=kv,
                           scale=SCALE, out=out, lse=lse)
    assert got[0] is out and got[1] is lse
    want, want_lse = reference(q, caches, kv.numpy() - 1)
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=2e-5, atol=2e-5)
    # out= alone returns out.
    out2 = torch.empty(2, 16, 1, DV)
    assert kt.mla_attention(q, pool, block_table=table, kv_len=kv,
                            scale=SCALE, out=out2) is out2
    assert torch.equal(out2, out)


def test_mla_split_form_without_a_copy():
    """FlashInfer's q_nope / q_pe / ckv_cache / kpe_cache, the caches the
    two column ranges of one buffer: the same answer as the one-buffer op;
    separately allocated caches are refused by name."""
    q, pool, table, kv, _ = paged(2, 16, 1, [70, 5], seed=12)
    want = kt.mla_attention(q, pool, block_table=table, kv_len=kv,
                            scale=SCALE)
    got = kt.mla_attention_split(q[..., :DV], q[..., DV:], pool[..., :DV],
                                 pool[..., DV:], block_table=table,
                                 kv_len=kv, scale=SCALE)
    assert torch.equal(got, want)
    # Separate query halves (a copy joins them): the same answer.
    got = kt.mla_attention_split(q[..., :DV].clone(), q[..., DV:].clone(),
                                 pool[..., :DV], pool[..., DV:],
                                 block_table=table, kv_len=kv, scale=SCALE)
    assert torch.equal(got, want)
    with pytest.raises(KVAttnError, match="two column ranges of one latent "
                       "cache"):
        kt.mla_attention_split(q[..., :DV], q[..., DV:],
                               pool[..., :DV].clone(), pool[..., DV:].clone(),
                               block_table=table, kv_len=kv)


def test_mla_torch_compile_fullgraph():
    q, pool, table, kv, caches = paged(2, 16, 1, [130, 64], seed=13)

    def step(q, pool, table, kv):
        out, lse = kt.mla_attention(q, pool, block_table=table, kv_len=kv,
                                    scale=SCALE, return_lse=True)
        return out * 2.0, lse

    torch._dynamo.reset()
    out, lse = torch.compile(step, fullgraph=True)(q, pool, table, kv)
    want, want_lse = reference(q, caches, kv.numpy() - 1)
    np.testing.assert_allclose(out.numpy(), 2 * want, rtol=2e-5, atol=4e-5)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=2e-5, atol=2e-5)


def test_mla_opcheck_and_fake_shapes():
    q, pool, table, kv, _ = paged(2, 16, 1, [70, 5], seed=14)
    qo = (kv - 1).to(torch.int64)
    args = (q, pool, qo, kv.to(torch.int64), table, DV, True, SCALE, "bhsd")
    torch.library.opcheck(torch.ops.kvattn.mla_attention, args,
                          test_utils=("test_schema", "test_faketensor",
                                      "test_autograd_registration"))
    out, lse = torch.empty(2, 16, 1, DV), torch.empty(2, 16, 1)
    torch.library.opcheck(torch.ops.kvattn.mla_attention_out,
                          args + (out, lse),
                          test_utils=("test_faketensor",
                                      "test_autograd_registration"))
    with torch._subclasses.fake_tensor.FakeTensorMode():
        fq = torch.empty(3, 1, 128, D)
        fo, fl = torch.ops.kvattn.mla_attention(
            fq, torch.empty(9, PAGE, 1, D), None,
            torch.empty(3, dtype=torch.int64),
            torch.empty(3, 2, dtype=torch.int32), DV, True, None, "bshd")
        assert fo.shape == (3, 1, 128, DV) and fl.shape == (3, 128, 1)


def test_mla_program_cache_one_compile_per_signature():
    kt.clear_program_cache()
    for n in ([70, 5], [130, 9], [1, 1]):
        q, pool, table, kv, _ = paged(2, 16, 1, n, seed=15)
        kt.mla_attention(q, pool, block_table=table, kv_len=kv, scale=SCALE)
    info = kt.program_cache_info()
    assert info["misses"] == 1 and info["hits"] == 2


def test_mla_misuse():
    q, pool, table, kv, _ = paged(2, 16, 1, [70, 5], seed=16)

    def call(**over):
        args = dict(query=q, kv_cache=pool, block_table=table, kv_len=kv)
        args.update(over)
        return kt.mla_attention(args.pop("query"), args.pop("kv_cache"),
                                **args)

    cases = [
        (dict(kv_cache=pool[..., :DV]), "kv_cache head dim 512 != query "
         "head dim 576"),
        (dict(head_dim_v=600), r"head_dim_v = 600 must be in \[1, D = "
         r"576\]"),
        (dict(head_dim_v=0), r"head_dim_v = 0 must be in"),
        (dict(query=torch.zeros(2, 16, 1, 640), kv_cache=torch.zeros(
            4, PAGE, 1, 640)), r"head dim D = 640 must be in \[1, 576\]"),
        (dict(query=q.double()), "query has dtype torch.float64"),
        (dict(kv_cache=pool.to(torch.bfloat16)), "kv_cache has dtype "
         "torch.bfloat16, query torch.float32"),
        (dict(kv_cache=pool.to("meta")), "kv_cache is on meta, query on cpu"),
        (dict(block_table=table.long()), "block_table has dtype torch.int64"
         "; it must be torch.int32"),
        (dict(block_table=table[:1]), r"block_table has shape \(1, 2\)"),
        (dict(kv_len=None), "a paged latent cache needs kv_len"),
        (dict(kv_len=[70]), "kv_len has 1 values for a batch of 2"),
        (dict(kv_len=[70, 5], cache_seqlens=[70, 5]), "give kv_len or its "
         "alias cache_seqlens, not both"),
        (dict(query=torch.zeros(2, 3, 1, D), kv_cache=torch.zeros(
            4, PAGE, 2, D)), "query heads Hq = 3 must be a multiple of kv "
         "heads Hkv = 2"),
        (dict(scale=0.0), "scale = 0.0 must be a positive finite number"),
        (dict(kv_scale=torch.ones(1)), "kv_scale dequantises an FP8 latent "
         "cache, but kv_cache is torch.float32"),
        (dict(out=torch.empty(2, 16, 1, D)), r"out has shape \(2, 16, 1, "
         r"576\), the attention writes \(2, 16, 1, 512\)"),
        (dict(lse=torch.empty(2, 16, 1, dtype=torch.float16)), "lse has "
         "dtype torch.float16; it must be torch.float32"),
        (dict(layout="sbhd"), "layout must be 'bhsd'"),
        (dict(query=torch.zeros(2, 16, 1, D)[..., ::2]), "query: the head dim "
         "is not contiguous"),
    ]
    for over, message in cases:
        with pytest.raises(KVAttnError, match=message):
            call(**over)
    # A plain cache of another batch (a paged one needs block_table).
    with pytest.raises(KVAttnError, match="batch sizes differ: query 2, "
                       "kv_cache 3"):
        kt.mla_attention(q, torch.zeros(3, 1, 10, D))
    # Metadata values: the C API's checks, the reference's messages.
    with pytest.raises(KVAttnError, match=r"block_table\[0\]\[1\] = 99"):
        bad = table.clone()
        bad[0, 1] = 99
        call(block_table=bad)
    with pytest.raises(KVAttnError, match=r"q_offset\[1\] = -1 is negative"):
        call(q_offset=[3, -1])


# --- FP8 latent caches: kv_cache torch.float8_e4m3fn / float8_e5m2 read as
# code * kv_scale (the scores' K and the V inside it) ----------------------

FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


def quantize(pool, fmt, gran):
    """The pool's FP8 codes and kv_scale ("tensor": [1]; "token": [num_pages,
    page, Hkv], amax / the format's largest value, vLLM's recipe); NaN/Inf
    slots stay non-finite codes."""
    finite = pool.nan_to_num(0.0, posinf=0.0, neginf=0.0)
    if gran == "tensor":
        scale = (finite.abs().amax() / FP8_MAX[fmt]).reshape(1)
        codes = (pool / scale).to(fmt)
    else:
        scale = (finite.abs().amax(-1) / FP8_MAX[fmt]).clamp_min(1e-6)
        codes = (pool / scale[..., None]).to(fmt)
    return codes, scale.float()


@pytest.mark.parametrize("fmt", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("gran", ["tensor", "token"])
def test_mla_fp8_cache(fmt, gran):
    """The op over an FP8 latent cache against the float64 reference over
    the dequantised cache (f32 query: 2e-5 of the largest |out|); the
    scale matters; and the accuracy against the unquantised f32 cache, the
    figures docs/semantics.md reports (max |error| over the largest |out|,
    and the RMS error over the RMS output; the bounds are about 1.5 x the
    measured ones)."""
    B, Hq = 3, 16
    q, pool, table, kv, _ = paged(B, Hq, 1, [130, 5, 64], seed=20,
                                  poison=math.nan)
    codes, scale = quantize(pool, fmt, gran)
    out, lse = kt.mla_attention(q, codes, block_table=table, kv_len=kv,
                                kv_scale=scale, scale=SCALE, return_lse=True)
    deq = codes.double() * (scale.double().reshape(()) if gran == "tensor"
                            else scale.double()[..., None])
    gather = lambda p: [torch.cat([p[table[b, j], :min(PAGE, int(kv[b]) -
                                                        j * PAGE), 0]
                                   for j in range(-(-int(kv[b]) // PAGE))])
                        .numpy() for b in range(B)]
    qo = kv.numpy() - 1
    want, want_lse = reference(q, gather(deq), qo)
    peak = np.abs(want).max()
    np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=2e-5 * peak)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=2e-5, atol=2e-5)
    raw, _ = reference(q, gather(codes.double()), qo)
    assert np.abs(raw - want).max() > 0.05  # the scale matters
    # Accuracy against the f32 cache the codes quantise.
    exact, _ = reference(q, gather(pool.double()), qo)
    diff = out.numpy() - exact
    err = np.abs(diff).max() / np.abs(exact).max()
    rms = np.sqrt((diff ** 2).mean() / (exact ** 2).mean())
    print(f"ACCURACY {fmt} {gran} max {err:.4f} rms {rms:.4f}")
    e4m3 = fmt == torch.float8_e4m3fn
    assert err < (0.08 if e4m3 else 0.16) and rms < (0.06 if e4m3 else 0.12)


def test_mla_fp8_bshd_plain_cache_and_misuse():
    """A plain bshd cache [B, S, Hkv, D] in e4m3 with per-token scales
    [B, S, Hkv] (the cache's shape without D), bf16 query; and the FP8
    misuse by name."""
    B, L, Hq, Hkv, S, d, dv = 2, 1, 8, 1, 40, 96, 64
    g = torch.Generator().manual_seed(21)
    q = torch.randn(B, L, Hq, d, generator=g).to(torch.bfloat16)
    cache = torch.randn(B, S, Hkv, d, generator=g)
    codes, scale = quantize(cache, torch.float8_e4m3fn, "token")
    kv = torch.tensor([40, 17])
    out = kt.mla_attention(q, codes, head_dim_v=dv, kv_len=kv, kv_scale=scale,
                           layout="bshd")
    deq = codes.double() * scale.double()[..., None]
    caches = [deq[b, :int(kv[b]), 0].numpy() for b in range(B)]
    want, _ = reference(q.transpose(1, 2).double().numpy(), caches,
                        kv.numpy() - 1, scale=1 / math.sqrt(d), dv=dv)
    np.testing.assert_allclose(out.transpose(1, 2).double().numpy(), want,
                               atol=2e-2, rtol=2e-2)
    for kw, message in [
            (dict(), "an FP8 latent cache .* needs kv_scale"),
            (dict(kv_scale=scale.double()), "kv_scale has dtype "
             "torch.float64; it must be torch.float32"),
            (dict(kv_scale=torch.ones(3)), r"kv_scale has shape \(3,\): a "
             r"latent cache's scale is per tensor \[1\], per KV head \[Hkv\] "
             r"= \[1\] or per token \[2, 40, 1\]"),
            (dict(kv_scale=scale.to("meta")), "kv_scale is on meta, query on "
             "cpu")]:
        with pytest.raises(KVAttnError, match=message):
            kt.mla_attention(q, codes, head_dim_v=dv, kv_len=kv,
                             layout="bshd", **kw)
    with pytest.raises(KVAttnError, match=r"k_scale\[0\] = 0 must be "
                       "positive and finite"):
        kt.mla_attention(q, codes, head_dim_v=dv, kv_len=kv, layout="bshd",
                         kv_scale=torch.zeros(1))


def test_mla_fp8_torch_compile():
    q, pool, table, kv, _ = paged(2, 16, 1, [70, 5], seed=22)
    codes, scale = quantize(pool, torch.float8_e5m2, "token")
    f = torch.compile(lambda *a: kt.mla_attention(
        a[0], a[1], block_table=a[2], kv_len=a[3], kv_scale=a[4],
        scale=SCALE), fullgraph=True)
    torch._dynamo.reset()
    got = f(q, codes, table, kv, scale)
    want = kt.mla_attention(q, codes, block_table=table, kv_len=kv,
                            kv_scale=scale, scale=SCALE)
    assert torch.equal(got, want)
