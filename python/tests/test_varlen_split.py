"""Split-KV of a ragged batch (q_start; docs/tile-program.md, "Split-KV of a
ragged batch") against a NumPy float64 reference: decode rows beside a
prefill chunk over caches of 1, 37, 300 and 1100 keys, NaN in every K/V slot
past a sequence's kv_len, on the CPU (static splits larger than the short
sequences' blocks) and the emulated GPU (a static split, and a run-time one
whose merge kernel is of kind merge_varlen).

    sequence b owns packed rows q_start[b] .. q_start[b+1]-1 at positions
    q_offset[b] + i and sees its keys j < kv_len[b] with j <= its position.
"""
import math

import numpy as np
import pytest

import kvattn
from conftest import distinct

LENS = [1, 5, 1, 1]
KV_LEN = np.array([1, 37, 300, 1100], np.int64)
HQ, HKV, S, D = 4, 2, 1100, 16


def reference(q, k, v, q_start, q_offset, kv_len):
    """float64 (out [1, Hq, T, D], lse [1, Hq, T]) from the definition."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    _, hq, t, d = q.shape
    out = np.zeros((1, hq, t, v.shape[3]))
    lse = np.full((1, hq, t), -np.inf)
    for b in range(len(q_start) - 1):
        for i in range(q_start[b + 1] - q_start[b]):
            row = q_start[b] + i
            keys = np.arange(min(kv_len[b], q_offset[b] + i + 1))
            if keys.size == 0:
                continue
            for h in range(hq):
                g = h // (hq // k.shape[1])
                s = k[b, g][keys] @ q[0, h, row] / math.sqrt(d)
                m = s.max()
                total = np.exp(s - m).sum()
                out[0, h, row] = np.exp(s - m) @ v[b, g][keys] / total
                lse[0, h, row] = m + math.log(total)
    return out, lse


def ragged_ir(static=True):
    """The ragged attention with static (or dynamic T and B) sizes."""
    b = len(LENS)
    t = sum(LENS)
    T, B, B1 = (str(t), str(b), str(b + 1)) if static else ("?", "?", "?")
    q = f"tensor<1x{HQ}x{T}x{D}xf32>"
    kv = f"tensor<{B}x{HKV}x{S}x{D}xf32>"
    lse = f"tensor<1x{HQ}x{T}xf32>"
    idx = f"tensor<{B}xi64>"
    starts = f"tensor<{B1}xi64>"
    return (f"func.func @main(%q: {q}, %k: {kv}, %v: {kv}, %qs: {starts}, "
            f"%qo: {idx}, %kl: {idx}) -> ({q}, {lse}) {{\n"
            f"  %o, %lse = kvattn.attention %q, %k, %v q_start(%qs : "
            f"{starts}) q_offset(%qo : {idx}) kv_len(%kl : {idx}) causal\n"
            f"      : {q}, {kv}, {kv} -> {q}, {lse}\n"
            f"  return %o, %lse : {q}, {lse}\n}}\n")


def case():
    q_start = np.concatenate([[0], np.cumsum(LENS)]).astype(np.int64)
    t = int(q_start[-1])
    q_offset = KV_LEN - np.diff(q_start)
    q = distinct((1, HQ, t, D), 21)
    k = distinct((len(LENS), HKV, S, D), 22)
    v = distinct((len(LENS), HKV, S, D), 23)
    want = reference(q, k, v, q_start, q_offset, KV_LEN)
    # Slots past kv_len are never trusted: NaN there changes nothing.
    for b, n in enumerate(KV_LEN):
        k[b, :, n:] = np.nan
        v[b, :, n:] = np.nan
    return (q, k, v, q_start, q_offset, KV_LEN), want


@pytest.mark.parametrize("split", [1, 3, 8, 64])
def test_cpu_split_counts(split):
    args, (want, want_lse) = case()
    prog = kvattn.compile(ragged_ir(), split_kv=split)
    out, lse = prog.run(*args)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    assert np.isfinite(out).all() and np.isfinite(lse).all()


def test_cpu_split_changes_the_bytes_not_the_result():
    """The split happened: the long sequence's rows merge 8 parts (bytes
    differ from no split) and agree with the reference either way; the
    same split gives the same bytes run to run."""
    args, _ = case()
    one, _ = kvattn.compile(ragged_ir(), split_kv=1).run(*args)
    prog = kvattn.compile(ragged_ir(), split_kv=8)
    eight, _ = prog.run(*args)
    again, _ = prog.run(*args)
    assert not np.array_equal(one, eight)
    assert np.array_equal(eight, again)


@pytest.mark.parametrize("options", [{"split_kv": 4},
                                     {"split_kv": 8, "block_n": 16}])
def test_emulated_gpu_static_split(emulated_runtime, options):
    """The scalar (f32) lowering: the attention_varlen kernel with grid z
    = the split and the merge_varlen kernel over the packed rows."""
    args, (want, want_lse) = case()
    prog = kvattn.compile(ragged_ir(), target="gpu",
                          runtime=emulated_runtime, **options)
    kinds = [k["kind"] for k in prog.kernels_info]
    assert kinds == ["attention_varlen", "merge_varlen"]
    assert prog.kernels_info[0]["tile"]["split_kv"] == options["split_kv"]
    out, lse = prog.run(query=args[0], key=args[1], value=args[2],
                        q_start=args[3], q_offset=args[4], kv_len=args[5])
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    prog.close()


def test_emulated_gpu_run_time_split(emulated_runtime):
    """Dynamic T and B: split-kv = 0 becomes a run-time split whose count
    the runtime takes from the ragged grid (its manifest rule); the
    workspaces are sized from T."""
    args, (want, want_lse) = case()
    prog = kvattn.compile(ragged_ir(static=False), target="gpu",
                          runtime=emulated_runtime, split_kv=0)
    assert prog.split_max > 1
    assert [k["kind"] for k in prog.kernels_info] == ["attention_varlen",
                                                      "merge_varlen"]
    out, lse = prog.run(query=args[0], key=args[1], value=args[2],
                        q_start=args[3], q_offset=args[4], kv_len=args[5])
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    prog.close()


def test_plan_run_time_split_workspaces_from_t(emulated_runtime):
    """A serving plan of the ragged attention (dynamic T and B, split-kv = 0
    on the GPU): its split workspaces are sized at plan time from the bound
    on the packed rows T (max_sizes' L), N_max parts, and each run picks
    its n from the ragged grid; two steps of different T and B run on the
    same plan against the reference."""
    rt = emulated_runtime
    desc = dict(dtype="f32", num_query_heads=HQ, num_kv_heads=HKV,
                head_dim=D, causal=True, varlen=True)
    t_max = 16
    plan = kvattn.plan(desc, runtime=rt,
                       max_sizes={"B": 8, "L": t_max, "S": S})
    # out_parts [N_max, 1, Hq, T_max, D] + lse_parts [N_max, 1, Hq, T_max]
    # in f32 (N_max = 64: S is dynamic), besides the status words: bounded
    # by T, not by B x max L (a bound of 64 sequences needs no more).
    parts = 64 * HQ * t_max * (D + 1) * 4
    assert parts <= plan.workspace_bytes < parts + 4096
    wide = kvattn.plan(desc, runtime=rt,
                       max_sizes={"B": 64, "L": t_max, "S": S})
    assert wide.workspace_bytes == plan.workspace_bytes
    wide.close()
    args, (want, _) = case()
    q, k, v, qs, qo, kvl = args
    k, v = np.nan_to_num(k), np.nan_to_num(v)
    i32 = lambda x: kvattn.to_device(np.asarray(x, np.int32), rt)
    # The second step drops the first sequence (its row) and keeps 3.
    for b0 in (0, 1):
        sub_qs = qs[b0:] - qs[b0]
        t = int(sub_qs[-1])
        sub_q = q[:, :, qs[b0]:]
        dq = kvattn.to_device(np.ascontiguousarray(sub_q), rt)
        dout = rt.empty(sub_q.shape, "f32")
        plan.run(query=dq, key=kvattn.to_device(k[b0:], rt),
                 value=kvattn.to_device(v[b0:], rt), out=dout,
                 q_start=i32(sub_qs), q_offset=i32(qo[b0:]),
                 kv_len=i32(kvl[b0:]))
        assert plan.status() is None
        np.testing.assert_allclose(dout.numpy(), want[:, :, qs[b0]:],
                                   rtol=2e-5, atol=2e-5)
        assert t <= t_max
    plan.close()
