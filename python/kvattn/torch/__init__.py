"""kvattn for PyTorch: torch.library custom ops over the kvattn compiler.

    import torch, kvattn.torch as kt
    out = kt.attention(q, k, v, q_offset=pos, kv_len=lens)   # [B, Hq, L, Dv]
    kt.append(k_cache, k_new, pos)                           # in place

`torch.ops.kvattn.attention` / `torch.ops.kvattn.attention_out` /
`torch.ops.kvattn.append` are registered with CPU kernels (kvattn's JIT CPU
path, kvattn_cpu_run), CUDA kernels (the kvattn runtime on torch's current
stream) and fake kernels, so `torch.compile(fullgraph=True)` traces through
them without a graph break. Tensors cross by DLPack (bf16 included: the
kernel reads the tensor's own memory, `data_ptr` for `data_ptr`); outputs
are allocated by torch (or given with `out=`). Positions are explicit:
query row i of batch b sits at `q_offset[b] + i` (default `kv_len - L`, the
lower-right alignment of a cached append), so the upper-left bug cannot
happen here. docs/torch.md.
"""

import threading
from typing import Dict, Optional, Sequence, Tuple, Union

import torch

from .. import capi
from .._device import host_view
from ._host import host_tensor, is_dense_host
from ..capi import KVAttnError, KVAttnTypeError, KVAttnValueError

__all__ = ["attention", "append", "tree_attention", "cascade_attention",
           "paged_cascade_attention",
           "mla_attention", "mla_attention_split", "concat_and_cache_mla",
           "lint", "fix", "Finding", "KVAttnError", "KVAttnTypeError",
           "KVAttnValueError", "program_cache_info", "clear_program_cache",
           "Plan", "check"]

_DTYPES = {torch.float32: "f32", torch.float16: "f16",
           torch.bfloat16: "bf16"}
# FP8 KV caches (docs/semantics.md, "FP8 KV caches"): key and value as
# torch.float8_e4m3fn / float8_e5m2 with k_scale / v_scale.
_FP8 = {torch.float8_e4m3fn: "f8E4M3FN", torch.float8_e5m2: "f8E5M2"}
_INDEX_DTYPES = (torch.int32, torch.int64)
LAYOUTS = ("bhsd", "bshd")


# --- validation (every check before anything runs) ---------------------------

def _tensor(what: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise KVAttnTypeError(f"{what} must be a torch.Tensor, got "
                              f"{type(value).__name__}")
    return value


def _on_query_device(what: str, t: torch.Tensor, query: torch.Tensor) -> None:
    if t.device != query.device:
        raise KVAttnValueError(f"{what} is on {t.device}, query on "
                               f"{query.device}")


def _float_dtype(what: str, t: torch.Tensor) -> str:
    """The kvattn dtype name of a float32/float16/bfloat16 tensor."""
    if t.dtype not in _DTYPES:
        raise KVAttnTypeError(
            f"{what} has dtype {t.dtype}; kvattn takes torch.float32, "
            "torch.float16 and torch.bfloat16")
    return _DTYPES[t.dtype]


def _four_dims(what: str, t: torch.Tensor) -> None:
    """4 dims, the head dim contiguous (every query, cache and output
    tensor; alone for an FP8 cache, whose dtype is checked elsewhere)."""
    if t.dim() != 4:
        raise KVAttnValueError(f"{what} must have 4 dims, got "
                               f"{tuple(t.shape)}")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise KVAttnValueError(
            f"{what}: the head dim is not contiguous (strides "
            f"{tuple(t.stride())}): kvattn reads each head's D values "
            "from consecutive memory (pass .contiguous())")


def _float_tensor(what: str, t: torch.Tensor) -> str:
    dtype = _float_dtype(what, t)
    _four_dims(what, t)
    return dtype


def _scale_granularity(what: str, t: torch.Tensor, query: torch.Tensor,
                       Hkv: int, rows: tuple, shape_error) -> str:
    """An FP8 cache's scale tensor: float32 on the query's device, per
    tensor ([1] or 0-d: "tensor"), per KV head ([Hkv]: "head") or per
    token (`rows`, the cache's shape without D: "token"); another shape
    raises shape_error(shape)."""
    _tensor(what, t)
    if t.dtype != torch.float32:
        raise KVAttnTypeError(f"{what} has dtype {t.dtype}; it must be "
                              "torch.float32")
    _on_query_device(what, t, query)
    shape = tuple(t.shape)
    if shape in ((), (1,)):
        return "tensor"
    if shape == (Hkv,):
        return "head"
    if shape == rows:
        return "token"
    raise KVAttnValueError(shape_error(shape))


def _kv_tensor(what: str, t: torch.Tensor, dtype: str) -> None:
    """key / value: `dtype` (the query's), or FP8 codes (both of one
    format: torch.float8_e4m3fn or float8_e5m2)."""
    if t.dtype in _FP8:
        _four_dims(what, t)
        return
    if _float_tensor(what, t) != dtype:
        raise KVAttnTypeError(f"{what} has dtype {t.dtype}, query "
                              f"{DTYPE_NAMES[dtype]}: one dtype for all three "
                              "(or an FP8 cache: torch.float8_e4m3fn / "
                              "float8_e5m2 key and value with k_scale and "
                              "v_scale)")


DTYPE_NAMES = {v: str(k) for k, v in _DTYPES.items()}


def _layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise KVAttnValueError(f"layout must be 'bhsd' ([B, H, S, D], torch "
                               f"SDPA's) or 'bshd' ([B, S, H, D]), got "
                               f"{layout!r}")
    return layout


def _to_bhsd(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The [B, H, S, D] view of `t` (no copy)."""
    return t if layout == "bhsd" else t.transpose(1, 2)


def _positions(what: str, value, batch: int, device) -> torch.Tensor:
    """An int64 [B] tensor from a tensor, a list or an int."""
    if isinstance(value, torch.Tensor):
        if value.dtype not in _INDEX_DTYPES:
            raise KVAttnTypeError(f"{what} has dtype {value.dtype}; it "
                                  "must be torch.int32 or torch.int64")
        if value.dim() != 1 or value.shape[0] != batch:
            raise KVAttnValueError(f"{what} must have shape [B] = [{batch}], "
                                   f"got {tuple(value.shape)}")
        return value.to(torch.int64)
    if isinstance(value, bool) or not isinstance(value, (int, list, tuple)):
        raise KVAttnTypeError(f"{what} must be a tensor, a list of ints or "
                              f"an int, got {type(value).__name__}")
    values = [value] * batch if isinstance(value, int) else list(value)
    if len(values) != batch:
        raise KVAttnValueError(f"{what} has {len(values)} values for a batch "
                               f"of {batch}")
    values = [capi.check_int(f"{what}[{i}]", v) for i, v in
              enumerate(values)]
    return torch.tensor(values, dtype=torch.int64, device=device)


def _check_attention(query, key, value, layout, key_rows=None):
    """key_rows: None ([B, Hkv, S, D] keys), "k_start" (one packed buffer
    [1, Hkv, N, D]) or "cache_batch_idx" ([C, Hkv, S, D] cache rows)."""
    for what, t in (("query", query), ("key", key), ("value", value)):
        _tensor(what, t)
    dtype = _float_tensor("query", query)
    if (key.dtype in _FP8 or value.dtype in _FP8) and \
            key.dtype != value.dtype:
        raise KVAttnTypeError(f"key has dtype {key.dtype}, value "
                              f"{value.dtype}: an FP8 cache stores key and "
                              "value in one FP8 dtype")
    for what, t in (("key", key), ("value", value)):
        _kv_tensor(what, t, dtype)
        _on_query_device(what, t, query)
    if query.device.type not in ("cpu", "cuda", "meta"):
        raise KVAttnValueError(f"query is on {query.device}: kvattn runs on "
                               "the CPU and CUDA devices")
    q, k, v = (_to_bhsd(t, layout) for t in (query, key, value))
    B, Hq, L, D = q.shape
    if key_rows == "k_start":
        if k.shape[0] != 1 or v.shape[0] != 1:
            raise KVAttnValueError(
                f"with k_start (cu_seqlens_k) key and value are one packed "
                f"buffer [1, Hkv, N, D]: their batch dim must be 1, got "
                f"{k.shape[0]} and {v.shape[0]}")
    elif key_rows == "cache_batch_idx":
        if k.shape[0] != v.shape[0]:
            raise KVAttnValueError(f"cache rows differ: key {k.shape[0]}, "
                                   f"value {v.shape[0]}")
    elif k.shape[0] != B or v.shape[0] != B:
        raise KVAttnValueError(f"batch sizes differ: query {B}, key "
                               f"{k.shape[0]}, value {v.shape[0]}")
    Hkv, S = k.shape[1], k.shape[2]
    if k.shape[3] != D:
        raise KVAttnValueError(f"key head dim {k.shape[3]} != query head dim "
                               f"{D}")
    if v.shape[1] != Hkv or v.shape[2] != S:
        raise KVAttnValueError(f"value {tuple(v.shape)} (as [B, H, S, D]) "
                               f"does not match key {tuple(k.shape)}")
    if Hkv == 0 or Hq % Hkv:
        raise KVAttnValueError(f"query heads Hq = {Hq} must be a multiple of "
                               f"kv heads Hkv = {Hkv}")
    if not 1 <= D <= 256 or not 1 <= v.shape[3] <= 256:
        raise KVAttnValueError(f"head dims D = {D}, Dv = {v.shape[3]} must be "
                               "in [1, 256]")
    return dtype, (B, Hq, Hkv, L, S, D, v.shape[3])


def _check_options(causal, window, softcap, scale):
    """The options, checked; `window` is W (keys before the query) or
    (W, R) with R the keys after it (window_right; W 0: no bound
    before)."""
    if not isinstance(causal, bool):
        raise KVAttnTypeError(f"causal must be a bool, got {causal!r}")
    if isinstance(window, tuple):
        left = capi.check_int("window", window[0], 0)
        right = capi.check_int("window_right", window[1], 0)
        if causal:
            raise KVAttnValueError(
                f"window_right = {right} with causal=True: causal allows no "
                "key after the query (FlashAttention's window_size = (left, "
                "0) is the causal window)")
        return (left, right), float(softcap or 0.0), (
            None if scale is None else float(scale))
    window = capi.check_int("window", window, 0)
    if window and not causal:
        raise KVAttnValueError("a sliding window needs causal=True (or "
                               "window_size with a right bound)")
    for what, x in (("softcap", softcap), ("scale", scale)):
        if x is not None and (isinstance(x, bool) or
                              not isinstance(x, (int, float))):
            raise KVAttnTypeError(f"{what} must be a float, got {x!r}")
    if softcap is not None and (softcap < 0 or softcap != softcap):
        raise KVAttnValueError(f"softcap = {softcap} must be >= 0 (0: none)")
    if scale is not None and (not scale > 0 or scale == float("inf")):
        raise KVAttnValueError(f"scale = {scale} must be a positive finite "
                               "number")
    return window, float(softcap or 0.0), (None if scale is None
                                            else float(scale))


# --- programs, cached per signature ------------------------------------------

_lock = threading.Lock()
_programs: Dict[tuple, object] = {}
_stats = {"hits": 0, "misses": 0}


def program_cache_info() -> Dict[str, int]:
    """Compiled programs: {"hits", "misses", "size"} since the last clear.
    A signature is the dtype, the head counts and dims, the options and the
    device: batch, query and key lengths are dynamic, so a decode loop
    compiles once."""
    with _lock:
        return dict(_stats, size=len(_programs))


def clear_program_cache() -> None:
    from .serving import clear
    clear()  # the device plans (after waiting for their streams)
    with _lock:
        _programs.clear()
        _stats.update(hits=0, misses=0)


def _ty(shape, dtype):
    return "tensor<" + "x".join(shape) + "x" + dtype + ">"


def attention_ir(dtype, Hq, Hkv, D, Dv, causal, window, softcap, scale,
                 mask=None, sinks=False, alibi=False, rope=None,
                 key_rows=None, kv=None):
    """kvattn IR of one attention with dynamic B, L and S: arguments query
    [B, Hq, L, D], key [B, Hkv, S, D], value [B, Hkv, S, Dv], q_offset and
    kv_len (i64 [B]), and with `mask` = (batch dim, head dim) of a boolean
    mask [B | 1, Hq | 1, L, S] (1 where it broadcasts, None where it is
    full) the mask; with `sinks` / `alibi` the f32 [Hq] sinks / ALiBi
    slopes; with `rope` = (theta, rotary_dim, interleaved) the query
    rotated at its positions (#kvattn.rope), or with `rope` = ("tables",
    rotary_dim, interleaved, table dtype, P) by the tables rotary_cos and
    rotary_sin [P, rotary_dim / 2] (the last arguments); with `key_rows` "k_start"
    (ragged keys: key/value [1, Hkv, N, D], k_start i64 [B + 1]) or
    "cache_batch_idx" (key/value [C, Hkv, S, D], cache_batch_idx i64 [B])
    that operand; with `kv` = (format, k granularity, v granularity) an FP8
    cache (key/value of that format) and its f32 k_scale, v_scale last
    ([1], [Hkv] or [B, Hkv, S]); result out [B, Hq, L, Dv]."""
    rows = "1" if key_rows == "k_start" else "?"
    kv_elt = kv[0] if kv else dtype
    q = _ty(["?", str(Hq), "?", str(D)], dtype)
    k = _ty([rows, str(Hkv), "?", str(D)], kv_elt)
    v = _ty([rows, str(Hkv), "?", str(Dv)], kv_elt)
    o = _ty(["?", str(Hq), "?", str(Dv)], dtype)
    left, right = window if isinstance(window, tuple) else (window, None)
    attrs = (" causal" if causal else "") + \
        (f" window = {left}" if left else "") + \
        (f" window_right = {right}" if right is not None else "") + \
        (f" softcap = {softcap!r}" if softcap else "") + \
        (f" scale = {scale!r}" if scale is not None else "")
    tables = ""
    if rope is not None and rope[0] == "tables":
        # FlashAttention's rotary_cos / rotary_sin [P, R/2] (P static: the
        # GPU kernels compile it in).
        _, rotary_dim, interleaved, table_dtype, table_rows = rope
        attrs += (f" rope = <rotary_dim = {rotary_dim}"
                  + (", interleaved" if interleaved else "") + ">")
        tables = _ty([str(table_rows), str(rotary_dim // 2)], table_dtype)
        attrs += (f" rotary_cos(%cos : {tables}) rotary_sin(%sin : "
                  f"{tables})")
    elif rope is not None:
        theta, rotary_dim, interleaved = rope
        attrs += (f" rope = <rotary_dim = {rotary_dim}, theta = "
                  f"{float(theta)!r}" + (", interleaved" if interleaved
                                          else "") + ">")
    m = m_arg = m_use = ""
    if mask is not None:
        m = _ty([mask[0] or "?", mask[1] or str(Hq), "?", "?"], "i1")
        m_arg, m_use = f", %m: {m}", f" mask(%m : {m})"
    per_head = _ty([str(Hq)], "f32")
    if sinks:
        m_arg += f", %sinks: {per_head}"
        m_use += f" sinks(%sinks : {per_head})"
    if alibi:
        m_arg += f", %alibi: {per_head}"
        m_use += f" alibi_slopes(%alibi : {per_head})"
    # (In the op's assembly k_start / cache_batch_idx come before q_offset.)
    rows_use = f" {key_rows}(%rows : tensor<?xi64>)" if key_rows else ""
    if key_rows:
        m_arg += ", %rows: tensor<?xi64>"
    if kv:
        for name, gran in (("k_scale", kv[1]), ("v_scale", kv[2])):
            t = {"tensor": _ty(["1"], "f32"), "head": _ty([str(Hkv)], "f32"),
                 "token": _ty([rows, str(Hkv), "?"], "f32")}[gran]
            m_arg += f", %{name}: {t}"
            m_use += f" {name}(%{name} : {t})"
    if tables:
        m_arg += f", %cos: {tables}, %sin: {tables}"
    return (f"func.func @attention(%q: {q}, %k: {k}, %v: {v},\n"
            f"    %qo: tensor<?xi64>, %kl: tensor<?xi64>{m_arg}) -> {o} {{\n"
            f"  %o = kvattn.attention %q, %k, %v{rows_use} q_offset(%qo : "
            f"tensor<?xi64>) kv_len(%kl : tensor<?xi64>){m_use}{attrs}\n"
            f"      : {q}, {k}, {v} -> {o}\n"
            f"  return %o : {o}\n}}\n")


def append_ir(dtype, H, D, rope=None):
    """kvattn IR of one cache write: update [B, H, L, D] into cache
    [B, H, S, D] at pos (i64 [B]); result the written cache. With `rope` =
    ("tables", rotary_dim, interleaved, table dtype, P) the update rotated
    at pos[b] + t by the tables rotary_cos / rotary_sin [P, rotary_dim / 2]
    (the last arguments)."""
    u = _ty(["?", str(H), "?", str(D)], dtype)
    c = _ty(["?", str(H), "?", str(D)], dtype)
    args = use = ""
    if rope is not None:
        _, rotary_dim, interleaved, table_dtype, rows = rope
        t = _ty([str(rows), str(rotary_dim // 2)], table_dtype)
        args = f", %cos: {t}, %sin: {t}"
        use = (f" rope = <rotary_dim = {rotary_dim}"
               + (", interleaved" if interleaved else "")
               + f"> rotary_cos(%cos : {t}) rotary_sin(%sin : {t})")
    return (f"func.func @append(%u: {u}, %c: {c}, %p: tensor<?xi64>{args})"
            f" -> {c} {{\n  %r = kvattn.append %u into %c at %p{use} : {u} "
            f"into {c}, tensor<?xi64>\n  return %r : {c}\n}}\n")


def _program(key, make):
    with _lock:
        program = _programs.get(key)
        if program is not None:
            _stats["hits"] += 1
            return program
    program = make()
    with _lock:
        _stats["misses"] += 1
        return _programs.setdefault(key, program)


def _cpu_program(ir):
    """The CPU program of `ir`; its appends write the caller's cache in
    place (the ops pass the cache as input and output: a decode step's
    write costs its rows, not a copy of the cache)."""
    import kvattn
    return kvattn.CpuProgram(ir, threads=0, in_place_appends=True)


# --- the CPU kernels: kvattn_cpu_run on the tensors' own memory --------------

def _host_tensor(what: str, t: torch.Tensor, keep: list):
    """A kvattn_host_tensor over t's memory: a dense CPU tensor by its data
    pointer (what the op's checks leave; a DLPack export per tensor cost
    15 us of a call's ~370), anything else read by DLPack, whose errors
    name what is wrong with it."""
    if is_dense_host(t):
        return host_tensor(t, keep), None
    fmt = _FP8.get(t.dtype)  # FP8: the codes, by their uint8 view
    view = host_view((t.view(torch.uint8) if fmt else t).detach())
    keep.append(view)
    shape = (capi.ctypes.c_int64 * max(len(view.shape), 1))(*view.shape)
    keep.append(shape)
    return capi.HostTensor(view.ptr or None,
                           capi.DTYPE_CODE[fmt or view.dtype],
                           len(view.shape), shape), view


def _cpu_run(program, inputs: Sequence[Tuple[str, torch.Tensor]],
             out: Union[torch.Tensor, Sequence[torch.Tensor]], what: str):
    """Runs a CpuProgram: inputs and the output(s) (one tensor, or one per
    result: out, lse) by pointer (DLPack); the C API validates them
    (dtypes, shapes, positions) before it runs."""
    ctypes = capi.ctypes
    keep: list = []
    tensors = [_host_tensor(name, t, keep)[0] for name, t in inputs]
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    results = [_host_tensor("out", t, keep)[0] for t in outs]
    array = (capi.HostTensor * len(tensors))(*tensors)
    result = (capi.HostTensor * len(results))(*results)
    error = ctypes.c_void_p()
    rc = program.api.lib.kvattn_cpu_run(program.handle, array, len(tensors),
                                        result, len(results),
                                        ctypes.byref(error))
    program.api.check(rc, error, what)


def _dense(t: torch.Tensor) -> torch.Tensor:
    """t itself when its memory is dense row-major, else a dense copy (a
    [B, S, H, D] tensor read as [B, H, S, D]: the C API takes row-major
    buffers; docs/torch.md says what this costs)."""
    return t if t.is_contiguous() else t.contiguous()


def _signature(dtype, dims, causal, window, softcap, scale, mask, device,
               sinks=False, alibi=False, rope=None, key_rows=None, kv=None):
    B, Hq, Hkv, L, S, D, Dv = dims
    return ("attention", dtype, Hq, Hkv, D, Dv, causal, window, softcap,
            scale, mask, str(device), sinks, alibi, rope, key_rows, kv)


def _check_rope(rotary_theta, rotary_dim, rotary_interleaved, dims):
    """The rotary embedding keywords: None without rotary_theta, else
    (theta, rotary_dim, interleaved) with rotary_dim 0 meaning D."""
    if not rotary_theta:
        if rotary_dim or rotary_interleaved:
            raise KVAttnValueError("rotary_dim / rotary_interleaved need "
                                   "rotary_theta (the RoPE base)")
        return None
    D = dims[5]
    theta = float(rotary_theta)
    if not theta > 1.0 or theta != theta or theta == float("inf"):
        raise KVAttnValueError(f"rotary_theta = {rotary_theta} must be a "
                               "finite value above 1")
    r = int(rotary_dim) or D
    if r < 2 or r % 2 or r > D:
        raise KVAttnValueError(f"rotary_dim = {r} must be even, at least 2 "
                               f"and at most the head dim D = {D}")
    return (theta, r, bool(rotary_interleaved))


def _check_rotary_tables(rotary_cos, rotary_sin, rotary_theta, rotary_dim,
                         rotary_interleaved, device, D):
    """FlashAttention's rotary_cos / rotary_sin ([P, rotary_dim / 2] of one
    float dtype, on `device`, rotary_dim <= the head dim D): ("tables",
    rotary_dim, interleaved, dtype, P), or None without them."""
    if rotary_cos is None and rotary_sin is None:
        return None
    if rotary_cos is None or rotary_sin is None:
        raise KVAttnValueError("rotary_cos and rotary_sin come together: "
                               + ("rotary_sin" if rotary_cos is not None
                                  else "rotary_cos") + " is missing")
    if rotary_theta:
        raise KVAttnValueError("rotary_theta and rotary_cos / rotary_sin are "
                               "exclusive: the tables replace the formula")
    for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
        _tensor(name, t)
        if t.dim() != 2:
            raise KVAttnValueError(f"{name} must be [P, rotary_dim / 2], got "
                                   f"shape {tuple(t.shape)}")
        if t.device != device:
            raise KVAttnValueError(f"{name} is on {t.device}, the "
                                   f"attention's tensors on {device}")
    dtype = _float_dtype("rotary_cos", rotary_cos)
    if rotary_sin.dtype != rotary_cos.dtype:
        raise KVAttnTypeError(f"rotary_sin has dtype {rotary_sin.dtype}, "
                              f"rotary_cos {rotary_cos.dtype}")
    if tuple(rotary_sin.shape) != tuple(rotary_cos.shape):
        raise KVAttnValueError(f"rotary_sin has shape "
                               f"{tuple(rotary_sin.shape)}, rotary_cos "
                               f"{tuple(rotary_cos.shape)}")
    P, half = rotary_cos.shape
    r = 2 * half
    if rotary_dim and int(rotary_dim) != r:
        raise KVAttnValueError(f"rotary_dim = {rotary_dim} but rotary_cos "
                               f"has {half} columns (rotary_dim / 2)")
    if r < 2 or r > D or P < 1:
        raise KVAttnValueError(f"rotary_cos has shape {(P, half)}: "
                               f"rotary_dim = 2 * {half} must be at least 2 "
                               f"and at most the head dim D = {D}, and the "
                               f"table needs a row")
    return ("tables", r, bool(rotary_interleaved), dtype, P)


def _key_rows(k_start, cache_batch_idx, batch, device):
    """The key-row operand: (None, None), ("k_start", int64 [B + 1]) or
    ("cache_batch_idx", int64 [B])."""
    if k_start is not None and cache_batch_idx is not None:
        raise KVAttnValueError("k_start (cu_seqlens_k) and cache_batch_idx "
                               "do not combine: the packed keys have one "
                               "cache row")
    if k_start is not None:
        return "k_start", _positions("k_start", k_start, batch + 1, device)
    if cache_batch_idx is not None:
        return "cache_batch_idx", _positions("cache_batch_idx",
                                             cache_batch_idx, batch, device)
    return None, None


def _check_kv_scales(key, k_scale, v_scale, query, dims, layout):
    """An FP8 cache's scales: None for a cache in the query's dtype (no
    scale allowed), else (format, k granularity, v granularity), each
    granularity "tensor" ([1] or a 0-d tensor), "head" ([Hkv]) or "token"
    (the cache's shape without D, in its layout). float32 on the query's
    device; the values (positive and finite) are checked by the C API (CPU)
    or on the device (check())."""
    fmt = _FP8.get(key.dtype)
    if fmt is None:
        for what, t in (("k_scale", k_scale), ("v_scale", v_scale)):
            if t is not None:
                raise KVAttnValueError(
                    f"{what} dequantises an FP8 cache, but key and value "
                    f"are {key.dtype}: drop it, or store the cache as "
                    "torch.float8_e4m3fn or torch.float8_e5m2")
        return None
    Hkv = dims[2]
    rows = tuple(key.shape[:3])
    grans = []
    for what, t in (("k_scale", k_scale), ("v_scale", v_scale)):
        if t is None:
            raise KVAttnValueError(
                f"an FP8 KV cache ({key.dtype}) needs k_scale and v_scale "
                "(torch.float32: per tensor [1], per KV head [Hkv] or per "
                "token and head, the cache's shape without D)")
        grans.append(_scale_granularity(
            what, t, query, Hkv, rows, lambda shape, what=what: (
                f"{what} has shape {shape}: a KV scale is per tensor [1], "
                f"per KV head [Hkv] = [{Hkv}] or per token and head "
                f"{list(rows)} (the cache's shape without D, {layout})")))
    return (fmt, grans[0], grans[1])


def _scale_tensor(t, gran, layout):
    """A scale as the IR takes it: [1], [Hkv], or [B, Hkv, S] (dense)."""
    if gran == "tensor":
        return t.reshape(1)
    if gran == "token" and layout == "bshd":
        return t.transpose(1, 2).contiguous()
    return _dense(t)


def _check_per_head(what, t, query, dims):
    """sinks / alibi_slopes: a float32 [Hq] tensor on the query's device
    (FlashAttention's and gpt-oss's convention), or None."""
    if t is None:
        return False
    _tensor(what, t)
    Hq = dims[1]
    if t.dtype != torch.float32:
        raise KVAttnTypeError(f"{what} has dtype {t.dtype}; it must be "
                              "torch.float32 (one value per query head)")
    _on_query_device(what, t, query)
    if t.dim() != 1 or t.shape[0] != Hq:
        raise KVAttnValueError(f"{what} has shape {tuple(t.shape)}; it must "
                               f"be [Hq] = [{Hq}] (one value per query head)")
    return True


def _check_mask(mask, query, dims):
    """A boolean mask [B | 1, Hq | 1, L, S] (True: allowed): its
    broadcast dims for attention_ir, or None without a mask."""
    if mask is None:
        return None
    _tensor("mask", mask)
    B, Hq, Hkv, L, S, D, Dv = dims
    if mask.dtype != torch.bool:
        raise KVAttnTypeError(f"mask has dtype {mask.dtype}; it must be "
                              "torch.bool (True: the key is allowed)")
    _on_query_device("mask", mask, query)
    if mask.dim() != 4 or mask.shape[0] not in (1, B) or \
            mask.shape[1] not in (1, Hq) or tuple(mask.shape[2:]) != (L, S):
        raise KVAttnValueError(
            f"mask has shape {tuple(mask.shape)}; it must be [B or 1, Hq or "
            f"1, L, S] = [{B} or 1, {Hq} or 1, {L}, {S}]")
    return ("1" if mask.shape[0] == 1 and B != 1 else None,
            "1" if mask.shape[1] == 1 and Hq != 1 else None)


def _attention_into(query, key, value, q_offset, kv_len, mask, causal,
                    window, softcap, scale, layout, out, sinks=None,
                    alibi_slopes=None, k_start=None, cache_batch_idx=None,
                    rotary_theta=0.0, rotary_dim=0, rotary_interleaved=False,
                    k_scale=None, v_scale=None, rotary_cos=None,
                    rotary_sin=None):
    """Checks everything, then runs the attention into `out` (the [B, Hq,
    L, Dv] tensor in `layout`)."""
    layout = _layout(layout)
    B0 = _to_bhsd(_tensor("query", query), layout).shape[0]
    key_rows, rows = _key_rows(k_start, cache_batch_idx, B0, query.device)
    dtype, dims = _check_attention(query, key, value, layout, key_rows)
    window, softcap, scale = _check_options(causal, window, softcap, scale)
    B, Hq, Hkv, L, S, D, Dv = dims
    mask_dims = _check_mask(mask, query, dims)
    has_sinks = _check_per_head("sinks", sinks, query, dims)
    has_alibi = _check_per_head("alibi_slopes", alibi_slopes, query, dims)
    rope = _check_rotary_tables(rotary_cos, rotary_sin, rotary_theta,
                                rotary_dim, rotary_interleaved, query.device,
                                dims[5])
    if rope is None:
        rope = _check_rope(rotary_theta, rotary_dim, rotary_interleaved,
                           dims)
    tables = [] if rope is None or rope[0] != "tables" else [
        ("rotary_cos", _dense(rotary_cos.detach())),
        ("rotary_sin", _dense(rotary_sin.detach()))]
    kv_fp8 = _check_kv_scales(key, k_scale, v_scale, query, dims, layout)
    scales = [] if kv_fp8 is None else [
        ("k_scale", _scale_tensor(k_scale.detach(), kv_fp8[1], layout)),
        ("v_scale", _scale_tensor(v_scale.detach(), kv_fp8[2], layout))]
    if kv_len is None and key_rows == "k_start":
        kv_len = rows[1:] - rows[:-1]  # each sequence's packed rows
    kv = (torch.full((B,), S, dtype=torch.int64, device=query.device)
          if kv_len is None else _positions("kv_len", kv_len, B,
                                            query.device))
    qo = (kv - L) if q_offset is None else _positions("q_offset", q_offset,
                                                      B, query.device)
    want = (B, Hq, L, Dv) if layout == "bhsd" else (B, L, Hq, Dv)
    _check_out(out, query, want)
    if query.device.type == "cpu":
        # The C API checks q_offset and kv_len (offsets non-negative,
        # kv_len <= S, ...) with the reference's messages.
        key_ = _signature(dtype, dims, causal, window, softcap, scale,
                          mask_dims, "cpu", has_sinks, has_alibi, rope,
                          key_rows, kv_fp8)
        program = _program(key_, lambda: _cpu_program(attention_ir(
            dtype, Hq, Hkv, D, Dv, causal, window, softcap, scale,
            mask_dims, has_sinks, has_alibi, rope, key_rows, kv_fp8)))
        q, k, v = (_dense(_to_bhsd(t, layout)) for t in (query, key, value))
        o = _to_bhsd(out, layout)
        dense_out = o.is_contiguous()
        target = o if dense_out else torch.empty(
            (B, Hq, L, Dv), dtype=out.dtype)
        inputs = [("query", q), ("key", k), ("value", v),
                  ("q_offset", qo.contiguous()), ("kv_len", kv.contiguous())]
        if mask is not None:
            inputs.append(("mask", _dense(mask)))
        if has_sinks:
            inputs.append(("sinks", _dense(sinks.detach())))
        if has_alibi:
            inputs.append(("alibi_slopes", _dense(alibi_slopes.detach())))
        if key_rows:
            inputs.append((key_rows, rows.contiguous()))
        inputs += scales + tables
        _cpu_run(program, inputs, target, "kvattn::attention")
        if not dense_out:
            o.copy_(target)
        return out
    return _cuda_attention(query, key, value, qo, kv, mask, mask_dims, causal,
                           window, softcap, scale, layout, out, dtype, dims,
                           sinks, alibi_slopes, rope, key_rows, rows,
                           kv_fp8, dict(scales + tables))


def _check_result(what, t, query, dtype, shape):
    """A caller's result tensor (out=, lse=): `dtype`, the query's device,
    exactly `shape`, its last dim contiguous."""
    _tensor(what, t)
    if t.dtype != dtype:
        raise KVAttnTypeError(f"{what} has dtype {t.dtype}; it must be "
                              f"{dtype}")
    _on_query_device(what, t, query)
    if tuple(t.shape) != tuple(shape):
        raise KVAttnValueError(f"{what} has shape {tuple(t.shape)}, the "
                               f"attention writes {tuple(shape)}")
    if t.numel() and t.stride(-1) != 1:
        raise KVAttnValueError(f"{what}: the last dim is not contiguous "
                               f"(strides {tuple(t.stride())})")


def _check_out(out, query, want):
    _check_result("out", out, query, query.dtype, want)


# --- the CUDA kernels: the kvattn runtime on torch's current stream ----------
# Written for a GPU; never executed here (no GPU): test/gpu/run-gpu-checks.sh
# runs python/tests/torch/test_torch_cuda.py where one is lent.

_runtimes: Dict[int, object] = {}


def _cuda_runtime(device: torch.device):
    import kvattn
    index = device.index if device.index is not None else \
        torch.cuda.current_device()
    with _lock:
        rt = _runtimes.get(index)
        if rt is None:
            rt = _runtimes[index] = kvattn.Runtime(device=index)
    # Launches go on torch's current stream of that device: kvattn never
    # synchronises, torch's stream order does.
    rt.set_stream(torch.cuda.current_stream(device).cuda_stream)
    return rt


def _cuda_attention(query, key, value, qo, kv, mask, mask_dims, causal,
                    window, softcap, scale, layout, out, dtype, dims,
                    sinks=None, alibi_slopes=None, rope=None, key_rows=None,
                    rows=None, kv_fp8=None, scales=None):
    from .serving import device_run
    B, Hq, Hkv, L, S, D, Dv = dims
    rt = _cuda_runtime(query.device)
    has_sinks, has_alibi = sinks is not None, alibi_slopes is not None
    key_ = _signature(dtype, dims, causal, window, softcap, scale, mask_dims,
                      query.device, has_sinks, has_alibi, rope, key_rows,
                      kv_fp8)
    q, k, v = (_dense(_to_bhsd(t, layout)) for t in (query, key, value))
    o = _to_bhsd(out, layout)
    target = o if o.is_contiguous() else torch.empty(
        (B, Hq, L, Dv), dtype=out.dtype, device=out.device)
    # Device pointers for every tensor, q_offset and kv_len included (int64
    # device tensors: no host copy, no wait); the plan validates them on the
    # device (kvattn.torch.check()).
    device = query.device
    tensors = {"query": q, "key": k, "value": v, "out": target,
               "q_offset": qo.to(device, torch.int64).contiguous(),
               "kv_len": kv.to(device, torch.int64).contiguous()}
    if mask is not None:
        tensors["mask"] = _dense(mask)
    if has_sinks:
        tensors["sinks"] = _dense(sinks)
    if has_alibi:
        tensors["alibi_slopes"] = _dense(alibi_slopes)
    sizes = {"B": B, "Hq": Hq, "Hkv": Hkv, "L": L, "S": S}
    if key_rows:
        tensors[key_rows] = rows.to(device, torch.int64).contiguous()
        if key_rows == "cache_batch_idx":
            sizes["cache_rows"] = k.shape[0]
    tensors.update(scales or {})
    with _program_stats(key_):
        device_run(rt, key_, lambda: attention_ir(
            dtype, Hq, Hkv, D, Dv, causal, window, softcap, scale, mask_dims,
            has_sinks, has_alibi, rope, key_rows, kv_fp8),
            {n: t.data_ptr() for n, t in tensors.items()}, sizes,
            torch.cuda.current_stream(device).cuda_stream)
    if target is not o:
        o.copy_(target)
    return out


class _program_stats:
    """Counts a device call in program_cache_info (a hit when its
    signature ran before)."""

    def __init__(self, key):
        self.key = ("device",) + tuple(key)

    def __enter__(self):
        with _lock:
            hit = self.key in _programs
            _stats["hits" if hit else "misses"] += 1
            _programs.setdefault(self.key, True)

    def __exit__(self, *exc):
        return False


def check(device=None) -> None:
    """Raises the first metadata violation a CUDA call of kvattn::attention,
    attention_out or append recorded on the device since the last check
    (KVAttnError; waits for the stream), and clears it. docs/torch.md
    "CUDA"."""
    from .serving import check as _check
    _check(device)


# --- the ops --------------------------------------------------------------

def _out_shape(query, value, layout):
    if layout == "bshd":
        B, L, Hq, _ = query.shape
        return (B, L, Hq, value.shape[3])
    B, Hq, L, _ = query.shape
    return (B, Hq, L, value.shape[3])


def _window(window, window_right):
    """The ops' window and window_right (-1: none) as _check_options takes
    them."""
    return window if window_right == -1 else (window, window_right)


@torch.library.custom_op("kvattn::attention", mutates_args=())
def _attention_op(query: torch.Tensor, key: torch.Tensor,
                  value: torch.Tensor, q_offset: Optional[torch.Tensor],
                  kv_len: Optional[torch.Tensor], mask: Optional[torch.Tensor],
                  causal: bool, window: int, softcap: float,
                  scale: Optional[float], layout: str,
                  sinks: Optional[torch.Tensor] = None,
                  alibi_slopes: Optional[torch.Tensor] = None,
                  k_start: Optional[torch.Tensor] = None,
                  cache_batch_idx: Optional[torch.Tensor] = None,
                  rotary_theta: float = 0.0, rotary_dim: int = 0,
                  rotary_interleaved: bool = False,
                  k_scale: Optional[torch.Tensor] = None,
                  v_scale: Optional[torch.Tensor] = None,
                  rotary_cos: Optional[torch.Tensor] = None,
                  rotary_sin: Optional[torch.Tensor] = None,
                  window_right: int = -1) -> torch.Tensor:
    out = query.new_empty(_out_shape(query, value, _layout(layout)))
    return _attention_into(query, key, value, q_offset, kv_len, mask, causal,
                           _window(window, window_right), softcap, scale,
                           layout, out, sinks,
                           alibi_slopes, k_start, cache_batch_idx,
                           rotary_theta, rotary_dim, rotary_interleaved,
                           k_scale, v_scale, rotary_cos, rotary_sin)


@_attention_op.register_fake
def _(query, key, value, q_offset, kv_len, mask, causal, window, softcap,
      scale, layout, sinks=None, alibi_slopes=None, k_start=None,
      cache_batch_idx=None, rotary_theta=0.0, rotary_dim=0,
      rotary_interleaved=False, k_scale=None, v_scale=None, rotary_cos=None,
      rotary_sin=None, window_right=-1):
    return query.new_empty(_out_shape(query, value, layout))


@torch.library.custom_op("kvattn::attention_out", mutates_args=("out",))
def _attention_out_op(query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, q_offset: Optional[torch.Tensor],
                      kv_len: Optional[torch.Tensor],
                      mask: Optional[torch.Tensor], causal: bool,
                      window: int, softcap: float, scale: Optional[float],
                      layout: str, out: torch.Tensor,
                      sinks: Optional[torch.Tensor] = None,
                      alibi_slopes: Optional[torch.Tensor] = None,
                      k_start: Optional[torch.Tensor] = None,
                      cache_batch_idx: Optional[torch.Tensor] = None,
                      rotary_theta: float = 0.0, rotary_dim: int = 0,
                      rotary_interleaved: bool = False,
                      k_scale: Optional[torch.Tensor] = None,
                      v_scale: Optional[torch.Tensor] = None,
                      rotary_cos: Optional[torch.Tensor] = None,
                      rotary_sin: Optional[torch.Tensor] = None,
                      window_right: int = -1) -> None:
    _attention_into(query, key, value, q_offset, kv_len, mask, causal,
                    _window(window, window_right), softcap, scale, layout,
                    out, sinks, alibi_slopes,
                    k_start, cache_batch_idx, rotary_theta, rotary_dim,
                    rotary_interleaved, k_scale, v_scale, rotary_cos,
                    rotary_sin)


@_attention_out_op.register_fake
def _(query, key, value, q_offset, kv_len, mask, causal, window, softcap,
      scale, layout, out, sinks=None, alibi_slopes=None, k_start=None,
      cache_batch_idx=None, rotary_theta=0.0, rotary_dim=0,
      rotary_interleaved=False, k_scale=None, v_scale=None, rotary_cos=None,
      rotary_sin=None, window_right=-1):
    return None


def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              *, q_offset: Union[torch.Tensor, Sequence[int], int, None] = None,
              kv_len: Union[torch.Tensor, Sequence[int], int, None] = None,
              mask: Optional[torch.Tensor] = None, causal: bool = True, window: int = 0, softcap: float = 0.0,
              scale: Optional[float] = None, layout: str = "bhsd",
              out: Optional[torch.Tensor] = None,
              sinks: Optional[torch.Tensor] = None,
              alibi_slopes: Optional[torch.Tensor] = None,
              k_start: Optional[torch.Tensor] = None,
              cu_seqlens_k: Optional[torch.Tensor] = None,
              cache_batch_idx: Optional[torch.Tensor] = None,
              rotary_theta: Optional[float] = None, rotary_dim: int = 0,
              rotary_interleaved: bool = False,
              k_scale: Optional[torch.Tensor] = None,
              v_scale: Optional[torch.Tensor] = None,
              rotary_cos: Optional[torch.Tensor] = None,
              rotary_sin: Optional[torch.Tensor] = None,
              window_size: Optional[Tuple[int, int]] = None
              ) -> torch.Tensor:
    """Attention with explicit positions (docs/semantics.md): query row i of
    batch b sits at position q_offset[b] + i, key j at j; key j is valid
    when j < kv_len[b] (default: S); causal: key j is seen when j <=
    q_offset[b] + i; window W: and q_offset[b] + i - j < W; softcap c:
    scores c * tanh(s / c); window_size (left, right), FlashAttention's
    (instead of `window`; -1: unbounded): key j is seen when
    qp - left <= j (window W = left + 1) and, without causal, j <= qp +
    right (a two-sided window; with causal, right must be 0 or -1); scale
    default 1/sqrt(D); a boolean `mask`
    [B | 1, Hq | 1, L, S] also excludes the keys where it is False. q_offset defaults to
    kv_len - L: the queries are the last L tokens (a cached append, decode).
    sinks (float32 [Hq], gpt-oss's attention sinks): a logit per query head
    in every row's softmax denominator that contributes no value (a row
    without allowed keys gives 0). alibi_slopes (float32 [Hq],
    FlashAttention's): -alibi_slopes[h] * |qp - kp| is added to each score,
    from the positions. rotary_theta (the RoPE base; rotary_dim, 0: D,
    even, partial when below D; rotary_interleaved: GPT-J pairs instead of
    GPT-NeoX halves): the query is rotated inside the kernel at its
    positions q_offset[b] + i, in f32 (docs/semantics.md, "Rotary
    embedding"); the keys are expected rotated at their positions j.
    rotary_cos / rotary_sin (FlashAttention's flash_attn_with_kvcache
    tables, [P, rotary_dim / 2] of one float dtype, row = position;
    exclusive with rotary_theta; rotary_dim, if given, must be twice their
    columns): the query is rotated by row q_offset[b] + i of the tables
    instead of a base's formula (any frequency scaling); a row past P is
    refused by name (CPU: before anything runs; CUDA: by check()).

    k_start (alias cu_seqlens_k, FlashAttention's; int [B + 1]): ragged
    keys without pages: key/value are one packed buffer [1, Hkv, N, D|Dv]
    and batch b's key j is row k_start[b] + j, for j < kv_len[b] (default
    k_start[b + 1] - k_start[b]). cache_batch_idx (int [B], FlashAttention's
    kvcache API): key/value are [C, Hkv, S, D|Dv] and batch b reads cache
    row cache_batch_idx[b] (in [0, C); two batches may read one row).

    FP8 caches (vLLM's and FlashInfer's k_scale / v_scale): key and value
    as torch.float8_e4m3fn or float8_e5m2 (both one dtype), read as
    float(code) * scale; k_scale / v_scale float32 per tensor ([1] or 0-d),
    per KV head ([Hkv]) or per token and head (the cache's shape without
    D: [B, Hkv, S], bshd [B, S, Hkv]); every scale positive and finite
    (checked before anything runs on the CPU, on the device by check()).
    The query and out stay f32/f16/bf16.

    layout "bhsd": query [B, Hq, L, D], key/value [B, Hkv, S, D|Dv], out
    [B, Hq, L, Dv]; "bshd": [B, L, Hq, D] etc. (the sequence before the
    heads). GQA: Hq a multiple of Hkv. Returns `out` (allocated by torch
    unless given)."""
    if q_offset is not None and not isinstance(q_offset, torch.Tensor):
        q_offset = _positions("q_offset", q_offset,
                              _tensor("query", query).shape[0], query.device)
    if kv_len is not None and not isinstance(kv_len, torch.Tensor):
        kv_len = _positions("kv_len", kv_len,
                            _tensor("query", query).shape[0], query.device)
    # Checked here too, so that misuse is a KVAttnError before torch's
    # dispatcher sees the arguments (it would raise its own for a wrong
    # type).
    if cu_seqlens_k is not None:
        if k_start is not None:
            raise KVAttnValueError("give k_start or its alias cu_seqlens_k, "
                                   "not both")
        k_start = cu_seqlens_k
    _layout(layout)
    batch = _to_bhsd(_tensor("query", query), layout).shape[0]
    key_rows, rows = _key_rows(k_start, cache_batch_idx, batch, query.device)
    k_start = rows if key_rows == "k_start" else None
    cache_batch_idx = rows if key_rows == "cache_batch_idx" else None
    dims = _check_attention(query, key, value, layout, key_rows)[1]
    window, window_right = _window_size(window, window_size, causal)
    window, softcap, scale = _check_options(
        causal, _window(window, window_right), softcap, scale)
    window = window[0] if isinstance(window, tuple) else window
    _check_per_head("sinks", sinks, query, dims)
    _check_per_head("alibi_slopes", alibi_slopes, query, dims)
    theta = float(rotary_theta or 0.0)
    if _check_rotary_tables(rotary_cos, rotary_sin, theta, rotary_dim,
                            rotary_interleaved, query.device,
                            dims[5]) is None:
        _check_rope(theta, rotary_dim, rotary_interleaved, dims)
    _check_kv_scales(key, k_scale, v_scale, query, dims, layout)
    if out is None:
        return torch.ops.kvattn.attention(query, key, value, q_offset, kv_len,
                                          mask, causal, window, softcap,
                                          scale, layout, sinks, alibi_slopes,
                                          k_start, cache_batch_idx, theta,
                                          rotary_dim, rotary_interleaved,
                                          k_scale, v_scale, rotary_cos,
                                          rotary_sin, window_right)
    torch.ops.kvattn.attention_out(query, key, value, q_offset, kv_len, mask,
                                   causal, window, softcap, scale, layout,
                                   out, sinks, alibi_slopes, k_start,
                                   cache_batch_idx, theta, rotary_dim,
                                   rotary_interleaved, k_scale, v_scale,
                                   rotary_cos, rotary_sin, window_right)
    return out


def _window_size(window, window_size, causal):
    """`window` or FlashAttention's `window_size` (left, right; -1:
    unbounded) as the ops' window W (keys before the query, 0: none) and
    window_right (-1: none)."""
    if window_size is None:
        return window, -1
    if window:
        raise KVAttnValueError("give window or window_size, not both")
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise KVAttnTypeError(f"window_size must be (left, right), got "
                              f"{window_size!r}")
    left = capi.check_int("window_size[0]", window_size[0], -1)
    right = capi.check_int("window_size[1]", window_size[1], -1)
    if causal:
        if right not in (-1, 0):
            raise KVAttnValueError(
                f"window_size = ({left}, {right}) with causal=True: causal "
                "allows no key after the query (right must be 0 or -1)")
        right = -1
    elif left >= 0 and right == -1:
        raise KVAttnValueError(
            f"window_size = ({left}, -1) without causal: keys before the "
            "query bounded and none after it is not a window kvattn takes "
            "(give a right bound, or causal=True)")
    return left + 1, right


def _append_into(cache, update, pos, layout, rotary_cos=None,
                 rotary_sin=None, rotary_interleaved=False):
    layout = _layout(layout)
    _tensor("cache", cache)
    _tensor("update", update)
    dtype = _float_tensor("cache", cache)
    if _float_tensor("update", update) != dtype:
        raise KVAttnTypeError(f"update has dtype {update.dtype}, cache "
                              f"{cache.dtype}")
    if update.device != cache.device:
        raise KVAttnValueError(f"update is on {update.device}, cache on "
                               f"{cache.device}")
    c, u = _to_bhsd(cache, layout), _to_bhsd(update, layout)
    B, H, S, D = c.shape
    if u.shape[0] != B or u.shape[1] != H or u.shape[3] != D:
        raise KVAttnValueError(f"update {tuple(update.shape)} does not fit "
                               f"cache {tuple(cache.shape)} ({layout})")
    p = _positions("pos", pos, B, cache.device)
    rope = _check_rotary_tables(rotary_cos, rotary_sin, 0.0, 0,
                                rotary_interleaved, cache.device, D)
    if rope is None and rotary_interleaved:
        raise KVAttnValueError("rotary_interleaved needs rotary_cos and "
                               "rotary_sin")
    tables = [] if rope is None else [
        ("rotary_cos", _dense(rotary_cos.detach())),
        ("rotary_sin", _dense(rotary_sin.detach()))]
    if cache.device.type == "cuda":
        return _cuda_append(c, u, p, dtype, rope, dict(tables))
    if cache.device.type != "cpu":
        raise KVAttnValueError(f"cache is on {cache.device}: kvattn::append "
                               "runs on the CPU and CUDA devices")
    program = _program(("append", dtype, H, D, "cpu", rope),
                       lambda: _cpu_program(append_ir(dtype, H, D, rope)))
    dense = c.is_contiguous()
    target = c if dense else c.contiguous()
    _cpu_run(program, [("update", _dense(u)), ("cache", target),
                       ("pos", p.contiguous())] + tables, target,
             "kvattn::append")
    if not dense:
        c.copy_(target)


def _cuda_append(c, u, p, dtype, rope=None, tables=None):
    """The runtime's append kernel (a plan of append_ir): update, cache and
    pos as device pointers (and RoPE's tables), pos validated on the device
    (check())."""
    from .serving import device_run
    B, H, S, D = c.shape
    device = c.device
    rt = _cuda_runtime(device)
    key_ = ("append", dtype, H, D, str(device), rope)
    target = c if c.is_contiguous() else c.contiguous()
    tensors = {"update": _dense(u), "cache": target,
               "pos": p.to(device, torch.int64).contiguous()}
    tensors.update(tables or {})
    with _program_stats(key_):
        device_run(rt, key_, lambda: append_ir(dtype, H, D, rope),
                   {n: t.data_ptr() for n, t in tensors.items()},
                   {"B": B, "Hkv": H, "L": u.shape[2], "S": S},
                   torch.cuda.current_stream(device).cuda_stream)
    if target is not c:
        c.copy_(target)


@torch.library.custom_op("kvattn::append", mutates_args=("cache",))
def _append_op(cache: torch.Tensor, update: torch.Tensor, pos: torch.Tensor,
               layout: str, rotary_cos: Optional[torch.Tensor] = None,
               rotary_sin: Optional[torch.Tensor] = None,
               rotary_interleaved: bool = False) -> None:
    _append_into(cache, update, pos, layout, rotary_cos, rotary_sin,
                 rotary_interleaved)


@_append_op.register_fake
def _(cache, update, pos, layout, rotary_cos=None, rotary_sin=None,
      rotary_interleaved=False):
    return None


def append(cache: torch.Tensor, update: torch.Tensor,
           pos: Union[torch.Tensor, Sequence[int], int],
           *, layout: str = "bhsd",
           rotary_cos: Optional[torch.Tensor] = None,
           rotary_sin: Optional[torch.Tensor] = None,
           rotary_interleaved: bool = False) -> torch.Tensor:
    """Writes update [B, H, L, D] into cache [B, H, S, D] at rows pos[b] ..
    pos[b] + L - 1, in place (kvattn.append; pos[b] + L <= S is checked).
    With rotary_cos / rotary_sin (FlashAttention's tables [P, rotary_dim /
    2], row = position; rotary_interleaved: GPT-J pairs) each written row
    t of batch b is rotated first, in f32, by row pos[b] + t of the tables
    (the keys as flash_attn_with_kvcache rotates k before the write); a row
    past P is refused by name. Returns `cache`."""
    _tensor("cache", cache)
    if not isinstance(pos, torch.Tensor):
        pos = _positions("pos", pos, cache.shape[0], cache.device)
    torch.ops.kvattn.append(cache, update, pos, _layout(layout), rotary_cos,
                            rotary_sin, rotary_interleaved)
    return cache



# --- tree masks (speculative decoding): ragged draft-token trees -------------

def tree_attention_ir(dtype, Hq, Hkv, D, Dv, causal, window, softcap, scale,
                      sinks=False, alibi=False):
    """kvattn IR of a ragged batch of draft-token trees: query [1, Hq, T,
    D] (the packed rows), key/value [B, Hkv, S, D|Dv], q_start (i64
    [B + 1]), q_offset and kv_len (i64 [B]), tree_parents (i64 [T]), then
    the optional f32 [Hq] sinks / ALiBi slopes; result out [1, Hq, T,
    Dv]."""
    q = _ty(["1", str(Hq), "?", str(D)], dtype)
    k = _ty(["?", str(Hkv), "?", str(D)], dtype)
    v = _ty(["?", str(Hkv), "?", str(Dv)], dtype)
    o = _ty(["1", str(Hq), "?", str(Dv)], dtype)
    attrs = (" causal" if causal else "") + \
        (f" window = {window}" if window else "") + \
        (f" softcap = {softcap!r}" if softcap else "") + \
        (f" scale = {scale!r}" if scale is not None else "")
    per_head = _ty([str(Hq)], "f32")
    m_arg = m_use = ""
    if sinks:
        m_arg += f", %sinks: {per_head}"
        m_use += f" sinks(%sinks : {per_head})"
    if alibi:
        m_arg += f", %alibi: {per_head}"
        m_use += f" alibi_slopes(%alibi : {per_head})"
    i64 = "tensor<?xi64>"
    return (f"func.func @attention(%q: {q}, %k: {k}, %v: {v},\n"
            f"    %qs: {i64}, %qo: {i64}, %kl: {i64}, %tp: {i64}{m_arg})"
            f" -> {o} {{\n"
            f"  %o = kvattn.attention %q, %k, %v q_start(%qs : {i64}) "
            f"q_offset(%qo : {i64}) kv_len(%kl : {i64}){m_use} "
            f"tree_parents(%tp : {i64}){attrs}\n"
            f"      : {q}, {k}, {v} -> {o}\n"
            f"  return %o : {o}\n}}\n")


def _index_vector(what, t, n, device):
    """An int64 [n] tensor (on the CPU) from a tensor or a list."""
    if not isinstance(t, torch.Tensor):
        if isinstance(t, bool) or not isinstance(t, (list, tuple)):
            raise KVAttnTypeError(f"{what} must be a tensor or a list of "
                                  f"ints, got {type(t).__name__}")
        t = torch.tensor([capi.check_int(f"{what}[{i}]", x)
                          for i, x in enumerate(t)], dtype=torch.int64)
    if t.dtype not in _INDEX_DTYPES:
        raise KVAttnTypeError(f"{what} has dtype {t.dtype}; it must be "
                              "torch.int32 or torch.int64")
    if t.dim() != 1 or (n is not None and t.shape[0] != n):
        raise KVAttnValueError(f"{what} must have shape [{n}], got "
                               f"{tuple(t.shape)}")
    if t.device != device:
        raise KVAttnValueError(f"{what} is on {t.device}, query on {device}")
    return t.to(torch.int64)


def _tree_attention_impl(query, key, value, cu_seqlens_q, kv_len,
                         tree_parents, custom_mask, mask_indptr, causal,
                         window, softcap, scale, sinks, alibi_slopes):
    """tree_attention's work (the op's CPU and CUDA kernels)."""
    import numpy as np
    from .. import tree as _tree

    for what, t in (("query", query), ("key", key), ("value", value)):
        _tensor(what, t)
    if query.dim() != 3:
        raise KVAttnValueError(f"query must have shape [T, Hq, D] (the "
                               f"packed draft tokens), got "
                               f"{tuple(query.shape)}")
    if query.device.type not in ("cpu", "cuda"):
        raise KVAttnValueError(f"query is on {query.device}: "
                               "kvattn.torch.tree_attention runs on the CPU "
                               "and CUDA devices")
    for what, t in (("key", key), ("value", value)):
        _on_query_device(what, t, query)
    q4 = query.permute(1, 0, 2).unsqueeze(0)  # [1, Hq, T, D]
    dtype = _float_tensor("query", q4)
    _float_tensor("key", key)
    _float_tensor("value", value)
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise KVAttnTypeError(f"query, key and value must share a dtype, got "
                              f"{query.dtype}, {key.dtype}, {value.dtype}")
    T, Hq, D = query.shape
    B, Hkv, S, Dk = key.shape
    Dv = value.shape[3]
    if Dk != D or tuple(value.shape[:3]) != (B, Hkv, S):
        raise KVAttnValueError(
            f"key/value must be [B, Hkv, S, D|Dv] with D = {D}, got "
            f"{tuple(key.shape)} and {tuple(value.shape)}")
    if Hkv == 0 or Hq % Hkv:
        raise KVAttnValueError(f"query heads Hq = {Hq} must be a multiple of "
                               f"kv heads Hkv = {Hkv}")
    window, softcap, scale = _check_options(causal, window, softcap, scale)
    dims = (B, Hq, Hkv, T, S, D, Dv)
    has_sinks = _check_per_head("sinks", sinks, query, dims)
    has_alibi = _check_per_head("alibi_slopes", alibi_slopes, query, dims)
    cu = _index_vector("cu_seqlens_q", cu_seqlens_q, B + 1, query.device)
    kv = _index_vector("kv_len", kv_len, B, query.device)
    if (tree_parents is None) == (custom_mask is None):
        raise KVAttnValueError("give the tree as exactly one of tree_parents "
                               "and custom_mask")
    if custom_mask is not None:
        _tensor("custom_mask", custom_mask)
        if custom_mask.dtype != torch.uint8 or custom_mask.dim() != 1:
            raise KVAttnTypeError(
                f"custom_mask must be FlashInfer's packed mask (1-D "
                f"torch.uint8), got {custom_mask.dtype} of shape "
                f"{tuple(custom_mask.shape)}")
        if custom_mask.device != query.device:
            raise KVAttnValueError(f"custom_mask is on {custom_mask.device}, "
                                   f"query on {query.device}")
        # The conversion reads the mask on the host.
        cu_np, kv_np = cu.cpu().numpy(), kv.cpu().numpy()
        indptr = _tree.mask_indptr(np.diff(cu_np), kv_np) \
            if mask_indptr is None else \
            _index_vector("mask_indptr", mask_indptr, B + 1,
                          query.device).cpu().numpy()
        parents = torch.from_numpy(_tree.parents_from_packed_mask(
            custom_mask.cpu().numpy(), indptr, cu_np, kv_np)).to(
                query.device)
    else:
        parents = _index_vector("tree_parents", tree_parents, T, query.device)
    # The draft tokens are the last L_b keys: the roots follow the cache.
    qo = kv - (cu[1:] - cu[:-1])
    if query.device.type == "cuda":
        return _cuda_tree_attention(
            q4, key, value, cu, qo, kv, parents, dims, dtype, causal, window,
            softcap, scale, sinks, alibi_slopes)[0].permute(1, 0, 2) \
            .contiguous()
    key_ = ("tree_attention", dtype, Hq, Hkv, D, Dv, causal, window, softcap,
            scale, has_sinks, has_alibi)
    program = _program(key_, lambda: _cpu_program(tree_attention_ir(
        dtype, Hq, Hkv, D, Dv, causal, window, softcap, scale, has_sinks,
        has_alibi)))
    out = torch.empty((1, Hq, T, Dv), dtype=query.dtype)
    inputs = [("query", _dense(q4)), ("key", _dense(key)),
              ("value", _dense(value)), ("q_start", cu.contiguous()),
              ("q_offset", qo.contiguous()), ("kv_len", kv.contiguous()),
              ("tree_parents", parents.contiguous())]
    if has_sinks:
        inputs.append(("sinks", _dense(sinks.detach())))
    if has_alibi:
        inputs.append(("alibi_slopes", _dense(alibi_slopes.detach())))
    _cpu_run(program, inputs, out, "kvattn.torch.tree_attention")
    return out[0].permute(1, 0, 2).contiguous()



@torch.library.custom_op("kvattn::tree_attention", mutates_args=())
def _tree_attention_op(query: torch.Tensor, key: torch.Tensor,
                       value: torch.Tensor, cu_seqlens_q: torch.Tensor,
                       kv_len: torch.Tensor,
                       tree_parents: Optional[torch.Tensor],
                       custom_mask: Optional[torch.Tensor],
                       mask_indptr: Optional[torch.Tensor], causal: bool,
                       window: int, softcap: float, scale: Optional[float],
                       sinks: Optional[torch.Tensor] = None,
                       alibi_slopes: Optional[torch.Tensor] = None
                       ) -> torch.Tensor:
    return _tree_attention_impl(query, key, value, cu_seqlens_q, kv_len,
                                tree_parents, custom_mask, mask_indptr,
                                causal, window, softcap, scale, sinks,
                                alibi_slopes)


@_tree_attention_op.register_fake
def _(query, key, value, cu_seqlens_q, kv_len, tree_parents, custom_mask,
      mask_indptr, causal, window, softcap, scale, sinks=None,
      alibi_slopes=None):
    if query.dim() != 3 or value.dim() != 4:
        raise KVAttnValueError("tree_attention: query [T, Hq, D] and value "
                               "[B, Hkv, S, Dv]")
    return query.new_empty((query.shape[0], query.shape[1], value.shape[3]))


def _index_tensor(what, x, device):
    """A tensor as it is (checked by the op), or a list of ints as an int64
    tensor on `device`."""
    if x is None or isinstance(x, torch.Tensor):
        return x
    if isinstance(x, bool) or not isinstance(x, (list, tuple)):
        raise KVAttnTypeError(f"{what} must be a tensor or a list of ints, "
                              f"got {type(x).__name__}")
    return torch.tensor([capi.check_int(f"{what}[{i}]", v)
                         for i, v in enumerate(x)], dtype=torch.int64,
                        device=device)


def tree_attention(query: torch.Tensor, key: torch.Tensor,
                   value: torch.Tensor, cu_seqlens_q, kv_len, *,
                   tree_parents=None, custom_mask: Optional[torch.Tensor] = None,
                   mask_indptr=None, causal: bool = True, window: int = 0,
                   softcap: float = 0.0, scale: Optional[float] = None,
                   sinks: Optional[torch.Tensor] = None,
                   alibi_slopes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Attention of the draft tokens of a speculative-decoding step
    (docs/torch.md "Tree masks"): a ragged batch whose sequence b owns the
    packed query rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 (its L_b
    draft tokens; a plain decode row is a tree of one root); query [T, Hq,
    D], key/value caches [B, Hkv, S, D|Dv] whose last L_b keys below
    kv_len[b] are the draft tokens' own. The tree is given as
    `tree_parents` ([T] ints: per draft token its parent's local row, -1
    for a root) or as FlashInfer's packed `custom_mask` (uint8: per request
    the row-major (L_b x kv_len[b]) mask packed little-endian, requests
    starting at `mask_indptr`, default ceil(L_b kv_len[b] / 8) bytes each);
    a mask that is no tree mask is refused by name. Draft token i sits at
    position kv_len[b] - L_b + depth(i) and sees the cache, its ancestors
    and itself. Returns out [T, Hq, Dv]. On CUDA tensors the GPU kernels
    run it on torch's current stream, the tree and the positions validated
    on the device (kvattn.torch.check() raises what they recorded); a
    custom_mask is converted to parents on the host (a copy of the mask,
    cu_seqlens_q and kv_len), tree_parents stays on the device."""
    _tensor("query", query)
    device = query.device
    return torch.ops.kvattn.tree_attention(
        query, key, value, _index_tensor("cu_seqlens_q", cu_seqlens_q, device),
        _index_tensor("kv_len", kv_len, device),
        _index_tensor("tree_parents", tree_parents, device), custom_mask,
        _index_tensor("mask_indptr", mask_indptr, device), causal, window,
        softcap, scale, sinks, alibi_slopes)


def tree_device_call(dtype, dims, causal, window, softcap, scale, has_sinks,
                     has_alibi, device):
    """What tree_attention's CUDA path hands serving.device_run: the
    program's signature, its IR (tree_attention_ir) and the sizes; the
    buffers are query [1, Hq, T, D], key, value, out [1, Hq, T, Dv],
    q_start [B + 1], q_offset, kv_len [B], tree_parents [T] (int64) and
    the optional sinks / alibi_slopes. (The emulated-GPU tests run it with
    device arrays.)"""
    B, Hq, Hkv, T, S, D, Dv = dims
    signature = ("tree_attention", dtype, Hq, Hkv, D, Dv, causal, window,
                 softcap, scale, has_sinks, has_alibi, str(device))
    return (signature,
            lambda: tree_attention_ir(dtype, Hq, Hkv, D, Dv, causal, window,
                                      softcap, scale, has_sinks, has_alibi),
            {"B": B, "Hq": Hq, "Hkv": Hkv, "L": T, "S": S})


def _cuda_tree_attention(q4, key, value, cu, qo, kv, parents, dims, dtype,
                         causal, window, softcap, scale, sinks, alibi_slopes):
    """The GPU kernels of a tree batch (a plan of tree_attention_ir per
    signature), every tensor by pointer, queued on torch's current stream;
    returns out [1, Hq, T, Dv]."""
    from .serving import device_run
    B, Hq, Hkv, T, S, D, Dv = dims
    device = q4.device
    rt = _cuda_runtime(device)
    signature, make_ir, sizes = tree_device_call(
        dtype, dims, causal, window, softcap, scale, sinks is not None,
        alibi_slopes is not None, device)
    out = torch.empty((1, Hq, T, Dv), dtype=q4.dtype, device=device)
    index = lambda t: t.to(device, torch.int64).contiguous()  # noqa: E731
    tensors = {"query": _dense(q4), "key": _dense(key),
               "value": _dense(value), "out": out, "q_start": index(cu),
               "q_offset": index(qo), "kv_len": index(kv),
               "tree_parents": index(parents)}
    if sinks is not None:
        tensors["sinks"] = _dense(sinks.detach())
    if alibi_slopes is not None:
        tensors["alibi_slopes"] = _dense(alibi_slopes.detach())
    with _program_stats(signature):
        device_run(rt, signature, make_ir,
                   {n: t.data_ptr() for n, t in tensors.items()}, sizes,
                   torch.cuda.current_stream(device).cuda_stream)
    return out

# --- shared-prefix (cascade) attention -------------------------------------

def _cascade_attrs(causal, softcap, scale):
    return (" causal" if causal else "") + \
        (f" softcap = {softcap!r}" if softcap else "") + \
        (f" scale = {scale!r}" if scale is not None else "")


def cascade_attention_ir(dtype, Hq, Hkv, D, Dv, causal, softcap, scale):
    """kvattn IR of shared-prefix attention (kvattn.cascade): query [1, Hq,
    T, D] (packed rows), prefix key/value [1, Hkv, P, D|Dv], suffix
    key/value [B, Hkv, S, D|Dv], q_start (i64 [B + 1]), q_offset and kv_len
    (i64 [B]); result out [1, Hq, T, Dv]."""
    q = _ty(["1", str(Hq), "?", str(D)], dtype)
    pk = _ty(["1", str(Hkv), "?", str(D)], dtype)
    pv = _ty(["1", str(Hkv), "?", str(Dv)], dtype)
    k = _ty(["?", str(Hkv), "?", str(D)], dtype)
    v = _ty(["?", str(Hkv), "?", str(Dv)], dtype)
    o = _ty(["1", str(Hq), "?", str(Dv)], dtype)
    attrs = _cascade_attrs(causal, softcap, scale)
    i64 = "tensor<?xi64>"
    return (f"func.func @cascade(%q: {q}, %pk: {pk}, %pv: {pv}, %k: {k}, "
            f"%v: {v},\n    %qs: {i64}, %qo: {i64}, %kl: {i64}) -> {o} {{\n"
            f"  %o = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : {i64})"
            f" q_offset(%qo : {i64}) kv_len(%kl : {i64}){attrs}\n"
            f"      : {q}, {pk}, {pv}, {k}, {v} -> {o}\n"
            f"  return %o : {o}\n}}\n")


def paged_cascade_attention_ir(dtype, Hq, Hkv, D, Dv, page_size, causal,
                               softcap, scale):
    """kvattn IR of shared-prefix attention over one page pool (a paged
    kvattn.cascade): query [1, Hq, T, D], k_cache/v_cache [num_pages,
    page_size, Hkv, D|Dv] holding the prefix (prefix_pages [M] of
    prefix_len [1] keys) and the suffixes (block_table [B, max_pages]),
    q_start, q_offset, kv_len (i64); result out [1, Hq, T, Dv]."""
    ps = str(page_size)
    q = _ty(["1", str(Hq), "?", str(D)], dtype)
    k = _ty(["?", ps, str(Hkv), str(D)], dtype)
    v = _ty(["?", ps, str(Hkv), str(Dv)], dtype)
    o = _ty(["1", str(Hq), "?", str(Dv)], dtype)
    attrs = _cascade_attrs(causal, softcap, scale)
    i64, one, table = "tensor<?xi64>", "tensor<1xi64>", "tensor<?x?xi64>"
    return (f"func.func @cascade(%q: {q}, %k: {k}, %v: {v}, %qs: {i64}, "
            f"%qo: {i64}, %kl: {i64},\n    %pp: {i64}, %pl: {one}, "
            f"%bt: {table}) -> {o} {{\n"
            f"  %o = kvattn.cascade %q, %k, %v, %k, %v q_start(%qs : {i64})"
            f" q_offset(%qo : {i64}) kv_len(%kl : {i64})\n"
            f"      prefix_pages(%pp : {i64}) prefix_len(%pl : {one})"
            f" block_table(%bt : {table}){attrs}\n"
            f"      : {q}, {k}, {v}, {k}, {v} -> {o}\n"
            f"  return %o : {o}\n}}\n")


def _cascade_query(query, caches):
    """The checks both cascade ops share: query [T, Hq, D] and the caches
    (name, tensor) on its device, of its float dtype. Returns (q4 [1, Hq,
    T, D], dtype)."""
    for what, t in [("query", query)] + caches:
        _tensor(what, t)
    if query.dim() != 3:
        raise KVAttnValueError(f"query must have shape [T, Hq, D] (the "
                               f"packed rows), got {tuple(query.shape)}")
    if query.device.type not in ("cpu", "cuda"):
        raise KVAttnValueError(f"query is on {query.device}: kvattn's "
                               "cascade runs on the CPU and CUDA devices")
    q4 = query.permute(1, 0, 2).unsqueeze(0)  # [1, Hq, T, D]
    dtype = _float_tensor("query", q4)
    for what, t in caches:
        _on_query_device(what, t, query)
        _float_tensor(what, t)
        if t.dtype != query.dtype:
            raise KVAttnTypeError(f"{what} has dtype {t.dtype}, query "
                                  f"{query.dtype}: they must share one")
    return q4, dtype


def _cascade_rows(cu_seqlens_q, kv_len, q_offset, B, device):
    """cu_seqlens_q [B + 1], kv_len [B] and q_offset [B] (default kv_len -
    L_b: the rows are the suffix's last tokens), int64."""
    cu = _index_vector("cu_seqlens_q", cu_seqlens_q, B + 1, device)
    kv = _index_vector("kv_len", kv_len, B, device)
    qo = kv - (cu[1:] - cu[:-1]) if q_offset is None else \
        _index_vector("q_offset", q_offset, B, device)
    return cu, kv, qo


def cascade_device_call(dtype, dims, causal, softcap, scale, device):
    """What cascade_attention's CUDA path hands serving.device_run: the
    program's signature, its IR (cascade_attention_ir) and the sizes for
    dims (B, Hq, Hkv, T, S, P, D, Dv); the buffers are query [1, Hq, T, D],
    prefix_key, prefix_value, key, value, out [1, Hq, T, Dv], q_start,
    q_offset, kv_len (int64). (The emulated-GPU tests run it with device
    arrays.)"""
    B, Hq, Hkv, T, S, P, D, Dv = dims
    signature = ("cascade_attention", dtype, Hq, Hkv, D, Dv, causal,
                 softcap, scale, str(device))
    return (signature,
            lambda: cascade_attention_ir(dtype, Hq, Hkv, D, Dv, causal,
                                         softcap, scale),
            {"B": B, "Hq": Hq, "Hkv": Hkv, "L": T, "S": S, "P": P})


def paged_cascade_device_call(dtype, dims, causal, softcap, scale, device):
    """paged_cascade_attention's counterpart of cascade_device_call, dims
    (B, Hq, Hkv, T, num_pages, page_size, max_pages, prefix_max_pages, D,
    Dv); the buffers are query, prefix_key and key (the k_cache),
    prefix_value and value (the v_cache), out, q_start, q_offset, kv_len,
    prefix_pages, prefix_len [1], block_table (int64)."""
    B, Hq, Hkv, T, N, ps, M, PM, D, Dv = dims
    signature = ("paged_cascade_attention", dtype, Hq, Hkv, D, Dv, ps,
                 causal, softcap, scale, str(device))
    return (signature,
            lambda: paged_cascade_attention_ir(dtype, Hq, Hkv, D, Dv, ps,
                                               causal, softcap, scale),
            {"B": B, "Hq": Hq, "Hkv": Hkv, "L": T, "S": M * ps,
             "num_pages": N, "page_size": ps, "max_pages": M,
             "prefix_num_pages": N, "prefix_page_size": ps,
             "prefix_max_pages": PM, "P": PM * ps})


def _cuda_cascade(signature, make_ir, sizes, tensors, q4, Dv):
    """The GPU kernels of a cascade (a plan per signature), every tensor by
    pointer, queued on torch's current stream; returns out [T, Hq, Dv]."""
    from .serving import device_run
    device = q4.device
    rt = _cuda_runtime(device)
    out = torch.empty((1, q4.shape[1], q4.shape[2], Dv), dtype=q4.dtype,
                      device=device)
    tensors = dict(tensors, out=out)
    with _program_stats(signature):
        device_run(rt, signature, make_ir,
                   {n: t.data_ptr() for n, t in tensors.items()}, sizes,
                   torch.cuda.current_stream(device).cuda_stream)
    return out[0].permute(1, 0, 2).contiguous()


def _cascade_attention_impl(query, prefix_key, prefix_value, key, value,
                            cu_seqlens_q, kv_len, q_offset, causal, softcap,
                            scale):
    """cascade_attention's work (the op's CPU and CUDA kernels)."""
    q4, dtype = _cascade_query(query, [
        ("prefix_key", prefix_key), ("prefix_value", prefix_value),
        ("key", key), ("value", value)])
    T, Hq, D = query.shape
    B, Hkv, S, Dk = key.shape
    Dv = value.shape[3]
    if prefix_key.shape[0] != 1 or prefix_key.shape[1] != Hkv or \
            prefix_key.shape[3] != D or \
            tuple(prefix_value.shape[:3]) != tuple(prefix_key.shape[:3]) or \
            prefix_value.shape[3] != Dv or Dk != D or \
            tuple(value.shape[:3]) != (B, Hkv, S):
        raise KVAttnValueError(
            f"prefix_key/prefix_value must be [1, Hkv, P, D|Dv] and "
            f"key/value [B, Hkv, S, D|Dv] with D = {D}, got "
            f"{tuple(prefix_key.shape)}, {tuple(prefix_value.shape)}, "
            f"{tuple(key.shape)}, {tuple(value.shape)}")
    if Hkv == 0 or Hq % Hkv:
        raise KVAttnValueError(f"query heads Hq = {Hq} must be a multiple of "
                               f"kv heads Hkv = {Hkv}")
    _, softcap, scale = _check_options(causal, 0, softcap, scale)
    cu, kv, qo = _cascade_rows(cu_seqlens_q, kv_len, q_offset, B,
                               query.device)
    tensors = {"query": _dense(q4), "prefix_key": _dense(prefix_key),
               "prefix_value": _dense(prefix_value), "key": _dense(key),
               "value": _dense(value), "q_start": cu.contiguous(),
               "q_offset": qo.contiguous(), "kv_len": kv.contiguous()}
    if query.device.type == "cuda":
        dims = (B, Hq, Hkv, T, S, prefix_key.shape[2], D, Dv)
        return _cuda_cascade(*cascade_device_call(
            dtype, dims, causal, softcap, scale, query.device), tensors,
            q4, Dv)
    key_ = ("cascade", dtype, Hq, Hkv, D, Dv, causal, softcap, scale)
    program = _program(key_, lambda: _cpu_program(cascade_attention_ir(
        dtype, Hq, Hkv, D, Dv, causal, softcap, scale)))
    out = torch.empty((1, Hq, T, Dv), dtype=query.dtype)
    _cpu_run(program, list(tensors.items()), out,
             "kvattn.torch.cascade_attention")
    return out[0].permute(1, 0, 2).contiguous()


def _paged_cascade_attention_impl(query, k_cache, v_cache, prefix_pages,
                                  prefix_len, block_table, cu_seqlens_q,
                                  kv_len, q_offset, causal, softcap, scale):
    """paged_cascade_attention's work (the op's CPU and CUDA kernels)."""
    q4, dtype = _cascade_query(query, [("k_cache", k_cache),
                                       ("v_cache", v_cache)])
    T, Hq, D = query.shape
    N, ps, Hkv, Dk = k_cache.shape
    Dv = v_cache.shape[3]
    if Dk != D or tuple(v_cache.shape[:3]) != (N, ps, Hkv):
        raise KVAttnValueError(
            f"k_cache/v_cache must be pages [num_pages, page_size, Hkv, "
            f"D|Dv] with D = {D}, got {tuple(k_cache.shape)} and "
            f"{tuple(v_cache.shape)}")
    if ps == 0:
        raise KVAttnValueError("k_cache has page_size 0")
    if Hkv == 0 or Hq % Hkv:
        raise KVAttnValueError(f"query heads Hq = {Hq} must be a multiple of "
                               f"kv heads Hkv = {Hkv}")
    _, softcap, scale = _check_options(causal, 0, softcap, scale)
    for what, t, shape in (("prefix_pages", prefix_pages,
                            "[prefix_max_pages]"),
                           ("prefix_len", prefix_len, "[1]"),
                           ("block_table", block_table, "[B, max_pages]")):
        _tensor(what, t)
        if t.dtype not in _INDEX_DTYPES:
            raise KVAttnTypeError(f"{what} has dtype {t.dtype}; it must be "
                                  "torch.int32 or torch.int64")
        if t.dim() != shape.count(",") + 1 or \
                (what == "prefix_len" and t.shape[0] != 1):
            raise KVAttnValueError(f"{what} must have shape {shape}, got "
                                   f"{tuple(t.shape)}")
        _on_query_device(what, t, query)
    B, M = block_table.shape
    cu, kv, qo = _cascade_rows(cu_seqlens_q, kv_len, q_offset, B,
                               query.device)
    index = lambda t: t.to(torch.int64).contiguous()  # noqa: E731
    tensors = {"query": _dense(q4), "key": _dense(k_cache),
               "value": _dense(v_cache), "q_start": cu.contiguous(),
               "q_offset": qo.contiguous(), "kv_len": kv.contiguous(),
               "prefix_pages": index(prefix_pages),
               "prefix_len": index(prefix_len),
               "block_table": index(block_table)}
    if query.device.type == "cuda":
        dims = (B, Hq, Hkv, T, N, ps, M, prefix_pages.shape[0], D, Dv)
        tensors.update(prefix_key=tensors["key"],
                       prefix_value=tensors["value"])
        return _cuda_cascade(*paged_cascade_device_call(
            dtype, dims, causal, softcap, scale, query.device), tensors,
            q4, Dv)
    key_ = ("paged_cascade", dtype, Hq, Hkv, D, Dv, ps, causal, softcap,
            scale)
    program = _program(key_, lambda: _cpu_program(paged_cascade_attention_ir(
        dtype, Hq, Hkv, D, Dv, ps, causal, softcap, scale)))
    out = torch.empty((1, Hq, T, Dv), dtype=query.dtype)
    _cpu_run(program, list(tensors.items()), out,
             "kvattn.torch.paged_cascade_attention")
    return out[0].permute(1, 0, 2).contiguous()


@torch.library.custom_op("kvattn::cascade_attention", mutates_args=())
def _cascade_attention_op(query: torch.Tensor, prefix_key: torch.Tensor,
                          prefix_value: torch.Tensor, key: torch.Tensor,
                          value: torch.Tensor, cu_seqlens_q: torch.Tensor,
                          kv_len: torch.Tensor,
                          q_offset: Optional[torch.Tensor], causal: bool,
                          softcap: Optional[float],
                          scale: Optional[float]) -> torch.Tensor:
    return _cascade_attention_impl(query, prefix_key, prefix_value, key,
                                   value, cu_seqlens_q, kv_len, q_offset,
                                   causal, softcap, scale)


@_cascade_attention_op.register_fake
def _(query, prefix_key, prefix_value, key, value, cu_seqlens_q, kv_len,
      q_offset, causal, softcap, scale):
    if query.dim() != 3 or value.dim() != 4:
        raise KVAttnValueError("cascade_attention: query [T, Hq, D] and "
                               "value [B, Hkv, S, Dv]")
    return query.new_empty((query.shape[0], query.shape[1], value.shape[3]))


@torch.library.custom_op("kvattn::paged_cascade_attention", mutates_args=())
def _paged_cascade_attention_op(query: torch.Tensor, k_cache: torch.Tensor,
                                v_cache: torch.Tensor,
                                prefix_pages: torch.Tensor,
                                prefix_len: torch.Tensor,
                                block_table: torch.Tensor,
                                cu_seqlens_q: torch.Tensor,
                                kv_len: torch.Tensor,
                                q_offset: Optional[torch.Tensor],
                                causal: bool, softcap: Optional[float],
                                scale: Optional[float]) -> torch.Tensor:
    return _paged_cascade_attention_impl(
        query, k_cache, v_cache, prefix_pages, prefix_len, block_table,
        cu_seqlens_q, kv_len, q_offset, causal, softcap, scale)


@_paged_cascade_attention_op.register_fake
def _(query, k_cache, v_cache, prefix_pages, prefix_len, block_table,
      cu_seqlens_q, kv_len, q_offset, causal, softcap, scale):
    if query.dim() != 3 or v_cache.dim() != 4:
        raise KVAttnValueError("paged_cascade_attention: query [T, Hq, D] "
                               "and v_cache [num_pages, page_size, Hkv, Dv]")
    return query.new_empty((query.shape[0], query.shape[1],
                            v_cache.shape[3]))


def cascade_attention(query: torch.Tensor, prefix_key: torch.Tensor,
                      prefix_value: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, cu_seqlens_q, kv_len,
                      q_offset=None, causal: bool = True,
                      softcap: Optional[float] = None,
                      scale: Optional[float] = None) -> torch.Tensor:
    """Shared-prefix (cascade) attention (docs/torch.md "Cascade
    attention"), the op kvattn::cascade_attention: B sequences share the
    prefix prefix_key/prefix_value [1, Hkv, P, D|Dv]; sequence b's own
    suffix is key/value[b] [Hkv, S, D|Dv] with kv_len[b] keys; its query
    rows are query[cu_seqlens_q[b] .. cu_seqlens_q[b+1]] of query [T, Hq,
    D], at positions P + q_offset[b] + i (default q_offset = kv_len - L_b:
    the rows are the last tokens of the suffix). The prefix is attended
    once for all rows, each suffix on its own, the two merged by LSE
    (kvattn.cascade); the result equals attention over prefix + suffix. No
    window (it would cut the prefix row by row). Returns out [T, Hq, Dv].
    CPU tensors run the CPU program; CUDA tensors the GPU kernels on
    torch's current stream (the prefix kernel, the ragged suffix kernel,
    the merge kernel), the metadata validated on the device
    (kvattn.torch.check() raises what it recorded)."""
    _tensor("query", query)
    device = query.device
    return torch.ops.kvattn.cascade_attention(
        query, prefix_key, prefix_value, key, value,
        _index_tensor("cu_seqlens_q", cu_seqlens_q, device),
        _index_tensor("kv_len", kv_len, device),
        _index_tensor("q_offset", q_offset, device), causal, softcap, scale)


def paged_cascade_attention(query: torch.Tensor, k_cache: torch.Tensor,
                            v_cache: torch.Tensor, prefix_pages, prefix_len,
                            block_table, cu_seqlens_q, kv_len, q_offset=None,
                            causal: bool = True,
                            softcap: Optional[float] = None,
                            scale: Optional[float] = None) -> torch.Tensor:
    """Shared-prefix attention over a paged KV cache (docs/torch.md
    "Cascade attention"), the op kvattn::paged_cascade_attention: one page
    pool k_cache/v_cache [num_pages, page_size, Hkv, D|Dv] (vLLM's and
    FlashInfer's NHD pages) holds the shared prefix, the first prefix_len
    keys (an int or a [1] tensor) of pages prefix_pages [prefix_max_pages]
    (-1 tail), and each sequence's suffix of kv_len[b] keys through
    block_table [B, max_pages]; query [T, Hq, D] packs the sequences' rows
    (cu_seqlens_q), the last tokens of their suffixes unless q_offset says
    otherwise. The prefix's pages are read once for all rows. Tables that
    break the block-table rules are refused by name (on CUDA: recorded on
    the device, kvattn.torch.check()). Returns out [T, Hq, Dv]."""
    _tensor("query", query)
    device = query.device
    if not isinstance(prefix_len, torch.Tensor):
        prefix_len = _index_tensor("prefix_len", [prefix_len], device)
    return torch.ops.kvattn.paged_cascade_attention(
        query, k_cache, v_cache,
        _index_tensor("prefix_pages", prefix_pages, device), prefix_len,
        _index_tensor("block_table", block_table, device),
        _index_tensor("cu_seqlens_q", cu_seqlens_q, device),
        _index_tensor("kv_len", kv_len, device),
        _index_tensor("q_offset", q_offset, device), causal, softcap, scale)


from .lint import Finding, fix, lint  # noqa: E402 (needs the ops above)
from .serving import Plan  # noqa: E402 (the serving plan's ops)
from .mla import (concat_and_cache_mla, mla_attention,  # noqa: E402
                  mla_attention_split)

from . import hf as _hf  # noqa: E402

# "kvattn" in transformers' attention interface, when it is installed.
transformers_registered = _hf.register()
