"""Crashes that stop a class before its own code runs are repaired in a copy of the submission (``adapters/repairs.py``)
and the checks that ended in that error report what the code behind it computes."""
import ast
import textwrap

import torch

from adapters.repairs import repaired_namespace
from conformance.reports import markdown
from tests.suite import run_on_source

STUDENT = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, h):
            self.h, self.d_k = h, d_model // h             # super().__init__() missing
            self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
            self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
            self.d_model = d_model

        def forward(self, query, key, value, mask=None):
            b = query.size(0)
            q, k, v = [w(x).view(b, -1, self.h, self.d_k).transpose(1, 2)
                       for w, x in ((self.w_q, query), (self.w_k, key), (self.w_v, value))]
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_modl)   # a typo, and sqrt(d_model)
            if mask is not None:
                scores = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9)
            out = torch.softmax(scores, dim=-1) @ v
            return self.w_o(out.transpose(1, 2).reshape(b, -1, self.h * self.d_k))


    class LayerNorm(nn.Module):
        def __init__(self, d_model, eps=1e-6):
            super(LayerNormOld, self).__init__()             # a class renamed since
            self.gain, self.bias = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))
            self.eps = eps

            def forward(self, x):                            # indented one level too deep
                mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True, unbiased=False)
                return self.gain * (x - mean) / (std + self.eps) + self.bias


    class FeedForward(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.w_1, self.w_2, self.activation = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.GELU()

        def forward(self, x):
            return self.dropout(0.1)(self.w_2(self.activation(self.w_1(x))))   # self.dropout never assigned


    class Residual(nn.Module):
        def __init__(self, d_model):
            super().__init__()
            self.norm = nn.LayerNorm(d_model)

        def forward(self, x, sublayer):
            return self.norm(x + sublayr(x))                 # its own parameter misspelled
''')


def load(source, name="student"):
    namespace = {"__name__": name}
    exec(compile(source, f"{name}.py", "exec"), namespace)
    return [(f"{name}.py", ast.parse(source))], namespace


def test_each_repair_is_made_in_a_copy_and_named():
    trees, namespace = load(STUDENT)
    repaired, repairs = repaired_namespace(trees, namespace)
    said = " | ".join(r.what for r in repairs)
    assert "super().__init__() inserted at the start of MultiHeadAttention.__init__" in said
    assert "super(LayerNormOld, ...) in LayerNorm read as super()" in said
    assert "forward moved out of LayerNorm.__init__" in said
    assert "self.d_modl in MultiHeadAttention read as self.d_model" in said
    assert "self.dropout in FeedForward, never assigned, read as torch.nn.Dropout" in said
    assert "sublayr in Residual.forward, defined nowhere, read as sublayer" in said
    x = torch.randn(2, 5, 8)
    out = repaired["MultiHeadAttention"](8, 2)(x, x, x)
    assert out.shape == (2, 5, 8)
    assert torch.allclose(repaired["LayerNorm"](8)(x), torch.nn.functional.layer_norm(x, (8,)), atol=1e-4)
    assert repaired["FeedForward"](8, 16).eval()(x).shape == x.shape
    assert repaired["Residual"](8)(x, torch.relu).shape == x.shape
    try:
        namespace["MultiHeadAttention"](8, 2)
    except AttributeError:
        pass  # the submission's own class is untouched: it still crashes
    else:
        raise AssertionError("the submission's own class was changed")


def test_correct_code_needs_no_repair():
    source = STUDENT.replace("self.h, self.d_k = h", "super().__init__()\n        self.h, self.d_k = h")
    for wrong, right in (("d_modl", "d_k"), ("LayerNormOld", "LayerNorm"), ("self.dropout(0.1)", ""),
                         ("sublayr", "sublayer")):
        source = source.replace(wrong, right)
    for line in ("def forward(self, x):", "mean, std = ", "return self.gain"):  # out of __init__
        source = source.replace(" " * 4 + line, line)
    trees, namespace = load(source)
    assert repaired_namespace(trees, namespace) == ({}, [])


def test_what_a_crash_hides_is_reported_behind_it(tmp_path):
    code, output, report, by_check = run_on_source(tmp_path, "student.py", STUDENT,
                                                   "-m", "multi_head_attention or layer_norm or feed_forward")
    assert code == 1, output
    scale = by_check["multi_head_attention", "scores_scaled_by_inverse_sqrt_d_k"]
    assert (scale["verdict"], scale["cause"]) == ("error", "error.super_init_missing"), scale
    assert scale["behind"]["cause"] == "multi_head_attention.scale.sqrt_d_model", scale["behind"]
    shape = by_check["layer_norm", "output_shape"]
    assert shape["cause"] == "error.super_names_wrong_class" and shape["behind"]["verdict"] == "pass", shape
    agreement = by_check["feed_forward", "agrees_with_reference"]
    assert agreement["cause"] == "error.attribute_never_assigned", agreement
    assert agreement["behind"]["verdict"] == "deviation" and "gelu" in agreement["behind"]["cause"], agreement
    assert "Behind the errors" in markdown(report)
    assert "passes once repaired" in output
