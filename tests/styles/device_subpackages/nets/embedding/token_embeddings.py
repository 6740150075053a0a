from torch import nn


class TokenEmbedding(nn.Embedding):
    """A lookup table of d_model-sized vectors, one per token."""

    def __init__(self, vocab_size, d_model, pad_idx):
        super().__init__(vocab_size, d_model, padding_idx=pad_idx)
