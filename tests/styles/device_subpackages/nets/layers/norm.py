import torch
from torch import nn


class LayerNorm(nn.Module):
    """Normalises each position over its features, then applies a learned gain and offset."""

    def __init__(self, d_model, eps=1e-12):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d_model))
        self.offset = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        centred = x - x.mean(dim=-1, keepdim=True)
        spread = centred.pow(2).mean(dim=-1, keepdim=True)
        return self.gain * (centred * torch.rsqrt(spread + self.eps)) + self.offset
