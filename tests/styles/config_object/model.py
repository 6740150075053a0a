"""Embeddings, masks and the whole model."""
import math

import torch
import torch.nn as nn

from .config import TransformerConfig
from .layers import Decoder, Encoder


def padding_mask(tokens, pad_id=0):
    """(batch, 1, len): True at the real tokens, which every query may attend to."""
    return (tokens != pad_id).unsqueeze(1)


def causal_mask(size, device=None):
    """(1, size, size): True where the key is not after the query."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril().unsqueeze(0)


class Embeddings(nn.Module):
    """Token vectors scaled by sqrt(d_embed) plus learned position vectors, then dropout."""

    def __init__(self, config: TransformerConfig, vocab_size: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, config.d_embed)
        self.positions = nn.Embedding(config.max_len, config.d_embed)
        self.drop = nn.Dropout(config.dropout)
        self.scale = math.sqrt(config.d_embed)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        return self.drop(self.tokens(tokens) * self.scale + self.positions(positions))


class Seq2SeqTransformer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.src_embedding = Embeddings(config, config.src_vocab_size)
        self.tgt_embedding = Embeddings(config, config.tgt_vocab_size)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.lm_head = nn.Linear(config.d_embed, config.tgt_vocab_size)

    def encode(self, src, src_mask=None):
        return self.encoder(self.src_embedding(src), src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return self.decoder(self.tgt_embedding(tgt), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        """Logits over the target vocabulary; the masks default to the source padding and the causal mask."""
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        if tgt_mask is None:
            tgt_mask = padding_mask(tgt, self.config.pad_id) & causal_mask(tgt.size(1), tgt.device)
        memory = self.encode(src, src_mask)
        return self.lm_head(self.decode(tgt, memory, src_mask, tgt_mask))
