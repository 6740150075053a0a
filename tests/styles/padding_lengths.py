"""A Transformer for batches of variable-length sequences: padding is given as the length of each sequence, and the
model builds its masks from the lengths."""
import math

import torch
import torch.nn as nn


def lengths_to_mask(lengths, max_len):
    """(batch, max_len) bool: True at the positions of real tokens (those before each sequence's length)."""
    positions = torch.arange(max_len, device=lengths.device)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)


class ScaledDotProductAttention(nn.Module):
    def forward(self, q, k, v, mask=None):
        scores = q.matmul(k.transpose(-1, -2)) / math.sqrt(k.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask.logical_not(), -1e9)
        return torch.softmax(scores, dim=-1).matmul(v)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.output = nn.Linear(d_model, d_model)
        self.attention = ScaledDotProductAttention()

    def heads(self, x):
        return x.reshape(x.size(0), x.size(1), self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, q, k, v, mask=None):
        """mask: (batch, len_q, len_k) or broadcastable, True = may attend."""
        if mask is not None:
            mask = mask.unsqueeze(1)
        out = self.attention(self.heads(self.query(q)), self.heads(self.key(k)), self.heads(self.value(v)), mask)
        out = out.permute(0, 2, 1, 3).reshape(q.size(0), q.size(1), -1)
        return self.output(out)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.fc2(self.dropout(torch.relu(self.fc1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(2)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        x = self.norms[0](x + self.dropout(self.self_attention(x, x, x, mask)))
        return self.norms[1](x + self.dropout(self.feed_forward(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads)
        self.cross_attention = MultiHeadAttention(d_model, num_heads)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.norms[0](x + self.dropout(self.self_attention(x, x, x, tgt_mask)))
        x = self.norms[1](x + self.dropout(self.cross_attention(x, memory, memory, src_mask)))
        return self.norms[2](x + self.dropout(self.feed_forward(x)))


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout, max_len=512):
        super().__init__()
        pos = torch.arange(max_len).float().unsqueeze(1)
        i = torch.arange(0, d_model, 2).float()
        angles = pos / torch.pow(10000.0, i / d_model)
        pe = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).reshape(max_len, d_model)
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class Transformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=512, num_heads=8, num_layers=6, d_ff=2048, dropout=0.1):
        super().__init__()
        self.d_model = d_model
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.positions = PositionalEncoding(d_model, dropout)
        self.encoder_layers = nn.ModuleList([EncoderLayer(d_model, num_heads, d_ff, dropout)
                                             for _ in range(num_layers)])
        self.decoder_layers = nn.ModuleList([DecoderLayer(d_model, num_heads, d_ff, dropout)
                                             for _ in range(num_layers)])
        self.generator = nn.Linear(d_model, tgt_vocab)

    def masks(self, src_lengths, tgt_lengths, src_len, tgt_len):
        src_keys = lengths_to_mask(src_lengths, src_len)
        tgt_keys = lengths_to_mask(tgt_lengths, tgt_len)
        src_mask = src_keys.unsqueeze(-1)  # (batch, src_len, 1)
        tgt_mask = tgt_keys.unsqueeze(1)  # (batch, 1, tgt_len)
        if self.training:
            causal = torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=tgt_keys.device).tril()
            tgt_mask = tgt_mask & causal
        return src_mask, tgt_mask

    def forward(self, src, tgt, src_lengths, tgt_lengths):
        """src (batch, S) and tgt (batch, T) token ids, padded at the end; src_lengths and tgt_lengths (batch,)."""
        src_mask, tgt_mask = self.masks(src_lengths, tgt_lengths, src.size(1), tgt.size(1))
        x = self.positions(self.src_embed(src) * math.sqrt(self.d_model))
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        y = self.positions(self.tgt_embed(tgt) * math.sqrt(self.d_model))
        for layer in self.decoder_layers:
            y = layer(y, x, src_mask.transpose(-1, -2), tgt_mask)
        return self.generator(y)


if __name__ == "__main__":
    model = Transformer(src_vocab=100, tgt_vocab=100, d_model=64, num_heads=4, num_layers=2, d_ff=128)
    src, tgt = torch.randint(1, 100, (3, 9)), torch.randint(1, 100, (3, 7))
    src_lengths, tgt_lengths = torch.tensor([9, 6, 4]), torch.tensor([7, 7, 3])
    print(model(src, tgt, src_lengths, tgt_lengths).shape)
