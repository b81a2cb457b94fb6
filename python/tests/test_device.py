"""Device tensors of other libraries: pointer, shape and dtype extraction
from __cuda_array_interface__ and DLPack, with fake producers (no GPU)."""

import ctypes

import numpy as np
import pytest

import kvattn
from kvattn import _device


class FakeCudaArray:
    def __init__(self, ptr, shape, typestr, strides=None, version=3,
                 mask=None):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (ptr, False),
            "strides": strides, "version": version}
        if mask is not None:
            self.__cuda_array_interface__["mask"] = mask


class FakeDLPack:
    """A DLPack producer whose capsule holds a DLManagedTensor made here;
    its deleter records the call."""

    deleted = 0

    def __init__(self, ptr, shape, code, bits, device=(2, 0), strides=None,
                 byte_offset=0, lanes=1):
        self.device = device
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = ((ctypes.c_int64 * len(strides))(*strides)
                        if strides else None)
        t = _device.DLManagedTensor()
        t.dl_tensor.data = ptr
        t.dl_tensor.device = _device.DLDevice(*device)
        t.dl_tensor.ndim = len(shape)
        t.dl_tensor.dtype = _device.DLDataType(code, bits, lanes)
        t.dl_tensor.shape = self.shape
        t.dl_tensor.strides = (ctypes.cast(self.strides,
                                           ctypes.POINTER(ctypes.c_int64))
                               if strides else None)
        t.dl_tensor.byte_offset = byte_offset

        def deleter(_):
            FakeDLPack.deleted += 1
        self._deleter = t._fields_[2][1](deleter)
        t.deleter = self._deleter
        self.managed = t
        self.streams = []

    def __dlpack_device__(self):
        return self.device

    _Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

    def __dlpack__(self, stream=None):
        """As producers do: the capsule's destructor calls the tensor's
        deleter unless a consumer renamed it "used_dltensor"."""
        self.streams.append(stream)
        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype = ctypes.c_char_p
        get_name.argtypes = [ctypes.c_void_p]

        def destructor(capsule):
            if get_name(capsule) == b"dltensor":
                self.managed.deleter(ctypes.pointer(self.managed))
        self._destructor = self._Destructor(destructor)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, self._Destructor]
        return new(ctypes.addressof(self.managed), b"dltensor",
                   self._destructor)


def test_cuda_array_interface():
    view = kvattn.device_view(FakeCudaArray(0x7f0000001000, (2, 4, 8, 64),
                                            "<f2"))
    assert view.ptr == 0x7f0000001000
    assert view.shape == (2, 4, 8, 64) and view.dtype == "f16"
    # Row-major strides given explicitly are fine; size-1 dims any stride.
    view = kvattn.device_view(FakeCudaArray(0x1000, (3, 1, 5), "<f4",
                                            strides=(20, 999, 4)))
    assert view.dtype == "f32" and view.shape == (3, 1, 5)
    assert kvattn.device_view(FakeCudaArray(0x10, (4,), "<i4")).dtype == "i32"


def test_cuda_array_interface_refusals():
    with pytest.raises(kvattn.KVAttnError, match="not row-major"):
        kvattn.device_view(FakeCudaArray(0x1000, (4, 8), "<f4",
                                         strides=(4, 16)))
    with pytest.raises(kvattn.KVAttnError, match="typestr '<u2'"):
        kvattn.device_view(FakeCudaArray(0x1000, (4,), "<u2"))
    with pytest.raises(kvattn.KVAttnError, match="version 1"):
        kvattn.device_view(FakeCudaArray(0x1000, (4,), "<f4", version=1))
    with pytest.raises(kvattn.KVAttnError, match="masked"):
        kvattn.device_view(FakeCudaArray(0x1000, (4,), "<f4", mask=object()))
    with pytest.raises(kvattn.KVAttnError, match="null data pointer"):
        kvattn.device_view(FakeCudaArray(0, (4,), "<f4"))


def test_dlpack_cuda_bf16():
    before = FakeDLPack.deleted
    fake = FakeDLPack(0x7f0000200000, (2, 1, 24, 64), code=4, bits=16,
                      device=(2, 0), byte_offset=256)
    view = kvattn.device_view(fake, stream=7)
    assert view.ptr == 0x7f0000200000 + 256
    assert view.shape == (2, 1, 24, 64) and view.dtype == "bf16"
    assert view.device == 0
    assert fake.streams == [7]  # the consumer's stream is passed on
    del view
    import gc
    gc.collect()
    # The capsule was not consumed: its destructor called the deleter.
    assert FakeDLPack.deleted == before + 1


def test_dlpack_refusals():
    with pytest.raises(kvattn.KVAttnError, match="CPU device"):
        kvattn.device_view(FakeDLPack(0x1000, (4,), 2, 32, device=(1, 0)))
    with pytest.raises(kvattn.KVAttnError, match="not row-major"):
        kvattn.device_view(FakeDLPack(0x1000, (4, 8), 2, 32,
                                      strides=(1, 4)))
    with pytest.raises(kvattn.KVAttnError, match="4 lanes"):
        kvattn.device_view(FakeDLPack(0x1000, (4,), 2, 32, lanes=4))
    with pytest.raises(kvattn.KVAttnError, match="code 2, 8 bits"):
        kvattn.device_view(FakeDLPack(0x1000, (4,), 2, 8))
    with pytest.raises(kvattn.KVAttnError, match="not a device tensor"):
        kvattn.device_view(object())


def test_dlpack_layout_against_numpy():
    """NumPy's own DLPack capsule (a real producer, on the CPU): the struct
    layout read here gives its data pointer, shape and strides."""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    if not hasattr(a, "__dlpack__"):
        pytest.skip("NumPy without DLPack")
    view = _device.from_dlpack_capsule(a.__dlpack__())
    assert view.ptr == a.ctypes.data
    assert view.shape == (2, 3, 4) and view.dtype == "f32"
    assert view.device_type == _device.DL_CPU
    t = a[:, :, ::2]
    with pytest.raises(kvattn.KVAttnError, match="not row-major"):
        _device.from_dlpack_capsule(t.__dlpack__())
    i = np.zeros((5,), np.int64)
    assert _device.from_dlpack_capsule(i.__dlpack__()).dtype == "i64"
