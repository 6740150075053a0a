from torch import nn

from nets.embedding.lookup import WordEmbedding
from nets.embedding.sinusoid import SinusoidTable


class EmbedWithPositions(nn.Module):
    """Token rows plus the position table, then dropout."""

    def __init__(self, vocab_size, d_model, max_len, drop_prob, device):
        super().__init__()
        self.tokens = WordEmbedding(vocab_size, d_model)
        self.positions = SinusoidTable(d_model, max_len, device)
        self.drop = nn.Dropout(p=drop_prob)

    def forward(self, ids):
        rows = self.tokens(ids)
        where = self.positions(ids)
        return self.drop(rows + where)
