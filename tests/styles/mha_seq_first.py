"""Style study: a translator whose layers sit on torch.nn.MultiheadAttention and keep torch's default layout.

Every activation is (length, batch, d_model) and token ids are (length, batch). Masks follow torch's conventions:
a key_padding_mask is (batch, length) with True at the keys to block, and an attention mask is a float (L, L)
tensor added to the scores (0 where allowed, -inf where not).
"""
import copy
import math

import torch
import torch.nn as nn


def causal_mask(length):
    """(length, length) additive mask: -inf strictly above the diagonal, so position t sees positions <= t."""
    upper = torch.ones(length, length, dtype=torch.bool).triu(1)
    return torch.zeros(length, length).masked_fill(upper, -math.inf)


def make_padding_mask(tokens, pad_id):
    """torch's key_padding_mask, (batch, length), for (length, batch) token ids."""
    return (tokens != pad_id).t()


class SinusoidTable(nn.Module):
    """Fixed sin/cos encodings, interleaved feature by feature, added to (length, batch, d_model) inputs."""

    def __init__(self, d_model, dropout=0.1, max_len=1000):
        super().__init__()
        positions = torch.arange(max_len, dtype=torch.float32)[:, None]
        inverse_wavelengths = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
        angles = positions * inverse_wavelengths[None, :]
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(max_len, d_model)
        self.register_buffer("table", table[:, None, :])
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(x + self.table[: x.shape[0]])


class ScaledEmbedding(nn.Module):
    """A lookup table whose rows come out multiplied by sqrt(d_model)."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.rows, self.scale = nn.Embedding(vocab_size, d_model), d_model ** 0.5

    def forward(self, ids):
        return self.scale * self.rows(ids)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1):
        super().__init__()
        self.attend = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.expand, self.contract = nn.Linear(d_model, dim_feedforward), nn.Linear(dim_feedforward, d_model)
        self.after_attention, self.after_ffn = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, src, src_mask=None, src_key_padding_mask=None):
        attended, _ = self.attend(src, src, src, attn_mask=src_mask, key_padding_mask=src_key_padding_mask,
                                  need_weights=False)
        src = self.after_attention(src + self.drop(attended))
        hidden = self.drop(torch.relu(self.expand(src)))
        return self.after_ffn(src + self.drop(self.contract(hidden)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1):
        super().__init__()
        self.attend_self = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.attend_memory = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.expand, self.contract = nn.Linear(d_model, dim_feedforward), nn.Linear(dim_feedforward, d_model)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.drop = nn.Dropout(dropout)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None):
        seen, _ = self.attend_self(tgt, tgt, tgt, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask,
                                   need_weights=False)
        tgt = self.norms[0](tgt + self.drop(seen))
        read, _ = self.attend_memory(tgt, memory, memory, attn_mask=memory_mask,
                                     key_padding_mask=memory_key_padding_mask, need_weights=False)
        tgt = self.norms[1](tgt + self.drop(read))
        hidden = self.drop(torch.relu(self.expand(tgt)))
        return self.norms[2](tgt + self.drop(self.contract(hidden)))


class Encoder(nn.Module):
    def __init__(self, layer, num_layers):
        super().__init__()
        self.blocks = nn.ModuleList(copy.deepcopy(layer) for _ in range(num_layers))

    def forward(self, src, mask=None, src_key_padding_mask=None):
        for block in self.blocks:
            src = block(src, src_mask=mask, src_key_padding_mask=src_key_padding_mask)
        return src


class Decoder(nn.Module):
    def __init__(self, layer, num_layers):
        super().__init__()
        self.blocks = nn.ModuleList(copy.deepcopy(layer) for _ in range(num_layers))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None):
        for block in self.blocks:
            tgt = block(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask)
        return tgt


class SeqFirstTranslator(nn.Module):
    """(length, batch) source and target ids in, (length, batch, tgt_vocab) log-probabilities out."""

    def __init__(self, num_layers, d_model, nhead, src_vocab_size, tgt_vocab_size, dim_feedforward=512,
                 dropout=0.1, pad_id=1):
        super().__init__()
        self.pad_id = pad_id
        self.encoder = Encoder(EncoderLayer(d_model, nhead, dim_feedforward, dropout), num_layers)
        self.decoder = Decoder(DecoderLayer(d_model, nhead, dim_feedforward, dropout), num_layers)
        self.src_lookup = ScaledEmbedding(src_vocab_size, d_model)
        self.tgt_lookup = ScaledEmbedding(tgt_vocab_size, d_model)
        self.positions = SinusoidTable(d_model, dropout)
        self.to_vocab = nn.Linear(d_model, tgt_vocab_size)

    def forward(self, src, tgt):
        blocked_source = make_padding_mask(src, self.pad_id)
        # the look-ahead mask is left to training: at inference the target grows one token per step
        look_ahead = causal_mask(tgt.shape[0]).to(tgt.device) if self.training else None
        memory = self.encoder(self.positions(self.src_lookup(src)), src_key_padding_mask=blocked_source)
        out = self.decoder(self.positions(self.tgt_lookup(tgt)), memory, tgt_mask=look_ahead,
                           memory_key_padding_mask=blocked_source)
        return torch.log_softmax(self.to_vocab(out), dim=-1)
