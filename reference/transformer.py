"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), read side by side with the paper.

Every class cites the section and equation it implements. Conventions used throughout:

* tensors are batch-first: ``(batch, length, d_model)``;
* a mask is a boolean tensor broadcastable to ``(batch, query_length, key_length)``
  where ``True`` means "this query may attend to this key" (padding masks are
  ``(batch, 1, key_length)``, the subsequent-position mask is ``(1, length, length)``).

The module exposes the conformance interface in ``CONFORMANCE_ROLES`` (see ``conformance.interface``).
"""
import math

import torch
import torch.nn as nn

MASKED_SCORE = -1e9
"""Score given to masked positions before the softmax; exp() of it underflows to exactly 0."""


# ---------------------------------------------------------------------------------------------
# 3.4 Embeddings and Softmax
# ---------------------------------------------------------------------------------------------
class Embeddings(nn.Module):
    """3.4: learned embeddings; "In the embedding layers, we multiply those weights by sqrt(d_model)"."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, tokens):
        return self.lut(tokens) * math.sqrt(self.d_model)


class Generator(nn.Module):
    """3.4: "the usual learned linear transformation and softmax function" (log-softmax for training)."""

    def __init__(self, d_model, vocab_size):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, x):
        return torch.log_softmax(self.proj(x), dim=-1)


# ---------------------------------------------------------------------------------------------
# 3.5 Positional Encoding
# ---------------------------------------------------------------------------------------------
def sinusoidal_table(max_len, d_model):
    """3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Computed in float64; shape ``(max_len, d_model)``.
    """
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position / torch.pow(10000.0, two_i / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table


class PositionalEncoding(nn.Module):
    """3.5: fixed sinusoids added to the embeddings; 5.4: dropout applied to the sums.

    The table is a buffer (it moves with ``.to()`` and is not trained) and is sliced to the input length.
    """

    def __init__(self, d_model, dropout, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_table(max_len, d_model).to(torch.get_default_dtype()).unsqueeze(0))

    def forward(self, x):
        return self.dropout(x + self.pe[:, : x.size(1)])


# ---------------------------------------------------------------------------------------------
# 3.2 Attention
# ---------------------------------------------------------------------------------------------
def attention(query, key, value, mask=None):
    """3.2.1, eq. (1): Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    Returns the output and the attention weights (softmax over the keys, the last axis).
    """
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, MASKED_SCORE)
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, value), weights


class MultiHeadAttention(nn.Module):
    """3.2.2: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    "d_k = d_v = d_model / h"; the h projections are computed as one d_model x d_model matrix each for Q, K, V.
    """

    def __init__(self, h, d_model):
        super().__init__()
        if d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by h={h}")
        self.h, self.d_k = h, d_model // h
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def split_heads(self, x):
        """(batch, length, d_model) -> (batch, h, length, d_k)."""
        return x.view(x.size(0), -1, self.h, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # the same mask for every head
        q, k, v = self.split_heads(self.w_q(query)), self.split_heads(self.w_k(key)), self.split_heads(self.w_v(value))
        heads, _ = attention(q, k, v, mask)
        concat = heads.transpose(1, 2).reshape(query.size(0), -1, self.h * self.d_k)
        return self.w_o(concat)


# ---------------------------------------------------------------------------------------------
# 3.3 Position-wise Feed-Forward Networks
# ---------------------------------------------------------------------------------------------
class PositionwiseFeedForward(nn.Module):
    """3.3, eq. (2): FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, inner dimension d_ff."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


# ---------------------------------------------------------------------------------------------
# 3.1 Encoder and Decoder Stacks
# ---------------------------------------------------------------------------------------------
class LayerNorm(nn.Module):
    """Layer normalization (Ba et al., 2016), cited in 3.1: per-feature gain and bias, biased variance,
    eps inside the square root; identical to ``torch.nn.LayerNorm``."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        variance = x.var(-1, keepdim=True, unbiased=False)
        return self.gain * (x - mean) / torch.sqrt(variance + self.eps) + self.bias


class SublayerConnection(nn.Module):
    """3.1: "the output of each sub-layer is LayerNorm(x + Sublayer(x))"; 5.4: dropout on the sub-layer
    output "before it is added to the sub-layer input and normalized"."""

    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """3.1: "two sub-layers ... a multi-head self-attention mechanism, and ... a position-wise fully
    connected feed-forward network", each in a residual connection followed by layer normalization."""

    def __init__(self, d_model, h, d_ff, dropout):
        super().__init__()
        self.self_attn = MultiHeadAttention(h, d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff)
        self.sublayer = nn.ModuleList([SublayerConnection(d_model, dropout) for _ in range(2)])

    def forward(self, x, src_mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, src_mask))
        return self.sublayer[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    """3.1: the decoder inserts "a third sub-layer, which performs multi-head attention over the output of
    the encoder stack"; its self-attention is masked so position i attends only to positions < i + 1."""

    def __init__(self, d_model, h, d_ff, dropout):
        super().__init__()
        self.self_attn = MultiHeadAttention(h, d_model)
        self.src_attn = MultiHeadAttention(h, d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff)
        self.sublayer = nn.ModuleList([SublayerConnection(d_model, dropout) for _ in range(3)])

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, memory, memory, src_mask))
        return self.sublayer[2](x, self.feed_forward)


def clones(make_layer, n):
    """3.1: "a stack of N = 6 identical layers": identical in structure, independent in weights (each one built
    anew: a fresh layer costs half of a deep copy)."""
    return nn.ModuleList([make_layer() for _ in range(n)])


class Encoder(nn.Module):
    """3.1: a stack of N encoder layers (post-norm: no final normalization is needed)."""

    def __init__(self, N, d_model, h, d_ff, dropout):
        super().__init__()
        self.layers = clones(lambda: EncoderLayer(d_model, h, d_ff, dropout), N)

    def forward(self, x, src_mask):
        for layer in self.layers:
            x = layer(x, src_mask)
        return x


class Decoder(nn.Module):
    """3.1: a stack of N decoder layers, each attending over the same encoder output (memory)."""

    def __init__(self, N, d_model, h, d_ff, dropout):
        super().__init__()
        self.layers = clones(lambda: DecoderLayer(d_model, h, d_ff, dropout), N)

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return x


class Transformer(nn.Module):
    """3, Figure 1: embeddings + positional encodings feed the encoder and decoder stacks; the generator
    turns decoder outputs into next-token log-probabilities. ``forward`` returns the decoder output.

    3.4: "we share the same weight matrix between the two embedding layers and the pre-softmax linear
    transformation": ``share_embeddings`` (the default) ties the target embedding and the pre-softmax projection,
    and the source embedding too when both vocabularies have the same size.
    """

    def __init__(self, src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, max_len=5000,
                 share_embeddings=True):
        super().__init__()
        self.src_embed = nn.Sequential(Embeddings(src_vocab, d_model), PositionalEncoding(d_model, dropout, max_len))
        self.tgt_embed = nn.Sequential(Embeddings(tgt_vocab, d_model), PositionalEncoding(d_model, dropout, max_len))
        self.encoder = Encoder(N, d_model, h, d_ff, dropout)
        self.decoder = Decoder(N, d_model, h, d_ff, dropout)
        self.generator = Generator(d_model, tgt_vocab)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if share_embeddings:
            self.generator.proj.weight = self.tgt_embed[0].lut.weight
            if src_vocab == tgt_vocab:
                self.src_embed[0].lut.weight = self.tgt_embed[0].lut.weight

    def encode(self, src, src_mask):
        return self.encoder(self.src_embed(src), src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)


# ---------------------------------------------------------------------------------------------
# Masks (3.1, 3.2.3)
# ---------------------------------------------------------------------------------------------
def padding_mask(tokens, pad_idx):
    """Keys that are padding may not be attended to: ``(batch, 1, length)``, True where the token is real."""
    return (tokens != pad_idx).unsqueeze(-2)


def subsequent_mask(size):
    """3.2.3: "prevent leftward information flow": position i may attend to positions j <= i.
    Shape ``(1, size, size)``."""
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------
# Parameter counts (closed forms, checked against Table 3 and torch.nn.Transformer)
# ---------------------------------------------------------------------------------------------
def count_multi_head_attention(d_model):
    """Four d_model x d_model projections with biases: 4 (d^2 + d)."""
    return 4 * (d_model * d_model + d_model)


def count_feed_forward(d_model, d_ff):
    """W_1 (d x d_ff) + b_1 (d_ff) + W_2 (d_ff x d) + b_2 (d): 2 d d_ff + d_ff + d."""
    return 2 * d_model * d_ff + d_ff + d_model


def count_layer_norm(d_model):
    """Gain and bias: 2 d."""
    return 2 * d_model


def count_encoder_layer(d_model, d_ff):
    return count_multi_head_attention(d_model) + count_feed_forward(d_model, d_ff) + 2 * count_layer_norm(d_model)


def count_decoder_layer(d_model, d_ff):
    return 2 * count_multi_head_attention(d_model) + count_feed_forward(d_model, d_ff) + 3 * count_layer_norm(d_model)


def count_transformer(src_vocab, tgt_vocab, N, d_model, d_ff, share_embeddings=False):
    """Embeddings (V_src d + V_tgt d), N encoder and N decoder layers, generator (d V_tgt + V_tgt).

    With ``share_embeddings`` the generator's weight is the target embedding (and the source embedding too
    when the vocabularies have equal size), so only its bias is counted.
    """
    embeddings = tgt_vocab * d_model + (0 if share_embeddings and src_vocab == tgt_vocab else src_vocab * d_model)
    generator = tgt_vocab + (0 if share_embeddings else d_model * tgt_vocab)
    stacks = N * (count_encoder_layer(d_model, d_ff) + count_decoder_layer(d_model, d_ff))
    return embeddings + stacks + generator


CONFORMANCE_ROLES = {
    "embedding": Embeddings,
    "positional_encoding": PositionalEncoding,
    "attention": attention,
    "multi_head_attention": MultiHeadAttention,
    "feed_forward": PositionwiseFeedForward,
    "layer_norm": LayerNorm,
    "sublayer_connection": SublayerConnection,
    "encoder_layer": EncoderLayer,
    "decoder_layer": DecoderLayer,
    "encoder": Encoder,
    "decoder": Decoder,
    "generator": Generator,
    "model": Transformer,
    "padding_mask": padding_mask,
    "subsequent_mask": subsequent_mask,
}
