"""Code whose attention demands one whole (batch, Lq, Lk) mask (adapters/masks.py ``FULL_SHAPE``), mask parameters
named for the attention they feed (``self_attention_mask``, ``cross_attention_mask``), a block found inside another
built with its own class (never a stand-in for itself), and a crash of the checker's own code named so."""
import inspect

import pytest
import torch
import torch.nn as nn

from adapters.building import PROBE, Binding, build_from_plan, is_graft
from adapters.call_plans import call_plan, constant
from adapters.masks import FULL_SHAPE, full_masks, to_convention
from adapters.names import CANONICAL_CALLS
from conformance.diagnosis import classify as diagnosis
from conformance.contract.interface import Implementation
from tests.suite import run_on_source

WHOLE_MASK_MODEL = '''
import math
import torch
import torch.nn as nn


class Attend(nn.Module):
    """One head's attention; its mask must be whole: (batch, queries, keys)."""

    def forward(self, q, k, v, mask=None):
        scores = q @ k.transpose(1, 2) / SCALE(q.size(-1))
        if mask is not None:
            assert mask.shape == scores.shape, "a (batch, Lq, Lk) mask"
            scores = scores.masked_fill(~mask, -1e9)
        return scores.softmax(-1) @ v


def SCALE(d_head):
    return math.sqrt(d_head)


class MultiHead(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.to_q, self.to_k, self.to_v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.to_out = nn.Linear(d_model, d_model)
        self.attend = Attend()

    def forward(self, Q, K, V, mask=None):
        q, k, v = self.to_q(Q), self.to_k(K), self.to_v(V)
        heads = []
        for i in range(self.n_heads):
            part = slice(i * self.d_head, (i + 1) * self.d_head)
            heads.append(self.attend(q[..., part], k[..., part], v[..., part], mask))
        return self.to_out(torch.cat(heads, dim=-1))


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.inner, self.outer = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.outer(torch.relu(self.inner(x)))


class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attention, self.feed_forward = MultiHead(d_model, n_heads), FeedForward(d_model, d_ff)
        self.norm_1, self.norm_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout_1, self.dropout_2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.norm_1(x + self.dropout_1(self.self_attention(Q=x, K=x, V=x, mask=mask)))
        return self.norm_2(x + self.dropout_2(self.feed_forward(x)))


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attention, self.cross_attention = MultiHead(d_model, n_heads), MultiHead(d_model, n_heads)
        self.feed_forward = FeedForward(d_model, d_ff)
        self.norm_1, self.norm_2, self.norm_3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout_1, self.dropout_2, self.dropout_3 = (nn.Dropout(dropout) for _ in range(3))

    def forward(self, x, encoder_output, self_attention_mask=None, cross_attention_mask=None):
        x = self.norm_1(x + self.dropout_1(self.self_attention(Q=x, K=x, V=x, mask=self_attention_mask)))
        x = self.norm_2(x + self.dropout_2(self.cross_attention(
            Q=x, K=encoder_output, V=encoder_output, mask=CROSS_MASK)))
        return self.norm_3(x + self.dropout_3(self.feed_forward(x)))
'''
CORRECT = WHOLE_MASK_MODEL.replace("CROSS_MASK", "cross_attention_mask")
SCALED_BY_D_K = CORRECT.replace("SCALE(q.size(-1))", "SCALE(q.size(-1) ** 2)")
"""Planted: the scores divided by d_k, not sqrt(d_k) (§3.2.1), in heads computed one at a time."""
CROSS_UNMASKED = WHOLE_MASK_MODEL.replace("CROSS_MASK", "None")
"""Planted: the cross-attention given no mask, so padded memory positions are seen (§3.2.3)."""


def blamed(records):
    return {(key, r["cause"]) for key, r in records.items() if r["verdict"] in ("fail", "error")}


def test_an_attention_demanding_whole_masks_is_checked_with_them_and_blamed_for_nothing(tmp_path):
    code, output, report, records = run_on_source(tmp_path, "whole.py", CORRECT)
    assert report is not None, output
    assert not blamed(records), blamed(records)
    for block in ("multi_head_attention", "encoder_layer", "decoder_layer"):
        assert records[(block, "masked_keys_do_not_change_outputs")]["verdict"] == "pass", block
    assert any("one (batch, Lq, Lk) mask each" in note for note in report["notes"]), report["notes"]


@pytest.mark.parametrize("source, component, cause", [
    (SCALED_BY_D_K, "multi_head_attention", "multi_head_attention.scale.d_k"),
    (CROSS_UNMASKED, "decoder_layer", "decoder_layer.mask_ignored"),
], ids=["scale", "cross_mask"])
def test_a_bug_in_code_taking_whole_masks_is_still_named(tmp_path, source, component, cause):
    code, output, report, records = run_on_source(tmp_path, "whole.py", source, "-k", component)
    assert (component, cause) in {(r["component"], r["cause"]) for r in records.values()
                                  if r["verdict"] == "fail"}, blamed(records)


WHOLE_MASK_TRANSLATOR = '''

class Translator(nn.Module):
    """Token lookups scaled by sqrt(d_model), sinusoids, and N blocks per side; one whole mask per attention."""
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, n_heads, d_ff, n_layers, max_tokens=64):
        super().__init__()
        self.d_model = d_model
        self.src_lookup, self.tgt_lookup = nn.Embedding(src_vocab_size, d_model), nn.Embedding(tgt_vocab_size, d_model)
        position, rate = torch.arange(max_tokens)[:, None], torch.exp(torch.arange(0, d_model, 2) * (-math.log(1e4) / d_model))
        table = torch.zeros(max_tokens, d_model)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
        self.register_buffer("table", table)
        self.encoders = nn.ModuleList([EncoderBlock(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.decoders = nn.ModuleList([DecoderBlock(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.to_vocab = nn.Linear(d_model, tgt_vocab_size)

    def forward(self, src_tokens, tgt_tokens, encoder_self_attention_mask, decoder_self_attention_mask,
                decoder_cross_attention_mask):
        x = self.src_lookup(src_tokens) * math.sqrt(self.d_model) + self.table[: src_tokens.size(1)]
        for block in self.encoders:
            x = block(x, mask=encoder_self_attention_mask)
        y = self.tgt_lookup(tgt_tokens) * math.sqrt(self.d_model) + self.table[: tgt_tokens.size(1)]
        for block in self.decoders:
            y = block(y, x, self_attention_mask=decoder_self_attention_mask,
                      cross_attention_mask=decoder_cross_attention_mask)
        return torch.log_softmax(self.to_vocab(y), dim=-1)
'''


def test_a_model_demanding_whole_masks_is_given_one_per_attention_and_blamed_for_nothing(tmp_path):
    """The model's encoder-decoder attention takes a source mask of its own: with the target's rows."""
    code, output, report, records = run_on_source(tmp_path, "translator.py", CORRECT + WHOLE_MASK_TRANSLATOR,
                                                  "-k", "model")
    assert report is not None, output
    assert not blamed(records), blamed(records)
    assert records[("model", "masked_keys_do_not_change_outputs")]["verdict"] == "pass", report["notes"]


def test_a_bug_in_a_model_demanding_whole_masks_is_still_named(tmp_path):
    code, output, report, records = run_on_source(tmp_path, "translator.py", CROSS_UNMASKED + WHOLE_MASK_TRANSLATOR,
                                                  "-k", "model and masked_keys")
    assert records[("model", "masked_keys_do_not_change_outputs")]["verdict"] == "fail", blamed(records)

def test_whole_masks_have_the_rows_of_the_queries():
    x, memory = torch.zeros(3, 4, 6), torch.zeros(3, 5, 6)
    padding = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] + [False] * 4]).unsqueeze(1)
    causal = torch.tril(torch.ones(1, 4, 4, dtype=torch.bool))
    layer = full_masks({"x": x, "memory": memory, "src_mask": padding, "tgt_mask": causal})
    assert layer["src_mask"].shape == (3, 4, 5) and torch.equal(layer["src_mask"][:, 2], padding[:, 0])
    assert layer["tgt_mask"].shape == (3, 4, 4) and torch.equal(layer["tgt_mask"][1], causal[0])
    encoder = full_masks({"x": memory, "src_mask": padding})
    assert encoder["src_mask"].shape == (3, 5, 5)
    assert to_convention(encoder["src_mask"], "blocked" + FULL_SHAPE).equal(~encoder["src_mask"])


def test_mask_parameters_named_for_their_attention_are_given_their_masks():
    def forward(x, encoder_output, self_attention_mask=None, cross_attention_mask=None):
        pass

    def reordered(x, memory, cross_attn_mask=None, self_attn_mask=None):
        pass
    for function in (forward, reordered):
        parameters = list(inspect.signature(function).parameters.values())
        plan = dict(zip((p.name for p in parameters), call_plan(parameters, CANONICAL_CALLS["decoder_layer"])))
        assert plan[next(n for n in plan if n.startswith("self"))] == "tgt_mask", plan
        assert plan[next(n for n in plan if n.startswith("cross"))] == "src_mask", plan


UNREAD_MASKS = CORRECT.replace("self_attention_mask", "first").replace("cross_attention_mask", "second_mask")


def test_a_leak_through_mask_parameters_the_checker_cannot_feed_is_missing_not_a_block_without_a_mask(tmp_path):
    code, output, report, records = run_on_source(tmp_path, "unread.py", UNREAD_MASKS, "-k", "decoder_layer")
    record = records[("decoder_layer", "masked_keys_do_not_change_outputs")]
    assert (record["verdict"], record["cause"]) == ("missing", "adapter.mask_parameter_not_fed"), record
    assert "second_mask" in record["message"], record["message"]


class Heads(nn.Module):
    """An attention block that does not work under the canonical call (it wants a setup of its own)."""

    def __init__(self, d_model, h):
        super().__init__()
        self.project = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        return self.project(query) * self.scale


class Layer(nn.Module):
    def __init__(self, d_model, h):
        super().__init__()
        self.attention = Heads(d_model, h)

    def forward(self, x, mask=None):
        return self.attention(x, x, x, mask)


def test_a_block_found_inside_another_is_built_as_its_own_class_never_as_a_stand_in_for_itself():
    sizes = {"d_model": "d_model", "h": "h"}
    bindings = {"multi_head_attention": Binding("multi_head_attention", "Heads", Heads, sizes, works=False),
                "encoder_layer": Binding("encoder_layer", "Layer", Layer, sizes)}
    layer = build_from_plan(bindings["encoder_layer"], PROBE, bindings)
    assert is_graft(layer.attention), type(layer.attention)  # (the layer's own code is checked around a stand-in)
    part = Binding("multi_head_attention", "Heads", Heads, part_of=(bindings["encoder_layer"], "attention", bindings))
    built = build_from_plan(part, PROBE, bindings)
    assert type(getattr(built, "inner", built)) is Heads


def test_a_crash_inside_the_checkers_own_code_through_library_code_is_the_checkers():
    try:
        constant("value:(")  # the checker's own code, raising in the standard library's parser
    except SyntaxError as exc:
        info = pytest.ExceptionInfo.from_exception(exc.with_traceback(exc.__traceback__.tb_next))
    verdict, cause, message = diagnosis.classify(info, "feed_forward", impl=Implementation("test", {}))
    assert (verdict, cause) == ("missing", "adapter.check_crashed"), message
    assert "call_plans.py" in message, message
