"""Context-parallel attention's core (kvattn.context_parallel) with the
ranks simulated in one process: any ownership map and any page placement
gives the one-rank result bit for bit, and the reference within tolerance;
bad maps and failing ranks are named. The same over torch.distributed
(gloo, several processes): gloo_context_parallel.py (test/python/context-parallel.test)."""
import numpy as np
import pytest

import kvattn
from kvattn import context_parallel as cpar

from conftest import attention_reference

from cp_data import (B, BS, D, HKV, HQ, KV_LEN, L, cache, random_owners,
                     rank_pages)


def simulate(cp, q, k, v, owners, world, seed):
    """Every rank's result, the exchange done in memory."""
    ownership = cpar.Ownership(owners, KV_LEN, BS, world)
    pages = [rank_pages(k, v, ownership, r, seed + r) for r in range(world)]
    mine = []
    for r in range(world):
        parts = cp.partials(ownership, r, q, *pages[r])
        mine.append({"digest": ownership.digest(), "parts": parts})
    results = [cpar.run(cp, ownership, r, q, *pages[r],
                        exchange=lambda obj: mine) for r in range(world)]
    for out, lse in results[1:]:
        assert out.tobytes() == results[0][0].tobytes()
        assert lse.tobytes() == results[0][1].tobytes()
    return results[0]


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_any_ownership_and_placement_is_the_one_rank_result(dtype):
    q, k, v = cache(dtype)
    cp = cpar.ContextParallel(HQ, HKV, D, BS, dtype=dtype)
    single = simulate(cp, q, k, v, random_owners(1, 0), 1, 100)
    for world in (2, 3, 4):
        for trial in range(2):
            out, lse = simulate(cp, q, k, v, random_owners(world, trial),
                                world, 7 * world + trial)
            assert out.tobytes() == single[0].tobytes(), (world, trial)
            assert lse.tobytes() == single[1].tobytes(), (world, trial)
    # Against the float64 reference (lower-right positions, kv_len).
    wide = (lambda x: kvattn.from_bf16(x)) if dtype == "bf16" else \
        (lambda x: x)
    want = attention_reference(wide(q), wide(k), wide(v),
                               q_offset=KV_LEN - L, kv_len=KV_LEN)
    got = wide(single[0]).astype(np.float64)
    tol = 1e-5 if dtype == "f32" else 1.6e-2
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    # The merged lse is the log-sum-exp of the visible scores.
    qf, kf = wide(q).astype(np.float64), wide(k).astype(np.float64)
    b, h, i = 0, 3, 2
    s = qf[b, h, i] @ kf[b, h // 2, :KV_LEN[b] - L + i + 1].T / np.sqrt(D)
    assert single[1][b, h, i] == pytest.approx(
        np.log(np.exp(s - s.max()).sum()) + s.max(), rel=1e-5)


def test_an_empty_rank_and_a_sequence_shorter_than_a_block():
    q, k, v = cache("f32", seed=3)
    cp = cpar.ContextParallel(HQ, HKV, D, BS)
    owners = random_owners(1, 0)  # rank 0 owns everything; rank 1 nothing
    two = simulate(cp, q, k, v, owners, 2, 11)
    one = simulate(cp, q, k, v, owners, 1, 12)
    assert two[0].tobytes() == one[0].tobytes()


def test_bad_maps_are_named():
    owners = random_owners(2, 4)
    hole = owners.copy()
    hole[1, 3] = -1
    with pytest.raises(kvattn.KVAttnValueError,
                       match=r"block 3 of sequence 1 \(keys 24\.\.31\) has "
                             r"no owner \(a hole\)"):
        cpar.Ownership(hole, KV_LEN, BS, 2)
    with pytest.raises(kvattn.KVAttnValueError,
                       match=r"owned by rank 2, outside the world of 2"):
        cpar.Ownership(np.where(owners == 1, 2, owners), KV_LEN, BS, 2)
    past = owners.copy()
    past[2, 1] = 0  # sequence 2 has 5 keys: one block
    with pytest.raises(kvattn.KVAttnValueError,
                       match=r"block 1 of sequence 2 lies past kv_len\[2\] = "
                             r"5 but is owned by rank 0"):
        cpar.Ownership(past, KV_LEN, BS, 2)
    claims = np.stack([owners == 0, owners == 1])
    cpar.Ownership(claims, KV_LEN, BS, 2)  # the same map, as claims
    claims[1, 0, 2] = True
    claims[0, 0, 2] = True
    with pytest.raises(kvattn.KVAttnValueError,
                       match=r"block 2 of sequence 0 \(keys 16\.\.23\) is "
                             r"claimed by ranks \[0, 1\] \(double owners\)"):
        cpar.Ownership(claims, KV_LEN, BS, 2)
    with pytest.raises(kvattn.KVAttnValueError, match="claims are for 2"):
        cpar.Ownership(claims, KV_LEN, BS, 3)


def test_a_failing_rank_is_named_on_every_rank():
    q, k, v = cache("f32")
    cp = cpar.ContextParallel(HQ, HKV, D, BS)
    ownership = cpar.Ownership(random_owners(2, 5), KV_LEN, BS, 2)
    kp0, vp0, t0 = rank_pages(k, v, ownership, 0, 1)
    kp1, vp1, t1 = rank_pages(k, v, ownership, 1, 2)
    b, j = ownership.owned(1)[0]
    t1[b, j] = -1  # rank 1 lost a page it owns
    mine = []
    for r, pages in enumerate([(kp0, vp0, t0), (kp1, vp1, t1)]):
        try:
            mine.append({"digest": ownership.digest(),
                         "parts": cp.partials(ownership, r, q, *pages)})
        except kvattn.KVAttnError as e:
            mine.append({"error": f"{type(e).__name__}: {e}"})
    for r, pages in enumerate([(kp0, vp0, t0), (kp1, vp1, t1)]):
        with pytest.raises(kvattn.KVAttnError,
                           match=rf"failed on rank 1 of 2: KVAttnValueError: "
                                 rf"rank 1 owns block {j} of sequence {b} but "
                                 rf"its block_table\[{b}\]\[{j}\] = -1"):
            cpar.run(cp, ownership, r, q, *pages, exchange=lambda obj: mine)
    # Ranks that disagree on the map.
    other = cpar.Ownership(random_owners(2, 6), KV_LEN, BS, 2)
    mine = [{"digest": ownership.digest(), "parts": {}},
            {"digest": other.digest(), "parts": {}}]
    with pytest.raises(kvattn.KVAttnError,
                       match=r"rank\(s\) \[1\] hold a different "
                             r"cp_block_owners"):
        cpar.run(cp, ownership, 0, q, kp0, vp0, t0, exchange=lambda o: mine)
