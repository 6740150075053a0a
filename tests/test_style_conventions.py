"""Conventions of public code that discovery reads from the code itself: projections kept in the layer around an
attention block without weights (adapters/projections.py), d_ff given as a multiple of d_model
(adapters/multipliers.py), a model whose forward shifts the target (adapters/alignment.py), and a LayerNorm eps
other than the reference's (conformance.contract.weights.adopt_eps, conformance.checks.test_behaviour.open_eps)."""
import dataclasses
import math
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from adapters import alignment, multipliers, projections
from adapters.binding import discover
from adapters.building import PROBE
from adapters.construction import constructor_plan
from adapters.loading import load_code
from conformance.contract.weights import adopt_eps
from reference.transformer import LayerNorm as ReferenceLayerNorm
from tests.suite import run_suite

STYLES = Path(__file__).resolve().parent / "styles"


class Heads(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.h = h

    def forward(self, q, k, v, mask=None):
        b, n, d = q.shape
        split = lambda t: t.view(b, -1, self.h, d // self.h).transpose(1, 2)  # noqa: E731
        w = torch.softmax(split(q) @ split(k).transpose(-2, -1) / math.sqrt(d // self.h), dim=-1)
        return (w @ split(v)).transpose(1, 2).reshape(b, n, d)


class Layer(nn.Module):
    def __init__(self, d_model, h):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model) for _ in range(4))
        self.attn = Heads(h)

    def forward(self, x, mask=None):
        return x + self.wo(self.attn(self.wq(x), self.wk(x), self.wv(x), mask))


def test_an_attention_block_without_weights_is_bound_with_the_projections_its_layer_applies():
    assert projections.projections_around(Layer, "attn") == ("wq", "wk", "wv", "wo")
    layer = Layer(12, 3).eval()
    bound = projections.with_projections(layer, "attn")
    assert isinstance(bound, projections.ProjectedAttention)
    assert sum(p.numel() for p in bound.parameters()) == 4 * (12 * 12 + 12)
    x = torch.randn(2, 5, 12)
    assert torch.allclose(bound(x, x, x, None), layer(x) - x, atol=1e-6)
    assert list(__import__("inspect").signature(bound.forward).parameters) == ["q", "k", "v", "mask"]
    assert "wq, wk, wv before it and wo after it" in projections.describe(Layer, "attn")


def test_a_block_with_weights_of_its_own_is_left_as_it_is():
    layer = Layer(12, 3)
    layer.attn.scale = nn.Parameter(torch.ones(1))
    assert projections.with_projections(layer, "attn") is layer.attn


FFN = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class MLP(nn.Module):
        def __init__(self, dim, mlp_ratio=4, dropout=0.1):
            super().__init__()
            self.fc1 = nn.Linear(dim, mlp_ratio * dim)
            self.fc2 = nn.Linear(mlp_ratio * dim, dim)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))
    ''')


def discovered(path):
    module = load_code(path).module
    return vars(module), discover(vars(module), module.__name__)


def test_a_feed_forward_width_given_as_a_multiple_of_d_model_is_learned_and_fed(tmp_path):
    (tmp_path / "mlp.py").write_text(FFN)
    namespace, found = discovered(tmp_path / "mlp.py")
    plan = constructor_plan(namespace["MLP"], "feed_forward", {})
    assert plan["mlp_ratio"] == multipliers.D_FF_PER_D_MODEL
    assert "d_ff" in found.roles["feed_forward"].hyperparameters
    built = found.roles["feed_forward"](**dataclasses.asdict(dataclasses.replace(PROBE, d_model=8, d_ff=40)))
    assert [tuple(p.shape) for p in built.parameters()][0] == (40, 8)
    with pytest.raises(ValueError):
        multipliers.multiple(dataclasses.replace(PROBE, d_model=12, d_ff=30))


def test_a_shift_of_the_target_is_read_from_the_tokens_the_lookups_are_fed():
    tgt = alignment.probe_target(2, 5, 11)
    shifted = torch.cat([torch.full_like(tgt[:, :1], 1), tgt[:, :-1]], dim=1)
    assert alignment.shift_of([shifted], tgt) == alignment.PREPENDS
    assert alignment.shift_of([tgt[:, :-1]], tgt) == alignment.DROPS_LAST
    assert alignment.shift_of([tgt, shifted], tgt) is None  # the target itself reaches a lookup
    extended, mask = alignment.extended(tgt, torch.tril(torch.ones(1, 5, 5, dtype=torch.bool)), alignment.PREPENDS,
                                        0)
    assert extended.shape == (2, 6) and mask.shape == (1, 6, 6) and bool(mask[0, :, 0].all())
    assert not bool(mask[0, 0, 1:].any()) and bool(mask[0, 1:, 1:].equal(torch.tril(torch.ones(5, 5)).bool()))


def test_a_model_that_shifts_its_target_is_read_position_by_position():
    _, found = discovered(STYLES / "shifting_forward.py")
    assert found.bindings["model"].target_shift == alignment.PREPENDS
    cfg = dataclasses.replace(PROBE, dropout=0.0)
    model = found.roles["model"](**dataclasses.asdict(cfg)).eval()
    src, tgt = alignment.probe_target(2, 6, cfg.src_vocab), alignment.probe_target(2, 4, cfg.tgt_vocab)
    src_mask = torch.ones(2, 1, 6, dtype=torch.bool)
    tgt_mask = torch.tril(torch.ones(4, 4, dtype=torch.bool)).expand(2, 4, 4)
    changed = tgt.clone()
    changed[:, -1] = (tgt[:, -1] % (cfg.tgt_vocab - 1)) + 1
    with torch.no_grad():
        before, after = model(src, tgt, src_mask, tgt_mask), model(src, changed, src_mask, tgt_mask)
    assert before.shape == (2, 4, cfg.d_model)
    assert torch.equal(before[:, :-1], after[:, :-1]) and not torch.equal(before[:, -1], after[:, -1])


def test_a_model_that_prepends_its_own_start_token_is_not_compared_with_the_reference(tmp_path):
    code, output, report = run_suite(f"--impl={STYLES / 'shifting_forward.py'}", "-m", "model", "-k",
                                     "agrees_with_reference", tmp_path=tmp_path)
    checks = [c for c in report["checks"] if c["component"] == "model" and c["check"] == "agrees_with_reference"]
    assert checks and {(c["verdict"], c["cause"]) for c in checks} == {("missing",
                                                                        "adapter.model_prepends_start_token")}, output


def test_the_reference_takes_an_eps_the_candidate_computes_with():
    reference = adopt_eps(nn.Sequential(ReferenceLayerNorm(4)), 1e-6)
    assert reference[0].eps == 1e-6
    assert adopt_eps(nn.Sequential(ReferenceLayerNorm(4)), None)[0].eps == ReferenceLayerNorm(4).eps


BLOCKED_MASKS = '''
import math
import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, h):
        super().__init__()
        self.h, self.w_q, self.w_k = h, nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, q, k, v, mask=None):
        b, d = q.size(0), q.size(-1)
        split = lambda t: t.view(b, -1, self.h, d // self.h).transpose(1, 2)
        scores = split(self.w_q(q)) @ split(self.w_k(k)).transpose(-2, -1) / math.sqrt(d // self.h)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))  # True = hidden
        heads = torch.softmax(scores, dim=-1) @ split(self.w_v(v))
        return self.w_o(heads.transpose(1, 2).reshape(b, -1, d))
'''


def test_masks_read_the_way_the_attention_hides_a_key(tmp_path):
    """No mask helper says which way round the masks are: discovery reads it from the attention itself, which hides
    a key under True (masked_fill(mask, -inf)), and the masked-key check then passes."""
    path = tmp_path / "blocked.py"
    path.write_text(BLOCKED_MASKS)
    _, found = discovered(path)
    assert found.convention.startswith("blocked"), found.describe()
    assert any("True = blocked, the way the attention hides" in note for note in found.notes)


PACKED_HEAD_BY_HEAD = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class MultiHeadAttention(nn.Module):
        """Queries on their own; keys and values from one map, laid out head by head, values first."""
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.h, self.d_head = num_heads, d_model // num_heads
            self.q_proj = nn.Linear(d_model, d_model)
            self.vk_proj = nn.Linear(d_model, 2 * d_model)
            self.out_proj = nn.Linear(d_model, d_model)

        def forward(self, x, memory, mask=None):
            b, n, d = x.shape
            q = self.q_proj(x).view(b, n, self.h, self.d_head).transpose(1, 2)
            vk = self.vk_proj(memory).view(b, memory.size(1), self.h, 2 * self.d_head).transpose(1, 2)
            v, k = vk.chunk(2, dim=-1)
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
            if mask is not None:
                scores = scores.masked_fill(mask.unsqueeze(1) == 0, float("-inf"))
            return self.out_proj((torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, n, d))
''')


@pytest.mark.parametrize("scale, verdict", [("math.sqrt(self.d_head)", "pass"), ("self.d_head", "fail")])
def test_packed_projections_laid_out_head_by_head_are_measured(tmp_path, scale, verdict):
    """Keys and values packed in one map whose output is split head by head (values first): the scores are
    measured on identities laid out that way, so the right scale passes and a wrong one is named."""
    path = tmp_path / "packed.py"
    path.write_text(PACKED_HEAD_BY_HEAD.replace("math.sqrt(self.d_head)", scale))
    code, output, report = run_suite(f"--impl={path}", "-k", "scores_scaled and multi_head", tmp_path=tmp_path)
    found = [(c["verdict"], c["cause"]) for c in report["checks"] if c["component"] == "multi_head_attention"]
    assert found == [(verdict, "" if verdict == "pass" else "multi_head_attention.scale.d_k")], output


EMBEDDING_WITH_POSITIONS = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class Embeddings(nn.Module):
        """Token vectors scaled by sqrt(d_model) plus learned position vectors."""
        def __init__(self, vocab_size, d_model, max_len=64):
            super().__init__()
            self.tokens = nn.Embedding(vocab_size, d_model)
            self.positions = nn.Embedding(max_len, d_model)
            self.scale = math.sqrt(d_model)

        def forward(self, tokens):
            return self.tokens(tokens) * self.scale + self.positions(torch.arange(tokens.size(1)))
''')


@pytest.mark.parametrize("scale, verdict", [("math.sqrt(d_model)", "pass"), ("1.0", "fail")])
def test_an_embedding_block_adding_its_positions_is_read_as_a_scaled_lookup(tmp_path, scale, verdict):
    """The positions an embedding block adds itself depend on the position only: the lookup's scale is read from
    two token draws at the same positions, so sqrt(d_model) passes and a missing scale still fails."""
    path = tmp_path / "embeddings.py"
    path.write_text(EMBEDDING_WITH_POSITIONS.replace("math.sqrt(d_model)", scale))
    code, output, report = run_suite(f"--impl={path}", "-k", "embedding_scaled", tmp_path=tmp_path)
    found = [c["verdict"] for c in report["checks"] if c["component"] == "embedding"]
    assert found == [verdict], output
