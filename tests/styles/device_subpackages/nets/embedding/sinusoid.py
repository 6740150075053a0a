import torch
from torch import nn


class SinusoidTable(nn.Module):
    """A fixed table of sines and cosines; forward(ids) gives the rows for the ids' length."""

    def __init__(self, d_model, max_len, device):
        super().__init__()
        position = torch.arange(max_len, device=device, dtype=torch.float).unsqueeze(1)
        even = torch.arange(0, d_model, 2, device=device, dtype=torch.float)
        angle = position / torch.pow(torch.tensor(10000.0, device=device), even / d_model)
        table = torch.zeros(max_len, d_model, device=device)
        table[:, 0::2] = torch.sin(angle)
        table[:, 1::2] = torch.cos(angle)
        self.register_buffer("table", table)

    def forward(self, ids):
        return self.table[: ids.size(1)]
