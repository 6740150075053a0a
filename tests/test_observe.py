"""``adapters.observe``: the author's own usage observed (main blocks, scripts), sizes the code fixes itself, and the
calls and classifications that follow from them (padding given as lengths, a pad index the code fixes)."""
import inspect
import json
import sys
import textwrap
import time
import types

import pytest
import torch

from adapters import observe
from adapters.call_plans import call_plan, lengths_of
from adapters.loading import load_code
from adapters.masks import LENGTHS, mask_lengths
from adapters.submission import load_implementation
from conformance.contract.harness import Case, canonical_inputs, if_the_checker_sets
from conformance.contract.interface import Config, Implementation, Supports
from conformance.diagnosis.classify import classify
from conformance.contract.verdicts import MISSING, Failure, Missing

from tests.suite import run_on_source

BLOCKS = '''
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.inner(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(n_layers)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
'''

MAIN = '''
if __name__ == "__main__":
    d_model = 6
    n_layers = 2
    net = Net()
    out = net(torch.zeros(3, 4, d_model))
    while True:  # a training loop that never ends
        net(torch.zeros(3, 4, d_model)).sum().backward()
'''


def notebook(path, *cells):
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": c} for c in cells]}))
    return path


def test_a_notebooks_main_block_is_run_and_stopped_after_the_models_forward_pass(tmp_path):
    loaded = load_code(notebook(tmp_path / "nb.ipynb", BLOCKS, MAIN))
    modules = loaded.project_modules()
    classes = [vars(loaded.module)["Block"], vars(loaded.module)["Net"]]
    start = time.monotonic()
    seen = observe.observe(loaded, modules, classes, budget=10)
    assert time.monotonic() - start < 5  # stopped by the sentinel, not by the budget
    assert seen.completed == "Net"
    assert seen.constructed["Net"] == ((), {})
    assert seen.calls["Block"].args == (("tensor", (3, 4, 6), "float32"),)
    assert {"d_model", "n_layers"} <= set(seen.assigned)
    assert vars(loaded.module)["d_model"] == 6  # the globals the author's classes read are set
    assert "stopped after the forward pass of Net" in seen.describe()[0]
    knobs = observe.size_knobs(vars(loaded.module), modules, classes)
    assert sorted((name, field) for _, name, field in knobs) == [("d_model", "d_model"), ("n_layers", "N")]


def test_sizes_are_not_fixed_where_the_classes_take_them(tmp_path):
    source = BLOCKS.replace("def __init__(self):\n        super().__init__()\n        self.inner",
                            "def __init__(self, d_model=4):\n        super().__init__()\n        self.inner")
    loaded = load_code(notebook(tmp_path / "nb.ipynb", source, "d_model = 6\nn_layers = 2\n"))
    module = vars(loaded.module)
    knobs = observe.size_knobs(module, loaded.project_modules(), [module["Block"], module["Net"]])
    assert {(name, field) for _, name, field in knobs} == {("n_layers", "N")}  # Net reads it; Block takes d_model


def test_a_projects_demo_script_is_run_as_main(tmp_path):
    package = tmp_path / "proj" / "observed_model"  # a name no other test imports (sys.modules is shared)
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "constants.py").write_text("D_MODEL = 6\nN_LAYERS = 2\n")
    (package / "net.py").write_text("from observed_model.constants import D_MODEL as d_model, N_LAYERS as n_layers\n"
                                    + BLOCKS)
    (tmp_path / "proj" / "demo.py").write_text("import torch\nfrom observed_model.net import Net\n"
                                               "print(Net()(torch.zeros(1, 2, 6)).shape)\nraise SystemExit(3)\n")
    loaded = load_code(tmp_path / "proj")
    modules = loaded.project_modules()
    net = sys.modules["observed_model.net"]
    seen = observe.observe(loaded, modules, [net.Block, net.Net], budget=10)
    assert seen.completed == "Net" and seen.ran == ["demo.py (stopped after the forward pass of Net)"]
    knobs = observe.size_knobs(loaded.namespace(modules), modules, [net.Block, net.Net])
    assert {(name, field) for _, name, field in knobs} == {("d_model", "d_model"), ("n_layers", "N"),
                                                           ("D_MODEL", "d_model"), ("N_LAYERS", "N")}


def test_code_reading_global_sizes_is_built_through_them(tmp_path):
    """End to end: a notebook whose blocks read globals set by its main block is built at the checker's sizes, set
    through those globals."""
    path = notebook(tmp_path / "nb.ipynb", BLOCKS.replace("class Net", "class Encoder"),
                    MAIN.replace("Net()", "Encoder()"))
    impl = load_implementation(str(path))
    assert {(name, field) for _, name, field in impl.size_knobs} == {("d_model", "d_model"), ("n_layers", "N")}
    assert {"d_model", "N"} <= impl.supports("encoder").hyperparameters
    case = Case(impl, Config(d_model=8, h=2, N=3), batch=1, src_len=3, tgt_len=2, dtype=torch.float32, seed=0)
    encoder = case.build("encoder")
    assert encoder(*canonical_inputs(case, "encoder")).shape == (1, 3, 8)
    assert sum(isinstance(m, torch.nn.Linear) for m in encoder.modules()) == 3


def test_padding_given_as_lengths():
    parameters = [types.SimpleNamespace(name=n, default=inspect.Parameter.empty, kind=1)
                  for n in ("src", "tgt", "src_lengths", "tgt_lengths")]
    assert lengths_of("tgt_lens", ["src_mask", "tgt_mask"], []) == f"tgt_mask:{LENGTHS}"
    assert lengths_of("src_len", ["src_mask"], []) is None  # (a single length: a size, not the padding)
    assert call_plan(parameters, ["src", "tgt", "src_mask", "tgt_mask"])[2:] == [f"src_mask:{LENGTHS}",
                                                                               f"tgt_mask:{LENGTHS}"]
    trailing = torch.tensor([[True, True, False], [True, True, True]]).unsqueeze(1)
    assert mask_lengths(trailing).tolist() == [2, 3]
    causal = torch.tril(torch.ones(3, 3, dtype=torch.bool)) & trailing
    assert mask_lengths(causal).tolist() == [2, 3]
    with pytest.raises(Missing) as hole:
        mask_lengths(torch.tensor([[True, False, True]]).unsqueeze(1))
    assert hole.value.cause == "adapter.padding_not_expressible_as_lengths"


def test_a_model_taking_lengths_is_checked_with_padding_at_the_end(tmp_path):
    path = tmp_path / "lengths.py"
    path.write_text(textwrap.dedent('''
        import torch
        import torch.nn as nn

        class Transformer(nn.Module):
            def __init__(self, src_vocab, tgt_vocab, d_model):
                super().__init__()
                self.src, self.tgt = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)

            def forward(self, src, tgt, src_lengths, tgt_lengths):
                keys = torch.arange(src.size(1)) < src_lengths.unsqueeze(1)
                memory = (self.src(src) * keys.unsqueeze(-1)).sum(1, keepdim=True)
                return self.tgt(tgt) + memory
    '''))
    impl = load_implementation(str(path))
    assert impl.padding == LENGTHS
    case = Case(impl, Config(d_model=6, h=2), batch=3, src_len=5, tgt_len=2, dtype=torch.float32, seed=0)
    mask = case.padding_mask(5)
    assert torch.equal(mask, torch.arange(5) < mask.sum(-1, keepdim=True))  # padding only at the end
    assert case.build("model")(*canonical_inputs(case, "model")).shape == (3, 2, 6)


def test_a_pad_index_the_helper_does_not_take_is_missing_not_a_fail():
    """The helper's builder declares the sizes it takes (``Implementation.supports``) before the check runs: a pad
    index it does not take cannot be set, so a mask equal to (tokens != 0) is missing, not the author's fail."""
    def helper(tokens):
        return tokens != 0
    helper.hyperparameters = set()
    impl = Implementation("helper", {"padding_mask": helper})
    assert impl.supports("padding_mask") == Supports(built=True, written=True, hyperparameters=frozenset())
    failure = Failure("padding_mask.pad_idx_ignored", "(tokens != pad_idx=2)", "a mask equal to (tokens != 0)")
    found = if_the_checker_sets(impl, "padding_mask", "pad_idx", failure)
    assert (found.verdict, found.cause) == (MISSING, "adapter.pad_idx_not_taken")
    assert "padding_mask.pad_idx_ignored" in found.observed
    helper.hyperparameters = {"pad_idx"}
    assert if_the_checker_sets(impl, "padding_mask", "pad_idx", failure) is failure


def test_a_global_the_main_block_never_set_is_missing_not_an_error(tmp_path):
    """A main block that fails before it sets the sizes (data the checker does not have): the classes reading them
    raise NameError, which is the checker's doing, not the author's."""
    main = MAIN.replace('if __name__ == "__main__":\n', 'if __name__ == "__main__":\n    open("corpus.txt")\n')
    loaded = load_code(notebook(tmp_path / "nb.ipynb", BLOCKS, main))
    block = vars(loaded.module)["Block"]
    seen = observe.observe(loaded, loaded.project_modules(), [block], budget=10)
    assert seen.completed is None and "FileNotFoundError" in seen.ran[0] and "d_model" in seen.assigned
    impl = types.SimpleNamespace(observed=seen, unbound={}, broken=None, roles={}, grafts={})
    with pytest.raises(NameError) as error:
        block()
    verdict, cause, message = classify(error, "feed_forward", impl=impl)
    assert (verdict, cause) == (MISSING, "adapter.global_set_by_main")
    assert "the main block of cell 2" in message


def test_a_pad_index_read_from_a_global_is_set_through_it():
    namespace = {"PAD_ID": 0}

    def make_pad_mask(tokens):
        return (tokens != namespace["PAD_ID"]).unsqueeze(-2)

    def canonical(tokens, pad_idx):  # (discovery's wrapper of a helper taking no pad index)
        return make_pad_mask(tokens)
    canonical.hyperparameters = set()
    helper = observe.with_pad_index(canonical, [(namespace, "PAD_ID", "pad_idx"), (namespace, "D", "d_model")])
    tokens = torch.tensor([[1, 2, 0, 2]])
    assert helper(tokens, 2).tolist() == [[[True, False, True, False]]]
    assert namespace["PAD_ID"] == 0 and helper.hyperparameters == {"pad_idx"}
    assert observe.with_pad_index(canonical, [(namespace, "D", "d_model")]) is canonical


SELF_ONLY_ATTENTION = '''
import math
import torch
from torch import nn


class SelfAttention(nn.Module):
    """Multi-head self-attention over one stream, returning (weights, output)."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads, self.width = heads, d_model // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x, mask=None):
        b, n = x.shape[:2]
        q, k, v = (w(x).view(b, n, self.heads, self.width).transpose(1, 2) for w in (self.q, self.k, self.v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.width)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(-1)
        return weights, self.o((weights @ v).transpose(1, 2).reshape(b, n, -1))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1):
        super().__init__()
        self.attention = SelfAttention(d_model, heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norms, self.drop = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(2)), nn.Dropout(dropout)

    def forward(self, x, mask):
        _, attended = self.attention(x, mask)
        x = self.norms[0](x + self.drop(attended))
        return self.norms[1](x + self.drop(self.ff(x)))


class Encoder(nn.Module):
    def __init__(self, vocab, d_model=16, heads=2, d_ff=32, layers=2, dropout=0.1):
        super().__init__()
        self.lookup, self.d_model = nn.Embedding(vocab, d_model), d_model
        self.layers = nn.ModuleList(EncoderLayer(d_model, heads, d_ff, dropout) for _ in range(layers))

    def forward(self, ids, mask):
        x = self.lookup(ids) * math.sqrt(self.d_model)
        for layer in self.layers:
            x = layer(x, mask)
        return x


if __name__ == "__main__":
    ids = torch.tensor([[3, 4, 5, 0]])
    Encoder(11)(ids, (ids != 0)[:, None, None, :])
'''


def test_a_block_the_authors_own_run_calls_is_not_stood_in_for(tmp_path):
    """A self-attention block taking (x, mask) fails the canonical (query, key, value, mask) call, yet the author's
    forward pass runs it: the layers that build it are checked with it, as written, not with a stand-in of the
    reference's (whose output the layer would unpack as the author's (weights, output))."""
    code, output, report, records = run_on_source(tmp_path, "encoder.py", SELF_ONLY_ATTENTION, "-k", "encoder_layer")
    assert report is not None, output
    assert not any("standing in" in note or "in place of" in note for note in report["notes"]), report["notes"]
    assert records[("encoder_layer", "every_parameter_receives_gradient")]["verdict"] == "pass"
    assert not [key for key, r in records.items() if r["verdict"] in ("fail", "error")], output


LOOK_AHEAD_ARGUMENT = '''
import math
import torch
from torch import nn


def attend(q, k, v, keep):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(~keep, -1e9)
    return scores.softmax(-1) @ v


class Translator(nn.Module):
    """One attention head a side; the padding masks made here from pad 0, the look-ahead mask given by the caller."""

    def __init__(self, src_vocab, tgt_vocab, d_model=16):
        super().__init__()
        self.src_lookup, self.tgt_lookup = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
        self.maps = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(6))
        self.norm, self.project = nn.LayerNorm(d_model), nn.Linear(d_model, tgt_vocab)

    def forward(self, src, tgt, mask=None):
        src_keep, tgt_keep = (src != 0)[:, None, :], (tgt != 0)[:, None, :]
        if mask is not None:
            tgt_keep = tgt_keep & mask.bool()[:, 0]
        x, y = self.src_lookup(src), self.tgt_lookup(tgt)
        memory = self.norm(x + attend(self.maps[0](x), self.maps[1](x), x, src_keep))
        y = self.norm(y + attend(self.maps[2](y), self.maps[3](y), y, tgt_keep))
        y = self.norm(y + attend(self.maps[4](y), self.maps[5](memory), memory, src_keep))
        return self.project(y)


if __name__ == "__main__":
    src, tgt = torch.tensor([[3, 4, 5, 0]]), torch.tensor([[2, 6, 7]])
    Translator(11, 13)(src, tgt, torch.tril(torch.ones(3, 3)).unsqueeze(0).unsqueeze(0))
'''


def test_a_mask_argument_the_authors_own_call_passes_is_given_the_canonical_mask(tmp_path):
    """``forward(src, tgt, mask=None)``, called by its author with a (1, 1, Lt, Lt) look-ahead triangle: the checker
    passes its target mask there too, and the model hides the future (§3.2.3) as its author runs it."""
    code, output, report, records = run_on_source(tmp_path, "translator.py", LOOK_AHEAD_ARGUMENT, "-k",
                                                  "model and future")
    assert report is not None, output
    assert any(note.startswith("model: Translator") and "mask<-tgt_mask" in note for note in report["notes"]), output
    assert records[("model", "future_positions_do_not_change_earlier_outputs")]["verdict"] == "pass", output


def test_a_stand_in_for_a_block_returning_a_pair_puts_its_output_in_each_place(tmp_path):
    """The author's caller may unpack ``weights, out = attention(x, mask)`` as well as ``out, weights``: the
    reference's stand-in for such a block returns a pair holding its output in both places, never None."""
    from adapters.building import Binding, stand_in
    (tmp_path / "self_only.py").write_text(SELF_ONLY_ATTENTION.split("class EncoderLayer")[0])
    module = load_code(tmp_path / "self_only.py").module
    broken = Binding("multi_head_attention", "SelfAttention", module.SelfAttention,
                     constructor={"d_model": "d_model", "heads": "h"})
    block = stand_in(broken, Config(d_model=8, h=2, d_ff=16, N=1), "keep")(8, 2)
    x = torch.randn(2, 3, 8)
    first, second = block(x, torch.ones(2, 1, 3, dtype=torch.bool))
    assert first.shape == x.shape and second is first


def test_a_mask_argument_no_run_shows_leaves_a_future_leak_unblamed(tmp_path):
    """The same model with no run of its author's to show what it passes to ``mask``: the checker's call leaves it
    at None, so a later target token seen (both read directly and in place) is missing, not the author's fault."""
    source = LOOK_AHEAD_ARGUMENT.split("if __name__")[0]
    code, output, report, records = run_on_source(tmp_path, "translator.py", source, "-k",
                                                  "model and (future or later_target)")
    for check in ("future_positions_do_not_change_earlier_outputs",
                  "later_target_tokens_leave_earlier_positions_in_place"):
        record = records[("model", check)]
        assert (record["verdict"], record["cause"]) == ("missing", "adapter.mask_parameter_not_fed"), output


PAD_OF_ITS_VOCABULARY = '''
import torch
import torch.nn as nn

PAD_IDX = 1  # (the padding token of the author's vocabulary)


def generate_padding_mask(tokens):
    return (tokens != PAD_IDX).unsqueeze(-2)


class Gain(nn.Module):  # (a block taking its width as an argument)
    def __init__(self, d_model):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return x * self.gain
'''


def test_a_pad_index_of_its_own_beside_classes_taking_their_sizes_is_set_through_its_global(tmp_path):
    """A padding helper reading a module constant (``PAD_IDX = 1``, as a vocabulary padding with 1 has it) beside
    blocks that take their sizes as arguments: the pad index the check asks for is set through the constant, and the
    helper's mask is judged for what it computes, not failed for the pad index it was never given; a pad index the
    helper does not read is left alone, its own constant still one the checker cannot set."""
    _, output, _, records = run_on_source(tmp_path, "own_pad.py", PAD_OF_ITS_VOCABULARY, "-k", "padding_mask_helper")
    assert records[("padding_mask", "padding_mask_helper")]["verdict"] == "pass", output
    other_constant = PAD_OF_ITS_VOCABULARY.replace("tokens != PAD_IDX", "tokens != EMPTY").replace(
        "PAD_IDX = 1", "PAD_IDX = 1  # (its data pipeline's)\nEMPTY = 0")
    _, output, _, records = run_on_source(tmp_path, "own_empty.py", other_constant, "-k", "padding_mask_helper")
    record = records[("padding_mask", "padding_mask_helper")]
    assert (record["verdict"], record["cause"]) == ("missing", "adapter.pad_idx_not_taken"), output
    next_token = PAD_OF_ITS_VOCABULARY.replace("tokens != PAD_IDX", "tokens != PAD_IDX + 1")
    _, output, _, records = run_on_source(tmp_path, "own_pad_next.py", next_token, "-k", "padding_mask_helper")
    assert records[("padding_mask", "padding_mask_helper")]["cause"] == "padding_mask.wrong", output
