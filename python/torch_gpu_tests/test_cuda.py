"""kvattn.torch's CUDA kernels (the kvattn runtime on torch's current
stream), for a machine with a GPU: test/gpu/run-gpu-checks.sh runs this file.
Never executed without one (no GPU was available when it was written)."""

import pytest
import torch

import kvattn.torch as kt

if not torch.cuda.is_available():  # run-gpu-checks.sh runs it on a GPU only
    pytest.fail("test_cuda.py needs a CUDA device", pytrace=False)


def make(dtype, B=2, Hq=8, Hkv=2, L=5, S=70, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g).to(dtype) for s in
            ((B, Hq, L, D), (B, Hkv, S, D), (B, Hkv, S, D))]


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4),
                                        (torch.bfloat16, 2e-2)])
def test_cuda_matches_the_cpu_op(dtype, tol):
    q, k, v = make(dtype)
    want = kt.attention(q, k, v, kv_len=[70, 41])
    qc, kc, vc = (t.cuda() for t in (q, k, v))
    out = torch.empty_like(qc)
    ptr = out.data_ptr()
    got = kt.attention(qc, kc, vc, kv_len=[70, 41], out=out)
    assert got is out and out.data_ptr() == ptr  # written in place
    torch.cuda.synchronize()
    assert (out.cpu().float() - want.float()).abs().max() < tol


def test_cuda_on_a_side_stream_and_bshd():
    q, k, v = make(torch.bfloat16, seed=1)
    want = kt.attention(q, k, v)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        qs, ks, vs = (t.cuda().transpose(1, 2).contiguous() for t in (q, k, v))
        out = kt.attention(qs, ks, vs, layout="bshd")
    side.synchronize()
    assert (out.transpose(1, 2).cpu().float() - want.float()).abs().max() \
        < 2e-2


def test_cuda_torch_compile_fullgraph():
    q, k, v = (t.cuda() for t in make(torch.float32, seed=2))
    f = torch.compile(lambda q, k, v: kt.attention(q, k, v) + 1,
                      fullgraph=True, backend="aot_eager")
    assert torch.allclose(f(q, k, v), kt.attention(q, k, v) + 1, atol=1e-5)
