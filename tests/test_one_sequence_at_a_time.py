"""Code trained one sentence at a time (blocks taking (length, d_model) matrices, no batch axis), called one sample
of the canonical batch at a time (``adapters.call_plans.UNBATCHED``); old classes nothing uses, which lose to the
ones the code uses (``adapters.candidates.without_dead_code``); and the model role, which no embedding block plays
(``adapters.candidates.takes_two_sequences``)."""
import math
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from adapters.binding import discover
from adapters.call_plans import UNBATCHED, per_sample
from adapters.candidates import accepts, candidates, used_in_the_code, without_dead_code
from adapters.loading import load_code
from adapters.observe import Call, Observation, without_batch_axis
from adapters.wrapping import Adapted
from tests.suite import run_suite

STUDY = Path(__file__).resolve().parent / "styles" / "sentence_at_a_time"


class OneSentenceAttention(nn.Module):
    """Self-contained one-head attention over one sentence: ``.t()`` takes no batch axis."""

    def __init__(self, d_model):
        super().__init__()
        self.q, self.k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x, context, mask=None):
        scores = self.q(x) @ self.k(context).t() / math.sqrt(x.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)
        return torch.softmax(scores, dim=-1) @ context


def test_a_block_without_a_batch_axis_is_called_once_per_sample_and_its_outputs_stacked():
    torch.manual_seed(0)
    block = OneSentenceAttention(6).eval()
    x, memory = torch.randn(3, 4, 6), torch.randn(3, 5, 6)
    mask = torch.ones(1, 4, 5, dtype=torch.bool).tril()  # broadcast over the batch: each sample gets its one row
    with pytest.raises(RuntimeError):
        block(x, memory, mask)
    adapted = Adapted(block, "multi_head_attention", "keep", UNBATCHED)
    out = adapted(x, memory, memory, mask)
    assert out.shape == (3, 4, 6)
    for sample in range(3):
        assert torch.allclose(out[sample], block(x[sample], memory[sample], mask[0]))
    assert torch.equal(per_sample(lambda a, b: a + b, (torch.ones(2, 3), 1)), torch.full((2, 3), 2.0))


def test_the_authors_own_run_without_a_batch_axis_is_read():
    seen = Observation(calls={"Head": Call((("tensor", (7, 16), "float32"),), {}, None),
                              "Model": Call((("tensor", (7,), "int64"), ("tensor", (5,), "int64")), {}, None),
                              "Batched": Call((("tensor", (2, 7, 16), "float32"),), {}, None)})
    assert [without_batch_axis(seen, type(name, (), {})) for name in ("Head", "Model", "Batched", "Unseen")] == [
        True, True, False, False]


def test_code_trained_one_sentence_at_a_time_is_bound_so_and_a_planted_scale_is_named(tmp_path):
    """The study binds every block one sentence at a time, its legacy attention left aside; with the scores
    divided by sqrt(d_model) instead of sqrt(d_head), the scale check names the mistake through the same calls."""
    found = discover(*namespace_of(STUDY))
    assert {role for role, b in found.bindings.items() if b.layout == UNBATCHED} >= {
        "multi_head_attention", "encoder_layer", "decoder_layer", "encoder", "decoder", "model"}, found.describe()
    assert "attention" not in found.bindings and any("left aside legacy" in n for n in found.notes)
    buggy = tmp_path / "buggy"
    shutil.copytree(STUDY, buggy)
    layers = buggy / "layers.py"
    layers.write_text(layers.read_text().replace("math.sqrt(self.d_head)", "math.sqrt(self.to_key.in_features)"))
    code, output, report = run_suite(f"--impl={buggy}", "-k", "scores_scaled and multi_head", tmp_path=tmp_path)
    found = [(c["verdict"], c["cause"]) for c in report["checks"] if c["component"] == "multi_head_attention"]
    assert found == [("fail", "multi_head_attention.scale.sqrt_d_model")], output


def namespace_of(path):
    """What discovery reads of the code at ``path``, loaded as the plugin loads it in a process of its own: the
    modules other tests of this process loaded from beside it (another study's), or under the names of its own
    (another project's ``model``), are let go first."""
    own = {p.stem for p in Path(path).rglob("*.py")} | {p.name for p in Path(path).rglob("*") if p.is_dir()}
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(Path(path).parent) + os.sep) \
                or name.split(".")[0] in own:
            del sys.modules[name]
    loaded = load_code(path)
    modules = loaded.project_modules()
    return loaded.namespace(modules), loaded.module.__name__, None, modules


LIVE_AND_OLD = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class ScaledDotProductAttention(nn.Module):
        def forward(self, q, k, v, mask=None):
            w = torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, dim=-1)
            return w @ v


    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, h):
            super().__init__()
            self.attend = ScaledDotProductAttention()
    ''')


def test_a_class_nothing_uses_loses_to_one_the_code_uses_under_the_same_name():
    old = type("ScaledDotProductAttention", (nn.Module,), {"__module__": "legacy"})
    scope = {}
    exec(compile(LIVE_AND_OLD, "<live>", "exec"), scope)  # (no source to read: nothing is said dead)
    found = {"ScaledDotProductAttention": scope["ScaledDotProductAttention"], "legacy.ScaledDotProductAttention": old}
    options = [(1.0, name, obj) for name, obj in found.items()]
    assert used_in_the_code(found, "live", {"live"}) is None and without_dead_code(options, None) == options
    kept = without_dead_code(options, {"ScaledDotProductAttention"})
    assert [name for _, name, _ in kept] == ["ScaledDotProductAttention"]
    assert without_dead_code(options[1:], {"ScaledDotProductAttention"}) == options[1:]  # alone, it is kept


def test_the_classes_a_block_names_are_used_and_an_old_copy_is_not(tmp_path):
    (tmp_path / "live.py").write_text(LIVE_AND_OLD)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "attention_v0.py").write_text(LIVE_AND_OLD.split("class MultiHeadAttention")[0])
    loaded = load_code(tmp_path)
    modules = loaded.project_modules()
    found = candidates(loaded.namespace(modules), modules)
    used = used_in_the_code(found, loaded.module.__name__, modules)
    old = [name for name in found if name.startswith("old.")]
    assert old and not set(old) & used, (sorted(found), used)
    assert any(name.endswith("ScaledDotProductAttention") and name in used for name in found)


EMBEDDING_BESIDE_A_MODEL = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class TransformerEmbedding(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.lookup, self.d_model = nn.Embedding(vocab_size, d_model), d_model

        def forward(self, ids):
            return self.lookup(ids) * math.sqrt(self.d_model)


    class Transformer(nn.Module):
        def __init__(self, src_vocab_size, tgt_vocab_size, d_model, vocabulary_file):
            super().__init__()
            with open(vocabulary_file) as f:  # (nothing the checker can give: the model does not build)
                self.words = f.read().split()
            self.source = TransformerEmbedding(src_vocab_size, d_model)
            self.target = TransformerEmbedding(tgt_vocab_size, d_model)

        def forward(self, src, tgt):
            return self.target(tgt) + self.source(src).mean(1, keepdim=True)
    ''')


def test_a_model_that_does_not_build_is_missing_not_replaced_by_an_embedding_block(tmp_path):
    path = tmp_path / "translation.py"
    path.write_text(EMBEDDING_BESIDE_A_MODEL)
    module = load_code(path).module
    assert not accepts("model", vars(module)["TransformerEmbedding"]) and accepts("model", vars(module)["Transformer"])
    found = discover(vars(module), module.__name__)
    model = found.bindings.get("model")
    assert model is None or model.name == "Transformer", found.describe()
    assert any(n.startswith("model: Transformer does not work") for n in found.notes), found.notes
