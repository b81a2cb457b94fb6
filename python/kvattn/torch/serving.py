"""The serving plan's run as a torch op: `kvattn.torch.Plan`.

    plan = kt.Plan(dtype=torch.bfloat16, num_query_heads=32, num_kv_heads=8,
                   head_dim=128, page_size=16, append=True, device="cuda",
                   max_batch=64, max_query_len=1, max_pages=256)
    for step in ...:  # every tensor on the device, nothing read back
        plan.run(q, k_pages, v_pages, q_offset, kv_len,
                 block_table=table, update_k=k_new, update_v=v_new, out=o)
    plan.check()      # waits for the stream: raises the first violation

A latent plan (DeepSeek MLA's absorbed form, `latent=True`) reads one cache
of 576-wide rows whose first value_head_dim columns are V, and with append
writes the new tokens' whole rows into it first:

    plan = kt.Plan(dtype=torch.bfloat16, num_query_heads=128,
                   num_kv_heads=1, head_dim=576, value_head_dim=512,
                   page_size=64, latent=True, append=True, device="cuda",
                   max_batch=64, max_query_len=1, scale=1 / 192 ** 0.5)
    plan.run(q, cache, q_offset=pos, kv_len=pos + 1, block_table=table,
             update_k=new_rows, out=o)   # torch.ops.kvattn.plan_latent_run

A Plan is built once (the attention described by its fields, compiled for
the device with device validation, loaded, its status word and split-KV
workspaces allocated for the bounds: kvattn.plan, docs/runtime.md "Plan and
run"); `run` calls `torch.ops.kvattn.plan_run` (or `plan_append_run`, which
writes the new tokens into the caches first), whose CUDA kernel only queues
launches on torch's current stream with device pointers for every tensor
and every metadata tensor: no allocation, copy or synchronisation, so a
decode loop never waits for the GPU. The metadata is validated on the
device (the plan's status word); `status()` / `check()` read it (they wait
for the stream). On CPU tensors the same op runs kvattn's JIT CPU path
(kvattn_cpu_run) over the same IR, which validates the metadata on the host
before it runs and raises at once. docs/torch.md "Serving plans".
"""

import ctypes
import itertools
import threading
from typing import Dict, Optional

import torch

from .. import capi
from ..capi import KVAttnError, KVAttnTypeError, KVAttnValueError
from ._host import DTYPE_NAMES
from ._host import host_tensor as _host_tensor

__all__ = ["Plan"]

_FLOAT_NAMES = {torch.float32: "f32", torch.float16: "f16",
                torch.bfloat16: "bf16"}
_DTYPE_NAMES = DTYPE_NAMES
_FP8_NAMES = {torch.float8_e4m3fn: "f8E4M3FN", torch.float8_e5m2: "f8E5M2"}
_KV_SCALES = ("tensor", "head", "token")

# Plans by id: the op takes the id (a str: torch.library ops take no Python
# objects, and torch.compile keeps a str as a constant of the graph).
_registry: Dict[str, "Plan"] = {}
_registry_lock = threading.Lock()
_ids = itertools.count()


def _int(what, value, low=0):
    return capi.check_int(what, value, low, capi.INT64_MAX)


class _Buf:
    """What the checks need of a tensor: a torch tensor, or (on a plan over
    a kvattn.Runtime of the caller's, the emulated GPU) a kvattn
    DeviceArray."""
    __slots__ = ("shape", "dtype", "device", "dense", "ptr", "obj")

    def __init__(self, obj, device):
        self.obj = obj
        if isinstance(obj, torch.Tensor):
            self.shape = tuple(obj.shape)
            self.dtype = _DTYPE_NAMES.get(obj.dtype, str(obj.dtype))
            self.device = obj.device
            self.dense = obj.is_contiguous()
            self.ptr = obj.data_ptr()
        else:  # a kvattn.DeviceArray (Plan(runtime=...))
            self.shape = tuple(obj.shape)
            self.dtype = obj.dtype
            self.device = device
            self.dense = True
            self.ptr = obj.ptr


def _shape_error(what, got, want):
    names = ", ".join(str(w) for w in want)
    return KVAttnValueError(f"{what} has shape {got}; the plan takes "
                            f"[{names}]")


class Plan:
    """An attention planned once for a serving loop (docs/torch.md "Serving
    plans").

    Fields (the attention description of kvattn.attention_ir, docs/runtime.md
    "A plan from a description"): dtype (torch.float32/float16/bfloat16),
    num_query_heads, num_kv_heads, head_dim, value_head_dim (0: head_dim);
    page_size (0: a plain cache key/value [B, Hkv, S, D]; > 0: a paged pool
    [num_pages, page_size, Hkv, D] and a block table [B, max_pages]);
    varlen (a ragged batch: query/out [1, Hq, T, D] and q_start [B + 1]);
    append (each run first writes update_k/update_v [B, Hkv, L, D] into the
    caches at q_offset); causal, window, softcap, scale; sinks / alibi (the
    run takes f32 [Hq] sinks / alibi_slopes); kv_dtype (None, or an FP8
    cache: torch.float8_e4m3fn / float8_e5m2 key and value, the run takes
    f32 k_scale / v_scale of granularity kv_scales: "tensor" [1], "head"
    [Hkv] or "token", the cache's shape without D; with append the new
    tokens are quantised with them); latent (DeepSeek MLA's absorbed form,
    docs/semantics.md "Latent KV": the cache `key` alone, [B, Hkv, S, D]
    or paged [num_pages, page_size, Hkv, D] with D up to 576, V its first
    value_head_dim columns; no value / update_v / v_scale: with append
    update_k [B, Hkv, L, D] holds the new tokens' whole rows, with kv_dtype
    k_scale alone dequantises K and the V inside it and quantises the new
    rows).

    device: "cpu" (kvattn's JIT CPU path) or a CUDA device (the kvattn
    runtime on torch's current stream); runtime: a kvattn.Runtime of the
    caller's instead (the emulated GPU: run() then takes kvattn
    DeviceArrays and calls the op's device kernel directly, as the emulated
    GPU is no torch device). Bounds (0: unbounded): max_batch,
    max_query_len (T for varlen), max_kv_len (S of a plain cache),
    max_pages (block-table columns); a device plan needs max_batch and
    max_query_len (its split-KV workspaces are sized for them)."""

    def __init__(self, *, dtype, num_query_heads: int, num_kv_heads: int,
                 head_dim: int, value_head_dim: int = 0, page_size: int = 0,
                 varlen: bool = False, append: bool = False,
                 causal: bool = True, window: int = 0, softcap: float = 0.0,
                 scale: Optional[float] = None, sinks: bool = False,
                 alibi: bool = False, device="cpu", max_batch: int = 0,
                 max_query_len: int = 0, max_kv_len: int = 0,
                 max_pages: int = 0, runtime=None, kv_dtype=None,
                 kv_scales: str = "tensor", latent: bool = False,
                 **compile_options):
        import kvattn
        from . import _check_options, _cuda_runtime
        self.handle = self.program = None
        if dtype not in _FLOAT_NAMES:
            raise KVAttnTypeError(f"dtype {dtype!r}: a plan takes "
                                  "torch.float32, torch.float16 or "
                                  "torch.bfloat16")
        for what, flag in (("varlen", varlen), ("append", append),
                           ("causal", causal), ("sinks", sinks),
                           ("alibi", alibi), ("latent", latent)):
            if not isinstance(flag, bool):
                raise KVAttnTypeError(f"{what} must be a bool, got {flag!r}")
        self.dtype = dtype
        # An FP8 cache: key/value torch.float8_e4m3fn / float8_e5m2 codes,
        # the run's k_scale / v_scale f32 of granularity kv_scales.
        if kv_dtype is not None and kv_dtype not in _FP8_NAMES:
            raise KVAttnTypeError(f"kv_dtype {kv_dtype!r}: an FP8 cache is "
                                  "torch.float8_e4m3fn or torch.float8_e5m2"
                                  " (None: key/value in dtype)")
        if kv_scales not in _KV_SCALES:
            raise KVAttnValueError(f"kv_scales must be 'tensor' [1], 'head' "
                                   f"[Hkv] or 'token' (the cache's shape "
                                   f"without D), got {kv_scales!r}")
        self.kv_dtype, self.kv_scales = kv_dtype, kv_scales
        self.Hq = _int("num_query_heads", num_query_heads, 1)
        self.Hkv = _int("num_kv_heads", num_kv_heads, 1)
        self.D = _int("head_dim", head_dim, 1)
        self.Dv = _int("value_head_dim", value_head_dim) or self.D
        self.page_size = _int("page_size", page_size)
        self.paged, self.varlen, self.append = bool(page_size), varlen, append
        self.sinks, self.alibi, self.latent = sinks, alibi, latent
        window, softcap, scale = _check_options(causal, window, softcap,
                                                scale)
        self.bounds = {"B": _int("max_batch", max_batch),
                       "L": _int("max_query_len", max_query_len),
                       "S": _int("max_kv_len", max_kv_len),
                       "max_pages": _int("max_pages", max_pages)}
        fields = dict(dtype=_FLOAT_NAMES[dtype], num_query_heads=self.Hq,
                      num_kv_heads=self.Hkv, head_dim=self.D,
                      value_head_dim=self.Dv, causal=int(causal),
                      window=window, softcap=softcap, scale=scale or 0.0,
                      varlen=int(varlen), append=int(append),
                      sinks=int(sinks), alibi=int(alibi))
        if self.paged:
            fields.update(paged=1, page_size=self.page_size)
        if kv_dtype is not None:
            fields.update(kv_dtype=_FP8_NAMES[kv_dtype], kv_scales=kv_scales)
        if latent:
            fields.update(latent=1)
        # The description is checked by the C API, naming the field.
        self.ir = kvattn.attention_ir(**fields)
        if runtime is not None:
            if not isinstance(runtime, kvattn.Runtime):
                raise KVAttnTypeError(f"runtime must be a kvattn.Runtime, "
                                      f"got {type(runtime).__name__}")
            self.device, self.runtime = "runtime", runtime
        else:
            try:
                self.device = torch.device(device)
            except (RuntimeError, TypeError) as e:
                raise KVAttnValueError(f"device {device!r}: {e}") from None
            if self.device.type not in ("cpu", "cuda"):
                raise KVAttnValueError(f"device {self.device}: a plan runs "
                                       "on the CPU or a CUDA device")
            if self.device.type == "cuda" and self.device.index is None:
                self.device = torch.device("cuda",
                                           torch.cuda.current_device())
            self.runtime = (_cuda_runtime(self.device)
                            if self.device.type == "cuda" else None)
        if self.runtime is None:
            if compile_options:
                raise KVAttnTypeError(
                    f"compile options ({', '.join(compile_options)}) are "
                    "for device plans")
            # The appends write the caches in place (they are the run's
            # inputs and outputs).
            self.program = kvattn.CpuProgram(self.ir, threads=0,
                                             in_place_appends=True)
        else:
            for what in ("max_batch", "max_query_len"):
                size = "B" if what == "max_batch" else "L"
                if not self.bounds[size]:
                    raise KVAttnValueError(
                        f"{what} must be given (> 0) for a device plan: its "
                        "split-KV workspaces are sized for it")
            self.kvplan = kvattn.Plan(self.ir, runtime=self.runtime,
                                      max_sizes=self.bounds,
                                      **compile_options)
            self.handle = self.kvplan.handle
            self.workspace_bytes = self.kvplan.workspace_bytes
        self.id = f"kvattn-plan-{next(_ids)}"
        with _registry_lock:
            _registry[self.id] = self

    # --- the checks (host: shapes, dtypes, devices; no device value) -------

    def _check(self, t):
        """t: {name: tensor or None}; returns (sizes, {name: _Buf})."""
        wants = ["query", "key", "q_offset", "kv_len", "out"]
        fp8, latent = self.kv_dtype is not None, self.latent
        for what, on in (("value", not latent),
                         ("block_table", self.paged),
                         ("q_start", self.varlen), ("update_k", self.append),
                         ("update_v", self.append and not latent),
                         ("sinks", self.sinks),
                         ("alibi_slopes", self.alibi), ("k_scale", fp8),
                         ("v_scale", fp8 and not latent)):
            if on:
                wants.append(what)
            elif t.get(what) is not None:
                if latent and what in _LATENT_NONE:
                    raise KVAttnValueError(
                        f"{what} is given, but a latent plan takes none: "
                        f"{_LATENT_NONE[what]}")
                raise KVAttnValueError(
                    f"{what} is given, but the plan takes none (plan it "
                    f"with {_FLAG[what]})")
        bufs = {}
        for what in wants:
            x = t.get(what)
            if x is None:
                raise KVAttnValueError(f"{what} is missing: the plan takes "
                                       f"{', '.join(wants)}")
            if not isinstance(x, torch.Tensor) and \
                    (self.device != "runtime" or not hasattr(x, "ptr")):
                raise KVAttnTypeError(f"{what} must be a torch.Tensor, got "
                                      f"{type(x).__name__}")
            b = _Buf(x, self.device)
            if b.device != self.device:
                raise KVAttnValueError(f"{what} is on {b.device}, the plan "
                                       f"on {self.device}")
            if what in _METADATA:
                if b.dtype != "i32":
                    raise KVAttnTypeError(
                        f"{what} has dtype {b.dtype}; plan metadata is "
                        "torch.int32 (the kernels read it as is, on the "
                        "device)")
            elif what in ("sinks", "alibi_slopes", "k_scale", "v_scale"):
                if b.dtype != "f32":
                    raise KVAttnTypeError(f"{what} has dtype {b.dtype}; it "
                                          "must be torch.float32")
            elif what in ("key", "value") and fp8:
                if b.dtype != _FP8_NAMES[self.kv_dtype]:
                    raise KVAttnTypeError(
                        f"{what} has dtype {b.dtype}; the plan's cache is "
                        f"{_FP8_NAMES[self.kv_dtype]} (kv_dtype)")
            elif b.dtype != _FLOAT_NAMES[self.dtype]:
                raise KVAttnTypeError(f"{what} has dtype {b.dtype}; the plan "
                                      f"is {_FLOAT_NAMES[self.dtype]}")
            bufs[what] = b
        q, k, kl = bufs["query"].shape, bufs["key"].shape, \
            bufs["kv_len"].shape
        if len(kl) != 1:
            raise _shape_error("kv_len", kl, ["B"])
        B = kl[0]
        if len(q) != 4 or q[1] != self.Hq or q[3] != self.D or \
                (self.varlen and q[0] != 1) or \
                (not self.varlen and q[0] != B):
            raise _shape_error("query", q, [1 if self.varlen else B,
                                            self.Hq, "T" if self.varlen
                                            else "L", self.D])
        L = q[2]
        sizes = {"B": B, "Hq": self.Hq, "Hkv": self.Hkv, "L": L}
        for what, dim in (("key", self.D), ("value", self.Dv)):
            if what not in bufs:  # latent: V is inside the key cache
                continue
            s = bufs[what].shape
            if self.paged:
                ok = len(s) == 4 and s[1:] == (self.page_size, self.Hkv, dim)
                want = ["num_pages", self.page_size, self.Hkv, dim]
            else:
                ok = len(s) == 4 and s[0] == B and s[1] == self.Hkv and \
                    s[3] == dim
                want = [B, self.Hkv, "S", dim]
            if not ok:
                raise _shape_error(what, s, want)
        if self.paged:
            if not latent and bufs["value"].shape[0] != k[0]:
                raise KVAttnValueError(f"value has {bufs['value'].shape[0]}"
                                       f" pages, key {k[0]}")
            bt = bufs["block_table"].shape
            if len(bt) != 2 or bt[0] != B:
                raise _shape_error("block_table", bt, [B, "max_pages"])
            sizes.update(num_pages=k[0], page_size=self.page_size,
                         max_pages=bt[1], S=bt[1] * self.page_size)
        else:
            if not latent and bufs["value"].shape[2] != k[2]:
                raise KVAttnValueError(f"value has S = "
                                       f"{bufs['value'].shape[2]} rows, key "
                                       f"{k[2]}")
            sizes["S"] = k[2]
        if fp8:
            rows = tuple(k[:3])
            want = {"tensor": [(1,)], "head": [(self.Hkv,)],
                    "token": [rows]}[self.kv_scales]
            for what in ("k_scale", "v_scale"):
                if what in bufs and bufs[what].shape not in want:
                    raise _shape_error(what, bufs[what].shape,
                                       list(want[0]))
        expect = {"q_offset": (B,), "q_start": (B + 1,),
                  "sinks": (self.Hq,), "alibi_slopes": (self.Hq,),
                  "update_k": (B, self.Hkv, L, self.D),
                  "update_v": (B, self.Hkv, L, self.Dv),
                  "out": (q[0], self.Hq, L, self.Dv)}
        for what, shape in expect.items():
            if what in bufs and bufs[what].shape != shape:
                raise _shape_error(what, bufs[what].shape, list(shape))
        for what, b in bufs.items():
            if not b.dense:
                raise KVAttnValueError(
                    f"{what} is not contiguous (strides "
                    f"{tuple(b.obj.stride())}): a plan's run reads and "
                    "writes dense tensors in place (pass .contiguous())")
        for size, what in (("B", "max_batch"), ("L", "max_query_len"),
                           ("max_pages", "max_pages")):
            if self.bounds[size] and sizes.get(size, 0) > self.bounds[size]:
                raise KVAttnValueError(
                    f"{_SIZE_WHAT[size]} = {sizes[size]} is above the plan's "
                    f"{what} = {self.bounds[size]}")
        if not self.paged and self.bounds["S"] and \
                sizes["S"] > self.bounds["S"]:
            raise KVAttnValueError(f"the cache's S = {sizes['S']} is above "
                                   f"the plan's max_kv_len = "
                                   f"{self.bounds['S']}")
        return sizes, bufs

    # --- the kernels -------------------------------------------------------

    def _run(self, t):
        """The op's kernel: checks, then runs (CPU: kvattn_cpu_run, which
        validates the metadata first; device: kvattn_plan_run on the
        current stream, metadata validated on the device)."""
        if self.handle is None and self.program is None:
            raise KVAttnValueError(f"plan {self.id} is closed")
        sizes, bufs = self._check(t)
        if self.program is not None:
            return self._run_cpu(bufs)
        s = [sizes.get(n, 0) for n in _SIZE_NAMES]
        buffers = {n: b.ptr for n, b in bufs.items()}
        if self.append:  # the appends write at the attention's q_offset
            buffers["pos"] = buffers["q_offset"]
        if self.device == "runtime":
            stream = capi.CURRENT_STREAM
        else:
            stream = torch.cuda.current_stream(self.device).cuda_stream
        self.handle.run(s, buffers, stream)

    def _run_cpu(self, bufs):
        latent = self.latent
        order = ["query", "key"] + ([] if latent else ["value"])
        if self.append:
            order += ["update_k"] + ([] if latent else ["update_v"])
        if self.varlen:
            order.append("q_start")
        order += ["q_offset", "kv_len"]
        if self.paged:
            order.append("block_table")
        if self.sinks:
            order.append("sinks")
        if self.alibi:
            order.append("alibi_slopes")
        if self.kv_dtype is not None:
            order += ["k_scale"] + ([] if latent else ["v_scale"])
        results = ["out"] + ((["key"] if latent else ["key", "value"])
                             if self.append else [])
        keep = []
        inputs = [_host_tensor(bufs[n].obj, keep) for n in order]
        outputs = [_host_tensor(bufs[n].obj, keep) for n in results]
        a = (capi.HostTensor * len(inputs))(*inputs)
        r = (capi.HostTensor * len(outputs))(*outputs)
        error = ctypes.c_void_p()
        api = self.program.api
        rc = api.lib.kvattn_cpu_run(self.program.handle, a, len(inputs), r,
                                    len(outputs), ctypes.byref(error))
        api.check(rc, error, "kvattn::plan_run")

    # --- the front door ----------------------------------------------------

    def run(self, query, key, value=None, q_offset=None, kv_len=None, *,
            block_table=None, q_start=None, update_k=None, update_v=None,
            sinks=None, alibi_slopes=None, out=None, k_scale=None,
            v_scale=None):
        """One step: query [B, Hq, L, D] (varlen: [1, Hq, T, D]), key/value
        the caches (paged: [num_pages, page_size, Hkv, D]; else [B, Hkv, S,
        D]), q_offset and kv_len int32 [B] (query row i of batch b at
        position q_offset[b] + i; with append also where update_k/update_v
        are written), block_table int32 [B, max_pages], q_start int32
        [B + 1], update_k/update_v [B, Hkv, L, D], sinks/alibi_slopes f32
        [Hq]; with kv_dtype (an FP8 cache) k_scale/v_scale f32 (the
        plan's kv_scales granularity; with append the new tokens are
        quantised with them); a latent plan takes the cache as key, no value
        (pass q_offset and kv_len by name), update_k [B, Hkv, L, D] (the new
        rows, with append) and k_scale alone; everything on the plan's
        device. Writes and returns `out`
        (allocated by torch when not given). No host synchronisation on a
        device: a bad metadata value is recorded on the device (status(),
        check())."""
        if out is None and isinstance(query, torch.Tensor):
            B = query.shape[0]
            out = query.new_empty((B,) + tuple(query.shape[1:3]) +
                                  (self.Dv,))
        t = dict(query=query, key=key, value=value, q_offset=q_offset,
                 kv_len=kv_len, block_table=block_table, q_start=q_start,
                 update_k=update_k, update_v=update_v, sinks=sinks,
                 alibi_slopes=alibi_slopes, out=out, k_scale=k_scale,
                 v_scale=v_scale)
        if self.device == "runtime":
            self._run(t)  # the emulated GPU is no torch device: no op
            return out
        # Checked here too, so that misuse is a KVAttnError before torch's
        # dispatcher sees the arguments (a meta tensor would go to the fake
        # kernel, a list would be torch's own error).
        if self.handle is None and self.program is None:
            raise KVAttnValueError(f"no kvattn plan {self.id!r} (closed)")
        self._check(t)
        if self.latent:
            torch.ops.kvattn.plan_latent_run(
                self.id, query, key, update_k, q_offset, kv_len, block_table,
                q_start, sinks, alibi_slopes, out, k_scale)
        elif self.append:
            torch.ops.kvattn.plan_append_run(
                self.id, query, key, value, update_k, update_v, q_offset,
                kv_len, block_table, q_start, sinks, alibi_slopes, out,
                k_scale, v_scale)
        else:
            torch.ops.kvattn.plan_run(
                self.id, query, key, value, q_offset, kv_len, block_table,
                q_start, sinks, alibi_slopes, out, k_scale, v_scale)
        return out

    __call__ = run

    def status(self) -> Optional[str]:
        """None, or the message of the first metadata violation a run
        recorded on the device since the last clear (waits for the
        stream). CPU plans raise at run() and have none."""
        if self.handle is None:
            return None
        if self.device not in ("runtime",) and self.device.type == "cuda":
            self.runtime.set_stream(
                torch.cuda.current_stream(self.device).cuda_stream)
        return self.handle.status()

    def check(self) -> None:
        """Raises KVAttnError with status()'s message and clears the status
        word (the plan computes again); runs since the violation computed
        nothing and left out and the caches as they were."""
        message = self.status()
        if message:
            self.handle.clear_status()
            raise KVAttnError(f"plan {self.id}: {message}")

    def clear_status(self) -> None:
        if self.handle is not None:
            self.handle.clear_status()

    def close(self) -> None:
        with _registry_lock:
            _registry.pop(self.id, None)
        if self.handle is not None:
            self.kvplan.close()
            self.handle = None
        if self.program is not None:
            self.program.close()
            self.program = None

    def __repr__(self):
        return (f"kvattn.torch.Plan({self.id}, {_FLOAT_NAMES[self.dtype]}, "
                f"Hq={self.Hq}, Hkv={self.Hkv}, D={self.D}, "
                f"paged={self.page_size or False}, varlen={self.varlen}, "
                f"append={self.append}, latent={self.latent}, "
                f"device={self.device})")


_METADATA = ("q_offset", "kv_len", "block_table", "q_start")
_SIZE_NAMES = ("B", "Hq", "Hkv", "L", "S", "num_pages", "page_size",
               "max_pages", "cache_rows", "P", "prefix_num_pages",
               "prefix_page_size", "prefix_max_pages")
_SIZE_WHAT = {"B": "the batch B", "L": "the query length L",
              "max_pages": "the block table's max_pages"}
_FLAG = {"block_table": "page_size > 0", "q_start": "varlen=True",
         "update_k": "append=True", "update_v": "append=True",
         "sinks": "sinks=True", "alibi_slopes": "alibi=True",
         "k_scale": "kv_dtype=torch.float8_e4m3fn or float8_e5m2",
         "v_scale": "kv_dtype=torch.float8_e4m3fn or float8_e5m2"}
# What a latent plan refuses, and why.
_LATENT_NONE = {
    "value": "V is the first value_head_dim columns of the latent cache "
             "(key); pass q_offset and kv_len by name",
    "update_v": "update_k holds the new tokens' whole latent rows (their "
                "first value_head_dim columns are their V)",
    "v_scale": "k_scale dequantises the latent cache, K and the V inside it"}


def _plan(plan_id):
    with _registry_lock:
        plan = _registry.get(plan_id)
    if plan is None:
        raise KVAttnValueError(f"no kvattn plan {plan_id!r} (closed, or "
                               "never made: kvattn.torch.Plan)")
    return plan


@torch.library.custom_op("kvattn::plan_run", mutates_args=("out",))
def _plan_run_op(plan: str, query: torch.Tensor, key: torch.Tensor,
                 value: torch.Tensor, q_offset: torch.Tensor,
                 kv_len: torch.Tensor, block_table: Optional[torch.Tensor],
                 q_start: Optional[torch.Tensor],
                 sinks: Optional[torch.Tensor],
                 alibi_slopes: Optional[torch.Tensor],
                 out: torch.Tensor, k_scale: Optional[torch.Tensor] = None,
                 v_scale: Optional[torch.Tensor] = None) -> None:
    _plan(plan)._run(dict(query=query, key=key, value=value,
                          q_offset=q_offset, kv_len=kv_len,
                          block_table=block_table, q_start=q_start,
                          sinks=sinks, alibi_slopes=alibi_slopes, out=out,
                          k_scale=k_scale, v_scale=v_scale))


@_plan_run_op.register_fake
def _(plan, query, key, value, q_offset, kv_len, block_table, q_start, sinks,
      alibi_slopes, out, k_scale=None, v_scale=None):
    return None


@torch.library.custom_op("kvattn::plan_append_run",
                         mutates_args=("key", "value", "out"))
def _plan_append_run_op(plan: str, query: torch.Tensor, key: torch.Tensor,
                        value: torch.Tensor, update_k: torch.Tensor,
                        update_v: torch.Tensor, q_offset: torch.Tensor,
                        kv_len: torch.Tensor,
                        block_table: Optional[torch.Tensor],
                        q_start: Optional[torch.Tensor],
                        sinks: Optional[torch.Tensor],
                        alibi_slopes: Optional[torch.Tensor],
                        out: torch.Tensor,
                        k_scale: Optional[torch.Tensor] = None,
                        v_scale: Optional[torch.Tensor] = None) -> None:
    _plan(plan)._run(dict(query=query, key=key, value=value,
                          update_k=update_k, update_v=update_v,
                          q_offset=q_offset, kv_len=kv_len,
                          block_table=block_table, q_start=q_start,
                          sinks=sinks, alibi_slopes=alibi_slopes, out=out,
                          k_scale=k_scale, v_scale=v_scale))


@_plan_append_run_op.register_fake
def _(plan, query, key, value, update_k, update_v, q_offset, kv_len,
      block_table, q_start, sinks, alibi_slopes, out, k_scale=None,
      v_scale=None):
    return None


@torch.library.custom_op("kvattn::plan_latent_run",
                         mutates_args=("cache", "out"))
def _plan_latent_run_op(plan: str, query: torch.Tensor, cache: torch.Tensor,
                        update: Optional[torch.Tensor],
                        q_offset: torch.Tensor, kv_len: torch.Tensor,
                        block_table: Optional[torch.Tensor],
                        q_start: Optional[torch.Tensor],
                        sinks: Optional[torch.Tensor],
                        alibi_slopes: Optional[torch.Tensor],
                        out: torch.Tensor,
                        k_scale: Optional[torch.Tensor] = None) -> None:
    """A latent plan's run: one cache (written in place from `update` when
    the plan appends), V inside it."""
    _plan(plan)._run(dict(query=query, key=cache, update_k=update,
                          q_offset=q_offset, kv_len=kv_len,
                          block_table=block_table, q_start=q_start,
                          sinks=sinks, alibi_slopes=alibi_slopes, out=out,
                          k_scale=k_scale))


@_plan_latent_run_op.register_fake
def _(plan, query, cache, update, q_offset, kv_len, block_table, q_start,
      sinks, alibi_slopes, out, k_scale=None):
    return None


# --- the CUDA kernels of kvattn::attention / attention_out / append ---------
# Each signature's program is a plan (compiled with device validation): a
# call passes every tensor, q_offset and kv_len included, as a device
# pointer and queues the launches on torch's current stream; nothing is
# copied to the host and nothing waits. A bad position is recorded in the
# plan's status word (the kernels of that plan then compute nothing until it
# is cleared); kvattn.torch.check() reads the words and raises it.

# A plan's split-KV workspaces are sized for its bounds on B and L (and the
# largest chunk count): a signature keeps one such plan while the workspace
# for the call's (B, L), rounded up to powers of two, stays within this
# budget, and a plan compiled with split_kv = 1 (no workspace, no bounds)
# for larger calls (prefills, long appends).
WORKSPACE_BUDGET = 256 << 20

_op_lock = threading.Lock()
# (signature, runtime) -> {"split": (plan, B bound, L bound),
#                          "nosplit": plan, "unit": workspace bytes per B*L}
_op_plans: Dict[tuple, dict] = {}
_retired: list = []  # plans outgrown (kept: queued kernels may use them)


def _pow2(n):
    return 1 << max(int(n) - 1, 0).bit_length()


def device_run(runtime, signature, make_ir, buffers, sizes, stream):
    """Runs the program of `signature` (IR from make_ir()) on `runtime`:
    `buffers` {name: device pointer} (metadata included), `sizes` {B, Hq,
    Hkv, L, S, cache_rows}, queued on `stream`. The CUDA kernels of the ops
    call it with torch tensors' pointers; the tests with the emulated GPU's
    DeviceArrays."""
    key = (signature, id(runtime))
    with _op_lock:
        entry = _op_plans.setdefault(key, {"runtime": runtime})
    s = [sizes.get(n, 0) for n in _SIZE_NAMES]
    try:
        _device_plan(entry, make_ir, sizes).handle.run(s, buffers, stream)
    except KVAttnError as e:
        # A tensor of 2^31 elements or more: the 32-bit kernels refuse it on
        # the host before their launch. The signature's plans are compiled
        # again, once, with 64-bit index arithmetic, and kept.
        if entry.get("wide") or "index_bits 32" not in str(e):
            raise
        with _op_lock:
            entry["wide"] = True
            for k in ("split", "nosplit"):
                old = entry.pop(k, None)
                if old is not None:
                    _retired.append(old[0] if k == "split" else old)
            entry.pop("unit", None)
        _device_plan(entry, make_ir, sizes).handle.run(s, buffers, stream)


def _device_plan(entry, make_ir, sizes):
    """The plan of a device_run entry for these sizes: the split one while
    its workspace bound allows (grown in powers of two), else one without
    split; with 64-bit index arithmetic once the entry is "wide"."""
    import kvattn
    runtime = entry["runtime"]
    wide = {"index_bitwidth": 64} if entry.get("wide") else {}
    B, L = max(sizes.get("B", 1), 1), max(sizes.get("L", 1), 1)
    plan = None
    split = entry.get("split")
    if split and B <= split[1] and L <= split[2]:
        plan = split[0]
    else:
        nb, nl = _pow2(B), _pow2(L)
        if split:
            nb, nl = max(nb, split[1]), max(nl, split[2])
        unit = entry.get("unit")
        if unit is None or unit * nb * nl <= WORKSPACE_BUDGET:
            new = kvattn.Plan(make_ir(), runtime=runtime,
                              max_sizes={"B": nb, "L": nl}, **wide)
            unit = max(new.workspace_bytes - 128, 0) / (nb * nl)
            with _op_lock:
                entry["unit"] = unit
                if unit * nb * nl <= WORKSPACE_BUDGET:
                    if split:
                        _retired.append(split[0])
                    entry["split"] = split = (new, nb, nl)
                    plan = new
                else:
                    _retired.append(new)
        if plan is None:
            plan = entry.get("nosplit")
            if plan is None:
                plan = kvattn.Plan(make_ir(), runtime=runtime, split_kv=1,
                                   **wide)
                with _op_lock:
                    entry["nosplit"] = plan
    return plan


def op_plans():
    """The plans behind the ops' device kernels: [(signature, plan)]."""
    with _op_lock:
        out = []
        for (signature, _), entry in _op_plans.items():
            for k in ("split", "nosplit"):
                p = entry.get(k)
                if p is not None:
                    out.append((signature, p[0] if k == "split" else p))
        return out + [(None, p) for p in _retired]


def check(device=None) -> None:
    """Reads the status words of the plans behind kvattn::attention,
    attention_out and append on the device (waits for each runtime's
    stream: torch's current stream where the op ran), clears them, and
    raises KVAttnError with the first violation recorded (a position out of
    range, a cache row outside the capacity...). Since that call the ops of
    that signature computed nothing: their outputs hold what was there
    before (torch.empty's memory for an allocated one). device: a CUDA
    device to check (None: all)."""
    first = None
    for signature, plan in op_plans():
        if device is not None and plan.runtime.device != \
                torch.device(device).index:
            continue
        message = plan.status()
        if message:
            plan.clear_status()
            if first is None:
                first = message
    if first:
        raise KVAttnError(first)


def clear():
    """Closes the ops' device plans (after waiting for their runtimes)."""
    plans = [p for _, p in op_plans()]
    runtimes = {id(p.runtime): p.runtime for p in plans}
    for rt in runtimes.values():
        rt.synchronize()
    for p in plans:
        p.close()
    with _op_lock:
        _op_plans.clear()
        _retired.clear()
