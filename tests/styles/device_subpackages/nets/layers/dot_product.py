import math

import torch
from torch import nn


class DotProductAttention(nn.Module):
    """Attention over tensors already split into heads: (batch, head, length, d_head)."""

    def forward(self, query, key, value, mask=None):
        n_head, d_head = key.shape[1], key.shape[3]
        width = n_head * d_head
        logits = torch.einsum("bhqd,bhkd->bhqk", query, key)
        logits = logits / math.sqrt(width)
        if mask is not None:
            logits = logits.masked_fill(~mask.bool(), -1e9)
        weights = logits.softmax(dim=-1)
        mixed = torch.einsum("bhqk,bhkd->bhqd", weights, value)
        return mixed, weights
