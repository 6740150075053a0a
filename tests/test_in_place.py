"""Checks in place (issue 23; ``adapters/in_place.py`` records, ``conformance/checks/test_in_place.py`` verifies): the
sub-blocks of the author's model are verified on what the model's own forward pass gave them, whatever their calling
convention, and a finding made there, or found on the checker's call and again there, has the evidence "replayed on
the author's call".

The model is the style study ``tests/styles/own_conventions.py`` (an attention taking the keys' lengths and a causal
flag, an add-and-norm taking a function that returns a pair), with one line changed for each mistake."""
import types
from pathlib import Path

import pytest
import torch

from adapters.in_place import record
from adapters.masks import mask_lengths
from adapters.submission import load_implementation
from conformance.diagnosis import evidence
from conformance.diagnosis.evidence import REPLAYED, CheckCalls, calling_pattern
from conformance.contract.harness import Case, canonical_inputs
from conformance.checks.test_in_place import REPLAY, Run, findings, future_in_place, layer_norm_in_place, verify
from conformance.contract.verdicts import Failure, Missing
from reference import transformer as ref
from tests.suite import run_on_source

STUDY = Path(__file__).parent / "styles" / "own_conventions.py"
SOURCE = STUDY.read_text()
SCALED = "scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)"
MISTAKES = {  # cause -> (the line as written, the line with the mistake)
    "multi_head_attention.scale.unscaled": (SCALED, "scores = q @ k.transpose(-2, -1)"),
    "multi_head_attention.heads_merged_without_transpose": ("(weights @ v).transpose(1, 2).reshape",
                                                            "(weights @ v).reshape"),
    "multi_head_attention.in_place_disagrees": ("out = (weights @ v)", "out = (weights @ v.flip(-2))"),
    "layer_norm.normalizes_over_wrong_axis": ("mean = x.mean(-1, keepdim=True)\n        var = ((x - mean) ** 2).mean(-1",
                                              "mean = x.mean(1, keepdim=True)\n        var = ((x - mean) ** 2).mean(1"),
    "layer_norm.gain_and_bias_not_applied": ("return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift",
                                             "return (x - mean) / torch.sqrt(var + self.eps)"),
    "layer_norm.mean_not_subtracted": ("return self.scale * (x - mean) /", "return self.scale * x /"),
    "layer_norm.divides_by_variance": ("/ torch.sqrt(var + self.eps)", "/ (var + self.eps)"),
    "layer_norm.eps_too_large": ("def __init__(self, features, eps=1e-6):", "def __init__(self, features, eps=0.5):"),
    "sublayer_connection.norm_order.residual_missing": ("return self.norm(x + self.dropout(out))",
                                                        "return self.norm(self.dropout(out))"),
}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """``load(name, source)``: the implementation of ``source`` saved as ``name``.py, loaded once per module."""
    folder, cache = tmp_path_factory.mktemp("in_place"), {}

    def load(name, source):
        if name not in cache:
            path = folder / f"{name}.py"
            path.write_text(source)
            cache[name] = load_implementation(str(path))
        return cache[name]
    return load


def case_of(impl):
    return Case(impl, **REPLAY)


def test_the_recorder_nests_each_call_in_the_call_that_made_it_and_leaves_no_hook():
    case = case_of(load_implementation("reference"))
    model = case.build("model")
    with record(model) as recording, torch.no_grad():
        out = model(*canonical_inputs(case, "model"))
    assert recording.top[0].module is model and torch.equal(recording.top[0].out, out)
    add_and_norm = recording.of([m for m in model.modules() if isinstance(m, ref.AddAndNorm)])
    assert len(add_and_norm) == 5 * REPLAY["cfg"].N  # two per encoder layer, three per decoder layer
    first = add_and_norm[0]
    inside = [type(c.module) for c in first.calls]
    assert inside == [ref.MultiHeadAttention, torch.nn.Dropout, ref.LayerNorm]  # the sub-layer called by a lambda
    assert torch.equal(first.calls[-1].out, first.out)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize("role", ["layer_norm", "multi_head_attention", "sublayer_connection"])
def test_the_studys_blocks_are_read_in_place_and_agree_with_the_paper(loaded, role):
    impl = loaded("own_conventions", SOURCE)
    case = case_of(impl)
    run = Run(case, softmaxes=role == "multi_head_attention")
    assert run.instances(role), f"no call of the {role} recorded"
    assert verify(case, role, run=run) == []


def test_the_studys_model_keeps_the_future_from_every_earlier_position(loaded):
    case = case_of(loaded("own_conventions", SOURCE))
    future_in_place(case, Run(case, softmaxes=False))


@pytest.mark.parametrize("cause", sorted(MISTAKES))
def test_a_mistake_in_a_block_only_the_model_calls_is_named_in_place(loaded, cause):
    written, mistaken = MISTAKES[cause]
    assert written in SOURCE
    impl = loaded(cause, SOURCE.replace(written, mistaken))
    role = cause.split(".")[0]
    found = verify(case_of(impl), role)
    assert [f.cause for f in found] == [cause]
    assert "as the author's model calls it" in found[0].observed


def test_a_later_target_token_changing_an_earlier_output_is_the_future_seen(loaded):
    impl = loaded("no_causal_mask", SOURCE.replace("if causal:", "if False:"))
    case = case_of(impl)
    with pytest.raises(Failure) as seen:
        future_in_place(case, Run(case))
    assert seen.value.cause == "model.future_visible"
    assert "first in the output of the HeadedAttention at decoder.0.self_attention" in seen.value.observed


def test_projections_it_cannot_read_give_no_verdict(loaded):
    packed = SOURCE.replace(
        "self.to_q = nn.Linear(d_model, d_model)\n        self.to_k = nn.Linear(d_model, d_model)\n"
        "        self.to_v = nn.Linear(d_model, d_model)", "self.to_qkv = nn.Linear(d_model, 3 * d_model)").replace(
        "q, k, v = self.split(self.to_q(queries)), self.split(self.to_k(memory)), self.split(self.to_v(memory))",
        "q = self.split(self.to_qkv(queries)[..., :queries.size(-1)])\n"
        "        k = self.split(self.to_qkv(memory)[..., memory.size(-1):2 * memory.size(-1)])\n"
        "        v = self.split(self.to_qkv(memory)[..., 2 * memory.size(-1):])")
    assert packed.count("to_qkv") == 4
    impl = loaded("packed", packed)
    with pytest.raises(Missing) as unread:
        verify(case_of(impl), "multi_head_attention")
    assert unread.value.cause == "adapter.not_read_in_place"
    assert "square projections" in unread.value.observed


def test_an_attention_taking_lengths_is_not_given_a_causal_mask_as_lengths():
    padding = torch.tensor([[True, True, False], [True, True, True]]).unsqueeze(1)
    assert mask_lengths(padding, padding_alone=True).tolist() == [2, 3]
    causal = padding & torch.ones(3, 3, dtype=torch.bool).tril()
    assert mask_lengths(causal).tolist() == [2, 3]  # a model builds its causal mask itself
    with pytest.raises(Missing) as lost:
        mask_lengths(causal, padding_alone=True)
    assert lost.value.cause == "adapter.mask_not_expressible_as_lengths"


# -- the evidence "replayed on the author's call" --------------------------------------------------------------------
def foreign_call(impl):
    """The check's calls of an attention made in a form the author's model never uses (a 3-d boolean mask where the
    model gives lengths)."""
    calls = CheckCalls("multi_head_attention")
    target = impl.roles["multi_head_attention"].target
    x = torch.zeros(3, 4, 12)
    calls.log.append([calling_pattern(target.forward, (x, x, torch.ones(3, 4, 4, dtype=torch.bool)), {},
                                      method=True), True])
    return calls


def test_a_failure_on_the_checkers_call_found_again_in_place_is_replayed(loaded):
    impl = loaded("unscaled", SOURCE.replace(SCALED, MISTAKES["multi_head_attention.scale.unscaled"][1]))
    assert "multi_head_attention.scale.unscaled" in findings(impl, "multi_head_attention")
    found = evidence.evidence(impl, "multi_head_attention", "multi_head_attention.scale.unscaled",
                              foreign_call(impl), crashed=False, in_place=findings)
    assert (found.kind, found.not_as_author) == (REPLAYED, "")
    other = evidence.evidence(impl, "multi_head_attention", "multi_head_attention.mask_ignored", foreign_call(impl),
                              crashed=False, in_place=findings)
    assert other.kind == evidence.CHECKERS_CALL and "the check called it as" in other.not_as_author


def test_a_finding_in_place_is_reported_replayed_on_the_authors_call(tmp_path):
    source = SOURCE.replace(*MISTAKES["sublayer_connection.norm_order.residual_missing"])
    code, output, report, records = run_on_source(tmp_path, "model.py", source, "-k", "in_place")
    record_ = records[("sublayer_connection", "residuals_add_in_place")]
    assert (record_["verdict"], record_["cause"], record_["evidence"]) == (
        "fail", "sublayer_connection.norm_order.residual_missing", REPLAYED), output
    assert "[replayed on the author's call]" in output
    assert records[("layer_norm", "layer_norms_normalize_in_place")]["verdict"] == "pass"
    assert "checked in place, inside the model's own forward pass: layer_norm, multi_head_attention, " \
           "sublayer_connection" in report["notes"][-1]


def test_a_layer_norm_given_positions_the_model_zeroed_is_read_on_the_others():
    """A position constant across its features (a padded row the model zeroed) says nothing of a normalization
    (0 / 0): the LayerNorm is read on its other positions, and a wrong one is still named there."""
    norm = torch.nn.LayerNorm(8)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    x[:, -2:] = 0.0
    case = Case(load_implementation("reference"), REPLAY["cfg"], batch=2, src_len=5, tgt_len=5, dtype=torch.float64,
                seed=0)
    call = types.SimpleNamespace(tensors=[x], out=norm.double()(x).detach(), module=norm, path="encoder.norm")
    layer_norm_in_place(case, call, None, "paper")  # (no finding)
    call.out = call.out * 2
    with pytest.raises(Failure):
        layer_norm_in_place(case, call, None, "paper")
