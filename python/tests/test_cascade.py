"""Shared-prefix (cascade) attention (kvattn.cascade): the prefix attended
once for all sequences' rows, each suffix on its own, merged by LSE, against
a NumPy float64 reference of plain attention over prefix + suffix; a dropped
prefix or a wrong merge fails the comparison (asserted next to it)."""
import math

import numpy as np
import pytest

import kvattn
from conftest import distinct
from kvattn import cascade


def reference(q, q_start, pk, pv, sk, sv, lens, causal=True):
    """float64 plain attention of each sequence's rows over prefix + its
    suffix, rows at positions P + lens[b] - L_b + i."""
    q, pk, pv, sk, sv = (np.asarray(x, np.float64) for x in (q, pk, pv, sk,
                                                             sv))
    _, hq, t, d = q.shape
    hkv, p = pk.shape[1], pk.shape[2]
    out = np.zeros((1, hq, t, pv.shape[3]))
    lse = np.full((1, hq, t), -np.inf)
    for b in range(len(q_start) - 1):
        lo, hi = q_start[b], q_start[b + 1]
        n = p + lens[b]
        for h in range(hq):
            g = h // (hq // hkv)
            k = np.concatenate([pk[0, g], sk[b, g, :lens[b]]])
            v = np.concatenate([pv[0, g], sv[b, g, :lens[b]]])
            for i in range(hi - lo):
                qp = n - (hi - lo) + i
                keys = np.arange(n) if not causal else np.arange(qp + 1)
                s = k[keys] @ q[0, h, lo + i] / math.sqrt(d)
                m = s.max()
                w = np.exp(s - m)
                out[0, h, lo + i] = w @ v[keys] / w.sum()
                lse[0, h, lo + i] = m + math.log(w.sum())
    return out, lse


def case(lens, rows, p=64, hq=4, hkv=2, d=16, s=None, seed=0):
    s = s or max(lens)
    b = len(lens)
    q_start = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    t = int(q_start[-1])
    q = distinct((1, hq, t, d), seed + 1)
    pk = distinct((1, hkv, p, d), seed + 2)
    pv = distinct((1, hkv, p, d), seed + 3)
    sk = distinct((b, hkv, s, d), seed + 4)
    sv = distinct((b, hkv, s, d), seed + 5)
    want = reference(q, q_start, pk, pv, sk, sv, lens)
    for i, n in enumerate(lens):  # the unowned suffix slots
        sk[i, :, n:] = np.nan
        sv[i, :, n:] = np.inf
    return (q, q_start, pk, pv, sk, sv, np.asarray(lens, np.int64)), want


def test_cascade_cpu_issue_case():
    """The issue's case: a 4096-token prefix shared by 16 sequences with
    suffixes of 1 ... 300 (decode rows and a few appends)."""
    lens = [1, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200, 220, 240, 260,
            280, 300]
    rows = [1, 1, 3, 1, 1, 5, 1, 1, 2, 1, 1, 1, 4, 1, 1, 1]
    args, (want, want_lse) = case(lens, rows, p=4096, hq=4, hkv=2, d=32)
    out, lse = cascade.cascade_attention(*args)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    # The prefix matters: attention over the suffixes alone is far off.
    q, qs, pk, pv, sk, sv, n = args
    alone, _ = reference(q, qs, pk[:, :, :0], pv[:, :, :0],
                         np.nan_to_num(sk), np.nan_to_num(sv), n)
    assert np.abs(alone - want).max() > 0.1


def test_cascade_merge_is_the_lse_merge():
    """A wrong merge (averaging the parts, or taking the larger part) is far
    from the result; the empty part (0, -inf) is the identity."""
    args, (want, _) = case([5, 9, 30], [1, 2, 4], p=48)
    out, lse = cascade.cascade_attention(*args)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    pre = kvattn.compile(cascade.prefix_ir("f32", 4, 2, 7, 48, 16, 16,
                                           0.25))
    o1, l1 = pre.run(args[0], args[2], args[3])
    mean = 0.5 * (o1 + out)
    assert np.abs(mean - want).max() > 0.05
    empty = np.full_like(l1, -np.inf)
    same, same_lse = cascade.merge_state(o1, l1, np.zeros_like(o1), empty)
    np.testing.assert_array_equal(same, o1)
    np.testing.assert_array_equal(same_lse, l1)
    none, none_lse = cascade.merge_state(np.zeros_like(o1), empty,
                                         np.zeros_like(o1), empty)
    assert not np.isnan(none).any() and (none == 0).all()
    assert (none_lse == -np.inf).all()


def test_cascade_emulated_gpu(emulated_runtime):
    """kvattn-to-ptx's cascade kernels on the emulated GPU (f32 scalar
    lowering, then bf16 tensor cores; the merge on the device): a smaller
    prefix (1024) than the CPU case, for the emulator's time (the issue's
    4096 x 16 case runs on the emulated GPU in test/Numerics/cascade.mlir)."""
    lens = [1, 7, 33, 120, 300]
    rows = [1, 1, 2, 1, 3]
    args, (want, want_lse) = case(lens, rows, p=1024, hq=4, hkv=2, d=32)
    out, lse = cascade.cascade_attention(*args, target="gpu",
                                         runtime=emulated_runtime)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    q, qs, pk, pv, sk, sv, n = args
    bq, bpk, bpv, bsk, bsv = (kvattn.to_bf16(x) for x in (q, pk, pv, sk, sv))
    wide = [np.nan_to_num(kvattn.from_bf16(x), nan=0.0, posinf=0.0)
            for x in (bq, bpk, bpv, bsk, bsv)]
    want16, _ = reference(wide[0], qs, wide[1], wide[2], wide[3], wide[4], n)
    out16, _ = cascade.cascade_attention(bq, qs, bpk, bpv, bsk, bsv, n,
                                         target="gpu",
                                         runtime=emulated_runtime)
    np.testing.assert_allclose(out16, want16, rtol=2e-2, atol=2e-2)


def test_cascade_gpu_kernels_merge_on_the_device(emulated_runtime):
    """kvattn-to-ptx compiles the op whole: the prefix kernel (B = 1), the
    ragged suffix kernel and the merge kernel, all on the device; f32
    against the NumPy float64 reference."""
    lens, rows = [3, 9, 30], [1, 2, 4]
    args, (want, want_lse) = case(lens, rows, p=48)
    q, qs, pk, pv, sk, sv, n = args
    program = kvattn.compile(
        cascade.cascade_ir("f32", 4, 2, 7, 48, 3, 30, 16, 16, 0.25),
        target="gpu", runtime=emulated_runtime)
    kinds = [k["kind"] for k in program.kernels_info]
    assert kinds == ["cascade_prefix", "attention_varlen", "cascade_merge"]
    assert program.inputs[:5] == ["query", "prefix_key", "prefix_value",
                                  "key", "value"]
    out, lse = program.run(query=q, prefix_key=pk, prefix_value=pv, key=sk,
                           value=sv, q_start=qs, q_offset=n - np.diff(qs),
                           kv_len=n)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("source", ["ir", "description"])
def test_cascade_plan_dynamic_prefix(emulated_runtime, source):
    """kvattn.plan of a cascade with a dynamic prefix length, from IR or
    from a description (cascade=1): one plan, two prefixes (P = 64, then
    23: the size P of each run), device metadata validated on the device;
    float64 reference."""
    ir = cascade.cascade_ir("f32", 4, 2, 7, "?", 3, 30, 16, 16, 0.25)
    if source == "description":
        ir = dict(dtype="f32", batch=3, query_len=7, key_len=30,
                  num_query_heads=4, num_kv_heads=2, head_dim=16,
                  causal=1, with_lse=1, varlen=1, cascade=1)
        assert "kvattn.cascade" in kvattn.attention_ir(**ir)
    plan = kvattn.plan(ir, runtime=emulated_runtime,
                       max_sizes={"B": 3, "L": 7, "S": 30})
    assert plan.inputs[:5] == ["query", "prefix_key", "prefix_value", "key",
                               "value"]
    for p, seed in ((64, 0), (23, 5)):
        args, (want, want_lse) = case([3, 9, 30], [1, 2, 4], p=p, seed=seed)
        q, qs, pk, pv, sk, sv, n = args
        dev = {name: kvattn.to_device(x, runtime=emulated_runtime)
               for name, x in (("query", q), ("prefix_key", pk),
                               ("prefix_value", pv), ("key", sk),
                               ("value", sv))}
        # The description's metadata is i32, the IR's i64.
        idt = np.int32 if source == "description" else np.int64
        meta = {name: kvattn.to_device(np.asarray(x, idt),
                                       runtime=emulated_runtime)
                for name, x in (("q_start", qs),
                                ("q_offset", n - np.diff(qs)),
                                ("kv_len", n))}
        out = kvattn.to_device(np.zeros((1, 4, 7, 16), np.float32),
                               runtime=emulated_runtime)
        lse = kvattn.to_device(np.zeros((1, 4, 7), np.float32),
                               runtime=emulated_runtime)
        plan.run(out=out, lse=lse, **dev, **meta)
        plan.check()
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(lse.numpy(), want_lse, rtol=1e-5,
                                   atol=1e-5)
    plan.close()


@pytest.mark.parametrize("change, message", [
    (dict(window=8), r"a window would cut the shared prefix"),
    (dict(suffix_len=[5, 1, 30]),
     r"suffix_len\[1\] = 1 is below the 2 query row\(s\) of sequence 1"),
])
def test_cascade_errors(change, message):
    args, _ = case([5, 9, 30], [1, 2, 4], p=16)
    names = ("query", "q_start", "prefix_key", "prefix_value", "suffix_key",
             "suffix_value", "suffix_len")
    kwargs = dict(zip(names, args))
    kwargs.update(change)
    with pytest.raises(kvattn.KVAttnValueError, match=message):
        cascade.cascade_attention(**kwargs)


def paged_case(lens, rows, p, page_size=16, seed=0):
    """case() with the prefix and the suffixes scattered over one pool of
    permuted pages (the prefix's pages first in the table order, then each
    sequence's); every slot no key owns, and spare pages, hold NaN (K) and
    +inf (V)."""
    args, want = case(lens, rows, p=p, seed=seed)
    q, qs, pk, pv, sk, sv, n = args
    hkv, d = pk.shape[1], pk.shape[3]
    per = [-(-p // page_size)] + [-(-x // page_size) for x in lens]
    total = sum(per) + 3  # three spare pages
    order = np.random.default_rng(seed + 35).permutation(total)
    kp = np.full((total, page_size, hkv, d), np.nan, np.float32)
    vp = np.full((total, page_size, hkv, d), np.inf, np.float32)
    used = iter(order)

    def place(k, v, count):
        pages = [int(next(used)) for _ in range(-(-count // page_size))]
        for j in range(count):
            kp[pages[j // page_size], j % page_size] = k[:, j]
            vp[pages[j // page_size], j % page_size] = v[:, j]
        return pages

    prefix_pages = place(pk[0], pv[0], p) + [-1]
    width = max(per[1:]) + 1
    table = np.full((len(lens), width), -1, np.int64)
    for b, x in enumerate(lens):
        pages = place(sk[b], sv[b], x)
        table[b, :len(pages)] = pages
    return (q, qs, kp, vp, np.asarray(prefix_pages, np.int64), p, table,
            n), want


def test_paged_cascade_cpu():
    """A paged cascade (kvattn.cascade with prefix_pages, prefix_len and
    block_table) on the CPU: the prefix of 70 keys and suffixes of 1 ... 37
    keys in one pool of permuted pages, NaN/inf where no key lives,
    against the NumPy float64 reference of plain attention over prefix +
    suffix; a prefix read from the wrong pages is far off."""
    args, (want, want_lse) = paged_case([1, 37, 20, 16], [1, 5, 2, 3], p=70)
    out, lse = cascade.paged_cascade_attention(*args)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    q, qs, kp, vp, pages, p, table, n = args
    # The prefix's first page traded with sequence 1's first suffix page:
    # every other sequence then sees that suffix's keys in its prefix.
    swapped_pages, swapped_table = pages.copy(), table.copy()
    swapped_pages[0], swapped_table[1, 0] = table[1, 0], pages[0]
    wrong, _ = cascade.paged_cascade_attention(q, qs, kp, vp, swapped_pages,
                                               p, swapped_table, n)
    assert np.abs(wrong - want).max() > 0.05


def test_paged_cascade_emulated_gpu(emulated_runtime):
    """The paged cascade's GPU kernels on the emulated GPU (memcheck and
    racecheck on): the prefix kernel reads the pool through prefix_pages
    (B = 1), the ragged suffix kernel through block_table, the merge runs on
    the device; f32 (scalar lowering) and bf16 (tensor cores) against the
    float64 reference, NaN/inf in every slot no key owns; a swapped page
    changes the answer."""
    args, (want, want_lse) = paged_case([1, 37, 20, 16], [1, 5, 2, 3], p=70)
    out, lse = cascade.paged_cascade_attention(*args, target="gpu",
                                               runtime=emulated_runtime)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    q, qs, kp, vp, pages, p, table, n = args
    swapped_pages, swapped_table = pages.copy(), table.copy()
    swapped_pages[0], swapped_table[1, 0] = table[1, 0], pages[0]
    wrong, _ = cascade.paged_cascade_attention(
        q, qs, kp, vp, swapped_pages, p, swapped_table, n, target="gpu",
        runtime=emulated_runtime)
    assert np.abs(wrong - want).max() > 0.05
    # bf16: the reference of the rounded inputs (unowned slots are never
    # read, so their NaN/inf stay out of it).
    bq, bkp, bvp = (kvattn.to_bf16(x) for x in (q, kp, vp))
    wq = kvattn.from_bf16(bq)
    pk = np.stack([kvattn.from_bf16(bkp)[pages[j // 16], j % 16]
                   for j in range(p)], axis=1)[None]
    pv = np.stack([kvattn.from_bf16(bvp)[pages[j // 16], j % 16]
                   for j in range(p)], axis=1)[None]
    s = table.shape[1] * 16
    sk = np.zeros((len(n), pk.shape[1], s, pk.shape[3]), np.float32)
    sv = np.zeros_like(sk)
    for b, x in enumerate(n):
        for j in range(x):
            sk[b, :, j] = kvattn.from_bf16(bkp)[table[b, j // 16], j % 16]
            sv[b, :, j] = kvattn.from_bf16(bvp)[table[b, j // 16], j % 16]
    want16, _ = reference(wq, qs, pk, pv, sk, sv, n)
    out16, _ = cascade.paged_cascade_attention(
        bq, qs, bkp, bvp, pages, p, table, n, target="gpu",
        runtime=emulated_runtime)
    np.testing.assert_allclose(out16, want16, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("change, message", [
    (dict(prefix_len=81), r"prefix_len\[0\] = 81 does not fit the 5 "
     r"page\(s\) of prefix_pages \(page_size 16, at most 80 tokens\)"),
    (dict(prefix_pages="out_of_range"),
     r"prefix_pages\[1\] = 99: page id out of range"),
])
def test_paged_cascade_errors(emulated_runtime, change, message):
    """Tables that break the rules are refused by name: by the reference's
    checks on the CPU, by the runtime's before the GPU launch."""
    args, _ = paged_case([5, 9], [1, 2], p=70)
    names = ("query", "q_start", "key_pages", "value_pages", "prefix_pages",
             "prefix_len", "block_table", "suffix_len")
    kwargs = dict(zip(names, args))
    if change.get("prefix_pages") == "out_of_range":
        change = dict(prefix_pages=kwargs["prefix_pages"].copy())
        change["prefix_pages"][1] = 99
    kwargs.update(change)
    with pytest.raises(kvattn.KVAttnError, match=message):
        cascade.paged_cascade_attention(**kwargs)
    with pytest.raises(kvattn.KVAttnError,
                       match=r"launch of '[a-z_0-9]+': " + message):
        cascade.paged_cascade_attention(**dict(kwargs, target="gpu",
                                               runtime=emulated_runtime))


def test_paged_cascade_plan(emulated_runtime):
    """kvattn.plan of a paged cascade from a description (cascade, paged
    suffixes, prefix_paged): the pool bound as the prefix's and the
    suffixes', device metadata validated on the device; float64 reference;
    then a prefix table with a repeated page is reported by the status
    word under its own name."""
    args, (want, want_lse) = paged_case([1, 37, 20, 16], [1, 5, 2, 3], p=70)
    q, qs, kp, vp, pages, p, table, n = args
    ir = dict(dtype="f32", batch=4, query_len=11, num_query_heads=4,
              num_kv_heads=2, head_dim=16, causal=1, with_lse=1, varlen=1,
              cascade=1, paged=1, page_size=16, prefix_paged=1,
              prefix_page_size=16)
    assert "prefix_pages(" in kvattn.attention_ir(**ir)
    plan = kvattn.plan(ir, runtime=emulated_runtime,
                       max_sizes={"B": 4, "L": 11, "num_pages": kp.shape[0],
                                  "max_pages": table.shape[1],
                                  "prefix_num_pages": kp.shape[0],
                                  "prefix_max_pages": len(pages)})
    dev = {name: kvattn.to_device(x, runtime=emulated_runtime)
           for name, x in (("query", q), ("prefix_key", kp),
                           ("prefix_value", vp), ("key", kp), ("value", vp))}

    def meta(prefix_pages):
        return {name: kvattn.to_device(np.asarray(x, np.int32),
                                       runtime=emulated_runtime)
                for name, x in (("q_start", qs), ("q_offset", n - np.diff(qs)),
                                ("kv_len", n), ("prefix_pages", prefix_pages),
                                ("prefix_len", [p]), ("block_table", table))}
    out = kvattn.to_device(np.zeros((1, 4, 11, 16), np.float32),
                           runtime=emulated_runtime)
    lse = kvattn.to_device(np.zeros((1, 4, 11), np.float32),
                           runtime=emulated_runtime)
    plan.run(out=out, lse=lse, **dev, **meta(pages))
    plan.check()
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=2e-5, atol=2e-5)
    twice = pages.copy()
    twice[2] = twice[0]
    plan.run(out=out, lse=lse, **dev, **meta(twice))
    with pytest.raises(kvattn.KVAttnError,
                       match=r"prefix_pages\[2\] = %d: page %d is already "
                       r"used at slot 0 of the same sequence$" %
                       (pages[0], pages[0])):
        plan.check()
    plan.close()


@pytest.mark.parametrize("change, message", [
    (dict(cascade=0, varlen=1),
     r"prefix_paged without cascade: only a shared prefix has prefix pages"),
    (dict(prefix_page_size=0),
     r"prefix_page_size = 0 must be positive for a paged prefix"),
    (dict(prefix_len=64),
     r"prefix_len = 64 with prefix_paged: a paged prefix's length is the "
     r"run's prefix_len argument"),
    (dict(prefix_paged=0),
     r"prefix_page_size = 16 is given for a prefix that is not paged"),
    (dict(prefix_max_pages=-2), r"prefix_max_pages = -2"),
])
def test_paged_cascade_description_errors(change, message):
    """The description's paged-prefix fields are checked by name."""
    desc = dict(dtype="f32", batch=4, query_len=11, num_query_heads=4,
                num_kv_heads=2, head_dim=16, causal=1, varlen=1, cascade=1,
                paged=1, page_size=16, prefix_paged=1, prefix_page_size=16)
    desc.update(change)
    with pytest.raises(kvattn.KVAttnError,
                       match=r"attention description: " + message):
        kvattn.attention_ir(**desc)
