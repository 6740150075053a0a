"""Sizes some classes read from module constants while others take them as arguments: the constants a class's own
code reads are set to the checker's configuration before it builds, as the author sets them before building, so the
author is never blamed for a width the checker did not give, while the paper's bugs in the same code stay named."""
import textwrap

import pytest
import torch

from adapters import observe
from adapters.loading import load_code
from adapters.submission import load_implementation
from conformance.contract.harness import Case, canonical_inputs
from conformance.contract.interface import Config
from tests.suite import run_suite

MIXED = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn

    EMBED_DIM = 512
    FF_DIM = 2048
    P_DROP = 0.1


    class SelfAttention(nn.Module):
        """Heads of EMBED_DIM // heads, every projection EMBED_DIM wide (the module's constant)."""
        def __init__(self, heads):
            super().__init__()
            assert EMBED_DIM % heads == 0
            self.heads, self.d_k = heads, EMBED_DIM // heads
            self.q, self.k, self.v, self.o = (nn.Linear(EMBED_DIM, EMBED_DIM) for _ in range(4))

        def forward(self, query, key, value, mask=None):
            b = query.size(0)
            split = lambda t: t.view(b, -1, self.heads, self.d_k).transpose(1, 2)
            q, k, v = split(self.q(query)), split(self.k(key)), split(self.v(value))
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
            if mask is not None:
                scores = scores.masked_fill(~mask, -1e9)
            joined = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, -1, EMBED_DIM)
            return self.o(joined)


    class PositionWise(nn.Module):
        """Takes its width as an argument, reads its inner width from the constant."""
        def __init__(self, dim):
            super().__init__()
            self.up, self.down = nn.Linear(dim, FF_DIM), nn.Linear(FF_DIM, dim)

        def forward(self, x):
            return self.down(torch.relu(self.up(x)))


    class EncoderLayer(nn.Module):
        def __init__(self, dim, heads, p_drop):
            super().__init__()
            self.attention, self.ffn = SelfAttention(heads), PositionWise(dim)
            self.n1, self.n2, self.drop = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.Dropout(p_drop)

        def forward(self, x, mask):
            x = self.n1(x + self.drop(self.attention(x, x, x, mask)))
            return self.n2(x + self.drop(self.ffn(x)))
''')


def loaded_module(tmp_path, source):
    path = tmp_path / "mixed.py"
    path.write_text(source)
    loaded = load_code(path)
    module = vars(loaded.module)
    classes = [module[name] for name in ("SelfAttention", "PositionWise", "EncoderLayer")]
    return loaded, module, classes


def test_the_constants_a_class_reads_are_knobs_though_other_classes_take_sizes(tmp_path):
    loaded, module, classes = loaded_module(tmp_path, MIXED)
    knobs = observe.size_knobs(dict(module), loaded.project_modules(), classes)
    assert {(name, field) for values, name, field in knobs if values is module} == {
        ("EMBED_DIM", "d_model"), ("FF_DIM", "d_ff")}  # the rate is no knob: a rate given as an argument must reach it
    assert all(values is module for values, _, _ in knobs)  # set where the classes read them, not in a copy


def test_a_constant_no_class_reads_is_no_knob(tmp_path):
    source = MIXED.replace("nn.Linear(dim, FF_DIM), nn.Linear(FF_DIM, dim)",
                           "nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)")
    loaded, module, classes = loaded_module(tmp_path, source)
    assert {name for _, name, _ in observe.size_knobs(module, loaded.project_modules(), classes)} == {"EMBED_DIM"}


def test_a_block_reading_the_width_constant_is_built_at_the_checkers_width(tmp_path):
    path = tmp_path / "mixed.py"
    path.write_text(MIXED)
    impl = load_implementation(str(path))
    case = Case(impl, Config(d_model=8, h=2, d_ff=12), batch=2, src_len=3, tgt_len=4, dtype=torch.float32, seed=0)
    block = case.build("multi_head_attention")
    assert block(*canonical_inputs(case, "multi_head_attention")).shape == (2, 4, 8)
    layer = case.build("encoder_layer")
    assert getattr(layer, "inner", layer).ffn.up.weight.shape == (12, 8)


@pytest.mark.parametrize("planted, expected", [
    ((), None),
    ((("/ math.sqrt(self.d_k)", "/ self.d_k"),), "multi_head_attention.scaled_by_d_k"),
    ((("nn.Linear(FF_DIM, dim)", "nn.Linear(FF_DIM, dim)\n        self.drop = nn.Dropout(P_DROP)"),
      ("return self.down(torch.relu(self.up(x)))", "return self.drop(self.down(torch.relu(self.up(x))))")),
     "encoder_layer.dropout_rate_ignored"),
])
def test_mixed_constants_pass_and_a_planted_bug_is_named(tmp_path, planted, expected):
    """No fail or error on the correct code; a wrong scale planted in the constant-reading attention is named, and
    so is a dropout whose rate the constant sets while the layer takes its rate as an argument (§5.4)."""
    path = tmp_path / "mixed.py"
    source = MIXED
    for old, new in planted:
        source = source.replace(old, new)
    path.write_text(source)
    code, output, report = run_suite(f"--impl={path}", "-k", "multi_head_attention or feed_forward or encoder_layer",
                                     tmp_path=tmp_path)
    flagged = {c["cause"] for c in report["checks"] if c["verdict"] in ("fail", "error")}
    assert expected in flagged if expected else flagged == set(), output
