"""A translation model around torch.nn.Transformer, in torch's own conventions.

Tokens are (seq_len, batch) as nn.Transformer expects with its default batch_first=False; every hidden state is
(seq_len, batch, d_model). Masks are torch's: a square attention mask for the target, float with -inf above the
diagonal (what nn.Transformer.generate_square_subsequent_mask makes), and key-padding masks (batch, seq_len), True at
the padding.
"""
import math

import torch
import torch.nn as nn


class TokenEmbedding(nn.Module):
    """Looks tokens up and multiplies them by sqrt(emb_size)."""

    def __init__(self, vocab_size, emb_size):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class PositionalEncoding(nn.Module):
    """Adds the sine/cosine table to (seq_len, batch, emb_size) inputs, then dropout."""

    def __init__(self, emb_size, dropout, maxlen=5000):
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2, dtype=torch.float) * math.log(10000.0) / emb_size)
        pos = torch.arange(maxlen, dtype=torch.float).unsqueeze(1)
        table = torch.zeros(maxlen, emb_size)
        table[:, 0::2] = torch.sin(pos * den)
        table[:, 1::2] = torch.cos(pos * den)
        self.register_buffer("table", table.unsqueeze(1))   # (maxlen, 1, emb_size): broadcasts over the batch
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.table[:x.size(0)])


def generate_square_subsequent_mask(size, device=None):
    """(size, size) float mask: 0 where a query may look, -inf at the later positions."""
    blocked = torch.ones(size, size, dtype=torch.bool, device=device).triu(diagonal=1)
    return torch.zeros(size, size, device=device).masked_fill(blocked, float("-inf"))


def create_padding_mask(tokens, pad_idx):
    """(batch, seq_len) from (seq_len, batch) tokens: True at the padding."""
    return (tokens == pad_idx).transpose(0, 1)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size, tgt_vocab_size,
                 dim_feedforward=512, dropout=0.1):
        super().__init__()
        self.transformer = nn.Transformer(d_model=emb_size, nhead=nhead, num_encoder_layers=num_encoder_layers,
                                          num_decoder_layers=num_decoder_layers, dim_feedforward=dim_feedforward,
                                          dropout=dropout)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, src_padding_mask=None, tgt_padding_mask=None,
                memory_key_padding_mask=None):
        """Logits (tgt_len, batch, tgt_vocab_size)."""
        if tgt_mask is None:
            tgt_mask = generate_square_subsequent_mask(tgt.size(0), tgt.device)
        if memory_key_padding_mask is None:
            memory_key_padding_mask = src_padding_mask
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(tgt))
        outs = self.transformer(src_emb, tgt_emb, src_mask=src_mask, tgt_mask=tgt_mask,
                                src_key_padding_mask=src_padding_mask, tgt_key_padding_mask=tgt_padding_mask,
                                memory_key_padding_mask=memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src, src_mask=None, src_padding_mask=None):
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), mask=src_mask,
                                        src_key_padding_mask=src_padding_mask)

    def decode(self, tgt, memory, tgt_mask, memory_key_padding_mask=None):
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask=tgt_mask,
                                        memory_key_padding_mask=memory_key_padding_mask)


def greedy_decode(model, src, max_len, start_symbol, end_symbol, pad_idx=0):
    """Decode one batch of (seq_len, batch) sources token by token."""
    src_padding_mask = create_padding_mask(src, pad_idx)
    memory = model.encode(src, src_padding_mask=src_padding_mask)
    ys = torch.full((1, src.size(1)), start_symbol, dtype=torch.long, device=src.device)
    for _ in range(max_len - 1):
        tgt_mask = generate_square_subsequent_mask(ys.size(0), src.device)
        out = model.decode(ys, memory, tgt_mask, memory_key_padding_mask=src_padding_mask)
        next_word = model.generator(out[-1]).argmax(dim=-1)
        ys = torch.cat([ys, next_word.unsqueeze(0)], dim=0)
        if (next_word == end_symbol).all():
            break
    return ys
