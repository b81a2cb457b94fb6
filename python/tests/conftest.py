"""Shared pieces of the kvattn Python tests (run from lit: test/python/ and
test/install/python.test; by hand:
KVATTN_LIBRARY=build/lib/libkvattn_c.so PYTHONPATH=python \
    /usr/bin/python3 -m pytest python/tests)."""

import math
import os

import numpy as np
import pytest

import kvattn


def attention_reference(q, k, v, q_offset=None, kv_len=None, causal=True):
    """Plain NumPy attention in float64: q [B, Hq, L, D], k/v [B, Hkv, S, D];
    query row i of batch b sits at position q_offset[b] + i (lower-right
    alignment) and sees the keys j <= that position and j < kv_len[b]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    out = np.zeros((B, Hq, L, v.shape[3]))
    for b in range(B):
        for h in range(Hq):
            g = h // (Hq // Hkv)
            s = q[b, h] @ k[b, g].T / math.sqrt(D)
            allowed = np.ones((L, S), bool)
            if causal:
                pos = (q_offset[b] if q_offset is not None else S - L) + \
                    np.arange(L)
                allowed &= np.arange(S)[None, :] <= pos[:, None]
            if kv_len is not None:
                allowed &= np.arange(S)[None, :] < kv_len[b]
            s = np.where(allowed, s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[b, h] = (p / p.sum(axis=1, keepdims=True)) @ v[b, g]
    return out


def distinct(shape, seed, scale=1.0):
    """Deterministic values that differ from element to element."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.fixture(scope="session")
def emulated_runtime():
    try:
        rt = kvattn.Runtime(driver="emulated")
    except kvattn.KVAttnError as e:
        pytest.skip(f"no emulated GPU: {e}")
    yield rt
    rt.close()


@pytest.fixture(scope="session")
def fake_runtime():
    path = os.environ.get("KVATTN_TEST_FAKECUDA")
    if not path or not os.path.exists(path):
        pytest.skip("KVATTN_TEST_FAKECUDA does not name the fake driver")
    rt = kvattn.Runtime(driver=path)
    yield rt
    rt.close()
