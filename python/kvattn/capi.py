"""ctypes bindings of the kvattn C API (include/kvattn-c/KVAttn.h).

The one binding of libkvattn_c.so: the package's public API (kvattn/__init__)
and bench/compare_torch.py use it. No dependency beyond the standard library.
"""

import ctypes
import numbers
import operator
import os


class KVAttnError(RuntimeError):
    """Every failure of the package: the C API's (its message) or the
    package's own argument checks. An argument of the wrong type raises
    KVAttnTypeError (also a TypeError), a value out of range or otherwise
    refused before the C API sees it KVAttnValueError (also a ValueError)."""


class KVAttnTypeError(KVAttnError, TypeError):
    """An argument of a type the package does not take."""


class KVAttnValueError(KVAttnError, ValueError):
    """An argument of the right type whose value is refused."""


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
SIZE_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1


def check_int(what, value, lo=INT64_MIN, hi=INT64_MAX):
    """`value` as a Python int in [lo, hi]: an int or an integer scalar
    (operator.index), not a bool, a float or a string; ctypes would wrap a
    value outside its C type silently (2**64 + 4 -> 4)."""
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool"):
        raise KVAttnTypeError(f"{what} must be an integer, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise KVAttnTypeError(f"{what} must be an integer, got "
                              f"{type(value).__name__} {value!r}") from None
    if not lo <= n <= hi:
        raise KVAttnValueError(f"{what} = {n} is outside [{lo}, {hi}]")
    return n


def check_text(what, value, optional=False):
    """`value` (a str; None when optional) as the NUL-terminated UTF-8 bytes
    the C API reads: a NUL inside would end the text there silently."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise KVAttnTypeError(
            f"{what} must be a str{' or None' if optional else ''}, got "
            f"{type(value).__name__}" +
            (" (decode bytes first)" if isinstance(value, bytes) else ""))
    nul = value.find("\0")
    if nul >= 0:
        raise KVAttnValueError(f"{what} contains a NUL character at offset "
                               f"{nul}: the C API would read the text only "
                               "up to it")
    try:
        return value.encode()
    except UnicodeEncodeError as e:
        raise KVAttnValueError(f"{what} is not valid Unicode text ({e})") \
            from None


# --- The C structs (field for field as in KVAttn.h) ---------------------------

class _Sizes(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("B", "Hq", "Hkv", "L", "S",
                                              "num_pages", "page_size",
                                              "max_pages", "cache_rows",
                                              "P", "prefix_num_pages",
                                              "prefix_page_size",
                                              "prefix_max_pages")]


class _Buffer(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("device_ptr", ctypes.c_uint64)]


class _Metadata(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p),
                ("values", ctypes.POINTER(ctypes.c_int64)),
                ("count", ctypes.c_size_t)]


class CompileOptions(ctypes.Structure):
    """kvattn_compile_options."""
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("chip", ctypes.c_char_p),
                ("block_m", ctypes.c_int64),
                ("block_n", ctypes.c_int64),
                ("num_warps", ctypes.c_int64),
                ("num_stages", ctypes.c_int64),
                ("split_kv", ctypes.c_int64),
                ("num_sms", ctypes.c_int64),
                ("pack_gqa", ctypes.c_int32),
                ("tensor_cores", ctypes.c_int32),
                ("use_kernel_cache", ctypes.c_int32),
                ("vectorize", ctypes.c_int32),
                ("vector_width", ctypes.c_int64),
                ("threads", ctypes.c_int64),
                ("opt_level", ctypes.c_int32),
                ("reserved0", ctypes.c_int32),
                ("device_validation", ctypes.c_int32),
                ("reserved1", ctypes.c_int32),
                ("fix_upper_left_appends", ctypes.c_int32),
                ("reserved2", ctypes.c_int32),
                ("index_bitwidth", ctypes.c_int32),
                ("reserved3", ctypes.c_int32),
                ("in_place_appends", ctypes.c_int32),
                ("reserved4", ctypes.c_int32)]


# The options each target takes (keyword arguments of kvattn.compile), with
# the struct field each sets.
GPU_OPTIONS = ("chip", "block_m", "block_n", "num_warps", "num_stages",
               "split_kv", "num_sms", "pack_gqa", "tensor_cores",
               "use_kernel_cache", "device_validation",
               "fix_upper_left_appends", "index_bitwidth")
CPU_OPTIONS = ("block_m", "block_n", "split_kv", "pack_gqa", "vectorize",
               "vector_width", "threads", "opt_level",
               "fix_upper_left_appends", "in_place_appends")
_BOOL_OPTIONS = ("pack_gqa", "tensor_cores", "use_kernel_cache", "vectorize",
                 "device_validation", "fix_upper_left_appends",
                 "in_place_appends")


class AttentionDesc(ctypes.Structure):
    """kvattn_attention_desc."""
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("dtype", ctypes.c_int),
                ("batch", ctypes.c_int64),
                ("query_len", ctypes.c_int64),
                ("key_len", ctypes.c_int64),
                ("num_query_heads", ctypes.c_int64),
                ("num_kv_heads", ctypes.c_int64),
                ("head_dim", ctypes.c_int64),
                ("value_head_dim", ctypes.c_int64),
                ("causal", ctypes.c_int32),
                ("with_lse", ctypes.c_int32),
                ("window", ctypes.c_int64),
                ("softcap", ctypes.c_double),
                ("scale", ctypes.c_double),
                ("paged", ctypes.c_int32),
                ("varlen", ctypes.c_int32),
                ("page_size", ctypes.c_int64),
                ("num_pages", ctypes.c_int64),
                ("max_pages", ctypes.c_int64),
                ("append", ctypes.c_int32),
                ("reserved0", ctypes.c_int32),
                ("window_right", ctypes.c_int64),
                ("sinks", ctypes.c_int32),
                ("alibi", ctypes.c_int32),
                ("tree", ctypes.c_int32),
                ("ragged_keys", ctypes.c_int32),
                ("cache_batch_idx", ctypes.c_int32),
                ("cache_rows", ctypes.c_int64),
                ("kv_dtype", ctypes.c_int32),
                ("kv_scales", ctypes.c_int32),
                ("cascade", ctypes.c_int32),
                ("latent", ctypes.c_int32),
                ("prefix_len", ctypes.c_int64),
                ("rotary_dim", ctypes.c_int64),
                ("rope_theta", ctypes.c_double),
                ("rope_interleaved", ctypes.c_int32),
                ("rope_record", ctypes.c_int32),
                ("rotary_rows", ctypes.c_int64),
                ("rotary_dtype", ctypes.c_int),
                ("prefix_paged", ctypes.c_int32),
                ("prefix_page_size", ctypes.c_int64),
                ("prefix_num_pages", ctypes.c_int64),
                ("prefix_max_pages", ctypes.c_int64)]


# The fields of a description (kvattn.attention_ir's keywords), flags apart.
DESC_FLAGS = ("causal", "with_lse", "paged", "varlen", "append", "sinks",
              "alibi", "tree", "ragged_keys", "cache_batch_idx", "cascade",
              "latent", "rope_interleaved", "rope_record")


class _Diagnostic(ctypes.Structure):
    """kvattn_diagnostic."""
    _fields_ = [("severity", ctypes.c_int),
                ("location", ctypes.c_char_p),
                ("message", ctypes.c_char_p)]


# kvattn_diagnostic_severity.
SEVERITIES = ("error", "warning", "remark", "note")


class _RuntimeOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("device", ctypes.c_int32),
                ("reserved0", ctypes.c_int32),
                ("driver_library", ctypes.c_char_p)]


class CachePrefix(ctypes.Structure):
    """kvattn_cache_prefix."""
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("dtype", ctypes.c_char_p),
                ("num_kv_heads", ctypes.c_int64),
                ("head_dim", ctypes.c_int64),
                ("value_head_dim", ctypes.c_int64),
                ("length", ctypes.c_int64),
                ("batch", ctypes.c_int64),
                ("batch_size", ctypes.c_int64),
                ("capacity", ctypes.c_int64),
                ("page_size", ctypes.c_int64),
                ("num_pages", ctypes.c_int64),
                ("max_pages", ctypes.c_int64),
                ("block_table_row", ctypes.POINTER(ctypes.c_int64)),
                ("positions", ctypes.POINTER(ctypes.c_int64)),
                ("rope", ctypes.c_char_p),
                ("key_bytes", ctypes.c_uint64),
                ("value_bytes", ctypes.c_uint64)]


class HostTensor(ctypes.Structure):
    """kvattn_host_tensor."""
    _fields_ = [("data", ctypes.c_void_p),
                ("dtype", ctypes.c_int),
                ("rank", ctypes.c_size_t),
                ("shape", ctypes.POINTER(ctypes.c_int64))]


# kvattn_dtype
DTYPES = ("f32", "f16", "bf16", "f64", "i1", "i32", "i64", "f8E4M3FN",
          "f8E5M2")
DTYPE_CODE = {name: code for code, name in enumerate(DTYPES)}
DTYPE_SIZE = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i1": 1, "i32": 4,
              "i64": 8, "f8E4M3FN": 1, "f8E5M2": 1}
# FP8 KV caches: host data is np.uint8 holding the codes (kvattn.to_fp8).
FP8_DTYPES = ("f8E4M3FN", "f8E5M2")
IMAGE_PTX, IMAGE_DEVICE_IR = 0, 1

_LIBRARY_NAME = "libkvattn_c.so"


def library_candidates():
    """Where the package looks for libkvattn_c.so, in order: $KVATTN_LIBRARY
    (a path), next to the package, the install prefix (the package installed
    as <prefix>/lib/python3/dist-packages/kvattn, the library as
    <prefix>/lib/libkvattn_c.so), then the build tree of a source checkout
    ($KVATTN_BUILD_DIR or <repository>/build)."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ.get("KVATTN_LIBRARY")
    if env:
        return [env]
    paths = [os.path.join(here, _LIBRARY_NAME)]
    # Installed: <prefix>/lib/python3/dist-packages/kvattn -> <prefix>/lib
    # (cmake --install writes the relative path for its KVATTN_PYTHON_DIR).
    try:
        from ._install_paths import LIBRARY_DIR
        paths.append(os.path.join(
            os.path.normpath(os.path.join(here, LIBRARY_DIR)), _LIBRARY_NAME))
    except ImportError:  # a source checkout
        pass
    root = os.path.normpath(os.path.join(here, "..", ".."))
    build = os.environ.get("KVATTN_BUILD_DIR") or os.path.join(root, "build")
    paths.append(os.path.join(build, "lib", _LIBRARY_NAME))
    return paths


def default_library(build_dir=None):
    """BUILD/lib/libkvattn_c.so for a given build folder, else the first
    existing library_candidates() entry (bench/compare_torch.py --build-dir)."""
    if build_dir:
        return os.path.join(build_dir, "lib", _LIBRARY_NAME)
    return find_library()


def find_library():
    candidates = library_candidates()
    for path in candidates:
        if os.path.exists(path):
            return path
    raise KVAttnError(
        "cannot find libkvattn_c.so (looked at " + ", ".join(candidates) +
        "): set KVATTN_LIBRARY to its path, or build the KVAttnCAPIShared "
        "target")


class Library:
    """The C API of one libkvattn_c.so."""

    def __init__(self, path=None):
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise KVAttnTypeError(f"the library path must be a str, got "
                                  f"{type(path).__name__}")
        path = os.fspath(path) if path is not None else find_library()
        if not os.path.exists(path):
            raise KVAttnError(
                f"{path} does not exist: build the KVAttnCAPIShared target "
                "(ninja -C BUILD KVAttnCAPIShared) or pass the library path")
        self.path = path
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise KVAttnError(f"cannot load {path}: {e}") from None
        err = ctypes.POINTER(ctypes.c_void_p)
        vp = ctypes.c_void_p
        P = ctypes.POINTER
        sig = {
            "kvattn_free": ([vp], None),
            "kvattn_compile_to_ptx": ([ctypes.c_char_p, ctypes.c_char_p, err,
                                       err, err], ctypes.c_int),
            "kvattn_compile_to_device_ir": ([ctypes.c_char_p, ctypes.c_char_p,
                                             err, err, err], ctypes.c_int),
            "kvattn_compile_options_init": ([P(CompileOptions)], None),
            "kvattn_compile": ([ctypes.c_char_p, P(CompileOptions),
                                ctypes.c_int, err, err, err], ctypes.c_int),
            "kvattn_cpu_compile": ([ctypes.c_char_p, ctypes.c_char_p,
                                    P(CompileOptions), P(vp), err],
                                   ctypes.c_int),
            "kvattn_cpu_program_destroy": ([vp], None),
            "kvattn_cpu_program_num_arguments": ([vp], ctypes.c_size_t),
            "kvattn_cpu_program_num_results": ([vp], ctypes.c_size_t),
            "kvattn_cpu_program_type": ([vp, ctypes.c_int, ctypes.c_size_t,
                                         P(ctypes.c_int), P(ctypes.c_size_t),
                                         P(ctypes.c_int64), ctypes.c_size_t,
                                         err], ctypes.c_int),
            "kvattn_cpu_run": ([vp, P(HostTensor), ctypes.c_size_t,
                                P(HostTensor), ctypes.c_size_t, err],
                               ctypes.c_int),
            "kvattn_cpu_program_result": ([vp, ctypes.c_size_t,
                                           P(HostTensor), err], ctypes.c_int),
            "kvattn_cpu_program_num_diagnostics": ([vp], ctypes.c_size_t),
            "kvattn_cpu_program_diagnostic": ([vp, ctypes.c_size_t,
                                               P(_Diagnostic), err],
                                              ctypes.c_int),
            "kvattn_runtime_create": ([P(vp), err], ctypes.c_int),
            "kvattn_runtime_options_init": ([P(_RuntimeOptions)], None),
            "kvattn_runtime_create_with_options": (
                [P(vp), P(_RuntimeOptions), err], ctypes.c_int),
            "kvattn_runtime_device_info": ([vp, P(ctypes.c_int),
                                            P(ctypes.c_int),
                                            P(ctypes.c_int), err],
                                           ctypes.c_int),
            "kvattn_emulated_driver_path": ([err, err], ctypes.c_int),
            "kvattn_runtime_destroy": ([vp], None),
            "kvattn_runtime_set_stream": ([vp, ctypes.c_uint64, err],
                                          ctypes.c_int),
            "kvattn_runtime_use_own_stream": ([vp, err], ctypes.c_int),
            "kvattn_runtime_reserve_metadata": ([vp, ctypes.c_size_t, err],
                                                ctypes.c_int),
            "kvattn_device_alloc": ([vp, ctypes.c_size_t, P(ctypes.c_uint64),
                                     err], ctypes.c_int),
            "kvattn_device_free": ([vp, ctypes.c_uint64, err], ctypes.c_int),
            "kvattn_synchronize": ([vp, err], ctypes.c_int),
            "kvattn_copy_to_device": ([vp, ctypes.c_uint64, vp,
                                       ctypes.c_size_t, err], ctypes.c_int),
            "kvattn_copy_to_host": ([vp, vp, ctypes.c_uint64,
                                     ctypes.c_size_t, err], ctypes.c_int),
            "kvattn_kernel_load": ([vp, ctypes.c_char_p, ctypes.c_char_p,
                                    ctypes.c_size_t, P(vp), err],
                                   ctypes.c_int),
            "kvattn_kernel_launch": ([vp, _Sizes, P(_Buffer), ctypes.c_size_t,
                                      P(_Metadata), ctypes.c_size_t, err],
                                     ctypes.c_int),
            "kvattn_kernel_destroy": ([vp], None),
            "kvattn_plan_create": ([vp, ctypes.c_char_p, P(CompileOptions),
                                    ctypes.c_int, _Sizes, P(vp), err],
                                   ctypes.c_int),
            "kvattn_plan_manifest": ([vp, err, err], ctypes.c_int),
            "kvattn_plan_buffer_name": ([vp, ctypes.c_size_t, ctypes.c_char_p,
                                         err, err], ctypes.c_int),
            "kvattn_attention_desc_init": ([P(AttentionDesc)], None),
            "kvattn_attention_desc_to_ir": ([P(AttentionDesc), err, err],
                                            ctypes.c_int),
            "kvattn_plan_workspace_bytes": ([vp, P(ctypes.c_size_t), err],
                                            ctypes.c_int),
            "kvattn_plan_run": ([vp, _Sizes, P(_Buffer), ctypes.c_size_t,
                                 ctypes.c_uint64, err], ctypes.c_int),
            "kvattn_plan_run_host_metadata": (
                [vp, _Sizes, P(_Buffer), ctypes.c_size_t, P(_Metadata),
                 ctypes.c_size_t, ctypes.c_uint64, err], ctypes.c_int),
            "kvattn_plan_status": ([vp, err], ctypes.c_int),
            "kvattn_plan_clear_status": ([vp, err], ctypes.c_int),
            "kvattn_plan_destroy": ([vp], None),
            "kvattn_graph_begin_capture": ([vp, err], ctypes.c_int),
            "kvattn_graph_end_capture": ([vp, P(vp), err], ctypes.c_int),
            "kvattn_graph_launch": ([vp, err], ctypes.c_int),
            "kvattn_graph_destroy": ([vp], None),
            "kvattn_runtime_call_counts": ([vp, P(CallCounts), ctypes.c_int,
                                            err], ctypes.c_int),
            "kvattn_cache_prefix_init": ([P(CachePrefix)], None),
            "kvattn_cache_fingerprint": ([P(CachePrefix), vp, vp,
                                          P(ctypes.c_uint8), err],
                                         ctypes.c_int),
            "kvattn_runtime_cache_fingerprint": (
                [vp, P(CachePrefix), ctypes.c_uint64, ctypes.c_uint64,
                 P(ctypes.c_uint8), err], ctypes.c_int),
            "kvattn_cache_check_fingerprint": (
                [P(CachePrefix), P(ctypes.c_uint8), P(ctypes.c_uint8), err],
                ctypes.c_int),
        }
        for name, (argtypes, restype) in sig.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise KVAttnError(
                    f"{path} has no '{name}': a libkvattn_c.so older than "
                    "this package") from None
            fn.argtypes = argtypes
            fn.restype = restype
        self.lib = lib

    def _take(self, ptr):
        """A string the API returned, freed."""
        if not ptr:
            return ""
        text = ctypes.string_at(ptr).decode()
        self.lib.kvattn_free(ptr)
        return text

    def check(self, rc, error, what):
        if rc != 0:
            raise KVAttnError(f"{what}: {self._take(error.value)}")

    def cpu_program_diagnostics(self, handle):
        """[(severity, location, message)] of a kvattn_cpu_program."""
        out = []
        for i in range(self.lib.kvattn_cpu_program_num_diagnostics(handle)):
            d, error = _Diagnostic(), ctypes.c_void_p()
            rc = self.lib.kvattn_cpu_program_diagnostic(
                handle, i, ctypes.byref(d), ctypes.byref(error))
            self.check(rc, error, "kvattn_cpu_program_diagnostic")
            out.append((SEVERITIES[d.severity], d.location.decode(),
                        d.message.decode()))
        return out

    def compile_options(self, target, options):
        """A kvattn_compile_options from keyword options; unknown names and
        wrong types are errors naming them."""
        allowed = GPU_OPTIONS if target == "gpu" else CPU_OPTIONS
        if not isinstance(options, dict):
            raise KVAttnTypeError(f"options must be a dict, got "
                                  f"{type(options).__name__}")
        o = CompileOptions()
        self.lib.kvattn_compile_options_init(ctypes.byref(o))
        for name, value in options.items():
            if name not in allowed:
                raise KVAttnTypeError(
                    f"unknown option '{name}' for target '{target}' (its "
                    f"options: {', '.join(allowed)})")
            if value is None:
                continue
            if name == "chip":
                if not isinstance(value, str):
                    raise KVAttnTypeError(f"option chip must be a string "
                                          f"like 'sm_90', got {value!r}")
                o.chip = check_text("option chip", value)
            elif name in _BOOL_OPTIONS:
                if not isinstance(value, (bool, int)):
                    raise KVAttnTypeError(f"option {name} must be a bool, "
                                          f"got {value!r}")
                if value not in (0, 1):
                    raise KVAttnValueError(f"option {name} must be a bool, "
                                           f"got {value!r}")
                setattr(o, name, int(value))
            else:
                # The field's C type: int64, or int32 (opt_level).
                bits = 8 * getattr(CompileOptions, name).size
                setattr(o, name, check_int(
                    f"option {name}", value, -(1 << (bits - 1)),
                    (1 << (bits - 1)) - 1))
        return o

    def compile(self, ir, options, image_kind):
        """(image, manifest_json) with kvattn_compile_options `options`."""
        image, manifest, error = (ctypes.c_void_p(), ctypes.c_void_p(),
                                  ctypes.c_void_p())
        rc = self.lib.kvattn_compile(
            check_text("ir", ir), ctypes.byref(options), image_kind,
            ctypes.byref(image), ctypes.byref(manifest), ctypes.byref(error))
        self.check(rc, error, "kvattn_compile")
        return self._take(image.value), self._take(manifest.value)

    def attention_ir(self, fields):
        """The IR of a kvattn_attention_desc given as a dict
        (kvattn_attention_desc_to_ir); unknown fields are errors."""
        if not isinstance(fields, dict):
            raise KVAttnTypeError(f"a description is a dict of fields, got "
                                  f"{type(fields).__name__}")
        d = AttentionDesc()
        self.lib.kvattn_attention_desc_init(ctypes.byref(d))
        known = [f for f, _ in AttentionDesc._fields_
                 if f not in ("struct_size", "reserved0", "reserved1")]
        for name, value in fields.items():
            if name not in known:
                raise KVAttnTypeError(f"unknown description field '{name}' "
                                      f"(fields: {', '.join(known)})")
            if name in ("dtype", "rotary_dtype"):
                if not isinstance(value, str) or value not in DTYPE_CODE:
                    raise KVAttnValueError(f"description {name} must be "
                                           f"f32, f16 or bf16, got "
                                           f"{value!r}")
                value = DTYPE_CODE[value]
            elif name == "kv_dtype":
                # None: K and V in dtype; an FP8 cache by name.
                if value is None:
                    continue
                if not isinstance(value, str) or value not in FP8_DTYPES:
                    raise KVAttnValueError(f"description kv_dtype must be "
                                           f"None, f8E4M3FN or f8E5M2, got "
                                           f"{value!r}")
                value = DTYPE_CODE[value]
            elif name == "kv_scales":
                # "tensor" (default), "head" or "token", or 0 / 1 / 2.
                names = {"tensor": 0, "head": 1, "token": 2}
                if isinstance(value, str):
                    if value not in names:
                        raise KVAttnValueError(
                            f"description kv_scales must be tensor, head "
                            f"or token, got {value!r}")
                    value = names[value]
                value = check_int("description field kv_scales", value,
                                  INT32_MIN, INT32_MAX)
            elif value is None and name not in DESC_FLAGS:
                continue
            elif name in DESC_FLAGS:
                # 0/1 (the C API names any other value); a bool as 0/1.
                value = check_int(f"description field {name}", int(value)
                                  if isinstance(value, bool) else value,
                                  INT32_MIN, INT32_MAX)
            elif name in ("softcap", "scale", "rope_theta"):
                if isinstance(value, bool) or not isinstance(value,
                                                             numbers.Real):
                    raise KVAttnTypeError(f"description field {name} must "
                                          f"be a number, got {value!r}")
                try:
                    value = float(value)
                except (OverflowError, TypeError, ValueError) as e:
                    raise KVAttnValueError(f"description field {name} = "
                                           f"{value!r}: {e}") from None
            else:
                value = check_int(f"description field {name}", value)
            setattr(d, name, value)
        ir, error = ctypes.c_void_p(), ctypes.c_void_p()
        rc = self.lib.kvattn_attention_desc_to_ir(
            ctypes.byref(d), ctypes.byref(ir), ctypes.byref(error))
        self.check(rc, error, "kvattn_attention_desc_to_ir")
        return self._take(ir.value)

    def compile_to_device_ir(self, ir, chip):
        """The emulated GPU's image (device LLVM IR) and its manifest."""
        image, manifest, error = (ctypes.c_void_p(), ctypes.c_void_p(),
                                  ctypes.c_void_p())
        rc = self.lib.kvattn_compile_to_device_ir(
            check_text("ir", ir), check_text("chip", chip, optional=True),
            ctypes.byref(image),
            ctypes.byref(manifest), ctypes.byref(error))
        self.check(rc, error, "kvattn_compile_to_device_ir")
        return self._take(image.value), self._take(manifest.value)

    def compile_to_ptx(self, ir, chip):
        """(ptx, manifest_json) of every kvattn.attention of `ir`."""
        ptx, manifest, error = (ctypes.c_void_p(), ctypes.c_void_p(),
                                ctypes.c_void_p())
        rc = self.lib.kvattn_compile_to_ptx(
            check_text("ir", ir), check_text("chip", chip, optional=True),
            ctypes.byref(ptx),
            ctypes.byref(manifest), ctypes.byref(error))
        self.check(rc, error, "kvattn_compile_to_ptx")
        return self._take(ptx.value), self._take(manifest.value)

    def emulated_driver_path(self):
        path, error = ctypes.c_void_p(), ctypes.c_void_p()
        rc = self.lib.kvattn_emulated_driver_path(ctypes.byref(path),
                                                  ctypes.byref(error))
        self.check(rc, error, "kvattn_emulated_driver_path")
        return self._take(path.value)


class Runtime:
    """kvattn_runtime: a driver library, a device, its primary context and a
    stream (low level: device pointers are integers)."""

    def __init__(self, library, device=0, driver_library=None):
        self.api = library
        self.handle = ctypes.c_void_p()
        options = _RuntimeOptions()
        library.lib.kvattn_runtime_options_init(ctypes.byref(options))
        options.device = check_int("device", device, INT32_MIN, INT32_MAX)
        if driver_library is not None:
            options.driver_library = check_text("driver library",
                                                driver_library)
        error = ctypes.c_void_p()
        rc = library.lib.kvattn_runtime_create_with_options(
            ctypes.byref(self.handle), ctypes.byref(options),
            ctypes.byref(error))
        library.check(rc, error, "kvattn_runtime_create")

    def _call(self, name, *args):
        if not self.handle:
            raise KVAttnError(f"{name}: the runtime is closed")
        error = ctypes.c_void_p()
        rc = getattr(self.api.lib, name)(self.handle, *args,
                                         ctypes.byref(error))
        self.api.check(rc, error, name)

    def device_info(self):
        """(device ordinal, compute capability, multiprocessor count)."""
        device, cc, sms = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        self._call("kvattn_runtime_device_info", ctypes.byref(device),
                   ctypes.byref(cc), ctypes.byref(sms))
        return device.value, cc.value, sms.value

    def set_stream(self, stream):
        """Launch on a CUstream (e.g. torch.cuda.current_stream().cuda_stream)."""
        self._call("kvattn_runtime_set_stream", ctypes.c_uint64(
            check_int("stream", stream, 0, UINT64_MAX)))

    def reserve_metadata(self, nbytes):
        """Allocates the metadata slots up front (a plan step)."""
        self._call("kvattn_runtime_reserve_metadata",
                   check_int("metadata bytes", nbytes, 0, SIZE_MAX))

    def use_own_stream(self):
        self._call("kvattn_runtime_use_own_stream")

    def alloc(self, nbytes):
        ptr = ctypes.c_uint64()
        self._call("kvattn_device_alloc", ctypes.c_size_t(
            check_int("allocation bytes", nbytes, 0, SIZE_MAX)),
                   ctypes.byref(ptr))
        return ptr.value

    def free(self, ptr):
        self._call("kvattn_device_free", ctypes.c_uint64(
            check_int("device pointer", ptr, 0, UINT64_MAX)))

    def upload(self, ptr, data):
        """Copies bytes (or a buffer at an address: upload_from) to device
        memory."""
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        self._call("kvattn_copy_to_device", ctypes.c_uint64(
            check_int("device pointer", ptr, 0, UINT64_MAX)), buf,
                   ctypes.c_size_t(len(data)))

    def upload_from(self, ptr, host_address, nbytes):
        self._call("kvattn_copy_to_device", ctypes.c_uint64(
            check_int("device pointer", ptr, 0, UINT64_MAX)),
            ctypes.c_void_p(host_address), ctypes.c_size_t(
                check_int("copy bytes", nbytes, 0, SIZE_MAX)))

    def download(self, ptr, nbytes):
        """Copies bytes from device memory."""
        nbytes = check_int("copy bytes", nbytes, 0, SIZE_MAX)
        buf = ctypes.create_string_buffer(nbytes)
        self._call("kvattn_copy_to_host", buf, ctypes.c_uint64(
            check_int("device pointer", ptr, 0, UINT64_MAX)),
            ctypes.c_size_t(nbytes))
        return buf.raw

    def download_to(self, host_address, ptr, nbytes):
        self._call("kvattn_copy_to_host", ctypes.c_void_p(host_address),
                   ctypes.c_uint64(check_int("device pointer", ptr, 0,
                                             UINT64_MAX)),
                   ctypes.c_size_t(check_int("copy bytes", nbytes, 0,
                                             SIZE_MAX)))

    def synchronize(self):
        self._call("kvattn_synchronize")

    def load(self, ptx, manifest_json, index=0):
        return Kernel(self, ptx, manifest_json, index)

    def close(self):
        if self.handle:
            self.api.lib.kvattn_runtime_destroy(self.handle)
            self.handle = ctypes.c_void_p()


class Kernel:
    """A loaded kernel; bind() its arguments once, then launch() cheaply."""

    def __init__(self, runtime, ptx, manifest_json, index):
        self.runtime = runtime
        self.api = runtime.api
        self.handle = ctypes.c_void_p()
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_kernel_load(
            runtime.handle, check_text("image", ptx),
            check_text("manifest", manifest_json),
            check_int("kernel index", index, 0, SIZE_MAX),
            ctypes.byref(self.handle), ctypes.byref(error))
        self.api.check(rc, error, "kvattn_kernel_load")
        self._args = None

    def bind(self, sizes, buffers, metadata):
        """sizes: (B, Hq, Hkv, L, S[, num_pages, page_size, max_pages]);
        buffers: {name: device pointer}; metadata: {name: [ints]} (host
        values, validated at each launch)."""
        self._keep, bufs = _buffers(buffers)
        names, arrays, meta = _metadata(metadata)
        self._keep += names
        self._arrays = arrays
        self._args = (_sizes(sizes), bufs, len(buffers), meta, len(metadata))

    def launch(self):
        if self._args is None:
            raise KVAttnError("kvattn_kernel_launch: bind() the arguments "
                              "first")
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_kernel_launch(self.handle, *self._args,
                                               ctypes.byref(error))
        self.api.check(rc, error, "kvattn_kernel_launch")

    def close(self):
        if self.handle:
            self.api.lib.kvattn_kernel_destroy(self.handle)
            self.handle = ctypes.c_void_p()


CURRENT_STREAM = (1 << 64) - 1  # KVATTN_CURRENT_STREAM


class CallCounts(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in (
        "launches", "graph_launches", "synchronizations", "allocations",
        "synchronous_copies", "async_copies")]

    def as_dict(self):
        return {n: getattr(self, n) for n, _ in self._fields_}


def call_counts(runtime, reset=False):
    """The runtime's driver calls (kvattn_runtime_call_counts) as a dict."""
    c, error = CallCounts(), ctypes.c_void_p()
    rc = runtime.api.lib.kvattn_runtime_call_counts(
        runtime.handle, ctypes.byref(c), int(reset), ctypes.byref(error))
    runtime.api.check(rc, error, "kvattn_runtime_call_counts")
    return c.as_dict()


def _sizes(sizes):
    """A kvattn_sizes; every size an int64 (ctypes would wrap a larger one
    silently)."""
    names = [n for n, _ in _Sizes._fields_]
    if len(sizes) > len(names):
        raise KVAttnValueError(f"{len(sizes)} sizes, kvattn_sizes has "
                               f"{len(names)}")
    return _Sizes(*[check_int(f"size {n}", v) for n, v in zip(names, sizes)])


def _buffers(buffers):
    keep = [check_text("buffer name", n) for n in buffers]
    arr = (_Buffer * len(buffers))(
        *[_Buffer(k, check_int(f"device pointer of '{n}'", p, 0, UINT64_MAX))
          for k, (n, p) in zip(keep, buffers.items())])
    return keep, arr


def _metadata(metadata):
    """(names, value arrays, kvattn_metadata array) of {name: [ints]}: each
    value an int64 (the C API then checks it against the kernel's
    range)."""
    names = [check_text("metadata name", n) for n in metadata]
    arrays = [(ctypes.c_int64 * len(v))(
        *[check_int(f"metadata {n}[{i}]", x) for i, x in enumerate(v)])
        for n, v in metadata.items()]
    meta = (_Metadata * len(metadata))(
        *[_Metadata(n, a, len(a)) for n, a in zip(names, arrays)])
    return names, arrays, meta


class PlanHandle:
    """kvattn_plan_*: a plan created from IR (compiled with device
    validation) on a Runtime."""

    def __init__(self, runtime, ir, options, image_kind, bounds):
        self.runtime, self.api = runtime, runtime.api
        self.handle, error = ctypes.c_void_p(), ctypes.c_void_p()
        rc = self.api.lib.kvattn_plan_create(
            runtime.handle, check_text("ir", ir), ctypes.byref(options),
            image_kind, _sizes(bounds), ctypes.byref(self.handle),
            ctypes.byref(error))
        self.api.check(rc, error, "kvattn_plan_create")
        text, error = ctypes.c_void_p(), ctypes.c_void_p()
        rc = self.api.lib.kvattn_plan_manifest(self.handle, ctypes.byref(text),
                                              ctypes.byref(error))
        self.api.check(rc, error, "kvattn_plan_manifest")
        self.manifest_json = self.api._take(text.value)
        n, error = ctypes.c_size_t(), ctypes.c_void_p()
        rc = self.api.lib.kvattn_plan_workspace_bytes(
            self.handle, ctypes.byref(n), ctypes.byref(error))
        self.api.check(rc, error, "kvattn_plan_workspace_bytes")
        self.workspace_bytes = n.value

    def buffer_name(self, kernel, param):
        """The buffer name run() binds parameter `param` of manifest kernel
        `kernel` to (a decode step's appends: update_k/key,
        update_v/value)."""
        name, error = ctypes.c_void_p(), ctypes.c_void_p()
        rc = self.api.lib.kvattn_plan_buffer_name(
            self.handle, check_int("kernel index", kernel, 0, SIZE_MAX),
            check_text("parameter name", param), ctypes.byref(name),
            ctypes.byref(error))
        self.api.check(rc, error, "kvattn_plan_buffer_name")
        return self.api._take(name.value)

    def run(self, sizes, buffers, stream=CURRENT_STREAM):
        _keep, arr = _buffers(buffers)
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_plan_run(
            self.handle, _sizes(sizes), arr, len(buffers),
            ctypes.c_uint64(check_int("stream", stream, 0, UINT64_MAX)),
            ctypes.byref(error))
        self.api.check(rc, error, "kvattn_plan_run")

    def run_host_metadata(self, sizes, buffers, metadata,
                          stream=CURRENT_STREAM):
        _keep, arr = _buffers(buffers)
        _names, _arrays, meta = _metadata(metadata)
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_plan_run_host_metadata(
            self.handle, _sizes(sizes), arr, len(buffers), meta,
            len(metadata),
            ctypes.c_uint64(check_int("stream", stream, 0, UINT64_MAX)),
            ctypes.byref(error))
        self.api.check(rc, error, "kvattn_plan_run_host_metadata")

    def status(self):
        """None, or the message of the first recorded violation (waits for
        the stream)."""
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_plan_status(self.handle, ctypes.byref(error))
        return self.api._take(error.value) if rc else None

    def clear_status(self):
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_plan_clear_status(self.handle,
                                                   ctypes.byref(error))
        self.api.check(rc, error, "kvattn_plan_clear_status")

    def close(self):
        if self.handle:
            self.api.lib.kvattn_plan_destroy(self.handle)
            self.handle = ctypes.c_void_p()


class GraphHandle:
    """A captured CUDA graph (kvattn_graph_*)."""

    def __init__(self, runtime, handle):
        self.runtime, self.api, self.handle = runtime, runtime.api, handle

    @staticmethod
    def begin(runtime):
        error = ctypes.c_void_p()
        rc = runtime.api.lib.kvattn_graph_begin_capture(runtime.handle,
                                                       ctypes.byref(error))
        runtime.api.check(rc, error, "kvattn_graph_begin_capture")

    @staticmethod
    def end(runtime):
        handle, error = ctypes.c_void_p(), ctypes.c_void_p()
        rc = runtime.api.lib.kvattn_graph_end_capture(
            runtime.handle, ctypes.byref(handle), ctypes.byref(error))
        runtime.api.check(rc, error, "kvattn_graph_end_capture")
        return GraphHandle(runtime, handle)

    def launch(self):
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_graph_launch(self.handle, ctypes.byref(error))
        self.api.check(rc, error, "kvattn_graph_launch")

    def close(self):
        if self.handle:
            self.api.lib.kvattn_graph_destroy(self.handle)
            self.handle = ctypes.c_void_p()
