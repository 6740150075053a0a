from torch import nn

from nets.layers.feed_forward import FeedForward
from nets.layers.heads import HeadedAttention
from nets.layers.norm import LayerNorm


class EncoderBlock(nn.Module):
    """Self-attention and a feed-forward network, each wrapped as norm(x + dropout(sublayer(x)))."""

    def __init__(self, d_model, ffn_hidden, n_head, drop_prob):
        super().__init__()
        self.self_attn = HeadedAttention(d_model=d_model, n_head=n_head)
        self.attn_norm = LayerNorm(d_model)
        self.attn_drop = nn.Dropout(p=drop_prob)
        self.ffn = FeedForward(d_model=d_model, hidden=ffn_hidden, drop_prob=drop_prob)
        self.ffn_norm = LayerNorm(d_model)
        self.ffn_drop = nn.Dropout(p=drop_prob)

    def forward(self, x, src_mask):
        attended = self.self_attn(q=x, k=x, v=x, mask=src_mask)
        x = self.attn_norm(x + self.attn_drop(attended))
        return self.ffn_norm(x + self.ffn_drop(self.ffn(x)))
