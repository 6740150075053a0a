"""Planning a call from a forward's parameter names (``adapters/call_plans.py``): each mask argument gets the
canonical mask its words name, whatever the author's vocabulary for it."""
import dataclasses
import inspect

import pytest
import torch
import torch.nn as nn

from adapters.assembly import can_play
from adapters.building import PROBE, Binding
from adapters.call_plans import argument_values, call_plan, output_among, setup_method
from adapters.construction import causal_flag, constructed_with
from adapters.wrapping import function_role, module_builder
from conformance.contract.verdicts import Missing

DECODER = ["x", "memory", "src_mask", "tgt_mask"]
ATTENTION = ["query", "key", "value", "src_mask"]


def plan(function, wanted=DECODER, by_name=True):
    return call_plan(list(inspect.signature(function).parameters.values()), wanted, by_name=by_name)


def test_masks_named_for_what_they_hide():
    """A causal mask by any of its names is the target's; padding of the encoder's side is the source's."""
    def tutorial(x, enc_output, look_ahead_mask, enc_mask):
        pass

    def spelled_out(x, memory, targets_mask, inputs_mask):
        pass

    def causal_first(x, memory, causal_mask, input_mask):
        pass

    def cross_named(x, x_enc, self_attn_mask, enc_dec_attn_mask):
        pass
    assert plan(tutorial) == ["x", "memory", "tgt_mask", "src_mask"]
    assert plan(spelled_out) == ["x", "memory", "tgt_mask", "src_mask"]
    assert plan(causal_first) == ["x", "memory", "tgt_mask", "src_mask"]
    assert plan(cross_named) == ["x", "memory", "tgt_mask", "src_mask"]


def test_torch_style_masks_named_for_what_they_hide():
    """Masks in torch's two parts (a parameter named for padding): the look-ahead mask is the target's attention
    part, the encoder's padding the source's padding part, and the decoder's padding of the memory too."""
    def decoder_layer(x, enc_output, look_ahead_mask=None, enc_padding_mask=None):
        pass

    def other_order(x, enc_output, dec_padding_mask=None, look_ahead_mask=None):
        pass
    assert plan(decoder_layer) == ["x", "memory", "tgt_mask:attention", "src_mask:padding"]
    assert plan(other_order) == ["x", "memory", "src_mask:padding", "tgt_mask:attention"]


def test_the_source_padding_feeds_the_encoder_and_the_decoder():
    """A model taking the source's padding twice, once per stack, gets the canonical source mask in both (its
    masks whole: the plan discovery tries when the two-part plan its names suggest fails)."""
    def forward(src_ids, tgt_ids, src_key_mask=None, look_ahead_mask=None, enc_padding_mask=None):
        pass

    def other(src, tgt, src_mask, tgt_mask, memory_mask=None):
        pass

    def cross_keys(src_ids, tgt_ids, src_mask=None, tgt_mask=None, kv_mask=None):
        pass

    def cross_attention(x, y, src_mask=None, tgt_mask=None, crs_mask=None):
        pass
    assert plan(forward, ["src", "tgt", "src_mask", "tgt_mask"], by_name=False) == [
        "src", "tgt", "src_mask", "tgt_mask", "src_mask"]
    assert plan(cross_keys, ["src", "tgt", "src_mask", "tgt_mask"]) == [
        "src", "tgt", "src_mask", "tgt_mask", "src_mask"]
    assert plan(cross_attention, ["src", "tgt", "src_mask", "tgt_mask"]) == [
        "src", "tgt", "src_mask", "tgt_mask", "src_mask"]
    assert plan(other, ["src", "tgt", "src_mask", "tgt_mask"]) == ["src", "tgt", "src_mask", "tgt_mask", None]


def test_a_switch_named_for_a_mask_is_left_at_its_default():
    """``subsequent_mask=True``: a parameter whose default is True or False is a switch its author's calls set, never
    a tensor, whatever its name shares with a canonical input."""
    def forward(source, target, pad=0, subsequent_mask=True):
        pass
    assert plan(forward, ["src", "tgt", "src_mask", "tgt_mask"]) == ["src", "tgt", "value:0", None]


def test_a_plain_mask_beside_the_memorys_masks_is_the_targets():
    """A decoder taking torch's four masks under its own names (``mask`` for its self-attention, ``memory_mask`` and
    the two key-padding masks): the plain ``mask`` is the target's, not collapsed into its padding part; an encoder
    with only a plain mask and its source padding keeps the source's."""
    def decoder_layer(x, encoder_output, mask, memory_mask=None, tgt_key_padding_mask=None,
                      memory_key_padding_mask=None):
        pass

    def encoder_layer(x, mask=None, src_key_padding_mask=None):
        pass
    assert plan(decoder_layer) == ["x", "memory", "tgt_mask:attention!", "src_mask:attention", "tgt_mask:padding",
                                   "src_mask:padding"]
    assert plan(encoder_layer, ["x", "src_mask"]) == ["x", "src_mask:attention", "src_mask:padding"]


def test_a_required_attention_part_is_given_a_tensor_even_where_it_blocks_nothing():
    """torch's attention part is None where it blocks nothing (a target of one token), torch's own default; a
    parameter with no default is always given a tensor by its author's callers, so it gets one blocking nothing."""
    def model(src, tgt, src_padding_mask, tgt_padding_mask, tgt_mask):
        pass

    def torch_like(src, tgt, src_key_padding_mask=None, tgt_mask=None):
        pass
    one_token = torch.ones(2, 1, 1, dtype=torch.bool)
    named = {"src": None, "tgt": None, "src_mask": torch.ones(2, 1, 3, dtype=torch.bool), "tgt_mask": one_token}
    required = dict(zip(inspect.signature(model).parameters, plan(model, ["src", "tgt", "src_mask", "tgt_mask"])))
    assert required["tgt_mask"] == "tgt_mask:attention!"
    given = argument_values(list(required.items()), named, "blocked")
    assert torch.equal(given["tgt_mask"], torch.zeros(1, 1, dtype=torch.bool))
    optional = list(zip(inspect.signature(torch_like).parameters, plan(torch_like, ["src", "tgt", "src_mask",
                                                                                    "tgt_mask"])))
    assert dict(optional)["tgt_mask"] == "tgt_mask:attention"
    assert argument_values(optional, named, "blocked")["tgt_mask"] is None


def test_a_decoders_two_sequences_told_by_the_side_their_names_say():
    """The encoder's states first, under names of the decoder's own (``enc_rep, dec_rep``): the sequence named for
    the encoder's side is the memory and the one named for the decoder's the stream it transforms, in either order;
    a decoder's ``dec_input`` stays its stream, and an encoder's single sequence is its x."""
    def memory_first(enc_rep, dec_rep, enc_mask, dec_mask):
        pass

    def stream_first(dec_hidden, enc_hidden, dec_mask, enc_mask):
        pass

    def inputs(dec_inp, src_states, trg_mask, src_mask):
        pass

    def encoder_layer(src_feats, src_mask):
        pass
    assert plan(memory_first) == ["memory", "x", "src_mask", "tgt_mask"]
    assert plan(stream_first) == ["x", "memory", "tgt_mask", "src_mask"]
    assert plan(inputs) == ["x", "memory", "tgt_mask", "src_mask"]
    assert plan(encoder_layer, ["x", "src_mask"]) == ["x", "src_mask"]


def test_a_mask_named_for_another_parameter_is_the_mask_of_that_stream():
    """``inputs_mask`` beside ``inputs``, the decoder's own stream, is the target's mask (its self-attention's), and
    ``memory_mask`` beside ``memory`` the source's, whatever the order; an encoder's ``x_mask`` is the source's. A
    mask named for a stream the call does not take keeps the reading its words give (``inputs_mask`` alone: the
    source's)."""
    def memory_first(inputs, memory, memory_mask, inputs_mask, layer_cache=None):
        pass

    def own_first(x, enc, x_mask, enc_mask):
        pass

    def encoder_layer(x, x_mask):
        pass

    def words_alone(x, memory, targets_mask, inputs_mask):
        pass
    assert plan(memory_first)[:4] == ["x", "memory", "src_mask", "tgt_mask"]
    assert plan(own_first) == ["x", "memory", "tgt_mask", "src_mask"]
    assert plan(encoder_layer, ["x", "src_mask"]) == ["x", "src_mask"]
    assert plan(words_alone) == ["x", "memory", "tgt_mask", "src_mask"]


def test_a_padding_mask_helper_told_its_rows_is_never_given_the_pad_index_there():
    """``pad_masking(x, target_len)`` makes ``target_len`` query rows of the keys' padding, reading the pad index
    from a constant of its own: its second parameter is given the tokens' length, not the pad index by position."""
    def pad_masking(x, target_len):
        pass

    def with_index(tokens, pad_idx):
        pass

    def one_letter(t, pad):
        pass
    assert plan(pad_masking, ["tokens", "pad_idx"]) == ["tokens", "length"]
    assert plan(with_index, ["tokens", "pad_idx"]) == ["tokens", "pad_idx"]
    assert plan(one_letter, ["tokens", "pad_idx"]) == ["tokens", "pad_idx"]


def lengths_mask(lens):
    """A padding-mask helper of a model fed packed sequences: (batch, 1, longest) True at each sequence's tokens."""
    return (torch.arange(int(max(lens)))[None, :] < torch.as_tensor(lens)[:, None]).unsqueeze(1)


def test_a_padding_mask_helper_taking_lengths_is_given_its_tokens_padding_as_lengths():
    """``padding_mask(lens)`` is given the lengths of the tokens' sequences, its mask over the longest widened to
    every key (those past every sequence's end are padding in every row); padding inside a sequence, which lengths
    cannot say, is ``adapter.padding_not_expressible_as_lengths``, never a crash of the helper's."""
    helper = function_role(Binding("padding_mask", "lengths_mask", lengths_mask), "boolean")
    tokens = torch.tensor([[5, 6, 1, 1], [7, 1, 1, 1]])
    assert torch.equal(helper(tokens, 1), (tokens != 1).unsqueeze(1))
    with pytest.raises(Missing) as inside:
        helper(torch.tensor([[5, 1, 6, 1]]), 1)
    assert inside.value.cause == "adapter.padding_not_expressible_as_lengths"


class KeysSetFirst(nn.Module):
    """Attention whose keys are set by ``init_keys`` before ``forward`` reads them; ``reshape`` sets what
    ``__init__`` sets too."""

    def __init__(self, width, causal=False):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def reshape(self, width):
        self.proj = nn.Linear(width, width)

    def init_keys(self, key):
        self.key_heads = self.proj(key)

    def forward(self, query):
        return self.proj(query) @ self.key_heads.transpose(-1, -2)


def test_a_set_up_method_is_read_from_the_class_as_written_whatever_wraps_it_for_a_while():
    """Read while a check or an observation wraps ``__init__`` (the wrapper sets nothing itself), the reading is
    not the one kept for the class as written: ``init_keys``, not ``reshape``."""
    with constructed_with(KeysSetFirst, "causal", True):
        setup_method(KeysSetFirst)
    assert setup_method(KeysSetFirst) == "init_keys"


def test_the_output_is_the_returned_tensor_of_the_roles_output_shape():
    """(weights, output) as well as (output, weights): the output is the tensor of the query's shape, or of the
    query's with the value's width for scaled dot-product attention; else the first tensor."""
    query, value = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    weights, out = torch.rand(2, 2, 3, 5), torch.randn(2, 3, 8)
    assert output_among((weights, out), "multi_head_attention", {"query": query, "value": value}) is out
    assert output_among((out, weights), "multi_head_attention", {"query": query, "value": value}) is out
    heads_q, heads_v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 6)
    heads_out = torch.randn(2, 2, 3, 6)
    assert output_among([weights, heads_out], "attention", {"query": heads_q, "value": heads_v}) is heads_out
    assert output_among((weights, weights), "encoder_layer", {"x": query}) is weights


def test_a_module_with_weights_of_its_own_does_not_play_scaled_dot_product_attention():
    assert not can_play("attention", nn.Linear(4, 4)) and can_play("attention", nn.Softmax(-1))
    assert can_play("multi_head_attention", nn.Linear(4, 4))


def test_an_attention_is_given_its_queries_and_its_keys_from_the_memory():
    """An attention's call feeds its queries: ``forward(k, context=None)``, its queries' stream named ``k``, takes
    the query first and the keys from its ``context`` (the encoder's output, whose values come with it, §3.2.3); a
    memory named beside a query takes the keys too. A ``k`` beside a ``v``, a letter ``m``, a decoding ``states``
    are left as they were."""
    def queries_as_k(k, context=None):
        pass

    def with_memory(x, memory=None, mask=None):
        pass

    def torch_style(x, enc_output=None, key_padding_mask=None):
        pass

    def keys_and_values(k, v, mask):
        pass

    def letter(x, m=None):
        pass

    def cache(x, states=None):
        pass
    assert plan(queries_as_k, ATTENTION) == ["query", "key"]
    assert plan(with_memory, ATTENTION) == ["query", "key", "src_mask"]
    assert plan(torch_style, ATTENTION) == ["query", "key", "src_mask:padding"]
    assert plan(keys_and_values, ATTENTION) == ["key", "value", "src_mask"]
    assert plan(letter, ATTENTION) == ["query", None] and plan(cache, ATTENTION) == ["query", None]
    assert plan(with_memory) == ["x", "memory", None]  # (a decoder's memory stays the memory)


class CausalUnlessTold(nn.Module):
    """An attention causal by default, which :class:`EncoderOfIt` builds with its switch off."""

    def __init__(self, d_model, is_masked=True):
        super().__init__()
        self.is_masked, self.proj = is_masked, nn.Linear(d_model, d_model)

    def forward(self, k, context=None):
        return self.proj(k)


class EncoderOfIt(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.attn = CausalUnlessTold(d_model, is_masked=False)


class AppliesTheMaskGiven(CausalUnlessTold):
    """A switch on by default that nothing turns off (``use_mask=True``: apply the mask given?)."""

    def __init__(self, d_model, use_mask=True):
        super().__init__(d_model)


def test_a_causal_switch_on_by_default_is_built_off_where_its_author_turns_it_off():
    """``is_masked=True`` by default, built with ``is_masked=False`` by its author's encoder: built so for the
    role's checks, and with it on for the causal build; a switch nothing turns off is no causal switch."""
    assert causal_flag(CausalUnlessTold) == "is_masked" and causal_flag(AppliesTheMaskGiven) is None
    binding = Binding("multi_head_attention", "CausalUnlessTold", CausalUnlessTold, constructor={"d_model": "d_model"})
    build = module_builder(binding, {}, "keep")
    assert build(**dataclasses.asdict(PROBE)).inner.is_masked is False
    assert build.causal(**dataclasses.asdict(PROBE)).inner.is_masked is True
