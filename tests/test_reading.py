"""The static reading of a submission's own code (``adapters/calls.py``, ``adapters/lint.py``): swapped and
misplaced arguments, a forward returning nothing, attributes read and never assigned are found, named with their
line, and correct code is left alone."""
import textwrap
import types

import torch.nn as nn

from adapters.calls import read_calls
from adapters.lint import parsed, read_classes, read_factories

SOURCE = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class LayerNormalization(nn.Module):
        def __init__(self, eps=1e-6):
            super().__init__()
            self.eps = eps


    class Residual(nn.Module):
        def __init__(self, features, dropout):
            super().__init__()
            self.norm = LayerNormalization(features)              # features lands in eps


    class Block(nn.Module):
        def __init__(self, features, self_attention, feed_forward, dropout):
            super().__init__()


    def build(features, self_attention, feed_forward, dropout):
        return Block(features, feed_forward, self_attention, dropout)   # the two blocks swapped


    def build_model(features, dropout):
        block = Block(features, None, None, dropout)
        return Blok(block)                                              # flagged: no Blok anywhere


    def attention(key, query, value, mask=None):
        return torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1) @ value


    def sinusoid_table(n_position, d_hid):
        return torch.zeros(n_position, d_hid)


    class Heads(nn.Module):
        def __init__(self, d_model, max_len):
            super().__init__()
            self.table = sinusoid_table(max_len, d_model)           # correct: other names, same order

        @staticmethod
        def scores(key, query):
            return query @ key.transpose(-2, -1)

        def attend(self, query, key, value):
            return attention(key, query, value)                      # correct: the names fit their parameters

        def forward(self, query, key, value):
            weights = Heads.scores(query, key)                       # swapped, through the class
            out = self.attend(key, query, value)                     # swapped, through self
            return attention(query, key, value), weights, out        # swapped, plain function


    class NoReturn(nn.Module):
        def __init__(self, d_model):
            super().__init__()
            self.proj = nn.Linear(d_model, d_model)

        def forward(self, x):
            x = self.proj(x)                                         # flagged: nothing returned


    class Typo(nn.Module):
        def __init__(self, d_model):
            super().__init__()
            self.register_buffer("table", torch.zeros(d_model))
            self.linear = nn.Linear(d_model, d_model)

        @property
        def width(self):
            return self.table.numel()

        @staticmethod
        def helper(key):
            return key.transpose(-2, -1)                             # a parameter, not an attribute

        def forward(self, x):
            if self.training:
                x = x + self.table * self.width
            return self.lienar(x)                                    # flagged: never assigned


    class Nested(nn.Module):
        def __init__(self, d_model):
            super().__init__()
            self.linear = nn.Linear(d_model, d_model)

            def forward(self, x):
                return self.linear(x) * self.scale                   # flagged: never assigned


    class CallsItsBlocks(nn.Module):
        def __init__(self, d_model):
            super().__init__()
            self.inner = Nested(d_model)
            self.typo = Typo(d_model)
            self.extra = Typo(d_model, heads=2)                      # flagged: Typo's __init__ takes no heads

        def forward(self, x):
            y = self.typo(x)                                         # correct: the forward takes x
            return self.inner(x, mask=None)                          # flagged: Nested's (nested) forward has no mask


    class Undefined(nn.Module):
        def forward(self, x, sublayer):
            return x + sublayr(x)                                    # flagged: its parameter misspelled
''')


def namespace():
    module = types.ModuleType("submission")
    exec(compile(SOURCE, "submission.py", "exec"), vars(module))
    return vars(module)


def findings():
    return read_calls(list(parsed([("submission.py", SOURCE)])), namespace(), "submission")


def test_swapped_and_misplaced_arguments_are_found_with_caller_and_line():
    """Every marked mistake found, by its callee and caller, and no call marked correct."""
    found = {(f.callee, f.caller): f for f in findings()}
    assert set(found) == {("LayerNormalization", "Residual"), ("Block", "build"), ("Heads.scores", "Heads"),
                          ("Heads.attend", "Heads"), ("attention", "Heads")}, sorted(found)
    assert "'features' lands in 'eps'" in found["LayerNormalization", "Residual"].message
    assert "'feed_forward' lands in 'self_attention' but fits 'feed_forward'" in found["Block", "build"].message
    assert "'query' lands in 'key' but fits 'query'" in found["attention", "Heads"].message
    lines = SOURCE.splitlines()
    for f in found.values():
        assert f.filename == "submission.py"
        assert f.callee.split(".")[-1] + "(" in lines[f.line - 1], (f, lines[f.line - 1])



def test_forward_without_return_and_attributes_never_assigned_are_found():
    """Only the flagged lines are found, in every class of the source, each with its cause."""
    module = namespace()
    classes = {name: obj for name, obj in module.items() if isinstance(obj, type) and obj.__module__ == "submission"}
    found = read_classes(list(parsed([("submission.py", SOURCE)])), classes, module)
    lines = SOURCE.splitlines()
    flagged = {(f.cls, f.cause, lines[f.line - 1].split("#")[0].strip()) for f in found}
    assert flagged == {("NoReturn", "forward_returns_nothing", "def forward(self, x):"),
                       ("Typo", "attribute_never_assigned", "return self.lienar(x)"),
                       ("Nested", "attribute_never_assigned", "return self.linear(x) * self.scale"),
                       ("CallsItsBlocks", "sub_block_call_misfits", "return self.inner(x, mask=None)"),
                       ("CallsItsBlocks", "sub_block_call_misfits", "self.extra = Typo(d_model, heads=2)"),
                       ("Undefined", "name_never_defined", "return x + sublayr(x)")}, flagged
    messages = {f.cls: f.message for f in found}
    assert "self.lienar" in messages["Typo"] and "self.scale" in messages["Nested"]
    assert "Undefined.forward reads sublayr, which no code that ran defines (sublayer, which it defines" \
        in messages["Undefined"]
    calls = [f.message for f in found if f.cls == "CallsItsBlocks"]
    assert any("a Nested, whose forward(x) cannot take that call: no parameter named mask" in m for m in calls)
    assert any("builds Typo(...), whose __init__(d_model) cannot take that call: no parameter named heads" in m
               for m in calls), calls


def test_names_no_code_defines_are_found_in_the_functions_building_the_classes():
    module = namespace()
    found = read_factories(list(parsed([("submission.py", SOURCE)])), {"Block": module["Block"]}, module)
    assert [(f.cls, f.cause) for f in found] == [("build_model", "name_never_defined")], found
    assert "build_model reads Blok" in found[0].message


def test_names_a_failed_cell_was_to_define_are_not_called_never_defined():
    """A notebook whose data cell stopped on a package missing here (``train_loader = ...`` never ran): a training
    function reading ``train_loader`` reads a name its code does define, so nothing is claimed; a misspelled name
    beside it still is."""
    cells = [("cell 1", "import torch.nn as nn\n\nclass Block(nn.Module):\n    def forward(self, x):\n        return x\n"),
             ("cell 2", "import datasets_missing_here\ntrain_loader = datasets_missing_here.load()\n"),
             ("cell 3", "def train():\n    model = Block()\n    for batch in train_loader:\n        model(batch)\n"
                        "    return Blok\n")]
    module = {"nn": nn, "Block": type("Block", (nn.Module,), {})}
    trees = list(parsed(cells))
    found = read_factories(trees, {"Block": module["Block"]}, module)
    assert [(f.cls, f.cause) for f in found] == [("train", "name_never_defined")], found
    assert "reads Blok" in found[0].message and "train_loader" not in found[0].message
