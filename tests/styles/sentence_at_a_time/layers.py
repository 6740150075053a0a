"""Attention and feed-forward layers for ONE sentence: every tensor is a (length, d_model) matrix, no batch axis.
The training loop feeds the model one sentence pair at a time."""
import math

import torch
import torch.nn as nn


class DotProductAttention(nn.Module):
    """One head: its own query, key and value maps, then softmax(Q K^T / sqrt(d_head)) V."""

    def __init__(self, d_model, d_head):
        super().__init__()
        self.to_query = nn.Linear(d_model, d_head)
        self.to_key = nn.Linear(d_model, d_head)
        self.to_value = nn.Linear(d_model, d_head)
        self.d_head = d_head

    def forward(self, x, context, mask=None):
        scores = self.to_query(x) @ self.to_key(context).t() / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        return torch.softmax(scores, dim=-1) @ self.to_value(context)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = nn.ModuleList([DotProductAttention(d_model, d_model // heads) for _ in range(heads)])
        self.merge = nn.Linear(d_model, d_model)

    def forward(self, x, context, mask=None):
        joined = torch.cat([head(x, context, mask) for head in self.heads], dim=1)  # features of each word
        return self.merge(joined)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.expand = nn.Linear(d_model, d_ff)
        self.contract = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.contract(torch.relu(self.expand(x)))
