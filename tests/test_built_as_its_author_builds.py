"""A crash that only the checker's way of building a block brings about is no finding: a constructor whose assert
reads an attribute of its arguments (``assert encoder.width == decoder.width``, written for the configurations its
author's code passes) states a precondition, whether the assert fails or cannot even be read on what the checker gave
it; and a model that crashes at the checker's small sizes because its code fixes a width of its own (a table 512
wide by a default argument) is read at the paper's base sizes, its masks in the shape its layers take there, and
found to run as its author builds it (``adapter.sizes_fixed_by_the_code``), never blamed for the crash."""
import importlib.util
import textwrap

import torch
import torch.nn as nn

from conformance.diagnosis.classify import stated_precondition
from tests.suite import run_on_source

ASSERTS_ON_CONFIGURATIONS = textwrap.dedent('''
    import torch.nn as nn


    class Joined(nn.Module):
        def __init__(self, encoder, decoder):
            super().__init__()
            assert encoder.width == decoder.width
            self.width = encoder.width


    class Unset(nn.Module):
        def __init__(self, encoder):
            super().__init__()
            assert self.width == encoder
''')


def raised(call):
    try:
        call()
    except Exception as exc:  # (the exception under test)
        return exc
    raise AssertionError("nothing raised")


def test_an_assert_that_cannot_be_read_on_the_arguments_given_states_a_precondition(tmp_path):
    path = tmp_path / "asserts_on_configurations.py"
    path.write_text(ASSERTS_ON_CONFIGURATIONS)
    spec = importlib.util.spec_from_file_location("asserts_on_configurations", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    given_modules = raised(lambda: module.Joined(nn.Linear(2, 2), nn.Linear(2, 2)))  # (torch's __getattr__ raises)
    assert isinstance(given_modules, AttributeError)
    assert "assert encoder.width == decoder.width" in stated_precondition(given_modules, given_modules.__traceback__)
    own_attribute = raised(lambda: module.Unset(3))  # (an attribute of its own never set: no precondition)
    assert isinstance(own_attribute, AttributeError)
    assert stated_precondition(own_attribute, own_attribute.__traceback__) is None



ASSERTS_ON_SHAPES_READ_FROM_ARGUMENTS = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, src, tgt, src_mask, tgt_mask):
            B, S = src.shape
            T = tgt.size(1)
            assert src_mask.shape == (B, S)
            assert tgt_mask.shape == (B, T, T)
            return tgt


    class Counted(nn.Module):
        width = 4

        def forward(self, x):
            expected = self.width
            assert x.size(-1) == expected
            return x
''')


def test_an_assert_on_sizes_read_from_the_arguments_states_a_precondition(tmp_path):
    """Round 13 of public code (2026-11-27): ``assert src_mask.shape == (B, S)`` after ``B, S = src.shape`` tests
    only what the caller gave; a size of the block's own (``self.width``) is no precondition."""
    path = tmp_path / "asserts_on_shapes.py"
    path.write_text(ASSERTS_ON_SHAPES_READ_FROM_ARGUMENTS)
    spec = importlib.util.spec_from_file_location("asserts_on_shapes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    src, tgt = torch.ones(2, 5, dtype=torch.long), torch.ones(2, 4, dtype=torch.long)
    wrong_rank = raised(lambda: module.Model()(src, tgt, torch.ones(2, 1, 5, dtype=torch.bool),
                                               torch.ones(2, 4, 4, dtype=torch.bool)))
    assert "assert src_mask.shape == (B, S)" in stated_precondition(wrong_rank, wrong_rank.__traceback__)
    own_width = raised(lambda: module.Counted()(torch.ones(2, 3)))
    assert stated_precondition(own_width, own_width.__traceback__) is None


WIDTH_FIXED_BY_A_DEFAULT = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class PositionalTable(nn.Module):
        def __init__(self, length, width=512):
            super().__init__()
            position = torch.arange(length).unsqueeze(1)
            rates = torch.exp(torch.arange(0, width, 2) * (-math.log(10000.0) / width))
            table = torch.zeros(length, width)
            table[:, 0::2], table[:, 1::2] = torch.sin(position * rates), torch.cos(position * rates)
            self.register_buffer("table", table)

        def forward(self, x):
            return x + self.table[:x.size(1)].unsqueeze(0)


    class HeadsAttention(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.heads, self.size = heads, width // heads
            self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))

        def forward(self, query, key, value, mask=None):
            batch = query.size(0)
            split = lambda t: t.view(batch, -1, self.heads, self.size).transpose(1, 2)
            scores = split(self.q(query)) @ split(self.k(key)).transpose(-2, -1) / math.sqrt(self.size)
            if mask is not None:
                scores = scores.masked_fill(mask == 0, float("-inf"))
            heads = scores.softmax(-1) @ split(self.v(value))
            return self.o(heads.transpose(1, 2).reshape(batch, -1, self.heads * self.size))


    class Block(nn.Module):
        def __init__(self, width, heads, hidden, dropout, cross=False):
            super().__init__()
            self.attend = HeadsAttention(width, heads)
            self.cross = HeadsAttention(width, heads) if cross else None
            self.ff = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width))
            self.norms = nn.ModuleList([nn.LayerNorm(width) for _ in range(3 if cross else 2)])
            self.drop = nn.Dropout(dropout)

        def forward(self, x, memory=None, src_mask=None, tgt_mask=None):
            x = self.norms[0](x + self.drop(self.attend(x, x, x, tgt_mask if self.cross else src_mask)))
            if self.cross is not None:
                x = self.norms[1](x + self.drop(self.cross(x, memory, memory, src_mask)))
            return self.norms[-1](x + self.drop(self.ff(x)))


    class Transformer(nn.Module):
        def __init__(self, width, heads, hidden, src_vocab, tgt_vocab, dropout, layers=6):
            super().__init__()
            self.src_embed, self.tgt_embed = nn.Embedding(src_vocab, width), nn.Embedding(tgt_vocab, width)
            self.positions = PositionalTable(width)
            self.encoder = nn.ModuleList([Block(width, heads, hidden, dropout) for _ in range(layers)])
            self.decoder = nn.ModuleList([Block(width, heads, hidden, dropout, cross=True) for _ in range(layers)])
            self.out = nn.Linear(width, tgt_vocab)

        def forward(self, src, tgt, src_mask=None, tgt_mask=None):
            memory = self.positions(self.src_embed(src))
            for block in self.encoder:
                memory = block(memory, src_mask=src_mask)
            x = self.positions(self.tgt_embed(tgt))
            for block in self.decoder:
                x = block(x, memory, src_mask, tgt_mask)
            return self.out(x).log_softmax(-1)
''')


def test_a_model_fixing_a_width_of_its_own_is_read_at_the_papers_sizes_with_the_masks_its_layers_take(tmp_path):
    _, output, report, records = run_on_source(tmp_path, "width_fixed_by_a_default.py", WIDTH_FIXED_BY_A_DEFAULT,
                                               "-k", "model and (output_shape or masked_keys_do_not_change_outputs)")
    assert report is not None, output
    for check in ("output_shape", "masked_keys_do_not_change_outputs"):
        record = records[("model", check)]
        assert (record["verdict"], record["cause"]) == ("missing", "adapter.sizes_fixed_by_the_code"), record
