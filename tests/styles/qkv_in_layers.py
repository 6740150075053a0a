"""A Transformer whose layers own their query/key/value/output projections.

The attention block holds no parameters: it is handed queries, keys and values that the layer has already
projected to d_model, splits them into heads, attends, and merges the heads back. The layer applies W^O.
"""
import math

import torch
import torch.nn as nn


class HeadSplitAttention(nn.Module):
    """Scaled dot-product attention over `n_heads` heads of already-projected inputs (no weights of its own)."""

    def __init__(self, n_heads):
        super().__init__()
        self.n_heads = n_heads

    def forward(self, q, k, v, mask=None):
        batch, q_len, width = q.shape
        d_head = width // self.n_heads
        q = q.view(batch, q_len, self.n_heads, d_head).transpose(1, 2)
        k = k.view(batch, k.size(1), self.n_heads, d_head).transpose(1, 2)
        v = v.view(batch, v.size(1), self.n_heads, d_head).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9)
        weights = torch.softmax(scores, dim=-1)
        out = weights @ v
        return out.transpose(1, 2).contiguous().view(batch, q_len, width)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.attention = HeadSplitAttention(n_heads)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, src_mask):
        attended = self.w_o(self.attention(self.w_q(x), self.w_k(x), self.w_v(x), src_mask))
        x = self.norm1(x + self.drop(attended))
        return self.norm2(x + self.drop(self.feed_forward(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_q = nn.Linear(d_model, d_model)
        self.self_k = nn.Linear(d_model, d_model)
        self.self_v = nn.Linear(d_model, d_model)
        self.self_o = nn.Linear(d_model, d_model)
        self.cross_q = nn.Linear(d_model, d_model)
        self.cross_k = nn.Linear(d_model, d_model)
        self.cross_v = nn.Linear(d_model, d_model)
        self.cross_o = nn.Linear(d_model, d_model)
        self.attention = HeadSplitAttention(n_heads)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        attended = self.self_o(self.attention(self.self_q(x), self.self_k(x), self.self_v(x), tgt_mask))
        x = self.norm1(x + self.drop(attended))
        attended = self.cross_o(self.attention(self.cross_q(x), self.cross_k(memory), self.cross_v(memory), src_mask))
        x = self.norm2(x + self.drop(attended))
        return self.norm3(x + self.drop(self.feed_forward(x)))


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1).float()
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(position * div_term)
        table[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("table", table.unsqueeze(0))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.table[:, :x.size(1)])


class Embedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.lookup = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, tokens):
        return self.lookup(tokens) * math.sqrt(self.d_model)


class Encoder(nn.Module):
    def __init__(self, n_layers, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])

    def forward(self, x, src_mask):
        for layer in self.layers:
            x = layer(x, src_mask)
        return x


class Decoder(nn.Module):
    def __init__(self, n_layers, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return x


class Generator(nn.Module):
    def __init__(self, d_model, vocab_size):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, x):
        return torch.log_softmax(self.proj(x), dim=-1)


def subsequent_mask(size):
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool))


class Transformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, n_layers=6, d_model=512, n_heads=8, d_ff=2048, dropout=0.1,
                 max_len=5000):
        super().__init__()
        self.src_embed = Embedding(src_vocab, d_model)
        self.tgt_embed = Embedding(tgt_vocab, d_model)
        self.pos = PositionalEncoding(d_model, dropout, max_len)
        self.encoder = Encoder(n_layers, d_model, n_heads, d_ff, dropout)
        self.decoder = Decoder(n_layers, d_model, n_heads, d_ff, dropout)
        self.generator = Generator(d_model, tgt_vocab)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src, src_mask):
        return self.encoder(self.pos(self.src_embed(src)), src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.decoder(self.pos(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)


if __name__ == "__main__":
    model = Transformer(11, 11, n_layers=2, d_model=32, n_heads=4, d_ff=64).eval()
    src = torch.randint(1, 11, (2, 7))
    tgt = torch.randint(1, 11, (2, 5))
    out = model(src, tgt, (src != 0).unsqueeze(1), subsequent_mask(5))
    print(model.generator(out).shape)
