"""DeepSeek MLA in its absorbed (latent) form as a torch op:
`torch.ops.kvattn.mla_attention` (docs/torch.md, "MLA").

    out, lse = kt.mla_attention(q, kv_cache, block_table=table,
                                kv_len=seqlens, head_dim_v=512,
                                scale=1 / 192 ** 0.5, return_lse=True)

Each query head is `[q_nope·W_UK (512), q_pe (64)]` and each token stores ONE
latent row `[c_kv (512), k_pe (64)]` shared by every query head: the score is
`scale · dot(q_h, row_j)` over all D = 576 columns and the value of key j is
the row's first `head_dim_v` = 512 columns (docs/semantics.md, "Latent KV").
The cache is FlashMLA's single 576-wide buffer, which is what kvattn's
latent form reads without a copy (`kvattn.attention` with `value_dim` and no
value operand): paged `[num_pages, page_size, Hkv, D]` with an int32
`block_table [B, max_pages]`, or plain `[B, Hkv, S, D]` (`"bshd"`: `[B, S,
Hkv, D]`). FlashInfer's split `ckv_cache` / `kpe_cache` are taken when they
are the two column ranges of one such buffer (`mla_attention_split`).
An FP8 cache (torch.float8_e4m3fn / float8_e5m2) is read as `code ·
kv_scale`, `kv_scale` float32 per tensor, per KV head or per token.
"""

from typing import Optional, Tuple

import torch

from ..capi import KVAttnTypeError, KVAttnValueError
from . import (_FP8, _check_options, _check_result, _cpu_program, _cpu_run,
               _cuda_runtime, _dense, _float_dtype, _float_tensor,
               _four_dims, _layout, _on_query_device, _scale_granularity,
               _positions, _program, _program_stats, _tensor, _to_bhsd, _ty)

__all__ = ["mla_attention", "mla_attention_split", "mla_attention_ir",
           "concat_and_cache_mla", "mla_cache_write_ir", "MAX_HEAD_DIM"]

# The latent form's widest head (512 latent + 64 rotary): kvattn's
# limits::kMaxHeadDim.
MAX_HEAD_DIM = 576


def mla_attention_ir(dtype, Hq, Hkv, D, Dv, page_size, causal, scale,
                     kv=None):
    """kvattn IR of one latent attention with dynamic B, L, S (and pages):
    query [B, Hq, L, D]; the cache [B, Hkv, S, D], or with `page_size` the
    pool [num_pages, page_size, Hkv, D] and block_table (i32 [B,
    max_pages]); q_offset and kv_len (i64 [B]); with `kv` = (FP8 format,
    granularity "tensor" | "head" | "token") the cache in that format and
    its f32 k_scale last. Results out [B, Hq, L, Dv] and lse [B, Hq, L]
    (f32, natural log)."""
    kv_elt = kv[0] if kv else dtype
    q = _ty(["?", str(Hq), "?", str(D)], dtype)
    if page_size:
        c = _ty(["?", str(page_size), str(Hkv), str(D)], kv_elt)
    else:
        c = _ty(["?", str(Hkv), "?", str(D)], kv_elt)
    o = _ty(["?", str(Hq), "?", str(Dv)], dtype)
    lse = _ty(["?", str(Hq), "?"], "f32")
    i64 = "tensor<?xi64>"
    args, uses = "", ""
    if page_size:
        bt = "tensor<?x?xi32>"
        args += f", %bt: {bt}"
        uses += f" block_table(%bt : {bt})"
    if kv:
        gran = kv[1]
        rows = ["?", str(page_size), str(Hkv)] if page_size else \
            ["?", str(Hkv), "?"]
        t = {"tensor": _ty(["1"], "f32"), "head": _ty([str(Hkv)], "f32"),
             "token": _ty(rows, "f32")}[gran]
        args += f", %ks: {t}"
        uses += f" k_scale(%ks : {t})"
    attrs = (" causal" if causal else "") + \
        (f" scale = {scale!r}" if scale is not None else "")
    return (f"func.func @mla_attention(%q: {q}, %c: {c}, %qo: {i64}, "
            f"%kl: {i64}{args}) -> ({o}, {lse}) {{\n"
            f"  %o, %lse = kvattn.attention %q, %c value_dim = {Dv} "
            f"q_offset(%qo : {i64}) kv_len(%kl : {i64}){uses}{attrs}\n"
            f"      : {q}, {c} -> {o}, {lse}\n"
            f"  return %o, %lse : {o}, {lse}\n}}\n")


# --- validation (every check before anything runs) ---------------------------

def _check_mla(query, kv_cache, block_table, head_dim_v, layout):
    """Returns (dtype, dims, page_size) with dims (B, Hq, Hkv, L, S, D, Dv);
    S is max_pages * page_size for a paged cache."""
    _tensor("query", query)
    _tensor("kv_cache", kv_cache)
    dtype = _float_tensor("query", query)
    if kv_cache.dtype in _FP8:
        _four_dims("kv_cache", kv_cache)
    elif _float_tensor("kv_cache", kv_cache) != dtype:
        raise KVAttnTypeError(
            f"kv_cache has dtype {kv_cache.dtype}, query {query.dtype}: the "
            "latent cache is in the query's dtype (or FP8: "
            "torch.float8_e4m3fn / float8_e5m2 with kv_scale)")
    _on_query_device("kv_cache", kv_cache, query)
    if query.device.type not in ("cpu", "cuda", "meta"):
        raise KVAttnValueError(f"query is on {query.device}: kvattn runs on "
                               "the CPU and CUDA devices")
    q = _to_bhsd(query, layout)
    B, Hq, L, D = q.shape
    if kv_cache.shape[-1] != D:
        raise KVAttnValueError(
            f"kv_cache head dim {kv_cache.shape[-1]} != query head dim {D}: "
            "in the latent form each query head [q_nope·W_UK, q_pe] and "
            "each cache row [c_kv, k_pe] have one width D (DeepSeek: 512 + "
            "64 = 576)")
    if not 1 <= D <= MAX_HEAD_DIM:
        raise KVAttnValueError(f"head dim D = {D} must be in [1, "
                               f"{MAX_HEAD_DIM}] (512 latent + 64 rotary)")
    if isinstance(head_dim_v, bool) or not isinstance(head_dim_v, int):
        raise KVAttnTypeError(f"head_dim_v must be an int, got "
                              f"{head_dim_v!r}")
    if not 1 <= head_dim_v <= D:
        raise KVAttnValueError(
            f"head_dim_v = {head_dim_v} must be in [1, D = {D}]: V is the "
            "first head_dim_v columns of each cache row (Dv <= D)")
    page_size = 0
    if block_table is not None:
        _tensor("block_table", block_table)
        if block_table.dtype != torch.int32:
            raise KVAttnTypeError(
                f"block_table has dtype {block_table.dtype}; it must be "
                "torch.int32 (FlashMLA's and FlashInfer's page tables)")
        if block_table.device != query.device:
            raise KVAttnValueError(f"block_table is on {block_table.device}, "
                                   f"query on {query.device}")
        if block_table.dim() != 2 or block_table.shape[0] != B:
            raise KVAttnValueError(
                f"block_table has shape {tuple(block_table.shape)}; it must "
                f"be [B, max_pages] with B = {B}")
        # The pool [num_pages, page_size, Hkv, D] (FlashMLA's), whatever
        # the layout of the query.
        num_pages, page_size, Hkv = kv_cache.shape[:3]
        if page_size < 1:
            raise KVAttnValueError(f"kv_cache has page size {page_size}: a "
                                   "paged cache is [num_pages, page_size, "
                                   "Hkv, D] with page_size >= 1")
        S = block_table.shape[1] * page_size
    else:
        c = _to_bhsd(kv_cache, layout)
        if c.shape[0] != B:
            raise KVAttnValueError(f"batch sizes differ: query {B}, kv_cache "
                                   f"{c.shape[0]} (a paged cache needs "
                                   "block_table)")
        Hkv, S = c.shape[1], c.shape[2]
    if Hkv == 0 or Hq % Hkv:
        raise KVAttnValueError(f"query heads Hq = {Hq} must be a multiple of "
                               f"kv heads Hkv = {Hkv}")
    return dtype, (B, Hq, Hkv, L, S, D, head_dim_v), page_size


def _check_kv_scale(kv_cache, kv_scale, query, dims, page_size, layout):
    """An FP8 latent cache's scale: None for a cache in the query's dtype
    (no scale allowed), else (format, granularity): "tensor" ([1] or 0-d),
    "head" ([Hkv]) or "token" (the cache's shape without D: [num_pages,
    page_size, Hkv] paged, [B, Hkv, S] plain, bshd [B, S, Hkv])."""
    fmt = _FP8.get(kv_cache.dtype)
    if fmt is None:
        if kv_scale is not None:
            raise KVAttnValueError(
                f"kv_scale dequantises an FP8 latent cache, but kv_cache is "
                f"{kv_cache.dtype}: drop it, or store the cache as "
                "torch.float8_e4m3fn or torch.float8_e5m2")
        return None
    Hkv = dims[2]
    rows = tuple(kv_cache.shape[:3])
    if kv_scale is None:
        raise KVAttnValueError(
            f"an FP8 latent cache ({kv_cache.dtype}) needs kv_scale "
            "(torch.float32: per tensor [1], per KV head [Hkv] or per token, "
            "the cache's shape without D)")
    where = "paged" if page_size else layout
    return fmt, _scale_granularity(
        "kv_scale", kv_scale, query, Hkv, rows, lambda shape: (
            f"kv_scale has shape {shape}: a latent cache's scale is per "
            f"tensor [1], per KV head [Hkv] = [{Hkv}] or per token "
            f"{list(rows)} (the cache's shape without D, {where})"))


def _scale_tensor(t, gran, paged, layout):
    """kv_scale as the IR takes it: [1], [Hkv], or the token scales in the
    cache's [B, Hkv, S] (paged: [num_pages, page_size, Hkv]) order."""
    if gran == "tensor":
        return t.reshape(1)
    if gran == "token" and not paged and layout == "bshd":
        return t.transpose(1, 2).contiguous()
    return _dense(t)


def _out_shapes(query, head_dim_v, layout):
    if layout == "bshd":
        B, L, Hq, _ = query.shape
        return (B, L, Hq, head_dim_v), (B, Hq, L)
    B, Hq, L, _ = query.shape
    return (B, Hq, L, head_dim_v), (B, Hq, L)


def _mla_into(query, kv_cache, q_offset, kv_len, block_table, head_dim_v,
              causal, scale, layout, out, lse, kv_scale=None):
    """Checks everything, then runs the latent attention into `out` ([B,
    Hq, L, Dv] in `layout`) and `lse` ([B, Hq, L], f32)."""
    layout = _layout(layout)
    dtype, dims, page_size = _check_mla(query, kv_cache, block_table,
                                        head_dim_v, layout)
    _, _, scale = _check_options(causal, 0, 0.0, scale)
    B, Hq, Hkv, L, S, D, Dv = dims
    kv_fp8 = _check_kv_scale(kv_cache, kv_scale, query, dims, page_size,
                             layout)
    want_out, want_lse = _out_shapes(query, Dv, layout)
    _check_result("out", out, query, query.dtype, want_out)
    _check_result("lse", lse, query, torch.float32, want_lse)
    if kv_len is None:
        if page_size:
            raise KVAttnValueError(
                "a paged latent cache needs kv_len (FlashMLA's "
                "cache_seqlens): the block table says where keys may live, "
                "not how many there are")
        kv = torch.full((B,), S, dtype=torch.int64, device=query.device)
    else:
        kv = _positions("kv_len", kv_len, B, query.device)
    qo = (kv - L) if q_offset is None else _positions("q_offset", q_offset,
                                                      B, query.device)
    signature = ("mla_attention", dtype, Hq, Hkv, D, Dv, page_size, causal,
                 scale, kv_fp8, str(query.device))
    make_ir = (lambda: mla_attention_ir(dtype, Hq, Hkv, D, Dv, page_size,
                                        causal, scale, kv_fp8))
    q = _dense(_to_bhsd(query, layout))
    c = _dense(kv_cache if page_size else _to_bhsd(kv_cache, layout))
    o = _to_bhsd(out, layout)
    target = o if o.is_contiguous() else torch.empty(
        (B, Hq, L, Dv), dtype=out.dtype, device=out.device)
    lse_target = lse if lse.is_contiguous() else torch.empty(
        (B, Hq, L), dtype=torch.float32, device=lse.device)
    inputs = [("query", q), ("key", c), ("q_offset", qo.contiguous()),
              ("kv_len", kv.contiguous())]
    if page_size:
        inputs.append(("block_table", _dense(block_table)))
    if kv_fp8:
        inputs.append(("k_scale", _scale_tensor(kv_scale.detach(), kv_fp8[1],
                                                page_size, layout)))
    if query.device.type == "cpu":
        # The C API checks q_offset, kv_len and the block table (offsets
        # non-negative, kv_len within the pages, page ids within the pool)
        # with the reference's messages.
        program = _program(signature, lambda: _cpu_program(make_ir()))
        _cpu_run(program, inputs, [target, lse_target],
                 "kvattn::mla_attention")
    else:
        _cuda_mla(query.device, signature, make_ir, dict(inputs), target,
                  lse_target, dims, page_size, c)
    if target is not o:
        o.copy_(target)
    if lse_target is not lse:
        lse.copy_(lse_target)


def _cuda_mla(device, signature, make_ir, tensors, out, lse, dims,
              page_size, cache):
    """The runtime's kernels (a plan of mla_attention_ir) on torch's
    current stream: every tensor, q_offset, kv_len and the block table by
    device pointer, the metadata validated on the device (kt.check())."""
    from .serving import device_run
    B, Hq, Hkv, L, S, D, Dv = dims
    rt = _cuda_runtime(device)
    tensors = dict(tensors, out=out, lse=lse)
    tensors["q_offset"] = tensors["q_offset"].to(device, torch.int64)
    tensors["kv_len"] = tensors["kv_len"].to(device, torch.int64)
    sizes = {"B": B, "Hq": Hq, "Hkv": Hkv, "L": L, "S": S}
    if page_size:
        sizes.update(num_pages=cache.shape[0], page_size=page_size,
                     max_pages=S // page_size)
    with _program_stats(signature):
        device_run(rt, signature, make_ir,
                   {n: t.data_ptr() for n, t in tensors.items()}, sizes,
                   torch.cuda.current_stream(device).cuda_stream)


# --- the ops --------------------------------------------------------------

@torch.library.custom_op("kvattn::mla_attention", mutates_args=())
def _mla_op(query: torch.Tensor, kv_cache: torch.Tensor,
            q_offset: Optional[torch.Tensor], kv_len: Optional[torch.Tensor],
            block_table: Optional[torch.Tensor], head_dim_v: int,
            causal: bool, scale: Optional[float], layout: str,
            kv_scale: Optional[torch.Tensor] = None
            ) -> Tuple[torch.Tensor, torch.Tensor]:
    shape, lse_shape = _out_shapes(query, head_dim_v, _layout(layout))
    out = query.new_empty(shape)
    lse = query.new_empty(lse_shape, dtype=torch.float32)
    _mla_into(query, kv_cache, q_offset, kv_len, block_table, head_dim_v,
              causal, scale, layout, out, lse, kv_scale)
    return out, lse


@_mla_op.register_fake
def _(query, kv_cache, q_offset, kv_len, block_table, head_dim_v, causal,
      scale, layout, kv_scale=None):
    shape, lse_shape = _out_shapes(query, head_dim_v, layout)
    return (query.new_empty(shape),
            query.new_empty(lse_shape, dtype=torch.float32))


@torch.library.custom_op("kvattn::mla_attention_out",
                         mutates_args=("out", "lse"))
def _mla_out_op(query: torch.Tensor, kv_cache: torch.Tensor,
                q_offset: Optional[torch.Tensor],
                kv_len: Optional[torch.Tensor],
                block_table: Optional[torch.Tensor], head_dim_v: int,
                causal: bool, scale: Optional[float], layout: str,
                out: torch.Tensor, lse: torch.Tensor,
                kv_scale: Optional[torch.Tensor] = None) -> None:
    _mla_into(query, kv_cache, q_offset, kv_len, block_table, head_dim_v,
              causal, scale, layout, out, lse, kv_scale)


@_mla_out_op.register_fake
def _(query, kv_cache, q_offset, kv_len, block_table, head_dim_v, causal,
      scale, layout, out, lse, kv_scale=None):
    return None


def _alias(what, value, alias_name, alias):
    if alias is None:
        return value
    if value is not None:
        raise KVAttnValueError(f"give {what} or its alias {alias_name}, not "
                               "both")
    return alias


def mla_attention(query: torch.Tensor, kv_cache: torch.Tensor, *,
                  head_dim_v: int = 512,
                  block_table: Optional[torch.Tensor] = None,
                  kv_len=None, cache_seqlens=None, q_offset=None,
                  causal: bool = True, scale: Optional[float] = None,
                  softmax_scale: Optional[float] = None,
                  layout: str = "bhsd", out: Optional[torch.Tensor] = None,
                  lse: Optional[torch.Tensor] = None,
                  return_lse: bool = False,
                  kv_scale: Optional[torch.Tensor] = None):
    """DeepSeek MLA, absorbed (docs/torch.md "MLA"; docs/semantics.md
    "Latent KV"): query [B, Hq, L, D] ("bshd": [B, L, Hq, D], FlashMLA's
    q) with each head [q_nope·W_UK, q_pe]; kv_cache the latent rows [c_kv,
    k_pe] of width D (<= 576) in ONE buffer: paged [num_pages, page_size,
    Hkv, D] with block_table (int32 [B, max_pages], -1 past a sequence's
    pages), or plain [B, Hkv, S, D] ("bshd": [B, S, Hkv, D]). Score
    scale · dot(q_h, row_j) over all D columns; value the row's first
    head_dim_v columns (W_UV is the caller's, after). Query row i of batch
    b sits at q_offset[b] + i (default kv_len - L: decode / MTP rows are
    the last tokens); key j is valid below kv_len[b] (alias cache_seqlens;
    required when paged); causal: j <= q_offset[b] + i. scale (alias
    softmax_scale) defaults to 1/sqrt(D): DeepSeek's is 1/sqrt(192), pass
    it. An FP8 cache (torch.float8_e4m3fn / float8_e5m2) is read as code ·
    kv_scale (float32 [1], [Hkv] or per token: the cache's shape without
    D). Returns out [B, Hq, L, Dv] (in `layout`; written into `out` when
    given), and with return_lse=True (out, lse), lse [B, Hq, L] float32,
    natural log (-inf for a row that sees no key)."""
    kv_len = _alias("kv_len", kv_len, "cache_seqlens", cache_seqlens)
    scale = _alias("scale", scale, "softmax_scale", softmax_scale)
    _tensor("query", query)
    batch = _to_bhsd(query, _layout(layout)).shape[0]
    if kv_len is not None and not isinstance(kv_len, torch.Tensor):
        kv_len = _positions("kv_len", kv_len, batch, query.device)
    if q_offset is not None and not isinstance(q_offset, torch.Tensor):
        q_offset = _positions("q_offset", q_offset, batch, query.device)
    # Checked here too, so that misuse is a KVAttnError before torch's
    # dispatcher sees the arguments.
    _, dims, page_size = _check_mla(query, kv_cache, block_table, head_dim_v,
                                    layout)
    _check_options(causal, 0, 0.0, scale)
    _check_kv_scale(kv_cache, kv_scale, query, dims, page_size, layout)
    if page_size and kv_len is None:
        raise KVAttnValueError(
            "a paged latent cache needs kv_len (FlashMLA's cache_seqlens): "
            "the block table says where keys may live, not how many there "
            "are")
    if scale is not None:
        scale = float(scale)
    if out is None and lse is None:
        out, lse_ = torch.ops.kvattn.mla_attention(
            query, kv_cache, q_offset, kv_len, block_table, head_dim_v,
            causal, scale, layout, kv_scale)
        return (out, lse_) if return_lse else out
    if out is None:
        out = query.new_empty(_out_shapes(query, head_dim_v, layout)[0])
    lse_ = lse if lse is not None else query.new_empty(
        _out_shapes(query, head_dim_v, layout)[1], dtype=torch.float32)
    torch.ops.kvattn.mla_attention_out(query, kv_cache, q_offset, kv_len,
                                       block_table, head_dim_v, causal, scale,
                                       layout, out, lse_, kv_scale)
    return (out, lse_) if return_lse or lse is not None else out


def mla_attention_split(q_nope: torch.Tensor, q_pe: torch.Tensor,
                        ckv_cache: torch.Tensor, kpe_cache: torch.Tensor,
                        **kwargs):
    """FlashInfer's form (BatchMLAPagedAttentionWrapper's q_nope [.., 512],
    q_pe [.., 64], ckv_cache [.., 512], kpe_cache [.., 64]) over
    mla_attention: the caches must be the two column ranges of one buffer
    (ckv_cache = kv[..., :512], kpe_cache = kv[..., 512:], the layout
    serving engines allocate), taken without a copy; separately allocated
    caches are refused (kvattn reads one latent row per token: concatenate
    them once, into a [.., 576] cache). The query halves are read in place
    when they too are column ranges of one buffer, else concatenated (one
    copy of [B, Hq, L, 576]). head_dim_v is ckv_cache's width. Keywords as
    mla_attention."""
    for what, t in (("q_nope", q_nope), ("q_pe", q_pe),
                    ("ckv_cache", ckv_cache), ("kpe_cache", kpe_cache)):
        _tensor(what, t)
    if "head_dim_v" in kwargs:
        raise KVAttnValueError("mla_attention_split takes head_dim_v from "
                               "ckv_cache's width: drop it")
    if not _adjacent(ckv_cache, kpe_cache):
        raise KVAttnValueError(
            "ckv_cache and kpe_cache must be the two column ranges of one "
            "latent cache (ckv_cache = kv[..., :Dv], kpe_cache = kv[..., "
            f"Dv:]; got shapes {tuple(ckv_cache.shape)} and "
            f"{tuple(kpe_cache.shape)}, strides {tuple(ckv_cache.stride())} "
            f"and {tuple(kpe_cache.stride())}): kvattn reads one row "
            "[c_kv, k_pe] per token, without a copy")
    kv = _joined(ckv_cache, kpe_cache)
    if q_nope.shape[:-1] != q_pe.shape[:-1]:
        raise KVAttnValueError(f"q_nope {tuple(q_nope.shape)} and q_pe "
                               f"{tuple(q_pe.shape)} differ before the last "
                               "dim")
    # The query halves of one buffer are read in place too; else joined.
    query = _joined(q_nope, q_pe) if _adjacent(q_nope, q_pe) else \
        torch.cat([q_nope, q_pe], dim=-1)
    return mla_attention(query, kv, head_dim_v=ckv_cache.shape[-1], **kwargs)


def _adjacent(a, b):
    """Whether b is the column range right after a's in one buffer (the same
    dtype, device, leading shape and strides, b's first column a's last +
    1, each row wide enough for both)."""
    return (a.dtype == b.dtype and a.device == b.device and
            a.dim() == b.dim() and a.dim() >= 2 and
            a.shape[:-1] == b.shape[:-1] and a.stride() == b.stride() and
            a.stride(-1) == 1 and
            b.data_ptr() == a.data_ptr() + a.shape[-1] * a.element_size() and
            a.stride(-2) >= a.shape[-1] + b.shape[-1])


def _joined(a, b):
    """The [.., Da + Db] view over adjacent column ranges a and b."""
    return torch.as_strided(a, tuple(a.shape[:-1]) + (a.shape[-1] +
                                                      b.shape[-1],),
                            a.stride(), a.storage_offset())


# --- writing the latent cache: concat_and_cache_mla --------------------------

def mla_cache_write_ir(dtype, page_size, D, kv=None):
    """kvattn IR that writes T new latent rows (update [T, 1, 1, D]) into a
    paged latent cache [num_pages, page_size, 1, D]: token t is "sequence" t
    of one row at position pos[t] (i64 [T]) through the one-column
    block_table[t] (i32 [T, 1]), i.e. slot block_table[t][0] * page_size +
    pos[t]; `skip_padding`: a token whose block_table[t][0] is -1 is a
    padding token and writes nothing (vLLM's slot -1). With `kv` (an FP8
    format) the cache holds its codes and the rows are quantised with
    kv_scale (f32 [1], the last argument)."""
    u = _ty(["?", "1", "1", str(D)], dtype)
    c = _ty(["?", str(page_size), "1", str(D)], kv or dtype)
    bt = "tensor<?x1xi32>"
    args, use = "", ""
    if kv:
        args, use = ", %s: tensor<1xf32>", " kv_scale(%s : tensor<1xf32>)"
    return (f"func.func @mla_cache_write(%u: {u}, %c: {c}, "
            f"%p: tensor<?xi64>, %bt: {bt}{args}) -> {c} {{\n"
            f"  %r = kvattn.append %u into %c at %p block_table(%bt : {bt})"
            f" skip_padding{use} : {u} into {c}, tensor<?xi64>\n"
            f"  return %r : {c}\n}}\n")


# vLLM's padding slot: a token at slot -1 (CUDA graphs pad a batch with
# such tokens) is skipped by its cache-write kernels, and by kvattn's.
_PADDING_SLOT = -1

# vLLM's kv_cache_dtype strings and the cache dtype each one needs.
_KV_CACHE_DTYPES = {"fp8": torch.float8_e4m3fn,
                    "fp8_e4m3": torch.float8_e4m3fn,
                    "fp8_e5m2": torch.float8_e5m2}


def _check_cache_write(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype,
                       scale):
    """Returns (dtype name, pool view [num_pages, page, 1, D], T, FP8
    format or None)."""
    for what, t in (("kv_c", kv_c), ("k_pe", k_pe), ("kv_cache", kv_cache),
                    ("slot_mapping", slot_mapping)):
        _tensor(what, t)
    dtype = _float_dtype("kv_c", kv_c)
    if k_pe.dtype != kv_c.dtype:
        raise KVAttnTypeError(f"k_pe has dtype {k_pe.dtype}, kv_c "
                              f"{kv_c.dtype}")
    if kv_c.dim() != 2 or k_pe.dim() != 2 or \
            k_pe.shape[0] != kv_c.shape[0]:
        raise KVAttnValueError(
            f"kv_c {tuple(kv_c.shape)} and k_pe {tuple(k_pe.shape)} must be "
            "[num_tokens, kv_lora_rank] and [num_tokens, rope_dim]")
    T, D = kv_c.shape[0], kv_c.shape[1] + k_pe.shape[1]
    if kv_cache.dim() == 3:
        pool = kv_cache.unsqueeze(2)  # vLLM's [num_blocks, block_size, D]
    elif kv_cache.dim() == 4 and kv_cache.shape[2] == 1:
        pool = kv_cache  # FlashMLA's [num_blocks, block_size, 1, D]
    else:
        raise KVAttnValueError(
            f"kv_cache has shape {tuple(kv_cache.shape)}: a latent cache is "
            "[num_blocks, block_size, D] (vLLM) or [num_blocks, block_size, "
            "1, D] (FlashMLA)")
    if pool.shape[-1] != D:
        raise KVAttnValueError(
            f"kv_cache rows are {pool.shape[-1]} wide, kv_c + k_pe "
            f"{kv_c.shape[1]} + {k_pe.shape[1]} = {D}")
    if not 1 <= D <= MAX_HEAD_DIM:
        raise KVAttnValueError(f"the latent row's width D = {D} must be in "
                               f"[1, {MAX_HEAD_DIM}]")
    if not kv_cache.is_contiguous():
        raise KVAttnValueError(
            f"kv_cache is not contiguous (strides {tuple(kv_cache.stride())})"
            ": it is written in place")
    fmt = _FP8.get(kv_cache.dtype)
    if kv_cache_dtype == "auto":
        if fmt is None and kv_cache.dtype != kv_c.dtype:
            raise KVAttnTypeError(
                f"kv_cache has dtype {kv_cache.dtype}, kv_c {kv_c.dtype}: "
                "with kv_cache_dtype='auto' the cache is in kv_c's dtype (or "
                "torch.float8_e4m3fn / float8_e5m2 codes, with scale)")
    elif kv_cache_dtype in _KV_CACHE_DTYPES:
        if kv_cache.dtype != _KV_CACHE_DTYPES[kv_cache_dtype]:
            raise KVAttnTypeError(
                f"kv_cache_dtype={kv_cache_dtype!r} needs a "
                f"{_KV_CACHE_DTYPES[kv_cache_dtype]} kv_cache, got "
                f"{kv_cache.dtype}")
    else:
        raise KVAttnValueError(
            f"kv_cache_dtype {kv_cache_dtype!r}: 'auto', 'fp8', 'fp8_e4m3' "
            "or 'fp8_e5m2'")
    if fmt is not None:
        if scale is None:
            raise KVAttnValueError(
                f"an FP8 latent cache ({kv_cache.dtype}) needs scale "
                "(torch.float32 [1]: the rows are written as RN(row / "
                "scale))")
        _tensor("scale", scale)
        if scale.dtype != torch.float32 or tuple(scale.shape) not in \
                ((), (1,)):
            raise KVAttnValueError(
                f"scale has dtype {scale.dtype} and shape "
                f"{tuple(scale.shape)}; it must be torch.float32 [1] (one "
                "scale for the cache)")
    elif scale is not None:
        raise KVAttnValueError(
            f"scale quantises into an FP8 latent cache, but kv_cache is "
            f"{kv_cache.dtype}: drop it")
    if slot_mapping.dtype not in (torch.int32, torch.int64) or \
            tuple(slot_mapping.shape) != (T,):
        raise KVAttnValueError(
            f"slot_mapping has dtype {slot_mapping.dtype} and shape "
            f"{tuple(slot_mapping.shape)}; it must be int32 or int64 "
            f"[num_tokens] = [{T}]")
    for what, t in (("k_pe", k_pe), ("kv_cache", kv_cache),
                    ("slot_mapping", slot_mapping)) + \
            ((("scale", scale),) if scale is not None else ()):
        if t.device != kv_c.device:
            raise KVAttnValueError(f"{what} is on {t.device}, kv_c on "
                                   f"{kv_c.device}")
    return dtype, pool, T, fmt


def _slot_rows(slots, page):
    """vLLM's slots (int64 [T]) as mla_cache_write_ir's pos (i64 [T]) and
    one-column block table (i32 [T, 1]): token t is a one-row sequence at
    row slot % page of block slot // page. A padding token (slot -1) gets
    the table row [-1], which the append's skip_padding skips; any other
    negative slot becomes its pos, which the append refuses by name
    ("pos[t] = -2 is negative"). Elementwise on the slots' device: no copy
    to the host, no synchronisation."""
    real = slots >= 0
    pos = torch.where(real, slots % page,
                      torch.where(slots == _PADDING_SLOT, 0, slots))
    table = torch.where(real, slots // page, -1).to(torch.int32)
    return pos.contiguous(), table.reshape(-1, 1)


@torch.library.custom_op("kvattn::concat_and_cache_mla",
                         mutates_args=("kv_cache",))
def _cache_write_op(kv_c: torch.Tensor, k_pe: torch.Tensor,
                    kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                    kv_cache_dtype: str,
                    scale: Optional[torch.Tensor]) -> None:
    dtype, pool, T, fmt = _check_cache_write(kv_c, k_pe, kv_cache,
                                             slot_mapping, kv_cache_dtype,
                                             scale)
    if T == 0:
        return
    page, D = pool.shape[1], pool.shape[3]
    update = torch.cat([kv_c, k_pe], dim=-1).reshape(T, 1, 1, D)
    slots = slot_mapping.to(torch.int64)
    pos, table = _slot_rows(slots, page)
    inputs = [("update", update), ("cache", pool), ("pos", pos),
              ("block_table", table)]
    if fmt:
        inputs.append(("k_scale", scale.detach().reshape(1)))
    key = ("concat_and_cache_mla", dtype, page, D, fmt,
           str(kv_c.device))
    make_ir = (lambda: mla_cache_write_ir(dtype, page, D, fmt))
    if kv_c.device.type == "cpu":
        # The slots by name here (the append would name the page and row
        # they become); the C API checks them again before writing.
        capacity = pool.shape[0] * page
        bad = (((slots < 0) & (slots != _PADDING_SLOT)) |
               (slots >= capacity)).nonzero()
        if bad.numel():
            t = int(bad[0, 0])
            raise KVAttnValueError(
                f"slot_mapping[{t}] = {int(slots[t])} is outside the cache's "
                f"{capacity} slots ({pool.shape[0]} blocks of {page}): a "
                f"slot is in [0, {capacity}), or {_PADDING_SLOT} for a "
                "padding token (not written)")
        program = _program(key, lambda: _cpu_program(make_ir()))
        _cpu_run(program, inputs, pool, "kvattn::concat_and_cache_mla")
        return
    if kv_c.device.type != "cuda":
        raise KVAttnValueError(f"kv_c is on {kv_c.device}: kvattn runs on "
                               "the CPU and CUDA devices")
    _cuda_cache_write(kv_c.device, key, make_ir, dict(inputs), pool)


def _cuda_cache_write(device, key, make_ir, tensors, pool):
    """The runtime's append kernel (a plan of mla_cache_write_ir) on
    torch's current stream: every tensor, the slots' rows and blocks
    included, by device pointer; a padding slot (-1) writes nothing and a
    slot outside the cache is recorded on the device (kt.check()): a
    negative one as its token's negative pos, one past the cache as its
    block out of range."""
    from .serving import device_run
    T, page = tensors["update"].shape[0], pool.shape[1]
    sizes = {"B": T, "Hkv": 1, "L": 1, "num_pages": pool.shape[0],
             "page_size": page, "max_pages": 1, "S": page}
    with _program_stats(key):
        device_run(_cuda_runtime(device), key, make_ir,
                   {n: t.data_ptr() for n, t in tensors.items()}, sizes,
                   torch.cuda.current_stream(device).cuda_stream)


@_cache_write_op.register_fake
def _(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale):
    return None


def concat_and_cache_mla(kv_c: torch.Tensor, k_pe: torch.Tensor,
                         kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         kv_cache_dtype: str = "auto",
                         scale: Optional[torch.Tensor] = None) -> None:
    """Writes each new token's latent row [kv_c (kv_lora_rank, 512), k_pe
    (rope_dim, 64)] into the paged latent cache at its slot, as vLLM's
    `concat_and_cache_mla` (docs/torch.md "Writing the latent cache"):
    kv_c [T, Dc], k_pe [T, Dr], kv_cache [num_blocks, block_size, Dc + Dr]
    (vLLM) or [num_blocks, block_size, 1, Dc + Dr] (FlashMLA; what
    mla_attention and kt.Plan(latent=True) read), slot_mapping int32/int64
    [T] (token t goes to row slot % block_size of block slot // block_size;
    slot -1 is vLLM's padding slot: that token writes nothing; any other
    negative slot or one past the cache is an error). kv_cache_dtype
    "auto" (the cache in kv_c's dtype, or FP8 codes), "fp8" / "fp8_e4m3" /
    "fp8_e5m2" (the cache's FP8 dtype checked); an FP8 cache takes scale
    (f32 [1]) and stores RN_satfinite(row / scale). kvattn's append kernel (a
    `kvattn.append` of T one-row sequences through a one-column block
    table); on CUDA the slots are validated on the device (kt.check())."""
    _check_cache_write(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype,
                       scale)
    torch.ops.kvattn.concat_and_cache_mla(kv_c, k_pe, kv_cache,
                                          slot_mapping, kv_cache_dtype,
                                          scale)
