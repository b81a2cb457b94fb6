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
