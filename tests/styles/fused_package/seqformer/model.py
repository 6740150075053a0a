"""The stacks and the whole model; tokens in, log-probabilities out."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from seqformer.layers import DecoderBlock, EncoderBlock
from seqformer.masking import key_padding_mask, no_peek_mask


class SinusoidalEncoding(nn.Module):
    """Adds PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same) to its input."""

    def __init__(self, d_hid, n_position=200):
        super().__init__()
        pos = torch.arange(n_position, dtype=torch.float).unsqueeze(1)
        rates = torch.pow(10000.0, -torch.arange(0, d_hid, 2, dtype=torch.float) / d_hid)
        angles = pos * rates
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(n_position, -1)[:, :d_hid]
        self.register_buffer("table", table.unsqueeze(0))

    def forward(self, x):
        return x + self.table[:, :x.size(1)]


class EncoderStack(nn.Module):
    def __init__(self, n_src_vocab, d_word_vec, n_layers, n_head, d_k, d_v, d_model, d_inner, pad_idx,
                 dropout=0.1, n_position=200):
        super().__init__()
        self.word_emb = nn.Embedding(n_src_vocab, d_word_vec, padding_idx=pad_idx)
        self.positions = SinusoidalEncoding(d_word_vec, n_position=n_position)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, d_inner, n_head, d_k, d_v, dropout=dropout) for _ in range(n_layers))
        self.d_model = d_model

    def forward(self, src_seq, src_mask):
        hidden = self.drop(self.positions(self.word_emb(src_seq) * math.sqrt(self.d_model)))
        for block in self.blocks:
            hidden = block(hidden, slf_attn_mask=src_mask)
        return (hidden,)


class DecoderStack(nn.Module):
    def __init__(self, n_trg_vocab, d_word_vec, n_layers, n_head, d_k, d_v, d_model, d_inner, pad_idx,
                 dropout=0.1, n_position=200):
        super().__init__()
        self.word_emb = nn.Embedding(n_trg_vocab, d_word_vec, padding_idx=pad_idx)
        self.positions = SinusoidalEncoding(d_word_vec, n_position=n_position)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, d_inner, n_head, d_k, d_v, dropout=dropout) for _ in range(n_layers))
        self.d_model = d_model

    def forward(self, trg_seq, trg_mask, enc_output, src_mask):
        hidden = self.drop(self.positions(self.word_emb(trg_seq) * math.sqrt(self.d_model)))
        for block in self.blocks:
            hidden = block(hidden, enc_output, slf_attn_mask=trg_mask, dec_enc_attn_mask=src_mask)
        return (hidden,)


class TransformerSeq2Seq(nn.Module):
    def __init__(self, n_src_vocab, n_trg_vocab, src_pad_idx, trg_pad_idx, d_word_vec=512, d_model=512,
                 d_inner=2048, n_layers=6, n_head=8, d_k=64, d_v=64, dropout=0.1, n_position=200,
                 trg_emb_prj_weight_sharing=True, emb_src_trg_weight_sharing=True):
        super().__init__()
        assert d_model == d_word_vec, "the residual sums need d_model == d_word_vec"
        self.src_pad_idx, self.trg_pad_idx = src_pad_idx, trg_pad_idx
        shape = dict(d_word_vec=d_word_vec, n_layers=n_layers, n_head=n_head, d_k=d_k, d_v=d_v,
                     d_model=d_model, d_inner=d_inner, dropout=dropout, n_position=n_position)
        self.encoder = EncoderStack(n_src_vocab, pad_idx=src_pad_idx, **shape)
        self.decoder = DecoderStack(n_trg_vocab, pad_idx=trg_pad_idx, **shape)
        self.to_vocab = nn.Linear(d_model, n_trg_vocab, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if trg_emb_prj_weight_sharing:
            self.to_vocab.weight = self.decoder.word_emb.weight
        if emb_src_trg_weight_sharing:
            self.encoder.word_emb.weight = self.decoder.word_emb.weight

    def forward(self, src_seq, trg_seq):
        src_mask = key_padding_mask(src_seq, self.src_pad_idx)
        trg_mask = key_padding_mask(trg_seq, self.trg_pad_idx) & no_peek_mask(trg_seq)
        memory, = self.encoder(src_seq, src_mask)
        hidden, = self.decoder(trg_seq, trg_mask, memory, src_mask)
        return F.log_softmax(self.to_vocab(hidden), dim=-1)
