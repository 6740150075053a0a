"""A role is bound only to a class whose structure fits it: a generator maps d_model to a vocabulary (§3.4), so an
attention head whose name is near one of the generator's (``Head``, ``LMHead``) is never bound to it, while a real
generator is bound and its bugs named."""
import textwrap

import pytest

from adapters.candidates import maps_to_a_vocabulary
from adapters.loading import load_code
from adapters.submission import load_implementation
from tests.suite import run_suite

HEADS = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class Head(nn.Module):
        """One attention head: its own query, key and value maps, d_model -> d_k."""
        def __init__(self, d_model, d_k):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(d_model, d_k), nn.Linear(d_model, d_k), nn.Linear(d_model, d_k)

        def forward(self, x, context=None):
            source = x if context is None else context
            scores = self.q(x) @ self.k(source).transpose(-2, -1) / math.sqrt(self.q.out_features)
            return scores.softmax(-1) @ self.v(source)


    class OutputLayer(nn.Module):
        """The decoder's output to log-probabilities over the target vocabulary."""
        def __init__(self, d_model, vocab_size):
            super().__init__()
            self.logits = nn.Linear(d_model, vocab_size)

        def forward(self, x):
            return self.logits(x).log_softmax(dim=-1)
''')


def test_an_attention_head_is_no_generator_and_a_vocabulary_map_is(tmp_path):
    path = tmp_path / "heads.py"
    path.write_text(HEADS)
    module = vars(load_code(path).module)
    assert not maps_to_a_vocabulary(module["Head"])
    assert maps_to_a_vocabulary(module["OutputLayer"])


def test_code_without_a_generator_class_leaves_the_role_unbound(tmp_path):
    path = tmp_path / "heads.py"
    path.write_text(HEADS.split("class OutputLayer")[0])
    impl = load_implementation(str(path))
    assert not impl.has("generator"), impl.notes


@pytest.mark.parametrize("planted, expected", [(None, None), ("dim=1", "generator.softmax_wrong_axis")])
def test_a_generator_beside_heads_is_bound_and_its_bug_named(tmp_path, planted, expected):
    path = tmp_path / "heads.py"
    path.write_text(HEADS.replace("dim=-1", planted) if planted else HEADS)
    code, output, report = run_suite(f"--impl={path}", "-k", "generator", tmp_path=tmp_path)
    checks = [c for c in report["checks"] if c["component"] == "generator"]
    assert any(c["verdict"] == "pass" for c in checks), output
    flagged = {c["cause"] for c in checks if c["verdict"] in ("fail", "error")}
    assert expected in flagged if expected else flagged == set(), output
