"""kvattn.torch's device path on the emulated GPU (lit:
test/python/torch-emulated.test). The emulated GPU is no torch device, so
the tensors here are kvattn DeviceArrays and the tests call what the CUDA
kernels of the ops call, after their torch glue:

- kvattn.torch.Plan(runtime=...).run -> Plan._run (the kernel of
  torch.ops.kvattn.plan_run / plan_append_run): the checks, then
  kvattn_plan_run with a device pointer for every tensor and every metadata
  tensor, compared with the same plan on the CPU; per run no
  synchronisation, allocation or copy (the runtime's call counts); bad
  metadata recorded in the status word, raised by check(), the outputs and
  caches untouched;
- kvattn.torch.serving.device_run (the CUDA kernels of kvattn::attention,
  attention_out and append, after torch's pointers are taken): the
  per-signature plans with device q_offset/kv_len/pos, their bounds growing,
  the split_kv = 1 plan past the workspace budget, kt.check().

Not executed here: torch's dispatch of CUDA tensors, data_ptr() of CUDA
tensors and torch.cuda.current_stream() (python/torch_gpu_tests, on a GPU).
"""

import numpy as np
import pytest
import torch

import kvattn
import kvattn.torch as kt
from kvattn.torch import serving

I32 = torch.int32


@pytest.fixture(scope="module")
def rt():
    runtime = kvattn.Runtime(driver="emulated")
    assert runtime.emulated
    yield runtime
    kt.clear_program_cache()
    runtime.close()


def dev(rt, t):
    """A DeviceArray holding a copy of a CPU tensor (bf16 as its bits)."""
    if t.dtype == torch.bfloat16:
        return kvattn.to_device(t.view(torch.int16).numpy().view(np.uint16),
                                rt, "bf16")
    return kvattn.to_device(t.numpy(), rt)


def host(d, dtype):
    a = d.numpy()
    if dtype == torch.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def decode_step(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    Hq, Hkv, D, page, P = 8, 2, 64, 16, 8
    kp = torch.randn(P, page, Hkv, D, generator=g).to(dtype)
    vp = torch.randn(P, page, Hkv, D, generator=g).to(dtype)
    table = torch.tensor([[3, 0, -1], [5, 6, 1]], dtype=I32)
    kv_len = torch.tensor([20, 40], dtype=I32)
    return dict(query=torch.randn(2, Hq, 1, D, generator=g).to(dtype),
                key=kp, value=vp, q_offset=kv_len - 1, kv_len=kv_len,
                block_table=table,
                update_k=torch.randn(2, Hkv, 1, D, generator=g).to(dtype),
                update_v=torch.randn(2, Hkv, 1, D, generator=g).to(dtype))


def fields(dtype):
    return dict(dtype=dtype, num_query_heads=8, num_kv_heads=2, head_dim=64,
                page_size=16, append=True)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5),
                                        (torch.bfloat16, 2e-2)])
def test_plan_device_run_matches_the_cpu_plan(rt, dtype, tol):
    args = decode_step(dtype, 1)
    cpu = kt.Plan(**fields(dtype))
    ck, cv = args["key"].clone(), args["value"].clone()
    want = cpu.run(args["query"], ck, cv, args["q_offset"], args["kv_len"],
                   block_table=args["block_table"],
                   update_k=args["update_k"], update_v=args["update_v"])
    plan = kt.Plan(**fields(dtype), runtime=rt, max_batch=4,
                   max_query_len=1, max_pages=4)
    d = {n: dev(rt, t) for n, t in args.items()}
    d["out"] = rt.empty((2, 8, 1, 64), "bf16" if dtype == torch.bfloat16
                        else "f32")
    kvattn.capi.call_counts(rt.rt, True)
    plan.run(d["query"], d["key"], d["value"], d["q_offset"], d["kv_len"],
             block_table=d["block_table"], update_k=d["update_k"],
             update_v=d["update_v"], out=d["out"])
    counts = kvattn.capi.call_counts(rt.rt, True)
    # The K and V appends' validation (2 phases), the attention's (2), the
    # two appends, the attention: and nothing else.
    assert counts["launches"] == 7
    assert counts["synchronizations"] == 0 and counts["allocations"] == 0
    assert counts["synchronous_copies"] == 0 and counts["async_copies"] == 0
    assert plan.status() is None
    got = host(d["out"], dtype)
    assert (got.double() - want.double()).abs().max() < tol
    # The appends wrote the same rows into the device pages.
    assert torch.equal(host(d["key"], dtype), ck)
    assert torch.equal(host(d["value"], dtype), cv)
    plan.close()
    cpu.close()


def test_plan_device_validation_status_word(rt):
    args = decode_step(torch.float32, 2)
    plan = kt.Plan(**fields(torch.float32), runtime=rt, max_batch=4,
                   max_query_len=1, max_pages=4)
    d = {n: dev(rt, t) for n, t in args.items()}
    sentinel = np.full((2, 8, 1, 64), 7.0, np.float32)
    d["out"] = kvattn.to_device(sentinel, rt)
    keys = d["key"].numpy()
    # Page 9 is past the pool of 8: recorded on the device, nothing runs.
    d["block_table"] = dev(rt, torch.tensor([[3, 0, -1], [5, 9, 1]],
                                            dtype=I32))
    plan.run(d["query"], d["key"], d["value"], d["q_offset"], d["kv_len"],
             block_table=d["block_table"], update_k=d["update_k"],
             update_v=d["update_v"], out=d["out"])
    assert "block_table[1][1] = 9" in plan.status()
    with pytest.raises(kvattn.KVAttnError, match=r"block_table\[1\]\[1\] = "
                       r"9"):
        plan.check()
    assert plan.status() is None  # check() cleared it
    np.testing.assert_array_equal(d["out"].numpy(), sentinel)
    np.testing.assert_array_equal(d["key"].numpy(), keys)
    # A kv_len past the table's pages.
    d["block_table"] = dev(rt, args["block_table"])
    d["kv_len"] = dev(rt, torch.tensor([20, 49], dtype=I32))
    plan.run(d["query"], d["key"], d["value"], d["q_offset"], d["kv_len"],
             block_table=d["block_table"], update_k=d["update_k"],
             update_v=d["update_v"], out=d["out"])
    with pytest.raises(kvattn.KVAttnError, match=r"kv_len\[1\] = 49"):
        plan.check()
    # Host checks still come first, naming the argument.
    with pytest.raises(kvattn.KVAttnError, match="kv_len has dtype i64"):
        plan.run(d["query"], d["key"], d["value"], d["q_offset"],
                 dev(rt, torch.tensor([20, 40])),
                 block_table=d["block_table"], update_k=d["update_k"],
                 update_v=d["update_v"], out=d["out"])
    with pytest.raises(kvattn.KVAttnError, match="the batch B = 5 is above "
                       "the plan's max_batch = 4"):
        plan.run(dev(rt, torch.zeros(5, 8, 1, 64)), d["key"], d["value"],
                 dev(rt, torch.zeros(5, dtype=I32)),
                 dev(rt, torch.zeros(5, dtype=I32)),
                 block_table=dev(rt, torch.zeros(5, 3, dtype=I32)),
                 update_k=dev(rt, torch.zeros(5, 2, 1, 64)),
                 update_v=dev(rt, torch.zeros(5, 2, 1, 64)),
                 out=rt.empty((5, 8, 1, 64), "f32"))
    with pytest.raises(kvattn.KVAttnError, match="max_batch must be given"):
        kt.Plan(**fields(torch.float32), runtime=rt, max_query_len=1)
    plan.close()


def _attention(rt, q, k, v, qo, kv, dtype="f32"):
    """What _cuda_attention runs after taking the tensors' pointers."""
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    d = {"query": dev(rt, q), "key": dev(rt, k), "value": dev(rt, v),
         "q_offset": dev(rt, qo), "kv_len": dev(rt, kv),
         "out": rt.empty((B, Hq, L, D), dtype)}
    sig = ("attention-test", dtype, Hq, Hkv, D)
    serving.device_run(
        rt, sig, lambda: kt.attention_ir(dtype, Hq, Hkv, D, D, True, 0, 0.0,
                                         None),
        {n: a.ptr for n, a in d.items()},
        {"B": B, "Hq": Hq, "Hkv": Hkv, "L": L, "S": S},
        kvattn.capi.CURRENT_STREAM)
    return host(d["out"], torch.float32), sig


def test_op_device_plans_grow_and_validate(rt, monkeypatch):
    g = torch.Generator().manual_seed(3)
    Hq, Hkv, D = 4, 2, 32
    for B, L, S in ((2, 1, 40), (3, 2, 40), (5, 1, 70), (2, 40, 45)):
        if L == 40:  # past the budget: the split_kv = 1 plan
            monkeypatch.setattr(serving, "WORKSPACE_BUDGET", 1 << 16)
        q = torch.randn(B, Hq, L, D, generator=g)
        k = torch.randn(B, Hkv, S, D, generator=g)
        v = torch.randn(B, Hkv, S, D, generator=g)
        kv = torch.tensor([S - b for b in range(B)])
        qo = kv - L
        got, sig = _attention(rt, q, k, v, qo, kv)
        want = kt.attention(q, k, v, q_offset=qo, kv_len=kv)
        assert (got - want).abs().max() < 1e-5, (B, L, S)
    plans = serving._op_plans[(sig, id(rt))]
    assert plans["split"][1:] == (8, 2)  # B and L bounds, grown
    assert plans["nosplit"].workspace_bytes == 128  # the status word only
    assert len(serving._retired) >= 1
    kt.check()  # nothing recorded
    # A kv_len past S, on the device: kt.check() raises it and clears it.
    q = torch.randn(2, Hq, 1, D, generator=g)
    k = torch.randn(2, Hkv, 40, D, generator=g)
    _attention(rt, q, k, k, torch.tensor([39, 0]), torch.tensor([40, 41]))
    with pytest.raises(kvattn.KVAttnError, match=r"kv_len\[1\] = 41 is "
                       r"outside \[0, S = 40\]"):
        kt.check()
    kt.check()
    _attention(rt, q, k, k, torch.tensor([-1, 0]), torch.tensor([40, 1]))
    with pytest.raises(kvattn.KVAttnError, match=r"q_offset\[0\] = -1 is "
                       "negative"):
        kt.check()


def test_append_device_kernel(rt):
    """kvattn::append's CUDA kernel (a plan of append_ir), with pos on the
    device: the rows written as on the CPU; pos past the capacity recorded
    and raised by kt.check(), the cache untouched."""
    g = torch.Generator().manual_seed(4)
    B, H, S, D, L = 2, 2, 11, 16, 3
    cache = torch.randn(B, H, S, D, generator=g)
    update = torch.randn(B, H, L, D, generator=g)
    want = cache.clone()
    kt.append(want, update, [4, 8])
    dc, du = dev(rt, cache), dev(rt, update)

    def run(pos):
        dp = dev(rt, torch.tensor(pos))  # alive until the launch is queued
        serving.device_run(
            rt, ("append-test", "f32", H, D),
            lambda: kt.append_ir("f32", H, D),
            {"update": du.ptr, "cache": dc.ptr,
             "pos": dp.ptr},
            {"B": B, "Hkv": H, "L": L, "S": S}, kvattn.capi.CURRENT_STREAM)

    run([4, 8])
    kt.check()
    assert torch.equal(host(dc, torch.float32), want)
    run([4, 9])
    with pytest.raises(kvattn.KVAttnError, match=r"pos\[1\] = 9 writes "
                       r"rows \[9, 12\) outside the cache capacity C = 11"):
        kt.check()
    assert torch.equal(host(dc, torch.float32), want)  # untouched


@pytest.mark.parametrize("fmt, gran", [(torch.float8_e4m3fn, "head"),
                                       (torch.float8_e5m2, "token")])
def test_op_device_run_fp8_cache(rt, fmt, gran):
    """What _cuda_attention runs for an FP8 cache (torch.float8_e4m3fn /
    float8_e5m2 key and value with k_scale / v_scale): the IR of
    attention_ir(kv=...) on the device, the codes and f32 scales by pointer,
    against the op's CPU path (f32 query: within 1e-5)."""
    g = torch.Generator().manual_seed(21)
    B, Hq, Hkv, L, S, D = 2, 8, 2, 1, 48, 32
    q = torch.randn(B, Hq, L, D, generator=g)
    k = (torch.rand(B, Hkv, S, D, generator=g) * 8 - 4).to(fmt)
    v = (torch.rand(B, Hkv, S, D, generator=g) * 8 - 4).to(fmt)
    shape = (Hkv,) if gran == "head" else (B, Hkv, S)
    ks = torch.rand(shape, generator=g) + 0.25
    vs = torch.rand(shape, generator=g) + 0.25
    kv = torch.tensor([S, 29])
    qo = kv - L
    fmt_name = kt._FP8[fmt]

    def codes(t):
        return kvattn.to_device(t.view(torch.uint8).numpy(), rt, fmt_name)

    d = {"query": dev(rt, q), "key": codes(k), "value": codes(v),
         "q_offset": dev(rt, qo), "kv_len": dev(rt, kv), "k_scale":
         dev(rt, ks), "v_scale": dev(rt, vs),
         "out": rt.empty((B, Hq, L, D), "f32")}
    sig = ("attention-fp8-test", fmt_name, gran)
    serving.device_run(
        rt, sig, lambda: kt.attention_ir("f32", Hq, Hkv, D, D, True, 0, 0.0,
                                         None, kv=(fmt_name, gran, gran)),
        {n: a.ptr for n, a in d.items()},
        {"B": B, "Hq": Hq, "Hkv": Hkv, "L": L, "S": S},
        kvattn.capi.CURRENT_STREAM)
    got = host(d["out"], torch.float32)
    want = kt.attention(q, k, v, q_offset=qo, kv_len=kv, k_scale=ks,
                        v_scale=vs)
    assert (got - want).abs().max() < 1e-5
    plain = kt.attention(q, k.float(), v.float(), q_offset=qo, kv_len=kv)
    assert (plain - want).abs().max() > 0.05


def test_fp8_plan_with_append_matches_the_cpu_plan(rt):
    """kt.Plan(kv_dtype=torch.float8_e4m3fn, append=True, per-token
    scales) on the emulated GPU: the append kernels quantise the new tokens
    into the device caches byte for byte as the CPU plan does, and the
    attention agrees with it (bf16 query: 1.6e-2 + 1.6e-2 |ref|)."""
    g = torch.Generator().manual_seed(23)
    fmt, dtype = torch.float8_e4m3fn, torch.bfloat16
    B, Hq, Hkv, L, S, D = 2, 8, 2, 1, 32, 64
    q = torch.randn(B, Hq, L, D, generator=g).to(dtype)
    k = (torch.rand(B, Hkv, S, D, generator=g) * 8 - 4).to(fmt)
    v = (torch.rand(B, Hkv, S, D, generator=g) * 8 - 4).to(fmt)
    uk = (torch.randn(B, Hkv, L, D, generator=g) * 3).to(dtype)
    uv = (torch.randn(B, Hkv, L, D, generator=g) * 3).to(dtype)
    ks = torch.rand(B, Hkv, S, generator=g) + 0.25
    vs = torch.rand(B, Hkv, S, generator=g) + 0.25
    pos = torch.tensor([9, 31], dtype=I32)
    kv = pos + L
    fields = dict(dtype=dtype, num_query_heads=Hq, num_kv_heads=Hkv,
                  head_dim=D, append=True, kv_dtype=fmt, kv_scales="token")
    cpu = kt.Plan(**fields)
    ck, cv = k.clone(), v.clone()
    want = cpu.run(q, ck, cv, pos, kv, update_k=uk, update_v=uv, k_scale=ks,
                   v_scale=vs)
    plan = kt.Plan(**fields, runtime=rt, max_batch=2, max_query_len=1)

    def codes(t):
        return kvattn.to_device(t.view(torch.uint8).numpy(), rt, "f8E4M3FN")

    dk, dv = codes(k), codes(v)
    out = rt.empty((B, Hq, L, D), "bf16")
    plan.run(dev(rt, q), dk, dv, dev(rt, pos), dev(rt, kv),
             update_k=dev(rt, uk), update_v=dev(rt, uv), k_scale=dev(rt, ks),
             v_scale=dev(rt, vs), out=out)
    assert plan.status() is None
    assert np.array_equal(dk.numpy(), ck.view(torch.uint8).numpy())
    assert np.array_equal(dv.numpy(), cv.view(torch.uint8).numpy())
    # The device rounds each code * scale to bf16 before the MMAs (the CPU
    # keeps it in f32): kvattn's bf16 tolerance, 1.6e-2 + 1.6e-2 |ref|.
    got, ref = host(out, dtype).double(), want.double()
    assert ((got - ref).abs() <= 1.6e-2 + 1.6e-2 * ref.abs()).all()
    plan.close()
    cpu.close()


@pytest.mark.parametrize("kv_dtype", [None, torch.float8_e4m3fn])
def test_latent_plan_with_append_matches_the_cpu_plan(rt, kv_dtype):
    """kt.Plan(latent=True, append=True) on the emulated GPU (bf16 query,
    16 heads, D = 576, Dv = 512, paged 64; the latent cache in bf16 or e4m3
    with per-token k_scale): the K append kernel writes each new token's
    576-wide row into the device pages (quantised with its slot's scale) byte
    for byte as the CPU plan does, before the latent kernel attends over it
    (its own row included); out against the CPU plan within kvattn's bf16
    tolerance, 2e-2 + 2e-2 |ref|. No synchronisation, allocation or copy."""
    g = torch.Generator().manual_seed(41)
    B, Hq, D, Dv, page = 2, 16, 576, 512, 64
    dtype = torch.bfloat16
    table = torch.tensor([[2, 0], [1, -1]], dtype=I32)
    pos = torch.tensor([70, 12], dtype=I32)
    kv = pos + 1
    q = torch.randn(B, Hq, 1, D, generator=g).to(dtype)
    new = (torch.randn(B, 1, 1, D, generator=g) * 2).to(dtype)
    fields = dict(dtype=dtype, num_query_heads=Hq, num_kv_heads=1,
                  head_dim=D, value_head_dim=Dv, page_size=page, latent=True,
                  append=True, scale=1 / 192 ** 0.5)
    extra = {}
    if kv_dtype is None:
        pool = torch.randn(3, page, 1, D, generator=g).to(dtype)
    else:
        pool = torch.randn(3, page, 1, D, generator=g).to(kv_dtype)
        fields.update(kv_dtype=kv_dtype, kv_scales="token")
        extra["k_scale"] = torch.rand(3, page, 1, generator=g) + 0.25
    cpu = kt.Plan(**fields)
    cache = pool.clone()
    want = cpu.run(q, cache, q_offset=pos, kv_len=kv, block_table=table,
                   update_k=new, **extra)
    plan = kt.Plan(**fields, runtime=rt, max_batch=2, max_query_len=1)
    if kv_dtype is None:
        dcache = dev(rt, pool)
    else:
        dcache = kvattn.to_device(pool.view(torch.uint8).numpy(), rt,
                                  "f8E4M3FN")
    out = rt.empty((B, Hq, 1, Dv), "bf16")
    d = {n: dev(rt, t) for n, t in dict(extra, query=q, q_offset=pos,
                                        kv_len=kv, block_table=table,
                                        update_k=new).items()}
    kvattn.capi.call_counts(rt.rt, True)
    plan.run(d.pop("query"), dcache, out=out, **d)
    counts = kvattn.capi.call_counts(rt.rt, True)
    assert counts["synchronizations"] == 0 and counts["allocations"] == 0
    assert counts["synchronous_copies"] == 0 and counts["async_copies"] == 0
    assert plan.status() is None
    if kv_dtype is None:
        assert torch.equal(host(dcache, dtype), cache)
    else:
        assert np.array_equal(dcache.numpy(), cache.view(torch.uint8).numpy())
    got, ref = host(out, dtype).double(), want.double()
    assert ((got - ref).abs() <= 2e-2 + 2e-2 * ref.abs()).all()
    plan.close()
    cpu.close()


def test_concat_and_cache_mla_device_kernel(rt):
    """What the CUDA kernel of kvattn::concat_and_cache_mla runs after
    taking the tensors' pointers: a plan of mla_cache_write_ir (kvattn's
    append kernel, T one-row "sequences" through a one-column block table)
    with the slots split into block and row on the device (mla._slot_rows,
    what the op runs on the slots' device); an e4m3 cache with one scale:
    the codes equal the CPU op's byte for byte, with vLLM's padding slots
    (-1) among the tokens: nothing written for them and nothing reported
    by the device validation. A slot past the cache, and a negative slot
    other than -1, are recorded on the device and raised by kt.check()
    (the block out of range; the token's negative position), the cache
    untouched."""
    from kvattn.torch import mla
    g = torch.Generator().manual_seed(43)
    T, D, page, fmt = 5, 576, 64, torch.float8_e4m3fn
    kv_c = torch.randn(T, 512, generator=g).to(torch.bfloat16)
    k_pe = torch.randn(T, 64, generator=g).to(torch.bfloat16)
    cache = torch.zeros(3, page, 1, D, dtype=fmt)
    scale = torch.tensor([0.5])
    slots = torch.tensor([130, -1, 65, 3, -1])
    # Every byte set (what a padding token wrote anywhere would change).
    cache = torch.randint(0, 256, cache.shape, dtype=torch.uint8,
                          generator=g).view(fmt)
    want = cache.clone()
    kt.concat_and_cache_mla(kv_c, k_pe, want, slots, "fp8", scale)
    # The CPU op itself: the real tokens' rows, nothing else.
    untouched = torch.ones(3 * page, dtype=torch.bool)
    untouched[[130, 65, 3]] = False
    assert torch.equal(want.view(torch.uint8).reshape(3 * page, D)[untouched],
                       cache.view(torch.uint8).reshape(3 * page, D)[untouched])
    dc = kvattn.to_device(cache.view(torch.uint8).numpy(), rt, "f8E4M3FN")
    upd = dev(rt, torch.cat([kv_c, k_pe], -1).reshape(T, 1, 1, D))
    ds = dev(rt, scale)

    def run(s):
        pos, table = mla._slot_rows(s, page)
        d = {"pos": dev(rt, pos), "block_table": dev(rt, table)}
        serving.device_run(
            rt, ("concat_and_cache_mla-test",),
            lambda: mla.mla_cache_write_ir("bf16", page, D, "f8E4M3FN"),
            {"update": upd.ptr, "cache": dc.ptr, "k_scale": ds.ptr,
             **{n: a.ptr for n, a in d.items()}},
            {"B": T, "Hkv": 1, "L": 1, "num_pages": 3, "page_size": page,
             "max_pages": 1, "S": page}, kvattn.capi.CURRENT_STREAM)

    run(slots)
    kt.check()
    assert np.array_equal(dc.numpy(), want.view(torch.uint8).numpy())
    run(torch.tensor([130, 64, 65, 3, 200]))
    with pytest.raises(kvattn.KVAttnError, match=r"block_table\[4\]\[0\] = "
                       "3: page id out of range"):
        kt.check()
    assert np.array_equal(dc.numpy(), want.view(torch.uint8).numpy())
    run(torch.tensor([130, -1, -2, 3, -1]))
    with pytest.raises(kvattn.KVAttnError,
                       match=r"pos\[2\] = -2 is negative \(batch 2\)"):
        kt.check()
    assert np.array_equal(dc.numpy(), want.view(torch.uint8).numpy())


@pytest.mark.parametrize("Hq", [16, 128])
def test_mla_op_device_run(rt, Hq):
    """What the CUDA kernel of kvattn::mla_attention runs after taking the
    tensors' pointers (kvattn.torch.mla._cuda_mla): a plan of
    mla_attention_ir (the latent form's mma.sync kernel) with the query,
    the paged latent pool, q_offset / kv_len (int64) and the int32 block
    table on the device; out and lse against the op's CPU path (bf16:
    2e-2, lse 1e-3), NaN in every slot no key owns. A page past the pool is
    recorded on the device and raised by kt.check(), out untouched."""
    from kvattn.torch import mla
    g = torch.Generator().manual_seed(31)
    B, L, D, Dv, page = 3, 1, 576, 512, 64
    scale = 1.0 / 192 ** 0.5
    table = torch.tensor([[4, 1, -1], [0, -1, -1], [2, 5, 3]],
                         dtype=torch.int32)
    kv = torch.tensor([100, 7, 150], dtype=torch.int64)
    pool = torch.randn(6, page, 1, D, generator=g)
    owned = torch.zeros(6, page, dtype=torch.bool)
    for b in range(B):
        for j in range(-(-int(kv[b]) // page)):
            owned[table[b, j], :min(page, int(kv[b]) - j * page)] = True
    pool[~owned] = float("nan")
    pool = pool.to(torch.bfloat16)
    q = torch.randn(B, Hq, L, D, generator=g).to(torch.bfloat16)
    qo = kv - L
    want, want_lse = kt.mla_attention(q, pool, block_table=table, kv_len=kv,
                                      scale=scale, return_lse=True)
    sig = ("mla-test", Hq)
    make_ir = (lambda: mla.mla_attention_ir("bf16", Hq, 1, D, Dv, page, True,
                                            scale))

    def run(tab):
        d = {"query": dev(rt, q), "key": dev(rt, pool),
             "q_offset": dev(rt, qo), "kv_len": dev(rt, kv),
             "block_table": dev(rt, tab),
             "out": kvattn.to_device(np.zeros((B, Hq, L, Dv), np.uint16),
                                     rt, "bf16"),
             "lse": kvattn.to_device(np.zeros((B, Hq, L), np.float32), rt)}
        serving.device_run(
            rt, sig, make_ir, {n: a.ptr for n, a in d.items()},
            {"B": B, "Hq": Hq, "Hkv": 1, "L": L, "S": 3 * page,
             "num_pages": 6, "page_size": page, "max_pages": 3},
            kvattn.capi.CURRENT_STREAM)
        return host(d["out"], torch.bfloat16), host(d["lse"], torch.float32)

    out, lse = run(table)
    kt.check()
    assert not torch.isnan(out).any()
    assert (out.double() - want.double()).abs().max() < 2e-2
    assert (lse.double() - want_lse.double()).abs().max() < 1e-3
    bad = table.clone()
    bad[2, 1] = 6
    out, _ = run(bad)
    with pytest.raises(kvattn.KVAttnError, match=r"block_table\[2\]\[1\] = "
                       "6"):
        kt.check()
    assert not out.double().abs().sum()  # nothing written


@pytest.mark.parametrize("fmt, gran", [(torch.float8_e4m3fn, "token"),
                                       (torch.float8_e5m2, "tensor")])
def test_mla_fp8_op_device_run(rt, fmt, gran):
    """kvattn::mla_attention's device kernel over an FP8 latent cache
    (mla_attention_ir(kv=...): the codes by pointer, kv_scale as the IR's
    k_scale, the K stage converted to bf16 with it, V read from that
    stage) against the op's CPU path: bf16 2e-2, lse 1e-3 (1 + |lse|)."""
    from kvattn.torch import mla
    g = torch.Generator().manual_seed(33)
    B, Hq, L, D, Dv, page = 2, 16, 1, 576, 512, 64
    scale = 1.0 / 192 ** 0.5
    table = torch.tensor([[3, 0], [1, -1]], dtype=torch.int32)
    kv = torch.tensor([100, 40], dtype=torch.int64)
    pool = torch.randn(4, page, 1, D, generator=g)
    codes = pool.to(fmt)
    ks = (torch.rand((1,) if gran == "tensor" else (4, page, 1),
                     generator=g) + 0.25)
    q = torch.randn(B, Hq, L, D, generator=g).to(torch.bfloat16)
    want, want_lse = kt.mla_attention(q, codes, block_table=table, kv_len=kv,
                                      kv_scale=ks, scale=scale,
                                      return_lse=True)
    name = kt._FP8[fmt]
    d = {"query": dev(rt, q),
         "key": kvattn.to_device(codes.view(torch.uint8).numpy(), rt, name),
         "q_offset": dev(rt, kv - L), "kv_len": dev(rt, kv),
         "block_table": dev(rt, table), "k_scale": dev(rt, ks),
         "out": rt.empty((B, Hq, L, Dv), "bf16"),
         "lse": rt.empty((B, Hq, L), "f32")}
    serving.device_run(
        rt, ("mla-fp8-test", name, gran),
        lambda: mla.mla_attention_ir("bf16", Hq, 1, D, Dv, page, True, scale,
                                     kv=(name, gran)),
        {n: a.ptr for n, a in d.items()},
        {"B": B, "Hq": Hq, "Hkv": 1, "L": L, "S": 2 * page, "num_pages": 4,
         "page_size": page, "max_pages": 2}, kvattn.capi.CURRENT_STREAM)
    kt.check()
    out = host(d["out"], torch.bfloat16)
    lse = host(d["lse"], torch.float32)
    assert (out.double() - want.double()).abs().max() < 2e-2
    # The device rounds code * scale to bf16 before the MMAs (the CPU keeps
    # it in f32): the scores, hence lse, differ by bf16's rounding.
    ref = want_lse.double()
    assert ((lse.double() - ref).abs() <= 1e-3 * (1 + ref.abs())).all()


def test_op_device_run_rotary_tables(rt):
    """What _cuda_attention runs with rotary_cos / rotary_sin
    (FlashAttention's tables, [P, R/2]): the IR of attention_ir(rope=
    ("tables", ...)) on the device, the tables by pointer, against the op's
    CPU path (f32: within 1e-5); a query row past the tables is recorded on
    the device (status rule 29) and raised by kt.check() with the CPU
    path's message."""
    g = torch.Generator().manual_seed(23)
    B, Hq, Hkv, L, S, D, R, P = 2, 4, 2, 2, 48, 32, 16, 60
    q = torch.randn(B, Hq, L, D, generator=g)
    k = torch.randn(B, Hkv, S, D, generator=g)
    v = torch.randn(B, Hkv, S, D, generator=g)
    angle = torch.rand(P, R // 2, generator=g) * 100  # no theta's angles
    cos, sin = angle.cos(), angle.sin()
    kv = torch.tensor([S, 29])
    sig = ("attention-rotary-test", P)
    rope = ("tables", R, True, "f32", P)

    def run(qo):
        d = {"query": dev(rt, q), "key": dev(rt, k), "value": dev(rt, v),
             "q_offset": dev(rt, qo), "kv_len": dev(rt, kv),
             "rotary_cos": dev(rt, cos), "rotary_sin": dev(rt, sin),
             "out": rt.empty((B, Hq, L, D), "f32")}
        serving.device_run(
            rt, sig, lambda: kt.attention_ir("f32", Hq, Hkv, D, D, True, 0,
                                             0.0, None, rope=rope),
            {n: a.ptr for n, a in d.items()},
            {"B": B, "Hq": Hq, "Hkv": Hkv, "L": L, "S": S},
            kvattn.capi.CURRENT_STREAM)
        return host(d["out"], torch.float32)

    qo = kv - L
    got = run(qo)
    kt.check()
    want = kt.attention(q, k, v, q_offset=qo, kv_len=kv, rotary_cos=cos,
                        rotary_sin=sin, rotary_interleaved=True)
    assert (got - want).abs().max() < 1e-5
    plain = kt.attention(q, k, v, q_offset=qo, kv_len=kv)
    assert (plain - want).abs().max() > 0.05
    # Batch 1's rows at 59 and 60 of a 60-row table.
    run(torch.tensor([30, 59]))
    with pytest.raises(kvattn.KVAttnError, match=r"rotary_cos: position 60 "
                       r"of batch 1, row 1 is outside the table's 60 rows"):
        kt.check()
    kt.check()
    # kvattn::append's kernel with 44-row tables: the rows rotated as on
    # the CPU; a token past the tables recorded (rule 30), the cache
    # untouched.
    cos44, sin44 = cos[:44].contiguous(), sin[:44].contiguous()
    rope44 = ("tables", R, True, "f32", 44)
    cache = torch.randn(B, Hkv, S, D, generator=g)
    update = torch.randn(B, Hkv, 3, D, generator=g)
    want = cache.clone()
    kt.append(want, update, [10, 40], rotary_cos=cos44, rotary_sin=sin44,
              rotary_interleaved=True)
    dc, du = dev(rt, cache), dev(rt, update)
    dcos, dsin = dev(rt, cos44), dev(rt, sin44)

    def append(pos):
        dp = dev(rt, torch.tensor(pos))
        serving.device_run(
            rt, ("append-rotary-test", 44),
            lambda: kt.append_ir("f32", Hkv, D, rope44),
            {"update": du.ptr, "cache": dc.ptr, "pos": dp.ptr,
             "rotary_cos": dcos.ptr, "rotary_sin": dsin.ptr},
            {"B": B, "Hkv": Hkv, "L": 3, "S": S}, kvattn.capi.CURRENT_STREAM)

    append([10, 40])
    kt.check()
    assert (host(dc, torch.float32) - want).abs().max() < 1e-6
    append([10, 42])
    with pytest.raises(kvattn.KVAttnError, match=r"rotary_cos: position 44 "
                       r"of batch 1, row 2 is outside the table's 44 rows"):
        kt.check()
    assert (host(dc, torch.float32) - want).abs().max() < 1e-6


def test_tree_attention_device_run(rt):
    """What tree_attention's CUDA path runs (kvattn.torch.tree_device_call:
    its signature, IR and sizes through serving.device_run), every tensor
    on the device: a ragged batch of a decode row, a draft tree of depth 4
    and branching 3 (120 tokens) and another decode row, bf16 on tensor
    cores, NaN in every cache slot past kv_len, against the op's CPU path
    (2e-2) and far from the answer with every draft token a root. A tree
    whose parent names a later row is recorded on the device and raised by
    kt.check() with the CPU path's message."""
    from kvattn import tree as ktree
    g = torch.Generator().manual_seed(41)
    parents = torch.tensor([-1] + ktree.complete_tree(4, 3) + [-1])
    cu = torch.tensor([0, 1, 122, 123])
    kv = torch.tensor([300, 380, 77])
    T, Hq, Hkv, S, D = 123, 4, 2, 400, 64
    q = torch.randn(T, Hq, D, generator=g).to(torch.bfloat16)
    k = torch.randn(3, Hkv, S, D, generator=g)
    v = torch.randn(3, Hkv, S, D, generator=g)
    for b in range(3):
        k[b, :, int(kv[b]):] = float("nan")
        v[b, :, int(kv[b]):] = float("nan")
    k, v = k.to(torch.bfloat16), v.to(torch.bfloat16)
    want = kt.tree_attention(q, k, v, cu, kv, tree_parents=parents)
    roots = kt.tree_attention(q, k, v, cu, kv,
                              tree_parents=torch.full((T,), -1))
    dims = (3, Hq, Hkv, T, S, D, D)
    sig, make_ir, sizes = kt.tree_device_call("bf16", dims, True, 0, 0.0,
                                              None, False, False, "emulated")
    q4 = q.permute(1, 0, 2).unsqueeze(0).contiguous()

    def run(tp):
        d = {"query": dev(rt, q4), "key": dev(rt, k), "value": dev(rt, v),
             "q_start": dev(rt, cu), "q_offset": dev(rt, kv - cu.diff()),
             "kv_len": dev(rt, kv), "tree_parents": dev(rt, tp),
             "out": kvattn.to_device(np.zeros((1, Hq, T, D), np.uint16), rt,
                                     "bf16")}
        serving.device_run(rt, sig, make_ir, {n: a.ptr for n, a in d.items()},
                           sizes, kvattn.capi.CURRENT_STREAM)
        return host(d["out"], torch.bfloat16)[0].permute(1, 0, 2)

    out = run(parents)
    kt.check()
    assert not torch.isnan(out).any()
    assert (out.double() - want.double()).abs().max() < 2e-2
    assert (out.double() - roots.double()).abs().max() > 0.1
    bad = parents.clone()
    bad[7] = 9  # local row 6 of request 1 names a later row
    run(bad)
    with pytest.raises(kvattn.KVAttnError, match=r"tree_parents\[7\] = 9 is "
                       r"not a row before local row 6 of its sequence"):
        kt.check()


def test_cascade_device_run(rt):
    """What cascade_attention's and paged_cascade_attention's CUDA paths
    run (kt.cascade_device_call / paged_cascade_device_call through
    serving.device_run), every tensor on the device: the prefix kernel, the
    ragged suffix kernel and the merge kernel, bf16 on tensor cores, a
    96-key prefix shared by a decode row and chunks of 5 and 2 rows, NaN in
    every slot no key owns, against the ops' CPU path (2e-2). The paged
    case holds the prefix and the suffixes in one pool of permuted 16-token
    pages; a prefix table with a page twice is recorded on the device and
    raised by kt.check() with the CPU path's message."""
    g = torch.Generator().manual_seed(5)
    B, Hq, Hkv, D, S, P, ps = 3, 4, 2, 64, 48, 96, 16
    cu = torch.tensor([0, 1, 6, 8])
    kv = torch.tensor([17, 40, 30])
    T = int(cu[-1])
    q = torch.randn(T, Hq, D, generator=g).to(torch.bfloat16)
    pk = torch.randn(1, Hkv, P, D, generator=g).to(torch.bfloat16)
    pv = torch.randn(1, Hkv, P, D, generator=g).to(torch.bfloat16)
    k = torch.randn(B, Hkv, S, D, generator=g)
    v = torch.randn(B, Hkv, S, D, generator=g)
    for b in range(B):
        k[b, :, int(kv[b]):] = float("nan")
        v[b, :, int(kv[b]):] = float("nan")
    k, v = k.to(torch.bfloat16), v.to(torch.bfloat16)
    want = kt.cascade_attention(q, pk, pv, k, v, cu, kv)
    q4 = q.permute(1, 0, 2).unsqueeze(0).contiguous()
    meta = {"q_start": dev(rt, cu), "q_offset": dev(rt, kv - cu.diff()),
            "kv_len": dev(rt, kv)}

    def run(sig, make_ir, sizes, buffers):
        out = kvattn.to_device(np.zeros((1, Hq, T, D), np.uint16), rt,
                               "bf16")
        buffers = dict(buffers, out=out, **meta)
        serving.device_run(rt, sig, make_ir,
                           {n: a.ptr for n, a in buffers.items()}, sizes,
                           kvattn.capi.CURRENT_STREAM)
        return host(out, torch.bfloat16)[0].permute(1, 0, 2)

    out = run(*kt.cascade_device_call("bf16", (B, Hq, Hkv, T, S, P, D, D),
                                      True, 0.0, None, "emulated"),
              {"query": dev(rt, q4), "prefix_key": dev(rt, pk),
               "prefix_value": dev(rt, pv), "key": dev(rt, k),
               "value": dev(rt, v)})
    kt.check()
    assert not torch.isnan(out).any()
    assert (out.double() - want.double()).abs().max() < 2e-2

    # The same keys in one pool of pages (the prefix's 6 pages, then each
    # suffix's), NaN where no key lives.
    order = iter(torch.randperm(16, generator=g).tolist())
    kc = torch.full((16, ps, Hkv, D), float("nan")).to(torch.bfloat16)
    vc = torch.full((16, ps, Hkv, D), float("nan")).to(torch.bfloat16)

    def place(keys, values, n):
        ids = [next(order) for _ in range(-(-n // ps))]
        for j in range(n):
            kc[ids[j // ps], j % ps] = keys[:, j]
            vc[ids[j // ps], j % ps] = values[:, j]
        return ids

    pages = torch.tensor(place(pk[0], pv[0], P) + [-1])
    table = torch.full((B, 4), -1, dtype=torch.int64)
    for b in range(B):
        ids = place(k[b], v[b], int(kv[b]))
        table[b, :len(ids)] = torch.tensor(ids)
    paged_want = kt.paged_cascade_attention(q, kc, vc, pages, P, table, cu,
                                            kv)
    assert (paged_want.double() - want.double()).abs().max() < 2e-2
    dims = (B, Hq, Hkv, T, 16, ps, 4, len(pages), D, D)
    call = kt.paged_cascade_device_call("bf16", dims, True, 0.0, None,
                                        "emulated")
    dkc, dvc = dev(rt, kc), dev(rt, vc)

    def run_paged(prefix_pages):
        return run(*call, {"query": dev(rt, q4), "prefix_key": dkc,
                           "prefix_value": dvc, "key": dkc, "value": dvc,
                           "prefix_pages": dev(rt, prefix_pages),
                           "prefix_len": dev(rt, torch.tensor([P])),
                           "block_table": dev(rt, table)})

    out = run_paged(pages)
    kt.check()
    assert not torch.isnan(out).any()
    assert (out.double() - paged_want.double()).abs().max() < 2e-2
    twice = pages.clone()
    twice[3] = twice[1]
    run_paged(twice)
    with pytest.raises(kvattn.KVAttnError, match=r"prefix_pages\[3\] = %d: "
                       r"page %d is already used at slot 1 of the same "
                       r"sequence$" % (pages[1], pages[1])):
        kt.check()


def test_op_device_run_two_sided_window(rt):
    """What kt.attention(window_size=(left, right)) runs on CUDA without
    causal: attention_ir with (W, R) = (left + 1, right), i.e. the
    attention's window and window_right, through serving.device_run on the
    device (bf16 tensor cores, q_offset and kv_len on the device); against
    the op's CPU path (2e-2) and far from the answer without the right
    bound."""
    g = torch.Generator().manual_seed(23)
    B, Hq, Hkv, L, S, D = 2, 4, 2, 16, 80, 64
    q = torch.randn(B, Hq, L, D, generator=g).to(torch.bfloat16)
    k = torch.randn(B, Hkv, S, D, generator=g).to(torch.bfloat16)
    v = torch.randn(B, Hkv, S, D, generator=g).to(torch.bfloat16)
    qo, kv = torch.tensor([30, 50]), torch.tensor([70, 80])
    want = kt.attention(q, k, v, q_offset=qo, kv_len=kv, causal=False,
                        window_size=(7, 5))
    left_only = kt.attention(q, k, v, q_offset=qo, kv_len=kv,
                             window_size=(7, 0))
    d = {"query": dev(rt, q), "key": dev(rt, k), "value": dev(rt, v),
         "q_offset": dev(rt, qo), "kv_len": dev(rt, kv),
         "out": kvattn.to_device(np.zeros((B, Hq, L, D), np.uint16), rt,
                                 "bf16")}
    sig = ("attention-window-test", "bf16", Hq, Hkv, D)
    serving.device_run(
        rt, sig, lambda: kt.attention_ir("bf16", Hq, Hkv, D, D, False,
                                         (8, 5), 0.0, None),
        {n: a.ptr for n, a in d.items()},
        {"B": B, "Hq": Hq, "Hkv": Hkv, "L": L, "S": S},
        kvattn.capi.CURRENT_STREAM)
    kt.check()
    out = host(d["out"], torch.bfloat16)
    assert (out.double() - want.double()).abs().max() < 2e-2
    assert (out.double() - left_only.double()).abs().max() > 0.1


HUGE_DECODE = """
func.func @decode(%q: tensor<?x4x1x64xbf16>, %k: tensor<?x1x?x64xbf16>,
                  %v: tensor<?x1x?x64xbf16>, %pos: tensor<?xi32>,
                  %len: tensor<?xi32>) -> tensor<?x4x1x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>)
      kv_len(%len : tensor<?xi32>) causal
      : tensor<?x4x1x64xbf16>, tensor<?x1x?x64xbf16>,
        tensor<?x1x?x64xbf16> -> tensor<?x4x1x64xbf16>
  return %o : tensor<?x4x1x64xbf16>
}
"""


def test_device_run_goes_64_bit_for_a_cache_of_2_31_elements():
    """A cache tensor of 2^31 elements: the signature's 32-bit plan refuses
    it on the host before any launch, and device_run compiles the plans
    again with 64-bit index arithmetic and runs (on the fake driver of the
    runtime tests, which runs no kernel: 4 GiB of cache are not needed),
    once; the next call uses the 64-bit plan directly."""
    import os
    path = os.environ.get("KVATTN_TEST_FAKECUDA")
    if not path or not os.path.exists(path):
        pytest.skip("KVATTN_TEST_FAKECUDA does not name the fake driver "
                    "(lit's torch-emulated.test sets it)")
    rt = kvattn.Runtime(driver=path)
    base = 0x7f0000000000
    buffers = {name: base + i * 0x10000 for i, name in enumerate(
        ("query", "key", "value", "out", "q_offset", "kv_len"))}
    sizes = dict(B=1, Hq=4, Hkv=1, L=1, S=1 << 25)  # key: 2^25 x 64
    signature = ("test-huge-decode", rt.chip)
    for _ in range(2):
        serving.device_run(rt, signature, lambda: HUGE_DECODE, buffers,
                           sizes, kvattn.capi.CURRENT_STREAM)
    plans = [p for s, p in serving.op_plans() if s == signature]
    assert plans and all(p.manifest["index_bits"] == 64 for p in plans)
    # Within 32 bits the same signature of a new runtime stays 32-bit.
    rt2 = kvattn.Runtime(driver=path)
    small = dict(sizes, S=4096)
    serving.device_run(rt2, signature, lambda: HUGE_DECODE, buffers, small,
                       kvattn.capi.CURRENT_STREAM)
    entries = [e for (s, rid), e in serving._op_plans.items()
               if s == signature and rid == id(rt2)]
    assert entries and not entries[0].get("wide")
