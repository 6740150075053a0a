import torch
from torch import nn


class PositionalEncoding(nn.Module):
    """The sinusoid table; forward takes the token ids and returns the rows for their positions."""

    def __init__(self, d_model, max_len, device):
        super().__init__()
        pos = torch.arange(0, max_len, device=device).float().unsqueeze(1)
        _2i = torch.arange(0, d_model, step=2, device=device).float()
        encoding = torch.zeros(max_len, d_model, device=device)
        encoding[:, 0::2] = torch.sin(pos / (10000 ** (_2i / d_model)))
        encoding[:, 1::2] = torch.cos(pos / (10000 ** (_2i / d_model)))
        self.register_buffer("encoding", encoding)

    def forward(self, x):
        batch_size, seq_len = x.size()
        return self.encoding[:seq_len, :]
