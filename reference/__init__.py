"""The strict reference implementation of "Attention Is All You Need" (see ``reference.transformer``)."""
from reference.transformer import (  # noqa: F401
    CONFORMANCE_ROLES, Decoder, DecoderLayer, Embeddings, Encoder, EncoderLayer, Generator, LayerNorm,
    MultiHeadAttention, PositionalEncoding, PositionwiseFeedForward, SublayerConnection, Transformer, attention,
    count_decoder_layer, count_encoder_layer, count_feed_forward, count_layer_norm, count_multi_head_attention,
    count_transformer, padding_mask, sinusoidal_table, subsequent_mask,
)
