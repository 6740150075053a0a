"""Causes nothing else reaches, of the blocks and the model: what a role builds and returns, the model's
information flow, layers and stacks, the order of norm and residual, gradients (see ``tests/reaching.py``)."""
import dataclasses
import math

import pytest
import torch
import torch.nn as nn

from conformance.checks import (test_behaviour, test_embeddings, test_information_flow, test_norm_order, test_parameters,
                         test_positional_encoding, test_shapes)
from reference import transformer as ref
from tests.reaching import CFG, cause_of


# -- what a role builds and returns ------------------------------------------------------------------------------
class HalfFeedForward(ref.FeedForwardNetwork):
    """Keeps half of its features."""

    def forward(self, x):
        return super().forward(x)[..., : x.size(-1) // 2]


class Float32FeedForward(ref.FeedForwardNetwork):
    """Computes in float32 whatever the input."""

    def forward(self, x):
        return super().forward(x).float()


class MeanOverBatch(ref.FeedForwardNetwork):
    """Adds the batch's mean: a sample's output depends on the others."""

    def forward(self, x):
        return super().forward(x) + x.mean(0, keepdim=True)


class NoDropout(ref.SinusoidalPositionalEncoding):
    """The encoding without its dropout."""

    def forward(self, x):
        return x + self.encodings[:, : x.size(1)]


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


# -- the model's information flow ------------------------------------------------------------------------------
class Model(ref.Transformer):
    """The reference model with ``forward`` changed by ``decode(model, memory, src_mask, tgt, tgt_mask)``."""

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decoding(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    def decoding(self, memory, src_mask, tgt, tgt_mask):
        return self.decode(tgt, memory, src_mask, tgt_mask)


class TargetZeroed(Model):
    def decoding(self, memory, src_mask, tgt, tgt_mask):
        return self.decode(torch.zeros_like(tgt), memory, src_mask, tgt_mask)


class TargetLookupDiscarded(Model):
    def decoding(self, memory, src_mask, tgt, tgt_mask):
        self.positional_encoding(self.tgt_embedding(tgt))
        return self.decoder(self.positional_encoding(self.tgt_embedding(torch.zeros_like(tgt))), memory, src_mask,
                            tgt_mask)


class FutureVisible(Model):
    def decoding(self, memory, src_mask, tgt, tgt_mask):
        return self.decode(tgt, memory, src_mask, torch.ones_like(tgt_mask))


class WithEmbeddingScale(ref.Transformer):
    """The reference model whose embeddings multiply by sqrt(``d``) instead of sqrt(d_model)."""

    d = None

    def __init__(self, src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, max_len=5000):
        super().__init__(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout, max_len)
        for embed in (self.src_embedding, self.tgt_embedding):
            embed.scale = math.sqrt(self.d(d_model))


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
        self.src_embedding, self.tgt_embedding = FunctionalLookup(src_vocab, d_model), FunctionalLookup(tgt_vocab,
                                                                                                        d_model)


class PositionsNotDropped(ref.Transformer):
    def __init__(self, src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, max_len=5000):
        super().__init__(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout, max_len)
        self.positional_encoding = NoDropout(d_model, dropout, max_len)


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
        self.self_attn, self.feed_forward = ref.MultiHeadAttention(h, d_model), ref.FeedForwardNetwork(d_model, d_ff)
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
        self.self_attn, self.feed_forward = ref.MultiHeadAttention(h, d_model), ref.FeedForwardNetwork(d_model, d_ff)

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


class DeadSecondMap(ref.FeedForwardNetwork):
    """Multiplies its output by 0: the second map's weight gets an all-zero gradient."""

    def forward(self, x):
        return x + 0 * super().forward(x)


class NonFiniteGradient(ref.FeedForwardNetwork):
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


# -- the rest of the model -------------------------------------------------------------------------------------
class SublayerWithoutDropout(ref.AddAndNorm):
    def forward(self, x, sublayer):
        return self.layer_norm(x + sublayer(x))


class GeneratorApart(ref.Transformer):
    """The reference model without its generator: no pre-softmax map inside it to share a matrix with."""

    def __init__(self, src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, max_len=5000):
        super().__init__(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout, max_len)
        del self.output_layer


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
        self.raw_output = self.output_layer.linear(out) / math.sqrt(out.size(-1))
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
