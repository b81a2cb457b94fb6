"""kvattn.torch.Plan(latent=True) (torch.ops.kvattn.plan_latent_run;
docs/torch.md "Serving plans"): DeepSeek MLA's absorbed decode as a
serving plan, on the CPU against the NumPy float64 reference of
test_mla.py (V built from the cache's own first Dv columns). A decode loop
whose appends write each new token's 576-wide latent row into the paged
cache before attending (bf16 and f32; checked every step, the new row
included: without it the answer differs), a plain cache with MTP rows, an
FP8 (e4m3) paged cache whose appends quantise the new rows with their
per-token k_scale, torch.compile(fullgraph=True) and opcheck, and the
misuse by name. Tolerances as test_mla.py: f32 2e-5, bf16 2e-2 (out),
FP8 against the dequantised codes in float64 2e-5 (f32 query)."""

import math

import numpy as np
import pytest
import torch

import kvattn
import kvattn.torch as kt
from test_mla import D, DV, PAGE, SCALE, paged, reference

I32 = torch.int32


def latent_plan(dtype, Hq, append=True, page_size=PAGE, **kw):
    return kt.Plan(dtype=dtype, num_query_heads=Hq, num_kv_heads=1,
                   head_dim=D, value_head_dim=DV, page_size=page_size,
                   latent=True, append=append, scale=SCALE, **kw)


def logical(pool, table, n):
    """The first n latent rows [n, D] (float64) of a sequence's pages."""
    rows = torch.cat([pool[p, :, 0] for p in table.tolist() if p >= 0], 0)
    return rows[:n].double().numpy()


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-5),
                                        (torch.bfloat16, 2e-2)])
def test_latent_plan_paged_decode_loop_with_appends(dtype, tol):
    """Three decode steps of B = 3 sequences (16 heads, paged 64, NaN in
    every slot no key owns, one sequence crossing a page boundary): each
    step's update_k row is written at q_offset = kv_len (before the step)
    and the step attends over kv_len + 1 keys, its own row included."""
    g = torch.Generator().manual_seed(5)
    B, Hq = 3, 16
    q0, pool, table, kv, _ = paged(B, Hq, 1, [63, 10, 128], seed=21,
                                   dtype=dtype, extra_pages=2)
    # Room for the new tokens: a second page for the 128-key sequence.
    spare = [p for p in range(pool.shape[0]) if p not in table.tolist()[0]
             + table.tolist()[1] + table.tolist()[2]]
    table = torch.cat([table, torch.full((B, 1), -1, dtype=I32)], 1)
    table[0, 1] = spare[0]  # 63 keys: the 2nd new one opens page 2
    table[2, 2] = spare[1]  # 128 keys: the first new one opens page 3
    plan = latent_plan(dtype, Hq, max_batch=4, max_query_len=1)
    length = kv.clone()
    for step in range(3):
        q = torch.randn(B, Hq, 1, D, generator=g).to(dtype)
        new = torch.randn(B, 1, 1, D, generator=g).to(dtype)
        pos = length.clone()
        out = plan.run(q, pool, q_offset=pos, kv_len=pos + 1,
                       block_table=table, update_k=new)
        length += 1
        caches = [logical(pool, table[b], int(length[b])) for b in range(B)]
        for b in range(B):  # the row landed where the table says
            assert np.array_equal(caches[b][-1],
                                  new[b, 0, 0].double().numpy())
        want, _ = reference(q.double().numpy(), caches, pos.numpy())
        got = out.double().numpy()
        assert np.abs(got - want).max() < tol, step
        # Without the new row (its query's own key) the answer differs.
        old, _ = reference(q.double().numpy(), [c[:-1] for c in caches],
                           pos.numpy() - 1)
        assert np.abs(old - want).max() > 10 * tol
    plan.close()


def test_latent_plan_plain_cache_mtp_rows():
    """A plain latent cache [B, 1, S, D] without append: L = 2 MTP rows at
    q_offset = kv_len - 2 (causal between them), ragged kv_len, NaN past
    kv_len; f32 against the reference, and V read from the wrong columns
    is far off."""
    g = torch.Generator().manual_seed(8)
    B, Hq, L, S = 2, 16, 2, 96
    cache = torch.randn(B, 1, S, D, generator=g)
    cache[..., DV:] *= 2.0
    kv = torch.tensor([96, 41], dtype=I32)
    cache[1, :, 41:] = float("nan")
    q = torch.randn(B, Hq, L, D, generator=g)
    plan = latent_plan(torch.float32, Hq, append=False, page_size=0)
    out = plan.run(q, cache, q_offset=kv - L, kv_len=kv)
    caches = [cache[b, 0, :int(kv[b])].double().numpy() for b in range(B)]
    want, _ = reference(q.double().numpy(), caches, (kv - L).numpy())
    assert out.shape == (B, Hq, L, DV)
    assert np.abs(out.double().numpy() - want).max() < 2e-5
    wrong, _ = reference(q.double().numpy(), caches, (kv - L).numpy(),
                         value_cols=slice(D - DV, D))
    assert np.abs(wrong - want).max() > 0.05
    plan.close()


def test_latent_plan_fp8_cache_quantises_the_new_rows():
    """An e4m3 paged latent cache with per-token k_scale ([num_pages, 64,
    1]): the append writes RN(row / scale) at its slot (the codes torch's
    own conversion gives, the rows kept inside e4m3's range), and the
    attention reads code * scale for K and for V (its first 512 columns):
    f32 query, 2e-5 against float64 over the dequantised cache."""
    g = torch.Generator().manual_seed(13)
    fmt, B, Hq = torch.float8_e4m3fn, 2, 16
    pool = (torch.rand(4, PAGE, 1, D, generator=g) * 8 - 4).to(fmt)
    ks = torch.rand(4, PAGE, 1, generator=g) + 0.25
    table = torch.tensor([[2, 0], [1, -1]], dtype=I32)
    pos = torch.tensor([70, 12], dtype=I32)
    new = torch.randn(B, 1, 1, D, generator=g) * 2
    q = torch.randn(B, Hq, 1, D, generator=g)
    plan = latent_plan(torch.float32, Hq, kv_dtype=fmt, kv_scales="token")
    codes = pool.clone()
    out = plan.run(q, codes, q_offset=pos, kv_len=pos + 1, block_table=table,
                   update_k=new, k_scale=ks)
    for b in range(B):
        p, r = int(table[b, int(pos[b]) // PAGE]), int(pos[b]) % PAGE
        want_codes = (new[b, 0, 0] / ks[p, r, 0]).to(fmt)
        assert torch.equal(codes[p, r, 0].view(torch.uint8),
                           want_codes.view(torch.uint8))
    deq = codes.float() * ks[..., None]
    caches = [logical(deq, table[b], int(pos[b]) + 1) for b in range(B)]
    want, _ = reference(q.double().numpy(), caches, pos.numpy())
    assert np.abs(out.double().numpy() - want).max() < 2e-5
    plan.close()


def test_latent_plan_torch_compile_and_opcheck():
    g = torch.Generator().manual_seed(3)
    Hq = 16
    plan = latent_plan(torch.float32, Hq)
    pool = torch.randn(3, PAGE, 1, D, generator=g)
    table = torch.tensor([[2, 0], [1, -1]], dtype=I32)
    kv_len = torch.tensor([70, 9], dtype=I32)
    q = torch.randn(2, Hq, 1, D, generator=g)
    new = torch.randn(2, 1, 1, D, generator=g)

    def step(q, pool, new, kv_len, table):
        out = plan.run(q * 2, pool, q_offset=kv_len - 1, kv_len=kv_len,
                       block_table=table, update_k=new)
        return out.sum(-1)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    pc = pool.clone()
    got = compiled(q, pc, new, kv_len, table)
    want = step(q, pool, new, kv_len, table)
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.equal(pc, pool)  # the same rows written
    torch.library.opcheck(torch.ops.kvattn.plan_latent_run.default,
                          (plan.id, q, pool.clone(), new, kv_len - 1, kv_len,
                           table, None, None, None,
                           torch.empty(2, Hq, 1, DV)))
    plan.close()


def _latent_args():
    g = torch.Generator().manual_seed(1)
    return dict(query=torch.randn(2, 16, 1, D, generator=g),
                key=torch.randn(3, PAGE, 1, D, generator=g),
                q_offset=torch.tensor([5, 2], dtype=I32),
                kv_len=torch.tensor([6, 3], dtype=I32),
                block_table=torch.tensor([[2, 0], [1, -1]], dtype=I32),
                update_k=torch.randn(2, 1, 1, D, generator=g))


def _latent_with(change, **fields):
    def call():
        plan = latent_plan(torch.float32, 16, **fields)
        args = _latent_args()
        args.update(change(args))
        args = {k: v for k, v in args.items() if v is not None}
        return plan.run(args.pop("query"), args.pop("key"), **args)
    return call


@pytest.mark.parametrize("call, message", [
    (_latent_with(lambda a: {"value": a["key"].clone()}),
     "value is given, but a latent plan takes none: V is the first "
     "value_head_dim columns"),
    (_latent_with(lambda a: {"update_v": a["update_k"][..., :DV]}),
     "update_v is given, but a latent plan takes none: update_k holds the "
     "new tokens' whole latent rows"),
    (_latent_with(lambda a: {"update_k": a["update_k"][..., :DV]}),
     r"update_k has shape \(2, 1, 1, 512\); the plan takes \[2, 1, 1, "
     r"576\]"),
    (_latent_with(lambda a: {"update_k": None}), "update_k is missing"),
    (_latent_with(lambda a: {"key": a["key"][..., :DV]}),
     r"key has shape \(3, 64, 1, 512\); the plan takes \[num_pages, 64, 1, "
     r"576\]"),
    (_latent_with(lambda a: {"k_scale": torch.ones(1)}),
     r"k_scale is given, but the plan takes none \(plan it with kv_dtype"),
    (_latent_with(lambda a: {"k_scale": torch.ones(1),
                             "v_scale": torch.ones(1),
                             "key": a["key"].to(torch.float8_e4m3fn)},
                  kv_dtype=torch.float8_e4m3fn),
     "v_scale is given, but a latent plan takes none: k_scale dequantises"),
    (_latent_with(lambda a: {"key": a["key"].to(torch.float8_e4m3fn)},
                  kv_dtype=torch.float8_e4m3fn),
     "k_scale is missing"),
    (_latent_with(lambda a: {"kv_len": torch.tensor([6, 300], dtype=I32)}),
     r"kv_len\[1\] = 300 does not fit"),
    (lambda: kt.Plan(dtype=torch.float32, num_query_heads=16,
                     num_kv_heads=1, head_dim=D, latent=1),
     "latent must be a bool, got 1"),
    (lambda: kt.Plan(dtype=torch.float32, num_query_heads=16,
                     num_kv_heads=1, head_dim=D, value_head_dim=640,
                     latent=True),
     "value_head_dim = 640 exceeds head_dim = 576 with latent"),
    (lambda: kt.Plan(dtype=torch.float32, num_query_heads=16,
                     num_kv_heads=1, head_dim=D, latent=True, varlen=True,
                     append=True),
     "append with varlen"),
])
def test_latent_plan_misuse_is_a_kvattn_error(call, message):
    with pytest.raises(kvattn.KVAttnError, match=message):
        call()


# --- kt.concat_and_cache_mla: vLLM's latent cache write ----------------------

@pytest.mark.parametrize("dtype, layout", [(torch.float32, "vllm"),
                                           (torch.bfloat16, "flashmla")])
def test_concat_and_cache_mla_then_attend(dtype, layout):
    """T = 5 tokens of 3 sequences written at their slots (in two blocks,
    one token per block row, out of order) into a NaN-filled cache
    ([num_blocks, 64, 576] as vLLM's, or FlashMLA's [.., 1, 576]): each
    slot holds [kv_c, k_pe] exactly and nothing else is touched; then
    mla_attention over the cache sees them (float64 reference; the new rows
    are the only keys of their sequences' last positions)."""
    g = torch.Generator().manual_seed(17)
    T, blocks = 5, 4
    kv_c = torch.randn(T, DV, generator=g).to(dtype)
    k_pe = torch.randn(T, D - DV, generator=g).to(dtype)
    shape = (blocks, PAGE, D) if layout == "vllm" else (blocks, PAGE, 1, D)
    cache = torch.full(shape, float("nan"), dtype=dtype)
    slots = torch.tensor([130, 64, 65, 3, 131], dtype=torch.int64)
    kt.concat_and_cache_mla(kv_c, k_pe, cache, slots)
    flat = cache.reshape(-1, D)
    for t, s in enumerate(slots.tolist()):
        assert torch.equal(flat[s], torch.cat([kv_c[t], k_pe[t]]))
    written = torch.zeros(flat.shape[0], dtype=torch.bool)
    written[slots] = True
    assert torch.isnan(flat[~written].float()).all()
    # Sequence 0: slots 64, 65 (block 1); sequence 1: 130, 131 (block 2);
    # sequence 2: slot 3 (block 0).
    table = torch.tensor([[1], [2], [0]], dtype=I32)
    kv_len = torch.tensor([2, 4, 4], dtype=I32)
    flat[128:130] = torch.randn(2, D, generator=g).to(dtype)  # seq 1 rows
    flat[0:3] = torch.randn(3, D, generator=g).to(dtype)      # seq 2 rows
    q = torch.randn(3, 16, 1, D, generator=g).to(dtype)
    pool = cache.reshape(blocks, PAGE, 1, D)
    out = kt.mla_attention(q, pool, block_table=table, kv_len=kv_len,
                           scale=SCALE)
    caches = [logical(pool, table[b], int(kv_len[b])) for b in range(3)]
    want, _ = reference(q.double().numpy(), caches, (kv_len - 1).numpy())
    tol = 2e-5 if dtype == torch.float32 else 2e-2
    assert np.abs(out.double().numpy() - want).max() < tol


@pytest.mark.parametrize("fmt, name", [(torch.float8_e4m3fn, "fp8"),
                                       (torch.float8_e5m2, "fp8_e5m2")])
def test_concat_and_cache_mla_fp8(fmt, name):
    """An FP8 latent cache with vLLM's one scale: each slot holds
    RN(row / scale), the codes torch's own conversion gives (rows inside the
    format's range), slot_mapping int32."""
    g = torch.Generator().manual_seed(19)
    T = 4
    kv_c, k_pe = torch.randn(T, DV, generator=g), torch.randn(T, 64,
                                                                generator=g)
    cache = torch.zeros(2, PAGE, D, dtype=fmt)
    scale = torch.tensor([0.375])
    slots = torch.tensor([5, 70, 6, 127], dtype=I32)
    kt.concat_and_cache_mla(kv_c, k_pe, cache, slots, name, scale)
    flat = cache.reshape(-1, D).view(torch.uint8)
    for t, s in enumerate(slots.tolist()):
        want = (torch.cat([kv_c[t], k_pe[t]]) / 0.375).to(fmt)
        assert torch.equal(flat[s], want.view(torch.uint8))


def _random_cache(shape, dtype, g):
    """A cache whose every byte is set (random bit patterns, NaN codes
    included), so that any stray write shows."""
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype, name, layout", [
    (torch.bfloat16, "auto", "vllm"), (torch.float32, "auto", "flashmla"),
    (torch.float8_e4m3fn, "fp8", "vllm"),
    (torch.float8_e5m2, "fp8_e5m2", "flashmla")])
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_concat_and_cache_mla_padding_slots(dtype, name, layout, slot_dtype):
    """vLLM's padded batch: slot -1 (CUDA graphs pad the batch with such
    tokens) writes nothing, the real tokens among them their rows. The
    cache is random bytes everywhere; afterwards it equals, byte for byte,
    the cache with only the real tokens' rows replaced (kv_c/k_pe in the
    cache's dtype, or RN(row / scale) for FP8): the padding tokens' rows
    and what slot -1 would wrap to (the last row of the last block, row 0
    of block 0) untouched."""
    g = torch.Generator().manual_seed(23)
    T, blocks = 7, 3
    src = torch.bfloat16 if dtype in (torch.bfloat16,) else torch.float32
    kv_c = torch.randn(T, DV, generator=g).to(src)
    k_pe = torch.randn(T, D - DV, generator=g).to(src)
    shape = (blocks, PAGE, D) if layout == "vllm" else (blocks, PAGE, 1, D)
    cache = _random_cache(shape, dtype, g)
    scale = torch.tensor([0.25]) if name != "auto" else None
    slots = torch.tensor([-1, 130, -1, 0, 191, -1, 64], dtype=slot_dtype)
    want = cache.clone()
    flat_want = want.view(-1).view(torch.uint8).reshape(blocks * PAGE, -1)
    for t, s in enumerate(slots.tolist()):
        if s == -1:
            continue
        row = torch.cat([kv_c[t], k_pe[t]])
        row = (row.float() / 0.25).to(dtype) if scale is not None else row
        flat_want[s] = row.view(torch.uint8)
    kt.concat_and_cache_mla(kv_c, k_pe, cache, slots, name, scale)
    assert torch.equal(cache.view(torch.uint8), want.view(torch.uint8))
    # All padding: nothing at all is written.
    before = cache.clone()
    kt.concat_and_cache_mla(kv_c[:3], k_pe[:3], cache,
                            torch.full((3,), -1, dtype=slot_dtype), name,
                            scale)
    assert torch.equal(cache.view(torch.uint8), before.view(torch.uint8))


@pytest.mark.parametrize("slots, message", [
    ([0, -2, 2], r"slot_mapping\[1\] = -2 is outside the cache's 128 slots "
     r"\(2 blocks of 64\): a slot is in \[0, 128\), or -1 for a padding "
     r"token"),
    ([-1, -65, 2], r"slot_mapping\[1\] = -65 is outside"),
    ([-1, 1, 128], r"slot_mapping\[2\] = 128 is outside the cache's 128 "
     "slots"),
])
def test_concat_and_cache_mla_bad_slot_untouched(slots, message):
    """Only -1 is the padding slot: any other negative slot, or one past
    the cache, raises naming the token and the slot, before anything is
    written."""
    cache = torch.full((2, PAGE, D), float("nan"))
    with pytest.raises(kvattn.KVAttnError, match=message):
        kt.concat_and_cache_mla(torch.randn(3, DV), torch.randn(3, 64), cache,
                                torch.tensor(slots))
    assert torch.isnan(cache).all()


def test_concat_and_cache_mla_compile_and_opcheck():
    g = torch.Generator().manual_seed(2)
    kv_c, k_pe = torch.randn(3, DV, generator=g), torch.randn(3, 64,
                                                                generator=g)
    slots = torch.tensor([1, -1, 64])  # a padding token among them

    def write(kv_c, k_pe, cache, slots):
        kt.concat_and_cache_mla(kv_c * 2, k_pe, cache, slots)
        return cache.sum()

    compiled = torch.compile(write, fullgraph=True, backend="aot_eager")
    a, b = torch.zeros(2, PAGE, D), torch.zeros(2, PAGE, D)
    assert torch.equal(compiled(kv_c, k_pe, a, slots),
                       write(kv_c, k_pe, b, slots))
    assert torch.equal(a, b)
    torch.library.opcheck(torch.ops.kvattn.concat_and_cache_mla.default,
                          (kv_c, k_pe, torch.zeros(2, PAGE, D), slots,
                           "auto", None))


def _write_with(**changes):
    def call():
        args = dict(kv_c=torch.randn(3, DV), k_pe=torch.randn(3, 64),
                    kv_cache=torch.zeros(2, PAGE, D),
                    slot_mapping=torch.tensor([0, 1, 2]))
        args.update(changes)
        return kt.concat_and_cache_mla(**args)
    return call


@pytest.mark.parametrize("call, message", [
    (_write_with(slot_mapping=torch.tensor([0, -2, 2])),
     r"slot_mapping\[1\] = -2 is outside the cache's 128 slots \(2 blocks "
     r"of 64\): a slot is in \[0, 128\), or -1 for a padding token"),
    (_write_with(slot_mapping=torch.tensor([0, 1, 128])),
     r"slot_mapping\[2\] = 128 is outside the cache's 128 slots"),
    (_write_with(slot_mapping=torch.tensor([0, 1])),
     r"slot_mapping has dtype torch.int64 and shape \(2,\); it must be "
     r"int32 or int64 \[num_tokens\] = \[3\]"),
    (_write_with(k_pe=torch.randn(3, 32)),
     "kv_cache rows are 576 wide, kv_c \\+ k_pe 512 \\+ 32 = 544"),
    (_write_with(k_pe=torch.randn(3, 64).double()),
     "k_pe has dtype torch.float64, kv_c torch.float32"),
    (_write_with(kv_cache=torch.zeros(2, PAGE, 2, D)),
     r"kv_cache has shape \(2, 64, 2, 576\): a latent cache is"),
    (_write_with(kv_cache=torch.zeros(2, PAGE, D).to(torch.bfloat16)),
     "kv_cache has dtype torch.bfloat16, kv_c torch.float32"),
    (_write_with(kv_cache=torch.zeros(2, PAGE, D).to(torch.float8_e4m3fn)),
     r"an FP8 latent cache \(torch.float8_e4m3fn\) needs scale"),
    (_write_with(kv_cache=torch.zeros(2, PAGE, D).to(torch.float8_e4m3fn),
                 kv_cache_dtype="fp8_e5m2", scale=torch.ones(1)),
     "kv_cache_dtype='fp8_e5m2' needs a torch.float8_e5m2 kv_cache"),
    (_write_with(scale=torch.ones(1)),
     "scale quantises into an FP8 latent cache, but kv_cache is "
     "torch.float32"),
    (_write_with(kv_cache_dtype="int8"), "kv_cache_dtype 'int8'"),
    (_write_with(kv_cache=torch.zeros(2, D, PAGE).transpose(1, 2)),
     "kv_cache is not contiguous"),
])
def test_concat_and_cache_mla_misuse(call, message):
    with pytest.raises(kvattn.KVAttnError, match=message):
        call()
