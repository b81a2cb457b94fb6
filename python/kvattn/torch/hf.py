"""kvattn as a transformers attention backend: `import kvattn.torch` registers
"kvattn" in transformers' AttentionInterface (and its mask interface), so
`AutoModelForCausalLM.from_config(cfg, attn_implementation="kvattn")` runs
every attention layer through torch.ops.kvattn.attention (docs/torch.md).

What a backend receives (transformers' sdpa_attention.py is the model):
query [B, Hq, L, D] and key/value [B, Hkv, S, D] after the cache update, the
model's 4D boolean mask [B, 1, L, S] (transformers' sdpa mask: causal,
padding, sliding window, static-cache slots) or None where transformers
skipped it, `scaling`, `sliding_window`, `softcap`, `is_causal`, and from
gpt-oss `s_aux` (its attention sinks, one per query head: kvattn's `sinks`).
"""

from typing import Optional, Tuple

import torch

from ..capi import KVAttnValueError

NAME = "kvattn"


def kvattn_attention_forward(module: torch.nn.Module, query: torch.Tensor,
                             key: torch.Tensor, value: torch.Tensor,
                             attention_mask: Optional[torch.Tensor],
                             dropout: float = 0.0,
                             scaling: Optional[float] = None,
                             sliding_window: Optional[int] = None,
                             softcap: Optional[float] = None,
                             is_causal: Optional[bool] = None,
                             **kwargs) -> Tuple[torch.Tensor, None]:
    from . import attention
    cache = kwargs.pop("cache", None)
    if cache is not None:
        # transformers' PagedAttentionCache (continuous batching, reached
        # only under a name transformers accepts there: docs/torch.md):
        # write the new keys/values into its pages and read every
        # sequence's keys back, packed [1, Hkv, N, D]; the 4D mask it
        # builds says which packed key each packed query row sees.
        key, value = cache.update(key_states=key, value_states=value,
                                  layer_idx=module.layer_idx, kwargs=kwargs)
        if kwargs.get("block_table") is not None:
            raise KVAttnValueError(
                "transformers' decode fast path (a block table over the "
                "paged cache, FlashAttention's flash_attn_with_kvcache) is "
                "not wired to the kvattn backend")
    if dropout:
        raise KVAttnValueError("the kvattn attention backend has no dropout "
                               f"(dropout = {dropout}): use it for inference "
                               "(model.eval())")
    if kwargs.get("position_bias") is not None:
        raise KVAttnValueError("the kvattn attention backend takes no "
                               "position_bias (an additive bias)")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    # gpt-oss's attention sinks (a parameter of the model's dtype).
    sinks = kwargs.get("s_aux")
    if sinks is not None:
        sinks = sinks.detach().to(torch.float32).contiguous()
    L, S = query.shape[2], key.shape[2]
    mask = attention_mask
    if mask is not None and mask.dtype != torch.bool:
        # An additive float mask (0 allowed, a large negative excluded).
        mask = mask > torch.finfo(mask.dtype).min / 2
    if mask is not None:
        # transformers' mask says everything: causality (its positions),
        # padding, the window, unused static-cache slots.
        out = attention(query, key, value, mask=mask, causal=False,
                        softcap=softcap or 0.0, scale=scaling, sinks=sinks)
    elif not is_causal:
        out = attention(query, key, value, causal=False,
                        softcap=softcap or 0.0, scale=scaling, sinks=sinks)
    else:
        # transformers skips the mask only when the positions are plain
        # (masking_utils' allow_is_causal_skip): a decode step (L == 1) sees
        # every key; otherwise the queries are the first L positions (a
        # prefill, L == S, or an empty static cache's first L slots).
        B = query.shape[0]
        if L == 1:
            q_offset, kv_len = S - 1, S
        else:
            q_offset, kv_len = 0, min(L, S)
        out = attention(query, key, value, q_offset=[q_offset] * B,
                        kv_len=[kv_len] * B, causal=True,
                        window=sliding_window or 0, softcap=softcap or 0.0,
                        scale=scaling, sinks=sinks)
    return out.transpose(1, 2).contiguous(), None


class continuous_batching_slot:
    """A context manager for transformers' continuous batching
    (`model.generate_batch`, its PagedAttentionCache): transformers 5.23
    accepts there only "paged|eager", "sdpa" or a name containing "flash"
    (and takes such a name for a FlashAttention kernel it imports), so
    "kvattn" is refused by name. Inside this block the "sdpa" entry of
    transformers' AttentionInterface is kvattn's backend (process-wide,
    restored on exit); set the model to "sdpa" for the batch:

        with kvattn.torch.hf.continuous_batching_slot():
            model.set_attn_implementation("sdpa")
            out = model.generate_batch(prompts, generation_config=gc)

    docs/torch.md "transformers' paged cache"."""

    def __enter__(self):
        from transformers import AttentionInterface
        self._saved = AttentionInterface._global_mapping["sdpa"]
        AttentionInterface._global_mapping["sdpa"] = kvattn_attention_forward
        return self

    def __exit__(self, *exc):
        from transformers import AttentionInterface
        AttentionInterface._global_mapping["sdpa"] = self._saved
        return False


def register() -> bool:
    """Registers "kvattn" with transformers (its attention and mask
    interfaces); False when transformers is not installed."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import (AttentionMaskInterface,
                                                sdpa_mask)
    except ImportError:
        return False
    AttentionInterface.register(NAME, kvattn_attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return True
