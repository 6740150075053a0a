"""Locating a disagreement with the reference (``conformance/checks/test_behaviour.py``: ``locate``): when a block's
outputs differ from the reference's under the mapped weights and no known variant explains them, the candidate's
sub-blocks are put one role at a time in place of the reference's own, and the smallest whose substitution makes
the reference compute the candidate's outputs is named in a fail, with the largest difference before and after.

The implementation here is the reference with its attributes renamed (``w_1`` -> ``expand``, ``layers`` ->
``blocks``, ...), as another author would write it: its weights map onto the reference's by registration order
only, which alone leaves a disagreement unconfirmed (``reference_mapping_unconfirmed``)."""
import re

import pytest
import torch

from conformance.contract.interface import Config
from conformance.contract.weights import map_reference_weights, pinned_by_shapes
from reference import transformer
from tests import mutants as catalogue
from tests.mutation_score import run_suite
from tests.test_mutants import IN_PROCESS

RENAMED = {"w_1": "expand", "w_2": "contract", "w_q": "to_q", "w_k": "to_k", "w_v": "to_v", "w_o": "to_out",
           "gain": "weight", "bias": "shift", "lookup": "table", "linear": "out", "self_attention": "attend_self",
           "cross_attention": "attend_memory", "feed_forward": "mlp", "layer_norm": "norm", "layers": "blocks",
           "encoder": "enc", "decoder": "dec"}
RELU_AFTER_SECOND_LINEAR = ("return torch.relu(self.expand(x))\n\n    def forward(self, x):\n"
                            "        return self.contract(self.hidden(x))",
                            "return self.expand(x)\n\n    def forward(self, x):\n"
                            "        return torch.relu(self.contract(self.hidden(x)))")
"""The issue's example: the ReLU moved after the second linear map; no variant of the reference names it."""


def other_style(*edits):
    """The reference with its attributes renamed, then ``edits`` (``(old, new)`` on the renamed text) applied."""
    source = re.sub(r"\.(" + "|".join(RENAMED) + r")\b", lambda m: "." + RENAMED[m[1]], catalogue.reference_source())
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def agreement(source, tmp_path):
    """``{component: (verdict, cause, message)}`` of ``test_agrees_with_reference`` on ``source``."""
    path = tmp_path / "other_style.py"
    path.write_text(source)
    _, output, report = run_suite(path, tmp_path, target="conformance/checks/test_behaviour.py", in_process=IN_PROCESS,
                                  extra=("-k", "agrees_with_reference"))
    assert report is not None, output[-3000:]
    return {c["component"]: (c["verdict"], c["cause"], c["message"]) for c in report["checks"]}


def test_the_other_style_maps_by_order_and_agrees(tmp_path):
    namespace = {}
    exec(compile(other_style(), "other_style.py", "exec"), namespace)
    cfg = Config(d_model=8, h=2, d_ff=16, N=2)
    model = namespace["Transformer"](cfg.src_vocab, cfg.tgt_vocab, cfg.N, cfg.d_model, cfg.d_ff, cfg.h)
    assert map_reference_weights(model, transformer.Transformer(cfg.src_vocab, cfg.tgt_vocab, cfg.N, cfg.d_model,
                                                                cfg.d_ff, cfg.h)) == "by_order"
    verdicts = agreement(other_style(), tmp_path)
    assert {c: v for c, (v, *_) in verdicts.items() if v != "pass"} == {}


def test_a_bug_in_a_sub_block_is_located_and_named(tmp_path):
    verdicts = agreement(other_style(RELU_AFTER_SECOND_LINEAR), tmp_path)
    # alone, the feed-forward network's by-order mapping stays unconfirmed: nothing inside it to substitute
    assert verdicts["feed_forward"][:2] == ("missing", "feed_forward.reference_mapping_unconfirmed")
    paths = {"encoder_layer": "feed_forward", "decoder_layer": "feed_forward", "encoder": "layers.0.feed_forward",
             "decoder": "layers.0.feed_forward", "model": "decoder.layers.0.feed_forward"}  # the reference's paths
    for component, path in paths.items():
        verdict, cause, message = verdicts[component]
        assert (verdict, cause) == ("fail", f"{component}.disagrees_in_feed_forward"), message
        assert re.search(rf"\(at (?:[^)]*, )?{re.escape(path)}(?:, [^)]*)? of the reference's {component}\)",
                         message), message
        before, after = re.search(r"differ by up to ([\d.e+-]+) .*largest difference ([\d.e+-]+)\)", message).groups()
        assert float(before) > 1e-3 and float(after) <= 1e-3, message
    for component in ("embedding", "positional_encoding", "multi_head_attention", "layer_norm",
                      "sublayer_connection", "generator"):
        assert verdicts[component][0] == "pass", verdicts[component]


def test_a_sub_block_whose_own_mapping_is_uncertain_is_located_but_not_failed(tmp_path):
    """Attention's four d_model x d_model projections could have been mapped onto one another: the substitution
    shows where the difference lies, but cannot tell a bug from weights copied to the wrong projection."""
    over_queries = ("weights = scores.softmax(dim=-1)", "weights = scores.softmax(dim=-2)")
    verdicts = agreement(other_style(over_queries), tmp_path)
    for component in ("encoder_layer", "model"):
        verdict, cause, message = verdicts[component]
        assert (verdict, cause) == ("missing", f"{component}.reference_mapping_unconfirmed"), message
        assert "multi_head_attention (" in message and "unconfirmed" in message, message
    assert verdicts["feed_forward"][0] == "pass"


@pytest.mark.parametrize("block, pinned", [
    (lambda c: transformer.FeedForwardNetwork(c.d_model, c.d_ff), True),
    (lambda c: transformer.MultiHeadAttention(c.h, c.d_model), False),
    (lambda c: transformer.LayerNorm(c.d_model), False),
    (lambda c: transformer.OutputLayer(c.d_model, c.vocab_size), True),
])
def test_shapes_pin_a_by_order_mapping_only_where_no_weight_could_take_another_place(block, pinned):
    cfg = Config(d_model=8, h=2, d_ff=16, vocab_size=11)
    reference = block(cfg)
    candidate = block(cfg)
    assert pinned_by_shapes(candidate, reference) is pinned
    if pinned:  # a weight left with its own values (an extra LayerNorm the reference lacks) unpins it
        candidate.extra = torch.nn.LayerNorm(cfg.d_model)
        assert not pinned_by_shapes(candidate, reference)


def test_a_stack_that_returns_its_input_is_located_in_the_model(tmp_path):
    """The mutant ``decoder_loop_result_discarded``: no sub-block of the decoder makes its difference (its layers
    are right), and the model's is the decoder's."""
    mutant = catalogue.BY_NAME["decoder_loop_result_discarded"]
    verdicts = agreement(catalogue.apply(mutant), tmp_path)
    assert verdicts["decoder"][:2] == ("fail", "decoder.disagrees_with_reference")
    verdict, cause, message = verdicts["model"]
    assert (verdict, cause) == ("fail", "model.disagrees_in_decoder") and "(at decoder of the reference's model)" \
        in message, message
    assert verdicts["decoder_layer"][0] == verdicts["encoder"][0] == "pass"
