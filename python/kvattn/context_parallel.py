"""Context-parallel attention: the KV cache of each sequence is split into
blocks held by several ranks (processes, GPUs); each rank computes partial
states (out, lse) over the blocks it owns, the parts are exchanged and every
rank merges them in global block order with kvattn's merge
(docs/distributed.md).

The result does not depend on who owns which block, on the order the parts
arrive in, or on where a block's rows sit in a rank's pages: every block's
partial is computed by the same program on the same rows, and the merge
visits the blocks in their logical order. So a run on any number of ranks,
with any ownership map and any page placement, is bitwise identical to the
one-rank run (`world_size = 1`).

This module is the transport-free core: `Ownership` (the validated map),
`ContextParallel` (the per-block partials and the ordered merge, on the CPU
JIT path) and `run(..., exchange=)`, where `exchange(obj)` is an all-gather
of Python objects (kvattn.distributed wraps torch.distributed's).
"""
import hashlib
import math

from .capi import KVAttnError, KVAttnTypeError, KVAttnValueError

__all__ = ["Ownership", "ContextParallel", "run"]


def _np():
    from . import _np as np_module
    return np_module()


class Ownership:
    """Which rank owns each KV block: validated against the sequences'
    lengths and the world size. `owners` is either

    - an integer array `[B, max_blocks]` of rank ids (-1: no owner), or
    - a boolean array `[world_size, B, max_blocks]`: `owners[r, b, j]` when
      rank r claims block j of sequence b (each rank's own claims, gathered),

    block j of sequence b holding keys `j * block_size .. (j + 1) *
    block_size - 1`. Every active block (one with a key below kv_len[b])
    must be owned exactly once; no inactive block may be owned. Errors name
    the sequence, the block, its keys and the ranks."""

    def __init__(self, owners, kv_len, block_size, world_size):
        np = _np()
        self.block_size = _positive_int("block_size", block_size)
        self.world_size = _positive_int("world_size", world_size)
        lens = np.asarray(kv_len)
        if lens.ndim != 1 or lens.dtype.kind not in "iu":
            raise KVAttnValueError(f"kv_len must be a 1-D integer array, got "
                                   f"shape {lens.shape} {lens.dtype}")
        if (lens < 0).any():
            b = int(np.argmax(lens < 0))
            raise KVAttnValueError(f"kv_len[{b}] = {int(lens[b])} is "
                                   "negative")
        self.kv_len = lens.astype(np.int64)
        batch = lens.shape[0]
        o = np.asarray(owners)
        if o.dtype == np.bool_ and o.ndim == 3:
            o = self._from_claims(o, batch)
        elif o.ndim != 2 or o.dtype.kind not in "iu":
            raise KVAttnValueError(
                f"cp_block_owners must be [B, max_blocks] rank ids or "
                f"[world_size, B, max_blocks] booleans, got shape {o.shape} "
                f"{o.dtype}")
        if o.shape[0] != batch:
            raise KVAttnValueError(f"cp_block_owners has {o.shape[0]} rows; "
                                   f"kv_len has {batch} sequences")
        o = o.astype(np.int64)
        self.blocks = [-(-int(n) // self.block_size) for n in self.kv_len]
        for b in range(batch):
            if self.blocks[b] > o.shape[1]:
                raise KVAttnValueError(
                    f"sequence {b}: kv_len {int(self.kv_len[b])} needs "
                    f"{self.blocks[b]} blocks of {self.block_size} keys; "
                    f"cp_block_owners has {o.shape[1]}")
            for j in range(o.shape[1]):
                r = int(o[b, j])
                keys = self._keys(b, j)
                if j < self.blocks[b]:
                    if r < 0:
                        raise KVAttnValueError(
                            f"cp_block_owners: block {j} of sequence {b} "
                            f"(keys {keys}) has no owner (a hole)")
                    if r >= self.world_size:
                        raise KVAttnValueError(
                            f"cp_block_owners: block {j} of sequence {b} is "
                            f"owned by rank {r}, outside the world of "
                            f"{self.world_size} rank(s) (a map made for "
                            "another world size?)")
                elif r != -1:
                    raise KVAttnValueError(
                        f"cp_block_owners: block {j} of sequence {b} lies "
                        f"past kv_len[{b}] = {int(self.kv_len[b])} but is "
                        f"owned by rank {r} (inactive blocks hold -1)")
        self.owners = o

    def _keys(self, b, j):
        lo = j * self.block_size
        return f"{lo}..{lo + self.block_size - 1}"

    def _from_claims(self, claims, batch):
        np = _np()
        if claims.shape[0] != self.world_size:
            raise KVAttnValueError(
                f"cp_block_owners claims are for {claims.shape[0]} rank(s); "
                f"the world has {self.world_size}")
        if claims.shape[1] != batch:
            raise KVAttnValueError(f"cp_block_owners has {claims.shape[1]} "
                                   f"sequences; kv_len has {batch}")
        count = claims.sum(axis=0)
        owners = np.where(count == 1, claims.argmax(axis=0), -1)
        for b, j in zip(*np.nonzero(count > 1)):
            ranks = [int(r) for r in np.nonzero(claims[:, b, j])[0]]
            raise KVAttnValueError(
                f"cp_block_owners: block {j} of sequence {b} (keys "
                f"{self._keys(b, j)}) is claimed by ranks {ranks} (double "
                "owners)")
        return owners

    def owned(self, rank):
        """The (sequence, block) pairs rank `rank` owns, in global order."""
        return [(b, j) for b in range(len(self.blocks))
                for j in range(self.blocks[b]) if self.owners[b, j] == rank]

    def digest(self):
        """A SHA-256 of the map, the lengths and the block size: every rank
        must hold the same."""
        h = hashlib.sha256()
        for a in (self.owners, self.kv_len):
            h.update(repr(a.shape).encode())
            h.update(a.tobytes())
        h.update(f"{self.block_size} {self.world_size}".encode())
        return h.hexdigest()


def _positive_int(what, value):
    import operator
    if isinstance(value, bool):
        raise KVAttnTypeError(f"{what} must be an integer, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise KVAttnTypeError(f"{what} must be an integer, got "
                              f"{type(value).__name__}") from None
    if n <= 0:
        raise KVAttnValueError(f"{what} = {n} must be positive")
    return n


_ATTENTION = """
func.func @block(%q: tensor<1x{hq}x{l}x{d}xf32>,
                 %k: tensor<1x{hkv}x{bs}x{d}xf32>,
                 %v: tensor<1x{hkv}x{bs}x{dv}xf32>,
                 %qo: tensor<1xi64>, %ko: tensor<1xi64>, %len: tensor<1xi64>)
    -> (tensor<1x{hq}x{l}x{dv}xf32>, tensor<1x{hq}x{l}xf32>) {{
  %o, %lse = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi64>)
      k_offset(%ko : tensor<1xi64>) kv_len(%len : tensor<1xi64>){causal}
      scale = {scale:.17e}
      : tensor<1x{hq}x{l}x{d}xf32>, tensor<1x{hkv}x{bs}x{d}xf32>,
        tensor<1x{hkv}x{bs}x{dv}xf32>
      -> tensor<1x{hq}x{l}x{dv}xf32>, tensor<1x{hq}x{l}xf32>
  return %o, %lse : tensor<1x{hq}x{l}x{dv}xf32>, tensor<1x{hq}x{l}xf32>
}}
"""

_MERGE = """
func.func @merge(%o: tensor<{n}x{b}x{hq}x{l}x{dv}xf32>,
                 %lse: tensor<{n}x{b}x{hq}x{l}xf32>)
    -> (tensor<{b}x{hq}x{l}x{dv}x{t}>, tensor<{b}x{hq}x{l}xf32>) {{
  %m, %ml = kvattn.merge %o, %lse
      : tensor<{n}x{b}x{hq}x{l}x{dv}xf32>, tensor<{n}x{b}x{hq}x{l}xf32>
      -> tensor<{b}x{hq}x{l}x{dv}x{t}>, tensor<{b}x{hq}x{l}xf32>
  return %m, %ml : tensor<{b}x{hq}x{l}x{dv}x{t}>, tensor<{b}x{hq}x{l}xf32>
}}
"""


class ContextParallel:
    """The per-block partials and the ordered merge of context-parallel
    attention on the CPU (the JIT path, one thread per program so that a
    block's partial is the same bits on every rank).

    Queries `q [B, Hq, L, D]` are the same on every rank; row i of sequence
    b sits at position kv_len[b] - L + i (lower-right: the new rows are the
    last L tokens of the sequence) and, with `causal`, sees the keys at or
    before it. A rank's K/V are pages `[num_pages, block_size, Hkv, D]`
    (V: Dv) with its own `block_table [B, max_blocks]` (-1 where it holds
    no page): one page per block, anywhere. Partials are f32 (bf16/f16
    inputs are widened exactly), as split-KV's workspaces; the merged
    output has the inputs' dtype, the LSE is f32 (natural log)."""

    def __init__(self, num_q_heads, num_kv_heads, head_dim, block_size,
                 value_head_dim=None, dtype="f32", causal=True, scale=None):
        self.hq = _positive_int("num_q_heads", num_q_heads)
        self.hkv = _positive_int("num_kv_heads", num_kv_heads)
        if self.hq % self.hkv:
            raise KVAttnValueError(f"num_q_heads = {self.hq} is not a "
                                   f"multiple of num_kv_heads = {self.hkv}")
        self.d = _positive_int("head_dim", head_dim)
        self.dv = _positive_int("value_head_dim", value_head_dim
                                if value_head_dim is not None else head_dim)
        self.block_size = _positive_int("block_size", block_size)
        if dtype not in ("f32", "f16", "bf16"):
            raise KVAttnValueError(f"dtype must be f32, f16 or bf16, got "
                                   f"{dtype!r}")
        self.dtype = dtype
        self.causal = bool(causal)
        self.scale = float(scale) if scale is not None else \
            1.0 / math.sqrt(self.d)
        if not math.isfinite(self.scale):
            raise KVAttnValueError(f"scale = {scale!r} is not finite")
        self._programs = {}

    def _program(self, key, text):
        from . import CpuProgram
        if key not in self._programs:
            self._programs[key] = CpuProgram(text, threads=1)
        return self._programs[key]

    def _block_program(self, length):
        return self._program(("block", length), _ATTENTION.format(
            hq=self.hq, hkv=self.hkv, l=length, d=self.d, dv=self.dv,
            bs=self.block_size, causal=" causal" if self.causal else "",
            scale=self.scale))

    def _widen(self, what, a):
        """A host array of this dtype (bf16: uint16 bits) as f32."""
        from . import from_bf16, _kvattn_dtype
        np = _np()
        a = np.asarray(a)
        got = _kvattn_dtype(a)
        if got != self.dtype:
            raise KVAttnTypeError(f"{what} is {got or a.dtype}, the "
                                  f"attention is {self.dtype} (bf16 as "
                                  "uint16 bits)")
        return from_bf16(a) if got == "bf16" else a.astype(np.float32)

    def check_query(self, q, batch):
        np = _np()
        q = np.asarray(q)
        if q.ndim != 4 or q.shape[0] != batch or q.shape[1] != self.hq or \
                q.shape[3] != self.d:
            raise KVAttnValueError(
                f"q must be [B={batch}, Hq={self.hq}, L, D={self.d}], got "
                f"shape {q.shape}")
        return q

    def partials(self, ownership, rank, q, k_pages, v_pages, block_table):
        """{(b, j): (out [Hq, L, Dv] f32, lse [Hq, L] f32)} over the blocks
        `rank` owns, read through its block table."""
        np = _np()
        batch = len(ownership.blocks)
        q = self.check_query(q, batch)
        length = q.shape[2]
        if ownership.block_size != self.block_size:
            raise KVAttnValueError(
                f"the ownership map has blocks of {ownership.block_size} "
                f"keys, the attention {self.block_size}")
        for name, pages, dim in (("k_pages", k_pages, self.d),
                                 ("v_pages", v_pages, self.dv)):
            shape = np.asarray(pages).shape
            if len(shape) != 4 or shape[1:] != (self.block_size, self.hkv,
                                                dim):
                raise KVAttnValueError(
                    f"{name} must be [num_pages, block_size="
                    f"{self.block_size}, Hkv={self.hkv}, {dim}], got shape "
                    f"{shape}")
        table = np.asarray(block_table)
        if table.ndim != 2 or table.shape[0] != batch or \
                table.dtype.kind not in "iu":
            raise KVAttnValueError(f"block_table must be [B={batch}, "
                                   f"max_blocks] integers, got shape "
                                   f"{table.shape} {table.dtype}")
        num_pages = np.asarray(k_pages).shape[0]
        owned = ownership.owned(rank)
        qf = self._widen("q", q)
        kf = self._widen("k_pages", k_pages)
        vf = self._widen("v_pages", v_pages)
        program = self._block_program(length)
        parts = {}
        for b, j in owned:
            page = int(table[b, j]) if j < table.shape[1] else -1
            if not 0 <= page < num_pages:
                raise KVAttnValueError(
                    f"rank {rank} owns block {j} of sequence {b} but its "
                    f"block_table[{b}][{j}] = {page} names no page (it has "
                    f"{num_pages})")
            lo = j * self.block_size
            rows = min(self.block_size, int(ownership.kv_len[b]) - lo)
            k = np.ascontiguousarray(kf[page].transpose(1, 0, 2))[None]
            v = np.ascontiguousarray(vf[page].transpose(1, 0, 2))[None]
            qo = np.array([int(ownership.kv_len[b]) - length], np.int64)
            out, lse = program.run(qf[b:b + 1], k, v, qo,
                                   np.array([lo], np.int64),
                                   np.array([rows], np.int64))
            parts[(b, j)] = (out[0], lse[0])
        return parts

    def merge(self, ownership, parts, length):
        """(out [B, Hq, L, Dv] in the dtype, lse [B, Hq, L] f32): every
        sequence's parts merged in block order. A sequence with fewer
        blocks than the longest is padded with empty parts (0, -inf), the
        merge's identity."""
        np = _np()
        batch = len(ownership.blocks)
        n = max(ownership.blocks + [1])
        missing = [(b, j) for b in range(batch)
                   for j in range(ownership.blocks[b]) if (b, j) not in parts]
        if missing:
            b, j = missing[0]
            raise KVAttnError(f"no partial state for block {j} of sequence "
                              f"{b} (owner: rank {ownership.owners[b, j]})")
        out_parts = np.zeros((n, batch, self.hq, length, self.dv), np.float32)
        lse_parts = np.full((n, batch, self.hq, length), -np.inf, np.float32)
        for (b, j), (o, lse) in parts.items():
            out_parts[j, b] = o
            lse_parts[j, b] = lse
        program = self._program(("merge", n, batch, length), _MERGE.format(
            n=n, b=batch, hq=self.hq, l=length, dv=self.dv, t=self.dtype))
        return program.run(out_parts, lse_parts)


def run(cp, ownership, rank, q, k_pages, v_pages, block_table, exchange):
    """One rank's context-parallel attention: its partials, the exchange
    (`exchange(obj)` returns every rank's obj in rank order), the merge.
    `ownership` is an Ownership, or a callable that builds it (so that a
    bad map is an error on every rank too). A rank whose own part fails
    still takes part in the exchange with its error, so that every rank
    raises the same KVAttnError naming it instead of waiting for it. Every
    rank must hold the same ownership map."""
    try:
        if not isinstance(ownership, Ownership):
            ownership = ownership()
        parts = cp.partials(ownership, rank, q, k_pages, v_pages,
                            block_table)
        mine = {"digest": ownership.digest(), "parts": parts}
    except Exception as e:  # noqa: BLE001 (reported to every rank below)
        mine = {"error": f"{type(e).__name__}: {e}"}
    everyone = exchange(mine)
    errors = [(r, m["error"]) for r, m in enumerate(everyone) if "error" in m]
    if errors:
        r, message = errors[0]
        raise KVAttnError(f"context-parallel attention failed on rank {r} "
                          f"of {len(everyone)}: {message}")
    digests = {m["digest"] for m in everyone}
    if len(digests) != 1:
        ranks = [r for r, m in enumerate(everyone)
                 if m["digest"] != everyone[0]["digest"]]
        raise KVAttnError(f"context-parallel attention: rank(s) {ranks} hold "
                          "a different cp_block_owners / kv_len / block_size "
                          "than rank 0")
    parts = {}
    for m in everyone:
        parts.update(m["parts"])
    return cp.merge(ownership, parts, cp.check_query(q, len(
        ownership.blocks)).shape[2])
