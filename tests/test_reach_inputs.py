"""Causes nothing else reaches, of what enters the stacks: the mask helpers, the positional encoding, the layer
normalization, the embeddings and the generator (see ``tests/reaching.py``)."""
import math

import pytest
import torch
import torch.nn as nn

from conformance.checks import test_embeddings, test_layer_norm, test_masks, test_positional_encoding
from reference import transformer as ref
from tests.reaching import cause_of


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


def test_masks_made_for_the_heads_scores_carry_a_head_axis_and_are_right():
    """(1, 1, L, L) and (batch, 1, 1, L): the same masks with the head axis of the (batch, h, Lq, Lk) scores; a
    mask of another rank still is a shape the helpers' callers cannot use."""
    def with_head_axis(size):
        return torch.tril(torch.ones(1, 1, size, size, dtype=torch.bool))

    def padding_with_head_axis(tokens, pad_idx):
        return (tokens != pad_idx)[:, None, None, :]

    def padding_of_two_axes_too_many(tokens, pad_idx):
        return (tokens != pad_idx)[:, None, None, None, :].expand(-1, 2, -1, -1, -1)
    assert cause_of(test_masks.test_subsequent_mask_helper, "subsequent_mask", {"subsequent_mask": with_head_axis}) \
        == "pass"
    assert cause_of(test_masks.test_padding_mask_helper, "padding_mask",
                    {"padding_mask": padding_with_head_axis}) == "pass"
    assert cause_of(test_masks.test_padding_mask_helper, "padding_mask",
                    {"padding_mask": padding_of_two_axes_too_many}) == "padding_mask.shape"


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


class FollowsItsInput(Encoding):
    """A table held as a plain attribute that its forward brings to the input's device itself."""

    def forward(self, x):
        return self.combine(x, self.pe.to(x.device)[:, : x.size(1)].to(x.dtype), self.dropout)


def test_a_plain_table_its_forward_moves_is_no_fault():
    """Blame on evidence: a plain attribute is a fault only where the module, moved, fails for it."""
    def build(d_model, dropout, max_len=5000):
        return FollowsItsInput(d_model, dropout, max_len, sinusoids, add, "attribute")
    check = test_positional_encoding.test_table_is_a_buffer_not_a_parameter
    assert cause_of(check, "positional_encoding", {"positional_encoding": build}) == "pass"


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
    "layer_norm.eps_wrong": ("normalizes_each_position", norm(
        lambda x, g, b: g * centred(x) / torch.sqrt(variance(x) + 1e-4 * variance(x).sqrt()) + b)),
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


# -- embeddings and the generator ------------------------------------------------------------------------------
class ScaledEmbeddings(ref.TokenEmbedding):
    """Rows times ``factor(d_model)``."""

    factor = staticmethod(math.sqrt)

    def forward(self, tokens):
        return self.lookup(tokens) * self.factor(self.lookup.embedding_dim)


class TimesDModel(ScaledEmbeddings):
    factor = staticmethod(float)


class TimesThree(ScaledEmbeddings):
    factor = staticmethod(lambda d: 3.0)


class Squared(ref.TokenEmbedding):
    """Rows squared: no constant multiple of them."""

    def forward(self, tokens):
        return self.lookup(tokens) ** 2


class TwoTables(ref.TokenEmbedding):
    """Two tables of (vocab, d_model) added: which one is the embedding cannot be told."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.other = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens):
        return (self.lookup(tokens) + self.other(tokens)) * self.scale


class HalfLogProbabilities(ref.OutputLayer):
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
