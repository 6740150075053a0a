"""Sub-layers with their residual connection and post-norm LayerNorm built in."""
import torch.nn as nn

from seqformer.modules import ScaledDotProductAttention


class MultiHeadAttention(nn.Module):
    """LayerNorm(q + Dropout(W_o Concat(head_1..head_h))), projections without bias."""

    def __init__(self, n_head, d_model, d_k, d_v, dropout=0.1):
        super().__init__()
        self.n_head, self.d_k, self.d_v = n_head, d_k, d_v
        self.w_qs = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_ks = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_vs = nn.Linear(d_model, n_head * d_v, bias=False)
        self.fc = nn.Linear(n_head * d_v, d_model, bias=False)
        self.attention = ScaledDotProductAttention(temperature=d_k ** 0.5)
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, q, k, v, mask=None):
        n_head, d_k, d_v = self.n_head, self.d_k, self.d_v
        sz_b, len_q, len_k, len_v = q.size(0), q.size(1), k.size(1), v.size(1)
        residual = q
        q = self.w_qs(q).view(sz_b, len_q, n_head, d_k).transpose(1, 2)
        k = self.w_ks(k).view(sz_b, len_k, n_head, d_k).transpose(1, 2)
        v = self.w_vs(v).view(sz_b, len_v, n_head, d_v).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)  # the head axis
        out, attn = self.attention(q, k, v, mask=mask)
        out = out.transpose(1, 2).contiguous().view(sz_b, len_q, n_head * d_v)
        out = self.dropout(self.fc(out))
        return self.layer_norm(out + residual), attn


class PositionwiseFeedForward(nn.Module):
    """LayerNorm(x + Dropout(w_2 ReLU(w_1 x)))."""

    def __init__(self, d_in, d_hid, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_in, d_hid)
        self.w_2 = nn.Linear(d_hid, d_in)
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_in, eps=1e-6)

    def forward(self, x):
        residual = x
        x = self.w_2(self.w_1(x).relu())
        return self.layer_norm(self.dropout(x) + residual)
