"""Causes of the catalogue (``conformance/causes.py``) that no mutant or answer key reaches, each reached here: a
small implementation with the property, run through the check that names it, asserted to give that cause (and, where
two causes are easily confused, not the other)."""
import dataclasses
import inspect
import json
import math

import pytest
import torch
import torch.nn as nn

from conformance import (plugin, test_behaviour, test_embeddings, test_layer_norm, test_masks, test_parameters,
                         test_information_flow, test_norm_order, test_positional_encoding, test_shapes, test_softmax)
from conformance.grading import runner
from conformance.grading.judge import Raised, RemoteImplementation
from conformance.interface import Config, Implementation
from reference import transformer as ref

CFG = Config(d_model=8, h=2, d_ff=16, dropout=0.0, N=2, vocab_size=11, src_vocab=11, tgt_vocab=13, max_len=12)
DRAWN = dict(cfg=CFG, batch=3, src_len=5, tgt_len=4, dtype=torch.float64, seed=1)


def cause_of(check, component, roles, contract="paper", grafts=None, **drawn):
    """The cause ``check`` gives for ``component`` on the reference with ``roles`` in place of its own ("pass" when
    it passes), on one drawn setting (:data:`DRAWN`, changed by ``drawn``), as the plugin reports it
    (``plugin.classify``: a crash the checker's own doing is named so)."""
    impl = Implementation("test", {**ref.CONFORMANCE_ROLES, **roles}, grafts=grafts)
    run = check.hypothesis.inner_test
    arguments = dict(impl=impl, device="cpu", component=component, drawn={**DRAWN, **drawn})
    if "contract" in inspect.signature(run).parameters:
        arguments["contract"] = contract
    try:
        run(**arguments)
    except Exception as exc:  # noqa: BLE001 - what the plugin would make of it, the traceback from the check on
        exc = exc.with_traceback(exc.__traceback__.tb_next)  # (as under pytest, whose frames are library code)
        return plugin.classify(pytest.ExceptionInfo.from_exception(exc), component, impl=impl)[1]
    return "pass"


# -- the subsequent mask: inverted and one position too far are told apart ------------------------------------
def inverted_subsequent_mask(size):
    return torch.triu(torch.ones(1, size, size, dtype=torch.bool), 1)


def next_position_subsequent_mask(size):
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool), 1)


def test_an_inverted_subsequent_mask_and_one_seeing_the_next_position_are_told_apart():
    check = test_masks.test_subsequent_mask_helper
    assert cause_of(check, "subsequent_mask", {"subsequent_mask": inverted_subsequent_mask}) == \
        "subsequent_mask.inverted"
    assert cause_of(check, "subsequent_mask", {"subsequent_mask": next_position_subsequent_mask}) == \
        "subsequent_mask.includes_next_position"
    assert cause_of(check, "subsequent_mask", {}) == "pass"


def test_a_subsequent_mask_wrong_in_no_named_way():
    def mask(size):
        return torch.tril(torch.ones(1, size, size, dtype=torch.bool), -2)
    assert cause_of(test_masks.test_subsequent_mask_helper, "subsequent_mask", {"subsequent_mask": mask}) == \
        "subsequent_mask.wrong"


# -- the positional encoding -----------------------------------------------------------------------------------
def angles(max_len, d_model, exponent=lambda two_i, d: two_i / d, base=10000.0, start=0):
    """pos / base^exponent(2i, d_model) for every position and every column pair, ``(max_len, d_model / 2)``."""
    position = torch.arange(start, start + max_len, dtype=torch.float64).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    return position / torch.pow(base, exponent(two_i, d_model))


def interleaved(even, odd):
    table = torch.zeros(even.size(0), 2 * even.size(1), dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = even, odd
    return table


def sinusoids(max_len, d_model, **options):
    a = angles(max_len, d_model, **options)
    return interleaved(torch.sin(a), torch.cos(a))


def concatenated(max_len, d_model, frequencies):
    a = torch.arange(max_len, dtype=torch.float64).unsqueeze(1) * frequencies
    return torch.cat([torch.sin(a), torch.cos(a)], dim=1)


def add(x, rows, dropout):
    return dropout(x + rows)


class Encoding(nn.Module):
    """A positional encoding of ``(batch, length, d_model)`` inputs: the table ``table(max_len, d_model)`` held as
    ``store`` says (a buffer, a trainable parameter or a plain attribute), its first rows combined with the input by
    ``combine(x, rows, dropout)``."""

    def __init__(self, d_model, dropout, max_len, table, combine, store):
        super().__init__()
        self.dropout, self.combine = nn.Dropout(dropout), combine
        values = table(max_len, d_model).to(torch.get_default_dtype()).unsqueeze(0)
        if store == "buffer":
            self.register_buffer("pe", values)
        elif store == "parameter":
            self.pe = nn.Parameter(values)
        else:
            self.pe = values

    def forward(self, x):
        return self.combine(x, self.pe[:, : x.size(1)].to(x.dtype), self.dropout)


def encoding(table=sinusoids, combine=add, store="buffer"):
    """A builder of :class:`Encoding` (the role's canonical constructor)."""
    def build(d_model, dropout, max_len=5000):
        return Encoding(d_model, dropout, max_len, table, combine, store)
    return build


def dropped_twice(x, rows, dropout):
    return dropout(x) + dropout(rows)


TABLES = {
    "positional_encoding.exponent_uses_column_index": lambda n, d: sinusoids(
        n, d, exponent=lambda two_i, d: 2 * two_i / d),
    "positional_encoding.all_columns_cos": lambda n, d: interleaved(torch.cos(angles(n, d)), torch.cos(angles(n, d))),
    "positional_encoding.all_columns_sin": lambda n, d: interleaved(torch.sin(angles(n, d)), torch.sin(angles(n, d))),
    "positional_encoding.positions_start_at_1": lambda n, d: sinusoids(n, d, start=1),
    "positional_encoding.concatenated_sin_cos": lambda n, d: concatenated(
        n, d, torch.pow(10000.0, -torch.arange(0, d, 2) / d)),
    "positional_encoding.timing_signal": lambda n, d: concatenated(
        n, d, torch.pow(10000.0, -torch.arange(d // 2) / (d // 2 - 1))),
    "positional_encoding.table_scaled": lambda n, d: 3 * sinusoids(n, d),
    "positional_encoding.wrong_base": lambda n, d: sinusoids(n, d, base=1000.0),
}
COMBINATIONS = {
    "positional_encoding.zero_on_zero_input": lambda x, rows, dropout: dropout(x * rows),
    "positional_encoding.depends_on_batch_index": lambda x, rows, dropout: dropout(
        x + rows + torch.arange(x.size(0)).to(x)[:, None, None]),
}


@pytest.mark.parametrize("cause, builder", [(cause, encoding(table=table)) for cause, table in TABLES.items()]
                         + [(cause, encoding(combine=combine)) for cause, combine in COMBINATIONS.items()],
                         ids=lambda v: v.split(".")[-1] if isinstance(v, str) else "")
def test_a_table_of_a_known_mistake_is_named(cause, builder):
    check = test_positional_encoding.test_values_match_closed_form
    assert cause_of(check, "positional_encoding", {"positional_encoding": builder}) == cause


class LastRows(Encoding):
    """Adds the table's last rows, not its first."""

    def forward(self, x):
        return self.dropout(x + self.pe[:, self.pe.size(1) - x.size(1):].to(x.dtype))


class WholeTable(Encoding):
    """Adds the whole table, whatever the length."""

    def forward(self, x):
        return self.dropout(x + self.pe.to(x.dtype))


class OneFeatureShort(Encoding):
    """Drops the last feature of shorter inputs."""

    def forward(self, x):
        out = self.dropout(x + self.pe[:, : x.size(1)].to(x.dtype))
        return out if x.size(1) == self.pe.size(1) else out[..., :-1]


@pytest.mark.parametrize("cause, cls", [("positional_encoding.wrong_rows", LastRows),
                                        ("positional_encoding.not_sliced", WholeTable),
                                        ("positional_encoding.shape", OneFeatureShort)])
def test_inputs_shorter_than_max_len(cause, cls):
    def build(d_model, dropout, max_len=5000):
        return cls(d_model, dropout, max_len, sinusoids, add, "buffer")
    check = test_positional_encoding.test_every_length_up_to_max_len
    assert cause_of(check, "positional_encoding", {"positional_encoding": build}) == cause


def test_a_table_held_as_a_plain_attribute_is_not_a_buffer():
    check = test_positional_encoding.test_table_is_a_buffer_not_a_parameter
    assert cause_of(check, "positional_encoding", {"positional_encoding": encoding(store="attribute")}) == \
        "positional_encoding.table_not_a_buffer"
    assert cause_of(check, "positional_encoding", {"positional_encoding": encoding(store="parameter")}) == \
        "positional_encoding.table_is_trainable"


@pytest.mark.parametrize("cause, combine", [
    ("positional_encoding.multiplied_with_input", lambda x, rows, dropout: dropout(x * rows)),
    ("positional_encoding.input_scaled_by_sqrt_d_model",
     lambda x, rows, dropout: dropout(x * math.sqrt(x.size(-1)) + rows)),
    ("positional_encoding.input_scaled", lambda x, rows, dropout: dropout(3 * x + rows)),
    ("positional_encoding.input_dropped", lambda x, rows, dropout: dropout(rows.expand_as(x))),
    ("positional_encoding.not_added", lambda x, rows, dropout: dropout(x * x + rows)),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) else "")
def test_what_is_added_to_the_input(cause, combine):
    check = test_positional_encoding.test_added_to_input
    assert cause_of(check, "positional_encoding", {"positional_encoding": encoding(combine=combine)}) == cause


@pytest.mark.parametrize("cause, combine", [
    ("positional_encoding.dropout_on_table_only", lambda x, rows, dropout: x + dropout(rows)),
    ("positional_encoding.dropout_rate_ignored", lambda x, rows, dropout: nn.functional.dropout(
        x + rows, 0.1, dropout.training)),
    ("positional_encoding.dropout_wrong", dropped_twice),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) else "")
def test_where_dropout_falls(cause, combine):
    check = test_positional_encoding.test_dropout_on_the_sums
    assert cause_of(check, "positional_encoding", {"positional_encoding": encoding(combine=combine)}) == cause


# -- layer normalization ---------------------------------------------------------------------------------------
def centred(x):
    return x - x.mean(-1, keepdim=True)


def variance(x):
    return x.var(-1, keepdim=True, unbiased=False)


class Norm(nn.Module):
    """A LayerNorm computing ``formula(x, gain, bias)``, with a gain and a bias of d_model features unless
    ``affine`` is False."""

    def __init__(self, d_model, formula, affine=True):
        super().__init__()
        self.formula = formula
        self.gain = nn.Parameter(torch.ones(d_model)) if affine else None
        self.bias = nn.Parameter(torch.zeros(d_model)) if affine else None

    def forward(self, x):
        return self.formula(x, self.gain, self.bias)


def norm(formula, affine=True):
    def build(d_model):
        return Norm(d_model, formula, affine)
    return build


def normalized(x, eps=1e-5):
    return centred(x) / torch.sqrt(variance(x) + eps)


NORMS = {
    "layer_norm.mean_not_subtracted": ("normalizes_each_position", norm(
        lambda x, g, b: g * x / torch.sqrt(variance(x) + 1e-5) + b)),
    "layer_norm.eps_too_large": ("normalizes_each_position", norm(lambda x, g, b: g * normalized(x, eps=0.5) + b)),
    "layer_norm.small_variance_not_normalized": ("normalizes_each_position", norm(
        lambda x, g, b: torch.where(variance(x) > 1e-2, g * normalized(x) + b, x))),
    "layer_norm.not_shift_invariant": ("invariant_to_shift_and_scale", norm(
        lambda x, g, b: g * normalized(x) + b + 0.1 * x.mean(-1, keepdim=True))),
    "layer_norm.no_gain_or_bias": ("agrees_with_functional_layer_norm", lambda d_model: nn.LayerNorm(d_model,
                                                                                          elementwise_affine=False)),
    "layer_norm.gain_and_bias_not_found": ("agrees_with_functional_layer_norm", norm(lambda x, g, b: 2 * normalized(x),
                                                                          affine=False)),
    "layer_norm.no_bias": ("agrees_with_functional_layer_norm", lambda d_model: nn.LayerNorm(d_model, bias=False)),
    "layer_norm.gain_and_bias_swapped": ("agrees_with_functional_layer_norm", norm(
        lambda x, g, b: b * normalized(x) + g)),
}


@pytest.mark.parametrize("cause", NORMS)
def test_a_layer_norm_with_a_known_mistake(cause):
    check, builder = NORMS[cause]
    assert cause_of(getattr(test_layer_norm, f"test_{check}"), "layer_norm", {"layer_norm": builder}) == cause


# -- the mask helpers and the masks' way through the decoder ---------------------------------------------------
@pytest.mark.parametrize("cause, helper", [
    ("padding_mask.pad_idx_ignored", lambda tokens, pad_idx: (tokens != 0).unsqueeze(-2)),
    ("padding_mask.wrong", lambda tokens, pad_idx: ((tokens != pad_idx) & (tokens != 3)).unsqueeze(-2)),
    ("padding_mask.not_a_tensor", lambda tokens, pad_idx: (tokens != pad_idx).tolist()),
    ("padding_mask.additive_not_boolean", lambda tokens, pad_idx: torch.where(
        tokens != pad_idx, 0.0, -math.inf).unsqueeze(-2)),
    ("padding_mask.not_boolean", lambda tokens, pad_idx: 2.0 * (tokens != pad_idx).unsqueeze(-2)),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) else "")
def test_a_padding_mask_helper_with_a_known_mistake(cause, helper):
    assert cause_of(test_masks.test_padding_mask_helper, "padding_mask", {"padding_mask": helper}, seed=3) == cause


def test_a_target_mask_helper_without_its_causal_part():
    def subsequent_mask(size):
        return ref.subsequent_mask(size)
    subsequent_mask.of_tokens = lambda tokens: (tokens != test_masks.PAD).unsqueeze(-2)
    check = test_masks.test_target_mask_helper_masks_keys_not_queries
    assert cause_of(check, "subsequent_mask", {"subsequent_mask": subsequent_mask}) == \
        "subsequent_mask.target_mask_wrong"


class UnmaskedSelfAttention(ref.DecoderLayer):
    """A decoder layer whose self-attention sees every position, whichever mask it is given."""

    def forward(self, x, memory, src_mask, tgt_mask):
        return super().forward(x, memory, src_mask, torch.ones_like(tgt_mask))


def test_a_leak_in_either_order_of_the_masks_is_not_told_apart():
    check = test_masks.test_each_mask_reaches_its_attention
    assert cause_of(check, "decoder_layer", {"decoder_layer": UnmaskedSelfAttention}) == \
        "decoder_layer.masks_not_told_apart"


# -- what a role builds and returns ------------------------------------------------------------------------------
class HalfFeedForward(ref.PositionwiseFeedForward):
    """Keeps half of its features."""

    def forward(self, x):
        return super().forward(x)[..., : x.size(-1) // 2]


class Float32FeedForward(ref.PositionwiseFeedForward):
    """Computes in float32 whatever the input."""

    def forward(self, x):
        return super().forward(x).float()


class MeanOverBatch(ref.PositionwiseFeedForward):
    """Adds the batch's mean: a sample's output depends on the others."""

    def forward(self, x):
        return super().forward(x) + x.mean(0, keepdim=True)


class NoDropout(ref.PositionalEncoding):
    """The encoding without its dropout."""

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]


class Shared(nn.Module):
    """One linear map applied to every position (no feed-forward's two maps)."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.map = nn.Bilinear(d_model, d_model, d_model)

    def forward(self, x):
        return self.map(x, x)


@pytest.mark.parametrize("cause, check, component, roles", [
    ("feed_forward.not_a_module", test_shapes.test_output_shape, "feed_forward",
     {"feed_forward": lambda d_model, d_ff: (lambda x: x)}),
    ("feed_forward.shape", test_shapes.test_output_shape, "feed_forward", {"feed_forward": HalfFeedForward}),
    ("feed_forward.dtype", test_shapes.test_output_shape, "feed_forward", {"feed_forward": Float32FeedForward}),
    ("feed_forward.batch_dependence", test_behaviour.test_samples_are_independent_of_batch, "feed_forward",
     {"feed_forward": MeanOverBatch}),
    ("positional_encoding.dropout_missing", test_behaviour.test_dropout_acts_in_training, "positional_encoding",
     {"positional_encoding": NoDropout}),
    ("feed_forward.reference_weights_unmappable", test_behaviour.test_agrees_with_reference, "feed_forward",
     {"feed_forward": Shared}),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) else "")
def test_what_a_role_builds_and_returns(cause, check, component, roles):
    assert cause_of(check, component, roles) == cause


# -- embeddings and the generator ------------------------------------------------------------------------------
class ScaledEmbeddings(ref.Embeddings):
    """Rows times ``factor(d_model)``."""

    factor = staticmethod(math.sqrt)

    def forward(self, tokens):
        return self.lut(tokens) * self.factor(self.d_model)


class TimesDModel(ScaledEmbeddings):
    factor = staticmethod(float)


class TimesThree(ScaledEmbeddings):
    factor = staticmethod(lambda d: 3.0)


class Squared(ref.Embeddings):
    """Rows squared: no constant multiple of them."""

    def forward(self, tokens):
        return self.lut(tokens) ** 2


class TwoTables(ref.Embeddings):
    """Two tables of (vocab, d_model) added: which one is the embedding cannot be told."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.other = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens):
        return (self.lut(tokens) + self.other(tokens)) * math.sqrt(self.d_model)


class HalfLogProbabilities(ref.Generator):
    """Log-probabilities halved: exp of them sums to neither 1 nor a softmax."""

    def forward(self, x):
        return super().forward(x) / 2 - 1


@pytest.mark.parametrize("cause, component, roles", [
    ("embedding.scaled_by_d_model", "embedding", {"embedding": TimesDModel}),
    ("embedding.scale_wrong", "embedding", {"embedding": TimesThree}),
    ("embedding.not_a_scaled_lookup", "embedding", {"embedding": Squared}),
    ("embedding.table_unrecognised", "embedding", {"embedding": TwoTables}),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) else "")
def test_an_embedding_with_a_known_mistake(cause, component, roles):
    assert cause_of(test_embeddings.test_embedding_scaled_by_sqrt_d_model, component, roles) == cause


def test_a_generator_giving_no_log_probabilities():
    check = test_embeddings.test_generator_outputs_log_probabilities
    assert cause_of(check, "generator", {"generator": HalfLogProbabilities}) == "generator.not_log_probabilities"


# -- the model's information flow ------------------------------------------------------------------------------
class Model(ref.Transformer):
    """The reference model with ``forward`` changed by ``decode(model, memory, src_mask, tgt, tgt_mask)``."""

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decoding(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    def decoding(self, memory, src_mask, tgt, tgt_mask):
        return self.decode(memory, src_mask, tgt, tgt_mask)


class TargetZeroed(Model):
    def decoding(self, memory, src_mask, tgt, tgt_mask):
        return self.decode(memory, src_mask, torch.zeros_like(tgt), tgt_mask)


class TargetLookupDiscarded(Model):
    def decoding(self, memory, src_mask, tgt, tgt_mask):
        self.tgt_embed(tgt)
        return self.decoder(self.tgt_embed(torch.zeros_like(tgt)), memory, src_mask, tgt_mask)


class FutureVisible(Model):
    def decoding(self, memory, src_mask, tgt, tgt_mask):
        return self.decode(memory, src_mask, tgt, torch.ones_like(tgt_mask))


class WithEmbeddingScale(ref.Transformer):
    """The reference model whose embeddings multiply by sqrt(``d``) instead of sqrt(d_model)."""

    d = None

    def __init__(self, src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, max_len=5000):
        super().__init__(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout, max_len)
        for embed in (self.src_embed[0], self.tgt_embed[0]):
            embed.d_model = self.d(d_model)


class Unscaled(WithEmbeddingScale):
    d = staticmethod(lambda d_model: 1)


class ScaledFourfold(WithEmbeddingScale):
    d = staticmethod(lambda d_model: 16 * d_model)


class FunctionalLookup(nn.Module):
    """An embedding looked up by ``F.embedding``, not by an ``nn.Embedding`` module."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.weight, self.d_model = nn.Parameter(torch.randn(vocab_size, d_model)), d_model

    def forward(self, tokens):
        return nn.functional.embedding(tokens, self.weight) * math.sqrt(self.d_model)


class LookupNotAModule(ref.Transformer):
    def __init__(self, src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, max_len=5000):
        super().__init__(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout, max_len)
        self.src_embed[0], self.tgt_embed[0] = FunctionalLookup(src_vocab, d_model), FunctionalLookup(tgt_vocab,
                                                                                                      d_model)


class PositionsNotDropped(ref.Transformer):
    def __init__(self, src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, max_len=5000):
        super().__init__(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout, max_len)
        self.src_embed[1], self.tgt_embed[1] = NoDropout(d_model, dropout, max_len), NoDropout(d_model, dropout,
                                                                                               max_len)


class MemoryZeroed(ref.DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        return super().forward(x, torch.zeros_like(memory), src_mask, tgt_mask)


@pytest.mark.parametrize("cause, check, component, roles", [
    ("model.target_tokens_ignored", "test_output_depends_on_the_target_tokens", "model", {"model": TargetZeroed}),
    ("model.target_embeddings_unused", "test_output_depends_on_the_target_tokens", "model",
     {"model": TargetLookupDiscarded}),
    ("model.future_visible_in_eval_too", "test_future_target_tokens_do_not_change_earlier_outputs_in_training",
     "model", {"model": FutureVisible}),
    ("model.embedding_not_scaled", "test_embeddings_reach_the_stacks_scaled", "model", {"model": Unscaled}),
    ("model.embedding_scale_wrong", "test_embeddings_reach_the_stacks_scaled", "model", {"model": ScaledFourfold}),
    ("model.embedding_lookup_not_seen", "test_embeddings_reach_the_stacks_scaled", "model",
     {"model": LookupNotAModule}),
    ("decoder_layer.memory_ignored", "test_decoder_attends_to_the_memory", "decoder_layer",
     {"decoder_layer": MemoryZeroed}),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) and v.startswith(("model.", "decoder_layer.")) else "")
def test_what_reaches_the_models_output(cause, check, component, roles):
    assert cause_of(getattr(test_information_flow, check), component, roles) == cause


def test_positions_not_dropped_out_inside_the_model():
    check = test_positional_encoding.test_dropout_on_the_sums_inside_the_block
    assert cause_of(check, "model", {"model": PositionsNotDropped, "positional_encoding": NoDropout}) == \
        "model.positions_not_dropped_out"


# -- layers, stacks and the order of norm and residual -----------------------------------------------------------
class Layer(nn.Module):
    """An encoder layer of the reference's blocks whose two sub-layers ``f`` (attention, then the feed-forward
    network) are placed by ``placements[i](x, f, norm)``."""

    placements = ()

    def __init__(self, d_model, h, d_ff, dropout):
        super().__init__()
        self.self_attn, self.feed_forward = ref.MultiHeadAttention(h, d_model), ref.PositionwiseFeedForward(d_model,
                                                                                                          d_ff)
        self.norms = nn.ModuleList([ref.LayerNorm(d_model) for _ in range(2)])

    def forward(self, x, src_mask):
        sub_layers = (lambda z: self.self_attn(z, z, z, src_mask), self.feed_forward)
        for place, f, norm in zip(self.placements, sub_layers, self.norms):
            x = place(x, f, norm)
        return x


def post_norm(x, f, norm):
    return norm(x + f(x))


def pre_norm(x, f, norm):
    return x + f(norm(x))


class Mixed(Layer):
    placements = (post_norm, pre_norm)


class Doubled(Layer):
    placements = (lambda x, f, norm: 2 * norm(x + f(x)),) * 2


class OutputUnused(Layer):
    placements = (lambda x, f, norm: norm(x + 0 * f(x)),) * 2


class NoNorm(nn.Module):
    """An encoder layer with residual connections and no norm at all."""

    def __init__(self, d_model, h, d_ff, dropout):
        super().__init__()
        self.self_attn, self.feed_forward = ref.MultiHeadAttention(h, d_model), ref.PositionwiseFeedForward(d_model,
                                                                                                          d_ff)

    def forward(self, x, src_mask):
        x = x + self.self_attn(x, x, x, src_mask)
        return x + self.feed_forward(x)


class PreNorm(Layer):
    placements = (pre_norm, pre_norm)


class Stack(nn.Module):
    """An encoder stack of N ``layer`` s, called one after the other by ``run(stack, x, src_mask)``."""

    layer = ref.EncoderLayer

    def __init__(self, N, d_model, h, d_ff, dropout):
        super().__init__()
        self.layers = nn.ModuleList([self.layer(d_model, h, d_ff, dropout) for _ in range(N)])

    def forward(self, x, src_mask):
        for layer in self.layers:
            x = self.step(layer, x, src_mask)
        return self.finish(x)

    def step(self, layer, x, src_mask):
        return layer(x, src_mask)

    def finish(self, x):
        return x


class PreNormWithoutFinalNorm(Stack):
    layer = PreNorm


class LayersCalledByForward(Stack):
    def step(self, layer, x, src_mask):
        return layer.forward(x, src_mask)


class OutputDoubled(Stack):
    def finish(self, x):
        return 2 * x


class NormedBetweenLayers(Stack):
    def step(self, layer, x, src_mask):
        return layer(nn.functional.layer_norm(x, x.shape[-1:]) + 1, src_mask)


class OneLayer(nn.Module):
    """One encoder layer called N times: no list of N layers."""

    def __init__(self, N, d_model, h, d_ff, dropout):
        super().__init__()
        self.layer, self.N = ref.EncoderLayer(d_model, h, d_ff, dropout), N

    def forward(self, x, src_mask):
        for _ in range(self.N):
            x = self.layer(x, src_mask)
        return x


@pytest.mark.parametrize("cause, check, component, roles, contract", [
    ("sublayer_connection.norm_order.post_norm", "test_sublayer_connection_placement", "sublayer_connection", {},
     "practice"),
    ("encoder_layer.norm_order.mixed_placements", "test_layer_placement", "encoder_layer", {"encoder_layer": Mixed},
     "paper"),
    ("encoder_layer.norm_order.unrecognised", "test_layer_placement", "encoder_layer", {"encoder_layer": Doubled},
     "paper"),
    ("encoder_layer.norm_order.sub_layer_output_not_seen", "test_layer_placement", "encoder_layer",
     {"encoder_layer": OutputUnused}, "paper"),
    ("encoder_layer.norm_order.no_norm_module", "test_layer_placement", "encoder_layer", {"encoder_layer": NoNorm},
     "paper"),
    ("encoder.norm_order.post_norm_without_final_norm", "test_stack_final_norm", "encoder", {}, "practice"),
    ("encoder.norm_order.final_norm_missing", "test_stack_final_norm", "encoder",
     {"encoder": PreNormWithoutFinalNorm}, "practice"),
    ("encoder.norm_order.layers_not_called", "test_stack_final_norm", "encoder", {"encoder": LayersCalledByForward},
     "paper"),
    ("encoder.norm_order.final_operation_unknown", "test_stack_final_norm", "encoder", {"encoder": OutputDoubled},
     "paper"),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) and "." in v else "")
def test_the_placement_of_norms_and_residuals(cause, check, component, roles, contract):
    assert cause_of(getattr(test_norm_order, check), component, roles, contract) == cause


@pytest.mark.parametrize("cause, component, roles", [
    ("encoder.layer_inputs_transformed", "encoder", {"encoder": NormedBetweenLayers}),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) and "." in v else "")
def test_what_passes_between_layers(cause, component, roles):
    check = test_parameters.test_each_layer_receives_the_previous_output
    assert cause_of(check, component, roles) == cause


def test_a_stack_without_a_list_of_its_layers():
    """N = 3 layers: no list inside a layer (two sub-layers or norms) passes for the stack's."""
    three = dataclasses.replace(CFG, N=3)
    roles = {"encoder": OneLayer}
    assert cause_of(test_norm_order.test_stack_final_norm, "encoder", roles, cfg=three) == \
        "encoder.norm_order.layers_not_found"
    assert cause_of(test_parameters.test_each_layer_receives_the_previous_output, "encoder", roles, cfg=three) == \
        "encoder.layers_not_found"
    assert cause_of(test_norm_order.test_stack_final_norm, "encoder", {}, cfg=three) == "pass"


class DeadSecondMap(ref.PositionwiseFeedForward):
    """Multiplies its output by 0: the second map's weight gets an all-zero gradient."""

    def forward(self, x):
        return x + 0 * super().forward(x)


class NonFiniteGradient(ref.PositionwiseFeedForward):
    """Its output goes through a square root of 0, whose gradient is infinite."""

    def forward(self, x):
        return super().forward(x) + torch.sqrt(torch.zeros_like(x) * super().forward(x))


@pytest.mark.parametrize("cause, roles", [
    ("feed_forward.parameters.zero_gradient", {"feed_forward": DeadSecondMap}),
    ("feed_forward.parameters.nonfinite_gradient", {"feed_forward": NonFiniteGradient}),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) else "")
def test_gradients_that_reach_no_parameter(cause, roles):
    check = test_parameters.test_every_parameter_receives_gradient
    assert cause_of(check, "feed_forward", roles) == cause


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


# -- crashes the checker's own doing (plugin.checker_fault) -----------------------------------------------------
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
        return self.sublayer[1](self.self_attn(x), self.feed_forward)


class OffDevice(ref.PositionwiseFeedForward):
    """Masks its input with a tensor kept on another device (the meta device), not moved with the module."""

    def __init__(self, d_model, d_ff):
        super().__init__(d_model, d_ff)
        self.keep = torch.zeros(d_model, dtype=torch.bool, device="meta")

    def forward(self, x):
        return super().forward(x.masked_fill(self.keep, 0.0))


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


class NeedsSetup(ref.PositionwiseFeedForward):
    """Sets the scale of its output in a method of its own that nothing calls before ``forward``."""

    def init_scale(self):
        self.scale = 1.0

    def forward(self, x):
        return super().forward(x) * self.scale


class StatesItsInputRank(ref.PositionwiseFeedForward):
    """Asserts an input of two dimensions: a precondition the canonical (batch, length, d_model) call breaks."""

    def forward(self, x):
        assert x.dim() == 2
        return super().forward(x)


class OneFeatureShortNorm(nn.LayerNorm):
    """Drops a feature: an output of a form the layer-norm probe does not expect."""

    def forward(self, x):
        return super().forward(x)[..., :-1]


@pytest.mark.parametrize("cause, check, component, roles", [
    ("adapter.needs_setup_call", test_shapes.test_output_shape, "feed_forward", {"feed_forward": NeedsSetup}),
    ("adapter.precondition_not_met", test_shapes.test_output_shape, "feed_forward",
     {"feed_forward": StatesItsInputRank}),
    ("adapter.check_crashed", test_layer_norm.test_normalizes_each_position, "layer_norm",
     {"layer_norm": OneFeatureShortNorm}),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) and "." in v else "")
def test_a_crash_the_checker_cannot_blame_on_the_code(cause, check, component, roles):
    assert cause_of(check, component, roles) == cause


# -- what grading itself sees ----------------------------------------------------------------------------------
class ClosedChannel:
    def send(self, message):
        raise BrokenPipeError("the submission's process is gone")


def test_a_submissions_process_that_stopped_answering():
    with pytest.raises(Raised) as raised:
        RemoteImplementation(ClosedChannel())
    assert (raised.value.verdict, raised.value.cause) == ("error", "grading.submission_process_ended")


def test_a_check_that_left_no_verdict(tmp_path):
    work, reports, apart = tmp_path / "work", tmp_path / "report", tmp_path / "apart"
    for folder in (work, reports, apart):
        folder.mkdir()
    nodeids = ["conformance/test_shapes.py::test_output_shape[feed_forward]",
               "conformance/test_shapes.py::test_output_shape[layer_norm]"]
    reported = dict(component="feed_forward", family="shapes", check="output_shape", verdict="pass", cause="",
                    message="", nodeid=nodeids[0])
    (reports / "integrity.json").write_text(json.dumps(dict(nonce="n", exitstatus=0)))
    (reports / "report.json").write_text(json.dumps(dict(checks=[reported])))
    result = runner.judge("s", tmp_path / "s.py", {"status": 0}, work, reports, "n", nodeids,
                          dict(timeout=60, memory=1 << 30, output_limit=1 << 20), apart)
    assert [(c["nodeid"], c["verdict"], c["cause"]) for c in result["checks"]] == [
        (nodeids[0], "pass", ""), (nodeids[1], "error", "grading.check_did_not_report")]


# -- the rest of the model -------------------------------------------------------------------------------------
class SublayerWithoutDropout(ref.SublayerConnection):
    def forward(self, x, sublayer):
        return self.norm(x + sublayer(x))


class GeneratorApart(ref.Transformer):
    """The reference model without its generator: no pre-softmax map inside it to share a matrix with."""

    def __init__(self, src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, max_len=5000):
        super().__init__(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout, max_len)
        del self.generator


def test_a_sub_layer_connection_without_dropout():
    assert cause_of(test_behaviour.test_dropout_acts_in_training, "sublayer_connection",
                    {"sublayer_connection": SublayerWithoutDropout}) == "sublayer_connection.dropout_missing"


def test_a_model_without_its_pre_softmax_map():
    assert cause_of(test_embeddings.test_embeddings_and_pre_softmax_map_share_one_matrix, "model",
                    {"model": GeneratorApart}) == "model.shared_matrix_not_found"


class ScaledAtTheOutput(Unscaled):
    """Unscaled embeddings, the target's table shared with the pre-softmax map, and logits divided by sqrt(d_model):
    §3.4's model with the shared matrix reparametrized. Its logits are kept as ``raw_output``, where discovery's
    wrapper keeps what an author's model returns besides the decoder's output."""

    def forward(self, src, tgt, src_mask, tgt_mask):
        out = super().forward(src, tgt, src_mask, tgt_mask)
        self.raw_output = self.generator.proj(out) / math.sqrt(out.size(-1))
        return out


def test_the_embedding_scale_moved_to_the_shared_projection():
    check = test_information_flow.test_embeddings_reach_the_stacks_scaled
    assert cause_of(check, "model", {"model": ScaledAtTheOutput}) == "model.embedding_scale_on_shared_projection"
    assert cause_of(check, "model", {"model": Unscaled}) == "model.embedding_not_scaled"


class ZeroGainConnection(nn.Module):
    """A post-norm connection whose LayerNorm's gain starts at 0: its output is the norm's bias whatever the input,
    which every placement with the norm last gives alike."""

    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm, self.dropout = nn.LayerNorm(d_model), nn.Dropout(dropout)
        nn.init.zeros_(self.norm.weight)

    def forward(self, x, sublayer):
        return self.norm(x + self.dropout(sublayer(x)))


def test_placements_the_probe_cannot_tell_apart():
    check = test_norm_order.test_sublayer_connection_placement
    assert cause_of(check, "sublayer_connection", {"sublayer_connection": ZeroGainConnection}) == \
        "sublayer_connection.norm_order.undecided"
