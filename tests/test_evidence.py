"""Evidence before blame (issue 23, ``conformance/diagnosis/evidence.py``): a block that crashes under the checker's call is
the author's fault only where the author's own code crashes too. The attention below takes its padding as (batch,
Lk) key vectors and its causality as a constructor flag: the checker's (batch, Lq, Lk) target mask does not fit it,
while the author's layers and model call it their way without a crash."""
from tests.suite import run_on_source

ATTENTION = '''
import math

import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, h, causal=False):
        super().__init__()
        self.h, self.d_k, self.causal = h, d_model // h, causal
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, query, key, value, key_padding):
        b, lq, lk = query.size(0), query.size(1), key.size(1)
        q = self.w_q(query).view(b, lq, self.h, self.d_k).transpose(1, 2)
        k = self.w_k(key).view(b, lk, self.h, self.d_k).transpose(1, 2)
        v = self.w_v(value).view(b, lk, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        allowed = key_padding.reshape(b, 1, 1, lk)
        if self.causal:
            allowed = allowed & torch.ones(lq, lk, dtype=torch.bool).tril()
        scores = scores.masked_fill(~allowed, -1e9)
        heads = torch.softmax(scores, dim=-1) @ v
        return self.w_o(heads.transpose(1, 2).reshape(b, lq, self.h * self.d_k))
'''

LAYERS_AND_MODEL = '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout):
        super().__init__()
        self.attn, self.ff = MultiHeadAttention(d_model, h), FeedForward(d_model, d_ff)
        self.norm_1, self.norm_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, src_keys):
        x = self.norm_1(x + self.drop(self.attn(x, x, x, src_keys)))
        return self.norm_2(x + self.drop(self.ff(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout):
        super().__init__()
        self.self_attn, self.cross_attn = MultiHeadAttention(d_model, h, causal=True), MultiHeadAttention(d_model, h)
        self.ff = FeedForward(d_model, d_ff)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_keys, tgt_keys):
        x = self.norms[0](x + self.drop(self.self_attn(x, x, x, tgt_keys)))
        x = self.norms[1](x + self.drop(self.cross_attn(x, memory, memory, src_keys)))
        return self.norms[2](x + self.drop(self.ff(x)))


class Transformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=512, h=8, d_ff=2048, N=6, dropout=0.1, pad=0):
        super().__init__()
        self.pad, self.d_model = pad, d_model
        self.src_embed, self.tgt_embed = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
        self.encoder = nn.ModuleList([EncoderLayer(d_model, h, d_ff, dropout) for _ in range(N)])
        self.decoder = nn.ModuleList([DecoderLayer(d_model, h, d_ff, dropout) for _ in range(N)])
        self.out = nn.Linear(d_model, tgt_vocab)

    def positions(self, length):
        pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
        rate = torch.pow(10000.0, -torch.arange(0, self.d_model, 2, dtype=torch.float32) / self.d_model)
        table = torch.zeros(length, self.d_model)
        table[:, 0::2], table[:, 1::2] = torch.sin(pos * rate), torch.cos(pos * rate)
        return table

    def forward(self, src, tgt):
        src_keys, tgt_keys = src != self.pad, tgt != self.pad
        x = self.src_embed(src) * math.sqrt(self.d_model) + self.positions(src.size(1))
        for layer in self.encoder:
            x = layer(x, src_keys)
        y = self.tgt_embed(tgt) * math.sqrt(self.d_model) + self.positions(tgt.size(1))
        for layer in self.decoder:
            y = layer(y, x, src_keys, tgt_keys)
        return self.out(y)
'''

SELECTION = ("-k", "multi_head_attention and future")


def test_a_crash_the_authors_own_layers_do_not_show_is_no_error(tmp_path):
    code, output, report, records = run_on_source(tmp_path, "model.py", ATTENTION + LAYERS_AND_MODEL, *SELECTION)
    record = records[("multi_head_attention", "future_positions_do_not_change_earlier_outputs")]
    assert (record["verdict"], record["cause"]) == ("missing", "adapter.call_not_as_author"), output
    assert "the author's own encoder_layer calls it without a crash" in record["message"], output


def test_the_same_crash_with_no_caller_of_the_authors_stays_an_error(tmp_path):
    code, output, report, records = run_on_source(tmp_path, "attention.py", ATTENTION, *SELECTION)
    record = records[("multi_head_attention", "future_positions_do_not_change_earlier_outputs")]
    assert (record["verdict"], record["cause"]) == ("error", "error.shape_mismatch"), output


STACKS_PASSED_IN_BUILT = '''
import math

import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self, vocab_size, model_dim, heads, ffn_dim, layers, dropout):
        super().__init__()
        self.model_dim = model_dim
        self.embed = nn.Embedding(vocab_size, model_dim)
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(model_dim, heads, ffn_dim, dropout, batch_first=True)
                                    for _ in range(layers))

    def forward(self, src, src_mask):
        assert src.dtype == torch.long, "token ids"
        x = self.embed(src) * math.sqrt(self.model_dim)
        for block in self.blocks:
            x = block(x, src_key_padding_mask=src_mask.squeeze(1).logical_not())
        return x


class Decoder(nn.Module):
    def __init__(self, vocab_size, model_dim, heads, ffn_dim, layers, dropout):
        super().__init__()
        self.model_dim = model_dim
        self.embed = nn.Embedding(vocab_size, model_dim)
        self.blocks = nn.ModuleList(nn.TransformerDecoderLayer(model_dim, heads, ffn_dim, dropout, batch_first=True)
                                    for _ in range(layers))

    def forward(self, tgt, memory, src_mask, tgt_mask):
        y = self.embed(tgt) * math.sqrt(self.model_dim)
        for block in self.blocks:
            y = block(y, memory, tgt_mask=tgt_mask[0].logical_not(),
                      memory_key_padding_mask=src_mask.squeeze(1).logical_not())
        return y


class Transformer(nn.Module):
    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.out = nn.Linear(encoder.model_dim, decoder.embed.num_embeddings)

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.out(self.decoder(tgt, self.encoder(src, src_mask), src_mask, tgt_mask))
'''


def test_the_authors_model_reading_an_attribute_the_reference_block_lacks_is_no_error(tmp_path):
    """Its stacks do not work under the canonical call (they take token ids, one asserting so), while the model's
    own code reads ``encoder.model_dim``, which only the author's stack has: the model is built with the author's
    stacks, as its author builds it, and checked, with no error of the checker's making."""
    code, output, report, records = run_on_source(tmp_path, "model.py", STACKS_PASSED_IN_BUILT, "-k",
                                                  "model and output_shape")
    record = records[("model", "output_shape")]
    assert record["verdict"] == "pass", output

ADD_AND_NORM = '''
import torch
import torch.nn as nn


class AddNorm(nn.Module):
    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm, self.dropout = nn.LayerNorm(d_model), nn.Dropout(dropout)

    def forward(self, residual, {second}):
        return self.norm(residual + self.dropout({second}))
'''


def test_a_two_tensor_add_and_norm_given_the_sub_layer_as_a_function_is_no_error(tmp_path):
    """Its forward takes the sub-layer's output (``forward(residual, sublayer_out)``, LayerNorm(x + y)); the
    canonical call of the residual block gives the sub-layer itself, a function its code never calls."""
    code, output, report, records = run_on_source(tmp_path, "add_norm.py", ADD_AND_NORM.format(second="y"),
                                                  "-k", "sublayer_connection and output_shape")
    record = records[("sublayer_connection", "output_shape")]
    assert (record["verdict"], record["cause"]) == ("missing", "adapter.call_not_as_author"), output
    assert "takes a tensor as 'y'" in record["message"], output


def test_a_sub_layer_argument_used_uncalled_stays_an_error(tmp_path):
    """The same code with the argument named for the sub-layer: an author's slip (``x + sublayer``), reported."""
    code, output, report, records = run_on_source(tmp_path, "add_norm.py", ADD_AND_NORM.format(second="sublayer"),
                                                  "-k", "sublayer_connection and output_shape")
    record = records[("sublayer_connection", "output_shape")]
    assert record["verdict"] == "error", output


FOLDED_HEADS = '''
import math

import torch
import torch.nn as nn


class DotProductAttention(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        scores = torch.bmm(query, key.transpose(1, 2)) / math.sqrt(query.shape[-1])
        return torch.bmm(self.dropout(torch.softmax(scores, dim=-1)), value)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, h, dropout):
        super().__init__()
        self.h = h
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask):
        b = query.size(0)
        q, k, v = (w(x).view(b, x.size(1), self.h, -1).transpose(1, 2)
                   for w, x in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        weights = torch.softmax(torch.bmm(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1)), dim=-1)
        return self.w_o(torch.bmm(weights, v).transpose(1, 2).reshape(b, query.size(1), -1))
'''


def test_a_kernel_of_folded_heads_given_four_axes_is_no_error_while_a_block_giving_bmm_four_is(tmp_path):
    """The kernel takes the heads folded into the batch (``torch.bmm`` on its arguments as given, 3-D): the
    checker's 4-D call of it breaks what torch requires of them, no verdict on the code; the multi-head block that
    splits its heads into 4-D itself and hands them to ``torch.bmm`` crashes the same way, and that is the author's
    error."""
    code, output, report, records = run_on_source(tmp_path, "attention.py", FOLDED_HEADS,
                                                  "-k", "attention and output_shape")
    kernel, block = records[("attention", "output_shape")], records[("multi_head_attention", "output_shape")]
    assert (kernel["verdict"], kernel["cause"]) == ("missing", "adapter.precondition_not_met"), output
    assert "torch.bmm(query, key.transpose(1, 2))" in kernel["message"], output
    assert block["verdict"] == "error", output
