"""kvattn from Python: compile kvattn IR for the CPU or a GPU and run it on
NumPy arrays, or plan a GPU attention once and launch it every step of a
serving loop. ctypes over libkvattn_c.so (the C API, include/kvattn-c/
KVAttn.h); docs/python.md.

    import kvattn, numpy as np
    prog = kvattn.compile(ir, target="cpu", threads=1)
    out = prog.run(q, k, v, np.array([5, 2], np.int32))

    gpu = kvattn.compile(ir, target="gpu")          # a GPU or the emulator
    out = gpu.run(query=q, key=k, value=v, q_offset=[5, 2])

    plan = kvattn.plan(decode_ir, max_sizes={"B": 8})
    plan.run(query=dq, key=dk, value=dv, out=dout, kv_len=lens)  # no sync

NumPy is needed for compile/run (not to import the package: kvattn.capi, the
plain ctypes binding, needs nothing). bf16 host data is np.uint16 holding the
bit patterns (to_bf16 / from_bf16).
"""

__version__ = "0.33.0"

import json
import operator
import os
import warnings
from typing import NamedTuple

from . import capi
from .capi import (KVAttnError, KVAttnTypeError, KVAttnValueError,
                    check_int, check_text)
from ._device import DeviceView, device_view, is_device_tensor
from .drift import drift
from . import tree
from .fingerprint import (KVAttnCacheMismatch, cache_fingerprint,
                          check_cache_prefix)

__all__ = ["__version__", "KVAttnError", "KVAttnTypeError", "KVAttnValueError",
           "KVAttnWarning", "Diagnostic", "compile",
           "run", "plan", "Runtime", "DeviceArray",
           "CpuProgram", "GpuProgram", "Plan", "to_device", "to_bf16",
           "from_bf16", "to_fp8", "from_fp8", "library", "default_runtime",
           "device_view",
           "DeviceView", "capi", "attention_ir", "drift",
           "cache_fingerprint", "check_cache_prefix", "KVAttnCacheMismatch"]

_library = None
_runtime = None

# The metadata parameters of the kernel ABI (docs/kernel-abi.md): host
# integers that the runtime validates and uploads; every other parameter is
# a device buffer. RoPE's record (k_rope_pos) is an attention's metadata
# (checked, never read by the kernel) and an append's output (a plan's
# device buffer, written in place).
METADATA = ("q_offset", "k_offset", "q_pos", "k_pos", "kv_len", "key_valid",
            "block_table", "q_start", "pos", "k_start", "cache_batch_idx",
            "tree_parents", "k_rope_pos", "prefix_pages", "prefix_len")
SIZE_NAMES = ("B", "Hq", "Hkv", "L", "S", "num_pages", "page_size",
              "max_pages", "cache_rows", "P", "prefix_num_pages",
              "prefix_page_size", "prefix_max_pages")
_WORKSPACES = ("out_parts", "lse_parts")
# The size each dim of a parameter is (docs/kernel-abi.md), for the dims a
# manifest gives as numbers (static shapes): the kernel still takes the
# sizes as scalars, equal to them.
_ROLES = {"query": ("B", "Hq", "L", None), "key": ("B", "Hkv", "S", None),
          "value": ("B", "Hkv", "S", None), "out": ("B", "Hq", "L", None),
          "lse": ("B", "Hq", "L"), "q_offset": ("B",), "k_offset": ("B",),
          "kv_len": ("B",), "q_pos": ("B", "L"), "k_pos": ("B", "S"),
          "key_valid": ("B", "S"), "k_rope_pos": ("B", "S"),
          # RoPE's tables [P, R/2]: static dims.
          "rotary_cos": (None, None), "rotary_sin": (None, None),
          "block_table": ("B", "max_pages"),
          "tree_parents": ("L",),
          "mask": (None, None, "L", "S"),
          "out_parts": (None, "B", "Hq", "L", None),
          "lse_parts": (None, "B", "Hq", "L"),
          # A cascade's shared prefix (its prefix kernel's P keys).
          "prefix_key": (None, "Hkv", "P", None),
          "prefix_value": (None, "Hkv", "P", None),
          # A paged prefix's one-sequence table and its length.
          "prefix_pages": ("prefix_max_pages",), "prefix_len": (None,)}
# A cascade's paged prefix (prefix_pages): its pool.
_PAGED_PREFIX_ROLES = {
    "prefix_key": ("prefix_num_pages", "prefix_page_size", "Hkv", None),
    "prefix_value": ("prefix_num_pages", "prefix_page_size", "Hkv", None)}
_PAGED_ROLES = {"key": ("num_pages", "page_size", "Hkv", None),
                "value": ("num_pages", "page_size", "Hkv", None)}
# Ragged keys (k_start): K/V are one packed buffer [1, Hkv, S, D]; a
# batch-to-cache map (cache_batch_idx): [cache_rows, Hkv, S, D].
_PACKED_KEY_ROLES = {"key": (None, "Hkv", "S", None),
                     "value": (None, "Hkv", "S", None)}
# A ragged batch (q_start): query/out/lse pack the rows, [1, Hq, T, D].
_VARLEN_ROLES = {"query": (None, "Hq", "L", None),
                 "out": (None, "Hq", "L", None), "lse": (None, "Hq", "L")}
_CACHE_ROW_ROLES = {"key": ("cache_rows", "Hkv", "S", None),
                    "value": ("cache_rows", "Hkv", "S", None)}


class KVAttnWarning(UserWarning):
    """A warning of the compiler (the upper-left append lint of
    -kvattn-resolve-cached-append), issued with warnings.warn when a program
    is compiled; the program's `diagnostics` keep it too."""


class Diagnostic(NamedTuple):
    """What the compiler said while compiling a program (C API:
    kvattn_diagnostic; the GPU's in the manifest's "diagnostics")."""
    severity: str   # "warning", "remark" or "note" ("error" fails compile)
    location: str   # "input:12:8": line and column of the IR text
    message: str

    def __str__(self):
        return f"{self.location}: {self.severity}: {self.message}"


def _diagnostics(entries):
    """Diagnostics from (severity, location, message) triples or the
    manifest's dicts; each warning is also issued as a KVAttnWarning."""
    out = []
    for e in entries:
        d = (Diagnostic(e["severity"], e["location"], e["message"])
             if isinstance(e, dict) else Diagnostic(*e))
        out.append(d)
        if d.severity == "warning":
            warnings.warn(str(d), KVAttnWarning, stacklevel=4)
    return out


def _np():
    try:
        import numpy
    except ImportError:
        raise KVAttnError("kvattn.compile/run need NumPy (Debian: "
                          "python3-numpy)") from None
    return numpy


def library():
    """The process's libkvattn_c.so (kvattn.capi.library_candidates)."""
    global _library
    if _library is None:
        _library = capi.Library()
    return _library


# --- dtypes ------------------------------------------------------------------

def _numpy_dtype(dtype):
    np = _np()
    return {"f32": np.float32, "f16": np.float16, "f64": np.float64,
            "bf16": np.uint16, "i1": np.bool_, "i32": np.int32,
            "i64": np.int64, "f8E4M3FN": np.uint8, "f8E5M2": np.uint8}[dtype]


def _kvattn_dtype(array, want=None):
    """The kvattn dtype of a NumPy array (uint16 is bf16 bit patterns; uint8
    the codes of an FP8 type when `want` is one)."""
    np = _np()
    if want in capi.FP8_DTYPES and array.dtype == np.uint8:
        return want
    table = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
             np.dtype(np.float64): "f64", np.dtype(np.bool_): "i1",
             np.dtype(np.int32): "i32", np.dtype(np.int64): "i64",
             np.dtype(np.uint16): "bf16"}
    return table.get(array.dtype)


def _asarray(what, value):
    """np.asarray(value), its failures (ragged lists, objects) a
    KVAttnTypeError."""
    np = _np()
    try:
        return np.asarray(value)
    except (TypeError, ValueError, OverflowError) as e:
        raise KVAttnTypeError(f"{what}: cannot convert {type(value).__name__}"
                              f" to an array ({e})") from None


# --- FP8 codes (KV caches) ---------------------------------------------------

def _fp8_spec(fmt):
    if fmt not in capi.FP8_DTYPES:
        raise KVAttnValueError(f"FP8 format must be f8E4M3FN or f8E5M2, got "
                               f"{fmt!r}")
    # mantissa bits, bias, largest finite code (sign clear), infinities
    return (3, 7, 0x7E, False) if fmt == "f8E4M3FN" else (2, 15, 0x7B, True)


def _fp8_table(fmt):
    """The float32 value of each of the 256 codes (exact)."""
    np = _np()
    m, bias, _, has_inf = _fp8_spec(fmt)
    codes = np.arange(256)
    mag = codes & 0x7F
    e, f = mag >> m, mag & ((1 << m) - 1)
    v = np.where(e == 0, f * 2.0 ** (1 - bias - m),
                 (f + (1 << m)) * 2.0 ** (e.astype(np.float64) - bias - m))
    if has_inf:
        v = np.where(e == 31, np.where(f == 0, np.inf, np.nan), v)
    else:
        v = np.where(mag == 0x7F, np.nan, v)
    return np.where(codes & 0x80, -v, v).astype(np.float32)


def from_fp8(codes, fmt):
    """np.uint8 FP8 codes (f8E4M3FN or f8E5M2) -> float32, exactly."""
    np = _np()
    a = _asarray("from_fp8", codes)
    if a.dtype != np.uint8:
        a = _convert("from_fp8", a, fmt)
    return _fp8_table(fmt)[a]


def to_fp8(values, fmt):
    """float values -> np.uint8 FP8 codes as kvattn quantises
    (docs/semantics.md, "FP8 KV caches"): round to nearest even, saturate to
    the largest finite value (infinities too), NaN -> 0x7F."""
    np = _np()
    a = _asarray("to_fp8", values)
    if a.dtype.kind not in "iuf":
        raise KVAttnTypeError(f"to_fp8 takes numbers, got {a.dtype}")
    _, _, top, _ = _fp8_spec(fmt)
    x = np.asarray(a, dtype=np.float32).astype(np.float64)
    grid = _fp8_table(fmt)[:top + 1].astype(np.float64)  # codes 0 .. top
    mag = np.minimum(np.abs(np.nan_to_num(x, nan=0.0, posinf=np.inf)),
                     grid[-1])
    hi = np.clip(np.searchsorted(grid, mag, side="left"), 0, top)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = mag - grid[lo], grid[hi] - mag
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi,
                                            np.where(lo % 2 == 0, lo, hi)))
    code = pick | np.where(np.signbit(x), 0x80, 0)
    code = np.where(np.isnan(x), 0x7F, code)
    return code.astype(np.uint8)


def to_bf16(values):
    """float array -> np.uint16 bf16 bit patterns (round to nearest even)."""
    np = _np()
    a = _asarray("to_bf16", values)
    if a.dtype.kind not in "iuf":
        raise KVAttnTypeError(f"to_bf16 takes numbers, got {a.dtype}")
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def from_bf16(bits):
    """np.uint16 bf16 bit patterns -> float32."""
    np = _np()
    a = _asarray("from_bf16", bits)
    if a.dtype != np.uint16:
        a = _convert("from_bf16", a, "bf16")
    wide = np.left_shift(a.astype(np.uint32), np.uint32(16)).reshape(-1)
    return wide.view(np.float32).reshape(a.shape)


_INT_RANGE = {"i1": (0, 1), "i32": (-(1 << 31), (1 << 31) - 1),
              "i64": (capi.INT64_MIN, capi.INT64_MAX), "bf16": (0, 0xFFFF),
              "f8E4M3FN": (0, 0xFF), "f8E5M2": (0, 0xFF)}


def _convert(what, a, dtype):
    """The array `a` (from a list or a scalar) converted to kvattn `dtype`
    only where no value changes: integers in the type's range for an
    integer type (and for bf16, whose host data is uint16 bit patterns), no
    float truncated to an integer, no finite value overflowing a float
    type."""
    np = _np()
    kind = a.dtype.kind
    if kind == "O":  # NumPy keeps Python ints beyond int64 as objects
        flat = [check_int(f"{what}[{i}]", x) for i, x in
                enumerate(a.ravel())]
        a = np.array(flat, dtype=np.int64).reshape(a.shape)
        kind = "i"
    if dtype in _INT_RANGE:
        if kind not in "iub" and a.size:
            hint = (" (bf16 data: uint16 bit patterns, kvattn.to_bf16)"
                    if dtype == "bf16" else "")
            raise KVAttnTypeError(
                f"{what}: {a.dtype} values for a {dtype} argument would be "
                f"truncated; pass integers{hint}")
        lo, hi = _INT_RANGE[dtype]
        if a.size and (int(a.min()) < lo or int(a.max()) > hi):
            bad = int(a.min()) if int(a.min()) < lo else int(a.max())
            raise KVAttnValueError(f"{what}: {bad} is outside the range of "
                                   f"{dtype} [{lo}, {hi}]")
    elif kind not in "iubf" and a.size:
        raise KVAttnTypeError(f"{what}: {a.dtype} values for a {dtype} "
                              "argument")
    out = a.astype(_numpy_dtype(dtype))
    if dtype not in _INT_RANGE and kind == "f" and a.size and \
            np.any(np.isfinite(a) & ~np.isfinite(out)):
        raise KVAttnValueError(f"{what}: a finite value overflows {dtype}")
    return out


def _host_array(what, value, dtype):
    """`value` as a contiguous NumPy array: lists and scalars are converted
    to `dtype` where no value changes (_convert); arrays keep theirs (a
    mismatch is reported by the check that follows, not converted)."""
    np = _np()
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value)
    if is_device_tensor(value):
        raise KVAttnTypeError(f"{what} is a device tensor; this call takes "
                              "host (NumPy) data")
    return np.ascontiguousarray(_convert(what, _asarray(what, value), dtype))


# --- the CPU path --------------------------------------------------------------

class CpuProgram:
    """A function of kvattn IR compiled for the host (kvattn_cpu_compile)."""

    def __init__(self, ir, entry=None, **options):
        import ctypes
        self._ctypes = ctypes
        self.handle = ctypes.c_void_p()
        self.api = library()
        ir_text = check_text("ir", ir)
        entry_text = check_text("entry", entry, optional=True)
        o = self.api.compile_options("cpu", options)
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_cpu_compile(
            ir_text, entry_text or None, ctypes.byref(o),
            ctypes.byref(self.handle), ctypes.byref(error))
        self.api.check(rc, error, "kvattn_cpu_compile")
        lib = self.api.lib
        self.arguments = [self._type(0, i) for i in
                          range(lib.kvattn_cpu_program_num_arguments(
                              self.handle))]
        self.results = [self._type(1, i) for i in
                        range(lib.kvattn_cpu_program_num_results(self.handle))]
        # The compiler's warnings and remarks (each warning also issued
        # with warnings.warn as a KVAttnWarning).
        self.diagnostics = _diagnostics(
            self.api.cpu_program_diagnostics(self.handle))

    def _type(self, is_result, index):
        ctypes = self._ctypes
        dtype, rank = ctypes.c_int(), ctypes.c_size_t()
        shape = (ctypes.c_int64 * 16)()
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_cpu_program_type(
            self.handle, is_result, index, ctypes.byref(dtype),
            ctypes.byref(rank), shape, 16, ctypes.byref(error))
        self.api.check(rc, error, "kvattn_cpu_program_type")
        return (capi.DTYPES[dtype.value],
                tuple(None if d < 0 else d for d in shape[:rank.value]))

    def run(self, *inputs):
        """Runs the function on host arrays, one per argument in order;
        returns its result (a tuple for several)."""
        np = _np()
        ctypes = self._ctypes
        if not self.handle:
            raise KVAttnError("kvattn_cpu_run: the program is closed")
        arrays, tensors, keep = [], [], []
        for i, value in enumerate(inputs):
            want = (self.arguments[i][0] if i < len(self.arguments) else "f32")
            a = _host_array(f"input {i}", value, want)
            dtype = _kvattn_dtype(a, want)  # FP8: uint8 codes (to_fp8)
            if dtype is None:
                raise KVAttnTypeError(
                    f"kvattn_cpu_run: input {i} has NumPy dtype {a.dtype}, "
                    "which kvattn does not take (f32, f16, f64, bool, int32, "
                    "int64; bf16 as uint16 bit patterns)")
            if want == "bf16" and dtype != "bf16" and a.dtype.kind == "f":
                raise KVAttnTypeError(
                    f"kvattn_cpu_run: input {i} is {a.dtype}, argument {i} "
                    "is bf16: pass uint16 bit patterns (kvattn.to_bf16)")
            shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
            arrays.append(a)
            keep.append(shape)
            tensors.append(capi.HostTensor(a.ctypes.data, capi.DTYPE_CODE[
                dtype], a.ndim, shape))
        array = (capi.HostTensor * max(len(tensors), 1))(*tensors)
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_cpu_run(self.handle, array, len(tensors),
                                         None, 0, ctypes.byref(error))
        self.api.check(rc, error, "kvattn_cpu_run")
        results = []
        for i in range(len(self.results)):
            t = capi.HostTensor()
            rc = self.api.lib.kvattn_cpu_program_result(
                self.handle, i, ctypes.byref(t), ctypes.byref(error))
            self.api.check(rc, error, "kvattn_cpu_program_result")
            dtype = capi.DTYPES[t.dtype]
            shape = tuple(t.shape[d] for d in range(t.rank))
            n = int(np.prod(shape, dtype=np.int64)) if shape else 1
            nbytes = n * capi.DTYPE_SIZE[dtype]
            raw = ctypes.string_at(t.data, nbytes) if nbytes else b""
            results.append(np.frombuffer(raw, dtype=_numpy_dtype(dtype))
                           .reshape(shape).copy())
        return results[0] if len(results) == 1 else tuple(results)

    __call__ = run

    def close(self):
        if getattr(self, "handle", None):
            self.api.lib.kvattn_cpu_program_destroy(self.handle)
            self.handle = self._ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass


# --- the runtime and device arrays ---------------------------------------------

def _is_emulator(path):
    import ctypes
    try:
        return hasattr(ctypes.CDLL(path), "kvattn_emu_configure")
    except OSError:
        return False


def _resolve_driver(api, driver):
    """(driver library path or None for libcuda.so.1, emulated?)."""
    if driver is not None and not isinstance(driver, str):
        raise KVAttnTypeError(f"driver must be 'auto', 'cuda', 'emulated' or "
                              f"a library path, got {type(driver).__name__}")
    if driver in (None, "auto"):
        env = os.environ.get("KVATTN_LIBCUDA")
        if env:
            return env, _is_emulator(env)
        import ctypes
        try:
            ctypes.CDLL("libcuda.so.1")
            return None, False
        except OSError:
            pass
        emu = api.emulated_driver_path()
        if os.path.exists(emu):
            return emu, True
        raise KVAttnError(
            "no GPU driver: libcuda.so.1 cannot be loaded and the emulated "
            f"GPU is not at {emu} (set KVATTN_LIBCUDA or KVATTN_EMU_DRIVER)")
    if driver == "cuda":
        return None, False
    if driver == "emulated":
        emu = api.emulated_driver_path()
        return emu, True
    check_text("driver", driver)
    return driver, _is_emulator(driver)


class Runtime:
    """A GPU: the driver (a real one, or the emulated GPU), a device, its
    primary context and a stream.

    driver: "auto" ($KVATTN_LIBCUDA, else libcuda.so.1, else the emulated
    GPU), "cuda", "emulated", or a driver library path. device: the CUDA
    ordinal (out of range: a KVAttnError naming the device count)."""

    def __init__(self, device=0, driver="auto"):
        self.api = library()
        device = check_int("device", device, 0, capi.INT32_MAX)
        path, self.emulated = _resolve_driver(self.api, driver)
        self.driver = path or "libcuda.so.1"
        self.rt = capi.Runtime(self.api, device=device, driver_library=path)
        self.device, cc, self.multiprocessor_count = self.rt.device_info()
        self.compute_capability = cc
        # The chip compiled for when none is named (Runtime::defaultChip):
        # sm_90a on a 9.0 GPU (the wgmma kernels), else (and on the emulated
        # GPU) the device's own.
        self.chip = f"sm_{cc}" + ("a" if cc == 90 and not self.emulated
                                  else "")
        self.stream = None

    @property
    def image_kind(self):
        return capi.IMAGE_DEVICE_IR if self.emulated else capi.IMAGE_PTX

    def set_stream(self, stream):
        """Launch on a caller's CUstream (an int handle, or an object with
        .cuda_stream such as torch.cuda.Stream); None: the runtime's own."""
        if stream is None:
            self.rt.use_own_stream()
            self.stream = None
            return
        handle = check_int("stream", getattr(stream, "cuda_stream", stream),
                           0, capi.UINT64_MAX)
        self.rt.set_stream(handle)
        self.stream = handle

    def synchronize(self):
        self.rt.synchronize()

    def empty(self, shape, dtype):
        return DeviceArray(self, shape, dtype)

    def close(self):
        self.rt.close()


def default_runtime():
    """The process's Runtime(), created on first use."""
    global _runtime
    if _runtime is None:
        _runtime = Runtime()
    return _runtime


class DeviceArray:
    """Device memory allocated through a kvattn Runtime, dense row-major,
    freed with the object (or free()). It exposes __cuda_array_interface__
    (not for bf16, which has no typestr) and DeviceView (device_view)."""

    _TYPESTR = {"f32": "<f4", "f16": "<f2", "f64": "<f8", "i1": "|b1",
                "i32": "<i4", "i64": "<i8"}

    def __init__(self, runtime, shape, dtype):
        self.ptr = 0
        if not isinstance(runtime, Runtime):
            raise KVAttnTypeError(f"DeviceArray needs a kvattn.Runtime, got "
                                  f"{type(runtime).__name__}")
        if not isinstance(dtype, str) or dtype not in capi.DTYPE_SIZE:
            raise KVAttnValueError(f"unknown dtype {dtype!r} (one of "
                                   f"{', '.join(capi.DTYPES)})")
        self.runtime = runtime
        self.shape = _shape_of("DeviceArray", shape)
        self.dtype = dtype
        n = 1
        for d in self.shape:
            n *= d
        self.nbytes = n * capi.DTYPE_SIZE[dtype]
        # Checked here: a size_t would wrap (2**31 x 2**31 x 4 f32 is 2**66
        # bytes, 0 after the wrap).
        if self.nbytes > capi.INT64_MAX:
            raise KVAttnValueError(
                f"DeviceArray {self.shape} {dtype} would be {self.nbytes} "
                f"bytes, more than the {capi.INT64_MAX} a device allocation "
                "can be")
        self.ptr = runtime.rt.alloc(max(self.nbytes, 16))

    def view(self):
        return DeviceView(self.ptr, self.shape, self.dtype,
                          self.runtime.device, owner=self,
                          source="kvattn.DeviceArray")

    @property
    def __cuda_array_interface__(self):
        if self.dtype not in self._TYPESTR:
            raise AttributeError("bf16 has no __cuda_array_interface__ "
                                 "typestr")
        return {"shape": self.shape, "typestr": self._TYPESTR[self.dtype],
                "data": (self.ptr, False), "strides": None, "version": 3}

    def copy_from(self, array):
        """Uploads a host array of this shape and dtype (synchronous)."""
        np = _np()
        a = np.ascontiguousarray(_asarray("copy_from", array))
        got = _kvattn_dtype(a, self.dtype)
        if tuple(a.shape) != self.shape or got != self.dtype:
            raise KVAttnValueError(
                f"copy_from: the array is {a.shape} {got or a.dtype}, the "
                f"device array {self.shape} {self.dtype}")
        if self.nbytes:
            self.runtime.rt.upload_from(self.ptr, a.ctypes.data, self.nbytes)
        return self

    def numpy(self):
        """Waits for the stream, then copies to a new host array."""
        np = _np()
        self.runtime.rt.synchronize()
        out = np.empty(self.shape, dtype=_numpy_dtype(self.dtype))
        if self.nbytes:
            self.runtime.rt.download_to(out.ctypes.data, self.ptr,
                                        self.nbytes)
        return out

    def free(self):
        if self.ptr and self.runtime.rt.handle:
            self.runtime.rt.free(self.ptr)
        self.ptr = 0

    def __del__(self):
        try:
            self.free()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass

    def __repr__(self):
        return f"DeviceArray({self.shape}, {self.dtype}, 0x{self.ptr:x})"


def _shape_of(what, shape):
    """A shape: an int or a sequence of ints >= 0 (not floats: 2.5 is not
    truncated to 2)."""
    if isinstance(shape, (str, bytes, bool)):
        raise KVAttnTypeError(f"{what} shape must be a tuple of ints, got "
                              f"{type(shape).__name__}")
    try:
        shape = (operator.index(shape),)  # an int: one dim
    except TypeError:
        try:
            shape = tuple(shape)
        except TypeError:
            raise KVAttnTypeError(f"{what} shape must be a tuple of ints, "
                                  f"got {type(shape).__name__}") from None
    return tuple(check_int(f"{what} shape dim {i}", d, 0, capi.INT64_MAX)
                 for i, d in enumerate(shape))


def _runtime_arg(runtime):
    if runtime is None:
        return default_runtime()
    if not isinstance(runtime, Runtime):
        raise KVAttnTypeError(f"runtime must be a kvattn.Runtime, got "
                              f"{type(runtime).__name__}")
    return runtime


def to_device(array, runtime=None, dtype=None):
    """A DeviceArray holding a copy of a host array."""
    runtime = _runtime_arg(runtime)
    np = _np()
    a = np.ascontiguousarray(_asarray("to_device", array))
    dtype = dtype or _kvattn_dtype(a)
    if dtype is None:
        raise KVAttnTypeError(f"NumPy dtype {a.dtype} has no kvattn dtype")
    return DeviceArray(runtime, a.shape, dtype).copy_from(a)


def _view_of(value, runtime):
    if isinstance(value, DeviceArray):
        if value.runtime is not runtime:
            raise KVAttnValueError("a DeviceArray of another kvattn Runtime")
        return value.view()
    view = device_view(value, stream=runtime.stream)
    if view.device is not None and view.device != runtime.device:
        raise KVAttnValueError(
            f"{view.source} tensor is on device {view.device}, the kvattn "
            f"runtime on device {runtime.device}")
    return view


# --- the GPU path --------------------------------------------------------------

class GpuProgram:
    """kvattn IR compiled for a GPU (kvattn_compile) and its kernels loaded
    once on a Runtime. Defaults from the device: chip = sm_<capability>,
    num_sms = its multiprocessor count."""

    def __init__(self, ir, runtime=None, **options):
        self.kernels, self._workspace = [], {}
        self.runtime = _runtime_arg(runtime)
        self.api = self.runtime.api
        options = dict(options)
        if options.get("device_validation"):
            raise KVAttnValueError(
                "device_validation is for plans (kvattn.plan compiles with "
                "it) and for the low-level kvattn.capi: a GpuProgram "
                "launches its kernels without a status word")
        options.setdefault("chip", self.runtime.chip)
        options.setdefault("num_sms", self.runtime.multiprocessor_count)
        o = self.api.compile_options("gpu", options)
        self.image, self.manifest_json = self.api.compile(
            ir, o, self.runtime.image_kind)
        self.manifest = json.loads(self.manifest_json)
        self.diagnostics = _diagnostics(self.manifest.get("diagnostics", []))
        self.kernels_info = self.manifest["kernels"]
        if not self.kernels_info:
            raise KVAttnValueError("the IR has no kvattn.attention to "
                                   "compile")
        # The kernels are bound by their parameter names, which only an
        # attention (and its split-KV merge) can share: a cache write's
        # `update` and `cache` would be buffers of their own (not the
        # attention's `key`/`value`, the K and V appends one `update`), so
        # its result would be silently wrong. Plans bind them
        # (kvattn_plan_buffer_name).
        writes = [f"{k['name']} ({k.get('kind')})" for k in self.kernels_info
                  if k.get("kind", "attention") not in (
                      "attention", "attention_varlen", "merge",
                      "merge_varlen", "cascade_prefix", "cascade_merge")]
        if writes:
            raise KVAttnValueError(
                "GpuProgram runs one attention (and its split-KV merge); the "
                f"IR also has the kernels {', '.join(writes)}: plan it with "
                "kvattn.plan, which binds the cache writes' update_k/update_v"
                " into key/value, or run it on the CPU")
        attentions = [k for k in self.kernels_info
                      if k.get("kind", "attention") in ("attention",
                                                        "attention_varlen")]
        if len(attentions) != 1:
            raise KVAttnValueError(
                f"GpuProgram runs one attention; the IR has "
                f"{len(attentions)} (launch them with kvattn.capi)")
        self.kernels = [self.runtime.rt.load(self.image, self.manifest_json,
                                             i)
                        for i in range(len(self.kernels_info))]
        self.params = {}
        for k in self.kernels_info:
            for p in k["params"]:
                if p["kind"] == "pointer":
                    self.params.setdefault(p["name"], p)
        # What the kernels read, in kernel order (a cascade's prefix kernel
        # reads query, prefix_key, prefix_value; its suffix kernel key,
        # value and the metadata), the workspaces excepted.
        self.inputs = []
        for k in self.kernels_info:
            for p in k["params"]:
                if p["kind"] == "pointer" and p["access"] == "read" and \
                        p["name"] not in _WORKSPACES and \
                        p["name"] not in self.inputs:
                    self.inputs.append(p["name"])
        self.outputs = [p["name"] for p in self.kernels_info[-1]["params"]
                        if p["kind"] == "pointer" and p["access"] == "write"]
        # Every buffer a kernel writes: a read-only device tensor is refused
        # there.
        self.written = {p["name"] for k in self.kernels_info
                        for p in k["params"]
                        if p["kind"] == "pointer" and p["access"] == "write"}
        self.workspaces = [n for n in _WORKSPACES if n in self.params]
        # A run-time split (manifest version 2): the runtime chooses the
        # chunk count N per launch, at most the rule's max.
        self.split_max = max([k.get("split", {}).get("max", 0)
                              for k in self.kernels_info] + [0])
        self._workspace = {}

    # Sizes from shapes: each manifest dim is a number or a size name.
    def _unify(self, sizes, name, shape):
        p = self.params[name]
        want = p["shape"]
        if len(shape) != len(want):
            raise KVAttnValueError(
                f"'{name}' has shape {tuple(shape)}, the kernel takes rank "
                f"{len(want)} [{', '.join(str(d) for d in want)}]")
        special = (_PAGED_ROLES if "block_table" in self.params else
                   _PACKED_KEY_ROLES if "k_start" in self.params else
                   _CACHE_ROW_ROLES if "cache_batch_idx" in self.params else
                   {})
        if "q_start" in self.params and name in _VARLEN_ROLES:
            special = _VARLEN_ROLES  # packed rows: dim 0 is 1, not B
        if "prefix_pages" in self.params and name in _PAGED_PREFIX_ROLES:
            special = _PAGED_PREFIX_ROLES
        roles = special.get(name) or _ROLES.get(name, ())
        for d, (got, w) in enumerate(zip(shape, want)):
            if isinstance(w, int) or str(w).isdigit():
                if got != int(w):
                    raise KVAttnValueError(
                        f"'{name}' has shape {tuple(shape)}: dim {d} must be "
                        f"{w} ([{', '.join(str(x) for x in want)}])")
                w = roles[d] if d < len(roles) else None
                if w is None:
                    continue
            if w in sizes and sizes[w] != got:
                raise KVAttnValueError(
                    f"'{name}' has shape {tuple(shape)}: dim {d} ({w}) is "
                    f"{got}, but {w} = {sizes[w]} from the other arguments")
            sizes[w] = got

    def _shape(self, name, sizes):
        out = []
        for w in self.params[name]["shape"]:
            if isinstance(w, int) or str(w).isdigit():
                out.append(int(w))
            elif w == "N" and self.split_max:
                out.append(self.split_max)
            elif w in sizes:
                out.append(sizes[w])
            else:
                raise KVAttnValueError(f"the size {w} of '{name}' is unknown:"
                                       " pass sizes={...}")
        return tuple(out)

    def _check_dtype(self, name, dtype):
        want = self.params[name]["element_type"]
        if dtype != want:
            hint = (" (bf16 host data: uint16 bit patterns, kvattn.to_bf16)"
                    if want == "bf16" else "")
            raise KVAttnTypeError(f"'{name}' is {dtype}, the kernel takes "
                                  f"{want}{hint}")

    def _named(self, args, named):
        if len(args) > len(self.inputs):
            raise KVAttnTypeError(
                f"{len(args)} positional arguments, the kernel takes "
                f"{len(self.inputs)} ({', '.join(self.inputs)})")
        values = dict(zip(self.inputs, args))
        for name, value in named.items():
            if name in values:
                raise KVAttnTypeError(f"'{name}' given twice")
            if name not in self.params:
                raise KVAttnTypeError(
                    f"unknown argument '{name}': the kernel takes "
                    f"{', '.join(self.inputs + self.outputs)}")
            if name in _WORKSPACES:
                raise KVAttnTypeError(f"'{name}' is the plan's own "
                                      "workspace")
            values[name] = value
        missing = [n for n in self.inputs if n not in values]
        if missing:
            raise KVAttnTypeError(f"missing argument"
                                  f"{'s' * (len(missing) > 1)}: "
                                  f"{', '.join(missing)}")
        return values

    def _metadata(self, name, value, sizes):
        if is_device_tensor(value) or isinstance(value, DeviceArray):
            raise KVAttnTypeError(f"metadata '{name}' must be host integers "
                                  "(the runtime validates and uploads it)")
        a = _asarray(f"metadata '{name}'", value)
        if a.dtype.kind not in "iubO" and a.size:
            raise KVAttnTypeError(f"metadata '{name}' must be integers, got "
                                  f"{a.dtype}")
        self._unify(sizes, name, a.shape)
        if a.dtype.kind == "b":
            a = a.astype("int64")
        # Each value an int64 (Python ints beyond it are NumPy objects, and
        # uint64 ones can exceed it): ctypes would wrap them silently.
        return [check_int(f"metadata {name}[{i}]", x)
                for i, x in enumerate(a.ravel().tolist())]

    def _sizes_arg(self, sizes):
        """The `sizes` a caller gives: None or {size name: int >= 0}."""
        if sizes is None:
            return {}
        if not isinstance(sizes, dict):
            raise KVAttnTypeError(f"sizes must be a dict, got "
                                  f"{type(sizes).__name__}")
        for n in sizes:
            if n not in SIZE_NAMES:
                raise KVAttnValueError(f"unknown size {n!r} in sizes (sizes: "
                                       f"{', '.join(SIZE_NAMES)})")
        return {n: check_int(f"sizes[{n!r}]", v, 0, capi.INT64_MAX)
                for n, v in sizes.items()}

    def _check_writable(self, name, view):
        if name in self.written and getattr(view, "read_only", False):
            raise KVAttnValueError(
                f"'{name}' is written by the kernel, but its {view.source} "
                "says the memory is read-only")

    def _workspaces(self, sizes):
        """Split-KV workspaces, kept and grown (never per step once large
        enough)."""
        out = {}
        for name in self.workspaces:
            shape = self._shape(name, sizes)
            have = self._workspace.get(name)
            need = 1
            for d in shape:
                need *= d
            if have is None or have.nbytes < need * 4:
                self._workspace[name] = have = DeviceArray(
                    self.runtime, shape, "f32")
            out[name] = have.ptr
        return out

    def _bind(self, sizes, buffers, metadata):
        s = [sizes.get(n, 0) for n in SIZE_NAMES]
        if "S" not in sizes and sizes.get("max_pages") and \
                sizes.get("page_size"):
            s[4] = sizes["max_pages"] * sizes["page_size"]
        buffers = dict(buffers)
        buffers.update(self._workspaces(sizes))
        for kernel, info in zip(self.kernels, self.kernels_info):
            names = {p["name"] for p in info["params"]}
            kernel.bind(s, {n: p for n, p in buffers.items() if n in names},
                        {n: v for n, v in metadata.items() if n in names})

    def _launch(self, sizes, buffers, metadata):
        self._bind(sizes, buffers, metadata)
        for kernel in self.kernels:
            kernel.launch()

    def bound_launch(self, sizes, buffers, metadata=None):
        """Binds every kernel (the split-KV merge and the workspaces
        included) to `sizes` ({"B": .., "Hq": .., ...}), `buffers` ({name:
        device pointer}) and `metadata` ({name: [ints]}) once, and returns a
        function that launches them in order on the runtime's stream with
        those arguments: no conversion, copy or synchronisation per call,
        only the C API's launch checks (a timing loop, a graph capture).
        The pointers must stay valid while it is used; a later run() or
        bound_launch() rebinds the kernels."""
        if not isinstance(sizes, dict) or not isinstance(buffers, dict):
            raise KVAttnTypeError("bound_launch takes dicts: sizes {name: "
                                  "int}, buffers {name: device pointer}")
        unknown = [n for n in sizes if n not in SIZE_NAMES]
        if unknown:
            raise KVAttnValueError(f"unknown size '{unknown[0]}' (sizes: "
                                   f"{', '.join(SIZE_NAMES)})")
        self._bind(sizes, buffers, dict(metadata or {}))
        kernels = list(self.kernels)

        def launch():
            for kernel in kernels:
                kernel.launch()
        return launch

    def run(self, *args, sizes=None, **named):
        """Runs the attention. Arguments by name (or positionally in the
        kernel's order: `inputs`): device buffers as NumPy arrays (copied in
        and out, then synchronised) or device tensors (DeviceArray,
        __cuda_array_interface__, DLPack: used in place, not synchronised);
        metadata as host integers. Outputs (`out`, `lse`) may be given;
        otherwise they are allocated, NumPy when every buffer was host data,
        else DeviceArray. Returns out, or (out, lse)."""
        np = _np()
        values = self._named(args, named)
        sizes = self._sizes_arg(sizes)
        buffers, metadata, temporaries = {}, {}, []
        host_outputs, device_in = {}, False
        for name, value in values.items():
            if name in METADATA:
                metadata[name] = self._metadata(name, value, sizes)
                continue
            if is_device_tensor(value) or isinstance(value, DeviceArray):
                view = _view_of(value, self.runtime)
                self._check_dtype(name, view.dtype)
                self._check_writable(name, view)
                self._unify(sizes, name, view.shape)
                buffers[name] = view.ptr
                temporaries.append(view)
                device_in |= name in self.inputs
                continue
            if name in self.outputs:
                # Filled in place, whatever its layout (strided, Fortran
                # order): never a hidden copy the caller does not see.
                if not isinstance(value, np.ndarray):
                    raise KVAttnTypeError(
                        f"'{name}' is an output: pass a NumPy array to fill "
                        f"or a device tensor, not {type(value).__name__}")
                if not value.flags.writeable:
                    raise KVAttnValueError(f"'{name}' is an output, but the "
                                           "NumPy array is read-only")
                self._check_dtype(name, _kvattn_dtype(value) or
                                  str(value.dtype))
                self._unify(sizes, name, value.shape)
                host_outputs[name] = value
                continue
            want = self.params[name]["element_type"]
            a = _host_array(f"'{name}'", value, want)
            self._check_dtype(name, _kvattn_dtype(a, want) or str(a.dtype))
            self._unify(sizes, name, a.shape)
            d = DeviceArray(self.runtime, a.shape, want).copy_from(a)
            temporaries.append(d)
            buffers[name] = d.ptr
        results, allocated = {}, set()
        for name in self.outputs:
            if name in buffers:  # a device tensor of the caller's
                results[name] = values[name]
                continue
            d = DeviceArray(self.runtime, self._shape(name, sizes),
                            self.params[name]["element_type"])
            temporaries.append(d)
            buffers[name] = d.ptr
            results[name] = d
            allocated.add(name)
        self._launch(sizes, buffers, metadata)
        # Host outputs the caller gave are filled; allocated ones come back
        # as NumPy when every input was host data (this waits for the
        # device), else stay DeviceArrays (no wait).
        for name in allocated:
            if name in host_outputs or not device_in:
                host = results[name].numpy()
                if name in host_outputs:
                    np.copyto(host_outputs[name], host)
                    host = host_outputs[name]
                results[name] = host
        out = [results[n] for n in self.outputs]
        return out[0] if len(out) == 1 else tuple(out)

    __call__ = run

    def close(self):
        for k in self.kernels:
            k.close()
        for d in self._workspace.values():
            d.free()
        self._workspace = {}


def compile(ir, target="cpu", entry=None, runtime=None, **options):
    """Compiles kvattn IR: target "cpu" (a CpuProgram: run(*arrays)) or
    "gpu" (a GpuProgram on `runtime`, default_runtime() when None: a GPU,
    or the emulated GPU without a driver). Options: kvattn.capi.CPU_OPTIONS
    and kvattn.capi.GPU_OPTIONS (docs/python.md)."""
    if not isinstance(target, str):
        raise KVAttnTypeError(f"target must be 'cpu' or 'gpu', got "
                              f"{type(target).__name__}")
    if target == "cpu":
        if runtime is not None:
            raise KVAttnTypeError("target 'cpu' takes no runtime")
        return CpuProgram(ir, entry=entry, **options)
    if target == "gpu":
        if entry is not None:
            raise KVAttnTypeError("target 'gpu' compiles every attention of "
                                  "the IR: no entry")
        return GpuProgram(ir, runtime=runtime, **options)
    raise KVAttnValueError(f"unknown target '{target}' (cpu or gpu)")


def run(program, *args, target="cpu", options=None, **named):
    """Compiles `program` (IR text) with `options` and runs it once; a
    compiled program is run directly."""
    if options is not None and not isinstance(options, dict):
        raise KVAttnTypeError(f"options must be a dict, got "
                              f"{type(options).__name__}")
    if isinstance(program, str):
        program = compile(program, target=target, **(options or {}))
    elif not isinstance(program, (CpuProgram, GpuProgram, Plan)):
        raise KVAttnTypeError(f"run takes IR text or a compiled program, got "
                              f"{type(program).__name__}")
    if isinstance(program, CpuProgram):
        if named:
            raise KVAttnTypeError("the CPU path takes its arguments "
                                  f"positionally (got {', '.join(named)})")
        return program.run(*args)
    return program.run(*args, **named)


# --- serving: plan once, run every step ----------------------------------------

class Plan:
    """A GPU attention planned for a serving loop (kvattn_plan_create):
    every kernel compiled with device validation (or read from the kernel
    cache) and loaded once, the status word and workspaces allocated for
    `max_sizes`. run() only queues launches on the runtime's stream: with
    metadata given as device tensors (the device path) it allocates, copies
    and waits for nothing, and can be captured (capture()); metadata given
    as host integers is validated on the host and copied through the
    runtime's metadata ring. Device-side violations are read with status()
    (or check()), which waits for the stream."""

    def __init__(self, ir, runtime=None, max_sizes=None, stream=None,
                 **options):
        self.runtime = _runtime_arg(runtime)
        if max_sizes is not None and not isinstance(max_sizes, dict):
            raise KVAttnTypeError(f"max_sizes must be a dict of sizes, got "
                                  f"{type(max_sizes).__name__}")
        maxima = dict(max_sizes or {})
        unknown = [n for n in maxima if n not in SIZE_NAMES]
        if unknown:
            raise KVAttnValueError(f"unknown size in max_sizes: {unknown[0]}"
                                   f" (sizes: {', '.join(SIZE_NAMES)})")
        # Ints in [0, INT64_MAX] (0: unbounded): not floats (2.5 is not
        # truncated), not values ctypes would wrap.
        maxima = {n: check_int(f"max_sizes[{n!r}]", v, 0, capi.INT64_MAX)
                  for n, v in maxima.items()}
        bounds = [maxima.get(n, 0) for n in SIZE_NAMES]
        if stream is not None:
            self.runtime.set_stream(stream)
        options = dict(options)
        options.setdefault("chip", self.runtime.chip)
        options.setdefault("num_sms", self.runtime.multiprocessor_count)
        api = self.runtime.api
        o = api.compile_options("gpu", options)
        self.handle = capi.PlanHandle(self.runtime.rt, ir, o,
                                      self.runtime.image_kind, bounds)
        self.manifest = json.loads(self.handle.manifest_json)
        self.diagnostics = _diagnostics(self.manifest.get("diagnostics", []))
        self.workspace_bytes = self.handle.workspace_bytes
        # The signature the caller sees: the kernels' tensors and metadata
        # (not the status word, the workspaces or the validation kernels),
        # by the names the plan binds them to (a decode step's appends
        # write "key" and "value" in place from "update_k", "update_v").
        self.kernels_info = []
        self.params = {}
        last = {}
        for index, k in enumerate(self.manifest["kernels"]):
            if k.get("kind") == "validate":
                continue
            self.kernels_info.append(k)
            last = {}
            for p in k["params"]:
                if p["kind"] == "pointer" and p["name"] != "status":
                    name = self.handle.buffer_name(index, p["name"])
                    self.params.setdefault(name, p)
                    last[name] = p
        self.outputs = [n for n, p in last.items()
                        if p["access"] == "write" and n not in _WORKSPACES]
        self.written = {
            self.handle.buffer_name(index, p["name"])
            for index, k in enumerate(self.manifest["kernels"])
            if k.get("kind") != "validate" for p in k["params"]
            if p["kind"] == "pointer" and p["access"] == "write" and
            p["name"] != "status"}
        self.inputs = [n for n in self.params
                       if n not in self.outputs and n not in _WORKSPACES]
        # The host path's metadata ring, reserved for the bounds.
        defaults = {"B": 64, "L": 16, "S": 4096, "max_pages": 256}
        defaults.update(maxima)
        self.metadata_bytes = 0
        for info in self.kernels_info:
            total = 0
            for p in info["params"]:
                if p["kind"] != "pointer" or p["name"] not in METADATA:
                    continue
                n = capi.DTYPE_SIZE.get(p["element_type"], 8)
                for w in p["shape"]:
                    n *= int(w) if str(w).isdigit() else defaults.get(w, 1)
                total += (n + 15) // 16 * 16
            self.metadata_bytes = max(self.metadata_bytes, total)
        self.runtime.rt.reserve_metadata(max(self.metadata_bytes, 16))

    _unify = GpuProgram._unify
    _check_dtype = GpuProgram._check_dtype
    _named = GpuProgram._named
    _metadata = GpuProgram._metadata
    _sizes_arg = GpuProgram._sizes_arg
    _check_writable = GpuProgram._check_writable

    def _arguments(self, sizes, named):
        values = self._named((), named)
        missing = [n for n in self.outputs if n not in values]
        if missing:
            raise KVAttnTypeError(f"Plan.run writes into given device "
                                  f"tensors: pass {', '.join(missing)}")
        sizes = self._sizes_arg(sizes)
        buffers, host_metadata, keep = {}, {}, []
        device_metadata = set()
        for name, value in values.items():
            device = is_device_tensor(value) or isinstance(value, DeviceArray)
            if name in METADATA and not device:
                host_metadata[name] = self._metadata(name, value, sizes)
                continue
            if not device:
                raise KVAttnTypeError(
                    f"Plan.run: '{name}' is {type(value).__name__}, not a "
                    "device tensor (kvattn.to_device, or a CUDA tensor)")
            view = _view_of(value, self.runtime)
            self._check_dtype(name, view.dtype)
            self._check_writable(name, view)
            self._unify(sizes, name, view.shape)
            buffers[name] = view.ptr
            keep.append(view)
            if name in METADATA:
                device_metadata.add(name)
        if host_metadata and device_metadata:
            raise KVAttnTypeError(
                "Plan.run: metadata is either all on the device ("
                f"{', '.join(sorted(device_metadata))}) or all on the host "
                f"({', '.join(sorted(host_metadata))}), not mixed")
        s = [sizes.get(n, 0) for n in SIZE_NAMES]
        if "S" not in sizes and sizes.get("max_pages") and \
                sizes.get("page_size"):
            s[4] = sizes["max_pages"] * sizes["page_size"]
        return s, buffers, host_metadata, keep, values

    def run(self, sizes=None, stream=None, **named):
        """One step: device tensors by name (query, key, value, out, ...,
        each a DeviceArray, __cuda_array_interface__ or DLPack object) and
        metadata (kv_len, q_offset, block_table, ...), either all device
        tensors (validated on the device: see status()) or all host integers
        (validated here). stream: a CUstream (default: the runtime's).
        Returns `out`."""
        s, buffers, host, _keep, values = self._arguments(sizes, named)
        stream = capi.CURRENT_STREAM if stream is None else stream
        if host:
            self.handle.run_host_metadata(s, buffers, host, stream)
        else:
            self.handle.run(s, buffers, stream)
        return values[self.outputs[0]]

    __call__ = run

    def capture(self, sizes=None, **named):
        """Captures one run (device metadata) in a CUDA graph on the
        runtime's stream; returns a Graph whose launch() replays it with
        the same device pointers."""
        s, buffers, host, _keep, _ = self._arguments(sizes, named)
        if host:
            raise KVAttnTypeError("Plan.capture needs the metadata on the "
                                  "device (a graph replays the host copy's "
                                  "address)")
        capi.GraphHandle.begin(self.runtime.rt)
        try:
            self.handle.run(s, buffers)
        finally:
            graph = capi.GraphHandle.end(self.runtime.rt)
        return graph

    def status(self):
        """None, or the host validation's message for the first metadata
        violation a device-path run recorded (waits for the stream). While
        one is recorded, the plan's kernels compute nothing."""
        return self.handle.status()

    def check(self):
        """Raises KVAttnError with status()'s message, if any."""
        message = self.status()
        if message:
            raise KVAttnError(message)

    def clear_status(self):
        self.handle.clear_status()

    def call_counts(self, reset=False):
        """The runtime's driver calls (launches, synchronizations,
        allocations, synchronous_copies, async_copies, graph_launches)."""
        return capi.call_counts(self.runtime.rt, reset)

    def synchronize(self):
        self.runtime.synchronize()

    def close(self):
        self.handle.close()


def attention_ir(runtime=None, **fields):
    """The IR of an attention description (kvattn_attention_desc_to_ir,
    docs/runtime.md "A plan from a description"): dtype ("f32", "f16",
    "bf16"), batch, query_len, key_len (-1 or absent: dynamic),
    num_query_heads, num_kv_heads, head_dim, value_head_dim, causal,
    with_lse, window, window_right, softcap, scale, paged, page_size,
    num_pages, max_pages, varlen, append, sinks (0/1: a buffer "sinks" f32
    [Hq]), alibi (0/1: a buffer "alibi_slopes" f32 [Hq]), ragged_keys (0/1:
    key/value packed [1, Hkv, key_len, D], metadata "k_start" [B + 1]),
    cache_batch_idx (0/1: key/value [cache_rows, Hkv, key_len, D], metadata
    "cache_batch_idx" [B]), cache_rows, kv_dtype (None, "f8E4M3FN" or
    "f8E5M2": an FP8 cache with buffers "k_scale" and "v_scale" f32, last)
    and kv_scales ("tensor" [1], "head" [Hkv] or "token": the cache's shape
    without D), cascade (0/1, with varlen: a kvattn.cascade, buffers
    "prefix_key"/"prefix_value" [1, Hkv, prefix_len, D]) and prefix_len
    (-1 or absent: dynamic, the size P), latent (0/1: DeepSeek MLA's latent
    form, no value buffer, V the first value_head_dim columns of the key,
    head dims up to 576; CPU and GPU; with kv_dtype a buffer "k_scale" only,
    which dequantises K and the V inside it), rotary_dim (RoPE: even, at most
    head_dim; 0 or absent: none), rope_theta (above 1, default 10000),
    rope_interleaved (0/1: GPT-J pairs, else GPT-NeoX halves) and
    rope_record (0/1: a buffer "k_rope_pos" i32 [B, key_len] of the
    positions the cached keys were rotated at, checked on the device; with
    append the K append writes it in place), rotary_rows (RoPE from tables,
    FlashAttention's rotary_cos / rotary_sin: P > 0 adds the buffers
    "rotary_cos" and "rotary_sin" [P, rotary_dim / 2], last, whose row p
    gives the cosines and sines of position p instead of rope_theta's
    formula; a position >= P is refused on the device; 0 or absent: the
    formula) and rotary_dtype ("f32" (default), "f16" or "bf16": the
    tables' type). Bad fields raise KVAttnError naming them."""
    api = _runtime_arg(runtime).api if runtime is not None else library()
    return api.attention_ir(fields)


def plan(ir, runtime=None, max_sizes=None, stream=None, **options):
    """A Plan: compile (with device validation) + load once, then run()
    every step. `ir`: IR text, or a description (a dict of attention_ir's
    fields: the plan of the IR it builds, as kvattn_plan_create_from_desc
    plans it). max_sizes bounds the sizes ({"B": ..., "max_pages": ...,
    "L": ..., "S": ...}: a run above a bound is refused; the host path's
    metadata ring is reserved for them); stream: a CUstream to launch
    on."""
    if isinstance(ir, dict):
        bad = [k for k in ir if not isinstance(k, str)]
        if bad:
            raise KVAttnTypeError(f"description field names are str, got "
                                  f"{bad[0]!r}")
        ir = attention_ir(runtime=_runtime_arg(runtime), **ir)
    return Plan(ir, runtime=runtime, max_sizes=max_sizes, stream=stream,
                **options)
