"""An encoder-decoder Transformer in the practice form that tutorials made common.

Every sub-layer is wrapped as ``x + Dropout(Sublayer(Norm(x)))`` (the norm first) and each stack ends with a norm of
its own; the norm divides by the unbiased standard deviation plus a small constant; the attention weights are dropped
out. Blocks are built once by ``make_model`` and handed to the layers, which keep deep copies of them.
"""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def replicate(block, count):
    """``count`` independent deep copies of ``block`` in a ModuleList."""
    return nn.ModuleList([copy.deepcopy(block) for _ in range(count)])


class LayerNorm(nn.Module):
    """Normalises the last axis: gain * (x - mean) / (std + eps) + shift, std being torch's unbiased estimate."""

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(features))
        self.shift = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        centred = x - x.mean(dim=-1, keepdim=True)
        spread = x.std(dim=-1, keepdim=True)
        return self.gain * centred / (spread + self.eps) + self.shift


class ResidualConnection(nn.Module):
    """Wraps one sub-layer: normalise the input, apply the sub-layer, drop out, add the input back."""

    def __init__(self, size, dropout):
        super().__init__()
        self.norm = LayerNorm(size)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return x + self.drop(sublayer(self.norm(x)))


class EncoderLayer(nn.Module):
    """Self-attention, then the position-wise network, each inside a residual connection."""

    def __init__(self, size, self_attn, feed_forward, dropout):
        super().__init__()
        self.size = size
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.residuals = replicate(ResidualConnection(size, dropout), 2)

    def forward(self, x, mask):
        x = self.residuals[0](x, lambda y: self.self_attn(y, y, y, mask))
        return self.residuals[1](x, self.feed_forward)


class Encoder(nn.Module):
    """``n`` copies of one encoder layer, then a closing norm."""

    def __init__(self, layer, n):
        super().__init__()
        self.layers = replicate(layer, n)
        self.norm = LayerNorm(layer.size)

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class DecoderLayer(nn.Module):
    """Masked self-attention, attention over the encoder's output, then the position-wise network."""

    def __init__(self, size, self_attn, src_attn, feed_forward, dropout):
        super().__init__()
        self.size = size
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.residuals = replicate(ResidualConnection(size, dropout), 3)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.residuals[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.residuals[1](x, lambda y: self.src_attn(y, memory, memory, src_mask))
        return self.residuals[2](x, self.feed_forward)


class Decoder(nn.Module):
    """``n`` copies of one decoder layer, then a closing norm."""

    def __init__(self, layer, n):
        super().__init__()
        self.layers = replicate(layer, n)
        self.norm = LayerNorm(layer.size)

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)


def subsequent_mask(size):
    """(1, size, size) booleans, True where a position may look: itself and the positions before it."""
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool))


def scaled_attention(query, key, value, mask=None, dropout=None):
    """softmax(Q K^T / sqrt(d_k)) V; ``mask`` holds 0 where a key must not be seen."""
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = F.softmax(scores, dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return torch.matmul(weights, value), weights


class MultiHeadedAttention(nn.Module):
    """``h`` heads of width d_model / h, projected in and out by four d_model x d_model linear maps."""

    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        assert d_model % h == 0
        self.h = h
        self.d_k = d_model // h
        self.projections = replicate(nn.Linear(d_model, d_model), 4)
        self.dropout = nn.Dropout(p=dropout)
        self.last_weights = None

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # the same mask for every head
        batch = query.size(0)
        q, k, v = [proj(t).view(batch, -1, self.h, self.d_k).transpose(1, 2)
                   for proj, t in zip(self.projections, (query, key, value))]
        out, self.last_weights = scaled_attention(q, k, v, mask=mask, dropout=self.dropout)
        out = out.transpose(1, 2).contiguous().view(batch, -1, self.h * self.d_k)
        return self.projections[3](out)


class PositionwiseFFN(nn.Module):
    """max(0, x W1 + b1) W2 + b2 at every position."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.inner = nn.Linear(d_model, d_ff)
        self.outer = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.outer(F.relu(self.inner(x)))


class Embeddings(nn.Module):
    """Token lookup scaled by sqrt(d_model)."""

    def __init__(self, d_model, vocab):
        super().__init__()
        self.table = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.table(x) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    """Adds the fixed sine/cosine table to the embeddings, then drops out the sum."""

    def __init__(self, d_model, dropout, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len, dtype=torch.float).unsqueeze(1)
        inverse_wavelength = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float) / d_model)
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(position * inverse_wavelength)
        table[:, 1::2] = torch.cos(position * inverse_wavelength)
        self.register_buffer("table", table.unsqueeze(0))

    def forward(self, x):
        return self.dropout(x + self.table[:, :x.size(1)])


class Generator(nn.Module):
    """Linear map to the vocabulary followed by a log-softmax."""

    def __init__(self, d_model, vocab):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, x):
        return F.log_softmax(self.proj(x), dim=-1)


class EncoderDecoder(nn.Module):
    """Encoder, decoder, the embedding pipelines of both sides and the generator (applied by the caller)."""

    def __init__(self, encoder, decoder, src_embed, tgt_embed, generator):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator

    def encode(self, src, src_mask):
        return self.encoder(self.src_embed(src), src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)


def make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1):
    """Build the model from one prototype of each block; the layers deep-copy them."""
    attn = MultiHeadedAttention(h, d_model, dropout)
    ffn = PositionwiseFFN(d_model, d_ff)
    position = PositionalEncoding(d_model, dropout)
    model = EncoderDecoder(
        Encoder(EncoderLayer(d_model, copy.deepcopy(attn), copy.deepcopy(ffn), dropout), N),
        Decoder(DecoderLayer(d_model, copy.deepcopy(attn), copy.deepcopy(attn), copy.deepcopy(ffn), dropout), N),
        nn.Sequential(Embeddings(d_model, src_vocab), copy.deepcopy(position)),
        nn.Sequential(Embeddings(d_model, tgt_vocab), copy.deepcopy(position)),
        Generator(d_model, tgt_vocab),
    )
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model
