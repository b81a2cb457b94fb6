"""kvattn.torch's `sinks` and `alibi_slopes` keywords (gpt-oss's attention
sinks, FlashAttention's ALiBi) on the CPU against a float64 reference written
with torch, through torch.compile and opcheck, and their misuse. Tolerances as
test_ops.py: f32 1e-5, bf16 2e-2 absolute."""

import pytest
import torch

import kvattn.torch as kt
from kvattn.capi import KVAttnError
from test_ops import reference  # float64, with sinks and ALiBi


def make(B=2, Hq=8, Hkv=2, L=3, S=40, D=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, Hq, L, D, generator=g).to(dtype),
            torch.randn(B, Hkv, S, D, generator=g).to(dtype),
            torch.randn(B, Hkv, S, D, generator=g).to(dtype))


SINKS = torch.tensor([2.0, -1.0, 0.5, 3.0, 0.0, 1.5, -2.5, 4.0])
SLOPES = torch.tensor([2.0 ** (-(h + 1)) for h in range(8)])


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5),
                                        (torch.bfloat16, 2e-2)])
def test_sinks_with_a_sliding_window(dtype, tol):
    q, k, v = make(dtype=dtype, seed=1)
    kv, qo = torch.tensor([40, 25]), torch.tensor([37, 22])
    out = kt.attention(q, k, v, q_offset=qo, kv_len=kv, window=6,
                       sinks=SINKS)
    want = reference(q, k, v, qo, kv, window=6, sinks=SINKS)
    assert (out.double() - want).abs().max() < tol
    # Ignoring the sinks gives another answer.
    plain = reference(q, k, v, qo, kv, window=6)
    assert (plain - want).abs().max() > 0.05


def test_sinks_all_masked_rows_give_zero():
    q, k, v = make(seed=2)
    # Batch 1's rows sit past its kv_len with a window of 1: no key.
    out = kt.attention(q, k, v, q_offset=[10, 30], kv_len=[40, 20], window=1,
                       sinks=SINKS)
    assert torch.all(out[1] == 0)
    want = reference(q, k, v, [10, 30], [40, 20], window=1, sinks=SINKS)
    assert (out.double() - want).abs().max() < 1e-5


def test_alibi_offsets_in_the_thousands():
    q, k, v = make(S=300, seed=3)
    qo, kv = torch.tensor([2997, 1500]), torch.tensor([300, 260])
    # Keys 0..299 sit at positions 0..299: distances in the thousands.
    out = kt.attention(q, k, v, q_offset=qo, kv_len=kv, alibi_slopes=SLOPES
                       * 0.02, sinks=SINKS)
    want = reference(q, k, v, qo, kv, alibi_slopes=SLOPES * 0.02,
                     sinks=SINKS)
    assert (out.double() - want).abs().max() < 1e-5
    plain = reference(q, k, v, qo, kv, sinks=SINKS)
    assert (plain - want).abs().max() > 0.05


def test_compile_and_opcheck():
    q, k, v = make(seed=4)
    kv = torch.tensor([40, 33])

    def f(q, k, v, kv, z, m):
        return kt.attention(q * 2, k, v, kv_len=kv, sinks=z,
                            alibi_slopes=m).sum(-1)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.allclose(compiled(q, k, v, kv, SINKS, SLOPES),
                          f(q, k, v, kv, SINKS, SLOPES), atol=1e-6)
    torch.library.opcheck(torch.ops.kvattn.attention.default,
                          (q, k, v, None, kv, None, True, 0, 0.0, None,
                           "bhsd", SINKS, SLOPES))


@pytest.mark.parametrize("kwargs, message", [
    (dict(sinks=SINKS.half()), "sinks has dtype torch.float16; it must be "
     "torch.float32"),
    (dict(alibi_slopes=SLOPES[:3]), r"alibi_slopes has shape \(3,\); it must "
     r"be \[Hq\] = \[8\]"),
    (dict(sinks=[1.0] * 8), "sinks must be a torch.Tensor, got list"),
    (dict(alibi_slopes=SLOPES.to("meta")), "alibi_slopes is on meta, query "
     "on cpu"),
])
def test_misuse(kwargs, message):
    q, k, v = make(seed=5)
    with pytest.raises(KVAttnError, match=message):
        kt.attention(q, k, v, **kwargs)


def test_transformers_gpt_oss_sinks():
    # The transformers backend passes gpt-oss's s_aux as the sinks: the same
    # result as gpt-oss's own eager attention (the sinks in the softmax,
    # dropped after it), with a mask (prefill) and without (decode).
    gpt_oss = pytest.importorskip(
        "transformers.models.gpt_oss.modeling_gpt_oss",
        reason="transformers is pinned in python/requirements-torch.txt")
    from kvattn.torch.hf import kvattn_attention_forward

    class Module(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sinks = torch.nn.Parameter(SINKS.clone())
            self.num_key_value_groups = 4
            self.is_causal = True

    module = Module().eval()
    q, k, v = make(B=2, L=5, S=5, seed=6)
    scaling = 0.25
    causal = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    causal = causal.expand(2, 1, 5, 5)
    additive = torch.zeros(2, 1, 5, 5).masked_fill(~causal,
                                                   torch.finfo(torch.float32).min)
    want, _ = gpt_oss.eager_attention_forward(module, q, k, v, additive,
                                              scaling)
    got, _ = kvattn_attention_forward(module, q, k, v, causal,
                                      scaling=scaling, s_aux=module.sinks)
    assert (got - want).abs().max() < 1e-5
    plain, _ = kvattn_attention_forward(module, q, k, v, causal,
                                        scaling=scaling)
    assert (plain - want).abs().max() > 0.05
    # Decode: one query over 5 keys, no mask.
    want, _ = gpt_oss.eager_attention_forward(module, q[:, :, -1:], k, v,
                                              None, scaling)
    got, _ = kvattn_attention_forward(module, q[:, :, -1:], k, v, None,
                                      scaling=scaling, s_aux=module.sinks)
    assert (got - want).abs().max() < 1e-5
