from torch import nn


class WordEmbedding(nn.Embedding):
    """One learned row of d_model numbers per vocabulary entry."""

    def __init__(self, vocab_size, d_model):
        super().__init__(num_embeddings=vocab_size, embedding_dim=d_model)
