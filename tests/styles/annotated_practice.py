"""An encoder-decoder Transformer in the practice form: every sub-layer is wrapped pre-norm, each stack ends with a
norm of its own, the norm divides by the unbiased std plus eps, and the attention weights get dropout. Blocks are
built once by a builder function and deep-copied into the stacks."""
import math
from copy import deepcopy

import torch
import torch.nn as nn
import torch.nn.functional as F


class FeatureNorm(nn.Module):
    """Normalises the last axis: gain * (x - mean) / (std + eps) + shift, std being torch's unbiased one."""

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(features))
        self.shift = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        centred = x - x.mean(dim=-1, keepdim=True)
        spread = x.std(dim=-1, keepdim=True)
        return self.gain * centred / (spread + self.eps) + self.shift


class PreNormResidual(nn.Module):
    """x + Dropout(f(Norm(x))) for whatever sub-layer f is handed to forward."""

    def __init__(self, features, dropout):
        super().__init__()
        self.norm = FeatureNorm(features)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, step):
        return x + self.drop(step(self.norm(x)))


def attend(query, key, value, mask=None, dropout=None):
    """softmax(Q K^T / sqrt(d_k)) V; a mask holds 1 where a key may be seen."""
    width = query.shape[-1]
    scores = torch.einsum("...qd,...kd->...qk", query, key) * (1.0 / math.sqrt(width))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = scores.softmax(dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return torch.einsum("...qk,...kd->...qd", weights, value), weights


class HeadedAttention(nn.Module):
    def __init__(self, heads, d_model, dropout=0.1):
        super().__init__()
        assert d_model % heads == 0
        self.heads, self.d_head = heads, d_model // heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)
        self.weight_drop = nn.Dropout(dropout)
        self.last_weights = None

    def _split(self, x):
        n, t, _ = x.shape
        return x.view(n, t, self.heads, self.d_head).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)
        q = self._split(self.q_proj(query))
        k = self._split(self.k_proj(key))
        v = self._split(self.v_proj(value))
        mixed, self.last_weights = attend(q, k, v, mask=mask, dropout=self.weight_drop)
        n, _, t, _ = mixed.shape
        merged = mixed.transpose(1, 2).contiguous().view(n, t, self.heads * self.d_head)
        return self.o_proj(merged)


class TwoLayerFFN(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.inner = nn.Linear(d_model, d_ff)
        self.outer = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.outer(F.relu(self.inner(x)))


class TokenEmbedding(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.table = nn.Embedding(vocab, d_model)
        self.scale = math.sqrt(d_model)

    def forward(self, tokens):
        return self.table(tokens) * self.scale


class SinusoidalPositions(nn.Module):
    def __init__(self, d_model, dropout, max_len=5000):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        position = torch.arange(max_len, dtype=torch.float32)[:, None]
        inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(position * inv_freq)
        table[:, 1::2] = torch.cos(position * inv_freq)
        self.register_buffer("table", table[None])

    def forward(self, x):
        return self.drop(x + self.table[:, :x.shape[1]])


class EncoderBlock(nn.Module):
    def __init__(self, size, self_attn, feed_forward, dropout):
        super().__init__()
        self.size = size
        self.self_attn, self.feed_forward = self_attn, feed_forward
        self.attn_step = PreNormResidual(size, dropout)
        self.ffn_step = PreNormResidual(size, dropout)

    def forward(self, x, mask):
        x = self.attn_step(x, lambda h: self.self_attn(h, h, h, mask))
        return self.ffn_step(x, self.feed_forward)


class DecoderBlock(nn.Module):
    def __init__(self, size, self_attn, cross_attn, feed_forward, dropout):
        super().__init__()
        self.size = size
        self.self_attn, self.cross_attn, self.feed_forward = self_attn, cross_attn, feed_forward
        self.self_step = PreNormResidual(size, dropout)
        self.cross_step = PreNormResidual(size, dropout)
        self.ffn_step = PreNormResidual(size, dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.self_step(x, lambda h: self.self_attn(h, h, h, tgt_mask))
        x = self.cross_step(x, lambda h: self.cross_attn(h, memory, memory, src_mask))
        return self.ffn_step(x, self.feed_forward)


class EncoderStack(nn.Module):
    """n deep copies of one block, then the closing norm a pre-norm stack needs."""

    def __init__(self, block, n):
        super().__init__()
        self.blocks = nn.ModuleList(deepcopy(block) for _ in range(n))
        self.final_norm = FeatureNorm(block.size)

    def forward(self, x, mask):
        for block in self.blocks:
            x = block(x, mask)
        return self.final_norm(x)


class DecoderStack(nn.Module):
    def __init__(self, block, n):
        super().__init__()
        self.blocks = nn.ModuleList(deepcopy(block) for _ in range(n))
        self.final_norm = FeatureNorm(block.size)

    def forward(self, x, memory, src_mask, tgt_mask):
        for block in self.blocks:
            x = block(x, memory, src_mask, tgt_mask)
        return self.final_norm(x)


class VocabProjection(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, x):
        return F.log_softmax(self.proj(x), dim=-1)


def causal_mask(size):
    """(1, size, size), True where query i may look at key j, i.e. j <= i."""
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool))


class TranslationModel(nn.Module):
    """Encodes the source, decodes the target against it; the caller applies `project` to get log-probabilities."""

    def __init__(self, encoder, decoder, src_input, tgt_input, project):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.src_input, self.tgt_input = src_input, tgt_input
        self.project = project

    def encode(self, src, src_mask):
        return self.encoder(self.src_input(src), src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.decoder(self.tgt_input(tgt), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask, tgt_mask):
        memory = self.encode(src, src_mask)
        return self.decode(memory, src_mask, tgt, tgt_mask)


def build_transformer(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1):
    """Builds one attention and one feed-forward prototype; every block gets deep copies of them."""
    attn_proto = HeadedAttention(h, d_model, dropout)
    ffn_proto = TwoLayerFFN(d_model, d_ff)
    enc_block = EncoderBlock(d_model, deepcopy(attn_proto), deepcopy(ffn_proto), dropout)
    dec_block = DecoderBlock(d_model, deepcopy(attn_proto), deepcopy(attn_proto), deepcopy(ffn_proto), dropout)
    model = TranslationModel(
        encoder=EncoderStack(enc_block, N),
        decoder=DecoderStack(dec_block, N),
        src_input=nn.Sequential(TokenEmbedding(d_model, src_vocab), SinusoidalPositions(d_model, dropout)),
        tgt_input=nn.Sequential(TokenEmbedding(d_model, tgt_vocab), SinusoidalPositions(d_model, dropout)),
        project=VocabProjection(d_model, tgt_vocab),
    )
    for weight in model.parameters():
        if weight.dim() > 1:
            nn.init.xavier_uniform_(weight)
    return model
