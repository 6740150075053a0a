"""The building blocks. Each reads its sizes from transformer.constants."""
import math

import torch
from torch import nn

from transformer import constants as C


class SinusoidalPositions(nn.Module):
    def __init__(self):
        super().__init__()
        position = torch.arange(C.MAX_SEQ_LEN, dtype=torch.float).unsqueeze(1)
        div = torch.exp(torch.arange(0, C.D_MODEL, 2, dtype=torch.float) * -(math.log(10000.0) / C.D_MODEL))
        pe = torch.zeros(C.MAX_SEQ_LEN, C.D_MODEL)
        pe[:, 0::2] = torch.sin(position * div)
        pe[:, 1::2] = torch.cos(position * div)
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(C.DROPOUT)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class MultiHeadedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.d_k = C.D_MODEL // C.N_HEADS
        self.qkv = nn.ModuleList([nn.Linear(C.D_MODEL, C.D_MODEL) for _ in range(3)])
        self.proj = nn.Linear(C.D_MODEL, C.D_MODEL)

    def forward(self, query, key, value, mask=None):
        batch = query.size(0)
        q, k, v = [lin(t).view(batch, -1, C.N_HEADS, self.d_k).transpose(1, 2)
                   for lin, t in zip(self.qkv, (query, key, value))]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(1), float("-1e9"))
        context = torch.matmul(scores.softmax(dim=-1), v)
        return self.proj(context.transpose(1, 2).contiguous().view(batch, -1, C.D_MODEL))


class PositionwiseFeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(C.D_MODEL, C.D_FF), nn.ReLU(), nn.Dropout(C.DROPOUT),
                                 nn.Linear(C.D_FF, C.D_MODEL))

    def forward(self, x):
        return self.net(x)


class AddNorm(nn.Module):
    """LayerNorm(x + Dropout(Sublayer(x))), §5.4."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(C.D_MODEL)
        self.dropout = nn.Dropout(C.DROPOUT)

    def forward(self, x, sublayer):
        return self.norm(x + self.dropout(sublayer(x)))
