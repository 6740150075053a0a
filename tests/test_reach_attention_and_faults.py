"""Causes nothing else reaches, of attention scores and weights, of crashes the checker's own doing, and of what
grading itself sees (see ``tests/reaching.py``)."""
import json
import math

import pytest
import torch
import torch.nn as nn

from conformance.checks import test_behaviour, test_layer_norm, test_masks, test_shapes, test_softmax
from conformance.grading import checking
from conformance.grading.judge import Raised, RemoteImplementation
from reference import transformer as ref
from tests.reaching import cause_of


# -- attention scores and weights ------------------------------------------------------------------------------
class HeadsAttention(nn.Module):
    """§3.2.2's multi-head attention, its scores divided by ``divisor(d_model, d_k, number of keys)``."""

    def __init__(self, h, d_model):
        super().__init__()
        self.h, self.d_k = h, d_model // h
        self.w_q, self.w_k, self.w_v, self.w_o = [nn.Linear(d_model, d_model) for _ in range(4)]

    @staticmethod
    def divisor(d_model, d_k, keys):
        return math.sqrt(d_k)

    def split(self, x):
        return x.view(x.size(0), -1, self.h, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split(self.w_q(query)), self.split(self.w_k(key)), self.split(self.w_v(value))
        scores = q @ k.transpose(-2, -1) / self.divisor(self.h * self.d_k, self.d_k, k.size(-2))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(1), -1e9)
        heads = torch.softmax(scores, dim=-1) @ v
        return self.w_o(heads.transpose(1, 2).reshape(query.size(0), -1, self.h * self.d_k))


class ByDModel(HeadsAttention):
    divisor = staticmethod(lambda d_model, d_k, keys: d_model)


class BySqrtKeyLength(HeadsAttention):
    divisor = staticmethod(lambda d_model, d_k, keys: math.sqrt(keys))


class PerHeadTensor(HeadsAttention):
    """Holds a (h, d_model, 1) parameter besides its projections: a layout the probe cannot set."""

    def __init__(self, h, d_model):
        super().__init__(h, d_model)
        self.mix = nn.Parameter(torch.zeros(h, d_model, 1))

    def forward(self, query, key, value, mask=None):
        return super().forward(query, key, value, mask) + self.mix.sum()


def scaled_scores(query, key):
    return query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))


def masked(scores, mask):
    return scores if mask is None else scores.masked_fill(~mask, -1e9)


def manual_softmax(query, key, value, mask=None):
    """Softmax written out with exp and sum: no softmax call to observe."""
    scores = masked(scaled_scores(query, key), mask)
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)
    return weights @ value, weights


def shifted_scores(query, key, value, mask=None):
    """Scores plus one: the softmax is the same, the scores no multiple of Q K^T."""
    weights = torch.softmax(masked(scaled_scores(query, key) + 1, mask), dim=-1)
    return weights @ value, weights


def first_query_blocked(query, key, value, mask=None):
    """Every key hidden from the first query: its weights are NaN."""
    scores = masked(scaled_scores(query, key), mask)
    scores[..., 0, :] = -math.inf
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def first_sample_weights(query, key, value, mask=None):
    """The weights of the first sample used for every sample: a softmax over part of the batch only."""
    weights = torch.softmax(masked(scaled_scores(query, key), mask)[:1], dim=-1).expand(*query.shape[:-1],
                                                                                          key.size(-2))
    return weights @ value, weights


@pytest.mark.parametrize("cause, check, component, roles", [
    ("multi_head_attention.scale.d_model", test_softmax.test_scores_scaled_by_inverse_sqrt_d_k,
     "multi_head_attention", {"multi_head_attention": ByDModel}),
    ("multi_head_attention.scale.sqrt_key_length", test_softmax.test_scores_scaled_by_inverse_sqrt_d_k,
     "multi_head_attention", {"multi_head_attention": BySqrtKeyLength}),
    ("multi_head_attention.projections_unrecognised", test_softmax.test_scores_scaled_by_inverse_sqrt_d_k,
     "multi_head_attention", {"multi_head_attention": PerHeadTensor}),
    ("attention.softmax_not_observed", test_softmax.test_attention_weights_are_distributions_over_keys, "attention",
     {"attention": manual_softmax}),
    ("attention.scores_not_proportional_to_qk", test_softmax.test_scores_scaled_by_inverse_sqrt_d_k, "attention",
     {"attention": shifted_scores}),
    ("attention.weights_not_normalized", test_softmax.test_attention_weights_are_distributions_over_keys,
     "attention", {"attention": first_query_blocked}),
    ("attention.weights_layout_unrecognised", test_masks.test_masked_attention_weights_are_zero, "attention",
     {"attention": first_sample_weights}),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) and "." in v else "")
def test_attention_scores_and_weights(cause, check, component, roles):
    assert cause_of(check, component, roles) == cause
    assert cause_of(check, component, {}) == "pass"


# -- crashes the checker's own doing (conformance.diagnosis.classify.checker_fault) -----------------------------------------------------
def without_dropout(d_model, h, d_ff):
    return ref.EncoderLayer(d_model, h, d_ff, 0.0)


without_dropout.hyperparameters = {"d_model", "h", "d_ff"}


class SixteenHeads(HeadsAttention):
    """Splits the width into 16 heads of its own: a head width of 0 for a small d_model."""

    def __init__(self, d_model):
        super().__init__(16, d_model)
        self.scale = 1 / (d_model // 16)


SixteenHeads.hyperparameters = {"d_model"}


class SelfAttentionCalledAlone(ref.EncoderLayer):
    """Calls its attention with the input alone: a call the reference's attention does not take."""

    def forward(self, x, src_mask):
        return self.after_feed_forward(self.self_attention(x), self.feed_forward)


class OffDevice(ref.FeedForwardNetwork):
    """Masks its input with a tensor kept on another device (the meta device), not moved with the module."""

    def __init__(self, d_model, d_ff):
        super().__init__(d_model, d_ff)
        self.keep = torch.zeros(d_model, dtype=torch.bool, device="meta")

    def forward(self, x):
        return super().forward(x.masked_fill(self.keep, 0.0))


class TargetVocabularyOfItsOwn(ref.Transformer):
    """Sizes its target side from a vocabulary of its own (a configuration field the checker does not set)."""

    def __init__(self, src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout):
        super().__init__(src_vocab, 2, N, d_model, d_ff, h, dropout, share_embeddings=False)


class OffsetTargetIds(ref.Transformer):
    """Shifts the target ids past the end of its table (the code's own mistake)."""

    def decode(self, tgt, memory, src_mask, tgt_mask):
        return super().decode(tgt + 100, memory, src_mask, tgt_mask)


class NormedAtThePapersWidth(ref.FeedForwardNetwork):
    """Normalizes its output with a LayerNorm of the paper's width, 512, whatever d_model it is given."""

    def __init__(self, d_model, d_ff):
        super().__init__(d_model, d_ff)
        self.norm = nn.LayerNorm(512)

    def forward(self, x):
        return self.norm(super().forward(x))


class LookupOfItsOwnSize(nn.Module):
    """Sizes its table from a configuration of its own (64 rows of 32), whatever it is given."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.table = nn.Embedding(64, 32)

    def forward(self, tokens):
        return self.table(tokens)


def test_a_block_that_runs_at_the_papers_sizes_is_not_blamed_for_the_checkers():
    """A crash at the checker's small sizes of a block that runs at the paper's widths (its code fixes one of them),
    or a block built at widths of its own whatever it is given, is missing (a crash at every size stays the code's
    error: the offset target ids below)."""
    check = test_shapes.test_output_shape
    assert cause_of(check, "feed_forward", {"feed_forward": NormedAtThePapersWidth}) == \
        "adapter.sizes_fixed_by_the_code"
    assert cause_of(check, "embedding", {"embedding": LookupOfItsOwnSize}) == "adapter.sizes_fixed_by_the_code"


def test_an_embedding_sized_otherwise_than_configured_is_not_blamed():
    """Token ids of the configured vocabularies overflowing a table sized otherwise say that the checker's
    vocabulary was not taken (missing); ids beyond every configured vocabulary are the code's error."""
    check = test_shapes.test_output_shape
    assert cause_of(check, "model", {"model": TargetVocabularyOfItsOwn}) == "adapter.vocabulary_not_taken"
    assert cause_of(check, "model", {"model": OffsetTargetIds}) == "error.IndexError"


@pytest.mark.parametrize("cause, check, component, roles, grafts", [
    ("adapter.dropout_rate_not_taken", test_behaviour.test_dropout_acts_in_training, "encoder_layer",
     {"encoder_layer": without_dropout}, None),
    ("adapter.head_count_not_taken", test_shapes.test_output_shape, "multi_head_attention",
     {"multi_head_attention": SixteenHeads}, None),
    ("adapter.graft_does_not_fit", test_shapes.test_output_shape, "encoder_layer",
     {"encoder_layer": SelfAttentionCalledAlone}, {"encoder_layer": ["the reference's MultiHeadAttention"]}),
    ("device.tensor_on_wrong_device", test_shapes.test_output_shape, "feed_forward", {"feed_forward": OffDevice},
     None),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) and "." in v else "")
def test_a_crash_of_the_checkers_own_doing(cause, check, component, roles, grafts):
    assert cause_of(check, component, roles, grafts=grafts) == cause


class NeedsSetup(ref.FeedForwardNetwork):
    """Sets the scale of its output in a method of its own that nothing calls before ``forward``."""

    def init_scale(self):
        self.scale = 1.0

    def forward(self, x):
        return super().forward(x) * self.scale


class StatesItsInputRank(ref.FeedForwardNetwork):
    """Asserts an input of two dimensions: a precondition the canonical (batch, length, d_model) call breaks."""

    def forward(self, x):
        assert x.dim() == 2
        return super().forward(x)


class RefusesItsInputRank(ref.FeedForwardNetwork):
    """Raises on an input of other than two dimensions, under an ``if`` testing its argument only: a precondition."""

    def forward(self, x):
        if x.dim() != 2:
            raise ValueError("expects (tokens, d_model)")
        return super().forward(x)


class WidthsAsAList(nn.Module):
    """Takes its widths as one list, ``[d_model, d_ff, d_model]``, where the checker gives a number."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.layers = nn.Sequential(*(nn.Linear(a, b) for a, b in zip(d_ff[:-1], d_ff[1:])))

    def forward(self, x):
        return self.layers(x)


class RaisesOnItsOwnState(ref.FeedForwardNetwork):
    """Raises under an ``if`` testing its own state, not its arguments: the code's own error."""

    def forward(self, x):
        if self.training is not None:
            raise ValueError("not finished")
        return super().forward(x)


class OneFeatureShortNorm(nn.LayerNorm):
    """Drops a feature: an output of a form the layer-norm probe does not expect."""

    def forward(self, x):
        return super().forward(x)[..., :-1]


@pytest.mark.parametrize("cause, check, component, roles", [
    ("adapter.needs_setup_call", test_shapes.test_output_shape, "feed_forward", {"feed_forward": NeedsSetup}),
    ("adapter.precondition_not_met", test_shapes.test_output_shape, "feed_forward",
     {"feed_forward": StatesItsInputRank}),
    ("adapter.precondition_not_met", test_shapes.test_output_shape, "feed_forward",
     {"feed_forward": RefusesItsInputRank}),
    ("error.ValueError", test_shapes.test_output_shape, "feed_forward", {"feed_forward": RaisesOnItsOwnState}),
    ("adapter.sequence_given_a_number", test_shapes.test_output_shape, "feed_forward",
     {"feed_forward": WidthsAsAList}),
    ("adapter.check_crashed", test_layer_norm.test_normalizes_each_position, "layer_norm",
     {"layer_norm": OneFeatureShortNorm}),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) and "." in v else "")
def test_a_crash_the_checker_cannot_blame_on_the_code(cause, check, component, roles):
    """(A raise under a test of the code's own state stays the code's error.)"""
    assert cause_of(check, component, roles) == cause


# -- what grading itself sees ----------------------------------------------------------------------------------
class ClosedChannel:
    """A channel whose other end is gone."""

    def send(self, message):
        raise BrokenPipeError("the submission's process is gone")


class ListAnswers:
    """A channel whose other end answers with a list, not a message."""

    def send(self, message):
        pass

    def receive(self):
        return ["roles"]


def test_a_submissions_process_that_stopped_answering_or_answers_nonsense():
    with pytest.raises(Raised) as raised:
        RemoteImplementation(ClosedChannel())
    assert (raised.value.verdict, raised.value.cause) == ("error", "grading.submission_process_ended")
    with pytest.raises(Raised) as raised:
        RemoteImplementation(ListAnswers())
    assert (raised.value.verdict, raised.value.cause) == ("error", "grading.unreadable_answer")


def test_a_check_that_left_no_verdict(tmp_path):
    work, reports, apart = tmp_path / "work", tmp_path / "report", tmp_path / "apart"
    for folder in (work, reports, apart):
        folder.mkdir()
    nodeids = ["conformance/checks/test_shapes.py::test_output_shape[feed_forward]",
               "conformance/checks/test_shapes.py::test_output_shape[layer_norm]"]
    reported = dict(component="feed_forward", family="shapes", check="output_shape", verdict="pass", cause="",
                    message="", nodeid=nodeids[0])
    (reports / "integrity.json").write_text(json.dumps(dict(nonce="n", exitstatus=0)))
    (reports / "report.json").write_text(json.dumps(dict(checks=[reported])))
    result = checking.result_from("s", tmp_path / "s.py", {"status": 0}, work, reports, "n", nodeids,
                          dict(timeout=60, memory=1 << 30, output_limit=1 << 20), apart)
    assert [(c["nodeid"], c["verdict"], c["cause"]) for c in result["checks"]] == [
        (nodeids[0], "pass", ""), (nodeids[1], "error", "grading.check_did_not_report")]


def test_a_padding_helper_giving_one_flag_per_token_passes():
    """``(tokens != pad_idx)`` of shape (batch, length), the keys' flags its blocks expand, is the padding mask;
    flags over the queries instead, (batch, length, 1), are not."""
    def per_token(tokens, pad_idx):
        return tokens != pad_idx

    def per_query(tokens, pad_idx):
        return (tokens != pad_idx)[..., None]
    check = test_masks.test_padding_mask_helper
    assert cause_of(check, "padding_mask", {"padding_mask": per_token}) == "pass"
    assert cause_of(check, "padding_mask", {"padding_mask": per_query}) == "padding_mask.masks_queries"
