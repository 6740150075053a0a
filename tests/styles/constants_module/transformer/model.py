"""Encoder, decoder and the encoder-decoder model, all at the sizes of transformer.constants."""
import math

import torch
from torch import nn

from transformer import constants as C
from transformer.blocks import AddNorm, MultiHeadedAttention, PositionwiseFeedForward, SinusoidalPositions


class EncoderBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = MultiHeadedAttention()
        self.feed_forward = PositionwiseFeedForward()
        self.residual = nn.ModuleList([AddNorm(), AddNorm()])

    def forward(self, x, src_mask):
        x = self.residual[0](x, lambda y: self.self_attn(y, y, y, src_mask))
        return self.residual[1](x, self.feed_forward)


class DecoderBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = MultiHeadedAttention()
        self.src_attn = MultiHeadedAttention()
        self.feed_forward = PositionwiseFeedForward()
        self.residual = nn.ModuleList([AddNorm(), AddNorm(), AddNorm()])

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.residual[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.residual[1](x, lambda y: self.src_attn(y, memory, memory, src_mask))
        return self.residual[2](x, self.feed_forward)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([EncoderBlock() for _ in range(C.N_LAYERS)])

    def forward(self, x, src_mask):
        for block in self.blocks:
            x = block(x, src_mask)
        return x


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([DecoderBlock() for _ in range(C.N_LAYERS)])

    def forward(self, x, memory, src_mask, tgt_mask):
        for block in self.blocks:
            x = block(x, memory, src_mask, tgt_mask)
        return x


def make_pad_mask(tokens):
    """(batch, 1, len), True where the key is a real token."""
    return (tokens != C.PAD_ID).unsqueeze(-2)


def make_causal_mask(size):
    """(1, size, size), True where the query may see the key: itself and the positions before it."""
    return torch.ones(1, size, size, dtype=torch.bool).tril()


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_embedding = nn.Embedding(C.SRC_VOCAB_SIZE, C.D_MODEL)
        self.tgt_embedding = nn.Embedding(C.TGT_VOCAB_SIZE, C.D_MODEL)
        self.positions = SinusoidalPositions()
        self.encoder = Encoder()
        self.decoder = Decoder()
        self.generator = nn.Linear(C.D_MODEL, C.TGT_VOCAB_SIZE)

    def encode(self, src, src_mask):
        return self.encoder(self.positions(self.src_embedding(src) * math.sqrt(C.D_MODEL)), src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        x = self.positions(self.tgt_embedding(tgt) * math.sqrt(C.D_MODEL))
        return self.decoder(x, memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.generator(self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask))
