"""Every value checked at the Python/C boundary: a wrong type is a
KVAttnTypeError (a TypeError), a refused value a KVAttnValueError (a
ValueError), both KVAttnErrors; nothing wraps, truncates or is cut on its
way to C; outputs are filled in place or refused."""

import numpy as np
import pytest

import kvattn
from conftest import attention_reference, distinct
from test_cpu import APPEND
from test_device import FakeCudaArray
from test_gpu import APPEND_F32

TypeErr, ValueErr = kvattn.KVAttnTypeError, kvattn.KVAttnValueError


def test_error_classes():
    assert issubclass(kvattn.KVAttnError, RuntimeError)
    assert issubclass(TypeErr, kvattn.KVAttnError)
    assert issubclass(TypeErr, TypeError)
    assert issubclass(ValueErr, kvattn.KVAttnError)
    assert issubclass(ValueErr, ValueError)


@pytest.mark.parametrize("ir", [None, APPEND.encode(), 42])
def test_ir_must_be_text(ir):
    with pytest.raises(TypeErr, match=r"^ir must be a str, got "):
        kvattn.compile(ir, target="cpu")


def test_nul_does_not_cut_the_ir():
    # The text up to the NUL is a valid program: it must not be compiled.
    with pytest.raises(ValueErr, match="ir contains a NUL character at "
                       f"offset {len(APPEND)}: the C API would read the "
                       "text only up to it"):
        kvattn.compile(APPEND + "\0 garbage", target="cpu")
    with pytest.raises(ValueErr, match="entry contains a NUL character"):
        kvattn.compile(APPEND, target="cpu", entry="append\0x")
    with pytest.raises(TypeErr, match="entry must be a str or None, got "
                       "bytes"):
        kvattn.compile(APPEND, target="cpu", entry=b"append")


def test_options_do_not_wrap():
    with pytest.raises(ValueErr, match=r"option block_n = 18446744073709551648"
                       r" is outside \[-9223372036854775808, "):
        kvattn.compile(APPEND, target="cpu", block_n=2**64 + 32)
    # opt_level is an int32 field: 2**32 + 1 would be 1.
    with pytest.raises(ValueErr, match=r"option opt_level = 4294967297 is "
                       r"outside \[-2147483648, 2147483647\]"):
        kvattn.compile(APPEND, target="cpu", opt_level=2**32 + 1)
    with pytest.raises(TypeErr, match="option threads must be an integer, "
                       "got float 1.5"):
        kvattn.compile(APPEND, target="cpu", threads=1.5)
    with pytest.raises(ValueErr, match="option vectorize must be a bool"):
        kvattn.compile(APPEND, target="cpu", vectorize=2)


def test_description_fields_do_not_wrap():
    base = dict(dtype="f32", num_kv_heads=2, head_dim=16)
    # 2**64 + 4 heads was an Hq = 4 program.
    with pytest.raises(ValueErr, match=r"description field num_query_heads = "
                       r"18446744073709551620 is outside"):
        kvattn.attention_ir(num_query_heads=2**64 + 4, **base)
    with pytest.raises(TypeErr, match="description field batch must be an "
                       "integer, got float 2.5"):
        kvattn.attention_ir(num_query_heads=4, batch=2.5, **base)
    with pytest.raises(TypeErr, match="description field scale must be a "
                       "number, got 'x'"):
        kvattn.attention_ir(num_query_heads=4, scale="x", **base)
    with pytest.raises(ValueErr, match=r"description dtype must be f32, f16 "
                       r"or bf16, got \['f32'\]"):
        kvattn.attention_ir(dtype=["f32"], num_query_heads=4, num_kv_heads=2,
                            head_dim=16)
    with pytest.raises(ValueErr, match="flag causal = 2|causal"):
        kvattn.attention_ir(num_query_heads=4, causal=2**32 + 1, **base)
    with pytest.raises(TypeErr, match="unknown description field 'heads'"):
        kvattn.attention_ir(heads=4, **base)
    with pytest.raises(TypeErr, match="unknown option 'tensor_cores' for "
                       "target 'cpu'"):
        kvattn.compile(APPEND, target="cpu", tensor_cores=False)
    ir = kvattn.attention_ir(num_query_heads=4, **base)
    assert "kvattn.attention" in ir


def test_cpu_values_are_not_truncated():
    prog = kvattn.compile(APPEND, target="cpu", threads=1)
    q, k, v = distinct((2, 4, 3, 16), 1), distinct((2, 2, 9, 16), 2), \
        distinct((2, 2, 9, 16), 3)
    # Float positions were truncated to [6, 2] and run.
    with pytest.raises(TypeErr, match=r"^input 3: float64 values for a i32 "
                       r"argument would be truncated; pass integers$"):
        prog.run(q, k, v, [6.7, 2.2])
    # 2**32 + 6 was 6 (NumPy wraps with a warning).
    with pytest.raises(ValueErr, match=r"^input 3: 4294967302 is outside the "
                       r"range of i32 \[-2147483648, 2147483647\]$"):
        prog.run(q, k, v, [2**32 + 6, 2])
    with pytest.raises(ValueErr, match=r"input 3\[0\] = 36893488147419103232 "
                       r"is outside"):
        prog.run(q, k, v, [2**65, 2])
    with pytest.raises(TypeErr, match=r"input 3\[0\] must be an integer, "
                       "got str '6'"):
        prog.run(q, k, v, ["6", object()])
    # Exact values still convert.
    out = prog.run(q, k, v, [6, 2])
    np.testing.assert_allclose(out, attention_reference(q, k, v, [6, 2]),
                               atol=2e-5)
    bf = kvattn.compile(APPEND.replace("xf32>", "xbf16>"), target="cpu",
                        threads=1)
    with pytest.raises(TypeErr, match="float64 values for a bf16 argument "
                       r"would be truncated; pass integers \(bf16 data: "
                       r"uint16 bit patterns, kvattn.to_bf16\)"):
        bf.run(q.tolist(), kvattn.to_bf16(k), kvattn.to_bf16(v), [6, 2])
    with pytest.raises(TypeErr, match="to_bf16 takes numbers"):
        kvattn.to_bf16(["a"])


def test_package_arguments():
    with pytest.raises(TypeErr, match="target must be 'cpu' or 'gpu', got "
                       "int"):
        kvattn.compile(APPEND, target=1)
    with pytest.raises(ValueErr, match="unknown target 'tpu'"):
        kvattn.compile(APPEND, target="tpu")
    with pytest.raises(TypeErr, match="options must be a dict, got list"):
        kvattn.run(APPEND, options=[("threads", 1)])
    with pytest.raises(TypeErr, match="run takes IR text or a compiled "
                       "program, got bytes"):
        kvattn.run(APPEND.encode())
    with pytest.raises(TypeErr, match="driver must be 'auto', 'cuda', "
                       "'emulated' or a library path, got int"):
        kvattn.Runtime(driver=5)
    with pytest.raises(TypeErr, match="device must be an integer, got str "
                       "'0'"):
        kvattn.Runtime(device="0", driver="emulated")
    with pytest.raises(ValueErr, match="driver contains a NUL character"):
        kvattn.Runtime(driver="/nonexistent\0libcuda.so")
    with pytest.raises(TypeErr, match="runtime must be a kvattn.Runtime, got "
                       "str"):
        kvattn.attention_ir(runtime="emulated", num_query_heads=4)
    assert kvattn.from_bf16(0x3F80) == 1.0  # a scalar bit pattern
    # 2**32 was device 0.
    with pytest.raises(ValueErr, match=r"device = 4294967296 is outside "
                       r"\[0, 2147483647\]"):
        kvattn.Runtime(device=2**32, driver="emulated")


def test_cuda_array_interface_values():
    with pytest.raises(TypeErr, match=r"shape dim 0 must be an integer, got "
                       r"float 4.5"):
        kvattn.device_view(FakeCudaArray(0x1000, (4.5,), "<f4"))
    with pytest.raises(ValueErr, match=r"data pointer = -4096 is outside"):
        kvattn.device_view(FakeCudaArray(-0x1000, (4,), "<f4"))
    with pytest.raises(ValueErr, match="typestr"):
        kvattn.device_view(FakeCudaArray(0x1000, (4,), ["<f4"]))


# --- the GPU path (emulated) ---------------------------------------------------

def f32_inputs():
    return (distinct((2, 2, 3, 32), 4), distinct((2, 1, 10, 32), 5),
            distinct((2, 1, 10, 32), 6), np.array([7, 3], np.int32))


def test_out_is_filled_in_place(emulated_runtime):
    """A Fortran-order or strided `out` was filled through a hidden copy,
    the caller's array left unchanged."""
    prog = kvattn.compile(APPEND_F32, target="gpu", runtime=emulated_runtime,
                          tensor_cores=False)
    q, k, v, pos = f32_inputs()
    want = attention_reference(q, k, v, q_offset=pos)
    fortran = np.asfortranarray(np.zeros((2, 2, 3, 32), np.float32))
    assert prog.run(q, k, v, pos, out=fortran) is fortran
    np.testing.assert_allclose(fortran, want, atol=1e-4)
    big = np.full((2, 2, 3, 64), -7.0, np.float32)
    strided = big[..., ::2]
    assert prog.run(q, k, v, pos, out=strided) is strided
    np.testing.assert_allclose(big[..., ::2], want, atol=1e-4)
    assert (big[..., 1::2] == -7.0).all()  # only the view's elements
    transposed = np.zeros((2, 3, 2, 32), np.float32).transpose(0, 2, 1, 3)
    prog.run(q, k, v, pos, out=transposed)
    np.testing.assert_allclose(transposed, want, atol=1e-4)
    # What cannot be filled in place is refused.
    frozen = np.zeros((2, 2, 3, 32), np.float32)
    frozen.setflags(write=False)
    with pytest.raises(ValueErr, match="'out' is an output, but the NumPy "
                       "array is read-only"):
        prog.run(q, k, v, pos, out=frozen)
    with pytest.raises(TypeErr, match="'out' is an output: pass a NumPy "
                       "array to fill or a device tensor, not list"):
        prog.run(q, k, v, pos, out=np.zeros((2, 2, 3, 32)).tolist())
    with pytest.raises(TypeErr, match="'out' is f64, the kernel takes f32"):
        prog.run(q, k, v, pos, out=np.zeros((2, 2, 3, 32)))
    prog.close()


class ReadOnly:
    """A producer whose __cuda_array_interface__ says read-only."""

    def __init__(self, array, read_only=True):
        self.array = array
        self.__cuda_array_interface__ = dict(
            array.__cuda_array_interface__, data=(array.ptr, read_only))


def test_read_only_device_output_is_refused(emulated_runtime):
    rt = emulated_runtime
    prog = kvattn.compile(APPEND_F32, target="gpu", runtime=rt,
                          tensor_cores=False)
    q, k, v, pos = f32_inputs()
    dq, dk, dv = (kvattn.to_device(x, rt) for x in (q, k, v))
    out = rt.empty((2, 2, 3, 32), "f32")
    with pytest.raises(ValueErr, match="'out' is written by the kernel, but "
                       "its __cuda_array_interface__ says the memory is "
                       "read-only"):
        prog.run(dq, dk, dv, pos, out=ReadOnly(out))
    # Read-only inputs are fine; a writable output is filled.
    prog.run(ReadOnly(dq), ReadOnly(dk), ReadOnly(dv), pos,
             out=ReadOnly(out, read_only=False))
    np.testing.assert_allclose(out.numpy(), attention_reference(
        q, k, v, q_offset=pos), atol=1e-4)
    prog.close()
    plan = kvattn.plan(APPEND_F32, runtime=rt, tensor_cores=False)
    with pytest.raises(ValueErr, match="'out' is written by the kernel"):
        plan.run(query=dq, key=dk, value=dv, out=ReadOnly(out), q_offset=pos)
    plan.close()


def test_device_array_sizes(emulated_runtime):
    rt = emulated_runtime
    # 2**31 x 2**31 x 4 f32 claimed 2**66 bytes and allocated 0.
    with pytest.raises(ValueErr, match=r"DeviceArray \(2147483648, "
                       r"2147483648, 4\) f32 would be 73786976294838206464 "
                       r"bytes, more than the 9223372036854775807"):
        kvattn.DeviceArray(rt, (2**31, 2**31, 4), "f32")
    with pytest.raises(TypeErr, match="DeviceArray shape dim 0 must be an "
                       "integer, got float 2.5"):
        rt.empty((2.5,), "f32")
    with pytest.raises(ValueErr, match=r"DeviceArray shape dim 1 = -1 is "
                       r"outside"):
        rt.empty((2, -1), "f32")
    with pytest.raises(ValueErr, match="unknown dtype 'f8'"):
        rt.empty((2,), "f8")
    with pytest.raises(TypeErr, match="DeviceArray needs a kvattn.Runtime, "
                       "got str"):
        kvattn.DeviceArray("rt", (2,), "f32")
    assert rt.empty(3, "i32").shape == (3,)


def test_gpu_values_do_not_wrap(emulated_runtime):
    rt = emulated_runtime
    with pytest.raises(TypeErr, match="^ir must be a str, got NoneType"):
        kvattn.compile(None, target="gpu", runtime=rt)
    with pytest.raises(TypeErr, match="^ir must be a str, got bytes"):
        kvattn.plan(APPEND_F32.encode(), runtime=rt)
    with pytest.raises(TypeErr, match="runtime must be a kvattn.Runtime, "
                       "got str"):
        kvattn.compile(APPEND_F32, target="gpu", runtime="emulated")
    with pytest.raises(TypeErr, match="max_sizes must be a dict of sizes, "
                       "got list"):
        kvattn.plan(APPEND_F32, runtime=rt, max_sizes=[("B", 4)])
    with pytest.raises(TypeErr, match=r"max_sizes\['B'\] must be an "
                       "integer, got float 2.5"):
        kvattn.plan(APPEND_F32, runtime=rt, max_sizes={"B": 2.5})
    with pytest.raises(ValueErr, match=r"max_sizes\['S'\] = "
                       r"18446744073709551620 is outside"):
        kvattn.plan(APPEND_F32, runtime=rt, max_sizes={"S": 2**64 + 4})
    with pytest.raises(ValueErr, match=r"max_sizes\['B'\] = -1 is outside"):
        kvattn.plan(APPEND_F32, runtime=rt, max_sizes={"B": -1})
    with pytest.raises(TypeErr, match="stream must be an integer, got str"):
        rt.set_stream("7")
    # -1 was UINT64_MAX, KVATTN_CURRENT_STREAM.
    with pytest.raises(ValueErr, match=r"stream = -1 is outside \[0, "
                       r"18446744073709551615\]"):
        rt.set_stream(-1)
    prog = kvattn.compile(APPEND_F32, target="gpu", runtime=rt,
                          tensor_cores=False)
    q, k, v, pos = f32_inputs()
    with pytest.raises(ValueErr, match=r"metadata q_offset\[0\] = "
                       r"18446744073709551620 is outside"):
        prog.run(q, k, v, [2**64 + 4, 3])
    with pytest.raises(ValueErr, match=r"metadata q_offset\[1\] = "
                       r"18446744073709551615 is outside"):
        prog.run(q, k, v, np.array([7, 2**64 - 1], np.uint64))
    with pytest.raises(TypeErr, match="metadata 'q_offset' must be integers,"
                       " got float64"):
        prog.run(q, k, v, [7.0, 3.5])
    with pytest.raises(TypeErr, match="sizes must be a dict, got tuple"):
        prog.run(q, k, v, pos, sizes=(2,))
    with pytest.raises(TypeErr, match=r"sizes\['B'\] must be an integer"):
        prog.run(q, k, v, pos, sizes={"B": 2.0})
    prog.close()


SDPA_STEP = """
func.func @step(%q: tensor<2x4x2x16xf32>, %kc: tensor<2x2x8x16xf32>,
                %vc: tensor<2x2x8x16xf32>, %kn: tensor<2x2x2x16xf32>,
                %vn: tensor<2x2x2x16xf32>, %pos: tensor<2xi32>)
    -> tensor<2x4x2x16xf32> {
  %k = kvattn.append %kn into %kc at %pos
      : tensor<2x2x2x16xf32> into tensor<2x2x8x16xf32>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos
      : tensor<2x2x2x16xf32> into tensor<2x2x8x16xf32>, tensor<2xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<2x4x2x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
      -> tensor<2x4x2x16xf32>
  return %o : tensor<2x4x2x16xf32>
}
"""


def test_append_and_sdpa(emulated_runtime):
    """kvattn.append + kvattn.sdpa (not yet resolved): a GpuProgram bound the
    appends' `update`/`cache` by name (one buffer for both appends, not the
    attention's key/value) and returned a wrong result without an error; a
    plan refused the module (the appends were told apart only by a
    kvattn.attention user). Now the GpuProgram refuses by name and the plan
    binds update_k/update_v into key/value and computes the step."""
    rt = emulated_runtime
    with pytest.raises(ValueErr, match=r"GpuProgram runs one attention \(and "
                       r"its split-KV merge\); the IR also has the kernels "
                       r"step_kvattn_append_0 \(append\), "
                       r"step_kvattn_append_1 \(append\): plan it with "
                       "kvattn.plan"):
        kvattn.compile(SDPA_STEP, target="gpu", runtime=rt,
                       tensor_cores=False)
    q, kc, vc = distinct((2, 4, 2, 16), 1), distinct((2, 2, 8, 16), 2), \
        distinct((2, 2, 8, 16), 3)
    kn, vn = distinct((2, 2, 2, 16), 4), distinct((2, 2, 2, 16), 5)
    pos = [3, 5]
    k2, v2 = kc.copy(), vc.copy()
    for b, p in enumerate(pos):
        k2[b, :, p:p + 2], v2[b, :, p:p + 2] = kn[b], vn[b]
    want = attention_reference(q, k2, v2, q_offset=pos,
                               kv_len=[p + 2 for p in pos])
    # The CPU runs the IR itself: the reference of the step.
    cpu = kvattn.compile(SDPA_STEP, target="cpu", threads=1)
    np.testing.assert_allclose(cpu.run(q, kc, vc, kn, vn, np.array(
        pos, np.int32)), want, atol=1e-5)
    plan = kvattn.plan(SDPA_STEP, runtime=rt, tensor_cores=False)
    assert sorted(plan.inputs) == sorted(
        ["query", "key", "value", "update_k", "update_v", "pos", "q_offset",
         "kv_len"])
    dk, dv = kvattn.to_device(kc, rt), kvattn.to_device(vc, rt)
    dout = rt.empty((2, 4, 2, 16), "f32")
    plan.run(query=kvattn.to_device(q, rt), key=dk, value=dv,
             update_k=kvattn.to_device(kn, rt),
             update_v=kvattn.to_device(vn, rt), out=dout, pos=pos,
             q_offset=pos, kv_len=[p + 2 for p in pos])
    np.testing.assert_allclose(dout.numpy(), want, atol=1e-4)
    np.testing.assert_array_equal(dk.numpy(), k2)
    np.testing.assert_array_equal(dv.numpy(), v2)
    plan.close()
