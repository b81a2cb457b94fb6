"""Cache identity: the fingerprint of a cached KV prefix (the C API's
kvattn_cache_fingerprint; docs/runtime.md, "Cache identity").

A reused prefix (prefix caching, a shared system prompt, a block another
rank computed) is only right if it holds the same tokens at the same
positions, rotated the same way, in the same dtype: its fingerprint is a
SHA-256 over exactly that, in logical order, whatever the layout (contiguous
or paged, which pages, host or device)."""
import ctypes

from . import capi
from .capi import KVAttnError, KVAttnTypeError, KVAttnValueError, check_int
from ._device import device_view, host_view, is_device_tensor

__all__ = ["cache_fingerprint", "check_cache_prefix", "KVAttnCacheMismatch"]

_CACHE_DTYPES = ("f32", "f16", "bf16")


class KVAttnCacheMismatch(KVAttnError):
    """A cached prefix is not the prefix it was claimed to be."""


def _host_int64(what, values, length):
    import numpy as np

    from . import _asarray
    a = _asarray(what, values)
    if a.dtype.kind not in "iu":
        raise KVAttnTypeError(f"{what} must hold integers, got {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.int64).reshape(-1)
    if length is not None and a.size < length:
        raise KVAttnValueError(f"{what} has {a.size} entries; the prefix "
                               f"needs {length}")
    return a


def _describe(key, value, length, batch, block_table, positions, rope,
              runtime):
    """(prefix struct, key address, value address, runtime or None, keep)."""
    from . import _kvattn_dtype, _asarray, _runtime_arg, default_runtime
    from . import DeviceArray
    on_device = isinstance(key, DeviceArray) or is_device_tensor(key)
    if on_device != (isinstance(value, DeviceArray) or
                     is_device_tensor(value)):
        raise KVAttnTypeError("key and value must both be host arrays or "
                              "both device tensors")
    keep = []
    if on_device:
        if runtime is None and isinstance(key, DeviceArray):
            runtime = key.runtime
        rt = _runtime_arg(runtime) if runtime is not None else \
            default_runtime()
        views = [x.view() if isinstance(x, DeviceArray) else device_view(x)
                 for x in (key, value)]
        shapes = [v.shape for v in views]
        dtypes = [v.dtype for v in views]
        addresses = [v.ptr for v in views]
        keep += views
    else:
        import numpy as np
        shapes, dtypes, addresses = [], [], []
        for n, x in (("key", key), ("value", value)):
            if isinstance(x, np.ndarray) or not hasattr(x, "__dlpack__"):
                a = np.ascontiguousarray(_asarray(n, x))
                shapes.append(a.shape)
                dtypes.append(_kvattn_dtype(a))
                addresses.append(a.ctypes.data)
                keep.append(a)
            else:
                # A host tensor of another library (a torch CPU tensor, bf16
                # included), read in place through DLPack.
                v = host_view(x)
                shapes.append(v.shape)
                dtypes.append(v.dtype)
                addresses.append(v.ptr)
                keep.append(v)
        rt = None
    if dtypes[0] != dtypes[1] or dtypes[0] not in _CACHE_DTYPES:
        raise KVAttnTypeError(f"key and value must be f32, f16 or bf16 "
                              f"(bf16 as uint16 bits) of one dtype, got "
                              f"{dtypes[0]} and {dtypes[1]}")
    for name, shape in zip(("key", "value"), shapes):
        if len(shape) != 4:
            raise KVAttnValueError(
                f"{name} must be 4-D ([B, Hkv, S, D], or pages [num_pages, "
                f"page_size, Hkv, D] with block_table), got shape {shape}")
    p = capi.CachePrefix()
    api = rt.api if rt is not None else _library()
    api.lib.kvattn_cache_prefix_init(ctypes.byref(p))
    p.dtype = dtypes[0].encode()
    p.length = check_int("length", length, 0)
    p.batch = check_int("batch", batch, 0)
    (k0, k1, k2, k3), (v0, v1, v2, v3) = shapes
    if block_table is None:
        if (k0, k1, k2) != (v0, v1, v2):
            raise KVAttnValueError(f"key {shapes[0]} and value {shapes[1]} "
                                   "differ outside the head dim")
        p.batch_size, p.num_kv_heads, p.capacity = k0, k1, k2
    else:
        if (k0, k1, k2) != (v0, v1, v2):
            raise KVAttnValueError(f"key pages {shapes[0]} and value pages "
                                   f"{shapes[1]} differ outside the head dim")
        p.num_pages, p.page_size, p.num_kv_heads = k0, k1, k2
        import numpy as np
        from . import _asarray
        table = _asarray("block_table", block_table)
        if table.ndim != 2:
            raise KVAttnValueError(f"block_table must be [B, max_pages], got "
                                   f"shape {table.shape}")
        if not p.batch < table.shape[0]:
            raise KVAttnValueError(f"batch = {p.batch} is outside the "
                                   f"{table.shape[0]} rows of block_table")
        row = _host_int64("block_table", table[p.batch], None)
        keep.append(row)
        p.max_pages = row.size
        p.block_table_row = row.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
    p.head_dim, p.value_head_dim = k3, v3
    if positions is not None:
        pos = _host_int64("positions", positions, p.length)
        keep.append(pos)
        p.positions = pos.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
    if rope is not None:
        p.rope = capi.check_text("rope", rope)
    item = 4 if dtypes[0] == "f32" else 2
    p.key_bytes = k0 * k1 * k2 * k3 * item
    p.value_bytes = v0 * v1 * v2 * v3 * item
    return p, addresses, rt, api, keep


def _library():
    from . import library
    return library()


def _digest(key, value, length, batch, block_table, positions, rope,
            runtime):
    """(digest, the prefix struct, the library, what the struct points
    into: keep it alive while the struct is used)."""
    p, (k, v), rt, api, keep = _describe(key, value, length, batch,
                                         block_table, positions, rope,
                                         runtime)
    digest = (ctypes.c_uint8 * 32)()
    error = ctypes.c_void_p()
    if rt is None:
        rc = api.lib.kvattn_cache_fingerprint(
            ctypes.byref(p), ctypes.c_void_p(k), ctypes.c_void_p(v), digest,
            ctypes.byref(error))
        api.check(rc, error, "cache_fingerprint")
    else:
        rc = api.lib.kvattn_runtime_cache_fingerprint(
            rt.rt.handle, ctypes.byref(p), k, v, digest, ctypes.byref(error))
        api.check(rc, error, "cache_fingerprint")
    return bytes(digest), p, api, keep


def cache_fingerprint(key, value, length, *, batch=0, block_table=None,
                      positions=None, rope=None, runtime=None):
    """The fingerprint (64 hex digits) of sequence `batch`'s first `length`
    tokens. key/value: host arrays (NumPy, bf16 as uint16 bits; or host
    tensors of other libraries by DLPack, e.g. torch CPU tensors) or device
    tensors (kvattn.DeviceArray, DLPack / __cuda_array_interface__ CUDA
    tensors; read on `runtime`, default: the array's or the process's),
    contiguous [B, Hkv, S, D] or, with block_table [B, max_pages], pages
    [num_pages, page_size, Hkv, D]. positions: each token's logical
    position (default: 0 .. length-1). rope: the RoPE state the cached K was
    written in (a string; default: none)."""
    digest, _, _, _ = _digest(key, value, length, batch, block_table,
                              positions, rope, runtime)
    return digest.hex()


def check_cache_prefix(expected, key, value, length, **description):
    """Raises KVAttnCacheMismatch (naming the sequence, its length, dtype,
    RoPE state and both fingerprints) unless the prefix's fingerprint is
    `expected` (hex, as cache_fingerprint returns it, or 32 bytes).
    `description`: cache_fingerprint's keywords."""
    if isinstance(expected, str):
        try:
            want = bytes.fromhex(expected)
        except ValueError:
            want = b""
    elif isinstance(expected, (bytes, bytearray)):
        want = bytes(expected)
    else:
        raise KVAttnTypeError(f"expected must be a hex str or bytes, got "
                              f"{type(expected).__name__}")
    if len(want) != 32:
        raise KVAttnValueError(f"expected must be a SHA-256 digest (64 hex "
                               f"digits or 32 bytes), got {expected!r}")
    unknown = set(description) - {"batch", "block_table", "positions",
                                  "rope", "runtime"}
    if unknown:
        raise KVAttnTypeError(f"unknown keyword(s) {sorted(unknown)}")
    d = {"batch": 0, "block_table": None, "positions": None, "rope": None,
         "runtime": None}
    d.update(description)
    actual, p, api, keep = _digest(key, value, length, d["batch"],
                                   d["block_table"], d["positions"],
                                   d["rope"], d["runtime"])
    if actual == want:
        return
    a = (ctypes.c_uint8 * 32).from_buffer_copy(actual)
    e = (ctypes.c_uint8 * 32).from_buffer_copy(want)
    error = ctypes.c_void_p()
    rc = api.lib.kvattn_cache_check_fingerprint(ctypes.byref(p), a, e,
                                                ctypes.byref(error))
    del keep  # the struct's arrays, alive until here
    message = api._take(error.value) if rc else "fingerprints differ"
    raise KVAttnCacheMismatch(message)
