"""The data of the context-parallel tests (test_context_parallel.py,
gloo_context_parallel.py and its worker processes): the same seeds give the same
queries, cache, ownership maps and page placements in every process."""
import numpy as np

import kvattn

B, HQ, HKV, D, L, BS = 3, 4, 2, 16, 3, 8
KV_LEN = np.array([37, 64, 5])
MAX_BLOCKS = 8


def cache(dtype, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, HQ, L, D)).astype(np.float32)
    k = rng.standard_normal((B, HKV, MAX_BLOCKS * BS, D)).astype(np.float32)
    v = rng.standard_normal((B, HKV, MAX_BLOCKS * BS, D)).astype(np.float32)
    if dtype == "bf16":
        q, k, v = (kvattn.to_bf16(x) for x in (q, k, v))
    return q, k, v


def rank_pages(k, v, ownership, rank, seed):
    """The pages rank `rank` holds: its blocks in a random order among NaN
    pages it does not use, and its block table."""
    owned = ownership.owned(rank)
    rng = np.random.default_rng(seed)
    n = len(owned) + 2
    order = rng.permutation(n)
    poison = kvattn.to_bf16(np.nan) if k.dtype == np.uint16 else np.nan
    kp = np.full((n, BS, HKV, D), poison, k.dtype)
    vp = np.full((n, BS, HKV, D), poison, v.dtype)
    table = np.full((B, MAX_BLOCKS), -1, np.int64)
    for (b, j), page in zip(owned, order):
        rows = slice(j * BS, (j + 1) * BS)
        kp[page] = k[b, :, rows].transpose(1, 0, 2)
        vp[page] = v[b, :, rows].transpose(1, 0, 2)
        table[b, j] = page
    return kp, vp, table


def random_owners(world, seed):
    rng = np.random.default_rng(seed)
    owners = np.full((B, MAX_BLOCKS), -1, np.int64)
    for b in range(B):
        n = -(-int(KV_LEN[b]) // BS)
        owners[b, :n] = rng.integers(0, world, n)
    return owners
