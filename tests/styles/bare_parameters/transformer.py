"""Encoder, decoder and the whole model: post-norm layers, batch-first tensors (batch, len, d_model).

Used as ``from bare_parameters.transformer import Transformer``.
"""
import math

import torch
import torch.nn as nn

from .attention import MultiHeadAttention, subsequent_mask
from .feed_forward import FeedForward


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=1000, dropout=0.1):
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float).unsqueeze(1)
        two_i = torch.arange(0, d_model, 2, dtype=torch.float)
        angle = pos / torch.pow(10000.0, two_i / d_model)
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(angle)
        pe[:, 1::2] = torch.cos(angle)
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.pe[:x.size(1)])


class EncoderLayer(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, h)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.norm1(x + self.dropout(self.attn(x, x, x)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, h)
        self.cross_attn = MultiHeadAttention(d_model, h)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory):
        causal = subsequent_mask(x.size(1), x.device)
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, causal)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory)))
        return self.norm3(x + self.dropout(self.ffn(x)))


class Encoder(nn.Module):
    def __init__(self, n_layers, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(d_model, h, d_ff, dropout) for _ in range(n_layers)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Decoder(nn.Module):
    def __init__(self, n_layers, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(d_model, h, d_ff, dropout) for _ in range(n_layers)])

    def forward(self, x, memory):
        for layer in self.layers:
            x = layer(x, memory)
        return x


class Transformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=512, h=8, d_ff=2048, n_layers=6, dropout=0.1, max_len=1000):
        super().__init__()
        self.d_model = d_model
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.pos = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(n_layers, d_model, h, d_ff, dropout)
        self.decoder = Decoder(n_layers, d_model, h, d_ff, dropout)
        self.out = nn.Linear(d_model, tgt_vocab)

    def forward(self, src, tgt):
        """Log-probabilities over the target vocabulary, (batch, tgt_len, tgt_vocab)."""
        scale = math.sqrt(self.d_model)
        memory = self.encoder(self.pos(self.src_embed(src) * scale))
        hidden = self.decoder(self.pos(self.tgt_embed(tgt) * scale), memory)
        return torch.log_softmax(self.out(hidden), dim=-1)
