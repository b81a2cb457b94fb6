"""Tree masks for speculative decoding (tree_parents) against a NumPy float64
reference of the formula, on the CPU paths (vectorised, scalar, split-KV)
and the emulated GPU (scalar f32 and bf16 tensor cores, plans with device
validation of the tree), the conversion from FlashInfer's packed bit mask, and the errors. Every
numeric case is one where a wrong tree (or none) changes the answer
(asserted next to the comparison).

    sequence b owns packed rows q_start[b] .. q_start[b+1]-1 (L_b draft
    tokens); its draft token a is key kv_len[b] - L_b + a; row i sits at
    qp = q_offset[b] + depth(i) and sees the cache keys j < kv_len[b] - L_b
    (causal/window by position kp = j) and the draft keys of its ancestors
    and itself (kp = q_offset[b] + depth(a)).
"""
import math

import numpy as np
import pytest

import kvattn
from conftest import distinct
from kvattn import tree as kt


full_tree = kt.complete_tree


def reference(q, k, v, q_start, kv_len, parents, causal=True, window=None,
              sinks=None, slopes=None):
    """float64 (out [1, Hq, T, Dv], lse [1, Hq, T]) of the tree formula,
    written from the definition (ancestor sets, not the walk the compiled
    code does)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    _, Hq, T, D = q.shape
    Hkv = k.shape[1]
    out = np.zeros((1, Hq, T, v.shape[3]))
    lse = np.full((1, Hq, T), -np.inf)
    for b in range(len(q_start) - 1):
        lo, hi = q_start[b], q_start[b + 1]
        L = hi - lo
        base = kv_len[b] - L
        qo = base  # k_offset 0: the roots follow the cache
        par = [parents[lo + i] for i in range(L)]
        anc = []
        depth = []
        for i in range(L):
            a = {i} | (anc[par[i]] if par[i] >= 0 else set())
            anc.append(a)
            depth.append(len(a) - 1)
        for i in range(L):
            qp = qo + depth[i]
            keys, kps = [], []
            for j in range(kv_len[b]):
                if j < base:
                    kp = j
                else:
                    a = j - base
                    if a not in anc[i]:
                        continue
                    kp = qo + depth[a]
                if causal and kp > qp:
                    continue
                if window is not None and qp - kp >= window:
                    continue
                keys.append(j)
                kps.append(kp)
            keys, kps = np.array(keys, int), np.array(kps, np.float64)
            for h in range(Hq):
                g = h // (Hq // Hkv)
                s = k[b, g][keys] @ q[0, h, lo + i] / math.sqrt(D)
                if slopes is not None:
                    s = s - float(slopes[h]) * np.abs(qp - kps)
                logits = s if sinks is None else np.append(s, float(sinks[h]))
                if logits.size == 0:
                    continue
                m = logits.max()
                total = np.exp(logits - m).sum()
                out[0, h, lo + i] = np.exp(s - m) @ v[b, g][keys] / total
                lse[0, h, lo + i] = m + math.log(total)
    return out, lse


def tree_ir(shape, extras="", attrs="causal", with_lse=True, parents_type="i64"):
    B, hq, hkv, T, S, d = shape
    q = f"tensor<1x{hq}x{T}x{d}xf32>"
    kv = f"tensor<{B}x{hkv}x{S}x{d}xf32>"
    lse = f"tensor<1x{hq}x{T}xf32>"
    idx = f"tensor<{B}xi64>"
    results = f"{q}, {lse}" if with_lse else q
    names = "%o, %lse" if with_lse else "%o"
    args, uses = "", ""
    for name, ty in extras:
        args += f", %{name}: {ty}"
        uses += f" {name}(%{name} : {ty})"
    pt = f"tensor<{T}x{parents_type}>"
    return (f"func.func @main(%q: {q}, %k: {kv}, %v: {kv}, "
            f"%qs: tensor<{B + 1}xi64>, %qo: {idx}, %kl: {idx}, %tp: {pt}"
            f"{args}) -> ({results}) {{\n"
            f"  {names} = kvattn.attention %q, %k, %v q_start(%qs : "
            f"tensor<{B + 1}xi64>) q_offset(%qo : {idx}) kv_len(%kl : {idx})"
            f"{uses} tree_parents(%tp : {pt}) {attrs}\n"
            f"      : {q}, {kv}, {kv} -> {results}\n"
            f"  return {names} : {results}\n}}\n")


def issue_case():
    """A tree of depth 4 with branching 3 (121 draft tokens) between two
    plain decode rows, one ragged launch."""
    parents = [-1] + full_tree(4, 3) + [-1]
    lens = [1, 121, 1]
    q_start = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    kv_len = np.array([300, 380, 77], np.int64)
    return np.array(parents, np.int64), q_start, kv_len


@pytest.mark.parametrize("options", [{}, {"vectorize": False},
                                     {"split_kv": 3}, {"pack_gqa": False}])
def test_tree_beside_decode_rows(options):
    parents, q_start, kv_len = issue_case()
    B, hq, hkv, S, d = 3, 4, 2, 400, 16
    T = int(q_start[-1])
    q = distinct((1, hq, T, d), 1)
    k = distinct((B, hkv, S, d), 2)
    v = distinct((B, hkv, S, d), 3)
    qo = kv_len - np.diff(q_start)
    prog = kvattn.compile(tree_ir((B, hq, hkv, T, S, d)), **options)
    out, lse = prog.run(q, k, v, q_start, qo, kv_len, parents)
    want, want_lse = reference(q, k, v, q_start, kv_len, parents)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    # A wrong tree changes the answer: every draft token a root (each sees
    # only the cache and itself), or the rows as a chain (plain causal).
    roots = np.full(T, -1, np.int64)
    wrong, _ = reference(q, k, v, q_start, kv_len, roots)
    assert np.abs(wrong - want)[0, :, 2:T - 1].max() > 0.05
    chain = np.array([-1] + [-1] + list(range(120)) + [-1], np.int64)
    plain, _ = reference(q, k, v, q_start, kv_len, chain)
    assert np.abs(plain - want)[0, :, 2:T - 1].max() > 0.05
    # The decode rows are plain decode rows.
    decode, _ = reference(q, k, v, q_start, kv_len, roots)
    np.testing.assert_allclose(out[0, :, [0, T - 1]],
                               decode[0, :, [0, T - 1]], rtol=2e-5, atol=2e-5)


def test_tree_window_sinks_alibi():
    # Several roots, a deep chain, a window that cuts the cache and deeper
    # ancestors (by tree depth), sinks and ALiBi at tree positions.
    parents = np.array([-1, -1, -1] + [-1, 0, 0, 1, 1, 2, 2][:7] +
                       [-1, 0, 1, 2, 3], np.int64)
    lens = [3, 7, 5]
    q_start = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    kv_len = np.array([40, 96, 9], np.int64)
    B, hq, hkv, S, d = 3, 2, 1, 96, 16
    T = int(q_start[-1])
    q = distinct((1, hq, T, d), 11)
    k = distinct((B, hkv, S, d), 12)
    v = distinct((B, hkv, S, d), 13)
    sinks = np.array([0.5, -1.0], np.float32)
    slopes = np.array([0.25, 0.125], np.float32)
    qo = kv_len - np.diff(q_start)
    extras = [("sinks", f"tensor<{hq}xf32>"),
              ("alibi_slopes", f"tensor<{hq}xf32>")]
    want, want_lse = reference(q, k, v, q_start, kv_len, parents, window=4,
                               sinks=sinks, slopes=slopes)
    for options in ({}, {"vectorize": False}, {"split_kv": 2}):
        out, lse = kvattn.compile(
            tree_ir((B, hq, hkv, T, S, d), extras, "causal window = 4",
                    parents_type="i32"), **options).run(
            q, k, v, q_start, qo, kv_len, parents.astype(np.int32), sinks,
            slopes)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    # The tree and the ALiBi bias each change the answer.
    roots = np.full(T, -1, np.int64)
    wrong, _ = reference(q, k, v, q_start, kv_len, roots, window=4,
                         sinks=sinks, slopes=slopes)
    assert np.abs(wrong - want).max() > 0.05
    flat, _ = reference(q, k, v, q_start, kv_len, parents, window=4,
                        sinks=sinks)
    assert np.abs(flat - want).max() > 0.05


def test_packed_mask_matches_flashinfer_layout():
    parents, q_start, kv_len = issue_case()
    packed, indptr = kt.packed_mask_from_parents(parents, q_start, kv_len)
    # Per request ceil(qo_len * kv_len / 8) bytes.
    lens = np.diff(q_start)
    np.testing.assert_array_equal(np.diff(indptr), (lens * kv_len + 7) // 8)
    # Bit k of byte n is element 8 n + k of the row-major (qo_len x kv_len)
    # mask: request 1's local row 3 (a child of the root 0) sees the cache,
    # the root and itself, not its sibling 1 or row 4.
    b, i = 1, 3
    L, K = lens[b], kv_len[b]
    for j in (0, K - L - 1, K - L, K - L + 1, K - L + 3, K - L + 4):
        e = i * K + j
        byte = packed[indptr[b] + e // 8]
        bit = (byte >> (e % 8)) & 1
        a = j - (K - L)
        want = a < 0 or a in (0, 3)  # the cache, the root, itself
        assert bit == want, (j, bit)
    np.testing.assert_array_equal(
        kt.parents_from_packed_mask(packed, indptr, q_start, kv_len), parents)


@pytest.mark.parametrize("edit, message", [
    (lambda m, K, L: m.__setitem__((2, 5), False),
     "custom_mask of request 0 hides cache key 5 from draft row 2"),
    (lambda m, K, L: m.__setitem__((2, K - L + 2), False),
     "custom_mask of request 0: draft row 2 does not see its own key"),
    (lambda m, K, L: m.__setitem__((3, K - L + 2), True),
     r"custom_mask of request 0: draft row 3 sees \[0, 1, 2, 3\], which is "
     r"not "
     r"an ancestor chain"),
])
def test_packed_mask_that_is_no_tree(edit, message):
    parents = np.array([-1, 0, 0, 1], np.int64)  # rows 2 and 3 are cousins
    q_start, kv_len = np.array([0, 4]), np.array([20])
    L, K = 4, 20
    m = np.zeros((L, K), bool)
    m[:, :K - L] = True
    for i in range(L):
        x = i
        while x >= 0:
            m[i, K - L + x] = True
            x = parents[x]
    edit(m, K, L)
    packed = np.packbits(m.reshape(-1), bitorder="little")
    with pytest.raises(kvattn.KVAttnValueError, match=message):
        kt.parents_from_packed_mask(packed, [0, len(packed)], q_start, kv_len)


def run_case(parents, q_start, kv_len, qo=None):
    B, hq, hkv, S, d = len(q_start) - 1, 2, 1, 16, 8
    T = int(q_start[-1])
    q, k, v = (distinct((1, hq, T, d), 1), distinct((B, hkv, S, d), 2),
               distinct((B, hkv, S, d), 3))
    qo = kv_len - np.diff(q_start) if qo is None else qo
    return kvattn.compile(tree_ir((B, hq, hkv, T, S, d))).run(
        q, k, v, np.asarray(q_start, np.int64), np.asarray(qo, np.int64),
        np.asarray(kv_len, np.int64), np.asarray(parents, np.int64))


@pytest.mark.parametrize("parents, qo, message", [
    ([-1, -1, 0, 2], None,
     r"tree_parents\[3\] = 2 is not a row before local row 2 of its "
     r"sequence: a draft token's parent is -1 \(the cache\) or one of its "
     r"rows 0 .. 1 \(batch 1\)"),
    ([-1, -1, 0, -2], None, r"tree_parents\[3\] = -2 is not a row before"),
    ([-1, -1, 0, 0], [9, 12],
     r"q_offset\[1\] = 12 must be k_offset \+ kv_len - L = 0 \+ 16 - 3 = 13: "
     r"the tree's roots sit right after the cached prefix"),
])
def test_run_time_errors(parents, qo, message):
    with pytest.raises(kvattn.KVAttnError, match=message):
        run_case(parents, [0, 1, 4], np.array([10, 16]), qo)


def test_cache_shorter_than_the_tree():
    # The ragged rule (the rows are tokens of the cache) names it first.
    with pytest.raises(kvattn.KVAttnError,
                       match=r"the rows of a sequence must be tokens of its "
                       r"cache \(batch 1\)"):
        run_case([-1, -1, 0, 0], [0, 1, 4], np.array([10, 2]),
                 qo=np.array([9, 0]))


def poisoned_issue_case(d=16):
    """The issue's case with NaN in every K/V slot no key owns (past kv_len):
    inputs (q, k, v, q_start, q_offset, kv_len, parents) and the float64
    reference on the clean values."""
    parents, q_start, kv_len = issue_case()
    B, hq, hkv, S = 3, 4, 2, 400
    T = int(q_start[-1])
    q = distinct((1, hq, T, d), 11)
    k = distinct((B, hkv, S, d), 12)
    v = distinct((B, hkv, S, d), 13)
    want = reference(q, k, v, q_start, kv_len, parents)
    for b in range(B):
        k[b, :, kv_len[b]:] = np.nan
        v[b, :, kv_len[b]:] = np.inf
    qo = kv_len - np.diff(q_start)
    return (q, k, v, q_start, qo, kv_len, parents), want


def named(args):
    """The GPU program's arguments by name (its kernels take them in the
    kernel ABI's order)."""
    return dict(zip(("query", "key", "value", "q_start", "q_offset",
                     "kv_len", "tree_parents"), args))


@pytest.mark.parametrize("options", [{}, {"block_n": 16},
                                     {"pack_gqa": False}])
def test_tree_emulated_gpu(emulated_runtime, options):
    """The issue's case (depth 4, branching 3, beside two decode rows) on the
    emulated GPU's scalar (f32) lowering, NaN/Inf in the unowned slots."""
    args, (want, want_lse) = poisoned_issue_case()
    prog = kvattn.compile(tree_ir((3, 4, 2, 123, 400, 16)), target="gpu",
                          runtime=emulated_runtime, **options)
    out, lse = prog.run(**named(args))
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    # The run-time check names a bad tree before the launch.
    bad = args[6].copy()
    bad[5] = 7
    with pytest.raises(kvattn.KVAttnError,
                       match=r"tree_parents\[5\] = 7 is not a row before "
                       r"local row 4 of its sequence"):
        prog.run(**named(args[:6] + (bad,)))
    prog.close()


def test_tree_emulated_gpu_tensor_cores(emulated_runtime):
    """bf16 on tensor cores (mma.sync), against the reference of the bf16
    values; a tree of roots (the tree ignored) is far from it."""
    args, _ = poisoned_issue_case(32)
    q, k, v = (kvattn.to_bf16(x) for x in args[:3])
    text = tree_ir((3, 4, 2, 123, 400, 32)).replace("xf32>", "xbf16>")
    text = text.replace("1x4x123xbf16", "1x4x123xf32")
    prog = kvattn.compile(text, target="gpu", runtime=emulated_runtime)
    out, lse = prog.run(**named((q, k, v) + args[3:]))
    qx, kx, vx = (np.nan_to_num(kvattn.from_bf16(x), nan=0.0, posinf=0.0)
                  for x in (q, k, v))
    want, want_lse = reference(qx, kx, vx, args[3], args[5], args[6])
    got = kvattn.from_bf16(out)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-2, atol=1e-2)
    roots, _ = reference(qx, kx, vx, args[3], args[5],
                         np.full(123, -1, np.int64))
    assert np.abs(roots - got)[0, :, 2:122].max() > 0.1
    prog.close()


def test_plan_device_validation(emulated_runtime):
    """A plan from a description with a tree: the metadata on the device
    (the tree checked there, the host check's messages) or on the host."""
    import re
    rt = emulated_runtime
    args, (want, _) = poisoned_issue_case()
    q, k, v, qs, qo, kvl, parents = args
    k, v = np.nan_to_num(k), np.nan_to_num(v)
    desc = dict(dtype="f32", num_query_heads=4, num_kv_heads=2, head_dim=16,
                causal=True, varlen=True, tree=True)
    plan = kvattn.plan(desc, runtime=rt,
                       max_sizes={"B": 4, "L": 128, "S": 400})
    dq, dk, dv = (kvattn.to_device(x, rt) for x in (q, k, v))
    dout = rt.empty(q.shape, "f32")
    i32 = lambda x: kvattn.to_device(np.asarray(x, np.int32), rt)
    meta = dict(q_start=i32(qs), q_offset=i32(qo), kv_len=i32(kvl),
                tree_parents=i32(parents))
    plan.run(query=dq, key=dk, value=dv, out=dout, **meta)
    assert plan.status() is None
    np.testing.assert_allclose(dout.numpy(), want, rtol=2e-5, atol=2e-5)
    cases = []
    bad = parents.copy()
    bad[40] = 39  # local row 39 of sequence 1: its own row
    cases.append((dict(tree_parents=bad),
                  r"tree_parents\[40\] = 39 is not a row before local row 39 "
                  r"of its sequence: a draft token's parent is -1 \(the "
                  r"cache\) or one of its rows 0 .. 38 \(batch 1\)"))
    root = parents.copy()
    root[1] = -2
    cases.append((dict(tree_parents=root),
                  r"tree_parents\[1\] = -2 is not a row before local row 0 "
                  r"of its sequence: a draft token's parent is -1 \(the "
                  r"cache\) or none of its rows \(row 0 is a root\) "
                  r"\(batch 1\)"))
    moved = qo.copy()
    moved[1] -= 1
    cases.append((dict(q_offset=moved),
                  r"q_offset\[1\] = 258 must be k_offset \+ kv_len - L = "
                  r"0 \+ 380 - 121 = 259: the tree's roots sit right after "
                  r"the cached prefix, its draft tokens are the last L keys "
                  r"\(batch 1\)"))
    for change, message in cases:
        host = dict(q_start=qs, q_offset=qo, kv_len=kvl, tree_parents=parents)
        host.update(change)
        device = {n: i32(x) for n, x in host.items()}
        plan.run(query=dq, key=dk, value=dv, out=dout, **device)
        status = plan.status()
        assert status and re.search(message, status), status
        plan.clear_status()
        with pytest.raises(kvattn.KVAttnError, match=message):
            plan.run(query=dq, key=dk, value=dv, out=dout, **host)
    # The first violation in the host's order: a bad parent in sequence 1
    # and a bad q_offset in sequence 1 name the parent; a bad q_start names
    # q_start and reads no row out of range.
    both = dict(meta, tree_parents=i32(bad), q_offset=i32(moved))
    plan.run(query=dq, key=dk, value=dv, out=dout, **both)
    assert re.search(r"tree_parents\[40\] = 39", plan.status())
    plan.clear_status()
    wild = qs.copy()
    wild[2] = 500
    plan.run(query=dq, key=dk, value=dv, out=dout,
             **dict(meta, q_start=i32(wild)))
    assert "q_start[2] = 500" in plan.status(), plan.status()
    plan.clear_status()
    plan.close()


def test_description_with_a_tree():
    # kvattn_attention_desc.tree: an i32 [T] tree_parents argument last.
    text = kvattn.attention_ir(dtype="f32", batch=3, query_len=123,
                               key_len=400, num_query_heads=4,
                               num_kv_heads=2, head_dim=16, causal=True,
                               varlen=True, tree=True)
    assert "tree_parents(%arg6 : tensor<123xi32>)" in text
    parents, q_start, kv_len = issue_case()
    q = distinct((1, 4, 123, 16), 41)
    k = distinct((3, 2, 400, 16), 42)
    v = distinct((3, 2, 400, 16), 43)
    qo = kv_len - np.diff(q_start)
    out = kvattn.compile(text).run(q, k, v, q_start.astype(np.int32),
                                   qo.astype(np.int32),
                                   kv_len.astype(np.int32),
                                   parents.astype(np.int32))
    want, _ = reference(q, k, v, q_start, kv_len, parents)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    with pytest.raises(kvattn.KVAttnError, match="tree without varlen: the "
                       "draft-token trees are the packed rows of a ragged "
                       "batch"):
        kvattn.attention_ir(dtype="f32", num_query_heads=4, num_kv_heads=2,
                            head_dim=16, tree=True)
    with pytest.raises(kvattn.KVAttnError, match="desc.tree = 2 is not 0 "
                       "or 1"):
        kvattn.attention_ir(dtype="f32", num_query_heads=4, num_kv_heads=2,
                            head_dim=16, varlen=True, tree=2)
    for rows in ("ragged_keys", "cache_batch_idx"):
        with pytest.raises(kvattn.KVAttnError, match=f"tree with {rows}: a "
                           "tree's draft keys are the last rows of its "
                           "sequence's own cache"):
            kvattn.attention_ir(dtype="f32", num_query_heads=4,
                                num_kv_heads=2, head_dim=16, varlen=True,
                                tree=True, **{rows: True})
