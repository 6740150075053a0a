"""A small encoder-decoder Transformer configured by one object: ``Seq2SeqTransformer(TransformerConfig(...))``."""
from .config import TransformerConfig
from .layers import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward, MultiHeadAttention
from .model import Embeddings, Seq2SeqTransformer, causal_mask, padding_mask

__all__ = ["TransformerConfig", "Seq2SeqTransformer", "Embeddings", "MultiHeadAttention", "FeedForward",
           "EncoderLayer", "DecoderLayer", "Encoder", "Decoder", "causal_mask", "padding_mask"]
