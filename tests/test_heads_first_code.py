"""Code laid out otherwise than the checker's own calls, read as its author runs it: attention weights computed
heads first, (h, batch, Lq, Lk); per-head projections held as (h, 1, d_model, d_k) parameters without biases;
sub-blocks called by keywords alone; and a block that moves its table to CUDA itself, run where there is none.
Each correct version passes (or, for the accelerator, is ``missing`` with what it needs), never a finding."""
import textwrap

import torch

from conformance.checks.test_masks import samples_axis
from tests.suite import run_on_source

HEADS_FIRST = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class HeadsFirstAttention(nn.Module):
        def __init__(self, d_model, h, dropout=0.1):
            super().__init__()
            self.h, self.d_k = h, d_model // h
            self.w_q, self.w_k, self.w_v = (nn.Parameter(torch.randn(h, 1, d_model, d_model // h) / d_model ** 0.5)
                                            for _ in range(3))
            self.w_o = nn.Linear(d_model, d_model, bias=False)
            self.dropout = nn.Dropout(dropout)

        def forward(self, query, key, value, mask=None):
            q = query.unsqueeze(0) @ self.w_q           # (h, batch, Lq, d_k)
            k, v = key.unsqueeze(0) @ self.w_k, value.unsqueeze(0) @ self.w_v
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
            if mask is not None:
                scores = scores.masked_fill(mask.unsqueeze(0) == 0, float("-inf"))
            weights = self.dropout(scores.softmax(-1))
            heads = weights @ v                         # (h, batch, Lq, d_k)
            return self.w_o(torch.cat(list(heads), -1))


    class FeedForward(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.1):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))

        def forward(self, x):
            return self.net(x)


    class EncoderLayer(nn.Module):
        def __init__(self, d_model, h, d_ff, dropout=0.1):
            super().__init__()
            self.attention, self.feed_forward = HeadsFirstAttention(d_model, h, dropout), FeedForward(d_model, d_ff, dropout)
            self.norm1, self.norm2, self.dropout = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.Dropout(dropout)

        def forward(self, x, mask=None):
            x = self.norm1(x + self.dropout(self.attention(query=x, key=x, value=x, mask=mask)))
            return self.norm2(x + self.dropout(self.feed_forward(x=x)))


    class DecoderLayer(nn.Module):
        def __init__(self, d_model, h, d_ff, dropout=0.1):
            super().__init__()
            self.self_attention = HeadsFirstAttention(d_model, h, dropout)
            self.cross_attention = HeadsFirstAttention(d_model, h, dropout)
            self.feed_forward = FeedForward(d_model, d_ff, dropout)
            self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
            self.dropout = nn.Dropout(dropout)

        def forward(self, x, memory, src_mask=None, tgt_mask=None):
            x = self.norms[0](x + self.dropout(self.self_attention(query=x, key=x, value=x, mask=tgt_mask)))
            x = self.norms[1](x + self.dropout(self.cross_attention(query=x, key=memory, value=memory, mask=src_mask)))
            return self.norms[2](x + self.dropout(self.feed_forward(x=x)))


    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, dropout=0.1, max_len=5000):
            super().__init__()
            position = torch.arange(max_len).unsqueeze(1)
            frequencies = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            table = torch.zeros(max_len, d_model)
            table[:, 0::2], table[:, 1::2] = torch.sin(position * frequencies), torch.cos(position * frequencies)
            self.register_buffer("table", table)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            return self.dropout(x + self.table[:x.size(1)])


    class Transformer(nn.Module):
        def __init__(self, src_vocab, tgt_vocab, d_model=512, h=8, d_ff=2048, N=6, dropout=0.1):
            super().__init__()
            self.d_model = d_model
            self.src_embed, self.tgt_embed = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
            self.positions = PositionalEncoding(d_model, dropout)
            self.encoder_layers = nn.ModuleList([EncoderLayer(d_model, h, d_ff, dropout) for _ in range(N)])
            self.decoder_layers = nn.ModuleList([DecoderLayer(d_model, h, d_ff, dropout) for _ in range(N)])
            self.generator = nn.Linear(d_model, tgt_vocab)

        def forward(self, src, tgt, src_mask, tgt_mask):
            memory = self.positions(x=self.src_embed(src) * math.sqrt(self.d_model))
            for layer in self.encoder_layers:
                memory = layer(x=memory, mask=src_mask)
            x = self.positions(x=self.tgt_embed(tgt) * math.sqrt(self.d_model))
            for layer in self.decoder_layers:
                x = layer(x=x, memory=memory, src_mask=src_mask, tgt_mask=tgt_mask)
            return self.generator(x).log_softmax(-1)
''')


def test_heads_first_weights_per_head_parameters_and_keyword_calls_are_read_as_written(tmp_path):
    selected = ("masked_attention_weights_are_zero or (parameter_count and multi_head_attention) or "
                "(dropout_on_the_sums_inside_the_block and model)")
    _, output, report, records = run_on_source(tmp_path, "heads_first.py", HEADS_FIRST, "-k", selected)
    assert report is not None, output
    for key in (("multi_head_attention", "masked_attention_weights_are_zero"),
                ("multi_head_attention", "parameter_count"), ("model", "dropout_on_the_sums_inside_the_block")):
        assert records[key]["verdict"] == "pass", records[key]


def test_the_samples_axis_of_heads_first_weights_is_the_one_each_padding_mask_follows():
    """A padding mask hides the same keys from every head and query of a sample: the axis along which the zero
    weights follow the samples is the samples' axis, whichever leading axis holds them."""
    keep = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1], [1, 1, 0, 1, 0]], dtype=torch.bool)
    batch_first = torch.rand(3, 3, 2, 5).masked_fill(~keep[:, None, None, :], 0)  # (batch, h, Lq, Lk)
    assert samples_axis(batch_first, 3) == 0
    assert samples_axis(batch_first.transpose(0, 1), 3) == 1    # (h, batch, Lq, Lk), as many heads as samples
    four_heads = torch.rand(4, 3, 2, 5).masked_fill(~keep[None, :, None, :], 0)
    assert samples_axis(four_heads, 3) == 1
    assert samples_axis(torch.rand(4, 3, 2, 5), 3) == 0          # nothing masked: nothing to tell it by


CUDA_TABLE = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, dropout=0.1, max_len=5000):
            super().__init__()
            self.d_model, self.max_len, self.dropout = d_model, max_len, nn.Dropout(dropout)

        def table(self, length):
            position = torch.arange(length).unsqueeze(1).cuda()  # (its author trains on a GPU)
            frequencies = torch.exp(torch.arange(0, self.d_model, 2) * (-math.log(10000.0) / self.d_model)).cuda()
            table = torch.zeros(length, self.d_model).cuda()
            table[:, 0::2], table[:, 1::2] = torch.sin(position * frequencies), torch.cos(position * frequencies)
            return table

        def forward(self, x):
            return self.dropout(x + self.table(x.size(1)))
''')


def test_code_moving_its_tensors_to_cuda_is_missing_an_accelerator_not_at_fault(tmp_path):
    if torch.cuda.is_available():  # (where there is one, the check runs on it with --device=cuda)
        return
    _, output, report, records = run_on_source(tmp_path, "cuda_table.py", CUDA_TABLE, "-k", "output_shape")
    assert report is not None, output
    record = records[("positional_encoding", "output_shape")]
    assert (record["verdict"], record["cause"]) == ("missing", "adapter.needs_accelerator"), record
    assert "--device=cuda" in record["message"]
