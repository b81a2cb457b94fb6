"""Ragged keys (k_start, FlashAttention's cu_seqlens_k) and a batch-to-cache
map (cache_batch_idx, FlashAttention's kvcache API) against a NumPy float64
reference that slices each batch's keys itself, on the CPU path and the
emulated GPU, through an attention description, and their errors. Every
case is one where ignoring the feature changes the answer (asserted next to
the comparison); rows no batch owns hold NaN.
"""
import math

import numpy as np
import pytest

import kvattn
from conftest import distinct


def reference(q, ks, vs, q_offsets, causal=True):
    """float64 (out, lse) of one batch b at a time: q[b] [Hq, L, D] against
    its own keys ks[b] [Hkv, n_b, D] (positions 0 .. n_b - 1), queries at
    q_offsets[b] + i."""
    out, lse = [], []
    for b, qb in enumerate(q):
        qb = np.asarray(qb, np.float64)
        k = np.asarray(ks[b], np.float64)
        v = np.asarray(vs[b], np.float64)
        hq, l, d = qb.shape
        hkv, n = k.shape[0], k.shape[1]
        o = np.zeros((hq, l, v.shape[2]))
        m = np.full((hq, l), -np.inf)
        for h in range(hq):
            g = h // (hq // hkv)
            s = qb[h] @ k[g].T / math.sqrt(d)
            for i in range(l):
                seen = np.arange(n) <= q_offsets[b] + i if causal else \
                    np.ones(n, bool)
                if not seen.any():
                    continue
                row = s[i][seen]
                top = row.max()
                p = np.exp(row - top)
                o[h, i] = p @ v[g][seen] / p.sum()
                m[h, i] = top + math.log(p.sum())
        out.append(o)
        lse.append(m)
    return out, lse


def ir(dtype, q_shape, kv_shape, groups, with_lse=True):
    q = "tensor<" + "x".join(map(str, q_shape)) + f"x{dtype}>"
    kv = "tensor<" + "x".join(map(str, kv_shape)) + f"x{dtype}>"
    lse = "tensor<" + "x".join(map(str, q_shape[:3])) + "xf32>"
    args = ", ".join(f"%{n}: {t}" for n, t in groups)
    uses = " ".join(f"{n}(%{n} : {t})" for n, t in groups)
    results = f"{q}, {lse}" if with_lse else q
    names = "%o, %lse" if with_lse else "%o"
    return (f"func.func @main(%q: {q}, %k: {kv}, %v: {kv}, {args})\n"
            f"    -> ({results}) {{\n"
            f"  {names} = kvattn.attention %q, %k, %v {uses} causal\n"
            f"      : {q}, {kv}, {kv} -> {results}\n"
            f"  return {names} : {results}\n}}\n")


# --- ragged keys ----------------------------------------------------------------

HQ, HKV, D = 4, 2, 16


def packed(lens, gap, seed):
    """K/V [1, Hkv, N, D]: `gap` NaN rows before the first sequence and after
    the last (no sequence owns them), the sequences back to back between;
    k_start [B + 1]."""
    starts = [gap]
    for n in lens:
        starts.append(starts[-1] + n)
    total = starts[-1] + gap
    k = distinct((1, HKV, total, D), seed)
    v = distinct((1, HKV, total, D), seed + 1)
    for x in (k, v):
        x[:, :, :gap] = np.nan
        x[:, :, starts[-1]:] = np.nan
    return k, v, np.array(starts, np.int32)


def ragged_keys_case(dtype="f32"):
    lens, l = [20, 5, 33], 3
    k, v, ks = packed(lens, 2, 41)
    q = distinct((len(lens), HQ, l, D), 40)
    qo = np.array([n - l for n in lens], np.int32)
    text = ir(dtype, q.shape, k.shape,
              [("k_start", f"tensor<{len(lens) + 1}xi32>"),
               ("q_offset", f"tensor<{len(lens)}xi32>")])
    keys = [k[0][:, ks[b]:ks[b] + n] for b, n in enumerate(lens)]
    values = [v[0][:, ks[b]:ks[b] + n] for b, n in enumerate(lens)]
    return text, q, k, v, ks, qo, keys, values


@pytest.mark.parametrize("options", [{}, {"vectorize": False},
                                     {"split_kv": 3, "block_n": 8}])
def test_ragged_keys_cpu(options):
    text, q, k, v, ks, qo, keys, values = ragged_keys_case()
    out, lse = kvattn.compile(text, **options).run(q, k, v, ks, qo)
    want, want_lse = reference(q, keys, values, qo)
    np.testing.assert_allclose(out, np.stack(want), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, np.stack(want_lse), rtol=2e-5, atol=2e-5)
    # Ignoring k_start (every batch reading rows from 0) reads NaN gaps and
    # other sequences' keys.
    wrong = [k[0][:, :n] for n in (20, 5, 33)]
    assert not np.allclose(np.stack(reference(q, wrong, wrong, qo)[0]),
                           np.stack(want), equal_nan=True)


def test_ragged_keys_and_queries_cpu():
    # Ragged queries (q_start) next to ragged keys: a decode token, a
    # prefill chunk, a sequence without rows, a short append.
    q_lens, k_lens = [1, 17, 0, 5], [40, 17, 3, 9]
    k, v, ks = packed(k_lens, 3, 51)
    qs = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    qo = np.array([kl - ql for kl, ql in zip(k_lens, q_lens)], np.int32)
    q = distinct((1, HQ, int(qs[-1]), D), 50)
    b = len(q_lens)
    text = ir("f32", q.shape, k.shape,
              [("q_start", f"tensor<{b + 1}xi32>"),
               ("k_start", f"tensor<{b + 1}xi32>"),
               ("q_offset", f"tensor<{b}xi32>")])
    out, lse = kvattn.compile(text).run(q, k, v, qs, ks, qo)
    per_q = [q[0][:, qs[i]:qs[i + 1]] for i in range(b)]
    keys = [k[0][:, ks[i]:ks[i] + n] for i, n in enumerate(k_lens)]
    values = [v[0][:, ks[i]:ks[i] + n] for i, n in enumerate(k_lens)]
    want, want_lse = reference(per_q, keys, values, qo)
    np.testing.assert_allclose(out[0], np.concatenate(want, axis=1),
                               rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse[0], np.concatenate(want_lse, axis=1),
                               rtol=2e-5, atol=2e-5)


def test_ragged_keys_emulated_gpu(emulated_runtime):
    text, q, k, v, ks, qo, keys, values = ragged_keys_case()
    want, want_lse = reference(q, keys, values, qo)
    for options in ({}, {"split_kv": 2}):
        prog = kvattn.compile(text, target="gpu", runtime=emulated_runtime,
                              **options)
        out, lse = prog.run(query=q, key=k, value=v, k_start=ks, q_offset=qo)
        np.testing.assert_allclose(out, np.stack(want), rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(lse, np.stack(want_lse), rtol=2e-5,
                                   atol=2e-5)
        prog.close()
    text16, *_ = ragged_keys_case("bf16")
    qb, kb, vb = (kvattn.to_bf16(x) for x in (q, k, v))
    qx, kx, vx = (kvattn.from_bf16(x) for x in (qb, kb, vb))
    want, _ = reference(qx, [kx[0][:, ks[b]:ks[b] + n] for b, n in
                             enumerate((20, 5, 33))],
                        [vx[0][:, ks[b]:ks[b] + n] for b, n in
                         enumerate((20, 5, 33))], qo)
    prog = kvattn.compile(text16, target="gpu", runtime=emulated_runtime)
    out, _ = prog.run(query=qb, key=kb, value=vb, k_start=ks, q_offset=qo)
    np.testing.assert_allclose(kvattn.from_bf16(out), np.stack(want),
                               atol=3e-2, rtol=2e-2)
    # Bad starts: the runtime's named error before the launch.
    bad = ks.copy()
    bad[2] = bad[1] - 1
    with pytest.raises(kvattn.KVAttnError, match=r"k_start\[2\] = 21 is below "
                       r"k_start\[1\] = 22: key starts must not decrease "
                       r"\(batch 1\)"):
        prog.run(query=qb, key=kb, value=vb, k_start=bad, q_offset=qo)
    prog.close()


# --- cache_batch_idx ------------------------------------------------------------

def cache_case(dtype="f32"):
    b, c, l, s = 3, 5, 2, 24
    q = distinct((b, HQ, l, D), 60)
    k = distinct((c, HKV, s, D), 61)
    v = distinct((c, HKV, s, D), 62)
    idx = np.array([3, 0, 3], np.int32)  # row 3 read twice, 1, 2, 4 unread
    kvl = np.array([24, 17, 9], np.int32)
    for row in (1, 2, 4):
        k[row] = np.nan
        v[row] = np.nan
    for bi in range(b):  # past kv_len of the rows read
        k[idx[bi], :, max(kvl[idx == idx[bi]]):] = np.nan
        v[idx[bi], :, max(kvl[idx == idx[bi]]):] = np.nan
    qo = kvl - l
    text = ir(dtype, q.shape, k.shape,
              [("cache_batch_idx", f"tensor<{b}xi32>"),
               ("q_offset", f"tensor<{b}xi32>"),
               ("kv_len", f"tensor<{b}xi32>")])
    keys = [k[idx[i]][:, :kvl[i]] for i in range(b)]
    values = [v[idx[i]][:, :kvl[i]] for i in range(b)]
    return text, q, k, v, idx, qo, kvl, keys, values


@pytest.mark.parametrize("options", [{}, {"vectorize": False},
                                     {"split_kv": 2, "block_n": 8}])
def test_cache_batch_idx_cpu(options):
    text, q, k, v, idx, qo, kvl, keys, values = cache_case()
    out, lse = kvattn.compile(text, **options).run(q, k, v, idx, qo, kvl)
    want, want_lse = reference(q, keys, values, qo)
    np.testing.assert_allclose(out, np.stack(want), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, np.stack(want_lse), rtol=2e-5, atol=2e-5)
    # Batch 0 reads row 3, not row 0: ignoring the map changes its answer.
    plain = reference(q[:1], [k[0][:, :17]], [v[0][:, :17]], qo[:1])[0][0]
    assert np.abs(plain - want[0]).max() > 0.05


def test_cache_batch_idx_emulated_gpu(emulated_runtime):
    text, q, k, v, idx, qo, kvl, keys, values = cache_case()
    want, want_lse = reference(q, keys, values, qo)
    for options in ({}, {"split_kv": 2}):
        prog = kvattn.compile(text, target="gpu", runtime=emulated_runtime,
                              **options)
        out, lse = prog.run(query=q, key=k, value=v, cache_batch_idx=idx,
                            q_offset=qo, kv_len=kvl)
        np.testing.assert_allclose(out, np.stack(want), rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(lse, np.stack(want_lse), rtol=2e-5,
                                   atol=2e-5)
        with pytest.raises(kvattn.KVAttnError,
                           match=r"cache_batch_idx\[1\] = 5 is outside "
                           r"\[0, C = 5\): the cache has 5 row\(s\) "
                           r"\(batch 1\)"):
            prog.run(query=q, key=k, value=v,
                     cache_batch_idx=np.array([3, 5, 0], np.int32),
                     q_offset=qo, kv_len=kvl)
        prog.close()


# --- descriptions and errors ----------------------------------------------------

def test_description():
    text = kvattn.attention_ir(dtype="f32", num_query_heads=4, num_kv_heads=2,
                               head_dim=16, causal=True, ragged_keys=True,
                               varlen=True)
    assert "k_start(%arg6 : tensor<?xi32>)" in text
    assert "tensor<1x2x?x16xf32>" in text
    text = kvattn.attention_ir(dtype="f32", batch=3, num_query_heads=4,
                               num_kv_heads=2, head_dim=16, causal=True,
                               cache_batch_idx=True, cache_rows=8)
    assert "cache_batch_idx(%arg5 : tensor<3xi32>)" in text
    assert "tensor<8x2x?x16xf32>" in text
    with pytest.raises(kvattn.KVAttnError, match="ragged_keys with paged"):
        kvattn.attention_ir(dtype="f32", num_query_heads=4, num_kv_heads=2,
                            head_dim=16, ragged_keys=True, paged=True,
                            page_size=16)


def test_bad_metadata_cpu():
    text, q, k, v, ks, qo, *_ = ragged_keys_case()
    prog = kvattn.compile(text)
    bad = ks.copy()
    bad[3] = k.shape[2] + 1
    with pytest.raises(kvattn.KVAttnError, match=r"k_start\[3\] = 63 is past "
                       r"the packed key rows N = 62 \(batch 2\)"):
        prog.run(q, k, v, bad, qo)
    text, q, k, v, idx, qo, kvl, *_ = cache_case()
    prog = kvattn.compile(text)
    with pytest.raises(kvattn.KVAttnError, match=r"cache_batch_idx\[0\] = -1 "
                       r"is outside \[0, C = 5\)"):
        prog.run(q, k, v, np.array([-1, 0, 1], np.int32), qo, kvl)


@pytest.mark.parametrize("groups, kv, message", [
    ([("k_start", "tensor<3xi32>"), ("q_offset", "tensor<3xi32>")],
     (2, HKV, 10, D), r"with k_start the key is packed"),
    ([("cache_batch_idx", "tensor<2xi32>"), ("q_offset", "tensor<3xi32>")],
     (4, HKV, 10, D), r"batch size B mismatch: cache_batch_idx dim 0 is 2"),
])
def test_verifier_errors(groups, kv, message):
    text = ir("f32", (3, HQ, 2, D), kv, groups)
    with pytest.raises(kvattn.KVAttnError, match=message):
        kvattn.compile(text)


# --- serving plans: device validation -------------------------------------------

def test_plan_device_validation(emulated_runtime):
    """A plan from a description with ragged keys and ragged queries: the
    metadata on the device (validated there, the host check's messages) or
    on the host (checked before the launch)."""
    rt = emulated_runtime
    q_lens, k_lens = [1, 4, 2], [9, 4, 12]
    k, v, ks = packed(k_lens, 1, 71)
    k = np.nan_to_num(k)  # (the plan's kernels never read them either)
    v = np.nan_to_num(v)
    qs = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    qo = np.array([kl - ql for kl, ql in zip(k_lens, q_lens)], np.int32)
    kvl = np.array(k_lens, np.int32)
    q = distinct((1, HQ, int(qs[-1]), D), 70)
    desc = dict(dtype="f32", num_query_heads=HQ, num_kv_heads=HKV,
                head_dim=D, causal=True, varlen=True, ragged_keys=True)
    plan = kvattn.plan(desc, runtime=rt,
                       max_sizes={"B": 4, "L": 16, "S": 64})
    dq, dk, dv = (kvattn.to_device(x, rt) for x in (q, k, v))
    dout = rt.empty(q.shape, "f32")
    meta = dict(q_start=kvattn.to_device(qs, rt),
                k_start=kvattn.to_device(ks, rt),
                q_offset=kvattn.to_device(qo, rt),
                kv_len=kvattn.to_device(kvl, rt))
    plan.run(query=dq, key=dk, value=dv, out=dout, **meta)
    assert plan.status() is None
    per_q = [q[0][:, qs[i]:qs[i + 1]] for i in range(3)]
    keys = [k[0][:, ks[i]:ks[i] + n] for i, n in enumerate(k_lens)]
    values = [v[0][:, ks[i]:ks[i] + n] for i, n in enumerate(k_lens)]
    want, _ = reference(per_q, keys, values, qo)
    np.testing.assert_allclose(dout.numpy()[0], np.concatenate(want, axis=1),
                               rtol=2e-5, atol=2e-5)
    # kv_len[1] = 5 > the 4 rows of sequence 1: the device's word reads as
    # the host check's message.
    message = (r"kv_len\[1\] = 5 exceeds the 4 key row\(s\) of the sequence "
               r"\(k_start\[1\] = 10 .. k_start\[2\] = 14\): a sequence "
               r"reads only its own rows \(batch 1\)")
    bad = dict(meta, kv_len=kvattn.to_device(np.array([9, 5, 12], np.int32),
                                             rt))
    plan.run(query=dq, key=dk, value=dv, out=dout, **bad)
    import re
    assert re.search(message, plan.status())
    plan.clear_status()
    with pytest.raises(kvattn.KVAttnError, match=message):
        plan.run(query=dq, key=dk, value=dv, out=dout, q_start=qs, k_start=ks,
                 q_offset=qo, kv_len=[9, 5, 12])
    decreasing = ks.copy()
    decreasing[2] = 3
    plan.run(query=dq, key=dk, value=dv, out=dout,
             **dict(meta, k_start=kvattn.to_device(decreasing, rt)))
    assert re.search(r"k_start\[2\] = 3 is below k_start\[1\] = 10: key "
                     r"starts must not decrease \(batch 1\)", plan.status())
    plan.close()

    # A batch-to-cache map; a row outside the cache is refused on the device.
    text, q, k, v, idx, qo, kvl, keys, values = cache_case()
    k, v = np.nan_to_num(k), np.nan_to_num(v)
    plan = kvattn.plan(dict(dtype="f32", num_query_heads=HQ,
                            num_kv_heads=HKV, head_dim=D, causal=True,
                            cache_batch_idx=True), runtime=rt,
                       max_sizes={"B": 4, "L": 4, "S": 32, "cache_rows": 8})
    dq, dk, dv = (kvattn.to_device(x, rt) for x in (q, k, v))
    dout = rt.empty(q.shape, "f32")
    meta = dict(cache_batch_idx=kvattn.to_device(idx, rt),
                q_offset=kvattn.to_device(qo, rt),
                kv_len=kvattn.to_device(kvl, rt))
    plan.run(query=dq, key=dk, value=dv, out=dout, **meta)
    assert plan.status() is None
    want, _ = reference(q, [k[idx[i]][:, :kvl[i]] for i in range(3)],
                        [v[idx[i]][:, :kvl[i]] for i in range(3)], qo)
    np.testing.assert_allclose(dout.numpy(), np.stack(want), rtol=2e-5,
                               atol=2e-5)
    plan.run(query=dq, key=dk, value=dv, out=dout,
             **dict(meta, cache_batch_idx=kvattn.to_device(
                 np.array([0, 5, 1], np.int32), rt)))
    assert plan.status() == ("launch of 'attention_kvattn_0': "
                             "cache_batch_idx[1] = 5 is outside [0, C = 5): "
                             "the cache has 5 row(s) (batch 1)")
    plan.close()
