"""Attention sinks (gpt-oss) and ALiBi against a NumPy float64 reference of
each formula, on the CPU path (vectorised, scalar, split-KV) and the
emulated GPU (f32 and bf16 tensor cores, split-KV), through an attention
description, and their errors. Every case is one where ignoring the feature
changes the answer (asserted next to the comparison).

    sinks z[h]:   out = sum_j e^{s_j} v_j / (e^{z[h]} + sum_j e^{s_j}),
                  lse = log(e^{z[h]} + sum_j e^{s_j}); no allowed key:
                  out = 0, lse = z[h]
    ALiBi m[h]:   s_j += -m[h] * |qp - kp_j|
"""
import math

import numpy as np
import pytest

import kvattn
from conftest import distinct


def reference(q, k, v, qp, kp, kv_len, causal=False, window=None,
              window_right=None, sinks=None, slopes=None):
    """float64 (out, lse). qp [B, L] and kp [B, S]: the positions."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    out = np.zeros((B, Hq, L, v.shape[3]))
    lse = np.full((B, Hq, L), -np.inf)
    for b in range(B):
        qpos = np.asarray(qp[b], np.float64)[:, None]
        kpos = np.asarray(kp[b], np.float64)[None, :]
        seen = np.broadcast_to(np.arange(S)[None, :] < kv_len[b], (L, S))
        if causal:
            seen = seen & (kpos <= qpos)
        if window is not None:
            seen = seen & (qpos - kpos < window)
        if window_right is not None:
            seen = seen & (kpos - qpos <= window_right)
        for h in range(Hq):
            g = h // (Hq // Hkv)
            s = q[b, h] @ k[b, g].T / math.sqrt(D)
            if slopes is not None:
                s = s - float(slopes[h]) * np.abs(qpos - kpos)
            for i in range(L):
                logits = s[i][seen[i]]
                if sinks is not None:
                    logits = np.append(logits, float(sinks[h]))
                if logits.size == 0:
                    continue
                m = logits.max()
                total = np.exp(logits - m).sum()
                p = np.exp(s[i][seen[i]] - m)
                out[b, h, i] = p @ v[b, g][seen[i]] / total
                lse[b, h, i] = m + math.log(total)
    return out, lse


def attention_ir(dtype, shape, groups, attrs, with_lse=True):
    """One kvattn.attention; `groups` maps an operand group name to its
    type (in argument order); the results are out (and lse)."""
    b, hq, hkv, l, s, d = shape
    q = f"tensor<{b}x{hq}x{l}x{d}x{dtype}>"
    kv = f"tensor<{b}x{hkv}x{s}x{d}x{dtype}>"
    lse = f"tensor<{b}x{hq}x{l}xf32>"
    args = ", ".join(f"%{n}: {t}" for n, t in groups)
    uses = " ".join(f"{n}(%{n} : {t})" for n, t in groups)
    results = f"{q}, {lse}" if with_lse else q
    names = "%o, %lse" if with_lse else "%o"
    return (f"func.func @main(%q: {q}, %k: {kv}, %v: {kv}, {args})\n"
            f"    -> ({results}) {{\n"
            f"  {names} = kvattn.attention %q, %k, %v {uses} {attrs}\n"
            f"      : {q}, {kv}, {kv} -> {results}\n"
            f"  return {names} : {results}\n}}\n")


def alibi_slopes(hq):
    """The ALiBi paper's slopes 2^(-8 (h + 1) / Hq)."""
    return np.array([2.0 ** (-8.0 * (h + 1) / hq) for h in range(hq)],
                    np.float32)


# --- sinks ---------------------------------------------------------------------

# (B, Hq, Hkv, L, S, D, q_offset, kv_len, attrs (causal, window,
# window_right), sinks)
SINK_CASES = [
    # window (0, 0): each row sees only its own key, and rows 32..34 of
    # batch 1 sit past kv_len = 32: no key at all, out = 0, lse = the sink.
    (2, 4, 2, 5, 40, 16, [11, 30], [40, 32], (False, 1, 0),
     [0.5, -1.25, 2.0, 0.0]),
    # gpt-oss's sliding-window layers: causal, window 24, several blocks of
    # a decode-and-append batch, sinks above and below the scores.
    (2, 8, 2, 7, 300, 32, [150, 241], [157, 248], (True, 24, None),
     [3.0, -2.0, 0.25, 1.5, -0.5, 4.0, 0.0, 2.5]),
    # full causal attention over a long cache (many blocks).
    (1, 2, 1, 3, 700, 64, [697], [700], (True, None, None), [1.0, 6.0]),
]


def sink_case(case, dtype="f32"):
    b, hq, hkv, l, s, d, qo, kvl, (causal, window, right), sinks = case
    attrs = ("causal " if causal else "") + \
        (f"window = {window} " if window else "") + \
        (f"window_right = {right}" if right is not None else "")
    groups = [("q_offset", f"tensor<{b}xi32>"), ("kv_len", f"tensor<{b}xi32>"),
              ("sinks", f"tensor<{hq}xf32>")]
    return attention_ir(dtype, (b, hq, hkv, l, s, d), groups, attrs)


def sink_inputs(case, seed):
    b, hq, hkv, l, s, d, qo, kvl = case[:8]
    q = distinct((b, hq, l, d), seed)
    k = distinct((b, hkv, s, d), seed + 1)
    v = distinct((b, hkv, s, d), seed + 2)
    return (q, k, v, np.array(qo, np.int32), np.array(kvl, np.int32),
            np.array(case[9], np.float32))


def sink_reference(case, q, k, v, sinks):
    b, hq, hkv, l, s, d, qo, kvl, (causal, window, right) = case[:9]
    qp = [qo[i] + np.arange(l) for i in range(b)]
    kp = [np.arange(s) for _ in range(b)]
    return reference(q, k, v, qp, kp, kvl, causal, window, right, sinks)


@pytest.mark.parametrize("options", [{}, {"vectorize": False},
                                     {"split_kv": 3}])
@pytest.mark.parametrize("case", SINK_CASES)
def test_sinks_cpu(case, options):
    q, k, v, qo, kvl, sinks = sink_inputs(case, 3)
    out, lse = kvattn.compile(sink_case(case), **options).run(
        q, k, v, qo, kvl, sinks)
    want, want_lse = sink_reference(case, q, k, v, sinks)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
    # The sinks change every row (a test that ignored them would fail).
    plain, plain_lse = sink_reference(case, q, k, v, None)
    assert np.abs(plain - want).max() > 0.05
    assert np.abs(np.nan_to_num(plain_lse, neginf=-99) - want_lse).min() > 1e-3


def test_sinks_all_masked_rows():
    case = SINK_CASES[0]
    q, k, v, qo, kvl, sinks = sink_inputs(case, 5)
    out, lse = kvattn.compile(sink_case(case)).run(q, k, v, qo, kvl, sinks)
    # Batch 1, rows 2..4 (positions 32..34 >= kv_len 32): no key.
    assert np.all(out[1, :, 2:] == 0)
    np.testing.assert_array_equal(lse[1, :, 2:],
                                  np.broadcast_to(sinks[:, None], (4, 3)))
    # Rows with their one key: out = v * e^s / (e^s + e^z).
    assert np.abs(out[1, :, :2]).min() > 0


@pytest.mark.parametrize("case", SINK_CASES)
def test_sinks_emulated_gpu(emulated_runtime, case):
    q, k, v, qo, kvl, sinks = sink_inputs(case, 7)
    want, want_lse = sink_reference(case, q, k, v, sinks)
    for options in ({}, {"split_kv": 2}):
        prog = kvattn.compile(sink_case(case), target="gpu",
                              runtime=emulated_runtime, **options)
        out, lse = prog.run(query=q, key=k, value=v, q_offset=qo,
                            kv_len=kvl, sinks=sinks)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)
        prog.close()
    qb, kb, vb = (kvattn.to_bf16(x) for x in (q, k, v))
    want, want_lse = sink_reference(
        case, *(kvattn.from_bf16(x) for x in (qb, kb, vb)), sinks)
    prog = kvattn.compile(sink_case(case, "bf16"), target="gpu",
                          runtime=emulated_runtime)
    out, lse = prog.run(query=qb, key=kb, value=vb, q_offset=qo, kv_len=kvl,
                        sinks=sinks)
    np.testing.assert_allclose(kvattn.from_bf16(out), want, atol=3e-2,
                               rtol=2e-2)
    np.testing.assert_allclose(lse, want_lse, atol=2e-2, rtol=1e-3)
    prog.close()


# --- ALiBi ---------------------------------------------------------------------

def test_alibi_offsets_in_the_thousands():
    # Decode and append rows at positions in the thousands over caches of
    # 1500 and 1210 keys; the bias reaches slope x 1500.
    b, hq, hkv, l, s, d = 2, 8, 2, 4, 1500, 32
    kvl = np.array([1500, 1210], np.int32)
    qo = kvl - l
    ko = np.array([0, 3000], np.int32)  # batch 1's keys at 3000..4209
    qo = qo + ko
    groups = [("q_offset", f"tensor<{b}xi32>"),
              ("k_offset", f"tensor<{b}xi32>"),
              ("kv_len", f"tensor<{b}xi32>"),
              ("alibi_slopes", f"tensor<{hq}xf32>")]
    text = attention_ir("f32", (b, hq, hkv, l, s, d), groups, "causal")
    q = distinct((b, hq, l, d), 11)
    k = distinct((b, hkv, s, d), 12)
    v = distinct((b, hkv, s, d), 13)
    slopes = alibi_slopes(hq)
    qp = [qo[i] + np.arange(l) for i in range(b)]
    kp = [ko[i] + np.arange(s) for i in range(b)]
    want, want_lse = reference(q, k, v, qp, kp, kvl, causal=True,
                               slopes=slopes)
    plain, _ = reference(q, k, v, qp, kp, kvl, causal=True)
    assert np.abs(plain - want).max() > 0.05
    for options in ({}, {"vectorize": False}, {"split_kv": 4}):
        out, lse = kvattn.compile(text, **options).run(q, k, v, qo, ko, kvl,
                                                       slopes)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)


def test_alibi_explicit_positions_and_sinks():
    # Explicit positions with gaps (an evicted cache): the bias follows the
    # positions, not the slots; bidirectional (no causal): -m |qp - kp|.
    b, hq, hkv, l, s, d = 1, 4, 4, 3, 40, 16
    kp = np.array([[2 * j + (500 if j > 20 else 0) for j in range(s)]],
                  np.int64)
    qp = np.array([[1200, 1201, 1207]], np.int64)
    groups = [("q_pos", f"tensor<{b}x{l}xi64>"),
              ("k_pos", f"tensor<{b}x{s}xi64>"),
              ("sinks", f"tensor<{hq}xf32>"),
              ("alibi_slopes", f"tensor<{hq}xf32>")]
    text = attention_ir("f32", (b, hq, hkv, l, s, d), groups, "")
    q, k, v = (distinct((b, hq, l, d), 21), distinct((b, hkv, s, d), 22),
               distinct((b, hkv, s, d), 23))
    slopes = np.array([0.001, 0.004, 0.02, 0.0], np.float32)
    sinks = np.array([1.0, -1.0, 0.5, 2.0], np.float32)
    want, want_lse = reference(q, k, v, qp, kp, [s], sinks=sinks,
                               slopes=slopes)
    plain, _ = reference(q, k, v, qp, kp, [s], sinks=sinks)
    assert np.abs(plain[0, :3] - want[0, :3]).max() > 0.05
    out, lse = kvattn.compile(text).run(q, k, v, qp, kp, sinks, slopes)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-5, atol=2e-5)


def test_alibi_emulated_gpu(emulated_runtime):
    b, hq, hkv, l, s, d = 2, 4, 1, 9, 200, 32
    kvl = np.array([200, 130], np.int32)
    qo = np.array([2191, 3121], np.int32)
    ko = np.array([2000, 3000], np.int32)
    groups = [("q_offset", f"tensor<{b}xi32>"),
              ("k_offset", f"tensor<{b}xi32>"),
              ("kv_len", f"tensor<{b}xi32>"),
              ("sinks", f"tensor<{hq}xf32>"),
              ("alibi_slopes", f"tensor<{hq}xf32>")]
    slopes = alibi_slopes(hq)
    sinks = np.array([0.0, 1.0, -3.0, 2.0], np.float32)
    q, k, v = (distinct((b, hq, l, d), 31), distinct((b, hkv, s, d), 32),
               distinct((b, hkv, s, d), 33))
    qp = [qo[i] + np.arange(l) for i in range(b)]
    kp = [ko[i] + np.arange(s) for i in range(b)]
    for dtype in ("f32", "bf16"):
        text = attention_ir(dtype, (b, hq, hkv, l, s, d), groups, "causal")
        args = (q, k, v) if dtype == "f32" else \
            tuple(kvattn.to_bf16(x) for x in (q, k, v))
        exact = args if dtype == "f32" else \
            tuple(kvattn.from_bf16(x) for x in args)
        want, want_lse = reference(*exact, qp, kp, kvl, causal=True,
                                   sinks=sinks, slopes=slopes)
        for options in ({}, {"split_kv": 3}):
            prog = kvattn.compile(text, target="gpu",
                                  runtime=emulated_runtime, **options)
            out, lse = prog.run(query=args[0], key=args[1], value=args[2],
                                q_offset=qo, k_offset=ko, kv_len=kvl,
                                sinks=sinks, alibi_slopes=slopes)
            if dtype == "f32":
                np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
                np.testing.assert_allclose(lse, want_lse, rtol=2e-5,
                                           atol=2e-5)
            else:
                np.testing.assert_allclose(kvattn.from_bf16(out), want,
                                           atol=3e-2, rtol=2e-2)
                np.testing.assert_allclose(lse, want_lse, atol=2e-2,
                                           rtol=1e-3)
            prog.close()


# --- ALiBi at any distance ----------------------------------------------------

def far_reference(q, k, v, qp, kp, kv_len, sinks=None, slopes=None):
    """float64 (out, lse) of causal ALiBi attention with integer positions
    qp [B, L], kp [B, S] as far apart as 2^62: the bias -m |qp - kp| is
    taken relative to the row's nearest allowed key (exact integers, then
    float64; softmax does not see a per-row constant) and the constant goes
    back into the lse, log-added to the sink's logit."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    out = np.zeros((B, Hq, L, v.shape[3]))
    lse = np.full((B, Hq, L), -np.inf)
    for b in range(B):
        for h in range(Hq):
            g = h // (Hq // Hkv)
            s = q[b, h] @ k[b, g].T / math.sqrt(D)
            for i in range(L):
                seen = [j for j in range(kv_len[b])
                        if int(kp[b][j]) <= int(qp[b][i])]
                z = None if sinks is None else float(sinks[h])
                if not seen:
                    lse[b, h, i] = -np.inf if z is None else z
                    continue
                dist = np.array([int(qp[b][i]) - int(kp[b][j])
                                 for j in seen])  # exact (int64)
                near = int(dist.min())
                shift = -float(slopes[h]) * near
                logits = s[i][seen] - float(slopes[h]) * (dist - near)
                m = logits.max() if z is None else \
                    max(logits.max(), z - shift)
                p = np.exp(logits - m)
                total = p.sum() + (0.0 if z is None
                                   else math.exp(z - shift - m))
                out[b, h, i] = p @ v[b, g][seen] / total
                m = logits.max()
                p = np.exp(logits - m)
                keys = m + math.log(p.sum()) + shift
                lse[b, h, i] = keys if z is None else np.logaddexp(z, keys)
    return out, lse


def old_f32_alibi(q, k, v, qp, kp, kv_len, slopes):
    """The former kernels' formula: the f32 score plus the f32 bias
    -m * f32(|qp - kp|), then softmax (the out only)."""
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    out = np.zeros((B, Hq, L, v.shape[3]))
    for b in range(B):
        for h in range(Hq):
            g = h // (Hq // Hkv)
            s = (q[b, h].astype(np.float32) @ k[b, g].T.astype(np.float32)
                 / np.float32(math.sqrt(D))).astype(np.float32)
            for i in range(L):
                seen = [j for j in range(kv_len[b])
                        if int(kp[b][j]) <= int(qp[b][i])]
                dist = np.array([np.float32(int(qp[b][i]) - int(kp[b][j]))
                                 for j in seen], np.float32)
                x = (s[i][seen] + np.float32(-slopes[h]) * dist).astype(
                    np.float64)
                p = np.exp(x - x.max())
                out[b, h, i] = p @ v[b, g][seen] / p.sum()
    return out


# (q_offset, k_offset, slopes, sinks): queries far above their keys.
FAR_CASES = [
    # the differential fuzzer's: a query near 2^62 over keys at 0 .. 39.
    ([4611686018427387893, 4611686018427387000], [0, 5],
     [0.0078125, 0.5], None),
    # near 2^40, sinks close to the rows' constant (-m (qp - k_hi)), where
    # they share the denominator with the keys.
    # (Batch 0's nearest key is 2^40 + r below row r: the constant is
    # -(2^39 + r / 2), and the sink -2^39.)
    ([(1 << 40) + 42, (1 << 40) + 12345], [3, 0], [0.5, 2.0 ** -30],
     [-float(1 << 39), -1024.0]),
    # positions in the thousands, sinks.
    ([7000, 3100], [6970, 3050], [0.5, 0.0625], [2.0, -1.0]),
]


@pytest.mark.parametrize("case", FAR_CASES)
def test_alibi_far_positions_cpu(case):
    qo, ko, slopes, sinks = case
    b, hq, hkv, l, s, d = 2, 2, 1, 3, 40, 16
    qo = np.array(qo, np.int64)
    ko = np.array(ko, np.int64)
    kvl = np.array([40, 33], np.int32)
    slopes = np.array(slopes, np.float32)
    groups = [("q_offset", f"tensor<{b}xi64>"),
              ("k_offset", f"tensor<{b}xi64>"),
              ("kv_len", f"tensor<{b}xi32>")]
    if sinks is not None:
        groups.append(("sinks", f"tensor<{hq}xf32>"))
        sinks = np.array(sinks, np.float32)
    groups.append(("alibi_slopes", f"tensor<{hq}xf32>"))
    text = attention_ir("f32", (b, hq, hkv, l, s, d), groups, "causal")
    q, k, v = (distinct((b, hq, l, d), 41), distinct((b, hkv, s, d), 42),
               distinct((b, hkv, s, d), 43))
    qp = [[int(qo[i]) + r for r in range(l)] for i in range(b)]
    kp = [[int(ko[i]) + j for j in range(s)] for i in range(b)]
    want, want_lse = far_reference(q, k, v, qp, kp, kvl, sinks, slopes)
    if qo.max() > 1 << 30 and sinks is None:
        # The former f32 bias differs from the answer (positions so far
        # apart that f32 cannot hold the distances' differences).
        old = old_f32_alibi(q, k, v, qp, kp, kvl, slopes)
        assert np.abs(old - want).max() > 0.1
    if sinks is not None:
        # The sinks change the answer (they are not swamped by the shift).
        plain, _ = far_reference(q, k, v, qp, kp, kvl, None, slopes)
        assert np.abs(plain - want).max() > 0.05
    args = [q, k, v, qo, ko, kvl] + ([sinks] if sinks is not None else []) \
        + [slopes]
    for options in ({}, {"vectorize": False}, {"split_kv": 3}):
        out, lse = kvattn.compile(text, **options).run(*args)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(lse, want_lse, rtol=2e-6, atol=2e-5)


def test_alibi_far_positions_emulated_gpu(emulated_runtime):
    # 32-bit positions (the GPU's default index width): queries near 2^30
    # over keys at 0 .. 39, where the former f32 bias was 64 apart.
    b, hq, hkv, l, s, d = 2, 2, 1, 3, 40, 16
    # (Batch 0's row r is 2^30 + r above its nearest key: with slope 0.5
    # the constant is -(2^29 + r / 2), and head 0's sink -2^29.)
    qo = np.array([(1 << 30) + 39, 1 << 29], np.int32)
    ko = np.array([0, 100], np.int32)
    kvl = np.array([40, 33], np.int32)
    slopes = np.array([0.5, 0.125], np.float32)
    sinks = np.array([-float(1 << 29), 0.5], np.float32)
    groups = [("q_offset", f"tensor<{b}xi32>"),
              ("k_offset", f"tensor<{b}xi32>"),
              ("kv_len", f"tensor<{b}xi32>"),
              ("sinks", f"tensor<{hq}xf32>"),
              ("alibi_slopes", f"tensor<{hq}xf32>")]
    q, k, v = (distinct((b, hq, l, d), 51), distinct((b, hkv, s, d), 52),
               distinct((b, hkv, s, d), 53))
    qp = [[int(qo[i]) + r for r in range(l)] for i in range(b)]
    kp = [[int(ko[i]) + j for j in range(s)] for i in range(b)]
    old = old_f32_alibi(q, k, v, qp, kp, kvl, slopes)
    nosink, _ = far_reference(q, k, v, qp, kp, kvl, None, slopes)
    assert np.abs(old - nosink).max() > 0.1
    for dtype in ("f32", "bf16"):
        text = attention_ir(dtype, (b, hq, hkv, l, s, d), groups, "causal")
        args = (q, k, v) if dtype == "f32" else \
            tuple(kvattn.to_bf16(x) for x in (q, k, v))
        exact = args if dtype == "f32" else \
            tuple(kvattn.from_bf16(x) for x in args)
        want, want_lse = far_reference(*exact, qp, kp, kvl, sinks, slopes)
        plain, _ = far_reference(*exact, qp, kp, kvl, None, slopes)
        assert np.abs(plain - want).max() > 0.05
        for options in ({}, {"split_kv": 3}):
            prog = kvattn.compile(text, target="gpu",
                                  runtime=emulated_runtime, **options)
            out, lse = prog.run(query=args[0], key=args[1], value=args[2],
                                q_offset=qo, k_offset=ko, kv_len=kvl,
                                sinks=sinks, alibi_slopes=slopes)
            if dtype == "f32":
                np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
            else:
                np.testing.assert_allclose(kvattn.from_bf16(out), want,
                                           atol=3e-2, rtol=2e-2)
            np.testing.assert_allclose(lse, want_lse, rtol=2e-6, atol=2e-2)
            prog.close()


# --- descriptions and errors ------------------------------------------------

def test_description():
    text = kvattn.attention_ir(dtype="f32", num_query_heads=4, num_kv_heads=2,
                               head_dim=16, causal=True, sinks=True,
                               alibi=True)
    assert "sinks(%arg5 : tensor<4xf32>)" in text
    assert "alibi_slopes(%arg6 : tensor<4xf32>)" in text
    with pytest.raises(kvattn.KVAttnError, match="desc.sinks = 2 is not 0 "
                       "or 1"):
        kvattn.attention_ir(dtype="f32", num_query_heads=4, num_kv_heads=2,
                            head_dim=16, sinks=2)


@pytest.mark.parametrize("groups, attrs, message", [
    ([("sinks", "tensor<3xf32>")], "",
     r"sinks must have shape \[Hq\]: dim 0 is 3 but Hq is 4"),
    ([("alibi_slopes", "tensor<4xf32>")], "",
     r"alibi_slopes \(ALiBi\) attention needs query and key positions"),
    ([("q_offset", "tensor<1xi32>"), ("alibi_slopes", "tensor<1x4xf32>")],
     "", r"alibi_slopes must have shape \[Hq\] \(rank 1\), got rank 2"),
])
def test_errors(groups, attrs, message):
    text = attention_ir("f32", (1, 4, 2, 3, 8, 16), groups, attrs)
    with pytest.raises(kvattn.KVAttnError, match=message):
        kvattn.compile(text)


def test_sinks_of_another_type_refused():
    text = attention_ir("f32", (1, 4, 2, 3, 8, 16),
                        [("sinks", "tensor<4xf16>")], "")
    with pytest.raises(kvattn.KVAttnError, match=r"sinks must be an f32 "
                       r"tensor \[Hq\] \(one value per query head\), got "
                       r"'tensor<4xf16>'"):
        kvattn.compile(text)
