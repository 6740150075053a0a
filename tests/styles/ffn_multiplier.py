"""transformer.py: an encoder-decoder Transformer in one file, sized like GPT-style code: the feed-forward width is
given as a multiplier of the model width (ffn_mult=4 gives d_ff = 4 * d_model = 2048 for the base model)."""
import math

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.gain * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class MLP(nn.Module):
    def __init__(self, dim, ffn_mult=4, dropout=0.1):
        super().__init__()
        self.up = nn.Linear(dim, ffn_mult * dim)
        self.down = nn.Linear(ffn_mult * dim, dim)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class MultiHeadAttention(nn.Module):
    def __init__(self, dim, n_heads, dropout=0.1):
        super().__init__()
        assert dim % n_heads == 0
        self.dim, self.n_heads, self.head_dim = dim, n_heads, dim // n_heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def attend(self, q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dim)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        return torch.softmax(scores, dim=-1) @ v

    def forward(self, q, k, v, mask=None):
        b = q.size(0)
        heads = lambda t: t.view(b, -1, self.n_heads, self.head_dim).transpose(1, 2)  # noqa: E731
        if mask is not None:
            mask = mask.unsqueeze(1)
        out = self.attend(heads(self.query(q)), heads(self.key(k)), heads(self.value(v)), mask)
        return self.proj(out.transpose(1, 2).contiguous().view(b, -1, self.dim))


class Block(nn.Module):
    """One encoder layer."""

    def __init__(self, dim, n_heads, ffn_mult=4, dropout=0.1):
        super().__init__()
        self.attn = MultiHeadAttention(dim, n_heads, dropout)
        self.mlp = MLP(dim, ffn_mult, dropout)
        self.ln1, self.ln2 = LayerNorm(dim), LayerNorm(dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        x = self.ln1(x + self.drop(self.attn(x, x, x, mask)))
        return self.ln2(x + self.drop(self.mlp(x)))


class DecoderBlock(nn.Module):
    def __init__(self, dim, n_heads, ffn_mult=4, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(dim, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(dim, n_heads, dropout)
        self.mlp = MLP(dim, ffn_mult, dropout)
        self.ln1, self.ln2, self.ln3 = LayerNorm(dim), LayerNorm(dim), LayerNorm(dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.ln1(x + self.drop(self.self_attn(x, x, x, tgt_mask)))
        x = self.ln2(x + self.drop(self.cross_attn(x, memory, memory, src_mask)))
        return self.ln3(x + self.drop(self.mlp(x)))


class Encoder(nn.Module):
    def __init__(self, n_layers, dim, n_heads, ffn_mult=4, dropout=0.1):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, n_heads, ffn_mult, dropout) for _ in range(n_layers))

    def forward(self, x, mask):
        for block in self.blocks:
            x = block(x, mask)
        return x


class Decoder(nn.Module):
    def __init__(self, n_layers, dim, n_heads, ffn_mult=4, dropout=0.1):
        super().__init__()
        self.blocks = nn.ModuleList(DecoderBlock(dim, n_heads, ffn_mult, dropout) for _ in range(n_layers))

    def forward(self, x, memory, src_mask, tgt_mask):
        for block in self.blocks:
            x = block(x, memory, src_mask, tgt_mask)
        return x


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.table = nn.Embedding(vocab_size, dim)

    def forward(self, tokens):
        return self.table(tokens)


class PositionalEncoding(nn.Module):
    def __init__(self, dim, dropout=0.1, max_len=1024):
        super().__init__()
        pe = torch.zeros(max_len, dim)
        pos = torch.arange(max_len).float().unsqueeze(1)
        freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2).float() / dim)
        pe[:, 0::2] = torch.sin(pos * freq)
        pe[:, 1::2] = torch.cos(pos * freq)
        self.register_buffer("pe", pe)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(x + self.pe[: x.size(1)])


class Transformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, dim=512, n_heads=8, n_layers=6, ffn_mult=4, dropout=0.1, max_len=1024):
        super().__init__()
        self.src_embed = TokenEmbedding(src_vocab, dim)
        self.tgt_embed = TokenEmbedding(tgt_vocab, dim)
        self.pos = PositionalEncoding(dim, dropout, max_len)
        self.encoder = Encoder(n_layers, dim, n_heads, ffn_mult, dropout)
        self.decoder = Decoder(n_layers, dim, n_heads, ffn_mult, dropout)
        self.lm_head = nn.Linear(dim, tgt_vocab)

    def forward(self, src, tgt, src_mask, tgt_mask):
        memory = self.encoder(self.pos(self.src_embed(src)), src_mask)
        return self.decoder(self.pos(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)

    def logits(self, src, tgt, src_mask, tgt_mask):
        return self.lm_head(self(src, tgt, src_mask, tgt_mask))


def causal_mask(n):
    return torch.tril(torch.ones(n, n)).unsqueeze(0)


if __name__ == "__main__":
    model = Transformer(100, 100, dim=64, n_heads=4, n_layers=2, ffn_mult=4)
    src, tgt = torch.randint(0, 100, (2, 10)), torch.randint(0, 100, (2, 8))
    print(model.logits(src, tgt, torch.ones(2, 1, 10), causal_mask(8)).shape)
