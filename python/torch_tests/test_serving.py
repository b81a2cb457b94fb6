"""kvattn.torch.Plan (torch.ops.kvattn.plan_run / plan_append_run) on the
CPU against the float64 reference of test_ops.py: a paged GQA decode loop
with the cache writes (batch composition changing, pages reused), a ragged
(varlen) paged batch, a plain cache with a window, soft-capping and sinks;
torch.compile(fullgraph=True) and opcheck on both ops; every misuse a
KVAttnError naming the argument. Tolerances as test_ops.py (f32 1e-5, bf16
2e-2). The device path (CUDA) is tested on the emulated GPU in
python/torch_emulated_tests and on a real GPU by python/torch_gpu_tests."""

import pytest
import torch

import kvattn
import kvattn.torch as kt
from test_ops import TOL, reference

I32 = torch.int32


def gather(pages, table, length):
    """[Hkv, length, D] of one sequence from a paged pool [P, page, Hkv,
    D]."""
    rows = torch.cat([pages[p] for p in table.tolist() if p >= 0], 0)
    return rows[:length].permute(1, 0, 2)


def paged_reference(q, kp, vp, table, q_offset, kv_len, **kw):
    """float64 attention of each sequence over its gathered pages."""
    outs = []
    for b in range(q.shape[0]):
        n = int(kv_len[b])
        k = gather(kp, table[b], n)[None]
        v = gather(vp, table[b], n)[None]
        outs.append(reference(q[b:b + 1], k, v, q_offset[b:b + 1],
                              kv_len[b:b + 1], **kw))
    return torch.cat(outs, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_decode_loop_with_appends(dtype):
    """Continuous batching: every step writes one token per sequence into
    its pages (plan_append_run) and attends over them; sequences join and
    leave, a finished sequence's pages go to a new one. Checked each step
    against the reference over the caches the test keeps itself."""
    g = torch.Generator().manual_seed(1)
    Hq, Hkv, D, page, P = 8, 2, 16, 4, 16
    plan = kt.Plan(dtype=dtype, num_query_heads=Hq, num_kv_heads=Hkv,
                   head_dim=D, page_size=page, append=True, max_batch=4,
                   max_query_len=1, max_pages=4)
    kp = torch.full((P, page, Hkv, D), float("nan"), dtype=dtype)
    vp = kp.clone()
    free = list(range(P))
    seqs = {}  # id -> [pages, length, own K rows, own V rows]

    def join(sid, prefix):
        pages = [free.pop(0) for _ in range(4)]
        k = torch.randn(Hkv, prefix, D, generator=g).to(dtype)
        v = torch.randn(Hkv, prefix, D, generator=g).to(dtype)
        for j in range(prefix):
            kp[pages[j // page], j % page] = k[:, j]
            vp[pages[j // page], j % page] = v[:, j]
        seqs[sid] = [pages, prefix, k, v]

    join(0, 5)
    join(1, 9)
    for step in range(6):
        if step == 2:
            join(2, 1)
        if step == 4:  # sequence 0 leaves, its pages are reused
            free.extend(seqs.pop(0)[0])
            join(3, 2)
        ids = sorted(seqs)
        B = len(ids)
        table = torch.full((B, 4), -1, dtype=I32)
        for b, sid in enumerate(ids):
            table[b] = torch.tensor(seqs[sid][0], dtype=I32)
        kv_len = torch.tensor([seqs[s][1] + 1 for s in ids], dtype=I32)
        q_offset = kv_len - 1
        q = torch.randn(B, Hq, 1, D, generator=g).to(dtype)
        uk = torch.randn(B, Hkv, 1, D, generator=g).to(dtype)
        uv = torch.randn(B, Hkv, 1, D, generator=g).to(dtype)
        out = torch.full((B, Hq, 1, D), float("nan"), dtype=dtype)
        ptr = out.data_ptr()
        got = plan.run(q, kp, vp, q_offset, kv_len, block_table=table,
                       update_k=uk, update_v=uv, out=out)
        assert got is out and out.data_ptr() == ptr
        ks, vs = [], []
        for b, sid in enumerate(ids):
            s = seqs[sid]
            s[2] = torch.cat([s[2], uk[b]], 1)
            s[3] = torch.cat([s[3], uv[b]], 1)
            s[1] += 1
            # The plan wrote the new row into the pages.
            assert torch.equal(gather(kp, table[b], s[1]), s[2])
            assert torch.equal(gather(vp, table[b], s[1]), s[3])
        for b, sid in enumerate(ids):
            s = seqs[sid]
            want = reference(q[b:b + 1], s[2][None], s[3][None],
                             q_offset[b:b + 1], kv_len[b:b + 1])
            assert (out[b:b + 1].double() - want).abs().max() < TOL[dtype]
    plan.close()


def test_varlen_paged_batch():
    """A ragged batch (q_start): 3, 1 and 4 query rows of three sequences
    over their pages, in one plan_run."""
    g = torch.Generator().manual_seed(2)
    Hq, Hkv, D, page, P = 4, 2, 16, 4, 10
    plan = kt.Plan(dtype=torch.float32, num_query_heads=Hq,
                   num_kv_heads=Hkv, head_dim=D, page_size=page, varlen=True)
    kp = torch.randn(P, page, Hkv, D, generator=g)
    vp = torch.randn(P, page, Hkv, D, generator=g)
    table = torch.tensor([[4, 1, 7], [0, -1, -1], [9, 2, 3]], dtype=I32)
    lens = [3, 1, 4]
    kv_len = torch.tensor([11, 2, 12], dtype=I32)
    q_offset = kv_len - torch.tensor(lens, dtype=I32)
    q_start = torch.tensor([0, 3, 4, 8], dtype=I32)
    q = torch.randn(1, Hq, 8, D, generator=g)
    out = plan.run(q, kp, vp, q_offset, kv_len, block_table=table,
                   q_start=q_start)
    assert out.shape == (1, Hq, 8, D)
    for b in range(3):
        rows = slice(int(q_start[b]), int(q_start[b + 1]))
        want = paged_reference(q[:, :, rows], kp, vp, table[b:b + 1],
                               q_offset[b:b + 1], kv_len[b:b + 1])
        assert (out[:, :, rows].double() - want).abs().max() < 1e-5
        # Ignoring the offsets (upper-left) changes the answer.
        if lens[b] > 1:
            wrong = paged_reference(q[:, :, rows], kp, vp, table[b:b + 1],
                                    torch.zeros(1, dtype=I32),
                                    kv_len[b:b + 1])
            assert (out[:, :, rows].double() - wrong).abs().max() > 0.1
    plan.close()


def test_plain_cache_window_softcap_sinks_alibi():
    g = torch.Generator().manual_seed(3)
    B, Hq, Hkv, L, S, D = 2, 4, 2, 3, 13, 16
    plan = kt.Plan(dtype=torch.float32, num_query_heads=Hq,
                   num_kv_heads=Hkv, head_dim=D, window=5, softcap=3.0,
                   sinks=True, alibi=True)
    q = torch.randn(B, Hq, L, D, generator=g) * 2
    k = torch.randn(B, Hkv, S, D, generator=g)
    v = torch.randn(B, Hkv, S, D, generator=g)
    sinks = torch.randn(Hq, generator=g)
    slopes = torch.rand(Hq, generator=g)
    kv_len = torch.tensor([13, 8], dtype=I32)
    q_offset = torch.tensor([10, 2], dtype=I32)
    out = plan.run(q, k, v, q_offset, kv_len, sinks=sinks,
                   alibi_slopes=slopes)
    want = reference(q, k, v, q_offset, kv_len, window=5, softcap=3.0,
                     sinks=sinks, alibi_slopes=slopes)
    assert (out.double() - want).abs().max() < 1e-5
    plan.close()


def test_torch_compile_fullgraph_and_opcheck():
    g = torch.Generator().manual_seed(4)
    Hq, Hkv, D, page, P = 4, 2, 16, 4, 6
    plan = kt.Plan(dtype=torch.float32, num_query_heads=Hq,
                   num_kv_heads=Hkv, head_dim=D, page_size=page, append=True)
    kp = torch.randn(P, page, Hkv, D, generator=g)
    vp = torch.randn(P, page, Hkv, D, generator=g)
    table = torch.tensor([[2, 0], [5, 1]], dtype=I32)
    kv_len = torch.tensor([6, 3], dtype=I32)
    q = torch.randn(2, Hq, 1, D, generator=g)
    uk = torch.randn(2, Hkv, 1, D, generator=g)
    uv = torch.randn(2, Hkv, 1, D, generator=g)

    def step(q, kp, vp, uk, uv, kv_len, table):
        out = plan.run(q * 2, kp, vp, kv_len - 1, kv_len,
                       block_table=table, update_k=uk, update_v=uv)
        return out.sum(-1)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    kc, vc = kp.clone(), vp.clone()
    got = compiled(q, kc, vc, uk, uv, kv_len, table)
    want = step(q, kp, vp, uk, uv, kv_len, table)
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.equal(kc, kp) and torch.equal(vc, vp)  # written the same
    out = torch.empty(2, Hq, 1, D)
    torch.library.opcheck(torch.ops.kvattn.plan_append_run.default,
                          (plan.id, q, kp.clone(), vp.clone(), uk, uv,
                           kv_len - 1, kv_len, table, None, None, None, out))
    plain = kt.Plan(dtype=torch.float32, num_query_heads=Hq,
                    num_kv_heads=Hkv, head_dim=D, page_size=page)
    torch.library.opcheck(torch.ops.kvattn.plan_run.default,
                          (plain.id, q, kp, vp, kv_len - 1, kv_len, table,
                           None, None, None, out))
    plan.close()
    plain.close()


def _setup():
    Hq, Hkv, D, page, P = 4, 2, 16, 4, 6
    plan = kt.Plan(dtype=torch.float32, num_query_heads=Hq,
                   num_kv_heads=Hkv, head_dim=D, page_size=page, max_batch=2,
                   max_pages=3)
    args = dict(query=torch.randn(2, Hq, 1, D),
                key=torch.randn(P, page, Hkv, D),
                value=torch.randn(P, page, Hkv, D),
                q_offset=torch.tensor([5, 2], dtype=I32),
                kv_len=torch.tensor([6, 3], dtype=I32),
                block_table=torch.tensor([[2, 0, -1], [5, -1, -1]],
                                         dtype=I32))
    return plan, args


def _with(**changes):
    def call():
        plan, args = _setup()
        args.update(changes.get("args", lambda a: {})(args))
        return plan.run(args.pop("query"), args.pop("key"),
                        args.pop("value"), args.pop("q_offset"),
                        args.pop("kv_len"), **args)
    return call


@pytest.mark.parametrize("call, message", [
    (_with(args=lambda a: {"query": a["query"].double()}),
     "query has dtype torch.float64; the plan is f32"),
    (_with(args=lambda a: {"kv_len": a["kv_len"].long()}),
     "kv_len has dtype i64; plan metadata is torch.int32"),
    (_with(args=lambda a: {"key": a["key"].to("meta")}),
     "key is on meta, the plan on cpu"),
    (_with(args=lambda a: {"query": a["query"][:, :3]}),
     r"query has shape \(2, 3, 1, 16\); the plan takes \[2, 4, L, 16\]"),
    (_with(args=lambda a: {"key": a["key"][:, :2]}),
     r"key has shape \(6, 2, 2, 16\); the plan takes \[num_pages, 4, 2, "
     r"16\]"),
    (_with(args=lambda a: {"block_table": a["block_table"][:1]}),
     r"block_table has shape \(1, 3\); the plan takes \[2, max_pages\]"),
    (_with(args=lambda a: {"block_table": torch.tensor(
        [[2, 0, 6], [5, -1, -1]], dtype=I32)}),
     r"block_table\[0\]\[2\] = 6: page id out of range \[0, 6\) "
     r"\(batch 0\)"),
    (_with(args=lambda a: {"kv_len": torch.tensor([13, 3], dtype=I32)}),
     r"kv_len\[0\] = 13 does not fit the 2 page\(s\) of block_table\[0\]"),
    (_with(args=lambda a: {"q_offset": torch.tensor([-1, 2], dtype=I32)}),
     r"q_offset\[0\] = -1 is negative"),
    (_with(args=lambda a: {"block_table": torch.zeros(2, 4, dtype=I32)}),
     "the block table's max_pages = 4 is above the plan's max_pages = 3"),
    (_with(args=lambda a: {"query": torch.randn(3, 4, 1, 16),
                           "q_offset": torch.zeros(3, dtype=I32),
                           "kv_len": torch.ones(3, dtype=I32),
                           "block_table": torch.zeros(3, 3, dtype=I32)}),
     "the batch B = 3 is above the plan's max_batch = 2"),
    (_with(args=lambda a: {"block_table": None}),
     "block_table is missing"),
    (_with(args=lambda a: {"q_start": torch.zeros(3, dtype=I32)}),
     r"q_start is given, but the plan takes none \(plan it with "
     r"varlen=True\)"),
    (_with(args=lambda a: {"out": torch.empty(2, 4, 1, 16)[..., ::2]}),
     r"out has shape \(2, 4, 1, 8\)"),
    (_with(args=lambda a: {"out": torch.empty(2, 4, 1, 32)[..., :16]}),
     "out is not contiguous"),
    (_with(args=lambda a: {"value": [1, 2]}),
     "value must be a torch.Tensor, got list"),
    (lambda: kt.Plan(dtype=torch.float64, num_query_heads=4,
                     num_kv_heads=2, head_dim=16),
     "dtype torch.float64: a plan takes"),
    (lambda: kt.Plan(dtype=torch.float32, num_query_heads=3,
                     num_kv_heads=2, head_dim=16),
     "query heads Hq = 3 must be a multiple of kv heads Hkv = 2"),
    (lambda: kt.Plan(dtype=torch.float32, num_query_heads=4,
                     num_kv_heads=2, head_dim=16, window=4, causal=False),
     "a sliding window needs causal=True"),
    (lambda: kt.Plan(dtype=torch.float32, num_query_heads=4,
                     num_kv_heads=2, head_dim=16, device="meta"),
     "device meta: a plan runs on the CPU or a CUDA device"),
    (lambda: kt.Plan(dtype=torch.float32, num_query_heads=4,
                     num_kv_heads=2, head_dim=16, max_batch=-1),
     "max_batch"),
    (lambda: torch.ops.kvattn.plan_run(
        "kvattn-plan-none", torch.empty(1, 4, 1, 16), torch.empty(1),
        torch.empty(1), torch.zeros(1, dtype=I32), torch.zeros(1, dtype=I32),
        None, None, None, None, torch.empty(1, 4, 1, 16)),
     "no kvattn plan 'kvattn-plan-none'"),
])
def test_misuse_is_a_kvattn_error(call, message):
    with pytest.raises(kvattn.KVAttnError, match=message):
        call()


def test_a_closed_plan_is_refused():
    plan, args = _setup()
    plan.close()
    with pytest.raises(kvattn.KVAttnError, match="no kvattn plan"):
        plan.run(args.pop("query"), args.pop("key"), args.pop("value"),
                 args.pop("q_offset"), args.pop("kv_len"), **args)
    assert plan.status() is None  # a CPU plan raises at run()


def test_the_device_paths_read_nothing_back():
    """The CUDA kernels of kvattn::attention/attention_out/append and of the
    plan ops (never executed here: no GPU; their device part runs on the
    emulated GPU in python/torch_emulated_tests) contain no host read-back
    of a device value: a guard against reintroducing the per-call copy of
    q_offset/kv_len (it was `.cpu().tolist()`)."""
    import inspect
    from kvattn.torch import mla, serving
    for fn in (kt._cuda_attention, kt._cuda_append, serving.device_run,
               serving.Plan._run, serving.Plan._check, serving._Buf.__init__,
               mla._cuda_mla, mla._cuda_cache_write):
        src = inspect.getsource(fn)
        for call in (".cpu(", ".tolist(", ".item(", ".numpy(",
                     "synchronize(", "host_view("):
            assert call not in src, (fn.__qualname__, call)
    # The default kv_len of a call is made on the device, not copied there.
    assert "torch.full((B,), S" in inspect.getsource(kt._attention_into)
