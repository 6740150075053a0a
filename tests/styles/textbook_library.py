"""Companion code of a (fictional) deep-learning textbook, chapter 9 and 10: sequence-to-sequence models, from a GRU
encoder-decoder with attention to the Transformer. Every generation of a block is kept, as the chapters build them.

Attention here is stateful: ``init_keys(keys)`` projects and stores the keys (and values) once, and ``forward(query,
mask)`` attends to them. The decoder is told its encoder states the same way (``decoder.init_keys(states)``)."""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------------------------------------------
# Chapter 9: recurrent encoder-decoder, then narrow (single-head) attention
# ----------------------------------------------------------------------------------------------------------------

class Encoder(nn.Module):
    def __init__(self, n_features, hidden_dim):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.basic_rnn = nn.GRU(n_features, hidden_dim, batch_first=True)

    def forward(self, X):
        rnn_out, self.hidden = self.basic_rnn(X)
        return rnn_out  # N, L, H


class Attention(nn.Module):
    """Scaled dot-product attention of one head over keys stored by init_keys."""

    def __init__(self, hidden_dim, input_dim=None, proj_values=False):
        super().__init__()
        self.d_k = hidden_dim
        self.input_dim = hidden_dim if input_dim is None else input_dim
        self.proj_values = proj_values
        self.linear_query = nn.Linear(self.input_dim, hidden_dim)
        self.linear_key = nn.Linear(self.input_dim, hidden_dim)
        self.linear_value = nn.Linear(self.input_dim, hidden_dim)
        self.alphas = None

    def init_keys(self, keys):
        self.keys = keys
        self.proj_keys = self.linear_key(self.keys)
        self.values = self.linear_value(self.keys) if self.proj_values else self.keys

    def score_function(self, query):
        proj_query = self.linear_query(query)
        return torch.bmm(proj_query, self.proj_keys.permute(0, 2, 1)) / np.sqrt(self.d_k)

    def forward(self, query, mask=None):
        scores = self.score_function(query)  # N, 1, L
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        alphas = F.softmax(scores, dim=-1)
        self.alphas = alphas.detach()
        return torch.bmm(alphas, self.values)


class Decoder(nn.Module):
    """A GRU decoder that reads one step at a time, with attention over the encoder's states."""

    def __init__(self, n_features, hidden_dim):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.n_features = n_features
        self.hidden = None
        self.basic_rnn = nn.GRU(n_features, hidden_dim, batch_first=True)
        self.attn = Attention(hidden_dim)
        self.regression = nn.Linear(2 * hidden_dim, n_features)

    def init_hidden(self, hidden_seq):
        self.attn.init_keys(hidden_seq)
        self.hidden = hidden_seq[:, -1:].permute(1, 0, 2)  # 1, N, H

    def forward(self, X, mask=None):
        batch_first_output, self.hidden = self.basic_rnn(X, self.hidden)
        query = batch_first_output[:, -1:]
        context = self.attn(query, mask=mask)
        return self.regression(torch.cat([context, query], dim=-1)).view(-1, 1, self.n_features)


class EncoderDecoder(nn.Module):
    def __init__(self, encoder, decoder, input_len, target_len, teacher_forcing_prob=0.5):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.input_len, self.target_len = input_len, target_len
        self.teacher_forcing_prob = teacher_forcing_prob

    def forward(self, X):
        source_seq = X[:, :self.input_len, :]
        target_seq = X[:, self.input_len:, :]
        self.decoder.init_hidden(self.encoder(source_seq))
        dec_inputs = source_seq[:, -1:, :]
        outputs = []
        for i in range(self.target_len):
            out = self.decoder(dec_inputs)
            outputs.append(out)
            teacher = self.training and torch.rand(1).item() < self.teacher_forcing_prob
            dec_inputs = target_seq[:, i:i + 1, :] if teacher else out
        return torch.cat(outputs, dim=1)


# ----------------------------------------------------------------------------------------------------------------
# Chapter 10: wide (multi-head) attention and the Transformer
# ----------------------------------------------------------------------------------------------------------------

class MultiHeadedAttention(nn.Module):
    """n_heads heads of width d_k = d_model / n_heads over keys stored by init_keys."""

    def __init__(self, n_heads, d_model, dropout=0.1):
        super().__init__()
        self.n_heads = n_heads
        self.d_model = d_model
        self.d_k = int(d_model / n_heads)
        self.linear_query = nn.Linear(d_model, d_model)
        self.linear_key = nn.Linear(d_model, d_model)
        self.linear_value = nn.Linear(d_model, d_model)
        self.linear_out = nn.Linear(d_model, d_model)
        self.alphas = None

    def make_chunks(self, x):
        batch_size, seq_len = x.size(0), x.size(1)
        # N, L, D -> N, L, n_heads, d_k -> N, n_heads, L, d_k
        return x.view(batch_size, seq_len, self.n_heads, self.d_k).transpose(1, 2)

    def init_keys(self, key):
        self.proj_key = self.make_chunks(self.linear_key(key))
        self.proj_value = self.make_chunks(self.linear_value(key))

    def score_function(self, query):
        proj_query = self.make_chunks(self.linear_query(query))
        return torch.matmul(proj_query, self.proj_key.transpose(-2, -1)) / np.sqrt(self.d_k)

    def attn(self, query, mask=None):
        scores = self.score_function(query)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        alphas = F.softmax(scores, dim=-1)
        self.alphas = alphas.detach()
        return torch.matmul(alphas, self.proj_value)

    def output_function(self, contexts):
        out = self.linear_out(contexts)
        return out

    def forward(self, query, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # N, 1, L or N, L, L -> N, 1, 1|L, L: the same mask for every head
        context = self.attn(query, mask=mask)
        context = context.transpose(1, 2).contiguous()  # N, L, n_heads, d_k
        context = context.view(query.size(0), -1, self.d_model)
        return self.output_function(context)


class SubLayerWrapper(nn.Module):
    """Pre-norm residual connection, x + Dropout(sublayer(LayerNorm(x))); a self-attention sub-layer gets its keys
    from the normalized input."""

    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, sublayer, is_self_attn=False, **kwargs):
        norm_x = self.norm(x)
        if is_self_attn:
            sublayer.init_keys(norm_x)
        return x + self.drop(sublayer(norm_x, **kwargs))


class EncoderLayer(nn.Module):
    def __init__(self, n_heads, d_model, ff_units, dropout=0.1):
        super().__init__()
        self.n_heads, self.d_model, self.ff_units = n_heads, d_model, ff_units
        self.self_attn_heads = MultiHeadedAttention(n_heads, d_model, dropout)
        self.ffn = nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(ff_units, d_model))
        self.sublayers = nn.ModuleList([SubLayerWrapper(d_model, dropout) for _ in range(2)])

    def forward(self, query, mask=None):
        att = self.sublayers[0](query, sublayer=self.self_attn_heads, is_self_attn=True, mask=mask)
        return self.sublayers[1](att, sublayer=self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, n_heads, d_model, ff_units, dropout=0.1):
        super().__init__()
        self.n_heads, self.d_model, self.ff_units = n_heads, d_model, ff_units
        self.self_attn_heads = MultiHeadedAttention(n_heads, d_model, dropout)
        self.cross_attn_heads = MultiHeadedAttention(n_heads, d_model, dropout)
        self.ffn = nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(ff_units, d_model))
        self.sublayers = nn.ModuleList([SubLayerWrapper(d_model, dropout) for _ in range(3)])

    def init_keys(self, states):
        self.cross_attn_heads.init_keys(states)

    def forward(self, query, source_mask=None, target_mask=None):
        att1 = self.sublayers[0](query, sublayer=self.self_attn_heads, is_self_attn=True, mask=target_mask)
        att2 = self.sublayers[1](att1, sublayer=self.cross_attn_heads, mask=source_mask)
        return self.sublayers[2](att2, sublayer=self.ffn)


class PositionalEncoding(nn.Module):
    """Adds the sinusoids of the positions; the input is scaled by sqrt(d_model) first (the embeddings' scale)."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.d_model = d_model
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).float().unsqueeze(1)
        angular_speed = torch.exp(torch.arange(0, d_model, 2).float() * (-np.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * angular_speed)
        pe[:, 1::2] = torch.cos(position * angular_speed)
        self.register_buffer('pe', pe.unsqueeze(0))

    def forward(self, x):
        scaled_x = x * np.sqrt(self.d_model)
        return scaled_x + self.pe[:, :x.size(1), :]


class EncoderTransf(nn.Module):
    def __init__(self, encoder_layer, n_layers=1, max_len=100, dropout=0.1):
        super().__init__()
        self.d_model = encoder_layer.d_model
        self.pe = PositionalEncoding(max_len, self.d_model)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(self.d_model)
        self.layers = nn.ModuleList([copy.deepcopy(encoder_layer) for _ in range(n_layers)])

    def forward(self, query, mask=None):
        x = self.drop(self.pe(query))
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class DecoderTransf(nn.Module):
    def __init__(self, decoder_layer, n_layers=1, max_len=100, dropout=0.1):
        super().__init__()
        self.d_model = decoder_layer.d_model
        self.pe = PositionalEncoding(max_len, self.d_model)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(self.d_model)
        self.layers = nn.ModuleList([copy.deepcopy(decoder_layer) for _ in range(n_layers)])

    def init_keys(self, states):
        for layer in self.layers:
            layer.init_keys(states)

    def forward(self, query, source_mask=None, target_mask=None):
        x = self.drop(self.pe(query))
        for layer in self.layers:
            x = layer(x, source_mask, target_mask)
        return self.norm(x)


def subsequent_mask(size):
    """(1, size, size): True where a position may attend (itself and the positions before it)."""
    attn_shape = (1, size, size)
    return (1 - torch.triu(torch.ones(attn_shape), diagonal=1)).bool()


class EncoderDecoderTransf(nn.Module):
    """Token ids in, log-probabilities out; the masks are built from the tokens."""

    def __init__(self, encoder, decoder, src_vocab_size, tgt_vocab_size, pad_idx=0):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.pad_idx = pad_idx
        d_model = encoder.d_model
        self.src_embed = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d_model)
        self.linear = nn.Linear(d_model, tgt_vocab_size)

    def encode(self, source_seq, source_mask):
        return self.encoder(self.src_embed(source_seq), source_mask)

    def decode(self, states, target_seq, source_mask):
        target_mask = subsequent_mask(target_seq.size(1)).to(target_seq.device)
        self.decoder.init_keys(states)
        outputs = self.decoder(self.tgt_embed(target_seq), source_mask=source_mask, target_mask=target_mask)
        return F.log_softmax(self.linear(outputs), dim=-1)

    def forward(self, source_seq, target_seq):
        source_mask = (source_seq != self.pad_idx).unsqueeze(1)  # N, 1, L
        states = self.encode(source_seq, source_mask)
        return self.decode(states, target_seq, source_mask)
