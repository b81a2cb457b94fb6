"""kvattn.torch's CUDA kernels (the kvattn runtime on torch's current
stream), for a machine with a GPU: test/gpu/run-gpu-checks.sh runs this file.
Never executed without one (no GPU was available when it was written)."""

import pytest
import torch

import kvattn.torch as kt

if not torch.cuda.is_available():  # run-gpu-checks.sh runs it on a GPU only
    pytest.fail("test_cuda.py needs a CUDA device", pytrace=False)


def make(dtype, B=2, Hq=8, Hkv=2, L=5, S=70, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g).to(dtype) for s in
            ((B, Hq, L, D), (B, Hkv, S, D), (B, Hkv, S, D))]


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4),
                                        (torch.bfloat16, 2e-2)])
def test_cuda_matches_the_cpu_op(dtype, tol):
    q, k, v = make(dtype)
    want = kt.attention(q, k, v, kv_len=[70, 41])
    qc, kc, vc = (t.cuda() for t in (q, k, v))
    out = torch.empty_like(qc)
    ptr = out.data_ptr()
    got = kt.attention(qc, kc, vc, kv_len=[70, 41], out=out)
    assert got is out and out.data_ptr() == ptr  # written in place
    torch.cuda.synchronize()
    assert (out.cpu().float() - want.float()).abs().max() < tol


def test_cuda_on_a_side_stream_and_bshd():
    q, k, v = make(torch.bfloat16, seed=1)
    want = kt.attention(q, k, v)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        qs, ks, vs = (t.cuda().transpose(1, 2).contiguous() for t in (q, k, v))
        out = kt.attention(qs, ks, vs, layout="bshd")
    side.synchronize()
    assert (out.transpose(1, 2).cpu().float() - want.float()).abs().max() \
        < 2e-2


def test_cuda_torch_compile_fullgraph():
    q, k, v = (t.cuda() for t in make(torch.float32, seed=2))
    f = torch.compile(lambda q, k, v: kt.attention(q, k, v) + 1,
                      fullgraph=True, backend="aot_eager")
    assert torch.allclose(f(q, k, v), kt.attention(q, k, v) + 1, atol=1e-5)


def test_cuda_positions_stay_on_the_device_and_check():
    """q_offset/kv_len as CUDA tensors: no host copy; a bad kv_len is
    recorded on the device and raised by kt.check()."""
    q, k, v = (t.cuda() for t in make(torch.float32, seed=3))
    kv = torch.tensor([70, 41], device="cuda")
    want = kt.attention(*(t.cpu() for t in (q, k, v)), kv_len=[70, 41])
    got = kt.attention(q, k, v, kv_len=kv)
    kt.check()
    assert (got.cpu() - want).abs().max() < 1e-4
    kt.attention(q, k, v, kv_len=torch.tensor([70, 71], device="cuda"))
    with pytest.raises(kt.KVAttnError, match=r"kv_len\[1\] = 71"):
        kt.check()


def test_cuda_append():
    cache = torch.randn(2, 2, 11, 16)
    update = torch.randn(2, 2, 3, 16)
    want = kt.append(cache.clone(), update, [4, 8])
    got = kt.append(cache.cuda(), update.cuda(),
                    torch.tensor([4, 8], device="cuda"))
    kt.check()
    assert torch.equal(got.cpu(), want)
    kt.append(got, update.cuda(), torch.tensor([4, 9], device="cuda"))
    with pytest.raises(kt.KVAttnError, match=r"pos\[1\] = 9"):
        kt.check()


def test_cuda_plan_decode_step_matches_the_cpu_plan():
    g = torch.Generator().manual_seed(5)
    fields = dict(dtype=torch.bfloat16, num_query_heads=8, num_kv_heads=2,
                  head_dim=64, page_size=16, append=True)
    kp = torch.randn(8, 16, 2, 64, generator=g).bfloat16()
    vp = torch.randn(8, 16, 2, 64, generator=g).bfloat16()
    table = torch.tensor([[3, 0, -1], [5, 6, 1]], dtype=torch.int32)
    kv_len = torch.tensor([20, 40], dtype=torch.int32)
    q = torch.randn(2, 8, 1, 64, generator=g).bfloat16()
    uk = torch.randn(2, 2, 1, 64, generator=g).bfloat16()
    uv = torch.randn(2, 2, 1, 64, generator=g).bfloat16()
    cpu = kt.Plan(**fields)
    ck, cv = kp.clone(), vp.clone()
    want = cpu.run(q, ck, cv, kv_len - 1, kv_len, block_table=table,
                   update_k=uk, update_v=uv)
    plan = kt.Plan(**fields, device="cuda", max_batch=4, max_query_len=1,
                   max_pages=4)
    c = lambda t: t.cuda()  # noqa: E731
    dk, dv = c(kp), c(vp)
    step = torch.compile(
        lambda q, k, v, uk, uv, kv, t: plan.run(q, k, v, kv - 1, kv,
                                                block_table=t, update_k=uk,
                                                update_v=uv),
        fullgraph=True, backend="aot_eager")
    got = step(c(q), dk, dv, c(uk), c(uv), c(kv_len), c(table))
    plan.check()
    assert (got.cpu().float() - want.float()).abs().max() < 2e-2
    assert torch.equal(dk.cpu(), ck) and torch.equal(dv.cpu(), cv)
    bad = torch.tensor([[3, 0, -1], [5, 9, 1]], dtype=torch.int32)
    plan.run(c(q), dk, dv, c(kv_len - 1), c(kv_len), block_table=c(bad),
             update_k=c(uk), update_v=c(uv))
    with pytest.raises(kt.KVAttnError, match=r"block_table\[1\]\[1\] = 9"):
        plan.check()


# --- the ops added after the first version of this file: MLA, its cache
# write, tree attention, RoPE tables. Each against the op's CPU path (which
# the CPU suite checks against float64 references); the same code runs on
# the emulated GPU in python/torch_emulated_tests.

def test_cuda_mla_attention_paged_matches_the_cpu_op():
    """DeepSeek's latent decode: 128 query heads of 576 over one paged
    576-wide cache row per token (Dv = 512), bf16, NaN in the unused
    slots; out and lse."""
    g = torch.Generator().manual_seed(11)
    B, Hq, D, page = 3, 128, 576, 64
    kv_len = torch.tensor([150, 64, 7], dtype=torch.int32)
    pool = torch.full((8, page, 1, D), float("nan"))
    table = torch.tensor([[5, 2, 7], [0, -1, -1], [3, -1, -1]],
                         dtype=torch.int32)
    for b in range(B):
        for p in range((int(kv_len[b]) + page - 1) // page):
            rows = min(page, int(kv_len[b]) - p * page)
            pool[table[b, p], :rows] = torch.randn(rows, 1, D, generator=g)
    pool = pool.bfloat16()
    q = torch.randn(B, Hq, 1, D, generator=g).bfloat16()
    scale = 1.0 / 192 ** 0.5
    want, want_lse = kt.mla_attention(q, pool, block_table=table,
                                      kv_len=kv_len, scale=scale,
                                      return_lse=True)
    got, lse = kt.mla_attention(q.cuda(), pool.cuda(),
                                block_table=table.cuda(),
                                kv_len=kv_len.cuda(), scale=scale,
                                return_lse=True)
    kt.check()
    assert (got.cpu().float() - want.float()).abs().max() < 2e-2
    assert (lse.cpu() - want_lse).abs().max() < 1e-3 * (1 + want_lse.abs()
                                                         .max())


def test_cuda_concat_and_cache_mla_writes_the_slots():
    """vLLM's cache write: each token's [kv_c, k_pe] at its slot, nothing
    else touched; a slot past the cache is recorded on the device."""
    g = torch.Generator().manual_seed(12)
    kv_c = torch.randn(5, 512, generator=g).bfloat16()
    k_pe = torch.randn(5, 64, generator=g).bfloat16()
    slots = torch.tensor([130, 64, 65, 3, 131])
    cache = torch.full((4, 64, 576), float("nan")).bfloat16()
    want = cache.clone()
    kt.concat_and_cache_mla(kv_c, k_pe, want, slots)
    got = cache.cuda()
    kt.concat_and_cache_mla(kv_c.cuda(), k_pe.cuda(), got, slots.cuda())
    kt.check()
    assert torch.equal(got.cpu().view(torch.int16),
                       want.view(torch.int16))  # NaN rows bit for bit
    with pytest.raises(kt.KVAttnError):
        kt.concat_and_cache_mla(kv_c.cuda(), k_pe.cuda(), got,
                                torch.tensor([1, 2, 3, 4, 256]).cuda())
        kt.check()


def test_cuda_concat_and_cache_mla_skips_padding_slots():
    """vLLM's padded batch on CUDA: slot -1 writes nothing and is not
    reported (the same bytes as the CPU op's, in a cache of random bytes);
    slot -2 is recorded on the device as its token's negative position."""
    g = torch.Generator().manual_seed(13)
    kv_c = torch.randn(6, 512, generator=g).bfloat16()
    k_pe = torch.randn(6, 64, generator=g).bfloat16()
    slots = torch.tensor([-1, 130, -1, 3, 255, -1], dtype=torch.int32)
    cache = torch.randint(0, 256, (4, 64, 576 * 2), dtype=torch.uint8,
                          generator=g).view(torch.bfloat16)
    want = cache.clone()
    kt.concat_and_cache_mla(kv_c, k_pe, want, slots)
    got = cache.cuda()
    kt.concat_and_cache_mla(kv_c.cuda(), k_pe.cuda(), got, slots.cuda())
    kt.check()
    assert torch.equal(got.cpu().view(torch.int16), want.view(torch.int16))
    with pytest.raises(kt.KVAttnError, match=r"pos\[1\] = -2 is negative"):
        kt.concat_and_cache_mla(kv_c.cuda(), k_pe.cuda(), got,
                                torch.tensor([3, -2, 4, -1, 5, 6]).cuda())
        kt.check()
    assert torch.equal(got.cpu().view(torch.int16), want.view(torch.int16))


def test_cuda_tree_attention_matches_the_cpu_op():
    """A ragged batch of a decode row, a draft tree of depth 4 and
    branching 3, and another decode row, bf16."""
    from kvattn import tree as ktree
    g = torch.Generator().manual_seed(13)
    parents = torch.tensor([-1] + ktree.complete_tree(4, 3) + [-1])
    cu = torch.tensor([0, 1, 122, 123])
    kv = torch.tensor([300, 380, 77])
    T, Hq, Hkv, S, D = 123, 4, 2, 400, 64
    q = torch.randn(T, Hq, D, generator=g).bfloat16()
    k = torch.randn(3, Hkv, S, D, generator=g).bfloat16()
    v = torch.randn(3, Hkv, S, D, generator=g).bfloat16()
    want = kt.tree_attention(q, k, v, cu, kv, tree_parents=parents)
    # (Index tensors live on the query's device: CPU ones are refused by
    # name.)
    got = kt.tree_attention(q.cuda(), k.cuda(), v.cuda(), cu.cuda(),
                            kv.cuda(), tree_parents=parents.cuda())
    kt.check()
    assert (got.cpu().float() - want.float()).abs().max() < 2e-2


def test_cuda_two_sided_window_matches_the_cpu_op():
    """window_size = (left, right) without causal (a two-sided window), bf16."""
    q, k, v = make(torch.bfloat16, seed=16)
    kw = dict(causal=False, window_size=(8, 4), q_offset=[30, 10],
              kv_len=[70, 41])
    want = kt.attention(q, k, v, **kw)
    got = kt.attention(q.cuda(), k.cuda(), v.cuda(), **kw)
    kt.check()
    assert (got.cpu().float() - want.float()).abs().max() < 2e-2


def test_cuda_cascades_match_the_cpu_ops():
    """Shared-prefix attention on CUDA (the prefix, suffix and merge
    kernels), contiguous and over one pool of 16-token pages, bf16."""
    g = torch.Generator().manual_seed(15)
    cu, kv = torch.tensor([0, 1, 6, 8]), torch.tensor([17, 40, 30])
    q = torch.randn(8, 4, 64, generator=g).bfloat16()
    pk, pv = (torch.randn(1, 2, 96, 64, generator=g).bfloat16()
              for _ in range(2))
    k, v = (torch.randn(3, 2, 48, 64, generator=g).bfloat16()
            for _ in range(2))
    want = kt.cascade_attention(q, pk, pv, k, v, cu, kv)
    got = kt.cascade_attention(q.cuda(), pk.cuda(), pv.cuda(), k.cuda(),
                               v.cuda(), cu.cuda(), kv.cuda())
    kt.check()
    assert (got.cpu().float() - want.float()).abs().max() < 2e-2
    kc = torch.randn(16, 16, 2, 64, generator=g).bfloat16()
    vc = torch.randn(16, 16, 2, 64, generator=g).bfloat16()
    pages = torch.tensor([9, 2, 14, 5, 11, 0, -1])
    table = torch.tensor([[3, 4, -1], [6, 7, 8], [10, 12, -1]])
    want = kt.paged_cascade_attention(q, kc, vc, pages, 96, table, cu, kv)
    got = kt.paged_cascade_attention(q.cuda(), kc.cuda(), vc.cuda(),
                                     pages.cuda(), 96, table.cuda(),
                                     cu.cuda(), kv.cuda())
    kt.check()
    assert (got.cpu().float() - want.float()).abs().max() < 2e-2


def test_cuda_rope_tables_match_the_cpu_op():
    """RoPE from cos/sin tables (Llama 3 scaling, any frequencies) applied to
    the query at its positions, bf16."""
    g = torch.Generator().manual_seed(14)
    q, k, v = make(torch.bfloat16, D=64, seed=14)
    angles = torch.rand(128, 32, generator=g) * 6.283
    cos, sin = angles.cos(), angles.sin()
    kw = dict(q_offset=[65, 30], kv_len=[70, 35])
    want = kt.attention(q, k, v, rotary_cos=cos, rotary_sin=sin, **kw)
    got = kt.attention(q.cuda(), k.cuda(), v.cuda(), rotary_cos=cos.cuda(),
                       rotary_sin=sin.cuda(), **kw)
    kt.check()
    assert (got.cpu().float() - want.float()).abs().max() < 2e-2
