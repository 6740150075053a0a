from torch import nn

from nets.layers.feed_forward import FeedForward
from nets.layers.heads import HeadedAttention
from nets.layers.norm import LayerNorm


class DecoderBlock(nn.Module):
    """Masked self-attention, attention over the encoder output, then a feed-forward network (post-norm)."""

    def __init__(self, d_model, ffn_hidden, n_head, drop_prob):
        super().__init__()
        self.norms = nn.ModuleList(LayerNorm(d_model) for _ in range(3))
        self.drops = nn.ModuleList(nn.Dropout(p=drop_prob) for _ in range(3))
        self.masked_attn = HeadedAttention(d_model=d_model, n_head=n_head)
        self.cross_attn = HeadedAttention(d_model=d_model, n_head=n_head)
        self.ffn = FeedForward(d_model=d_model, hidden=ffn_hidden, drop_prob=drop_prob)

    def _wrap(self, index, x, out):
        return self.norms[index](x + self.drops[index](out))

    def forward(self, dec, enc, trg_mask, src_mask):
        x = self._wrap(0, dec, self.masked_attn(q=dec, k=dec, v=dec, mask=trg_mask))
        x = self._wrap(1, x, self.cross_attn(q=x, k=enc, v=enc, mask=src_mask))
        return self._wrap(2, x, self.ffn(x))
