"""The Transformer of Vaswani et al., "Attention Is All You Need" (2017), one block per section of the paper.

Notation follows the paper: d_model, h, d_k = d_v = d_model / h, d_ff, N; the projections W^Q, W^K, W^V, W^O of
§3.2.2 are ``w_q``, ``w_k``, ``w_v``, ``w_o`` and the two linear maps of eq. (2) are ``w_1``, ``w_2``.

Shapes: B is the batch, L (Lq, Lk, Ls, Lt) a sequence length; activations are ``[B, L, d_model]``. A mask is
boolean and broadcasts to ``[B, Lq, Lk]``; True means the query may attend to that key.

Each block keeps its intermediate values one method call away (``MultiHeadAttention.project`` and ``concat``,
``FeedForwardNetwork.hidden``, ``LayerNorm.normalize``, ``OutputLayer.logits``, ``Transformer.encode``), so a check
can compare a step with the paper's equation. ``CONFORMANCE_ROLES`` (end of file) maps the checker's role names
(``conformance.contract.interface``) onto these blocks.
"""
import math

import torch
import torch.nn as nn

MASKED_SCORE = -1e9
"""What a score the mask forbids becomes before the softmax: its exponential is exactly 0 in float32 and float64,
and a query with every key forbidden still gets finite (uniform) weights."""


# == §3.2.1 Scaled Dot-Product Attention ============================================================================
def scaled_dot_product_attention(query, key, value, mask=None):
    """Eq. (1): Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    query ``[..., Lq, d_k]``, key ``[..., Lk, d_k]``, value ``[..., Lk, d_v]``, mask broadcastable to
    ``[..., Lq, Lk]``. Returns the output ``[..., Lq, d_v]`` and the weights ``[..., Lq, Lk]`` (each row sums to 1).
    """
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), MASKED_SCORE)
    weights = scores.softmax(dim=-1)
    return weights @ value, weights


# == §3.2.2 Multi-Head Attention =====================================================================================
class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h per-head projections d_model -> d_k sit side by side in one d_model x d_model map each (``w_q``, ``w_k``,
    ``w_v``); ``w_o`` maps the concatenated h d_v values back to d_model.
    """

    def __init__(self, h, d_model):
        super().__init__()
        if d_model % h:
            raise ValueError(f"h={h} heads do not divide d_model={d_model}")
        self.h = h
        self.d_k = d_model // h  # "d_k = d_v = d_model / h"
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def project(self, x, w):
        """x W_i for all heads i: ``[B, L, d_model]`` -> ``[B, h, L, d_k]``."""
        batch, length, _ = x.shape
        return w(x).reshape(batch, length, self.h, self.d_k).transpose(1, 2)

    def concat(self, heads):
        """Concat(head_1, ..., head_h): ``[B, h, L, d_k]`` -> ``[B, L, h d_k]``."""
        batch, _, length, _ = heads.shape
        return heads.transpose(1, 2).reshape(batch, length, self.h * self.d_k)

    def forward(self, query, key, value, mask=None):
        """query ``[B, Lq, d_model]``, key and value ``[B, Lk, d_model]`` -> ``[B, Lq, d_model]``."""
        if mask is not None:
            mask = mask.unsqueeze(1)  # [B, 1, Lq or 1, Lk]: every head obeys the same mask
        q = self.project(query, self.w_q)
        k = self.project(key, self.w_k)
        v = self.project(value, self.w_v)
        heads, _ = scaled_dot_product_attention(q, k, v, mask)  # head_1 ... head_h: [B, h, Lq, d_k]
        return self.w_o(self.concat(heads))


# == §3.3 Position-wise Feed-Forward Networks =======================================================================
class FeedForwardNetwork(nn.Module):
    """Eq. (2): FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, the same at every position; inner size d_ff."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def hidden(self, x):
        """max(0, x W_1 + b_1): ``[B, L, d_model]`` -> ``[B, L, d_ff]``."""
        return torch.relu(self.w_1(x))

    def forward(self, x):
        return self.w_2(self.hidden(x))


# == §3.1 Residual connections and layer normalization ============================================================
class LayerNorm(nn.Module):
    """Layer normalization (Ba et al., 2016, cited in §3.1) over the d_model features: a learned gain and bias,
    the biased variance, eps inside the square root (what ``torch.nn.LayerNorm`` computes)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def normalize(self, x):
        """(x - mean) / sqrt(variance + eps) over the last axis, before gain and bias; shape unchanged."""
        mean = x.mean(dim=-1, keepdim=True)
        variance = x.var(dim=-1, keepdim=True, correction=0)
        return (x - mean) / torch.sqrt(variance + self.eps)

    def forward(self, x):
        return self.gain * self.normalize(x) + self.bias


class AddAndNorm(nn.Module):
    """Figure 1's "Add & Norm" around one sub-layer: LayerNorm(x + Dropout(Sublayer(x))).

    §3.1: "the output of each sub-layer is LayerNorm(x + Sublayer(x))"; §5.4: dropout is applied "to the output of
    each sub-layer, before it is added to the sub-layer input and normalized". ``sublayer`` maps
    ``[B, L, d_model]`` to the same shape.
    """

    def __init__(self, d_model, dropout):
        super().__init__()
        self.layer_norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        residual_sum = x + self.dropout(sublayer(x))
        return self.layer_norm(residual_sum)


# == §3.1 Encoder and Decoder Stacks ================================================================================
class EncoderLayer(nn.Module):
    """One of the N encoder layers: multi-head self-attention, then the feed-forward network, each inside an
    Add & Norm. ``x`` ``[B, Ls, d_model]``, ``src_mask`` ``[B, 1, Ls]``."""

    def __init__(self, d_model, h, d_ff, dropout):
        super().__init__()
        self.self_attention = MultiHeadAttention(h, d_model)
        self.feed_forward = FeedForwardNetwork(d_model, d_ff)
        self.after_self_attention = AddAndNorm(d_model, dropout)
        self.after_feed_forward = AddAndNorm(d_model, dropout)

    def forward(self, x, src_mask):
        x = self.after_self_attention(x, lambda y: self.self_attention(y, y, y, src_mask))
        return self.after_feed_forward(x, self.feed_forward)


class DecoderLayer(nn.Module):
    """One of the N decoder layers: masked self-attention, encoder-decoder attention (queries from the decoder,
    keys and values from the encoder output ``memory``), then the feed-forward network, each inside an Add & Norm.

    ``x`` ``[B, Lt, d_model]``, ``memory`` ``[B, Ls, d_model]``, ``src_mask`` ``[B, 1, Ls]``, ``tgt_mask``
    ``[B, Lt, Lt]`` (the §3.2.3 mask that hides later positions).
    """

    def __init__(self, d_model, h, d_ff, dropout):
        super().__init__()
        self.self_attention = MultiHeadAttention(h, d_model)
        self.cross_attention = MultiHeadAttention(h, d_model)
        self.feed_forward = FeedForwardNetwork(d_model, d_ff)
        self.after_self_attention = AddAndNorm(d_model, dropout)
        self.after_cross_attention = AddAndNorm(d_model, dropout)
        self.after_feed_forward = AddAndNorm(d_model, dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.after_self_attention(x, lambda y: self.self_attention(y, y, y, tgt_mask))
        x = self.after_cross_attention(x, lambda y: self.cross_attention(y, memory, memory, src_mask))
        return self.after_feed_forward(x, self.feed_forward)


class EncoderStack(nn.Module):
    """"A stack of N = 6 identical layers": the same structure, each layer with weights of its own. No norm after
    the last layer: every layer already ends in LayerNorm (post-norm)."""

    def __init__(self, N, d_model, h, d_ff, dropout):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(d_model, h, d_ff, dropout) for _ in range(N)])

    def forward(self, x, src_mask):
        """``[B, Ls, d_model]`` -> the encoder output ("memory"), same shape."""
        for layer in self.layers:
            x = layer(x, src_mask)
        return x


class DecoderStack(nn.Module):
    """N identical decoder layers (own weights each), every one attending over the same encoder output."""

    def __init__(self, N, d_model, h, d_ff, dropout):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(d_model, h, d_ff, dropout) for _ in range(N)])

    def forward(self, x, memory, src_mask, tgt_mask):
        """``[B, Lt, d_model]`` -> same shape."""
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return x


# == §3.4 Embeddings and Softmax; §3.5 Positional Encoding ==========================================================
class TokenEmbedding(nn.Module):
    """Learned token embeddings of size d_model; "we multiply those weights by sqrt(d_model)".
    ``[B, L]`` token ids -> ``[B, L, d_model]``."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.lookup = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model)

    def forward(self, tokens):
        return self.lookup(tokens) * self.scale


def sinusoidal_table(max_len, d_model):
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i / d_model)), PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model)).

    ``[max_len, d_model]``, float64 (the encodings are exact before being cast to the model's dtype).
    """
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # the even columns 2i
    angles = pos / 10000.0 ** (two_i / d_model)  # [max_len, ceil(d_model / 2)]
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles[:, : d_model // 2].cos()  # an odd d_model has one sine more than cosines
    return table


class SinusoidalPositionalEncoding(nn.Module):
    """§3.5: the fixed encodings added to the embeddings, then §5.4's dropout "to the sums of the embeddings and the
    positional encodings". ``[B, L, d_model]`` -> same shape, for L up to ``max_len``.

    The table is a buffer: not trained, moved by ``.to()``, cast to the default dtype.
    """

    def __init__(self, d_model, dropout, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        encodings = sinusoidal_table(max_len, d_model).to(torch.get_default_dtype())
        self.register_buffer("encodings", encodings[None])  # [1, max_len, d_model]

    def forward(self, x):
        return self.dropout(x + self.encodings[:, : x.size(1)])


class OutputLayer(nn.Module):
    """§3.4: "the usual learned linear transformation and softmax function" turning decoder outputs into
    next-token predictions; log-probabilities (log-softmax), as a training loss takes them.
    ``[B, L, d_model]`` -> ``[B, L, vocab_size]``."""

    def __init__(self, d_model, vocab_size):
        super().__init__()
        self.linear = nn.Linear(d_model, vocab_size)

    def logits(self, x):
        return self.linear(x)

    def forward(self, x):
        return self.logits(x).log_softmax(dim=-1)


# == §3, Figure 1: the model ========================================================================================
class Transformer(nn.Module):
    """The encoder-decoder of Figure 1. ``forward(src [B, Ls], tgt [B, Lt], src_mask, tgt_mask)`` returns the
    decoder output ``[B, Lt, d_model]``; ``output_layer`` turns it into next-token log-probabilities.

    One positional encoding module serves both sides (it holds no parameters). §3.4: "we share the same weight
    matrix between the two embedding layers and the pre-softmax linear transformation": with ``share_embeddings``
    (the default) the output layer's weight is the target embedding's, and the source embedding's too when both
    vocabularies have the same size. Matrices are initialised with Xavier's uniform distribution.
    """

    def __init__(self, src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, max_len=5000,
                 share_embeddings=True):
        super().__init__()
        self.src_embedding = TokenEmbedding(src_vocab, d_model)
        self.positional_encoding = SinusoidalPositionalEncoding(d_model, dropout, max_len)
        self.tgt_embedding = TokenEmbedding(tgt_vocab, d_model)
        self.encoder = EncoderStack(N, d_model, h, d_ff, dropout)
        self.decoder = DecoderStack(N, d_model, h, d_ff, dropout)
        self.output_layer = OutputLayer(d_model, tgt_vocab)
        for matrix in [p for p in self.parameters() if p.dim() >= 2]:
            nn.init.xavier_uniform_(matrix)
        if share_embeddings:
            shared = self.tgt_embedding.lookup.weight
            self.output_layer.linear.weight = shared
            if src_vocab == tgt_vocab:
                self.src_embedding.lookup.weight = shared

    def encode(self, src, src_mask):
        """Source tokens ``[B, Ls]`` -> the encoder output ("memory") ``[B, Ls, d_model]``."""
        embedded = self.positional_encoding(self.src_embedding(src))
        return self.encoder(embedded, src_mask)

    def decode(self, tgt, memory, src_mask, tgt_mask):
        """Target tokens ``[B, Lt]`` and the memory -> the decoder output ``[B, Lt, d_model]``."""
        embedded = self.positional_encoding(self.tgt_embedding(tgt))
        return self.decoder(embedded, memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask, tgt_mask):
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, src_mask, tgt_mask)


# == Masks ==========================================================================================================
def padding_mask(tokens, pad_idx):
    """No query attends to a padding key: ``[B, L]`` tokens -> ``[B, 1, L]``, True where the key is a real token."""
    return (tokens != pad_idx)[..., None, :]


def subsequent_mask(size):
    """§3.2.3: decoder self-attention must not see later positions ("prevent leftward information flow"):
    query position i may attend to key position j when j <= i. ``[1, size, size]``."""
    positions = torch.arange(size)
    return (positions[None, :] <= positions[:, None])[None]


# == Parameter counts: closed forms (Table 3; torch.nn.Transformer without its final norms) ==========================
def count_multi_head_attention(d_model):
    """W^Q, W^K, W^V, W^O, each d_model x d_model with a bias: 4 (d_model^2 + d_model)."""
    return 4 * (d_model * d_model + d_model)


def count_feed_forward(d_model, d_ff):
    """W_1, b_1, W_2, b_2: 2 d_model d_ff + d_ff + d_model."""
    return 2 * d_model * d_ff + d_ff + d_model


def count_layer_norm(d_model):
    """A gain and a bias per feature: 2 d_model."""
    return 2 * d_model


def count_encoder_layer(d_model, d_ff):
    """Self-attention, the feed-forward network and two LayerNorms."""
    return count_multi_head_attention(d_model) + count_feed_forward(d_model, d_ff) + 2 * count_layer_norm(d_model)


def count_decoder_layer(d_model, d_ff):
    """Two attentions, the feed-forward network and three LayerNorms."""
    return 2 * count_multi_head_attention(d_model) + count_feed_forward(d_model, d_ff) + 3 * count_layer_norm(d_model)


def count_transformer(src_vocab, tgt_vocab, N, d_model, d_ff, share_embeddings=False):
    """Both embedding tables, N layers of each stack and the output layer (d_model V_tgt weights, V_tgt biases).

    ``share_embeddings``: the output layer reuses the target table (only its bias counts), and the source table is
    that table too when the vocabularies have the same size.
    """
    tables = tgt_vocab * d_model
    if not (share_embeddings and src_vocab == tgt_vocab):
        tables += src_vocab * d_model
    output = tgt_vocab if share_embeddings else d_model * tgt_vocab + tgt_vocab
    return tables + N * (count_encoder_layer(d_model, d_ff) + count_decoder_layer(d_model, d_ff)) + output


CONFORMANCE_ROLES = {
    "embedding": TokenEmbedding,
    "positional_encoding": SinusoidalPositionalEncoding,
    "attention": scaled_dot_product_attention,
    "multi_head_attention": MultiHeadAttention,
    "feed_forward": FeedForwardNetwork,
    "layer_norm": LayerNorm,
    "sublayer_connection": AddAndNorm,
    "encoder_layer": EncoderLayer,
    "decoder_layer": DecoderLayer,
    "encoder": EncoderStack,
    "decoder": DecoderStack,
    "generator": OutputLayer,
    "model": Transformer,
    "padding_mask": padding_mask,
    "subsequent_mask": subsequent_mask,
}
