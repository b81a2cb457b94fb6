"""kvattn as transformers' attention backend ("kvattn", registered by
`import kvattn.torch`): tiny randomly initialised models built from configs
(no weights downloaded) — Llama and Qwen3 (GQA 8/2) and Gemma 2 (logit
soft-capping, sliding-window layers every other layer, window 4) — run with
attn_implementation="kvattn" and with transformers' eager attention on the
same weights. Compared: logits of a prefill and of successive appends
(chunks 3+2+3, 1+7, 5+1+2 of 8 tokens onto transformers' DynamicCache, batch
2), left padding (logits of the real tokens), and greedy generate() tokens
with the dynamic and the static cache. Tolerances: f32 logits 1e-5 absolute
(both accumulate in f32; measured ~2e-7); bf16 logits 2e-2 absolute against
the f32 model's logits (|logits| <= ~0.5 here; bf16 activations through 2
layers and the head: measured 3.0e-3 for kvattn, 3.2e-3 for eager's own
bf16, 2.4e-3 between the two); greedy tokens are compared in f32."""

import copy

import pytest
import torch

import kvattn.torch as kt
from transformers import (AutoModelForCausalLM, DynamicCache, Gemma2Config,
                          LlamaConfig, Qwen3Config)

assert kt.transformers_registered


def configs():
    common = dict(vocab_size=97, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=8,
                  num_key_value_heads=2, max_position_embeddings=64)
    return {
        "llama": LlamaConfig(**common),
        "qwen3": Qwen3Config(head_dim=16, **common),
        "gemma2": Gemma2Config(head_dim=16, attn_logit_softcapping=5.0,
                               final_logit_softcapping=30.0, sliding_window=4,
                               layer_types=["sliding_attention",
                                            "full_attention"],
                               query_pre_attn_scalar=16, **common),
    }


def pair(name, dtype=torch.float32):
    cfg = configs()[name]
    torch.manual_seed(0)
    eager = AutoModelForCausalLM.from_config(
        copy.deepcopy(cfg), attn_implementation="eager", dtype=dtype).eval()
    ours = AutoModelForCausalLM.from_config(
        copy.deepcopy(cfg), attn_implementation="kvattn", dtype=dtype).eval()
    ours.load_state_dict(eager.state_dict())
    assert ours.config._attn_implementation == "kvattn"
    assert eager.config._attn_implementation == "eager"
    return cfg, eager, ours


def ids(n=8, seed=1):
    return torch.randint(0, 97, (2, n),
                         generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma2"])
@torch.no_grad()
def test_prefill_and_appends_match_eager(name):
    cfg, eager, ours = pair(name)
    x = ids()
    calls = kt.program_cache_info()["hits"] + kt.program_cache_info()["misses"]
    full = eager(x).logits
    assert (ours(x).logits - full).abs().max() < 1e-5
    assert kt.program_cache_info()["hits"] + \
        kt.program_cache_info()["misses"] > calls  # kvattn really ran
    for chunks in ((3, 2, 3), (1, 7), (5, 1, 2)):
        ce, ck = DynamicCache(config=cfg), DynamicCache(config=cfg)
        start = 0
        for n in chunks:
            part = x[:, start:start + n]
            le = eager(part, past_key_values=ce, use_cache=True).logits
            lk = ours(part, past_key_values=ck, use_cache=True).logits
            assert (lk - le).abs().max() < 1e-5, (chunks, n)
            # And the rows of one full forward: the appended rows see the
            # cache.
            assert (lk - full[:, start:start + n]).abs().max() < 1e-4
            start += n


@pytest.mark.parametrize("name", ["llama", "gemma2"])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
@torch.no_grad()
def test_greedy_generate_and_left_padding(name, cache):
    cfg, eager, ours = pair(name)
    x = ids(10, seed=2)
    mask = torch.ones_like(x)
    mask[1, :3] = 0  # left padding of the second sequence
    le = eager(x, attention_mask=mask).logits
    lk = ours(x, attention_mask=mask).logits
    real = mask.bool()
    assert (lk - le)[real].abs().max() < 1e-5
    kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False,
              pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    ge = eager.generate(x, **kw)
    gk = ours.generate(x, **kw)
    assert ge.shape == (2, 16)
    assert torch.equal(gk, ge)


@torch.no_grad()
def test_bf16_logits():
    cfg, eager, ours = pair("llama", torch.bfloat16)
    _, eager32, _ = pair("llama")
    x = ids()
    le = eager(x).logits.float()
    lk = ours(x).logits.float()
    ref = eager32(x).logits
    # kvattn's bf16 is as close to the f32 logits as eager's bf16 is.
    assert (lk - ref).abs().max() < 2e-2
    assert (le - ref).abs().max() < 2e-2
    assert (lk - le).abs().max() < 2e-2


@torch.no_grad()
def test_continuous_batching_paged_cache():
    """transformers' continuous batching (generate_batch over its
    PagedAttentionCache, page_size 4: prompts of 7, 3 and 11 tokens packed
    into one ragged batch, then decode steps) with kvattn's backend in the
    "sdpa" slot (kt.hf.continuous_batching_slot: "kvattn" is refused by
    name there): greedy tokens identical to eager generate() per prompt,
    and every attention call went through kvattn with the paged cache."""
    from transformers import GenerationConfig
    from transformers.generation import ContinuousBatchingConfig
    from transformers.generation.continuous_batching import \
        PagedAttentionCache
    from kvattn.torch import hf

    cfg, eager, ours = pair("llama")
    prompts = [[1, 2, 3, 4, 5, 6, 7], [7, 8, 9],
               [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]]
    gc = GenerationConfig(max_new_tokens=6, do_sample=False, eos_token_id=-1,
                          pad_token_id=0)
    cb = ContinuousBatchingConfig(page_size=4, num_blocks=32,
                                  max_batch_tokens=16)
    with pytest.raises(ValueError, match="Implementation kvattn is not "
                       "supported for continuous batching"):
        ours.generate_batch(prompts, generation_config=gc,
                            continuous_batching_config=cb, progress_bar=False)
    calls = []
    real = hf.kvattn_attention_forward

    def spy(module, query, key, value, mask, **kw):
        calls.append(isinstance(kw.get("cache"), PagedAttentionCache))
        return real(module, query, key, value, mask, **kw)

    hf.kvattn_attention_forward = spy
    try:
        with hf.continuous_batching_slot():
            ours.set_attn_implementation("sdpa")
            out = ours.generate_batch(prompts, generation_config=gc,
                                      continuous_batching_config=cb,
                                      progress_bar=False)
    finally:
        hf.kvattn_attention_forward = real
    got = [out[f"req_{i}"].generated_tokens for i in range(len(prompts))]
    want = [eager.generate(torch.tensor([p]), max_new_tokens=6,
                           do_sample=False, pad_token_id=0)[0, len(p):]
            .tolist() for p in prompts]
    assert got == want
    # Two layers per forward; prefill chunks and decode steps.
    assert len(calls) >= 2 * 6 and all(calls)
