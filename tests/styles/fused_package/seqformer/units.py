"""The sub-layers, each closing itself with its residual sum and its LayerNorm (post-norm, fused)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class DotProductAttention(nn.Module):
    """softmax(Q K^T / sqrt(d_k)) V over tensors laid out (batch, heads, len, width)."""

    def __init__(self, d_k):
        super().__init__()
        self.root_dk = math.sqrt(d_k)

    def forward(self, q, k, v, mask=None):
        logits = torch.einsum("bhqd,bhkd->bhqk", q, k) / self.root_dk
        if mask is not None:
            logits = logits.masked_fill(~mask.bool(), -1e9)
        probs = F.softmax(logits, dim=-1)
        return torch.einsum("bhqk,bhkd->bhqd", probs, v), probs


class MultiHeadAttentionLayer(nn.Module):
    """Multi-head attention whose forward returns Norm(q + Dropout(MultiHead(q, k, v)))."""

    def __init__(self, n_head, d_model, d_k, d_v, dropout=0.1):
        super().__init__()
        self.n_head, self.d_k, self.d_v = n_head, d_k, d_v
        self.to_q = nn.Linear(d_model, n_head * d_k, bias=False)
        self.to_k = nn.Linear(d_model, n_head * d_k, bias=False)
        self.to_v = nn.Linear(d_model, n_head * d_v, bias=False)
        self.merge = nn.Linear(n_head * d_v, d_model, bias=False)
        self.scorer = DotProductAttention(d_k)
        self.out_drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(d_model, eps=1e-6)

    def _heads(self, proj, x, width):
        batch, length, _ = x.shape
        return proj(x).reshape(batch, length, self.n_head, width).permute(0, 2, 1, 3)

    def forward(self, q, k, v, mask=None):
        shortcut = q
        qh = self._heads(self.to_q, q, self.d_k)
        kh = self._heads(self.to_k, k, self.d_k)
        vh = self._heads(self.to_v, v, self.d_v)
        if mask is not None:
            mask = mask.unsqueeze(1)  # one mask for every head
        mixed, probs = self.scorer(qh, kh, vh, mask=mask)
        batch, _, length, _ = mixed.shape
        joined = mixed.permute(0, 2, 1, 3).reshape(batch, length, self.n_head * self.d_v)
        summed = shortcut + self.out_drop(self.merge(joined))
        return self.norm(summed), probs


class FeedForwardLayer(nn.Module):
    """Norm(x + Dropout(W2 relu(W1 x + b1) + b2))."""

    def __init__(self, d_in, d_hid, dropout=0.1):
        super().__init__()
        self.expand = nn.Linear(d_in, d_hid)
        self.shrink = nn.Linear(d_hid, d_in)
        self.out_drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(d_in, eps=1e-6)

    def forward(self, x):
        inner = F.relu(self.expand(x))
        return self.norm(x + self.out_drop(self.shrink(inner)))
