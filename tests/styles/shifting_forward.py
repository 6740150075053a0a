"""A sequence-to-sequence Transformer trained with teacher forcing done inside forward.

`Seq2SeqTransformer.forward(src, tgt)` takes the source and the *whole* target sentence: it shifts the target one
step right itself (BOS in front, the last token dropped), builds the padding and look-ahead masks itself, and
returns next-token log-probabilities aligned with `tgt` (position i predicts tgt[:, i]).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID, BOS_ID = 0, 1


def scaled_dot_product(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-1e9"))
    return torch.matmul(F.softmax(scores, dim=-1), v)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.1):
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def split(self, x):
        return x.view(x.size(0), -1, self.num_heads, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)
        out = scaled_dot_product(self.split(self.q_proj(query)), self.split(self.k_proj(key)),
                                 self.split(self.v_proj(value)), mask)
        out = out.transpose(1, 2).reshape(query.size(0), -1, self.num_heads * self.d_k)
        return self.out_proj(out)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))

    def forward(self, x):
        return self.net(x)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, src_mask)))
        return self.norm3(x + self.dropout(self.ffn(x)))


def sinusoid_table(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float).unsqueeze(1)
    i = torch.arange(0, d_model, 2, dtype=torch.float)
    angle = pos / torch.pow(10000.0, i / d_model)
    table = torch.zeros(max_len, d_model)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return table


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=512):
        super().__init__()
        self.register_buffer("pe", sinusoid_table(max_len, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class Seq2SeqTransformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=512):
        super().__init__()
        self.d_model = d_model
        self.src_tok = nn.Embedding(src_vocab_size, d_model, padding_idx=PAD_ID)
        self.tgt_tok = nn.Embedding(tgt_vocab_size, d_model, padding_idx=PAD_ID)
        self.pos = PositionalEncoding(d_model, dropout, max_len)
        self.encoder_layers = nn.ModuleList(
            [EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])
        self.decoder_layers = nn.ModuleList(
            [DecoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])
        self.out = nn.Linear(d_model, tgt_vocab_size, bias=False)
        self.out.weight = self.tgt_tok.weight

    @staticmethod
    def shift_right(tgt):
        """Teacher forcing: the decoder reads BOS, y_1, ..., y_{n-1} and is trained to say y_1, ..., y_n."""
        bos = torch.full_like(tgt[:, :1], BOS_ID)
        return torch.cat([bos, tgt[:, :-1]], dim=1)

    def encode(self, src):
        src_mask = (src != PAD_ID).unsqueeze(1)
        x = self.pos(self.src_tok(src) * math.sqrt(self.d_model))
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return x, src_mask

    def decode(self, dec_in, memory, src_mask):
        length = dec_in.size(1)
        causal = torch.tril(torch.ones(length, length, dtype=torch.bool, device=dec_in.device))
        tgt_mask = (dec_in != PAD_ID).unsqueeze(1) & causal
        y = self.pos(self.tgt_tok(dec_in) * math.sqrt(self.d_model))
        for layer in self.decoder_layers:
            y = layer(y, memory, src_mask, tgt_mask)
        return F.log_softmax(self.out(y), dim=-1)

    def forward(self, src, tgt):
        memory, src_mask = self.encode(src)
        return self.decode(self.shift_right(tgt), memory, src_mask)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Seq2SeqTransformer(20, 20, d_model=32, num_heads=4, num_layers=2, d_ff=64)
    src = torch.randint(2, 20, (4, 9))
    tgt = torch.randint(2, 20, (4, 7))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    for step in range(3):
        log_probs = model(src, tgt)
        loss = F.nll_loss(log_probs.reshape(-1, log_probs.size(-1)), tgt.reshape(-1), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(step, loss.item())
