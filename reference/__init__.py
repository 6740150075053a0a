"""The strict reference implementation of "Attention Is All You Need" (see ``reference.transformer``)."""
from reference.transformer import (  # noqa: F401
    CONFORMANCE_ROLES, MASKED_SCORE, AddAndNorm, DecoderLayer, DecoderStack, EncoderLayer, EncoderStack,
    FeedForwardNetwork, LayerNorm, MultiHeadAttention, OutputLayer, SinusoidalPositionalEncoding, TokenEmbedding,
    Transformer, count_decoder_layer, count_encoder_layer, count_feed_forward, count_layer_norm,
    count_multi_head_attention, count_transformer, padding_mask, scaled_dot_product_attention, sinusoidal_table,
    subsequent_mask,
)
