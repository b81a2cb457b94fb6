"""A small model written like the one that had the bug: a cached
multi-token append that calls SDPA with is_causal=True over the past keys
and the new ones (python/torch_tests/test_lint.py). `CorrectModel` is the
same attention with a lower-right mask, which the lint must not report."""

import torch
import torch.nn.functional as F
from torch import nn


class CachedAttention(nn.Module):
    def __init__(self, dim=32, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, heads * self.head_dim)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.o = nn.Linear(heads * self.head_dim, dim)

    def project(self, x):
        B, L, _ = x.shape
        q = self.q(x).view(B, L, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(B, L, 2, self.kv_heads,
                               self.head_dim).permute(2, 0, 3, 1, 4)
        return q, k, v

    def forward(self, x, past_k, past_v):
        q, k, v = self.project(x)
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                             enable_gqa=True)
        B, _, L, _ = out.shape
        return self.o(out.transpose(1, 2).reshape(B, L, -1)), k, v


class CorrectModel(CachedAttention):
    def forward(self, x, past_k, past_v):
        q, k, v = self.project(x)
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        L, S = q.shape[2], k.shape[2]
        mask = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             enable_gqa=True)
        B = out.shape[0]
        return self.o(out.transpose(1, 2).reshape(B, L, -1)), k, v
