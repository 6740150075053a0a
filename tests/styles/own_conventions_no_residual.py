"""The model of own_conventions.py with one mistake planted where only the model's own forward pass reaches it: its
add-and-norm block, which takes the sub-layer as a function returning a pair, normalizes the sub-layer's output
without adding the block's input (no residual connection)."""
import math

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(features))
        self.shift = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift


class HeadedAttention(nn.Module):
    """forward(queries, memory, key_lengths, causal=False) -> (output, weights); key_lengths: a LongTensor (batch,)
    of how many leading keys of each sequence are real."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.to_q = nn.Linear(d_model, d_model)
        self.to_k = nn.Linear(d_model, d_model)
        self.to_v = nn.Linear(d_model, d_model)
        self.to_out = nn.Linear(d_model, d_model)

    def split(self, x):
        return x.view(x.size(0), x.size(1), self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, queries, memory, key_lengths, causal=False):
        q, k, v = self.split(self.to_q(queries)), self.split(self.to_k(memory)), self.split(self.to_v(memory))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        keep = torch.arange(memory.size(1), device=memory.device)[None, :] < key_lengths[:, None]  # (batch, keys)
        keep = keep[:, None, None, :]
        if causal:
            keep = keep & torch.ones(queries.size(1), memory.size(1), dtype=torch.bool,
                                     device=memory.device).tril()
        weights = scores.masked_fill(~keep, float("-inf")).softmax(-1)
        out = (weights @ v).transpose(1, 2).reshape(queries.size(0), queries.size(1), -1)
        return self.to_out(out), weights


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.up, self.down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.down(self.dropout(torch.relu(self.up(x))))


class AddNorm(nn.Module):
    """LayerNorm(x + Dropout(Sublayer(x))), the sub-layer a function returning (output, weights)."""

    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        out, _ = sublayer(x)
        return self.norm(self.dropout(out))


class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout):
        super().__init__()
        self.attention = HeadedAttention(d_model, n_heads)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.add_norm_1, self.add_norm_2 = AddNorm(d_model, dropout), AddNorm(d_model, dropout)

    def forward(self, x, lengths):
        x = self.add_norm_1(x, lambda y: self.attention(y, y, lengths))
        return self.add_norm_2(x, lambda y: (self.ffn(y), None))


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout):
        super().__init__()
        self.self_attention = HeadedAttention(d_model, n_heads)
        self.cross_attention = HeadedAttention(d_model, n_heads)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.add_norms = nn.ModuleList([AddNorm(d_model, dropout) for _ in range(3)])

    def forward(self, y, memory, src_lengths, tgt_lengths):
        y = self.add_norms[0](y, lambda z: self.self_attention(z, z, tgt_lengths, causal=True))
        y = self.add_norms[1](y, lambda z: self.cross_attention(z, memory, src_lengths))
        return self.add_norms[2](y, lambda z: (self.ffn(z), None))


def sinusoids(length, d_model):
    position = torch.arange(length, dtype=torch.float).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


class Seq2Seq(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1,
                 max_len=256):
        super().__init__()
        self.d_model = d_model
        self.src_embedding = nn.Embedding(src_vocab, d_model)
        self.tgt_embedding = nn.Embedding(tgt_vocab, d_model)
        self.register_buffer("positions", sinusoids(max_len, d_model))
        self.dropout = nn.Dropout(dropout)
        self.encoder = nn.ModuleList([EncoderBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        self.decoder = nn.ModuleList([DecoderBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        self.out = nn.Linear(d_model, tgt_vocab, bias=False)
        self.out.weight = self.tgt_embedding.weight

    def embed(self, table, tokens):
        return self.dropout(table(tokens) * math.sqrt(self.d_model) + self.positions[: tokens.size(1)])

    def forward(self, src, tgt, src_lengths, tgt_lengths):
        """src (batch, S) and tgt (batch, T) token ids, padded at the end; src_lengths, tgt_lengths (batch,)."""
        memory = self.embed(self.src_embedding, src)
        for block in self.encoder:
            memory = block(memory, src_lengths)
        y = self.embed(self.tgt_embedding, tgt)
        for block in self.decoder:
            y = block(y, memory, src_lengths, tgt_lengths)
        return torch.log_softmax(self.out(y), dim=-1)


if __name__ == "__main__":
    model = Seq2Seq(src_vocab=50, tgt_vocab=50, d_model=32, n_heads=4, n_layers=2, d_ff=64)
    src, tgt = torch.randint(1, 50, (2, 7)), torch.randint(1, 50, (2, 5))
    print(model(src, tgt, torch.tensor([7, 4]), torch.tensor([5, 3])).shape)
