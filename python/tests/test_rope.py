"""RoPE inside kvattn.attention (the query, at its positions) and
kvattn.append (the written keys, and the record of their positions),
against a NumPy float64 reference of the same formula (docs/semantics.md,
"Rotary embedding"):

    inv_freq[k] = f32(theta ** (-2k / R)),  angle = f32(f32(p) * inv_freq[k])
    (a, b) -> (a cos - b sin, b cos + a sin)   pairs (x[k], x[k + R/2])
                                               or (x[2k], x[2k + 1])

Positions are in the thousands with offsets, so a position off by one
changes the answer (asserted next to each comparison).
"""
import os
import subprocess

import numpy as np
import pytest

import kvattn
from conftest import distinct


def rotate(x, pos, rotary_dim, theta=10000.0, interleaved=False):
    """x [B, H, L, D] rotated at pos [B, L] (float64 rotation, the f32
    angle of the semantics)."""
    x = np.asarray(x, np.float64).copy()
    half = rotary_dim // 2
    k = np.arange(half, dtype=np.float64)
    inv_freq = (theta ** (-2.0 * k / rotary_dim)).astype(np.float32)
    pos = np.asarray(pos)
    angle = (pos.astype(np.float32)[..., None] * inv_freq).astype(np.float32)
    c = np.cos(angle.astype(np.float64))[:, None]  # [B, 1, L, half]
    s = np.sin(angle.astype(np.float64))[:, None]
    if interleaved:
        a, b = x[..., 0:rotary_dim:2].copy(), x[..., 1:rotary_dim:2].copy()
        x[..., 0:rotary_dim:2] = a * c - b * s
        x[..., 1:rotary_dim:2] = b * c + a * s
    else:
        a, b = x[..., :half].copy(), x[..., half:rotary_dim].copy()
        x[..., :half] = a * c - b * s
        x[..., half:rotary_dim] = b * c + a * s
    return x


def attention(q, k, v, qp, kp, kv_len, causal=True):
    """float64 out [B, Hq, L, Dv] over positions qp [B, L], kp [B, S]."""
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    out = np.zeros((B, Hq, L, v.shape[3]))
    for b in range(B):
        seen = np.arange(S)[None, :] < kv_len[b]
        if causal:
            seen = seen & (kp[b][None, :] <= qp[b][:, None])
        for h in range(Hq):
            g = h // (Hq // Hkv)
            s = q[b, h] @ k[b, g].T / np.sqrt(D)
            s = np.where(seen, s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[b, h] = p @ v[b, g] / p.sum(axis=1, keepdims=True)
    return out


def rope_attr(rotary_dim, theta=10000.0, interleaved=False, f32_query=False):
    return (f"rope = <rotary_dim = {rotary_dim}, theta = {theta}"
            + (", interleaved" if interleaved else "")
            + (", f32_query" if f32_query else "") + ">")


def offsets_ir(shape, dtype, rope, with_record=False):
    b, hq, hkv, l, s, d = shape
    q = f"tensor<{b}x{hq}x{l}x{d}x{dtype}>"
    kv = f"tensor<{b}x{hkv}x{s}x{d}x{dtype}>"
    off = f"tensor<{b}xi32>"
    rec = f"tensor<{b}x{s}xi32>"
    record_arg = f", %rec: {rec}" if with_record else ""
    record_use = f"k_rope_pos(%rec : {rec})" if with_record else ""
    return (f"func.func @main(%q: {q}, %k: {kv}, %v: {kv}, %qo: {off}, "
            f"%ko: {off}, %kl: {off}{record_arg}) -> {q} {{\n"
            f"  %o = kvattn.attention %q, %k, %v q_offset(%qo : {off}) "
            f"k_offset(%ko : {off}) kv_len(%kl : {off}) {record_use} causal "
            f"{rope}\n      : {q}, {kv}, {kv} -> {q}\n"
            f"  return %o : {q}\n}}\n")


# (B, Hq, Hkv, L, S, D, rotary_dim, interleaved, q offsets (of row 0),
#  k offsets, kv_len)
CASES = [
    # GPT-NeoX halves, partial rotary (32 of 64), GQA, positions in the
    # thousands with a k_offset (keys after an eviction).
    (2, 4, 2, 5, 96, 64, 32, False, [3091, 5020], [3000, 4930], [96, 95]),
    # Interleaved pairs, full rotary, decode rows.
    (2, 4, 1, 1, 70, 32, 32, True, [4169, 1065], [4100, 1000], [70, 66]),
    # Partial interleaved, a head dim that is not a multiple of 16.
    (1, 2, 2, 7, 40, 24, 10, True, [2033], [2000], [40]),
]


def inputs(case, seed):
    b, hq, hkv, l, s, d = case[:6]
    return (distinct((b, hq, l, d), seed), distinct((b, hkv, s, d), seed + 1),
            distinct((b, hkv, s, d), seed + 2))


def positions(case):
    b, hq, hkv, l, s, d, r, inter, qo, ko, kvl = case
    qp = np.array([[qo[i] + t for t in range(l)] for i in range(b)])
    kp = np.array([[ko[i] + j for j in range(s)] for i in range(b)])
    return qp, kp


@pytest.mark.parametrize("options", [{}, {"vectorize": False},
                                     {"split_kv": 2, "block_m": 4}])
@pytest.mark.parametrize("case", CASES)
def test_query_rotated_in_the_kernel(case, options):
    b, hq, hkv, l, s, d, r, inter, qo, ko, kvl = case
    q, k, v = inputs(case, 5)
    qp, kp = positions(case)
    # The cache holds keys rotated at their positions (as kvattn.append with
    # rope writes them); the op rotates the query.
    k_rot = rotate(k, kp, r, interleaved=inter).astype(np.float32)
    prog = kvattn.compile(offsets_ir(case[:6], "f32", rope_attr(r, 10000.0,
                                                                 inter)),
                          **options)
    out = prog.run(q, k_rot, v, np.array(qo, np.int32),
                   np.array(ko, np.int32), np.array(kvl, np.int32))
    out = out[0] if isinstance(out, tuple) else out
    want = attention(rotate(q, qp, r, interleaved=inter), k_rot, v, qp, kp,
                     kvl)
    # f32 path: the angle is the same f32 product; cos/sin of libm (1 ulp).
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    # A query rotated one position off changes the answer, and so does the
    # other convention.
    off_by_one = attention(rotate(q, qp + 1, r, interleaved=inter), k_rot, v,
                           qp, kp, kvl)
    assert np.abs(off_by_one - want).max() > 1e-3
    other = attention(rotate(q, qp, r, interleaved=not inter), k_rot, v, qp,
                      kp, kvl)
    assert np.abs(other - want).max() > 1e-3


def test_bf16_query_rounded_after_rotation():
    case = CASES[0]
    b, hq, hkv, l, s, d, r, inter, qo, ko, kvl = case
    q, k, v = inputs(case, 9)
    qp, kp = positions(case)
    qb = kvattn.to_bf16(q)
    kb = kvattn.to_bf16(rotate(k, kp, r).astype(np.float32))
    vb = kvattn.to_bf16(v)
    qf, kf, vf = (kvattn.from_bf16(x) for x in (qb, kb, vb))
    args = (qb, kb, vb, np.array(qo, np.int32), np.array(ko, np.int32),
            np.array(kvl, np.int32))
    # Rounded to bf16 after the rotation (the default) or kept in f32.
    for f32_query in (False, True):
        prog = kvattn.compile(offsets_ir(case[:6], "bf16",
                                         rope_attr(r, f32_query=f32_query)))
        out = prog.run(*args)
        out = kvattn.from_bf16(out[0] if isinstance(out, tuple) else out)
        rq = rotate(qf, qp, r).astype(np.float32)
        if not f32_query:
            rq = kvattn.from_bf16(kvattn.to_bf16(rq))
        want = attention(rq.astype(np.float64), kf, vf, qp, kp, kvl)
        np.testing.assert_allclose(out, want, atol=2e-2, rtol=2e-2)


def append_ir(shape, dtype, rope, check_record=True):
    """K written by kvattn.append with rope (and its record), V by a plain
    append, then attention that rotates its query and checks the record.
    Returns out, the rotated cache and the record."""
    b, hq, hkv, l, c, d = shape
    q = f"tensor<{b}x{hq}x{l}x{d}x{dtype}>"
    new = f"tensor<{b}x{hkv}x{l}x{d}x{dtype}>"
    cache = f"tensor<{b}x{hkv}x{c}x{d}x{dtype}>"
    off = f"tensor<{b}xi32>"
    rec = f"tensor<{b}x{c}xi32>"
    return (
        f"func.func @main(%q: {q}, %kn: {new}, %vn: {new}, %kc: {cache}, "
        f"%vc: {cache}, %pos: {off}, %rec: {rec}, %kl: {off})\n"
        f"    -> ({q}, {cache}, {rec}) {{\n"
        f"  %k, %k_rec = kvattn.append %kn into %kc at %pos {rope} "
        f"rope_pos(%rec : {rec}) : {new} into {cache}, {off}\n"
        f"  %v = kvattn.append %vn into %vc at %pos : {new} into {cache}, "
        f"{off}\n"
        f"  %o = kvattn.attention %q, %k, %v q_offset(%pos : {off}) "
        f"kv_len(%kl : {off}) "
        + (f"k_rope_pos(%k_rec : {rec}) " if check_record else "")
        + f"causal {rope}\n"
        f"      : {q}, {cache}, {cache} -> {q}\n"
        f"  return %o, %k, %k_rec : {q}, {cache}, {rec}\n}}\n")


@pytest.mark.parametrize("interleaved", [False, True])
def test_append_rotates_the_keys_it_writes(interleaved):
    b, hq, hkv, l, c, d, r = 2, 4, 2, 3, 2100, 32, 16
    pos = np.array([2040, 1500], np.int32)
    kvl = pos + l
    q = distinct((b, hq, l, d), 21)
    kn = distinct((b, hkv, l, d), 22)
    vn = distinct((b, hkv, l, d), 23)
    kc = distinct((b, hkv, c, d), 24)
    vc = distinct((b, hkv, c, d), 25)
    slots = np.tile(np.arange(c), (b, 1))
    # The cache's old keys were rotated at their slots; the record says so.
    kc = rotate(kc, slots, r, interleaved=interleaved).astype(np.float32)
    rec = np.where(slots < pos[:, None], slots, -1).astype(np.int32)
    rope = rope_attr(r, 10000.0, interleaved)
    out, k2, rec2 = kvattn.compile(append_ir((b, hq, hkv, l, c, d), "f32",
                                             rope)).run(
        q, kn, vn, kc, vc, pos, rec, kvl)
    new_pos = pos[:, None] + np.arange(l)[None, :]
    want_new = rotate(kn, new_pos, r, interleaved=interleaved)
    for i in range(b):
        np.testing.assert_allclose(k2[i, :, pos[i]:pos[i] + l],
                                   want_new[i], rtol=1e-5, atol=1e-6)
        assert np.array_equal(rec2[i, pos[i]:pos[i] + l], new_pos[i])
        assert np.array_equal(rec2[i, :pos[i]], rec[i, :pos[i]])
    # Attention over the whole cache, the query rotated at its positions.
    k_all = np.asarray(k2, np.float64)
    v_all = vc.copy()
    for i in range(b):
        v_all[i, :, pos[i]:pos[i] + l] = vn[i]
    qp = new_pos
    kp = slots
    want = attention(rotate(q, qp, r, interleaved=interleaved), k_all, v_all,
                     qp, kp, kvl)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    # The unrotated keys would give another answer.
    plain = k_all.copy()
    for i in range(b):
        plain[i, :, pos[i]:pos[i] + l] = kn[i]
    assert np.abs(attention(rotate(q, qp, r, interleaved=interleaved), plain,
                            v_all, qp, kp, kvl) - want).max() > 1e-3


def test_recorded_positions_must_match():
    case = CASES[0]
    b, hq, hkv, l, s, d, r, inter, qo, ko, kvl = case
    q, k, v = inputs(case, 31)
    qp, kp = positions(case)
    rec = kp.astype(np.int32).copy()
    prog = kvattn.compile(offsets_ir(case[:6], "f32", rope_attr(r),
                                     with_record=True))
    args = [q, k, v, np.array(qo, np.int32), np.array(ko, np.int32),
            np.array(kvl, np.int32)]
    prog.run(*args, rec)  # the record matches: runs
    rec[1, 17] += 1
    with pytest.raises(kvattn.KVAttnError,
                       match="k_rope_pos: the key of batch 1, slot 17 was "
                             "rotated at position 4948 but is attended at "
                             "position 4947"):
        prog.run(*args, rec)
    # A slot past kv_len (batch 1 holds 95 keys) is no key: not checked.
    rec[1, 17] -= 1
    rec[1, 95] = -7
    prog.run(*args, rec)


@pytest.mark.parametrize("case", CASES[:2])
def test_query_rotated_on_the_emulated_gpu(emulated_runtime, case):
    b, hq, hkv, l, s, d, r, inter, qo, ko, kvl = case
    q, k, v = inputs(case, 41)
    qp, kp = positions(case)
    k_rot = rotate(k, kp, r, interleaved=inter).astype(np.float32)
    named = dict(q_offset=np.array(qo, np.int32),
                 k_offset=np.array(ko, np.int32),
                 kv_len=np.array(kvl, np.int32))
    # f32 (no tensor cores): the polynomial cos/sin of the GPU lowering.
    prog = kvattn.compile(offsets_ir(case[:6], "f32", rope_attr(r, 10000.0,
                                                                 inter)),
                          target="gpu", runtime=emulated_runtime)
    out = prog.run(query=q, key=k_rot, value=v, **named)
    out = out[0] if isinstance(out, tuple) else out
    want = attention(rotate(q, qp, r, interleaved=inter), k_rot, v, qp, kp,
                     kvl)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    prog.close()
    # bf16 on tensor cores: the rotated query rounded to bf16 as it is
    # staged.
    qb, kb, vb = (kvattn.to_bf16(x) for x in (q, k_rot, v))
    qf, kf, vf = (kvattn.from_bf16(x) for x in (qb, kb, vb))
    prog = kvattn.compile(offsets_ir(case[:6], "bf16", rope_attr(r, 10000.0,
                                                                  inter)),
                          target="gpu", runtime=emulated_runtime)
    out = prog.run(query=qb, key=kb, value=vb, **named)
    out = kvattn.from_bf16(out[0] if isinstance(out, tuple) else out)
    rq = kvattn.from_bf16(kvattn.to_bf16(
        rotate(qf, qp, r, interleaved=inter).astype(np.float32)))
    want = attention(rq.astype(np.float64), kf, vf, qp, kp, kvl)
    np.testing.assert_allclose(out, want, atol=3e-2, rtol=2e-2)
    off_by_one = attention(rotate(qf, qp + 1, r, interleaved=inter), kf, vf,
                           qp, kp, kvl)
    assert np.abs(off_by_one - want).max() > 0.05
    prog.close()


def kvattn_run():
    """The kvattn-run next to the library under test (build/lib ->
    build/bin, or an install's lib -> bin), or None."""
    lib = kvattn.library().path
    path = os.path.join(os.path.dirname(os.path.abspath(lib)), "..", "bin",
                        "kvattn-run")
    return path if os.path.exists(path) else None


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_append_rotates_the_keys_on_the_emulated_gpu(tmp_path, dtype,
                                                     interleaved):
    # The GPU's cache write rotates the keys in f32 at pos[b] + t (the
    # polynomial cos/sin), rounds them at the write and records their
    # positions; the attention then rotates its query at the same positions
    # (an append-then-attention function: kvattn-run's emulated GPU runs
    # each op as its kernels, the cache staying on the device).
    tool = kvattn_run()
    if tool is None:
        pytest.skip("no kvattn-run next to the kvattn library")
    b, hq, hkv, l, c, d, r = 2, 4, 2, 3, 2100, 32, 24
    pos = np.array([2040, 1500], np.int32)
    kvl = pos + l
    q = distinct((b, hq, l, d), 61)
    kn = distinct((b, hkv, l, d), 62)
    vn = distinct((b, hkv, l, d), 63)
    kc = distinct((b, hkv, c, d), 64)
    vc = distinct((b, hkv, c, d), 65)
    slots = np.tile(np.arange(c), (b, 1))
    kc = rotate(kc, slots, r, interleaved=interleaved).astype(np.float32)
    rec = np.where(slots < pos[:, None], slots, -1).astype(np.int32)
    rope = rope_attr(r, 10000.0, interleaved)
    round_ = (lambda x: np.asarray(x, np.float64)) if dtype == "f32" else \
        (lambda x: kvattn.from_bf16(kvattn.to_bf16(
            np.asarray(x, np.float32))).astype(np.float64))
    exact = [round_(x) for x in (q, kn, vn, kc, vc)]
    ir = tmp_path / "append.mlir"
    ir.write_text(append_ir((b, hq, hkv, l, c, d), dtype, rope,
                            check_record=False))
    cmd = [tool, str(ir), "--target=gpu-emu",
           f"--dump-outputs={tmp_path}"]
    for n, x in enumerate((q, kn, vn, kc, vc, pos, rec, kvl)):
        np.save(tmp_path / f"in{n}.npy", x)
        cmd.append(f"--input={n}={tmp_path / f'in{n}.npy'}")
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out, k2, rec2 = (np.load(tmp_path / f"out{n}.npy") for n in range(3))
    new_pos = pos[:, None] + np.arange(l)[None, :]
    want_new = rotate(exact[1], new_pos, r, interleaved=interleaved)
    got = np.asarray(k2, np.float64)
    for i in range(b):
        if dtype == "f32":
            np.testing.assert_allclose(got[i, :, pos[i]:pos[i] + l],
                                       want_new[i], rtol=1e-5, atol=1e-6)
        else:  # rotated in f32, rounded to bf16 once at the write
            np.testing.assert_allclose(got[i, :, pos[i]:pos[i] + l],
                                       want_new[i], rtol=8e-3, atol=1e-3)
        assert np.array_equal(rec2[i, pos[i]:pos[i] + l], new_pos[i])
        assert np.array_equal(rec2[i, :pos[i]], rec[i, :pos[i]])
        assert np.array_equal(rec2[i, pos[i] + l:], rec[i, pos[i] + l:])
        # The old keys are untouched.
        assert np.array_equal(got[i, :, :pos[i]], exact[3][i, :, :pos[i]])
    # One position off would be another key.
    off = rotate(exact[1], new_pos + 1, r, interleaved=interleaved)
    assert np.abs(off - want_new).max() > 0.05
    # The round trip: attention over the written cache, the query rotated
    # at the same positions (rounded to bf16 after the rotation).
    v_all = exact[4].copy()
    for i in range(b):
        v_all[i, :, pos[i]:pos[i] + l] = exact[2][i]
    qr = rotate(exact[0], new_pos, r, interleaved=interleaved)
    if dtype == "bf16":
        qr = round_(qr)
    want = attention(qr, got, v_all, new_pos, slots, kvl)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "f32" else \
        dict(rtol=2e-2, atol=3e-2)
    np.testing.assert_allclose(np.asarray(out, np.float64), want, **tol)


def test_record_checked_on_the_emulated_gpu(emulated_runtime):
    """k_rope_pos on the GPU path (a GpuProgram: the record is host
    metadata, which the runtime checks before the launch with the
    reference's message); the values against the NumPy reference."""
    case = CASES[0]
    b, hq, hkv, l, s, d, r, inter, qo, ko, kvl = case
    q, k, v = inputs(case, 51)
    qp, kp = positions(case)
    k_rot = rotate(k, kp, r, interleaved=inter).astype(np.float32)
    rec = np.where(np.arange(s)[None, :] < np.array(kvl)[:, None], kp,
                   -1).astype(np.int32)
    named = dict(q_offset=np.array(qo, np.int32),
                 k_offset=np.array(ko, np.int32),
                 kv_len=np.array(kvl, np.int32))
    prog = kvattn.compile(offsets_ir(case[:6], "f32", rope_attr(r),
                                     with_record=True),
                          target="gpu", runtime=emulated_runtime)
    out = prog.run(query=q, key=k_rot, value=v, k_rope_pos=rec, **named)
    want = attention(rotate(q, qp, r), k_rot, v, qp, kp, kvl)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    # Batch 1's keys attended one position later than they were rotated.
    shifted = dict(named, k_offset=np.array(ko, np.int32) + [0, 1])
    with pytest.raises(kvattn.KVAttnError,
                       match=r"launch of '\w+': k_rope_pos: the key of batch "
                             r"1, slot 0 was rotated at position 4930 but is "
                             r"attended at position 4931$"):
        prog.run(query=q, key=k_rot, value=v, k_rope_pos=rec, **shifted)
    prog.close()


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_plan_checks_the_record_on_the_device(emulated_runtime, dtype):
    """A plan of append (rope, rope_pos) + attention (k_rope_pos): the
    append writes the record on the device, the attention's validation
    kernel checks it (status word, rule 28) with the reference's message;
    a bad record computes nothing."""
    rt = emulated_runtime
    b, hq, hkv, l, c, d, r = 2, 4, 2, 3, 160, 32, 32
    pos = np.array([120, 77], np.int32)
    kvl = pos + l
    q, kn, vn = (distinct(x, 61 + i) for i, x in enumerate(
        [(b, hq, l, d), (b, hkv, l, d), (b, hkv, l, d)]))
    kc, vc = distinct((b, hkv, c, d), 64), distinct((b, hkv, c, d), 65)
    slots = np.tile(np.arange(c), (b, 1))
    kc = rotate(kc, slots, r).astype(np.float32)
    rec = np.where(slots < pos[:, None], slots, -1).astype(np.int32)
    cast = (lambda x: kvattn.to_bf16(x)) if dtype == "bf16" else \
        (lambda x: np.asarray(x, np.float32))
    back = (lambda x: kvattn.from_bf16(x).astype(np.float64)) \
        if dtype == "bf16" else (lambda x: np.asarray(x, np.float64))
    plan = kvattn.plan(append_ir((b, hq, hkv, l, c, d), dtype, rope_attr(r),
                                 check_record=True),
                       runtime=rt, max_sizes={"B": b, "L": l, "S": c})
    dev = lambda x: kvattn.to_device(x, rt)
    i32 = lambda x: dev(np.asarray(x, np.int32))

    def device_buffers(record):
        return dict(query=dev(cast(q)), update_k=dev(cast(kn)),
                    update_v=dev(cast(vn)), key=dev(cast(kc)),
                    value=dev(cast(vc)), k_rope_pos=i32(record))

    def run(record):
        bufs = device_buffers(record)
        out = rt.empty(q.shape, dtype)
        plan.run(out=out, pos=i32(pos), q_offset=i32(pos), kv_len=i32(kvl),
                 **bufs)
        return out, bufs

    out, bufs = run(rec)
    assert plan.status() is None
    new_pos = pos[:, None] + np.arange(l)[None, :]
    got_rec = bufs["k_rope_pos"].numpy()
    for i in range(b):
        assert np.array_equal(got_rec[i, pos[i]:pos[i] + l], new_pos[i])
    k_all = back(bufs["key"].numpy())
    v_all = back(bufs["value"].numpy())
    qr = rotate(back(cast(q)), new_pos, r)
    if dtype == "bf16":
        qr = back(kvattn.to_bf16(qr.astype(np.float32)))
    want = attention(qr, k_all, v_all, new_pos, slots, kvl)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "f32" else \
        dict(rtol=2e-2, atol=3e-2)
    np.testing.assert_allclose(back(out.numpy()), want, **tol)
    # A key of batch 1 the cache says was rotated one position earlier:
    # the device names it, the output stays unwritten.
    stale = rec.copy()
    stale[1, 17] = 16
    out, _ = run(stale)
    status = plan.status()
    assert status and status.endswith(
        "k_rope_pos: the key of batch 1, slot 17 was rotated at position 16 "
        "but is attended at position 17"), status
    plan.clear_status()
    # The record an append writes is a device buffer: its check needs the
    # key positions on the device too.
    with pytest.raises(kvattn.KVAttnError, match="not mixed"):
        plan.run(out=out, pos=pos, q_offset=pos, kv_len=kvl,
                 **device_buffers(rec))
    plan.close()


def test_gpu_refusals(emulated_runtime):
    # What the GPU path has no kernel for yet is refused, never dropped.
    with pytest.raises(kvattn.KVAttnError, match="f32_query keeps the "
                                                 "rotated query in f32"):
        kvattn.compile(offsets_ir((1, 2, 1, 16, 64, 64), "bf16",
                                  rope_attr(64, f32_query=True)),
                       target="gpu", runtime=emulated_runtime)


def test_description_with_rope():
    """attention_ir's RoPE fields: the query rotated, the K append rotating
    and writing the record, the attention checking it; bad fields named."""
    desc = dict(dtype="f32", batch=2, query_len=1, key_len=64,
                num_query_heads=4, num_kv_heads=2, head_dim=32, causal=True,
                append=True, rotary_dim=16, rope_theta=500000.0,
                rope_interleaved=True, rope_record=True)
    ir = kvattn.attention_ir(**desc)
    assert ir.count("rope = <rotary_dim = 16, theta = ") == 2, ir
    assert ir.count("interleaved>") == 2, ir
    assert "rope_pos(%" in ir and "k_rope_pos(%" in ir, ir
    assert "tensor<2x64xi32>" in ir, ir
    # The IR runs on the CPU: the record of the old keys is checked.
    q = distinct((2, 4, 1, 32), 71)
    kc, vc = distinct((2, 2, 64, 32), 72), distinct((2, 2, 64, 32), 73)
    kn, vn = distinct((2, 2, 1, 32), 74), distinct((2, 2, 1, 32), 75)
    pos = np.array([40, 7], np.int32)
    slots = np.tile(np.arange(64), (2, 1))
    rec = np.where(slots < pos[:, None], slots, -1).astype(np.int32)
    prog = kvattn.compile(ir)
    out, _, _, rec2 = prog.run(q, kc, vc, kn, vn, pos, pos + 1, rec)
    assert np.array_equal(rec2[:, :41][0], np.arange(41))
    rec[0, 3] = 4
    with pytest.raises(kvattn.KVAttnError,
                       match="k_rope_pos: the key of batch 0, slot 3 was "
                             "rotated at position 4 but is attended at "
                             "position 3"):
        prog.run(q, kc, vc, kn, vn, pos, pos + 1, rec)
    bad = [(dict(rotary_dim=7), "rotary_dim = 7 must be even and positive"),
           (dict(rotary_dim=64), "rotary_dim = 64 exceeds head_dim = 32"),
           (dict(rope_theta=1.0), "rope_theta = 1 must be a finite value "
                                  "above 1"),
           (dict(rotary_dim=0), "rope_record is given without rotary_dim")]
    for change, message in bad:
        with pytest.raises(kvattn.KVAttnError, match=message):
            kvattn.attention_ir(**dict(desc, **change))
