"""Scaled dot-product attention and multi-head attention on bare weight matrices (no biases)."""
import math

import torch
import torch.nn as nn


def subsequent_mask(size, device=None):
    """(size, size) booleans, True above the diagonal: the later positions a query must not see."""
    return torch.triu(torch.ones(size, size, dtype=torch.bool, device=device), diagonal=1)


class ScaledDotProductAttention(nn.Module):
    def forward(self, Q, K, V, mask=None):
        """Q, K, V: (batch, heads, len, d_k). ``mask`` is True where a score is blocked."""
        d_k = Q.size(-1)
        scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(mask, -1e9)
        weights = torch.softmax(scores, dim=2)
        return torch.matmul(weights, V)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, h):
        super().__init__()
        assert d_model % h == 0
        self.h = h
        self.d_k = d_model // h
        self.W_Q = nn.Parameter(torch.empty(d_model, d_model))
        self.W_K = nn.Parameter(torch.empty(d_model, d_model))
        self.W_V = nn.Parameter(torch.empty(d_model, d_model))
        self.W_O = nn.Parameter(torch.empty(d_model, d_model))
        for w in (self.W_Q, self.W_K, self.W_V, self.W_O):
            nn.init.xavier_uniform_(w)
        self.attention = ScaledDotProductAttention()

    def _heads(self, x):
        batch, length, _ = x.shape
        return x.view(batch, length, self.h, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        Q = self._heads(query @ self.W_Q)
        K = self._heads(key @ self.W_K)
        V = self._heads(value @ self.W_V)
        out = self.attention(Q, K, V, mask)
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, self.h * self.d_k)
        return out @ self.W_O
