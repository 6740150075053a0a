"""The readings of a parameter-count difference (``conformance/checks/test_parameters.py``): every exact sum of known
variants is searched, each variant as many times as it can occur, the structure settles between readings, and the
readings that conform (projections without biases, §3.2) pass; the final norm of a pre-norm stack is part of
pre-norm (``conformance/checks/test_norm_order.py``)."""
import dataclasses

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conformance.contract.interface import Config
from conformance.contract.verdicts import Missing
from conformance.reports import markdown
from conformance.checks.test_norm_order import final_norm_deviation
from conformance.checks.test_parameters import (best_reading, closed_form, describe, explain_variants, known_variants,
                                         output_projections, projection_maps, raw_projections)
from reference import transformer as ref
from tests import mutants as catalogue
from tests.mutation_score import family_checks, run_suite


class ScalarLayerNorm(nn.Module):
    """A LayerNorm with one gain and one bias for every feature (as in seeds 000 and 001)."""

    def __init__(self):
        super().__init__()
        self.alpha, self.bias = nn.Parameter(torch.ones(1)), nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return self.alpha * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-6) + self.bias


def read(m, cfg, component="model"):
    """``(deviation causes, [(cause, difference of one, times)])`` of ``m``'s parameter-count difference."""
    diff = sum(p.numel() for p in m.parameters()) - closed_form(component, cfg)
    combo = best_reading(diff, known_variants(component, cfg, "paper"), m, cfg, "paper", component)
    assert combo is not None, f"no reading of {diff:+d}"
    return describe(combo)[0], sorted((v[0], v[2], t) for v, t in combo)


def test_scalar_layer_norms_with_a_full_and_a_scalar_final_norm_read_exactly():
    """Every per-layer LayerNorm with a scalar gain, a d_model-sized final norm after the encoder and a scalar one
    after the decoder: two final norms of different kinds and ten scalar norms, one exact sum."""
    cfg = Config(d_model=8, h=2, d_ff=16, N=2, src_vocab=11, tgt_vocab=13)
    m = ref.Transformer(cfg.src_vocab, cfg.tgt_vocab, cfg.N, cfg.d_model, cfg.d_ff, cfg.h)
    for connection in [s for s in m.modules() if isinstance(s, ref.AddAndNorm)]:
        connection.layer_norm = ScalarLayerNorm()
    m.encoder.norm, m.decoder.norm = ref.LayerNorm(cfg.d_model), ScalarLayerNorm()
    causes, times = read(m, cfg)
    assert causes == ["extra_final_norm", "scalar_layer_norm_gain"]
    assert times == [("extra_final_norm", 2, 1), ("extra_final_norm", 2 * cfg.d_model, 1),
                     ("scalar_layer_norm_gain", -(2 * cfg.d_model - 2), 5 * cfg.N)]


def test_projections_without_biases_conform():
    """Eq. (1) and §3.2.2 write the projections without bias terms: a layer whose attention has none passes, and
    the reading says so."""
    cfg = Config(d_model=8, h=2, d_ff=16, N=1)
    layer = ref.EncoderLayer(cfg.d_model, cfg.h, cfg.d_ff, 0.0)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        setattr(layer.self_attention, name, nn.Linear(cfg.d_model, cfg.d_model, bias=False))
    diff = sum(p.numel() for p in layer.parameters()) - closed_form("encoder_layer", cfg)
    combo = best_reading(diff, known_variants("encoder_layer", cfg, "paper"), layer, cfg, "paper", "encoder_layer")
    causes, words = describe(combo)
    assert causes == [] and "4 attention projection(s) without a bias (conforms" in words


def bias_free_queries_keys_values(layer, d_model):
    """``layer``'s self-attention with W^Q, W^K, W^V bias-free (as eq. (1) writes them) and W^O biased."""
    for name in ("w_q", "w_k", "w_v"):
        setattr(layer.self_attention, name, nn.Linear(d_model, d_model, bias=False))
    return layer


def test_bias_free_queries_keys_values_beside_a_biased_output_map_conform():
    """Any of the four projections may go without a bias: three bias-free ones and a biased W^O read as that, not
    as missing bias vectors (or LayerNorms, further up); a LayerNorm taken out of the same layer is still named."""
    cfg = Config(d_model=8, h=2, d_ff=16, N=1)
    layer = bias_free_queries_keys_values(ref.EncoderLayer(cfg.d_model, cfg.h, cfg.d_ff, 0.0), cfg.d_model)
    assert read(layer, cfg, "encoder_layer") == ([], [("projections_without_bias", -cfg.d_model, 3)])
    model = ref.Transformer(11, 11, cfg.N, cfg.d_model, cfg.d_ff, cfg.h)
    for encoder_layer in model.encoder.layers:
        bias_free_queries_keys_values(encoder_layer, cfg.d_model)
    assert read(model, Config(d_model=8, h=2, d_ff=16, N=1, src_vocab=11, tgt_vocab=11)) == \
        ([], [("projections_without_bias", -cfg.d_model, 3)])
    broken = ref.EncoderLayer(cfg.d_model, cfg.h, cfg.d_ff, 0.0)
    bias_free_queries_keys_values(broken, cfg.d_model).after_feed_forward.layer_norm = nn.Identity()
    diff = sum(p.numel() for p in broken.parameters()) - closed_form("encoder_layer", cfg)
    assert best_reading(diff, known_variants("encoder_layer", cfg, "paper"), broken, cfg, "paper",
                        "encoder_layer") is None


class PerHeadAttention(nn.Module):
    """Each head a module of its own with bias-free d_model x d_k maps W_i^Q, W_i^K, W_i^V; W^O biased."""

    def __init__(self, d_model, h):
        super().__init__()
        self.heads = nn.ModuleList(nn.ModuleDict({w: nn.Linear(d_model, d_model // h, bias=False)
                                                  for w in ("query", "key", "value")}) for _ in range(h))
        self.proj = nn.Linear(d_model, d_model)


def test_bias_free_maps_of_heads_held_apart_conform():
    """The h per-head maps of one projection count as one bias-free d_model-wide projection (§3.2.2)."""
    cfg = Config(d_model=12, h=3, d_ff=24, N=1)
    assert read(PerHeadAttention(cfg.d_model, cfg.h), cfg, "multi_head_attention") == (
        [], [("projections_without_bias", -cfg.d_model, 3)])


class FusedBiasFreeAttention(nn.Module):
    """W^Q, W^K, W^V in one bias-free d_model -> 3 d_model map, W^O bias-free beside it."""

    def __init__(self, d_model):
        super().__init__()
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model, bias=False), nn.Linear(d_model, d_model, bias=False)


def test_fused_projections_without_biases_conform():
    """A fused bias-free Q/K/V map counts as three bias-free projections: the reading is the conforming one, not
    two LayerNorms missing (which the same difference, 4 d_model, would also add up to)."""
    cfg = Config(d_model=6, h=3, d_ff=24, N=1)
    causes, times = read(FusedBiasFreeAttention(cfg.d_model), cfg, "multi_head_attention")
    assert causes == [] and times == [("projections_without_bias", -cfg.d_model, 4)]


def test_embeddings_held_apart_read_as_untied():
    """§3.4 shares one matrix: the reference built untied holds two more (one vocabulary for both sides); one table
    embedding both sides beside a pre-softmax map of its own holds one more."""
    cfg = Config(d_model=8, h=2, d_ff=16, N=1, src_vocab=11, tgt_vocab=11)
    untied = ref.Transformer(11, 11, 1, 8, 16, 2, share_embeddings=False)
    assert read(untied, cfg) == (["untied_embeddings"], [("untied_embeddings", 88, 1)] * 2)
    one_table = ref.Transformer(11, 11, 1, 8, 16, 2, share_embeddings=False)
    one_table.src_embedding.lookup = one_table.tgt_embedding.lookup
    assert read(one_table, cfg) == (["untied_embeddings"], [("untied_embeddings", 88, 1)])


def test_the_final_norm_of_a_pre_norm_stack_is_part_of_pre_norm():
    """A final norm after layers whose output is not normalized completes pre-norm; after post-norm layers
    (torch.nn.Transformer's default) it is an extra final norm."""
    last = torch.randn(2, 3, 8) * 3 + 1
    assert final_norm_deviation("encoder", "the norm-like module 'norm'", last, 8, None).cause == \
        "encoder.norm_order.pre_norm"
    assert final_norm_deviation("encoder", "the norm-like module 'norm'", F.layer_norm(last, (8,)), 8, None).cause \
        == "encoder.norm_order.extra_final_norm"


def test_a_passing_count_says_it_found_projections_without_biases(tmp_path):
    """The reading that conforms is said on the pass itself: the report's parameter_count record of an attention
    built without projection biases passes and names the biases absent."""
    source = catalogue.reference_source()
    for w in ("w_q", "w_k", "w_v", "w_o"):
        source = source.replace(f"self.{w} = nn.Linear(d_model, d_model)", f"self.{w} = nn.Linear(d_model, d_model, "
                                                                         "bias=False)")
    path = tmp_path / "bias_free.py"
    path.write_text(source)
    _, output, data = run_suite(path, tmp_path, markers="multi_head_attention", in_process=True,
                                target=family_checks("parameters"))
    record = next(c for c in data["checks"] if c["component"] == "multi_head_attention"
                  and c["check"] == "parameter_count")
    assert record["verdict"] == "pass", output[-2000:]
    assert "without a bias (conforms" in record["message"]
    assert "attention projection(s) without a bias" in markdown(data)


def test_of_readings_the_count_leaves_open_the_one_the_structure_confirms_is_kept():
    """A pre-softmax map of its own adds V_tgt x d_model parameters, and so does a learned positional table when
    max_len = V_tgt: two readings of one count. The structure confirms the untied matrix and cannot tell the table,
    so the ranking (fewest readings left unconfirmed first) keeps the untied one; taken the other way round it would
    name the table."""
    cfg = Config(d_model=8, h=2, d_ff=16, N=1, src_vocab=11, tgt_vocab=13, max_len=13)
    untied = ref.Transformer(11, 13, 1, 8, 16, 2, max_len=13, share_embeddings=False)
    diff = sum(p.numel() for p in untied.parameters()) - closed_form("model", cfg)
    variants = known_variants("model", cfg, "paper")
    readings = [[v[0] for v, _ in combo] for combo in explain_variants(diff, variants)]
    assert ["untied_embeddings"] in readings and ["learned_positional_embedding"] in readings
    assert read(untied, cfg) == (["untied_embeddings"], [("untied_embeddings", 13 * 8, 1)])


def test_a_projection_to_a_vocabulary_of_d_model_words_is_not_its_own_partner():
    """With V_tgt = d_model the pre-softmax Linear(d_model, V) has the shape of a feed-forward network's second map:
    it is still the model's output projection (a feed-forward map needs a partner other than itself)."""
    cfg = Config(d_model=8, h=2, d_ff=16, N=1, src_vocab=11, tgt_vocab=8)
    m = ref.Transformer(cfg.src_vocab, cfg.tgt_vocab, cfg.N, cfg.d_model, cfg.d_ff, cfg.h)
    found = output_projections(m, cfg.d_model, {cfg.tgt_vocab})
    assert m.output_layer.linear in found


def test_a_pre_softmax_map_to_twice_d_model_words_is_no_fused_projection():
    """A model whose attentions hold bare bias-free matrices and whose pre-softmax map goes to a vocabulary of
    2 d_model words: that map is not read as a fused K/V projection with biases, which would contradict (and so
    reject) the reading of bias-free attentions with untied embeddings."""
    cfg = Config(d_model=8, h=4, d_ff=32, N=1, src_vocab=13, tgt_vocab=16)

    class Bare(nn.Module):
        def __init__(self):
            super().__init__()
            self.w_q = nn.Parameter(torch.zeros(8, 8))
            self.ffn = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8))
            self.out = nn.Linear(8, 16)
    m = Bare()
    assert projection_maps(m, cfg) == []
    m.w_o = nn.Linear(8, 8, bias=False)  # a projection beside it is still one
    assert projection_maps(m, cfg) == [m.w_o]


class TiedAtItsOwnSizes(nn.Module):
    """A model its author fixed at 16 wide and 50 words (as a factory reading its own configuration builds it),
    its pre-softmax map sharing the embedding matrix (§3.4)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(2))
        self.out = nn.Linear(16, 50, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, src, tgt, src_mask, tgt_mask):
        memory = self.embed(src).mean(1, keepdim=True)
        x = self.embed(tgt) + memory
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


def test_a_tied_embedding_at_the_authors_own_sizes_is_no_shared_layer():
    """The matrix an embedding shares with the pre-softmax map is §3.4's tying whatever its vocabulary, not two
    layers sharing weights (§3.1); a model none of whose matrices has the configured width is not read at all."""
    from conformance.checks.test_parameters import test_layers_do_not_share_weights
    from conformance.contract.interface import Implementation
    impl = Implementation("tied", {"model": TiedAtItsOwnSizes})
    cfg = Config(d_model=16, h=4, d_ff=32, dropout=0.0, N=2, vocab_size=11, src_vocab=11, tgt_vocab=11, max_len=12)
    drawn = dict(cfg=cfg, batch=2, src_len=3, tgt_len=4, dtype=torch.float64, seed=0)
    test_layers_do_not_share_weights.hypothesis.inner_test(impl, "cpu", "model", drawn)
    narrow = dict(drawn, cfg=dataclasses.replace(cfg, d_model=6, h=3, d_ff=12))
    with pytest.raises(Missing) as missing:
        test_layers_do_not_share_weights.hypothesis.inner_test(impl, "cpu", "model", narrow)
    assert missing.value.cause == "adapter.sizes_fixed_by_the_code"


def test_a_model_at_sizes_of_its_own_is_built_once_a_width():
    """Each build of a model fixed at sizes of its own is the author's model at full size and says the same thing:
    once one says so at a width, later checks at that width say it without building it again; another width is
    built anew."""
    from conformance.contract.harness import Case
    from conformance.contract.interface import Implementation
    built = []

    class Counted(TiedAtItsOwnSizes):
        def __init__(self):
            super().__init__()
            built.append(self)
    impl = Implementation("counted", {"model": Counted})
    cfg = Config(d_model=6, h=3, d_ff=12, dropout=0.0, N=2, vocab_size=11, src_vocab=11, tgt_vocab=11, max_len=12)
    for seed in (0, 1, 2):
        with pytest.raises(Missing) as missing:
            Case(impl, device="cpu", cfg=cfg, batch=1, src_len=3, tgt_len=4, dtype=torch.float64, seed=seed).build(
                "model")
        assert missing.value.cause == "adapter.sizes_fixed_by_the_code"
        assert "none of its weights is 6 wide" in missing.value.observed
    assert len(built) == 1
    wide = Case(impl, device="cpu", cfg=dataclasses.replace(cfg, d_model=16, h=4, d_ff=32), batch=1, src_len=3,
                tgt_len=4, dtype=torch.float64, seed=0).build("model")
    assert isinstance(wide, Counted) and len(built) == 2


def test_a_vocabulary_as_large_as_the_width_asked_is_no_width_taken():
    """An embedding's rows are its words: a model fixed at 16 wide and 50 words, asked for d_model = 50, took none
    of the checker's sizes (its embedding has 50 rows, and no weight is 50 wide); asked for 16, it did."""
    from conformance.contract.harness import widths_not_taken
    cfg = Config(d_model=50, h=5, d_ff=100, dropout=0.0, N=2, vocab_size=50, src_vocab=50, tgt_vocab=50, max_len=12)
    assert "none of its weights is 50 wide" in widths_not_taken(TiedAtItsOwnSizes(), cfg)
    transposed = nn.Embedding(50, 11)  # (d_model rows and a row a feature: the sizes it was given, misplaced)
    assert widths_not_taken(transposed, dataclasses.replace(cfg, vocab_size=11, src_vocab=50)) is None
    with_a_padding_row = nn.Embedding(51, 50)  # (a row more than the words, d_model wide: the width it was given)
    assert widths_not_taken(with_a_padding_row, cfg) is None
    assert "none of its weights is 50 wide" in widths_not_taken(nn.LayerNorm(512), cfg)  # (vectors, no matrix)
    assert widths_not_taken(nn.LayerNorm(50), cfg) is None
    assert widths_not_taken(TiedAtItsOwnSizes(), dataclasses.replace(cfg, d_model=16, h=4, d_ff=32)) is None


class RawHeads(nn.Module):
    """Multi-head attention whose W^Q, W^K, W^V are (h, d_model, d_k) parameters of its own, used through einsum,
    with ``biased`` vectors beside them or none; W^O a bias-free nn.Linear."""

    def __init__(self, d_model, h, biased=False):
        super().__init__()
        self.q, self.k, self.v = (nn.Parameter(torch.randn(h, d_model, d_model // h)) for _ in range(3))
        self.biases = nn.Parameter(torch.zeros(3, d_model)) if biased else None
        self.o = nn.Linear(d_model, d_model, bias=False)


def test_projections_held_as_raw_parameters_are_read_as_projections_without_bias():
    """§3.2.2: W_i^Q, W_i^K, W_i^V as (h, d_model, d_k) parameters are three d_model x d_model projections; with no
    bias beside them they conform (4 x d_model fewer than the closed form, the bias-free W^O included), whatever
    else could add up to 4 x d_model (two LayerNorms); with biases beside them only W^O's is missing."""
    for cfg in (Config(d_model=12, h=3, d_ff=24, tgt_vocab=12), Config(d_model=12, h=3, d_ff=24, tgt_vocab=7)):
        assert read(RawHeads(12, 3), cfg, "multi_head_attention") == (
            [], [("projections_without_bias", -12, 4)]), cfg  # (a vocabulary as wide as d_model: W^O still W^O)
        assert read(RawHeads(12, 3, biased=True), cfg, "multi_head_attention") == (
            [], [("projections_without_bias", -12, 1)]), cfg


class RawHeadsWithAnAxisOfOne(nn.Module):
    """W_i^Q, W_i^K, W_i^V held per head as (h, 1, d_model, d_k), an axis of one kept for broadcasting over the batch;
    no biases, W^O a bias-free map."""

    def __init__(self, d_model, h):
        super().__init__()
        self.q, self.k, self.v = (nn.Parameter(torch.randn(h, 1, d_model, d_model // h)) for _ in range(3))
        self.o = nn.Linear(d_model, d_model, bias=False)


def test_raw_projections_with_an_axis_of_one_are_projections_without_bias():
    cfg = Config(d_model=12, h=3, d_ff=24, tgt_vocab=7)
    assert raw_projections(RawHeadsWithAnAxisOfOne(12, 3), cfg) == [(3, 0)]
    assert read(RawHeadsWithAnAxisOfOne(12, 3), cfg, "multi_head_attention") == (
        [], [("projections_without_bias", -12, 4)])


def test_tables_of_positions_are_no_raw_projections():
    """§3.5: a frozen sinusoid table and a learned table of positions, as long as d_model is wide (max_len 12,
    d_model 12), held beside raw projections, are not counted among them."""
    holder = nn.Module()
    holder.heads = RawHeads(12, 3)
    holder.sinusoids = nn.Parameter(torch.zeros(12, 12), requires_grad=False)
    holder.pos_table = nn.Parameter(torch.zeros(12, 12))
    assert raw_projections(holder, Config(d_model=12, h=3, d_ff=24, max_len=12)) == [(3, 0)]


class HalfFixedDecoderLayer(nn.Module):
    """A decoder layer whose attentions take d_model while its feed-forward network and its ``norms`` LayerNorms are
    written for the base model's widths, 512 and 2048 (§3.1: two attentions, an FFN, three norms at d_model = 512)."""

    def __init__(self, d_model, h, norms=3):
        super().__init__()
        self.self_attn, self.cross_attn = (ref.MultiHeadAttention(h, d_model) for _ in range(2))
        self.up, self.down = nn.Linear(512, 2048), nn.Linear(2048, 512)
        self.norms = nn.ModuleList(nn.LayerNorm(512) for _ in range(norms))


def counted(builder, cfg):
    """``(the failure of the parameter count of builder's decoder layer at cfg, its implementation)``."""
    from conformance.checks.test_parameters import test_parameter_count
    from conformance.contract.interface import Implementation
    from conformance.contract.verdicts import Failure
    impl = Implementation("half_fixed", {"decoder_layer": builder})
    with pytest.raises(Failure) as failure:
        test_parameter_count.hypothesis.inner_test(impl, "cpu", "paper", "decoder_layer", dict(
            cfg=cfg, batch=1, src_len=3, tgt_len=4, dtype=torch.float64, seed=0))
    return failure.value, impl


SMALL = Config(d_model=8, h=2, d_ff=16, dropout=0.0, N=2, vocab_size=11, src_vocab=11, tgt_vocab=13, max_len=12)


def test_a_block_fixing_widths_beside_d_model_is_counted_at_the_papers_sizes():
    """At the checker's d_model = 8 the layer holds 512- and 2048-wide weights beside 8-wide ones: a count no author
    builds. Counted again at the paper's base sizes, where its author builds it, it has the paper's count, and the
    record is missing (``adapter.sizes_fixed_by_the_code``), never a failure of the author's."""
    from conformance.checks.test_parameters import at_the_papers_sizes
    from conformance.contract.harness import widths_of_its_own
    assert "2048, 512 wide" in widths_of_its_own(HalfFixedDecoderLayer(8, 2), SMALL)
    failure, impl = counted(HalfFixedDecoderLayer, SMALL)
    with pytest.raises(Missing) as missing:
        at_the_papers_sizes(impl, "cpu", "paper", "decoder_layer", failure, SMALL)
    assert missing.value.cause == "adapter.sizes_fixed_by_the_code"
    assert "it has the paper's count" in missing.value.observed and failure.observed in missing.value.observed


def test_a_wrong_count_at_the_papers_sizes_still_fails_with_the_authors_own_numbers():
    """The same layer with a fourth LayerNorm(512): at the paper's sizes it is 1024 parameters over the paper's
    4,204,032, and fails so, the numbers those of the layer as its author builds it."""
    from conformance.checks.test_parameters import at_the_papers_sizes
    from conformance.contract.verdicts import Failure
    failure, impl = counted(lambda d_model, h: HalfFixedDecoderLayer(d_model, h, norms=4), SMALL)
    with pytest.raises(Failure) as again:
        at_the_papers_sizes(impl, "cpu", "paper", "decoder_layer", failure, SMALL)
    assert again.value.cause == "decoder_layer.parameters.count"
    assert "4204032 parameters" in again.value.requirement and "observed 4205056" in again.value.message
    assert "counted at the paper's base sizes" in again.value.observed


def test_a_block_taking_every_size_it_is_given_keeps_its_count_as_found():
    """Widths that are the configured ones, or fused projections three d_model wide, are no widths of the code's own:
    a count failing there stands (nothing is raised, the failure is the record)."""
    from conformance.checks.test_parameters import at_the_papers_sizes
    from conformance.contract.harness import widths_of_its_own

    class Fused(nn.Module):
        def __init__(self, d_model, h):
            super().__init__()
            self.qkv, self.o = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
            self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(4))
    assert widths_of_its_own(Fused(8, 2), SMALL) is None
    assert widths_of_its_own(ref.DecoderLayer(8, 2, 16, 0.0), SMALL) is None
    failure, impl = counted(Fused, SMALL)
    assert at_the_papers_sizes(impl, "cpu", "paper", "decoder_layer", failure, SMALL) is None


HALF_FIXED_SOURCE = '''import math
import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads, self.d_k = heads, d_model // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        b = query.size(0)
        q, k, v = (w(t).view(b, -1, self.heads, self.d_k).transpose(1, 2)
                   for w, t in ((self.q, query), (self.k, key), (self.v, value)))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(1) == 0, float("-inf"))
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, -1, self.heads * self.d_k))


class DecoderLayer(nn.Module):
    """Its attentions take d_model; its feed-forward network and norms are written for the base model's widths."""

    def __init__(self, d_model, heads, dropout=0.1):
        super().__init__()
        self.self_attn, self.cross_attn = MultiHeadAttention(d_model, heads), MultiHeadAttention(d_model, heads)
        self.up, self.down = nn.Linear(512, 2048), nn.Linear(2048, 512)
        self.norms = nn.ModuleList(nn.LayerNorm(512) for _ in range(3))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.norms[0](x + self.drop(self.self_attn(x, x, x, tgt_mask)))
        x = self.norms[1](x + self.drop(self.cross_attn(x, memory, memory, src_mask)))
        return self.norms[2](x + self.drop(self.down(torch.relu(self.up(x)))))
'''


@pytest.mark.parametrize("norms", [3, 4])
def test_the_count_record_of_a_layer_written_for_the_base_widths_is_the_count_at_those_widths(tmp_path, norms):
    """The record itself (``conformance/reporting.py``): missing where the layer, built at the widths it is written
    for, has the paper's count; a failure in the author's own numbers where a fourth LayerNorm(512) is one too many."""
    from tests.suite import run_on_source
    source = HALF_FIXED_SOURCE.replace("for _ in range(3))", f"for _ in range({norms}))")
    code, output, report, records = run_on_source(tmp_path, "half_fixed.py", source, "-k",
                                                  "decoder_layer and parameter_count")
    record = records[("decoder_layer", "parameter_count")]
    if norms == 3:
        assert (record["verdict"], record["cause"]) == ("missing", "adapter.sizes_fixed_by_the_code"), output
        return
    assert (record["verdict"], record["cause"]) == ("fail", "decoder_layer.parameters.count"), output
    assert "observed 4205056 parameters (+1024: 1 extra LayerNorm" in record["message"], output


def test_a_generator_without_a_bias_reads_as_the_known_variant_alone_as_in_the_model():
    """A bias-free pre-softmax map (§3.4 writes no bias; its matrix is often the embedding's): the generator's own
    count names the variant, as the model's count does, and an extra parameter of another size stays unexplained."""
    cfg = Config(d_model=8, h=2, d_ff=16, N=1, vocab_size=14, src_vocab=14, tgt_vocab=14)
    generator = ref.OutputLayer(cfg.d_model, cfg.vocab_size)
    generator.linear = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
    assert read(generator, cfg, "generator") == (["generator_without_bias"],
                                                 [("generator_without_bias", -cfg.vocab_size, 1)])
    generator.extra = nn.Parameter(torch.zeros(3))
    diff = sum(p.numel() for p in generator.parameters()) - closed_form("generator", cfg)
    assert best_reading(diff, known_variants("generator", cfg, "paper"), generator, cfg, "paper", "generator") is None
