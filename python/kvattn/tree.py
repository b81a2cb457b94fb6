"""Tree masks for speculative decoding: the two forms and their conversion.

kvattn's operand (`kvattn.attention ... tree_parents(%p : tensor<Txi64>)`,
docs/semantics.md "Tree masks") is the compact form: per packed query row
(draft token) the local row of its parent in its sequence's tree, -1 for a
root. Draft token i of sequence b sits at position q_offset[b] + depth(i)
and its key is key kv_len[b] - L_b + i; it sees the whole cache (by the
usual rules), its ancestors and itself.

FlashInfer's form is a bit mask: per request b a row-major (qo_len x
kv_len) boolean mask (True: row i may see key j), flattened, packed into
uint8 little-endian (bit k of byte n is element 8 n + k, numpy's
packbits(bitorder="little")), each request's bytes starting at
mask_indptr[b] (ceil(qo_len * kv_len / 8) bytes each).
`parents_from_packed_mask` converts it into parents and refuses masks that
are no tree mask (a hidden cache key, a row that does not see itself, an
ancestor set that is not its parent's plus itself); `packed_mask_from_parents`
goes the other way.
"""

import numpy as np

from .capi import KVAttnValueError

__all__ = ["parents_from_packed_mask", "packed_mask_from_parents",
           "tree_depths", "mask_indptr", "complete_tree"]


def complete_tree(depth, branching):
    """The parents (local rows, -1 for the root) of a complete draft tree:
    one root and `depth` levels of `branching` children each, breadth first
    (a parent before its children), e.g. Medusa/EAGLE's full trees."""
    parents, level = [-1], [0]
    for _ in range(depth):
        children = []
        for p in level:
            for _ in range(branching):
                parents.append(p)
                children.append(len(parents) - 1)
        level = children
    return parents


def _lengths(name, values):
    a = np.asarray(values, np.int64).reshape(-1)
    if (a < 0).any():
        raise KVAttnValueError(f"{name} has a negative entry: {a.tolist()}")
    return a


def mask_indptr(qo_lens, kv_lens):
    """The byte offsets of each request's packed mask: [B + 1]."""
    qo, kv = _lengths("qo_lens", qo_lens), _lengths("kv_lens", kv_lens)
    return np.concatenate([[0], np.cumsum((qo * kv + 7) // 8)]).astype(
        np.int64)


def tree_depths(parents, q_start):
    """depth(i) per packed row (0 for a root), parents as kvattn takes them."""
    parents = np.asarray(parents, np.int64)
    depth = np.zeros(parents.shape[0], np.int64)
    for b in range(len(q_start) - 1):
        lo = int(q_start[b])
        for i in range(int(q_start[b + 1]) - lo):
            p = int(parents[lo + i])
            depth[lo + i] = 0 if p < 0 else depth[lo + p] + 1
    return depth


def packed_mask_from_parents(parents, q_start, kv_lens):
    """FlashInfer's packed custom mask (uint8) and its mask_indptr for the
    trees `parents` (local parent rows, -1 for roots) of the sequences
    q_start [B + 1] whose caches hold kv_lens[b] keys (draft tokens
    included, last)."""
    q_start = _lengths("q_start", q_start)
    kv = _lengths("kv_lens", kv_lens)
    parents = np.asarray(parents, np.int64)
    chunks = []
    for b in range(len(q_start) - 1):
        lo, hi = int(q_start[b]), int(q_start[b + 1])
        L, K = hi - lo, int(kv[b])
        m = np.zeros((L, K), bool)
        m[:, :K - L] = True
        for i in range(L):
            x = i
            while x >= 0:
                m[i, K - L + x] = True
                x = int(parents[lo + x])
        chunks.append(np.packbits(m.reshape(-1), bitorder="little"))
    packed = np.concatenate(chunks) if chunks else np.zeros(0, np.uint8)
    return packed.astype(np.uint8), mask_indptr(np.diff(q_start), kv)


def parents_from_packed_mask(packed, indptr, q_start, kv_lens):
    """kvattn's tree_parents [T] (int64) from FlashInfer's packed mask.
    Raises KVAttnValueError, naming the request, row and key, for a mask
    that is no tree mask."""
    packed = np.asarray(packed)
    if packed.dtype != np.uint8 or packed.ndim != 1:
        raise KVAttnValueError(
            f"custom_mask must be FlashInfer's packed mask: a 1-D uint8 "
            f"array, got {packed.dtype} of shape {packed.shape}")
    q_start = _lengths("q_start", q_start)
    kv = _lengths("kv_lens", kv_lens)
    indptr = _lengths("mask_indptr", indptr)
    B = len(q_start) - 1
    if len(kv) != B or len(indptr) != B + 1:
        raise KVAttnValueError(
            f"mask_indptr needs B + 1 = {B + 1} entries and kv_len B = {B}, "
            f"got {len(indptr)} and {len(kv)}")
    parents = np.full(int(q_start[-1]) if B >= 0 else 0, -1, np.int64)
    for b in range(B):
        lo, hi = int(q_start[b]), int(q_start[b + 1])
        L, K = hi - lo, int(kv[b])
        if L == 0:
            continue
        if K < L:
            raise KVAttnValueError(
                f"request {b}: kv_len = {K} holds fewer keys than its "
                f"{L} draft token(s) (the draft tokens are the last keys)")
        need = (L * K + 7) // 8
        start, end = int(indptr[b]), int(indptr[b + 1])
        if end - start != need or end > packed.shape[0]:
            raise KVAttnValueError(
                f"request {b}: mask_indptr[{b}] .. mask_indptr[{b + 1}] = "
                f"{start} .. {end} must hold ceil(qo_len * kv_len / 8) = "
                f"{need} byte(s) of the {packed.shape[0]} given")
        bits = np.unpackbits(packed[start:end], bitorder="little")
        m = bits[:L * K].astype(bool).reshape(L, K)
        cache = m[:, :K - L]
        if not cache.all():
            i, j = np.argwhere(~cache)[0]
            raise KVAttnValueError(
                f"custom_mask of request {b} hides cache key {j} from draft "
                f"row {i}: a tree mask lets every draft token see the whole "
                f"cache (kv_len - qo_len = {K - L} keys)")
        draft = m[:, K - L:]
        for i in range(L):
            if not draft[i, i]:
                raise KVAttnValueError(
                    f"custom_mask of request {b}: draft row {i} does not see "
                    f"its own key {K - L + i}")
            seen = np.flatnonzero(draft[i, :i])
            p = int(seen[-1]) if seen.size else -1
            want = draft[p].copy() if p >= 0 else np.zeros(L, bool)
            want[i] = True
            if not np.array_equal(draft[i], want):
                raise KVAttnValueError(
                    f"custom_mask of request {b}: draft row {i} sees "
                    f"{np.flatnonzero(draft[i]).tolist()}, which is not an "
                    f"ancestor chain (its parent {p} and that row's "
                    f"ancestors, then itself): not a tree mask")
            parents[lo + i] = p
    return parents
