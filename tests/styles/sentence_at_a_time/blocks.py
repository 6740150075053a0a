"""Encoder and decoder layers (post-norm, §3.1) over one sentence."""
import torch
import torch.nn as nn

from layers import FeedForward, MultiHeadAttention


class EncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, heads)
        self.ffn = FeedForward(d_model, d_ff)
        self.first_norm = nn.LayerNorm(d_model)
        self.second_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.first_norm(x + self.dropout(self.attention(x, x, mask)))
        return self.second_norm(x + self.dropout(self.ffn(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1):
        super().__init__()
        self.own_attention = MultiHeadAttention(d_model, heads)
        self.memory_attention = MultiHeadAttention(d_model, heads)
        self.ffn = FeedForward(d_model, d_ff)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, y, memory, src_mask=None, tgt_mask=None):
        if tgt_mask is None:  # one sentence: its length is the first axis
            tgt_mask = torch.tril(torch.ones(y.size(0), y.size(0), dtype=torch.bool))
        y = self.norms[0](y + self.dropout(self.own_attention(y, y, tgt_mask)))
        y = self.norms[1](y + self.dropout(self.memory_attention(y, memory, src_mask)))
        return self.norms[2](y + self.dropout(self.ffn(y)))
