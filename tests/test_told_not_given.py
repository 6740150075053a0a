"""Blocks told about their input rather than given it, and a scale placed outside its block, as public code writes
them: a positional block called ``pos(L, device)`` for the rows of the first ``L`` positions (§3.5), a model
``forward(src, tgt, pad_id)`` that makes its masks from the tokens (§3.2.3), and the embeddings' sqrt(d_model)
applied by the model rather than the embedding block (§3.4). Each style checked without a false alarm, and a
mistake planted in it still named."""
import textwrap

import pytest
import torch

from adapters.call_plans import call_plan, forward_parameters
from adapters.names import CANONICAL_CALLS
from tests.suite import run_on_source, verdicts

COMMON = textwrap.dedent('''
    import math
    import torch
    from torch import nn


    def keep_tokens(ids, pad):
        """(batch, 1, 1, L): True where a key is a real token."""
        return (ids != pad).unsqueeze(1).unsqueeze(2)


    def no_peeking(n):
        """(1, 1, n, n): True on and below the diagonal."""
        return torch.ones(n, n, dtype=torch.bool).tril().view(1, 1, n, n)


    class Attention(nn.Module):
        def __init__(self, d_model, heads):
            super().__init__()
            self.heads, self.width = heads, d_model // heads
            self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

        def forward(self, query, key, value, mask=None):
            b = query.size(0)
            q, k, v = (proj(t).view(b, -1, self.heads, self.width).transpose(1, 2)
                       for proj, t in ((self.q, query), (self.k, key), (self.v, value)))
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.width)
            if mask is not None:
                scores = scores.masked_fill(mask == 0, -1e9)
            mixed = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, -1, self.heads * self.width)
            return self.o(mixed)


    class FeedForward(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.up, self.down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

        def forward(self, x):
            return self.down(torch.relu(self.up(x)))


    class EncoderLayer(nn.Module):
        def __init__(self, d_model, heads, d_ff, dropout=0.1):
            super().__init__()
            self.attn, self.ff = Attention(d_model, heads), FeedForward(d_model, d_ff)
            self.n1, self.n2, self.drop = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.Dropout(dropout)

        def forward(self, x, mask):
            x = self.n1(x + self.drop(self.attn(x, x, x, mask)))
            return self.n2(x + self.drop(self.ff(x)))


    class DecoderLayer(nn.Module):
        def __init__(self, d_model, heads, d_ff, dropout=0.1):
            super().__init__()
            self.self_attn, self.cross_attn = Attention(d_model, heads), Attention(d_model, heads)
            self.ff = FeedForward(d_model, d_ff)
            self.n1, self.n2, self.n3 = (nn.LayerNorm(d_model) for _ in range(3))
            self.drop = nn.Dropout(dropout)

        def forward(self, x, memory, src_mask, tgt_mask):
            x = self.n1(x + self.drop(self.self_attn(x, x, x, tgt_mask)))
            x = self.n2(x + self.drop(self.cross_attn(x, memory, memory, src_mask)))
            return self.n3(x + self.drop(self.ff(x)))
''')

TOLD = COMMON + textwrap.dedent('''

    class PositionTable(nn.Module):
        """Sinusoids of §3.5, looked up for the first L positions."""

        def __init__(self, d_model, max_len=128):
            super().__init__()
            where = torch.arange(max_len, dtype=torch.float).unsqueeze(1)
            rate = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float) / d_model)
            grid = torch.zeros(max_len, d_model)
            grid[:, 0::2], grid[:, 1::2] = torch.sin(where * rate), torch.cos(where * rate)
            self.register_buffer("grid", grid)

        def forward(self, L, device):
            return self.grid[torch.arange(L, device=device)]


    class TokenEmbedding(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.lut, self.d_model = nn.Embedding(vocab_size, d_model), d_model

        def forward(self, ids):
            return self.lut(ids) * math.sqrt(self.d_model)


    class Transformer(nn.Module):
        def __init__(self, src_vocab, tgt_vocab, d_model=64, heads=4, d_ff=128, layers=2, dropout=0.1):
            super().__init__()
            self.src_emb, self.tgt_emb = TokenEmbedding(src_vocab, d_model), TokenEmbedding(tgt_vocab, d_model)
            self.pos, self.drop = PositionTable(d_model), nn.Dropout(dropout)
            self.enc = nn.ModuleList(EncoderLayer(d_model, heads, d_ff, dropout) for _ in range(layers))
            self.dec = nn.ModuleList(DecoderLayer(d_model, heads, d_ff, dropout) for _ in range(layers))
            self.out = nn.Linear(d_model, tgt_vocab)

        def embed(self, lookup, ids):
            return self.drop(lookup(ids) + self.pos(ids.size(1), ids.device))

        def forward(self, src, tgt, pad_id):
            src_mask = keep_tokens(src, pad_id)
            tgt_mask = keep_tokens(tgt, pad_id) & no_peeking(tgt.size(1)).to(tgt.device)
            memory = self.embed(self.src_emb, src)
            for layer in self.enc:
                memory = layer(memory, src_mask)
            x = self.embed(self.tgt_emb, tgt)
            for layer in self.dec:
                x = layer(x, memory, src_mask, tgt_mask)
            return self.out(x).log_softmax(-1)
''')

WRONG_FREQUENCIES = ("-torch.arange(0, d_model, 2, dtype=torch.float) / d_model",
                     "-2 * torch.arange(0, d_model, 2, dtype=torch.float) / d_model")
UNDROPPED = ("return self.drop(lookup(ids) + self.pos(ids.size(1), ids.device))",
             "return lookup(ids) + self.pos(ids.size(1), ids.device)")
PEEKING = ("keep_tokens(tgt, pad_id) & no_peeking(tgt.size(1)).to(tgt.device)", "keep_tokens(tgt, pad_id)")


def fails(report):
    return verdicts(report, "fail") | verdicts(report, "error")


def test_a_pad_index_parameter_gets_the_pad_index_and_a_length_parameter_the_length():
    namespace = {}
    exec(TOLD, namespace)
    model = namespace["Transformer"](11, 11, 16, 4, 32, 1)
    assert call_plan(forward_parameters(model), CANONICAL_CALLS["model"]) == ["src", "tgt", "value:0"]
    assert call_plan(forward_parameters(model.pos), CANONICAL_CALLS["positional_encoding"]) == ["length", "device"]
    layer = namespace["EncoderLayer"](16, 4, 32)
    assert call_plan(forward_parameters(layer), CANONICAL_CALLS["encoder_layer"]) == ["x", "src_mask"]


@pytest.mark.parametrize("edit, cause", [(None, None),
                                         (WRONG_FREQUENCIES, "positional_encoding.exponent_uses_column_index"),
                                         (UNDROPPED, "model.positions_not_dropped_out"),
                                         (PEEKING, "model.future_visible")])
def test_told_lengths_and_pad_indices_are_checked_as_the_author_calls_them(tmp_path, edit, cause):
    source = TOLD.replace(*edit) if edit else TOLD
    assert edit is None or source != TOLD
    code, output, report, records = run_on_source(tmp_path, "told.py", source)
    assert report is not None, output[-3000:]
    found = fails(report)
    if cause is None:
        assert found == set(), output[-3000:]
        assert records[("positional_encoding", "values_match_closed_form")]["verdict"] == "pass"
        assert records[("model", "masked_keys_do_not_change_outputs")]["verdict"] == "pass"
    else:
        assert cause in {c for _, _, c in found}, sorted(found)


SCALED_BY_THE_MODEL = COMMON + textwrap.dedent('''

    class Embeddings(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.rows, self.d_model = nn.Embedding(vocab_size, d_model), d_model

        def forward(self, ids):
            return self.rows(ids)


    class Positions(nn.Module):
        def __init__(self, d_model, dropout=0.1, max_len=128):
            super().__init__()
            where = torch.arange(max_len, dtype=torch.float).unsqueeze(1)
            rate = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float) / d_model)
            grid = torch.zeros(1, max_len, d_model)
            grid[0, :, 0::2], grid[0, :, 1::2] = torch.sin(where * rate), torch.cos(where * rate)
            self.register_buffer("grid", grid)
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            return self.drop(x + self.grid[:, :x.size(1)])


    class Seq2Seq(nn.Module):
        def __init__(self, src_vocab, tgt_vocab, d_model=64, heads=4, d_ff=128, layers=2, dropout=0.1):
            super().__init__()
            self.src_emb, self.tgt_emb = Embeddings(src_vocab, d_model), Embeddings(tgt_vocab, d_model)
            self.pos = Positions(d_model, dropout)
            self.enc = nn.ModuleList(EncoderLayer(d_model, heads, d_ff, dropout) for _ in range(layers))
            self.dec = nn.ModuleList(DecoderLayer(d_model, heads, d_ff, dropout) for _ in range(layers))
            self.out = nn.Linear(d_model, tgt_vocab)
            self.scale = math.sqrt(d_model)

        def forward(self, src, tgt, src_mask, tgt_mask):
            memory = self.pos(self.src_emb(src) * self.scale)
            for layer in self.enc:
                memory = layer(memory, src_mask)
            x = self.pos(self.tgt_emb(tgt) * self.scale)
            for layer in self.dec:
                x = layer(x, memory, src_mask, tgt_mask)
            return self.out(x).log_softmax(-1)
''')

IN_THE_POSITIONS = ("return self.drop(x + self.grid", "return self.drop(x * math.sqrt(x.size(-1)) + self.grid")
NOWHERE = (" * self.scale", "")


@pytest.mark.parametrize("edits, deviations, cause", [
    ((), {"embedding.scaled_by_its_caller"}, None),
    ((IN_THE_POSITIONS, NOWHERE), {"positional_encoding.input_scaled_by_sqrt_d_model"}, None),
    ((NOWHERE,), set(), "embedding.not_scaled")])
def test_the_scale_is_looked_for_where_the_model_applies_it(tmp_path, edits, deviations, cause):
    source = SCALED_BY_THE_MODEL
    for old, new in edits:
        assert old in source
        source = source.replace(old, new)
    code, output, report, records = run_on_source(tmp_path, "scaled.py", source, "-k",
                                                  "embedding_scaled or added_to_input or reach_the_stacks")
    assert report is not None, output[-3000:]
    found = {c for _, _, c in fails(report)}
    named = {cause for _, _, cause in verdicts(report, "deviation")}
    assert named & {"embedding.scaled_by_its_caller", "positional_encoding.input_scaled_by_sqrt_d_model"} == deviations
    assert found == ({cause, "model.embedding_not_scaled"} if cause else set()), sorted(found)


def test_a_scale_written_in_a_model_the_checker_cannot_run_leaves_the_embedding_unjudged(tmp_path):
    source = SCALED_BY_THE_MODEL
    for old, new in (("self.scale = math.sqrt(d_model)", "self.d_model = d_model"),
                     (" * self.scale", " * math.sqrt(self.d_model)"),
                     ("def forward(self, src, tgt, src_mask, tgt_mask):\n",
                      "def forward(self, batch):\n        src, tgt, src_mask, tgt_mask = batch\n")):
        assert old in source
        source = source.replace(old, new)
    code, output, report, records = run_on_source(tmp_path, "unrun.py", source, "-k", "embedding_scaled")
    assert report is not None, output[-3000:]
    record = records[("embedding", "embedding_scaled_by_sqrt_d_model")]
    assert (record["verdict"], record["cause"]) == ("missing", "adapter.scaling_caller_not_run"), record
    assert "math.sqrt(self.d_model)" in str(record)
