"""The whole encoder-decoder over one sentence pair: token ids (length,) in, logits (length, vocabulary) out."""
import math

import torch
import torch.nn as nn

from blocks import DecoderLayer, EncoderLayer


class Embedder(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.lookup = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, ids):
        return self.lookup(ids) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=128, dropout=0.1):
        super().__init__()
        position = torch.arange(max_len).float().unsqueeze(1)
        rate = torch.pow(10000.0, -torch.arange(0, d_model, 2).float() / d_model)
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(position * rate)
        table[:, 1::2] = torch.cos(position * rate)
        self.register_buffer("table", table)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.table[: x.size(0)])


class Encoder(nn.Module):
    def __init__(self, d_model, heads, d_ff, num_layers, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(d_model, heads, d_ff, dropout) for _ in range(num_layers)])

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return x


class Decoder(nn.Module):
    def __init__(self, d_model, heads, d_ff, num_layers, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(d_model, heads, d_ff, dropout) for _ in range(num_layers)])

    def forward(self, y, memory, src_mask=None, tgt_mask=None):
        for layer in self.layers:
            y = layer(y, memory, src_mask, tgt_mask)
        return y


class Translator(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, heads=8, d_ff=2048, num_layers=6, dropout=0.1,
                 max_len=128):
        super().__init__()
        self.source_embedding = Embedder(src_vocab_size, d_model)
        self.target_embedding = Embedder(tgt_vocab_size, d_model)
        self.positions = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(d_model, heads, d_ff, num_layers, dropout)
        self.decoder = Decoder(d_model, heads, d_ff, num_layers, dropout)
        self.to_vocabulary = nn.Linear(d_model, tgt_vocab_size)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        memory = self.encoder(self.positions(self.source_embedding(src)), src_mask)
        y = self.decoder(self.positions(self.target_embedding(tgt)), memory, src_mask, tgt_mask)
        return self.to_vocabulary(y)
