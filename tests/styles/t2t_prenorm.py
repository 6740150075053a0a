"""A Transformer written the way tensor2tensor runs it.

Each sub-layer is ``x + Dropout(Sublayer(LayerNorm(x)))`` and each stack ends with a LayerNorm; the linear maps of
the attention carry no bias; one embedding matrix serves the source, the target and the output projection; positions
come from tensor2tensor's timing signal (the sines of all timescales, then their cosines). Masks hold True where
attention is blocked. Tensors are batch-first, (batch, length, hidden_size).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_pad_mask(tokens, pad_idx):
    """(batch, 1, length): True at the padding, hidden from every query."""
    return (tokens == pad_idx).unsqueeze(1)


def make_causal_mask(length, device=None):
    """(1, length, length): True above the diagonal, the later positions."""
    return torch.ones(length, length, dtype=torch.bool, device=device).triu(1).unsqueeze(0)


def timing_signal(length, channels, min_timescale=1.0, max_timescale=1.0e4):
    """(length, channels): sin(position / timescale_i) for every timescale, then cos of the same; the timescales run
    geometrically from min_timescale to max_timescale."""
    num_timescales = channels // 2
    position = torch.arange(length, dtype=torch.float)
    log_increment = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * torch.exp(torch.arange(num_timescales, dtype=torch.float) * -log_increment)
    scaled_time = position.unsqueeze(1) * inv_timescales.unsqueeze(0)
    signal = torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)
    return F.pad(signal, (0, channels % 2))


class PositionEncoding(nn.Module):
    """Adds the timing signal (a buffer, cut to the input's length) and applies dropout to the sum."""

    def __init__(self, hidden_size, dropout_rate, max_length=1024):
        super().__init__()
        self.register_buffer("signal", timing_signal(max_length, hidden_size).unsqueeze(0))
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x):
        return self.dropout(x + self.signal[:, :x.size(1)])


class MultiHeadAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, dropout_rate):
        super().__init__()
        self.num_heads = num_heads
        self.depth = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.output_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.attention_dropout = nn.Dropout(dropout_rate)

    def split_heads(self, x):
        return x.view(x.size(0), x.size(1), self.num_heads, self.depth).transpose(1, 2)

    def forward(self, q, k, v, mask=None):
        batch_size = q.size(0)
        q = self.split_heads(self.q_proj(q)) * self.depth ** -0.5   # tensor2tensor scales the queries first
        k = self.split_heads(self.k_proj(k))
        v = self.split_heads(self.v_proj(v))
        logits = torch.matmul(q, k.transpose(2, 3))
        if mask is not None:
            logits = logits.masked_fill(mask.unsqueeze(1), -1e9)
        weights = self.attention_dropout(torch.softmax(logits, dim=-1))
        context = torch.matmul(weights, v).transpose(1, 2).contiguous()
        return self.output_proj(context.view(batch_size, -1, self.num_heads * self.depth))


class FeedForwardNetwork(nn.Module):
    def __init__(self, hidden_size, filter_size):
        super().__init__()
        self.layer1 = nn.Linear(hidden_size, filter_size)
        self.layer2 = nn.Linear(filter_size, hidden_size)

    def forward(self, x):
        return self.layer2(F.relu(self.layer1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, hidden_size, filter_size, num_heads, dropout_rate):
        super().__init__()
        self.self_attention_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.self_attention = MultiHeadAttention(hidden_size, num_heads, dropout_rate)
        self.self_attention_dropout = nn.Dropout(dropout_rate)
        self.ffn_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.ffn = FeedForwardNetwork(hidden_size, filter_size)
        self.ffn_dropout = nn.Dropout(dropout_rate)

    def forward(self, x, mask):
        y = self.self_attention_norm(x)
        x = x + self.self_attention_dropout(self.self_attention(y, y, y, mask))
        y = self.ffn_norm(x)
        return x + self.ffn_dropout(self.ffn(y))


class DecoderLayer(nn.Module):
    def __init__(self, hidden_size, filter_size, num_heads, dropout_rate):
        super().__init__()
        self.self_attention_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.self_attention = MultiHeadAttention(hidden_size, num_heads, dropout_rate)
        self.self_attention_dropout = nn.Dropout(dropout_rate)
        self.enc_dec_attention_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.enc_dec_attention = MultiHeadAttention(hidden_size, num_heads, dropout_rate)
        self.enc_dec_attention_dropout = nn.Dropout(dropout_rate)
        self.ffn_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.ffn = FeedForwardNetwork(hidden_size, filter_size)
        self.ffn_dropout = nn.Dropout(dropout_rate)

    def forward(self, x, enc_output, self_mask, i_mask):
        """``self_mask`` hides the later target positions, ``i_mask`` the padded source positions."""
        y = self.self_attention_norm(x)
        x = x + self.self_attention_dropout(self.self_attention(y, y, y, self_mask))
        y = self.enc_dec_attention_norm(x)
        x = x + self.enc_dec_attention_dropout(self.enc_dec_attention(y, enc_output, enc_output, i_mask))
        y = self.ffn_norm(x)
        return x + self.ffn_dropout(self.ffn(y))


class Encoder(nn.Module):
    def __init__(self, hidden_size, filter_size, num_heads, dropout_rate, n_layers):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(hidden_size, filter_size, num_heads, dropout_rate)
                                     for _ in range(n_layers)])
        self.last_norm = nn.LayerNorm(hidden_size, eps=1e-6)

    def forward(self, inputs, mask):
        for layer in self.layers:
            inputs = layer(inputs, mask)
        return self.last_norm(inputs)


class Decoder(nn.Module):
    def __init__(self, hidden_size, filter_size, num_heads, dropout_rate, n_layers):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(hidden_size, filter_size, num_heads, dropout_rate)
                                     for _ in range(n_layers)])
        self.last_norm = nn.LayerNorm(hidden_size, eps=1e-6)

    def forward(self, targets, enc_output, self_mask, i_mask):
        for layer in self.layers:
            targets = layer(targets, enc_output, self_mask, i_mask)
        return self.last_norm(targets)


class Transformer(nn.Module):
    """One vocabulary and one embedding matrix for both sides and for the output logits."""

    def __init__(self, vocab_size, n_layers=6, hidden_size=512, filter_size=2048, num_heads=8, dropout_rate=0.1,
                 pad_idx=0):
        super().__init__()
        self.hidden_size = hidden_size
        self.pad_idx = pad_idx
        self.embedding = nn.Embedding(vocab_size, hidden_size)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=hidden_size ** -0.5)
        self.position = PositionEncoding(hidden_size, dropout_rate)
        self.encoder = Encoder(hidden_size, filter_size, num_heads, dropout_rate, n_layers)
        self.decoder = Decoder(hidden_size, filter_size, num_heads, dropout_rate, n_layers)

    def embed(self, tokens):
        return self.position(self.embedding(tokens) * math.sqrt(self.hidden_size))

    def encode(self, inputs, i_mask):
        return self.encoder(self.embed(inputs), i_mask)

    def decode(self, targets, enc_output, i_mask, self_mask):
        hidden = self.decoder(self.embed(targets), enc_output, self_mask, i_mask)
        return torch.matmul(hidden, self.embedding.weight.t())   # logits through the shared matrix

    def forward(self, inputs, targets, i_mask=None, self_mask=None):
        if i_mask is None:
            i_mask = make_pad_mask(inputs, self.pad_idx)
        if self_mask is None:
            self_mask = make_pad_mask(targets, self.pad_idx) | make_causal_mask(targets.size(1), targets.device)
        return self.decode(targets, self.encode(inputs, i_mask), i_mask, self_mask)
