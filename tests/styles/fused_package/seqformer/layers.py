"""Encoder and decoder layers: they only chain the fused sub-layers of seqformer.units."""
import torch.nn as nn

from seqformer.units import FeedForwardLayer, MultiHeadAttentionLayer


class EncoderBlock(nn.Module):
    def __init__(self, d_model, d_inner, n_head, d_k, d_v, dropout=0.1):
        super().__init__()
        self.self_att = MultiHeadAttentionLayer(n_head, d_model, d_k, d_v, dropout=dropout)
        self.ffn = FeedForwardLayer(d_model, d_inner, dropout=dropout)

    def forward(self, enc_input, slf_attn_mask=None):
        hidden, _ = self.self_att(enc_input, enc_input, enc_input, mask=slf_attn_mask)
        return self.ffn(hidden)


class DecoderBlock(nn.Module):
    def __init__(self, d_model, d_inner, n_head, d_k, d_v, dropout=0.1):
        super().__init__()
        self.self_att = MultiHeadAttentionLayer(n_head, d_model, d_k, d_v, dropout=dropout)
        self.cross_att = MultiHeadAttentionLayer(n_head, d_model, d_k, d_v, dropout=dropout)
        self.ffn = FeedForwardLayer(d_model, d_inner, dropout=dropout)

    def forward(self, dec_input, enc_output, slf_attn_mask=None, dec_enc_attn_mask=None):
        hidden, _ = self.self_att(dec_input, dec_input, dec_input, mask=slf_attn_mask)
        hidden, _ = self.cross_att(hidden, enc_output, enc_output, mask=dec_enc_attn_mask)
        return self.ffn(hidden)
