"""Attention, feed-forward network, layers and stacks; each block reads what it needs from the config."""
import math

import torch
import torch.nn as nn

from .config import TransformerConfig


class MultiHeadAttention(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        assert config.d_embed % config.n_heads == 0
        self.n_heads = config.n_heads
        self.d_head = config.d_head
        self.query = nn.Linear(config.d_embed, config.d_embed, bias=config.bias)
        self.key = nn.Linear(config.d_embed, config.d_embed, bias=config.bias)
        self.value = nn.Linear(config.d_embed, config.d_embed, bias=config.bias)
        self.out = nn.Linear(config.d_embed, config.d_embed, bias=config.bias)
        self.scale = 1.0 / math.sqrt(config.d_embed)

    def _split(self, x):
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, x, context, mask=None):
        """Queries from ``x``, keys and values from ``context``; ``mask`` is True where a key may be seen and
        broadcasts to (batch, len_q, len_k)."""
        q, k, v = self._split(self.query(x)), self._split(self.key(context)), self._split(self.value(context))
        scores = q @ k.transpose(-2, -1) * self.scale
        if mask is not None:
            scores = scores.masked_fill(~mask.bool().unsqueeze(1), float("-inf"))
        weights = scores.softmax(dim=-1)
        heads = (weights @ v).transpose(1, 2).reshape(x.size(0), x.size(1), -1)
        return self.out(heads)


class FeedForward(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.up = nn.Linear(config.d_embed, config.d_ff)
        self.act = nn.GELU()
        self.down = nn.Linear(config.d_ff, config.d_embed)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


class Residual(nn.Module):
    """Holds the norm and dropout of one sub-layer; the config says on which side of the residual the norm sits."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.norm = nn.LayerNorm(config.d_embed, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.dropout)
        self.norm_first = config.layer_norm_first

    def forward(self, x, fn):
        if self.norm_first:
            return x + self.drop(fn(self.norm(x)))
        return self.norm(x + self.drop(fn(x)))


class EncoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.attention = MultiHeadAttention(config)
        self.feed_forward = FeedForward(config)
        self.attention_residual = Residual(config)
        self.feed_forward_residual = Residual(config)

    def forward(self, x, src_mask=None):
        x = self.attention_residual(x, lambda y: self.attention(y, y, src_mask))
        return self.feed_forward_residual(x, self.feed_forward)


class DecoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attention = MultiHeadAttention(config)
        self.cross_attention = MultiHeadAttention(config)
        self.feed_forward = FeedForward(config)
        self.self_residual = Residual(config)
        self.cross_residual = Residual(config)
        self.feed_forward_residual = Residual(config)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.self_residual(x, lambda y: self.self_attention(y, y, tgt_mask))
        x = self.cross_residual(x, lambda y: self.cross_attention(y, memory, src_mask))
        return self.feed_forward_residual(x, self.feed_forward)


class Encoder(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(config) for _ in range(config.n_layers)])
        self.final_norm = nn.LayerNorm(config.d_embed, eps=config.layer_norm_eps) if config.layer_norm_first else None

    def forward(self, x, src_mask=None):
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.final_norm(x) if self.final_norm is not None else x


class Decoder(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(config) for _ in range(config.n_layers)])
        self.final_norm = nn.LayerNorm(config.d_embed, eps=config.layer_norm_eps) if config.layer_norm_first else None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.final_norm(x) if self.final_norm is not None else x
