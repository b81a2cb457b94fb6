"""kvattn.cache_fingerprint over torch CPU tensors (read in place by DLPack,
bf16 included): the same fingerprint as the NumPy arrays of the same bits,
contiguous and paged, and a changed element of the prefix is a
KVAttnCacheMismatch."""
import numpy as np
import pytest
import torch

import kvattn


def test_torch_tensors_fingerprint_like_their_bits():
    g = torch.Generator().manual_seed(0)
    k = torch.randn(2, 3, 40, 8, generator=g).to(torch.bfloat16)
    v = torch.randn(2, 3, 40, 8, generator=g).to(torch.bfloat16)
    bits = lambda t: t.view(torch.int16).numpy().view(np.uint16)  # noqa: E731
    want = kvattn.cache_fingerprint(bits(k), bits(v), 33, batch=1)
    assert kvattn.cache_fingerprint(k, v, 33, batch=1) == want
    # Pages [num_pages, 16, Hkv, D] in another order, through a block table.
    table = torch.tensor([[4, 0, 2], [1, 5, 3]])
    kp = torch.zeros(6, 16, 3, 8, dtype=torch.bfloat16)
    vp = torch.zeros_like(kp)
    for b in range(2):
        for t in range(40):
            kp[table[b, t // 16], t % 16] = k[b, :, t]
            vp[table[b, t // 16], t % 16] = v[b, :, t]
    assert kvattn.cache_fingerprint(kp, vp, 33, batch=1,
                                    block_table=table.numpy()) == want
    kp[table[1, 1], 0, 2, 7] += 1  # token 16 of sequence 1
    with pytest.raises(kvattn.KVAttnCacheMismatch,
                       match=r"batch 1, tokens \[0, 33\) \(bf16"):
        kvattn.check_cache_prefix(want, kp, vp, 33, batch=1,
                                  block_table=table.numpy())
    # A strided view is not read as if it were dense.
    with pytest.raises(kvattn.KVAttnError):
        kvattn.cache_fingerprint(k.transpose(1, 2), v.transpose(1, 2), 3)
