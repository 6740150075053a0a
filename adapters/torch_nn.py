"""``--impl=torch``: PyTorch's own modules (``nn.MultiheadAttention``, ``nn.LayerNorm``,
``nn.TransformerEncoderLayer`` / ``DecoderLayer``, the encoder and decoder stacks of ``nn.Transformer``,
``F.scaled_dot_product_attention``) under the canonical calls of ``conformance.contract.interface``.

The wrappers only translate conventions: torch's boolean masks mean True = *blocked*, padding is passed as a
``key_padding_mask`` of shape (batch, key_len), and per-sample attention masks are (batch * heads, Lq, Lk).
PyTorch has no roles for embeddings, positional encoding, the feed-forward network alone, the sublayer
connection, the generator or the token-level model, so those are missing.
"""
import functools

import torch.nn as nn
import torch.nn.functional as F


def key_padding_mask(mask, batch):
    """Canonical padding mask (B|1, 1, Lk), True = real token -> torch's (B, Lk), True = padding."""
    return ~mask.expand(batch, -1, -1)[:, 0]


def attention_mask(mask, batch, heads, query_len):
    """Canonical mask (B|1, Lq|1, Lk), True = may attend -> torch's (B * heads, Lq, Lk), True = blocked."""
    return ~mask.expand(batch, query_len, -1).repeat_interleave(heads, dim=0)


def encoder_masks(mask, batch, heads, length):
    """A padding mask goes to ``src_key_padding_mask``; a full (B, L, L) mask to ``mask``."""
    if mask is None:
        return {}
    if mask.size(-2) == 1:
        return {"src_key_padding_mask": key_padding_mask(mask, batch)}
    return {"mask": attention_mask(mask, batch, heads, length)}


def attention(query, key, value, mask=None):
    """3.2.1 as ``F.scaled_dot_product_attention`` (its boolean mask already means True = may attend)."""
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask)


class MultiheadAttention(nn.Module):
    def __init__(self, h, d_model, dropout):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, h, dropout=dropout, batch_first=True)

    def forward(self, query, key, value, mask=None):
        attn_mask = None if mask is None else attention_mask(mask, query.size(0), self.attn.num_heads, query.size(1))
        return self.attn(query, key, value, attn_mask=attn_mask, need_weights=False)[0]


def layer_norm(d_model):
    return nn.LayerNorm(d_model)


def torch_encoder_layer(d_model, h, d_ff, dropout):
    return nn.TransformerEncoderLayer(d_model, h, d_ff, dropout, batch_first=True)


def torch_decoder_layer(d_model, h, d_ff, dropout):
    return nn.TransformerDecoderLayer(d_model, h, d_ff, dropout, batch_first=True)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout):
        super().__init__()
        self.layer = torch_encoder_layer(d_model, h, d_ff, dropout)

    def forward(self, x, src_mask):
        return self.layer(x, **encoder_masks(src_mask, x.size(0), self.layer.self_attn.num_heads, x.size(1)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout):
        super().__init__()
        self.layer = torch_decoder_layer(d_model, h, d_ff, dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        b, heads = x.size(0), self.layer.self_attn.num_heads
        return self.layer(x, memory, tgt_mask=attention_mask(tgt_mask, b, heads, x.size(1)),
                          memory_key_padding_mask=key_padding_mask(src_mask, b))


class Encoder(nn.Module):
    """The encoder of ``nn.Transformer``: N layers and a final LayerNorm."""

    def __init__(self, N, d_model, h, d_ff, dropout):
        super().__init__()
        self.stack = nn.TransformerEncoder(torch_encoder_layer(d_model, h, d_ff, dropout), N,
                                           norm=nn.LayerNorm(d_model), enable_nested_tensor=False)

    def forward(self, x, src_mask):
        return self.stack(x, **encoder_masks(src_mask, x.size(0), self.stack.layers[0].self_attn.num_heads, x.size(1)))


class Decoder(nn.Module):
    """The decoder of ``nn.Transformer``: N layers and a final LayerNorm."""

    def __init__(self, N, d_model, h, d_ff, dropout):
        super().__init__()
        self.stack = nn.TransformerDecoder(torch_decoder_layer(d_model, h, d_ff, dropout), N, norm=nn.LayerNorm(d_model))

    def forward(self, x, memory, src_mask, tgt_mask):
        b, heads = x.size(0), self.stack.layers[0].self_attn.num_heads
        return self.stack(x, memory, tgt_mask=attention_mask(tgt_mask, b, heads, x.size(1)),
                          memory_key_padding_mask=key_padding_mask(src_mask, b))


def subsequent_mask(size):
    """``nn.Transformer.generate_square_subsequent_mask`` is additive (-inf = blocked): True where it is 0."""
    return (nn.Transformer.generate_square_subsequent_mask(size) == 0).unsqueeze(0)


CONFORMANCE_ROLES = {
    "attention": attention,
    "multi_head_attention": MultiheadAttention,
    "layer_norm": layer_norm,
    "encoder_layer": EncoderLayer,
    "decoder_layer": DecoderLayer,
    "encoder": Encoder,
    "decoder": Decoder,
    "subsequent_mask": subsequent_mask,
}


def without_nested_tensors():
    """Build ``nn.TransformerEncoder`` stacks in this process with ``use_nested_tensor`` off. In eval mode, given a
    key-padding mask, such a stack packs the batch into a nested tensor, whose sizes the checker's forward hooks
    cannot read (torch raises "NestedTensorImpl doesn't support sizes"): the author's own call works and the
    checker's would fail. Off, the stack runs on the padded batch, with the same values at the real positions."""
    init = nn.TransformerEncoder.__init__
    if getattr(init, "keeps_tensors_padded", False):
        return

    @functools.wraps(init)  # (its signature stays the one constructor plans read)
    def padded(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.use_nested_tensor = False
    padded.keeps_tensors_padded = True
    nn.TransformerEncoder.__init__ = padded
