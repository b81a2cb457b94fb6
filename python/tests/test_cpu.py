"""The CPU path: kvattn.compile(target="cpu") and run on NumPy arrays."""

import numpy as np
import pytest

import kvattn
from conftest import attention_reference, distinct

APPEND = """
func.func @append(%q: tensor<2x4x3x16xf32>, %k: tensor<2x2x9x16xf32>,
                  %v: tensor<2x2x9x16xf32>, %pos: tensor<2xi32>)
    -> tensor<2x4x3x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) causal
      : tensor<2x4x3x16xf32>, tensor<2x2x9x16xf32>,
        tensor<2x2x9x16xf32> -> tensor<2x4x3x16xf32>
  return %o : tensor<2x4x3x16xf32>
}
"""

DYNAMIC = """
func.func @append(%q: tensor<?x4x?x16xf32>, %k: tensor<?x1x?x16xf32>,
                  %v: tensor<?x1x?x16xf32>, %pos: tensor<?xi32>,
                  %len: tensor<?xi32>) -> tensor<?x4x?x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>)
      kv_len(%len : tensor<?xi32>) causal
      : tensor<?x4x?x16xf32>, tensor<?x1x?x16xf32>,
        tensor<?x1x?x16xf32> -> tensor<?x4x?x16xf32>
  return %o : tensor<?x4x?x16xf32>
}
"""


def inputs(B=2, Hq=4, Hkv=2, L=3, S=9, D=16):
    return (distinct((B, Hq, L, D), 1), distinct((B, Hkv, S, D), 2),
            distinct((B, Hkv, S, D), 3, scale=4.0))


@pytest.mark.parametrize("options", [dict(threads=1, block_n=4),
                                     dict(threads=2, block_m=16, split_kv=2),
                                     dict(vectorize=False, opt_level=1)])
def test_causal_q_offset_gqa(options):
    q, k, v = inputs()
    pos = np.array([6, 2], np.int32)  # distinct offsets, GQA 4/2
    prog = kvattn.compile(APPEND, target="cpu", **options)
    assert prog.arguments[0] == ("f32", (2, 4, 3, 16))
    out = prog.run(q, k, v, pos)
    assert out.shape == (2, 4, 3, 16) and out.dtype == np.float32
    want = attention_reference(q, k, v, q_offset=pos)
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=1e-5)
    # A mask aligned elsewhere (upper-left, q_offset 0) gives other values.
    wrong = attention_reference(q, k, v, q_offset=[0, 0])
    assert np.abs(out - wrong).max() > 1e-2


def test_run_compiles_and_runs_once():
    q, k, v = inputs()
    pos = [6, 2]  # a list: converted to the argument's i32
    out = kvattn.run(APPEND, q, k, v, pos, options=dict(threads=1))
    np.testing.assert_allclose(out, attention_reference(q, k, v, pos),
                               atol=2e-5)


def test_dynamic_shapes_and_kv_len():
    prog = kvattn.compile(DYNAMIC, target="cpu", threads=1)
    assert prog.arguments[0] == ("f32", (None, 4, None, 16))
    for B, L, S, pos, lens in ((1, 4, 12, [5], [9]),
                               (3, 1, 20, [19, 7, 0], [20, 8, 1])):
        q, k, v = inputs(B=B, Hkv=1, L=L, S=S)
        out = prog.run(q, k, v, np.array(pos, np.int32),
                       np.array(lens, np.int32))
        want = attention_reference(q, k, v, q_offset=pos, kv_len=lens)
        np.testing.assert_allclose(out, want, atol=2e-5)


def test_bad_inputs_have_messages():
    prog = kvattn.compile(APPEND, target="cpu", threads=1)
    q, k, v = inputs()
    pos = np.array([6, 2], np.int32)
    with pytest.raises(kvattn.KVAttnError, match="3 inputs given, but "
                       "@append takes 4"):
        prog.run(q, k, v)
    with pytest.raises(kvattn.KVAttnError, match=r"input 0 \(argument 0 of "
                       r"@append\) is 2x4x3x16xf64, but "
                       r"tensor<2x4x3x16xf32> has element type f32"):
        prog.run(q.astype(np.float64), k, v, pos)
    with pytest.raises(kvattn.KVAttnError, match=r"input 1 .* has 9 at dim 2"):
        prog.run(q, k[:, :, :8], v, pos)
    with pytest.raises(kvattn.KVAttnError, match="rank"):
        prog.run(q, k[0], v, pos)
    # Run-time values: the reference's checks and messages.
    with pytest.raises(kvattn.KVAttnError, match="q_offset"):
        prog.run(q, k, v, np.array([6, -3], np.int32))
    with pytest.raises(kvattn.KVAttnError, match="uint64"):
        prog.run(q, k, v, pos.astype(np.uint64))


def test_bad_compiles_have_messages():
    with pytest.raises(kvattn.KVAttnError, match="cannot parse the IR"):
        kvattn.compile("func.func @f(", target="cpu")
    with pytest.raises(kvattn.KVAttnError, match="no function 'nope'"):
        kvattn.compile(APPEND, target="cpu", entry="nope")
    with pytest.raises(kvattn.KVAttnError, match="unknown option "
                       "'tensor_cores' for target 'cpu'"):
        kvattn.compile(APPEND, target="cpu", tensor_cores=False)
    with pytest.raises(kvattn.KVAttnError,
                       match="options.block_m = -4 is negative"):
        kvattn.compile(APPEND, target="cpu", block_m=-4)
    with pytest.raises(kvattn.KVAttnError, match="vector width"):
        kvattn.compile(APPEND, target="cpu", vector_width=3)
    with pytest.raises(kvattn.KVAttnError, match="must be a bool"):
        kvattn.compile(APPEND, target="cpu", vectorize=2)
    with pytest.raises(kvattn.KVAttnError, match="unknown target 'tpu'"):
        kvattn.compile(APPEND, target="tpu")


def test_bf16_host_data_is_uint16_bits():
    ir = APPEND.replace("xf32>", "xbf16>")
    prog = kvattn.compile(ir, target="cpu", threads=1)
    q, k, v = inputs()
    qb, kb, vb = (kvattn.to_bf16(x) for x in (q, k, v))
    pos = np.array([6, 2], np.int32)
    out = prog.run(qb, kb, vb, pos)
    assert out.dtype == np.uint16
    want = attention_reference(*(kvattn.from_bf16(x) for x in (qb, kb, vb)),
                               q_offset=pos)
    np.testing.assert_allclose(kvattn.from_bf16(out), want, atol=3e-2,
                               rtol=2e-2)
    with pytest.raises(kvattn.KVAttnError, match="uint16 bit patterns"):
        prog.run(q, kb, vb, pos)


# A decode step that writes K and V and attends over them (the serving
# shape of the CPU path), returning the written caches too.
STEP = """
func.func @step(%q: tensor<2x4x1x16xf32>, %kc: tensor<2x2x9x16xf32>,
                %vc: tensor<2x2x9x16xf32>, %kn: tensor<2x2x1x16xf32>,
                %vn: tensor<2x2x1x16xf32>, %pos: tensor<2xi32>)
    -> (tensor<2x4x1x16xf32>, tensor<2x2x9x16xf32>, tensor<2x2x9x16xf32>) {
  %k = kvattn.append %kn into %kc at %pos
      : tensor<2x2x1x16xf32> into tensor<2x2x9x16xf32>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos
      : tensor<2x2x1x16xf32> into tensor<2x2x9x16xf32>, tensor<2xi32>
  %c1 = arith.constant dense<1> : tensor<2xi32>
  %len = arith.addi %pos, %c1 : tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>)
      kv_len(%len : tensor<2xi32>) causal
      : tensor<2x4x1x16xf32>, tensor<2x2x9x16xf32>,
        tensor<2x2x9x16xf32> -> tensor<2x4x1x16xf32>
  return %o, %k, %v
      : tensor<2x4x1x16xf32>, tensor<2x2x9x16xf32>, tensor<2x2x9x16xf32>
}
"""


def step_inputs():
    return (distinct((2, 4, 1, 16), 1), distinct((2, 2, 9, 16), 2),
            distinct((2, 2, 9, 16), 3, scale=4.0),
            distinct((2, 2, 1, 16), 4), distinct((2, 2, 1, 16), 5))


def written(cache, new, pos):
    out = cache.copy()
    for b, p in enumerate(pos):
        out[b, :, p:p + new.shape[2]] = new[b]
    return out


def step_reference(q, kc, vc, kn, vn, pos):
    k, v = written(kc, kn, pos), written(vc, vn, pos)
    o = attention_reference(q, k, v, q_offset=pos, kv_len=pos + 1)
    return o, k, v


def test_a_run_never_writes_its_inputs():
    # Session 30: the validation before every kvattn_cpu_run evaluated each
    # kvattn.append on the caller's memory (a copy of a view shares it): the
    # caches were written before the kernel ran, and a call refused at its
    # second batch still wrote the first's rows.
    prog = kvattn.compile(STEP, target="cpu", threads=1)
    q, kc, vc, kn, vn = step_inputs()
    before = [a.copy() for a in (q, kc, vc, kn, vn)]
    pos = np.array([4, 8], np.int32)
    o, k, v = prog.run(q, kc, vc, kn, vn, pos)
    want = step_reference(q, kc, vc, kn, vn, pos)
    np.testing.assert_allclose(o, want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(k, want[1])
    np.testing.assert_array_equal(v, want[2])
    for a, b in zip((q, kc, vc, kn, vn), before):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(kvattn.KVAttnError,
                       match=r"pos\[1\] = 9 writes rows \[9, 10\) outside "
                             r"the cache capacity C = 9 \(batch 1\)"):
        prog.run(q, kc, vc, kn, vn, np.array([4, 9], np.int32))
    for a, b in zip((q, kc, vc, kn, vn), before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("threads", [1, 2])
def test_in_place_appends_write_the_callers_caches(threads):
    # in_place_appends: the caches are written where they are (a decode
    # step's write costs its rows, not a copy of the cache), and a refused
    # call writes nothing.
    prog = kvattn.compile(STEP, target="cpu", threads=threads,
                          in_place_appends=True)
    q, kc, vc, kn, vn = step_inputs()
    pos = np.array([4, 8], np.int32)
    want = step_reference(q, kc, vc, kn, vn, pos)
    untouched = [a.copy() for a in (kc, vc)]
    with pytest.raises(kvattn.KVAttnError, match=r"pos\[1\] = 9"):
        prog.run(q, kc, vc, kn, vn, np.array([4, 9], np.int32))
    for a, b in zip((kc, vc), untouched):
        np.testing.assert_array_equal(a, b)
    o, k, v = prog.run(q, kc, vc, kn, vn, pos)
    np.testing.assert_allclose(o, want[0], rtol=1e-5, atol=1e-5)
    # The caller's arrays hold the written caches, every other row kept.
    np.testing.assert_array_equal(kc, want[1])
    np.testing.assert_array_equal(vc, want[2])
    np.testing.assert_array_equal(k, want[1])
    np.testing.assert_array_equal(v, want[2])
    # The next step reads what this one wrote.
    kn2, vn2 = kn + 1, vn - 1
    pos2 = pos - 1
    o2, _, _ = prog.run(q, kc, vc, kn2, vn2, pos2)
    want2 = step_reference(q, want[1], want[2], kn2, vn2, pos2)
    np.testing.assert_allclose(o2, want2[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(kc, want2[1])


def test_in_place_appends_is_a_bool_option():
    with pytest.raises(kvattn.KVAttnError,
                       match="option in_place_appends must be a bool"):
        kvattn.compile(STEP, target="cpu", in_place_appends=2)


def _host(a):
    from kvattn import capi
    shape = (capi.ctypes.c_int64 * a.ndim)(*a.shape)
    dtype = {np.float32: "f32", np.int32: "i32"}[a.dtype.type]
    return capi.HostTensor(a.ctypes.data, capi.DTYPE_CODE[dtype], a.ndim,
                           shape), shape


def test_in_place_appends_refuse_shared_memory():
    # A cache an in-place append writes is read and written while the other
    # inputs are read: another input or an output sharing its memory (but
    # for the output that is that cache) is refused by name, before anything
    # is written.
    from kvattn import capi
    prog = kvattn.compile(STEP, target="cpu", threads=1,
                          in_place_appends=True)
    q, kc, vc, kn, vn = step_inputs()
    pos = np.array([4, 8], np.int32)
    before = kc.copy()
    with pytest.raises(kvattn.KVAttnError,
                       match=r"argument 2 of @step shares memory with "
                             r"argument 1, the cache an in-place append "
                             r"writes \(in_place_appends\): pass separate "
                             r"buffers"):
        prog.run(q, kc, kc, kn, vn, pos)
    np.testing.assert_array_equal(kc, before)
    # Through the C API with outputs: the caches themselves are fine, an
    # output overlapping one is not.
    o = np.empty((2, 4, 1, 16), np.float32)
    keep = [_host(a) for a in (q, kc, vc, kn, vn, pos)]
    inputs = (capi.HostTensor * 6)(*[t for t, _ in keep])
    api, error = prog.api, capi.ctypes.c_void_p()

    def run(outs):
        held = [_host(a) for a in outs]
        array = (capi.HostTensor * 3)(*[t for t, _ in held])
        rc = api.lib.kvattn_cpu_run(prog.handle, inputs, 6, array, 3,
                                    capi.ctypes.byref(error))
        return api._take(error.value) if rc else None

    vc_before = vc.copy()
    assert run([o, kc, vc]) is None
    want = step_reference(q, before, vc_before, kn, vn, pos)
    np.testing.assert_array_equal(kc, want[1])
    np.testing.assert_array_equal(vc, want[2])
    np.testing.assert_allclose(o, want[0], rtol=1e-5, atol=1e-5)
    # An output inside the key cache's memory (a view of 128 of its floats).
    written = kc.copy()
    inside = kc.reshape(-1)[16:16 + o.size].reshape(o.shape)
    message = run([inside, kc, vc])
    assert message is not None and ("output 0 overlaps input 1, the cache "
                                    "an in-place append writes") in message
    np.testing.assert_array_equal(kc, written)
