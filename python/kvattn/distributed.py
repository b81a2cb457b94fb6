"""Context-parallel attention over torch.distributed (docs/distributed.md).

    out, lse = kvattn.distributed.context_parallel_attention(
        q, k_pages, v_pages, block_table, kv_len, cp_block_owners)

Each rank of the process group holds the KV blocks `cp_block_owners` gives
it (in its own pages, any placement), computes the partial states of its
blocks with kvattn, and the parts are gathered (`all_gather_object`: gloo on
CPUs, NCCL on GPUs) and merged on every rank in global block order: the
result is bitwise identical on every rank and to a one-rank run, for any
ownership map and page placement (kvattn.context_parallel). CPU tensors
(the JIT path); f32, f16 and bf16.
"""
import datetime

from . import context_parallel as _cp
from .capi import KVAttnError, KVAttnTypeError

__all__ = ["context_parallel_attention"]


def _torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise KVAttnError("kvattn.distributed needs PyTorch "
                          "(scripts/setup.sh installs it)") from None
    return torch, dist


_DTYPES = {"torch.float32": "f32", "torch.float16": "f16",
           "torch.bfloat16": "bf16"}


def _to_numpy(torch, what, t, dtype=None):
    """A CPU tensor's values as a NumPy array (bf16: uint16 bits)."""
    if not isinstance(t, torch.Tensor):
        raise KVAttnTypeError(f"{what} must be a torch.Tensor, got "
                              f"{type(t).__name__}")
    if t.device.type != "cpu":
        raise KVAttnTypeError(f"{what} is on {t.device}: context-parallel "
                              "attention runs the CPU path (move the tensors "
                              "to the CPU)")
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view("uint16")
    if dtype is not None and str(t.dtype) != dtype:
        raise KVAttnTypeError(f"{what} is {t.dtype}, expected {dtype}")
    return t.numpy()


def context_parallel_attention(q, k_pages, v_pages, block_table, kv_len,
                               cp_block_owners, *, group=None, causal=True,
                               scale=None):
    """(out [B, Hq, L, Dv] in q's dtype, lse [B, Hq, L] f32) of this rank's
    process group. q [B, Hq, L, D]: the same on every rank (row i of
    sequence b is at position kv_len[b] - L + i); k_pages/v_pages
    [num_pages, block_size, Hkv, D]: this rank's pages; block_table
    [B, max_blocks]: its page of each block it holds (-1 elsewhere);
    kv_len [B]; cp_block_owners: [B, max_blocks] rank ids (-1 past kv_len),
    the same on every rank, or [world_size, B, max_blocks] booleans (each
    rank's claims). A bad map, a missing page or any failure on one rank is
    a KVAttnError naming that rank on every rank; a rank that dies or hangs
    is a KVAttnError after the group's timeout, not a hang."""
    torch, dist = _torch()
    if not dist.is_available() or not dist.is_initialized():
        raise KVAttnError("context_parallel_attention needs an initialised "
                          "torch.distributed process group "
                          "(torch.distributed.init_process_group)")
    rank = dist.get_rank(group)
    world = dist.get_world_size(group)
    if not isinstance(q, torch.Tensor):
        raise KVAttnTypeError(f"q must be a torch.Tensor, got "
                              f"{type(q).__name__}")
    dtype = _DTYPES.get(str(q.dtype))
    if dtype is None:
        raise KVAttnTypeError(f"q is {q.dtype}: float32, float16 or "
                              "bfloat16")
    qn = _to_numpy(torch, "q", q)
    kn = _to_numpy(torch, "k_pages", k_pages, str(q.dtype))
    vn = _to_numpy(torch, "v_pages", v_pages, str(q.dtype))
    table = _to_numpy(torch, "block_table", block_table)
    lens = _to_numpy(torch, "kv_len", kv_len)
    owners = _to_numpy(torch, "cp_block_owners", cp_block_owners)
    if kn.ndim != 4 or vn.ndim != 4 or qn.ndim != 4:
        raise KVAttnTypeError(
            f"q [B, Hq, L, D] and pages [num_pages, block_size, Hkv, D]: got "
            f"{tuple(q.shape)}, {tuple(k_pages.shape)}, "
            f"{tuple(v_pages.shape)}")
    cp = _cp.ContextParallel(qn.shape[1], kn.shape[2], qn.shape[3],
                             kn.shape[1], value_head_dim=vn.shape[3],
                             dtype=dtype, causal=causal, scale=scale)

    def exchange(obj):
        gathered = [None] * world
        try:
            dist.all_gather_object(gathered, obj, group=group)
        except Exception as e:  # noqa: BLE001 (the backend's own types)
            timeout = getattr(getattr(group, "options", None), "_timeout",
                              None) or _default_timeout(dist, group)
            raise KVAttnError(
                f"context-parallel attention on rank {rank} of {world}: the "
                f"exchange of partial states failed (a rank exited, failed "
                f"outside kvattn or did not answer within {timeout}): "
                f"{type(e).__name__}: {e}") from None
        return gathered

    out, lse = _cp.run(
        cp, lambda: _cp.Ownership(owners, lens, kn.shape[1], world), rank,
        qn, kn, vn, table, exchange)
    if dtype == "bf16":
        out_t = torch.from_numpy(out.view("int16")).view(torch.bfloat16)
    else:
        out_t = torch.from_numpy(out)
    return out_t, torch.from_numpy(lse)


def _default_timeout(dist, group):
    try:
        from torch.distributed.distributed_c10d import _get_default_timeout
        return _get_default_timeout(dist.get_backend(group))
    except Exception:  # noqa: BLE001 (a private helper; only for the text)
        return datetime.timedelta(minutes=30)
