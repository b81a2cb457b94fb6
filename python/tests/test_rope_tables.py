"""RoPE from tables (FlashAttention's rotary_cos / rotary_sin
[P, rotary_dim / 2], row = position): a #kvattn.rope without theta takes
each rotated row's cosines and sines from row `position` of the tables,
widened to f32 (docs/semantics.md, "Rotary embedding"). Compared with a
NumPy float64 reference of the same formula, the tables built from Llama 3
scaled frequencies (a scheme no theta expresses: a path that ignored the
tables and used a theta fails, asserted next to the comparisons).
"""
import numpy as np
import pytest

import kvattn
from conftest import distinct
from test_rope import attention


def llama3_inv_freq(rotary_dim, theta=500000.0, factor=8.0, low=1.0,
                    high=4.0, original=8192):
    """Llama 3's scaled inverse frequencies (transformers'
    _compute_llama3_parameters), float64."""
    inv = 1.0 / theta ** (np.arange(0, rotary_dim, 2) / rotary_dim)
    wavelen = 2 * np.pi / inv
    low_wavelen, high_wavelen = original / low, original / high
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv / factor + smooth * inv
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, smoothed, scaled)


def tables(rows, rotary_dim, dtype="f32"):
    """cos and sin [rows, rotary_dim / 2] of Llama 3's frequencies, as the
    dtype's host arrays, and their values as float64."""
    angle = np.arange(rows)[:, None] * llama3_inv_freq(rotary_dim)[None, :]
    out = []
    for t in (np.cos(angle), np.sin(angle)):
        t32 = t.astype(np.float32)
        if dtype == "bf16":
            host = kvattn.to_bf16(t32)
            exact = kvattn.from_bf16(host).astype(np.float64)
        elif dtype == "f16":
            host = t32.astype(np.float16)
            exact = host.astype(np.float64)
        else:
            host, exact = t32, t32.astype(np.float64)
        out.append((host, exact))
    return out


def rotate_by(x, c, s, rotary_dim, interleaved=False):
    """x [B, H, L, D] rotated by per-row cosines and sines c, s
    [B, L, rotary_dim / 2] (float64)."""
    x = np.asarray(x, np.float64).copy()
    half = rotary_dim // 2
    c, s = c[:, None], s[:, None]  # [B, 1, L, half]
    if interleaved:
        a, b = x[..., 0:rotary_dim:2].copy(), x[..., 1:rotary_dim:2].copy()
        x[..., 0:rotary_dim:2] = a * c - b * s
        x[..., 1:rotary_dim:2] = b * c + a * s
    else:
        a, b = x[..., :half].copy(), x[..., half:rotary_dim].copy()
        x[..., :half] = a * c - b * s
        x[..., half:rotary_dim] = b * c + a * s
    return x


def rotate(x, pos, rotary_dim, cos, sin, interleaved=False):
    """x [B, H, L, D] rotated at pos [B, L] by the tables' rows."""
    pos = np.asarray(pos)
    return rotate_by(x, cos[pos], sin[pos], rotary_dim, interleaved)


def theta_rotate(x, pos, rotary_dim, theta, interleaved=False):
    """The theta formula's rotation (what a path that ignored the tables
    would compute), for the assertions that the tables matter."""
    inv = theta ** (-2.0 * np.arange(rotary_dim // 2) / rotary_dim)
    angle = np.asarray(pos, np.float64)[..., None] * inv
    return rotate_by(x, np.cos(angle), np.sin(angle), rotary_dim,
                     interleaved)


def offsets_ir(shape, dtype, rotary_dim, rows, table_dtype, interleaved):
    b, hq, hkv, l, s, d = shape
    q = f"tensor<{b}x{hq}x{l}x{d}x{dtype}>"
    kv = f"tensor<{b}x{hkv}x{s}x{d}x{dtype}>"
    off = f"tensor<{b}xi32>"
    tab = f"tensor<{rows}x{rotary_dim // 2}x{table_dtype}>"
    rope = (f"rope = <rotary_dim = {rotary_dim}"
            + (", interleaved" if interleaved else "") + ">")
    return (f"func.func @main(%q: {q}, %k: {kv}, %v: {kv}, %qo: {off}, "
            f"%ko: {off}, %kl: {off}, %cos: {tab}, %sin: {tab}) -> {q} {{\n"
            f"  %o = kvattn.attention %q, %k, %v q_offset(%qo : {off}) "
            f"k_offset(%ko : {off}) kv_len(%kl : {off}) causal {rope}\n"
            f"      rotary_cos(%cos : {tab}) rotary_sin(%sin : {tab})\n"
            f"      : {q}, {kv}, {kv} -> {q}\n"
            f"  return %o : {q}\n}}\n")


# (B, Hq, Hkv, L, S, D, rotary_dim, interleaved, q offsets, k offsets,
#  kv_len, table rows)
CASES = [
    # GPT-NeoX halves, partial rotary (32 of 64), GQA, positions in the
    # thousands, a table ending right after the last key.
    (2, 4, 2, 5, 96, 64, 32, False, [3091, 5020], [3000, 4930], [96, 95],
     5026),
    # Interleaved pairs, full rotary, decode rows.
    (2, 4, 1, 1, 70, 32, 32, True, [4169, 1065], [4100, 1000], [70, 66],
     4200),
]


def case_inputs(case, seed):
    b, hq, hkv, l, s, d, r, inter, qo, ko, kvl, rows = case
    q = distinct((b, hq, l, d), seed)
    k = distinct((b, hkv, s, d), seed + 1)
    v = distinct((b, hkv, s, d), seed + 2)
    qp = np.array([[qo[i] + t for t in range(l)] for i in range(b)])
    kp = np.array([[ko[i] + j for j in range(s)] for i in range(b)])
    return q, k, v, qp, kp


@pytest.mark.parametrize("table_dtype", ["f32", "bf16"])
@pytest.mark.parametrize("options", [{}, {"vectorize": False}])
@pytest.mark.parametrize("case", CASES)
def test_query_rotated_by_the_tables_on_the_cpu(case, options, table_dtype):
    b, hq, hkv, l, s, d, r, inter, qo, ko, kvl, rows = case
    q, k, v, qp, kp = case_inputs(case, 5)
    (cos, cos64), (sin, sin64) = tables(rows, r, table_dtype)
    # The cache holds keys rotated at their positions by the same tables.
    k_rot = rotate(k, kp, r, cos64, sin64, inter).astype(np.float32)
    prog = kvattn.compile(offsets_ir(case[:6], "f32", r, rows, table_dtype,
                                     inter), **options)
    out = prog.run(q, k_rot, v, np.array(qo, np.int32),
                   np.array(ko, np.int32), np.array(kvl, np.int32), cos, sin)
    want = attention(rotate(q, qp, r, cos64, sin64, inter), k_rot, v, qp,
                     kp, kvl)
    # f32 arithmetic on exact table values: products and sums in f32.
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    # Llama 3's tables are no theta's: the plain theta = 500000 rotation
    # (what a path ignoring the tables would compute) differs, and so does
    # the other convention.
    plain = attention(theta_rotate(q, qp, r, 500000.0, inter), k_rot, v, qp,
                      kp, kvl)
    assert np.abs(plain - want).max() > 1e-3
    other = attention(rotate(q, qp, r, cos64, sin64, not inter), k_rot, v,
                      qp, kp, kvl)
    assert np.abs(other - want).max() > 1e-3


def test_bf16_query_and_tables():
    case = CASES[0]
    b, hq, hkv, l, s, d, r, inter, qo, ko, kvl, rows = case
    q, k, v, qp, kp = case_inputs(case, 9)
    (cos, cos64), (sin, sin64) = tables(rows, r, "bf16")
    qb = kvattn.to_bf16(q)
    kb = kvattn.to_bf16(rotate(k, kp, r, cos64, sin64).astype(np.float32))
    vb = kvattn.to_bf16(v)
    qf, kf, vf = (kvattn.from_bf16(x) for x in (qb, kb, vb))
    prog = kvattn.compile(offsets_ir(case[:6], "bf16", r, rows, "bf16",
                                     False))
    out = kvattn.from_bf16(prog.run(qb, kb, vb, np.array(qo, np.int32),
                                    np.array(ko, np.int32),
                                    np.array(kvl, np.int32), cos, sin))
    # The rotated query rounded to bf16 before the products.
    rq = kvattn.from_bf16(kvattn.to_bf16(
        rotate(qf, qp, r, cos64, sin64).astype(np.float32)))
    want = attention(rq.astype(np.float64), kf, vf, qp, kp, kvl)
    np.testing.assert_allclose(out, want, atol=2e-2, rtol=2e-2)


def append_ir(shape, dtype, rotary_dim, rows, table_dtype):
    """K written by kvattn.append rotating from the tables (with its
    record), V by a plain append, then the attention rotating its query
    from the same tables."""
    b, hq, hkv, l, c, d = shape
    q = f"tensor<{b}x{hq}x{l}x{d}x{dtype}>"
    new = f"tensor<{b}x{hkv}x{l}x{d}x{dtype}>"
    cache = f"tensor<{b}x{hkv}x{c}x{d}x{dtype}>"
    off = f"tensor<{b}xi32>"
    rec = f"tensor<{b}x{c}xi32>"
    tab = f"tensor<{rows}x{rotary_dim // 2}x{table_dtype}>"
    rope = f"rope = <rotary_dim = {rotary_dim}>"
    tabs = f"rotary_cos(%cos : {tab}) rotary_sin(%sin : {tab})"
    return (
        f"func.func @main(%q: {q}, %kn: {new}, %vn: {new}, %kc: {cache}, "
        f"%vc: {cache}, %pos: {off}, %rec: {rec}, %kl: {off}, %cos: {tab}, "
        f"%sin: {tab})\n    -> ({q}, {cache}, {rec}) {{\n"
        f"  %k, %k_rec = kvattn.append %kn into %kc at %pos {rope} {tabs} "
        f"rope_pos(%rec : {rec}) : {new} into {cache}, {off}\n"
        f"  %v = kvattn.append %vn into %vc at %pos : {new} into {cache}, "
        f"{off}\n"
        f"  %o = kvattn.attention %q, %k, %v q_offset(%pos : {off}) "
        f"kv_len(%kl : {off}) causal {rope} {tabs}\n"
        f"      : {q}, {cache}, {cache} -> {q}\n"
        f"  return %o, %k, %k_rec : {q}, {cache}, {rec}\n}}\n")


def check_append(out, k2, rec2, q, kn, vn, kc, vc, pos, r, cos64, sin64,
                 l, tol):
    b = q.shape[0]
    new_pos = pos[:, None] + np.arange(l)[None, :]
    k_new = rotate(kn, new_pos, r, cos64, sin64)
    for i in range(b):
        np.testing.assert_allclose(k2[i, :, pos[i]:pos[i] + l], k_new[i],
                                   **tol)
        assert np.array_equal(rec2[i, pos[i]:pos[i] + l], new_pos[i])
    kvl = pos + l
    k_all = np.asarray(k2, np.float64)
    v_all = np.asarray(vc, np.float64).copy()
    for i in range(b):
        v_all[i, :, pos[i]:pos[i] + l] = vn[i]
    slots = np.tile(np.arange(kc.shape[2]), (b, 1))
    want = attention(rotate(q, new_pos, r, cos64, sin64), k_all, v_all,
                     new_pos, slots, kvl)
    np.testing.assert_allclose(out, want, **tol)


def test_append_rotates_the_keys_from_the_tables():
    b, hq, hkv, l, c, d, r, rows = 2, 4, 2, 3, 2100, 32, 16, 2043
    pos = np.array([2040, 1500], np.int32)
    q, kn, vn = (distinct(x, 21 + i) for i, x in enumerate(
        [(b, hq, l, d), (b, hkv, l, d), (b, hkv, l, d)]))
    kc, vc = distinct((b, hkv, c, d), 24), distinct((b, hkv, c, d), 25)
    rec = np.full((b, c), -1, np.int32)
    (cos, cos64), (sin, sin64) = tables(rows, r)
    prog = kvattn.compile(append_ir((b, hq, hkv, l, c, d), "f32", r, rows,
                                    "f32"))
    out, k2, rec2 = prog.run(q, kn, vn, kc, vc, pos, rec, pos + l, cos, sin)
    check_append(out, k2, rec2, q, kn, vn, kc, vc, pos, r, cos64, sin64, l,
                 dict(rtol=1e-4, atol=1e-5))
    # One more token than the tables hold: named before anything runs.
    with pytest.raises(kvattn.KVAttnError,
                       match=r"rotary_cos: position 2043 of batch 0, row 3 "
                             r"is outside the table's 2043 rows"):
        kvattn.compile(append_ir((b, hq, hkv, l + 1, c, d), "f32", r, rows,
                                 "f32")).run(
            distinct((b, hq, l + 1, d), 1), distinct((b, hkv, l + 1, d), 2),
            distinct((b, hkv, l + 1, d), 3), kc, vc, pos, rec, pos + l + 1,
            cos, sin)


def test_query_outside_the_tables_on_the_cpu():
    case = CASES[1]
    b, hq, hkv, l, s, d, r, inter, qo, ko, kvl, rows = case
    q, k, v, qp, kp = case_inputs(case, 3)
    (cos, _), (sin, _) = tables(rows, r)
    prog = kvattn.compile(offsets_ir(case[:6], "f32", r, rows, "f32", inter))
    with pytest.raises(kvattn.KVAttnError,
                       match=r"rotary_cos: position 4200 of batch 0, row 0 "
                             r"is outside the table's 4200 rows"):
        prog.run(q, k, v, np.array([4200, 1065], np.int32),
                 np.array(ko, np.int32), np.array(kvl, np.int32), cos, sin)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_query_rotated_by_the_tables_on_the_emulated_gpu(emulated_runtime,
                                                         dtype):
    case = CASES[0]
    b, hq, hkv, l, s, d, r, inter, qo, ko, kvl, rows = case
    q, k, v, qp, kp = case_inputs(case, 41)
    (cos, cos64), (sin, sin64) = tables(rows, r, "bf16")
    k_rot = rotate(k, kp, r, cos64, sin64).astype(np.float32)
    named = dict(q_offset=np.array(qo, np.int32),
                 k_offset=np.array(ko, np.int32),
                 kv_len=np.array(kvl, np.int32), rotary_cos=cos,
                 rotary_sin=sin)
    prog = kvattn.compile(offsets_ir(case[:6], dtype, r, rows, "bf16",
                                     False),
                          target="gpu", runtime=emulated_runtime)
    if dtype == "f32":
        # The scalar kernel: f32 arithmetic on the widened table values.
        out = prog.run(query=q, key=k_rot, value=v, **named)
        want = attention(rotate(q, qp, r, cos64, sin64), k_rot, v, qp, kp,
                         kvl)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    else:
        # Tensor cores: the rotated query rounded to bf16 as it is staged.
        qb, kb, vb = (kvattn.to_bf16(x) for x in (q, k_rot, v))
        qf, kf, vf = (kvattn.from_bf16(x) for x in (qb, kb, vb))
        out = kvattn.from_bf16(prog.run(query=qb, key=kb, value=vb, **named))
        rq = kvattn.from_bf16(kvattn.to_bf16(
            rotate(qf, qp, r, cos64, sin64).astype(np.float32)))
        want = attention(rq.astype(np.float64), kf, vf, qp, kp, kvl)
        np.testing.assert_allclose(out, want, atol=3e-2, rtol=2e-2)
        plain = attention(theta_rotate(qf, qp, r, 500000.0), kf, vf, qp, kp,
                          kvl)
        assert np.abs(plain - want).max() > 0.05
    # A query row past the tables: the runtime's host check names it.
    with pytest.raises(kvattn.KVAttnError,
                       match=r"rotary_cos: position 5026 of batch 1, row 4 "
                             r"is outside the table's 5026 rows"):
        prog.run(query=q if dtype == "f32" else kvattn.to_bf16(q),
                 key=k_rot if dtype == "f32" else kvattn.to_bf16(k_rot),
                 value=v if dtype == "f32" else kvattn.to_bf16(v),
                 **dict(named, q_offset=np.array([3091, 5022], np.int32)))
    prog.close()


def test_plan_from_a_description_checks_positions_on_the_device(
        emulated_runtime):
    """A plan of a description with rotary_rows: append (keys rotated from
    the tables, record written) + attention (query rotated from the same
    tables) with device metadata; a position past the tables is recorded on
    the device (status rules 29 / 30) with the reference's message and
    computes nothing."""
    rt = emulated_runtime
    b, hq, hkv, l, c, d, r, rows = 2, 4, 2, 2, 160, 32, 16, 140
    desc = dict(dtype="f32", batch=b, query_len=l, key_len=c,
                num_query_heads=hq, num_kv_heads=hkv, head_dim=d,
                causal=True, append=True, rotary_dim=r, rotary_rows=rows,
                rotary_dtype="f16", rope_record=True)
    ir = kvattn.attention_ir(**desc)
    assert ir.count("rope = <rotary_dim = 16>") == 2, ir
    assert ir.count("rotary_cos(%") == 2, ir
    assert f"tensor<{rows}x8xf16>" in ir, ir
    (cos, cos64), (sin, sin64) = tables(rows, r, "f16")
    pos = np.array([120, 77], np.int32)
    q, kn, vn = (distinct(x, 61 + i) for i, x in enumerate(
        [(b, hq, l, d), (b, hkv, l, d), (b, hkv, l, d)]))
    kc, vc = distinct((b, hkv, c, d), 64), distinct((b, hkv, c, d), 65)
    slots = np.tile(np.arange(c), (b, 1))
    kc = rotate(kc, np.minimum(slots, rows - 1), r, cos64,
                sin64).astype(np.float32)
    rec = np.where(slots < pos[:, None], np.minimum(slots, rows - 1),
                   -1).astype(np.int32)
    plan = kvattn.plan(desc, runtime=rt, max_sizes={"B": b, "L": l, "S": c})
    dev = lambda x: kvattn.to_device(x, rt)
    i32 = lambda x: dev(np.asarray(x, np.int32))

    def run(at):
        bufs = dict(query=dev(q), update_k=dev(kn), update_v=dev(vn),
                    key=dev(kc), value=dev(vc), k_rope_pos=i32(rec),
                    rotary_cos=dev(cos), rotary_sin=dev(sin))
        out = rt.empty(q.shape, "f32")
        plan.run(out=out, pos=i32(at), q_offset=i32(at), kv_len=i32(at + l),
                 **bufs)
        return out, bufs

    out, bufs = run(pos)
    assert plan.status() is None
    check_append(out.numpy(), bufs["key"].numpy(), bufs["k_rope_pos"].numpy(),
                 q, kn, vn, kc, vc, pos, r, cos64, sin64, l,
                 dict(rtol=1e-4, atol=1e-5))
    # Batch 1 writes (and reads) positions 139 and 140 of a 140-row table:
    # the append's validation names its token 1 (rule 30); nothing runs.
    out, bufs = run(np.array([120, 139], np.int32))
    status = plan.status()
    assert status and status.endswith(
        "rotary_cos: position 140 of batch 1, row 1 is outside the table's "
        "140 rows"), status
    assert np.array_equal(bufs["k_rope_pos"].numpy(), rec)
    plan.clear_status()
    plan.close()


def test_description_table_fields():
    base = dict(dtype="f32", batch=1, query_len=1, key_len=64,
                num_query_heads=2, num_kv_heads=1, head_dim=32, causal=True,
                rotary_dim=16, rotary_rows=4096)
    ir = kvattn.attention_ir(**base)
    assert "rope = <rotary_dim = 16>" in ir and "theta" not in ir, ir
    assert "tensor<4096x8xf32>" in ir, ir
    bad = [(dict(rotary_rows=-2), "rotary_rows = -2 must be positive"),
           (dict(rotary_dim=0), "rotary_rows = 4096 is given without "
                                "rotary_dim"),
           (dict(rotary_dtype="f64"), "rotary_dtype = 3 is not KVATTN_F32, "
                                      "KVATTN_F16 or KVATTN_BF16")]
    for change, message in bad:
        with pytest.raises(kvattn.KVAttnError, match=message):
            kvattn.attention_ir(**dict(base, **change))
