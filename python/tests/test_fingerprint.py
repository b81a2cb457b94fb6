"""kvattn.cache_fingerprint / check_cache_prefix against an independent
hashlib computation of the documented stream (docs/runtime.md, "Cache
identity"), on contiguous and paged caches, host and emulated-device
buffers."""
import hashlib
import struct

import numpy as np
import pytest

import kvattn

B, HKV, S, D, DV, PAGE = 2, 3, 40, 8, 4, 16


def oracle(k, v, b, length, dtype, positions=None, rope=None):
    """SHA-256 of the stream as docs/runtime.md states it, from a contiguous
    [B, Hkv, S, D] cache."""
    h = hashlib.sha256()
    h.update(b"kvattn-cache-fingerprint/1\n")
    h.update(f"dtype={dtype} kv_heads={k.shape[1]} head_dim={k.shape[3]} "
             f"value_head_dim={v.shape[3]} length={length} "
             f"rope={rope or 'none'}\n".encode())
    for t in range(length):
        h.update(struct.pack("<q", t if positions is None else positions[t]))
        for head in range(k.shape[1]):
            h.update(np.ascontiguousarray(k[b, head, t]).tobytes())
        for head in range(k.shape[1]):
            h.update(np.ascontiguousarray(v[b, head, t]).tobytes())
    return h.hexdigest()


def caches(dtype, seed=5, page_seed=1):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((B, HKV, S, D)).astype(np.float32)
    v = rng.standard_normal((B, HKV, S, DV)).astype(np.float32)
    if dtype == "bf16":
        k, v = kvattn.to_bf16(k), kvattn.to_bf16(v)
    elif dtype == "f16":
        k, v = k.astype(np.float16), v.astype(np.float16)
    per_seq = -(-S // PAGE)
    num_pages = B * per_seq + 2
    order = np.random.default_rng(page_seed).permutation(num_pages)
    table = order[:B * per_seq].reshape(B, per_seq).astype(np.int64)
    kp = np.zeros((num_pages, PAGE, HKV, D), k.dtype)
    vp = np.zeros((num_pages, PAGE, HKV, DV), v.dtype)
    for b in range(B):
        for t in range(S):
            kp[table[b, t // PAGE], t % PAGE] = k[b, :, t]
            vp[table[b, t // PAGE], t % PAGE] = v[b, :, t]
    return k, v, kp, vp, table


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_matches_the_documented_stream_in_every_layout(dtype):
    k, v, kp, vp, table = caches(dtype)
    for b in range(B):
        for length in (0, 1, 16, 17, 40):
            want = oracle(k, v, b, length, dtype)
            assert kvattn.cache_fingerprint(k, v, length, batch=b) == want
            assert kvattn.cache_fingerprint(kp, vp, length, batch=b,
                                            block_table=table) == want
    # Another page placement of the same rows: the same fingerprint.
    _, _, kp2, vp2, table2 = caches(dtype, page_seed=9)
    assert not np.array_equal(table, table2)
    assert kvattn.cache_fingerprint(kp2, vp2, 33, batch=1,
                                    block_table=table2) == \
        oracle(k, v, 1, 33, dtype)


def test_positions_and_rope_are_part_of_the_identity():
    k, v, _, _, _ = caches("f32")
    base = kvattn.cache_fingerprint(k, v, 20)
    shifted = np.arange(20) + 7
    moved = kvattn.cache_fingerprint(k, v, 20, positions=shifted)
    assert moved == oracle(k, v, 0, 20, "f32", positions=shifted) != base
    rotated = kvattn.cache_fingerprint(k, v, 20, rope="neox theta=1e4 dim=8")
    assert rotated == oracle(k, v, 0, 20, "f32", rope="neox theta=1e4 dim=8")
    assert rotated != base


def test_check_cache_prefix_names_the_mismatch():
    k, v, kp, vp, table = caches("bf16")
    claimed = kvattn.cache_fingerprint(k, v, 33, batch=1)
    kvattn.check_cache_prefix(claimed, kp, vp, 33, batch=1, block_table=table)
    kp[table[1, 1], 3, 2, 5] ^= 1  # token 19, head 2: one bit
    with pytest.raises(kvattn.KVAttnCacheMismatch,
                       match=r"cache prefix mismatch: batch 1, tokens \[0, "
                             r"33\) \(bf16, rope=none\) has fingerprint "
                             r"[0-9a-f]{64}, not the claimed " + claimed):
        kvattn.check_cache_prefix(claimed, kp, vp, 33, batch=1,
                                  block_table=table)
    # A change past the prefix does not matter.
    kp[table[1, 2], 1, 0, 0] ^= 1  # token 33
    assert kvattn.cache_fingerprint(k, v, 33, batch=1) == claimed


def test_bad_descriptions_are_named():
    k, v, kp, vp, table = caches("f32")
    with pytest.raises(kvattn.KVAttnError,
                       match="length = 41 exceeds the cache's capacity 40"):
        kvattn.cache_fingerprint(k, v, 41)
    bad = table.copy()
    bad[0, 1] = 99
    with pytest.raises(kvattn.KVAttnError,
                       match=r"block_table\[1\] = 99 is outside \[0, 8\)"):
        kvattn.cache_fingerprint(kp, vp, 20, block_table=bad)
    with pytest.raises(kvattn.KVAttnValueError, match="batch = 2 is outside"):
        kvattn.cache_fingerprint(kp, vp, 20, batch=2, block_table=table)
    with pytest.raises(kvattn.KVAttnTypeError, match="f32, f16 or bf16"):
        kvattn.cache_fingerprint(k.astype(np.float64), v, 4)
    with pytest.raises(kvattn.KVAttnValueError, match="must be 4-D"):
        kvattn.cache_fingerprint(k[0], v[0], 4)
    with pytest.raises(kvattn.KVAttnValueError, match="SHA-256 digest"):
        kvattn.check_cache_prefix("abc", k, v, 4)
    with pytest.raises(kvattn.KVAttnValueError, match="positions has 3"):
        kvattn.cache_fingerprint(k, v, 4, positions=[0, 1, 2])


def test_device_buffers(emulated_runtime):
    rt = emulated_runtime
    k, v, kp, vp, table = caches("bf16")
    dk = kvattn.to_device(kp, runtime=rt, dtype="bf16")
    dv = kvattn.to_device(vp, runtime=rt, dtype="bf16")
    want = oracle(k, v, 0, 37, "bf16")
    assert kvattn.cache_fingerprint(dk, dv, 37, block_table=table) == want
    ck = kvattn.to_device(k, runtime=rt, dtype="bf16")
    cv = kvattn.to_device(v, runtime=rt, dtype="bf16")
    assert kvattn.cache_fingerprint(ck, cv, 37) == want
    with pytest.raises(kvattn.KVAttnTypeError, match="both"):
        kvattn.cache_fingerprint(ck, v, 37)
