"""Device tensors from other libraries: __cuda_array_interface__ (version 2
and 3) and DLPack (__dlpack__ / __dlpack_device__), read with ctypes only.

device_view(obj) gives a DeviceView (address, shape, dtype, device ordinal)
of a dense row-major tensor; anything else (strided views, masked arrays,
vector dtypes, host memory) is a KVAttnError that says why.
"""

import ctypes

from .capi import (KVAttnTypeError, KVAttnValueError, UINT64_MAX,
                    INT64_MAX, check_int)

# DLPack (dlpack.h): device types and type codes.
DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host", 4: "OpenCL",
                    7: "Vulkan", 8: "Metal", 10: "ROCm", 13: "CUDA managed"}
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]

_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_is_valid.restype = ctypes.c_int
_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_get_pointer.restype = ctypes.c_void_p


class DeviceView:
    """A dense row-major device tensor: its address, shape, kvattn dtype name
    ("f32", "bf16", ...) and device ordinal; `owner` keeps what it came from
    alive."""

    def __init__(self, ptr, shape, dtype, device, owner=None, source=""):
        self.ptr = int(ptr)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.device = device
        self.owner = owner
        self.source = source

    def __repr__(self):
        return (f"DeviceView(0x{self.ptr:x}, {self.shape}, {self.dtype}, "
                f"device {self.device}, {self.source})")


# __cuda_array_interface__ typestr -> kvattn dtype. bf16 has no typestr of
# its own: such tensors come through DLPack.
_TYPESTR = {"<f4": "f32", "<f2": "f16", "<f8": "f64", "<i4": "i32",
            "<i8": "i64", "|b1": "i1", "|u1": "i1"}
_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i1": 1, "i32": 4,
             "i64": 8}


def _contiguous_strides(shape, itemsize):
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def _check_strides(what, shape, strides, unit):
    """`strides` (None: row-major) in units of `unit` bytes... compared with
    the row-major strides; dims of size 1 may have any stride."""
    if strides is None:
        return
    want = _contiguous_strides(shape, unit)
    for d, (got, exp) in enumerate(zip(strides, want)):
        if shape[d] != 1 and got != exp:
            raise KVAttnValueError(
                f"{what}: strides {tuple(strides)} are not row-major "
                f"{want} for shape {tuple(shape)}: pass a contiguous tensor "
                "(e.g. .contiguous())")


def from_cuda_array_interface(obj):
    what = f"{type(obj).__name__} (__cuda_array_interface__)"
    cai = obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise KVAttnTypeError(f"{what} is not a dict")
    version = check_int(f"{what} version", cai.get("version", 0))
    if version < 2:
        raise KVAttnValueError(f"{what}: version {version}, kvattn reads 2 "
                               "and later")
    for key in ("shape", "typestr", "data"):
        if key not in cai:
            raise KVAttnValueError(f"{what} has no '{key}'")
    if not isinstance(cai["shape"], (tuple, list)):
        raise KVAttnTypeError(f"{what}: shape must be a tuple, got "
                              f"{type(cai['shape']).__name__}")
    shape = tuple(check_int(f"{what} shape dim {i}", d, 0, INT64_MAX)
                  for i, d in enumerate(cai["shape"]))
    typestr = cai["typestr"]
    dtype = _TYPESTR.get(typestr) if isinstance(typestr, str) else None
    if dtype is None:
        raise KVAttnValueError(
            f"{what}: typestr '{typestr}' is not one kvattn takes "
            f"({', '.join(sorted(_TYPESTR))}; bf16 through DLPack)")
    if cai.get("mask") is not None:
        raise KVAttnValueError(f"{what}: masked arrays are not supported")
    data = cai["data"]
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise KVAttnTypeError(f"{what}: 'data' must be (pointer, read_only)")
    ptr, read_only = data
    strides = cai.get("strides")
    if strides is not None and (not isinstance(strides, (tuple, list)) or
                                len(strides) != len(shape)):
        raise KVAttnValueError(f"{what}: strides {strides!r} for shape "
                               f"{shape}")
    _check_strides(what, shape, None if strides is None else
                   tuple(check_int(f"{what} stride", s) for s in strides),
                   _ITEMSIZE[dtype])
    ptr = check_int(f"{what} data pointer", ptr or 0, 0, UINT64_MAX)
    if ptr == 0 and any(d for d in shape) and all(d for d in shape):
        raise KVAttnValueError(f"{what}: null data pointer")
    # The device: CUDA pointers carry it; the interface does not say. The
    # caller checks it where it knows (torch: obj.device.index).
    device = getattr(getattr(obj, "device", None), "index", None)
    view = DeviceView(ptr, shape, dtype, device, owner=obj,
                      source="__cuda_array_interface__")
    view.read_only = bool(read_only)
    return view


def _dl_dtype(what, dt):
    if dt.lanes != 1:
        raise KVAttnValueError(f"{what}: vector dtype ({dt.lanes} lanes)")
    key = (dt.code, dt.bits)
    table = {(_DL_FLOAT, 32): "f32", (_DL_FLOAT, 16): "f16",
             (_DL_FLOAT, 64): "f64", (_DL_BFLOAT, 16): "bf16",
             (_DL_INT, 32): "i32", (_DL_INT, 64): "i64",
             (_DL_BOOL, 8): "i1", (_DL_UINT, 8): "i1"}
    if key not in table:
        raise KVAttnValueError(f"{what}: DLPack dtype (code {dt.code}, "
                               f"{dt.bits} bits) is not one kvattn takes")
    return table[key]


def from_dlpack_capsule(capsule, what="DLPack capsule", owner=None):
    """The DeviceView of a "dltensor" capsule (not consumed: its destructor
    still calls the producer's deleter)."""
    if not _capsule_is_valid(capsule, b"dltensor"):
        raise KVAttnValueError(f"{what}: __dlpack__() did not return a "
                               "'dltensor' capsule (a used or versioned one)")
    address = _capsule_get_pointer(capsule, b"dltensor")
    if not address:
        raise KVAttnValueError(f"{what}: the capsule holds a null tensor")
    t = DLManagedTensor.from_address(address).dl_tensor
    if t.ndim < 0:
        raise KVAttnValueError(f"{what}: ndim {t.ndim}")
    shape = tuple(t.shape[i] for i in range(t.ndim)) if t.ndim else ()
    dtype = _dl_dtype(what, t.dtype)
    strides = (tuple(t.strides[i] for i in range(t.ndim))
               if t.ndim and t.strides else None)
    # DLPack strides count elements, not bytes.
    _check_strides(what, shape, strides, 1)
    ptr = (t.data or 0) + t.byte_offset
    view = DeviceView(ptr, shape, dtype, t.device.device_id,
                      owner=(owner, capsule), source="DLPack")
    view.device_type = t.device.device_type
    return view


def _export(obj, what, stream=None):
    """obj.__dlpack__(stream=...) (or without the stream for a producer
    that does not take one); a producer's refusal (torch: a tensor that
    requires grad) is a KVAttnValueError naming it."""
    try:
        try:
            return (obj.__dlpack__(stream=stream) if stream is not None
                    else obj.__dlpack__())
        except TypeError:
            if stream is None:
                raise
            return obj.__dlpack__()
    except Exception as e:  # noqa: BLE001
        raise KVAttnValueError(f"{what}: __dlpack__() failed "
                               f"({type(e).__name__}: {e})") from None


def host_view(obj):
    """The DeviceView (device None) of a dense row-major tensor in host
    memory, by DLPack (a CPU device), e.g. a torch CPU tensor of any dtype
    kvattn takes, bf16 included: its own memory, no copy."""
    what = f"{type(obj).__name__} (DLPack)"
    device_type, _ = obj.__dlpack_device__()
    if device_type not in (DL_CPU, DL_CUDA_HOST):
        name = _DL_DEVICE_NAMES.get(device_type, f"type {device_type}")
        raise KVAttnValueError(f"{what} is on a {name} device, not the "
                               "host")
    return from_dlpack_capsule(_export(obj, what), what, owner=obj)


def from_dlpack(obj, stream=None):
    what = f"{type(obj).__name__} (DLPack)"
    device_type, device_id = obj.__dlpack_device__()
    if device_type not in (DL_CUDA, DL_CUDA_MANAGED):
        name = _DL_DEVICE_NAMES.get(device_type, f"type {device_type}")
        raise KVAttnValueError(
            f"{what} is on a {name} device (DLPack device type "
            f"{device_type}), not a CUDA one: pass host data as a NumPy "
            "array")
    capsule = _export(obj, what, stream)
    view = from_dlpack_capsule(capsule, what, owner=obj)
    if view.device_type != device_type or view.device != device_id:
        raise KVAttnValueError(f"{what}: __dlpack_device__ says "
                               f"({device_type}, {device_id}), the tensor "
                               f"({view.device_type}, {view.device})")
    return view


def _has_cai(obj):
    """Whether obj has a __cuda_array_interface__; a producer that raises
    reading it (torch: a tensor that requires grad) is refused by name."""
    try:
        return hasattr(obj, "__cuda_array_interface__")
    except Exception as e:  # noqa: BLE001
        raise KVAttnValueError(
            f"{type(obj).__name__}: reading __cuda_array_interface__ failed "
            f"({type(e).__name__}: {e})") from None


def is_device_tensor(obj):
    return (isinstance(obj, DeviceView) or
            (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")
             and _dlpack_is_cuda(obj)) or _has_cai(obj) or
            (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")
             and _dlpack_is_cuda(obj)))


def _dlpack_is_cuda(obj):
    try:
        return obj.__dlpack_device__()[0] in (DL_CUDA, DL_CUDA_MANAGED)
    except Exception:  # noqa: BLE001 (a broken producer is not a device)
        return False


def device_view(obj, stream=None):
    """The DeviceView of a device tensor: a DeviceView, a kvattn.DeviceArray,
    or an object with __cuda_array_interface__ or DLPack (CUDA device)."""
    if isinstance(obj, DeviceView):
        return obj
    # DLPack first: it names bf16 (recent torch reports bf16 as '<V2' in
    # __cuda_array_interface__, older torch raises KeyError) and the device.
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return from_dlpack(obj, stream)
    if _has_cai(obj):
        return from_cuda_array_interface(obj)
    raise KVAttnTypeError(
        f"{type(obj).__name__} is not a device tensor (no "
        "__cuda_array_interface__, no __dlpack__/__dlpack_device__)")
