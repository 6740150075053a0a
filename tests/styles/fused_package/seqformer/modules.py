"""The basic blocks: scaled dot-product attention."""
import torch
import torch.nn as nn


class ScaledDotProductAttention(nn.Module):
    """softmax(q k^T / temperature) v, masked positions (mask == 0) removed before the softmax."""

    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, q, k, v, mask=None):
        scores = torch.matmul(q / self.temperature, k.transpose(-2, -1))
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = torch.softmax(scores, dim=-1)
        return torch.matmul(weights, v), weights
