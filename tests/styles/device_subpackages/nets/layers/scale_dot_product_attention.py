import math

from torch import nn


class ScaleDotProductAttention(nn.Module):
    """Query, key and value arrive split into heads: (batch, head, length, d_tensor)."""

    def __init__(self):
        super().__init__()
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, q, k, v, mask=None):
        batch_size, head, length, d_tensor = k.size()
        d_model = head * d_tensor
        score = (q @ k.transpose(2, 3)) / math.sqrt(d_model)
        if mask is not None:
            score = score.masked_fill(mask == 0, -10000)
        score = self.softmax(score)
        return score @ v, score
