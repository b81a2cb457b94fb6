"""The GPU path on the emulated GPU (kernels run on the host), and the
serving plan; device pointers of other libraries on the fake driver."""

import json

import numpy as np
import pytest

import kvattn
from conftest import attention_reference, distinct

APPEND_BF16 = """
func.func @append(%q: tensor<2x4x8x64xbf16>, %k: tensor<2x1x24x64xbf16>,
                  %v: tensor<2x1x24x64xbf16>, %pos: tensor<2xi32>)
    -> tensor<2x4x8x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) causal
      : tensor<2x4x8x64xbf16>, tensor<2x1x24x64xbf16>,
        tensor<2x1x24x64xbf16> -> tensor<2x4x8x64xbf16>
  return %o : tensor<2x4x8x64xbf16>
}
"""

APPEND_F32 = """
func.func @append(%q: tensor<2x2x3x32xf32>, %k: tensor<2x1x10x32xf32>,
                  %v: tensor<2x1x10x32xf32>, %pos: tensor<2xi32>)
    -> tensor<2x2x3x32xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) causal
      : tensor<2x2x3x32xf32>, tensor<2x1x10x32xf32>,
        tensor<2x1x10x32xf32> -> tensor<2x2x3x32xf32>
  return %o : tensor<2x2x3x32xf32>
}
"""

# One decode kernel for every step: dynamic batch and cache length.
DECODE = """
func.func @decode(%q: tensor<?x4x1x64xbf16>, %k: tensor<?x1x?x64xbf16>,
                  %v: tensor<?x1x?x64xbf16>, %pos: tensor<?xi32>,
                  %len: tensor<?xi32>) -> tensor<?x4x1x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>)
      kv_len(%len : tensor<?xi32>) causal
      : tensor<?x4x1x64xbf16>, tensor<?x1x?x64xbf16>,
        tensor<?x1x?x64xbf16> -> tensor<?x4x1x64xbf16>
  return %o : tensor<?x4x1x64xbf16>
}
"""


def bf16(*args, **kw):
    return kvattn.to_bf16(distinct(*args, **kw))


def test_emulated_bf16_tensor_cores(emulated_runtime):
    assert emulated_runtime.emulated
    prog = kvattn.compile(APPEND_BF16, target="gpu", runtime=emulated_runtime)
    assert prog.inputs == ["query", "key", "value", "q_offset"]
    q, k, v = bf16((2, 4, 8, 64), 1), bf16((2, 1, 24, 64), 2), \
        bf16((2, 1, 24, 64), 3)
    pos = [16, 9]  # distinct: a misaligned mask fails
    out = prog.run(query=q, key=k, value=v, q_offset=pos)
    assert out.shape == (2, 4, 8, 64) and out.dtype == np.uint16
    want = attention_reference(*(kvattn.from_bf16(x) for x in (q, k, v)),
                               q_offset=pos)
    np.testing.assert_allclose(kvattn.from_bf16(out), want, atol=3e-2,
                               rtol=2e-2)
    prog.close()


def test_emulated_f32_options_and_split(emulated_runtime):
    q, k, v = distinct((2, 2, 3, 32), 4), distinct((2, 1, 10, 32), 5), \
        distinct((2, 1, 10, 32), 6)
    pos = np.array([7, 3], np.int32)
    want = attention_reference(q, k, v, q_offset=pos)
    for options in (dict(tensor_cores=False, block_n=16),
                    dict(split_kv=2, block_n=16, pack_gqa=False)):
        prog = kvattn.compile(APPEND_F32, target="gpu",
                              runtime=emulated_runtime, **options)
        if options.get("split_kv") == 2:
            assert [k["kind"] for k in prog.kernels_info] == \
                ["attention", "merge"]
        out = prog.run(q, k, v, pos)  # positional: the kernel's order
        np.testing.assert_allclose(out, want, atol=1e-4)
        # Device inputs stay on the device: a DeviceArray comes back.
        rt = emulated_runtime
        dout = prog.run(kvattn.to_device(q, rt), kvattn.to_device(k, rt),
                        kvattn.to_device(v, rt), pos)
        assert isinstance(dout, kvattn.DeviceArray)
        np.testing.assert_allclose(dout.numpy(), want, atol=1e-4)
        # A host output given is filled in place.
        filled = np.zeros_like(q)
        assert prog.run(q, k, v, pos, out=filled) is filled
        np.testing.assert_allclose(filled, want, atol=1e-4)
        # Bound once, launched twice (both kernels of the split, with the
        # workspaces): the second launch writes the same into a cleared out.
        dq, dk, dv = (kvattn.to_device(a, rt) for a in (q, k, v))
        dout = kvattn.to_device(np.full_like(q, np.nan), rt)
        launch = prog.bound_launch(
            dict(B=2, Hq=2, Hkv=1, L=3, S=10),
            {"query": dq.ptr, "key": dk.ptr, "value": dv.ptr,
             "out": dout.ptr}, {"q_offset": pos.tolist()})
        launch()
        rt.synchronize()
        np.testing.assert_allclose(dout.numpy(), want, atol=1e-4)
        rt.rt.upload(dout.ptr, np.full_like(q, np.nan).tobytes())
        launch()
        rt.synchronize()
        np.testing.assert_allclose(dout.numpy(), want, atol=1e-4)
        with pytest.raises(kvattn.KVAttnValueError, match="unknown size 'N'"):
            prog.bound_launch(dict(N=1), {})
        prog.close()


def test_index_bitwidth_option(emulated_runtime):
    """64-bit index arithmetic (for tensors of 2^31 elements or more): the
    manifest records it and the kernels compute the same; other widths are
    refused by name."""
    q, k, v = distinct((2, 2, 3, 32), 4), distinct((2, 1, 10, 32), 5), \
        distinct((2, 1, 10, 32), 6)
    pos = np.array([7, 3], np.int32)
    want = attention_reference(q, k, v, q_offset=pos)
    prog = kvattn.compile(APPEND_F32, target="gpu", runtime=emulated_runtime,
                          index_bitwidth=64)
    assert prog.manifest["index_bits"] == 64
    np.testing.assert_allclose(prog.run(q, k, v, pos), want, atol=1e-4)
    prog.close()
    with pytest.raises(kvattn.KVAttnError,
                       match="options.index_bitwidth = 48 must be 32 or 64"):
        kvattn.compile(APPEND_F32, target="gpu", runtime=emulated_runtime,
                       index_bitwidth=48)


def test_device_validation_option(emulated_runtime):
    """kvattn_compile_options.device_validation through the binding: the
    status word in every kernel, a validation kernel for the metadata."""
    api = emulated_runtime.api
    for value, kinds in ((True, ["validate", "attention"]),
                         (False, ["attention"])):
        o = api.compile_options("gpu", dict(chip="sm_80", split_kv=1,
                                            device_validation=value))
        _, manifest = api.compile(APPEND_F32, o, kvattn.capi.IMAGE_DEVICE_IR)
        kernels = json.loads(manifest)["kernels"]
        assert sorted(k["kind"] for k in kernels) == sorted(kinds)
        names = {p["name"] for k in kernels for p in k["params"]}
        assert ("status" in names) == value
    with pytest.raises(kvattn.KVAttnError, match="device_validation must be "
                       "a bool"):
        api.compile_options("gpu", dict(device_validation=2))
    with pytest.raises(kvattn.KVAttnError, match="device_validation is for "
                       "plans"):
        kvattn.compile(APPEND_F32, target="gpu", runtime=emulated_runtime,
                       device_validation=True)


def test_emulated_plan_from_a_description(emulated_runtime):
    """kvattn.plan from a description with the cache write: each step
    appends the new token's K and V at pos (update_k/update_v into key/value
    in place), then attends over the caches; checked against NumPy."""
    rt = emulated_runtime
    desc = dict(dtype="f32", batch=2, query_len=1, key_len=16,
                num_query_heads=4, num_kv_heads=2, head_dim=16, causal=True,
                append=True)
    ir = kvattn.attention_ir(runtime=rt, **desc)
    assert ir.count("kvattn.append") == 2 and "kvattn.attention" in ir
    plan = kvattn.plan(desc, runtime=rt)
    assert sorted(plan.inputs) == sorted(
        ["query", "key", "value", "update_k", "update_v", "pos", "q_offset",
         "kv_len"])
    k_all, v_all = distinct((2, 2, 16, 16), 7), distinct((2, 2, 16, 16), 8)
    dk, dv = kvattn.to_device(k_all, rt), kvattn.to_device(v_all, rt)
    for step, pos in enumerate(([3, 9], [4, 10], [5, 11])):
        q = distinct((2, 4, 1, 16), 10 + step)
        kn, vn = distinct((2, 2, 1, 16), 20 + step), \
            distinct((2, 2, 1, 16), 30 + step)
        dout = rt.empty((2, 4, 1, 16), "f32")
        plan.run(query=kvattn.to_device(q, rt), key=dk, value=dv,
                 update_k=kvattn.to_device(kn, rt),
                 update_v=kvattn.to_device(vn, rt), out=dout, pos=pos,
                 q_offset=pos, kv_len=[p + 1 for p in pos])
        for b, p in enumerate(pos):
            k_all[b, :, p], v_all[b, :, p] = kn[b, :, 0], vn[b, :, 0]
        want = attention_reference(q, k_all, v_all, q_offset=pos,
                                   kv_len=[p + 1 for p in pos])
        np.testing.assert_allclose(dout.numpy(), want, atol=1e-4)
        np.testing.assert_array_equal(dk.numpy(), k_all)
        np.testing.assert_array_equal(dv.numpy(), v_all)
    # The host path's check of the append: the row past the capacity.
    with pytest.raises(kvattn.KVAttnError, match=r"pos\[1\] = 16 writes "
                       r"rows \[16, 17\) outside the cache capacity C = 16"):
        plan.run(query=kvattn.to_device(q, rt), key=dk, value=dv,
                 update_k=kvattn.to_device(kn, rt),
                 update_v=kvattn.to_device(vn, rt), out=dout, pos=[0, 16],
                 q_offset=[0, 15], kv_len=[1, 16])
    plan.close()
    with pytest.raises(kvattn.KVAttnError, match="query heads Hq = 4 must "
                       "be a multiple of kv heads Hkv = 3"):
        kvattn.attention_ir(runtime=rt, num_query_heads=4, num_kv_heads=3,
                            head_dim=16)
    with pytest.raises(kvattn.KVAttnError, match="unknown description "
                       "field 'heads'"):
        kvattn.attention_ir(runtime=rt, heads=4)


def test_emulated_plan_decode_steps(emulated_runtime):
    rt = emulated_runtime
    S = 40
    plan = kvattn.plan(DECODE, runtime=rt, max_sizes={"B": 4})
    assert plan.metadata_bytes == 2 * 16
    k_all, v_all = bf16((3, 1, S, 64), 7), bf16((3, 1, S, 64), 8)
    dk, dv = kvattn.to_device(k_all, rt, "bf16"), \
        kvattn.to_device(v_all, rt, "bf16")
    for step, lens in enumerate(([5, 17, 1], [6, 18, 2], [7, 19, 3])):
        q = bf16((3, 4, 1, 64), 10 + step)
        dq = kvattn.to_device(q, rt, "bf16")
        dout = rt.empty((3, 4, 1, 64), "bf16")
        pos = [n - 1 for n in lens]
        plan.run(query=dq, key=dk, value=dv, out=dout, q_offset=pos,
                 kv_len=lens)
        out = dout.numpy()  # waits for the stream
        want = attention_reference(
            *(kvattn.from_bf16(x) for x in (q, k_all, v_all)),
            q_offset=pos, kv_len=lens)
        np.testing.assert_allclose(kvattn.from_bf16(out), want, atol=3e-2,
                                   rtol=2e-2)
    # Validation happens before the launch, with the runtime's message.
    with pytest.raises(kvattn.KVAttnError, match=r"kv_len\[1\] = 41 is "
                       r"outside \[0, S = 40\]"):
        plan.run(query=dq, key=dk, value=dv, out=dout, q_offset=[0, 0, 0],
                 kv_len=[1, 41, 1])
    with pytest.raises(kvattn.KVAttnError, match="not a device tensor"):
        plan.run(query=q, key=dk, value=dv, out=dout, q_offset=pos,
                 kv_len=lens)
    with pytest.raises(kvattn.KVAttnError, match="pass out"):
        plan.run(query=dq, key=dk, value=dv, q_offset=pos, kv_len=lens)
    with pytest.raises(kvattn.KVAttnError, match="missing argument: kv_len"):
        plan.run(query=dq, key=dk, value=dv, out=dout, q_offset=pos)
    plan.close()


def test_gpu_argument_errors(emulated_runtime):
    prog = kvattn.compile(APPEND_F32, target="gpu", runtime=emulated_runtime,
                          tensor_cores=False)
    q, k, v = distinct((2, 2, 3, 32), 4), distinct((2, 1, 10, 32), 5), \
        distinct((2, 1, 10, 32), 6)
    with pytest.raises(kvattn.KVAttnError, match="'key' is f64, the kernel "
                       "takes f32"):
        prog.run(q, k.astype(np.float64), v, [0, 0])
    with pytest.raises(kvattn.KVAttnError, match=r"dim 1 must be 2"):
        prog.run(q[:, :1], k, v, [0, 0])
    with pytest.raises(kvattn.KVAttnError, match=r"q_offset\[1\] = -1"):
        prog.run(q, k, v, [0, -1])
    with pytest.raises(kvattn.KVAttnError, match="unknown argument 'mask'"):
        prog.run(q, k, v, [0, 0], mask=np.zeros(3))
    with pytest.raises(kvattn.KVAttnError, match="unknown option 'threads'"):
        kvattn.compile(APPEND_F32, target="gpu", runtime=emulated_runtime,
                       threads=2)
    with pytest.raises(kvattn.KVAttnError, match="older than sm_80"):
        kvattn.compile(APPEND_F32, target="gpu", runtime=emulated_runtime,
                       chip="sm_50")
    # A chip LLVM does not know is refused by name (sm_90a is the wgmma
    # lowering: test_sm90a_wgmma).
    with pytest.raises(kvattn.KVAttnError, match="not a chip LLVM"):
        kvattn.compile(APPEND_F32, target="gpu", runtime=emulated_runtime,
                       chip="sm_1000")
    prog.close()


def test_device_out_of_range():
    with pytest.raises(kvattn.KVAttnError, match="device 3 is out of range: "
                       "the CUDA driver .* has 1 device"):
        kvattn.Runtime(device=3, driver="emulated")


class FakeTensor:
    """What a framework's CUDA tensor exposes (fake pointers: the fake
    driver checks and records launches, it runs no kernel)."""

    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, False),
                                         "strides": None, "version": 3}


def test_plan_on_foreign_pointers(fake_runtime):
    ir = APPEND_F32
    plan = kvattn.plan(ir, runtime=fake_runtime, chip="sm_90",
                       tensor_cores=False)
    base = 0x7f0000000000
    tensors = dict(query=FakeTensor(base, (2, 2, 3, 32), "<f4"),
                   key=FakeTensor(base + 0x10000, (2, 1, 10, 32), "<f4"),
                   value=FakeTensor(base + 0x20000, (2, 1, 10, 32), "<f4"),
                   out=FakeTensor(base + 0x30000, (2, 2, 3, 32), "<f4"))
    for step in range(3):
        plan.run(q_offset=[7 - step, 3], **tensors)
    tensors["key"] = FakeTensor(base + 0x10004, (2, 1, 10, 32), "<f4")
    with pytest.raises(kvattn.KVAttnError, match="16-byte aligned|align"):
        plan.run(q_offset=[7, 3], **tensors)
    plan.close()


PAGED = """
func.func @decode(%q: tensor<?x4x1x64xbf16>,
                  %k: tensor<?x16x1x64xbf16>, %v: tensor<?x16x1x64xbf16>,
                  %pos: tensor<?xi32>, %len: tensor<?xi32>,
                  %table: tensor<?x?xi32>) -> tensor<?x4x1x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>)
      kv_len(%len : tensor<?xi32>) block_table(%table : tensor<?x?xi32>)
      causal : tensor<?x4x1x64xbf16>, tensor<?x16x1x64xbf16>,
      tensor<?x16x1x64xbf16> -> tensor<?x4x1x64xbf16>
  return %o : tensor<?x4x1x64xbf16>
}
"""


def test_emulated_plan_paged_batch_changes(emulated_runtime):
    """A paged decode plan: the page pool stays on the device, the batch
    grows from 2 to 3 sequences, kv_len and the block table change."""
    rt = emulated_runtime
    pages, page = 8, 16
    kp, vp = bf16((pages, page, 1, 64), 20), bf16((pages, page, 1, 64), 21)
    dk, dv = kvattn.to_device(kp, rt), kvattn.to_device(vp, rt)
    plan = kvattn.plan(PAGED, runtime=rt, max_sizes={"B": 4, "max_pages": 3})
    steps = (([[3, 0, -1], [5, -1, -1]], [20, 9]),
             ([[3, 0, -1], [5, -1, -1], [7, 1, 2]], [21, 10, 40]))
    for step, (table, lens) in enumerate(steps):
        B = len(lens)
        q = bf16((B, 4, 1, 64), 30 + step)
        dq, dout = kvattn.to_device(q, rt), rt.empty((B, 4, 1, 64), "bf16")
        pos = [n - 1 for n in lens]
        plan.run(query=dq, key=dk, value=dv, out=dout, q_offset=pos,
                 kv_len=lens, block_table=np.array(table, np.int32))
        out = kvattn.from_bf16(dout.numpy())
        # The logical cache of each sequence, gathered from its pages.
        k = np.zeros((B, 1, 3 * page, 64), np.float32)
        v = np.zeros_like(k)
        for b, row in enumerate(table):
            for slot, p in enumerate(row):
                if p >= 0:
                    k[b, 0, slot * page:(slot + 1) * page] = \
                        kvattn.from_bf16(kp[p, :, 0])
                    v[b, 0, slot * page:(slot + 1) * page] = \
                        kvattn.from_bf16(vp[p, :, 0])
        want = attention_reference(kvattn.from_bf16(q), k, v, q_offset=pos,
                                   kv_len=lens)
        np.testing.assert_allclose(out, want, atol=3e-2, rtol=2e-2)
    with pytest.raises(kvattn.KVAttnError, match="block_table"):
        plan.run(query=dq, key=dk, value=dv, out=dout, q_offset=pos,
                 kv_len=lens, block_table=np.array([[3, 3, -1], [5, -1, -1],
                                                    [7, 1, 2]], np.int32))
    plan.close()


def test_run_on_the_default_runtime():
    """kvattn.run(target="gpu") on default_runtime(): $KVATTN_LIBCUDA, else
    libcuda.so.1, else the emulated GPU found beside libkvattn_c.so."""
    try:
        rt = kvattn.default_runtime()
    except kvattn.KVAttnError as e:
        pytest.skip(f"no GPU and no emulated GPU: {e}")
    q, k, v = distinct((2, 2, 3, 32), 4), distinct((2, 1, 10, 32), 5), \
        distinct((2, 1, 10, 32), 6)
    pos = [7, 3]
    out = kvattn.run(APPEND_F32, query=q, key=k, value=v, q_offset=pos,
                     target="gpu", options=dict(tensor_cores=False))
    np.testing.assert_allclose(out, attention_reference(q, k, v, pos),
                               atol=1e-4)
    assert rt.chip.startswith("sm_")


def test_emulated_plan_device_metadata_status_and_graph(emulated_runtime):
    """The device path: metadata as device tensors, validated on the device
    (status word), no synchronisation, allocation or copy per run, and a
    captured run replayed."""
    rt = emulated_runtime
    pages, page = 8, 16
    kp, vp = bf16((pages, page, 1, 64), 40), bf16((pages, page, 1, 64), 41)
    dk, dv = kvattn.to_device(kp, rt), kvattn.to_device(vp, rt)
    plan = kvattn.plan(PAGED, runtime=rt, max_sizes={"B": 2, "max_pages": 3})
    assert plan.workspace_bytes >= 128  # the status word
    table = np.array([[3, 0, -1], [5, -1, -1]], np.int32)
    lens = np.array([20, 9], np.int32)
    pos = lens - 1
    q = bf16((2, 4, 1, 64), 42)
    dq, dout = kvattn.to_device(q, rt), rt.empty((2, 4, 1, 64), "bf16")
    meta = dict(q_offset=kvattn.to_device(pos, rt),
                kv_len=kvattn.to_device(lens, rt),
                block_table=kvattn.to_device(table, rt))
    plan.call_counts(reset=True)
    plan.run(query=dq, key=dk, value=dv, out=dout, **meta)
    counts = plan.call_counts()
    assert counts["synchronizations"] == 0 and counts["allocations"] == 0
    assert counts["synchronous_copies"] == 0 and counts["async_copies"] == 0
    assert counts["launches"] == 3  # validation (2 phases), attention
    assert plan.status() is None
    out = kvattn.from_bf16(dout.numpy())
    k = np.zeros((2, 1, 3 * page, 64), np.float32)
    v = np.zeros_like(k)
    for b, row in enumerate(table):
        for slot, p in enumerate(row):
            if p >= 0:
                k[b, 0, slot * page:(slot + 1) * page] = \
                    kvattn.from_bf16(kp[p, :, 0])
                v[b, 0, slot * page:(slot + 1) * page] = \
                    kvattn.from_bf16(vp[p, :, 0])
    want = attention_reference(kvattn.from_bf16(q), k, v, q_offset=pos,
                               kv_len=lens)
    np.testing.assert_allclose(out, want, atol=3e-2, rtol=2e-2)
    # A captured run replays with the same result.
    graph = plan.capture(query=dq, key=dk, value=dv, out=dout, **meta)
    dout.copy_from(np.full((2, 4, 1, 64), 0x7fc0, np.uint16))
    graph.launch()
    np.testing.assert_array_equal(kvattn.from_bf16(dout.numpy()), out)
    graph.close()
    # A bad table on the device: recorded, the output untouched.
    bad = kvattn.to_device(np.array([[3, 3, -1], [5, -1, -1]], np.int32), rt)
    sentinel = np.full((2, 4, 1, 64), 0x1234, np.uint16)
    dout.copy_from(sentinel)
    plan.run(query=dq, key=dk, value=dv, out=dout, q_offset=meta["q_offset"],
             kv_len=meta["kv_len"], block_table=bad)
    assert plan.status() == ("launch of 'decode_kvattn_0': block_table[0][1] "
                             "= 3: page 3 is already used at slot 0 of the "
                             "same sequence (batch 0)")
    np.testing.assert_array_equal(dout.numpy(), sentinel)
    with pytest.raises(kvattn.KVAttnError, match="already used"):
        plan.check()
    plan.clear_status()
    assert plan.status() is None
    with pytest.raises(kvattn.KVAttnError, match="not mixed"):
        plan.run(query=dq, key=dk, value=dv, out=dout, q_offset=pos,
                 kv_len=meta["kv_len"], block_table=bad)
    plan.close()


PREFILL_BF16 = """
func.func @prefill(%q: tensor<1x2x64x64xbf16>, %k: tensor<1x1x100x64xbf16>,
                   %v: tensor<1x1x100x64xbf16>, %pos: tensor<1xi32>)
    -> tensor<1x2x64x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x2x64x64xbf16>, tensor<1x1x100x64xbf16>,
        tensor<1x1x100x64xbf16> -> tensor<1x2x64x64xbf16>
  return %o : tensor<1x2x64x64xbf16>
}
"""


def test_sm90a_wgmma(emulated_runtime):
    # chip="sm_90a": the wgmma kernels (issue 32), run on the emulated
    # compute capability 9.0 device against the float64 reference.
    prog = kvattn.compile(PREFILL_BF16, target="gpu", runtime=emulated_runtime,
                          chip="sm_90a", pack_gqa=False)
    q, k, v = bf16((1, 2, 64, 64), 4), bf16((1, 1, 100, 64), 5), \
        bf16((1, 1, 100, 64), 6)
    out = prog.run(query=q, key=k, value=v, q_offset=[36])
    want = attention_reference(*(kvattn.from_bf16(x) for x in (q, k, v)),
                               q_offset=[36])
    np.testing.assert_allclose(kvattn.from_bf16(out), want, atol=3e-2,
                               rtol=2e-2)
    prog.close()
