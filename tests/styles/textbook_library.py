"""Companion code for the sequence-to-sequence chapters: each generation kept beside the next one, a recurrent
encoder-decoder with one narrow attention head (chapter 9), then the Transformer (chapter 10). Attention is
stateful: call init_keys(keys) once, then forward(query, mask) as often as needed."""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ============================== Chapter 9: recurrent models ==============================
class GruEncoder(nn.Module):
    """Reads a sequence of feature vectors and returns every hidden state."""

    def __init__(self, n_features, hidden_dim):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.gru = nn.GRU(n_features, hidden_dim, batch_first=True)

    def forward(self, X):
        return self.gru(X)[0]


class NarrowAttention(nn.Module):
    """A single attention head whose keys are set in advance (init_keys)."""

    def __init__(self, hidden_dim, input_dim=None, proj_values=False):
        super().__init__()
        input_dim = input_dim or hidden_dim
        self.d_k = hidden_dim
        self.proj_values = proj_values
        self.to_query = nn.Linear(input_dim, hidden_dim)
        self.to_key = nn.Linear(input_dim, hidden_dim)
        self.to_value = nn.Linear(input_dim, hidden_dim)

    def init_keys(self, keys):
        self.stored_keys = self.to_key(keys)
        self.stored_values = self.to_value(keys) if self.proj_values else keys

    def forward(self, query, mask=None):
        q = self.to_query(query)
        logits = torch.einsum('bqd,bkd->bqk', q, self.stored_keys) / math.sqrt(self.d_k)
        if mask is not None:
            logits = logits.masked_fill(mask == 0, -1e9)
        self.weights = logits.softmax(dim=-1)
        return torch.einsum('bqk,bkd->bqd', self.weights, self.stored_values)


class GruAttnDecoder(nn.Module):
    """Generates one step at a time, attending to the encoder's states."""

    def __init__(self, n_features, hidden_dim):
        super().__init__()
        self.gru = nn.GRU(n_features, hidden_dim, batch_first=True)
        self.attention = NarrowAttention(hidden_dim)
        self.head = nn.Linear(2 * hidden_dim, n_features)
        self.hidden = None

    def init_hidden(self, states):
        self.attention.init_keys(states)
        self.hidden = states[:, -1:].permute(1, 0, 2).contiguous()

    def forward(self, X, mask=None):
        out, self.hidden = self.gru(X, self.hidden)
        context = self.attention(out, mask=mask)
        return self.head(torch.cat([context, out], dim=-1))


class GruSeq2Seq(nn.Module):
    def __init__(self, encoder, decoder, input_len, target_len):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.input_len, self.target_len = input_len, target_len

    def forward(self, X):
        step = X[:, self.input_len - 1:self.input_len]
        self.decoder.init_hidden(self.encoder(X[:, :self.input_len]))
        produced = []
        for _ in range(self.target_len):
            step = self.decoder(step)
            produced.append(step)
        return torch.cat(produced, dim=1)


# ============================== Chapter 10: the Transformer ==============================
class MultiHeadAttn(nn.Module):
    """n_heads narrow heads side by side; keys and values are projected once, by init_keys."""

    def __init__(self, n_heads, d_model):
        super().__init__()
        assert d_model % n_heads == 0, 'd_model must split evenly across the heads'
        self.n_heads, self.d_model = n_heads, d_model
        self.d_k = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def _split(self, x):
        batch, length, _ = x.shape
        return x.reshape(batch, length, self.n_heads, self.d_k).permute(0, 2, 1, 3)

    def init_keys(self, key):
        self.key_heads = self._split(self.k_proj(key))
        self.value_heads = self._split(self.v_proj(key))

    def attend(self, query, mask=None):
        """query: (N, h, Lq, d_k) against the stored heads; mask: (N, 1 or Lq, Lk)."""
        logits = torch.einsum('nhqd,nhkd->nhqk', query, self.key_heads) / math.sqrt(self.d_k)
        if mask is not None:
            logits = logits.masked_fill(mask.unsqueeze(1) == 0, -1e9)
        self.alphas = F.softmax(logits, dim=-1)
        return torch.einsum('nhqk,nhkd->nhqd', self.alphas, self.value_heads)

    def forward(self, query, mask=None):
        batch, length, _ = query.shape
        heads = self.attend(self._split(self.q_proj(query)), mask)
        joined = heads.permute(0, 2, 1, 3).reshape(batch, length, self.d_model)
        return self.o_proj(joined)


class PositionalEncoder(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.d_model = d_model
        positions = torch.arange(max_len, dtype=torch.float32)[:, None]
        even_dims = torch.arange(0, d_model, 2, dtype=torch.float32)
        angular_speed = torch.exp(even_dims * (-math.log(10000.0) / d_model))
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(positions * angular_speed)
        table[:, 1::2] = torch.cos(positions * angular_speed)
        self.register_buffer('table', table[None])

    def forward(self, x):
        # the embeddings come in unscaled: sqrt(d_model) is applied here
        return math.sqrt(self.d_model) * x + self.table[:, :x.shape[1]]


class PreNormResidual(nn.Module):
    """x + dropout(sublayer(norm(x))); a self-attention sub-layer takes its keys from norm(x) as well."""

    def __init__(self, d_model, dropout=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, sublayer, is_self_attn=False, **kwargs):
        normed = self.norm(x)
        if is_self_attn:
            sublayer.init_keys(normed)
        return x + self.drop(sublayer(normed, **kwargs))


def feed_forward(d_model, ff_units, dropout):
    return nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(ff_units, d_model))


class TransfEncoderLayer(nn.Module):
    def __init__(self, n_heads, d_model, ff_units, dropout=0.1):
        super().__init__()
        self.d_model = d_model
        self.self_attn = MultiHeadAttn(n_heads, d_model)
        self.ffn = feed_forward(d_model, ff_units, dropout)
        self.wrappers = nn.ModuleList([PreNormResidual(d_model, dropout) for _ in range(2)])

    def forward(self, query, mask=None):
        around_attn, around_ffn = self.wrappers
        h = around_attn(query, self.self_attn, is_self_attn=True, mask=mask)
        return around_ffn(h, self.ffn)


class TransfDecoderLayer(nn.Module):
    def __init__(self, n_heads, d_model, ff_units, dropout=0.1):
        super().__init__()
        self.d_model = d_model
        self.self_attn = MultiHeadAttn(n_heads, d_model)
        self.cross_attn = MultiHeadAttn(n_heads, d_model)
        self.ffn = feed_forward(d_model, ff_units, dropout)
        self.wrappers = nn.ModuleList([PreNormResidual(d_model, dropout) for _ in range(3)])

    def init_keys(self, states):
        self.cross_attn.init_keys(states)

    def forward(self, query, source_mask=None, target_mask=None):
        around_self, around_cross, around_ffn = self.wrappers
        h = around_self(query, self.self_attn, is_self_attn=True, mask=target_mask)
        h = around_cross(h, self.cross_attn, mask=source_mask)
        return around_ffn(h, self.ffn)


class TransfEncoder(nn.Module):
    def __init__(self, encoder_layer, n_layers=1, max_len=100, dropout=0.1):
        super().__init__()
        self.d_model = encoder_layer.d_model
        self.pe = PositionalEncoder(max_len, self.d_model)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(copy.deepcopy(encoder_layer) for _ in range(n_layers))
        self.norm = nn.LayerNorm(self.d_model)

    def forward(self, query, mask=None):
        h = self.drop(self.pe(query))
        for layer in self.layers:
            h = layer(h, mask)
        return self.norm(h)


class TransfDecoder(nn.Module):
    def __init__(self, decoder_layer, n_layers=1, max_len=100, dropout=0.1):
        super().__init__()
        self.d_model = decoder_layer.d_model
        self.pe = PositionalEncoder(max_len, self.d_model)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(copy.deepcopy(decoder_layer) for _ in range(n_layers))
        self.norm = nn.LayerNorm(self.d_model)

    def init_keys(self, states):
        for layer in self.layers:
            layer.init_keys(states)

    def forward(self, query, source_mask=None, target_mask=None):
        h = self.drop(self.pe(query))
        for layer in self.layers:
            h = layer(h, source_mask, target_mask)
        return self.norm(h)


def causal_mask(size):
    """(1, size, size), True where a position may look: itself and everything before it."""
    return torch.ones(1, size, size).tril().bool()


class TransfModel(nn.Module):
    def __init__(self, encoder, decoder, source_vocab, target_vocab, pad_idx=0):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.pad_idx = pad_idx
        width = encoder.d_model
        self.source_embedding = nn.Embedding(source_vocab, width)
        self.target_embedding = nn.Embedding(target_vocab, width)
        self.to_vocab = nn.Linear(width, target_vocab)

    def forward(self, source, target):
        source_mask = (source != self.pad_idx).unsqueeze(1)
        target_mask = causal_mask(target.shape[1]).to(target.device)
        states = self.encoder(self.source_embedding(source), source_mask)
        self.decoder.init_keys(states)
        h = self.decoder(self.target_embedding(target), source_mask, target_mask)
        return F.log_softmax(self.to_vocab(h), dim=-1)
