"""A translation Transformer on torch.nn.MultiheadAttention, in torch's default layout: every tensor is sequence
first, (length, batch, d_model), and token ids are (length, batch). Masks follow torch's conventions: a
key_padding_mask (batch, length) is True where a key is padding (blocked), an attn_mask (L, S) is a float mask added
to the scores (0 = may attend, -inf = blocked)."""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def generate_square_subsequent_mask(sz, device=None):
    """(sz, sz) float mask: 0 on and below the diagonal, -inf above it (a position attends to itself and before)."""
    mask = torch.triu(torch.ones(sz, sz, device=device), diagonal=1).bool()
    return torch.zeros(sz, sz, device=device).masked_fill(mask, float("-inf"))


def make_key_padding_mask(tokens, pad_idx):
    """(batch, length) key_padding_mask from (length, batch) token ids."""
    return (tokens != pad_idx).transpose(0, 1)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        """x: (length, batch, d_model)"""
        return self.dropout(x + self.pe[:x.size(0)])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, emb_size):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, src, src_mask=None, src_key_padding_mask=None):
        src2 = self.self_attn(src, src, src, attn_mask=src_mask, key_padding_mask=src_key_padding_mask,
                              need_weights=False)[0]
        src = self.norm1(src + self.dropout1(src2))
        src2 = self.linear2(self.dropout(F.relu(self.linear1(src))))
        return self.norm2(src + self.dropout2(src2))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.multihead_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None):
        tgt2 = self.self_attn(tgt, tgt, tgt, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask,
                              need_weights=False)[0]
        tgt = self.norm1(tgt + self.dropout1(tgt2))
        tgt2 = self.multihead_attn(tgt, memory, memory, attn_mask=memory_mask,
                                   key_padding_mask=memory_key_padding_mask, need_weights=False)[0]
        tgt = self.norm2(tgt + self.dropout2(tgt2))
        tgt2 = self.linear2(self.dropout(F.relu(self.linear1(tgt))))
        return self.norm3(tgt + self.dropout3(tgt2))


class Encoder(nn.Module):
    def __init__(self, encoder_layer, num_layers):
        super().__init__()
        self.layers = nn.ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])

    def forward(self, src, mask=None, src_key_padding_mask=None):
        output = src
        for mod in self.layers:
            output = mod(output, src_mask=mask, src_key_padding_mask=src_key_padding_mask)
        return output


class Decoder(nn.Module):
    def __init__(self, decoder_layer, num_layers):
        super().__init__()
        self.layers = nn.ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None):
        output = tgt
        for mod in self.layers:
            output = mod(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                         tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask)
        return output


class Seq2SeqTransformer(nn.Module):
    """Token ids (length, batch) in, log-probabilities (length, batch, tgt_vocab_size) out."""

    def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size, tgt_vocab_size,
                 dim_feedforward=512, dropout=0.1, pad_idx=1):
        super().__init__()
        self.pad_idx = pad_idx
        self.encoder = Encoder(EncoderLayer(emb_size, nhead, dim_feedforward, dropout), num_encoder_layers)
        self.decoder = Decoder(DecoderLayer(emb_size, nhead, dim_feedforward, dropout), num_decoder_layers)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src, src_padding_mask):
        return self.encoder(self.positional_encoding(self.src_tok_emb(src)), src_key_padding_mask=src_padding_mask)

    def decode(self, tgt, memory, tgt_mask, src_padding_mask):
        return self.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask=tgt_mask,
                            memory_key_padding_mask=src_padding_mask)

    def forward(self, src, tgt):
        src_padding_mask = make_key_padding_mask(src, self.pad_idx)
        # greedy decoding feeds the target one token at a time, so the look-ahead mask is only needed in training
        tgt_mask = generate_square_subsequent_mask(tgt.size(0), tgt.device) if self.training else None
        memory = self.encode(src, src_padding_mask)
        outs = self.decode(tgt, memory, tgt_mask, src_padding_mask)
        return F.log_softmax(self.generator(outs), dim=-1)
