"""The encoder, the decoder and the whole model, with its masks."""
import math

import torch
import torch.nn as nn

from seqformer.layers import DecoderLayer, EncoderLayer


def get_pad_mask(seq, pad_idx):
    """(batch, 1, len): True where a key may be attended to."""
    return (seq != pad_idx).unsqueeze(-2)


def get_subsequent_mask(seq):
    """(1, len, len): True on and below the diagonal."""
    len_s = seq.size(1)
    ones = torch.ones((1, len_s, len_s), device=seq.device, dtype=torch.bool)
    return torch.tril(ones)


class PositionalEncoding(nn.Module):
    def __init__(self, d_hid, n_position=200):
        super().__init__()
        position = torch.arange(n_position, dtype=torch.float).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_hid, 2, dtype=torch.float) * (-math.log(10000.0) / d_hid))
        table = torch.zeros(n_position, d_hid)
        table[:, 0::2] = torch.sin(position * div)
        table[:, 1::2] = torch.cos(position * div)
        self.register_buffer("pos_table", table.unsqueeze(0))

    def forward(self, x):
        return x + self.pos_table[:, :x.size(1)]


class Encoder(nn.Module):
    def __init__(self, n_src_vocab, d_word_vec, n_layers, n_head, d_k, d_v, d_model, d_inner, pad_idx,
                 dropout=0.1, n_position=200):
        super().__init__()
        self.d_model = d_model
        self.src_word_emb = nn.Embedding(n_src_vocab, d_word_vec, padding_idx=pad_idx)
        self.position_enc = PositionalEncoding(d_word_vec, n_position=n_position)
        self.dropout = nn.Dropout(dropout)
        self.layer_stack = nn.ModuleList([
            EncoderLayer(d_model, d_inner, n_head, d_k, d_v, dropout=dropout) for _ in range(n_layers)])

    def forward(self, src_seq, src_mask):
        enc_output = self.src_word_emb(src_seq) * math.sqrt(self.d_model)
        enc_output = self.dropout(self.position_enc(enc_output))
        for enc_layer in self.layer_stack:
            enc_output, _ = enc_layer(enc_output, slf_attn_mask=src_mask)
        return enc_output,


class Decoder(nn.Module):
    def __init__(self, n_trg_vocab, d_word_vec, n_layers, n_head, d_k, d_v, d_model, d_inner, pad_idx,
                 dropout=0.1, n_position=200):
        super().__init__()
        self.d_model = d_model
        self.trg_word_emb = nn.Embedding(n_trg_vocab, d_word_vec, padding_idx=pad_idx)
        self.position_enc = PositionalEncoding(d_word_vec, n_position=n_position)
        self.dropout = nn.Dropout(dropout)
        self.layer_stack = nn.ModuleList([
            DecoderLayer(d_model, d_inner, n_head, d_k, d_v, dropout=dropout) for _ in range(n_layers)])

    def forward(self, trg_seq, trg_mask, enc_output, src_mask):
        dec_output = self.trg_word_emb(trg_seq) * math.sqrt(self.d_model)
        dec_output = self.dropout(self.position_enc(dec_output))
        for dec_layer in self.layer_stack:
            dec_output, _, _ = dec_layer(dec_output, enc_output, slf_attn_mask=trg_mask, dec_enc_attn_mask=src_mask)
        return dec_output,


class Transformer(nn.Module):
    """The target embedding and the pre-softmax projection share one matrix; with one joint vocabulary
    (emb_src_trg_weight_sharing) the source embedding shares it too."""

    def __init__(self, n_src_vocab, n_trg_vocab, src_pad_idx, trg_pad_idx, d_word_vec=512, d_model=512,
                 d_inner=2048, n_layers=6, n_head=8, d_k=64, d_v=64, dropout=0.1, n_position=200,
                 emb_src_trg_weight_sharing=False):
        super().__init__()
        assert d_model == d_word_vec, "the residual connections need d_model == d_word_vec"
        self.src_pad_idx, self.trg_pad_idx = src_pad_idx, trg_pad_idx
        self.encoder = Encoder(n_src_vocab, d_word_vec, n_layers, n_head, d_k, d_v, d_model, d_inner,
                               src_pad_idx, dropout=dropout, n_position=n_position)
        self.decoder = Decoder(n_trg_vocab, d_word_vec, n_layers, n_head, d_k, d_v, d_model, d_inner,
                               trg_pad_idx, dropout=dropout, n_position=n_position)
        self.trg_word_prj = nn.Linear(d_model, n_trg_vocab, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        self.trg_word_prj.weight = self.decoder.trg_word_emb.weight
        if emb_src_trg_weight_sharing:
            assert n_src_vocab == n_trg_vocab, "sharing the source embedding needs one joint vocabulary"
            self.encoder.src_word_emb.weight = self.decoder.trg_word_emb.weight

    def forward(self, src_seq, trg_seq):
        src_mask = get_pad_mask(src_seq, self.src_pad_idx)
        trg_mask = get_pad_mask(trg_seq, self.trg_pad_idx) & get_subsequent_mask(trg_seq)
        enc_output, *_ = self.encoder(src_seq, src_mask)
        dec_output, *_ = self.decoder(trg_seq, trg_mask, enc_output, src_mask)
        return torch.log_softmax(self.trg_word_prj(dec_output), dim=-1)
