"""Parameters (3.1-3.5, Table 3): how many there are, that the N layers of a stack are independent, and that every
one of them takes part in the computation."""
import itertools
from collections import defaultdict

import pytest
import torch
import torch.nn as nn
from hypothesis import given

from conformance.contract import harness, strategies
from conformance.contract.harness import MODULE_ROLES, Case, canonical_inputs, if_the_checker_sets, output_tensor
from conformance.contract.probes import hooked
from conformance.contract.verdicts import PASS_NOTES, Deviation, Failure, Finding, Missing, note_on_pass
from conformance.diagnosis.evidence import PAPER_BASE, runs_at_the_papers_sizes
from conformance.contract.weights import inside, layer_lists, norm_modules
from reference import transformer as ref

COUNTED = ("positional_encoding", "multi_head_attention", "feed_forward", "layer_norm", "sublayer_connection",
           "encoder_layer", "decoder_layer", "encoder", "decoder", "embedding", "generator", "model")
ATTENTIONS = {"multi_head_attention": 1, "encoder_layer": 1, "decoder_layer": 2, "encoder": 1, "decoder": 2,
              "model": 3}  # per layer for the stacks and the model (times N)
FEED_FORWARDS = {"feed_forward": 1, "encoder_layer": 1, "decoder_layer": 1, "encoder": 1, "decoder": 1, "model": 2}
STACKS = {"encoder": 1, "decoder": 1, "model": 2}
SECTION = {"positional_encoding": "§3.5 (fixed sinusoids, no learned parameters)",
           "multi_head_attention": "§3.2.2 (W^Q, W^K, W^V, W^O, counted with biases; "
           "without, as eq. (1) and §3.2.2 write them, conforms too)", "feed_forward": "§3.3, eq. (2)",
           "layer_norm": "§3.1 (gain and bias)", "sublayer_connection": "§3.1 (one LayerNorm)",
           "encoder_layer": "§3.1 (attention, FFN, two LayerNorms)",
           "decoder_layer": "§3.1 (two attentions, FFN, three LayerNorms)", "encoder": "§3.1 (N encoder layers)",
           "decoder": "§3.1 (N decoder layers)", "embedding": "§3.4 (V x d_model)",
           "generator": "§3.4 (d_model x V linear map with bias)",
           "model": "§3, Figure 1, Table 3; §3.4 one matrix for the two embeddings and the pre-softmax linear map"}


def closed_form(component, cfg, d_model=None, d_ff=None):
    """The reference's closed-form parameter count (without final norms; the embeddings and the pre-softmax linear
    map tied, §3.4)."""
    d, f = d_model or cfg.d_model, d_ff or cfg.d_ff
    return {
        "positional_encoding": lambda: 0,
        "multi_head_attention": lambda: ref.count_multi_head_attention(d),
        "feed_forward": lambda: ref.count_feed_forward(d, f),
        "layer_norm": lambda: ref.count_layer_norm(d),
        "sublayer_connection": lambda: ref.count_layer_norm(d),
        "encoder_layer": lambda: ref.count_encoder_layer(d, f),
        "decoder_layer": lambda: ref.count_decoder_layer(d, f),
        "encoder": lambda: cfg.N * ref.count_encoder_layer(d, f),
        "decoder": lambda: cfg.N * ref.count_decoder_layer(d, f),
        "embedding": lambda: cfg.vocab_size * d,
        "generator": lambda: d * cfg.vocab_size + cfg.vocab_size,
        "model": lambda: ref.count_transformer(cfg.src_vocab, cfg.tgt_vocab, cfg.N, d, f, share_embeddings=True),
    }[component]()


N_LAYERS = ("encoder", "decoder", "model")
"""The components made of N layers."""


CONFORMING = ("projections_without_bias",)
"""Readings that conform to the paper: eq. (1) and the projections W^Q, W^K, W^V, W^O of §3.2.2 carry no bias term
(nor does the paper's tensor2tensor code); the closed form counts the biases torch's nn.Linear adds. All pass,
whichever of the four projections go without one."""


def known_variants(component, cfg, contract):
    """``[(cause suffix, description, parameter difference of one occurrence, occurrences it may have)]`` of the known
    variants of ``component``, against the closed form (the embeddings and the pre-softmax map tied, §3.4)."""
    d, n = cfg.d_model, (cfg.N if component in N_LAYERS else 1)
    variants = []
    if component in ATTENTIONS:
        k = ATTENTIONS[component] * n  # (any of the 4 k projections: W^Q, W^K, W^V bias-free beside a biased W^O)
        variants.append(("projections_without_bias", "attention projection(s) without a bias (conforms: the "
                         "equations of §3.2 have no bias terms)", -d, range(1, 4 * k + 1)))
    if component in STACKS:
        stacks = range(1, STACKS[component] + 1)
        if contract == "practice":
            variants.append(("final_norm_missing", "stack(s) without a final LayerNorm", -2 * d, stacks))
        else:
            variants.append(("extra_final_norm", "final LayerNorm(s) after the stack", 2 * d, stacks))
            variants.append(("extra_final_norm", "final LayerNorm(s) with a scalar gain and bias after the stack", 2,
                             stacks))
    if component == "model":
        vs, vt = cfg.src_vocab, cfg.tgt_vocab
        variants.append(("untied_embeddings", "pre-softmax linear map with a weight of its own, not the target "
                         "embedding's (§3.4 shares one matrix)", vt * d, (1,)))
        if vs == vt:
            variants.append(("untied_embeddings", "source embedding table of its own, not the target's (§3.4 shares "
                             "one matrix)", vs * d, (1,)))
        else:
            variants.append(("embeddings_outside_model", "the token embeddings are not part of the model", -vs * d,
                             (1,)))
        variants.append(("generator_outside_model", "the generator is not part of the model", -vt, (1,)))
        variants.append(("generator_without_bias", "the generator's linear map without a bias", -vt, (1,)))
    if component == "generator":
        variants.append(("generator_without_bias", "the generator's linear map without a bias", -cfg.vocab_size, (1,)))
    if component in NORMS:
        variants.append(("scalar_layer_norm_gain", "LayerNorm(s) with a scalar gain and bias instead of "
                         "d_model-sized ones", -(2 * d - 2), range(1, NORMS[component] * n + 1)))
    if component in ("positional_encoding", "embedding", "model"):
        k = 2 if component == "model" else 1
        variants.append(("learned_positional_embedding", "learned positional embedding table(s) (§3.5, Table 3 "
                         "row E)", cfg.max_len * d, range(1, k + 1)))
    return variants


def explain_variants(diff, variants):
    """Every combination of variants, each taken a number of times it may occur, whose differences add up to
    ``diff``: ``[[(variant, times), ...], ...]``, fewest occurrences first."""
    choices = [[(v, 0)] + [(v, t) for t in v[3]] for v in variants]
    found = [[(v, t) for v, t in combo if t] for combo in itertools.product(*choices)
             if sum(v[2] * t for v, t in combo) == diff]
    return sorted((c for c in found if c), key=lambda c: (sum(t for _, t in c), len(c)))


def best_reading(diff, variants, m, cfg, contract, component):
    """The combination of variants that explains ``diff``: of those the structure does not contradict, the one it
    confirms for the most variants, then the smallest; None when there is none."""
    ranked = []
    for combo in explain_variants(diff, variants):
        verdicts = confirmations(combo, m, cfg, contract, component)
        if False not in verdicts:
            ranked.append((verdicts.count(None), sum(t for _, t in combo), len(combo), combo))
    return min(ranked, key=lambda r: r[:3])[3] if ranked else None


def describe(combo):
    """``(cause suffixes of the deviations, words)`` of a reading; the conforming readings are named in the words."""
    causes = [v[0] for v, _ in combo if v[0] not in CONFORMING]
    words = "; ".join(f"{t} {v[1]}" if "(s)" in v[1] else v[1] for v, t in combo)
    return list(dict.fromkeys(causes)), words


NORMS = {"layer_norm": 1, "sublayer_connection": 1, "encoder_layer": 2, "decoder_layer": 3, "encoder": 2,
         "decoder": 3, "model": 5}  # per layer for the stacks and the model (times N)


def explain_difference(component, cfg, observed, expected, norms_found=None):
    """The difference in words (d_model and d_ff swapped, k LayerNorms, ...), when a plausible reading exists;
    ``norms_found``, the norm modules the candidate has, settles readings that the count alone leaves open."""
    d, f, diff = cfg.d_model, cfg.d_ff, observed - expected
    more = "extra" if diff > 0 else "missing"
    n = cfg.N if component in N_LAYERS else 1
    attentions, ffns, norms = (ATTENTIONS.get(component, 0) * n, FEED_FORWARDS.get(component, 0) * n,
                               NORMS.get(component, 0) * n)
    if norms_found is not None and norms and diff == (norms_found - norms) * 2 * d:
        return (f"{abs(norms_found - norms)} {more} LayerNorm(s) (2 d_model each): {norms_found} norm module(s) "
                f"where the paper has {norms}" + (", one shared by several sub-layers?" if diff < 0 else ""))
    if component in ATTENTIONS and component != "multi_head_attention" \
            and observed == closed_form(component, cfg, d_model=f, d_ff=d):
        return "the count of the closed form with d_model and d_ff swapped"
    if component in FEED_FORWARDS and observed == closed_form(component, cfg, d_ff=d):
        return "the count of the closed form with d_ff = d_model (the inner layer is not d_ff wide)"
    if component in FEED_FORWARDS and diff == -ffns * (f + d):
        return "the feed-forward biases b_1, b_2 of eq. (2) are missing"
    readings = []  # (size, what, plausible count)
    if component in N_LAYERS:
        layer = {"encoder": ref.count_encoder_layer(d, f), "decoder": ref.count_decoder_layer(d, f),
                 "model": ref.count_encoder_layer(d, f) + ref.count_decoder_layer(d, f)}[component]
        readings.append((layer, "layer(s)' worth of parameters (layers sharing weights?)" if diff < 0
                         else "layer(s)' worth of parameters", cfg.N))
    readings += [(2 * d, "LayerNorm(s) (2 d_model each)", norms + 2),
                 (d * d + d, "d_model x d_model projection(s) with bias", 4 * attentions),
                 (d * f + f, "d_model -> d_ff linear map(s) with bias", ffns),
                 (d * f + d, "d_ff -> d_model linear map(s) with bias", ffns)]
    if component not in N_LAYERS:  # in a whole stack, small differences add up by chance
        readings += [(d, "d_model-sized bias vector(s)", 4 * attentions + ffns + norms * 2),
                     (f, "d_ff-sized bias vector(s)", ffns)]
    if component in ("embedding", "generator", "model"):
        v = cfg.vocab_size if component != "model" else cfg.tgt_vocab
        readings += [(v * d, "V x d_model matrix(es)", 3), (v, "V-sized bias vector(s)", 1)]
    for size, what, plausible in readings:
        if size and diff % size == 0 and 0 < abs(diff // size) <= plausible:
            return f"{abs(diff // size)} {more} {what}"
    return f"no simple reading in terms of d_model={d}, d_ff={f}"


def outside_norms(m, cfg):
    """The norm-like modules outside the layers of the stacks (final norms); None when no layers are found."""
    lists = layer_lists(m, cfg.N)
    if not lists:
        return None
    return [norm for name, norm in norm_modules(m) if not any(inside(name, prefix) for prefix, _ in lists)]


def scalar(norms):
    """How many of ``norms`` have a scalar gain and bias (2 parameters)."""
    return sum(count([n]) == 2 for n in norms)


def confirmations(combo, m, cfg, contract, component):
    """For each variant of a count-based reading: True where the structure confirms it (final norms outside the
    layers, scalar norm modules, bias-free d_model x d_model maps, vocabulary matrices held apart, no generator or
    embedding inside), False where it contradicts it, None where it cannot tell."""
    times = defaultdict(int)
    for v, t in combo:
        times[v[0]] += t
    scalar_finals = sum(t for v, t in combo if v[0] == "extra_final_norm" and v[2] == 2)
    verdicts = []
    for (cause, _, _, _), t in combo:
        if cause in ("extra_final_norm", "final_norm_missing"):
            final = outside_norms(m, cfg)
            base = STACKS[component] if contract == "practice" else 0
            verdicts.append(final is not None and len(final) == base + times["extra_final_norm"]
                            - times["final_norm_missing"] and scalar(final) == scalar_finals)
        elif cause == "scalar_layer_norm_gain":
            norms = [n for _, n in norm_modules(m)]
            finals = outside_norms(m, cfg) if contract == "paper" else None  # practice counts its final norms
            verdicts.append(scalar(norms) - scalar(finals or []) == t if norms else None)
        elif cause == "projections_without_bias":
            verdicts.append(bias_free_projections(m, cfg) == t if projection_maps(m, cfg) or raw_projections(m, cfg)
                            else None)
        elif cause == "untied_embeddings":
            verdicts.append(untied_matrices(m, cfg) == times[cause])
        elif cause == "generator_outside_model":
            verdicts.append(not output_projections(m, cfg.d_model, {cfg.tgt_vocab}))
        elif cause == "embeddings_outside_model":
            verdicts.append(not any(isinstance(e, torch.nn.Embedding) for e in m.modules()))
        elif cause == "generator_without_bias":
            vocabulary = cfg.vocab_size if component == "generator" else cfg.tgt_vocab
            verdicts.append(any(l.bias is None for l in output_projections(m, cfg.d_model, {vocabulary})))
        else:
            verdicts.append(None)
    return verdicts


def projection_maps(m, cfg):
    """The linear maps from d_model to one, two or three d_model-wide projections (W^Q, W^K, W^V, W^O on their own
    or fused, as ``qkv = Linear(d_model, 3 * d_model)``), or to one head's d_k (a head's W_i^Q, §3.2.2); not a
    feed-forward network's first map (one whose width a map beside it takes back to d_model), nor the pre-softmax
    map to a vocabulary that happens to be 2 or 3 d_model words."""
    d, found = cfg.d_model, []
    vocabulary_maps = {id(l) for l in output_projections(m, d, {cfg.tgt_vocab})} if cfg.tgt_vocab != d else set()
    # (a vocabulary as large as d_model: a d_model x d_model map is read as a projection, an attention's W^O)
    for block in m.modules():
        linears = [c for c in block.children() if isinstance(c, torch.nn.Linear) and id(c) not in vocabulary_maps]
        found += [l for l in linears if l.in_features == d and (l.out_features in (d, cfg.d_k) or l.out_features in (
                  2 * d, 3 * d) and not any(o.in_features == l.out_features and o.out_features == d for o in linears))]
    return found


def bias_free_projections(m, cfg):
    """How many d_model-wide projections the bias-free :func:`projection_maps` hold (a fused one counts each; the
    h maps of one head each, d_model x d_k, count as one), and the :func:`raw_projections` without a bias beside
    them; None when the widths do not add up to whole ones."""
    width = sum(l.out_features for l in projection_maps(m, cfg) if l.bias is None)
    raw = sum(max(0, weights - biases) for weights, biases in raw_projections(m, cfg))
    return width // cfg.d_model + raw if width % cfg.d_model == 0 else None


def raw_projections(m, cfg):
    """``[(projections, biases)]`` of each module holding projections as parameters of its own rather than in
    ``nn.Linear`` maps (``W_q = nn.Parameter((h, d_model, d_k))``, used through einsum or matmul): how many
    d_model x d_model matrices its parameters shaped by d_model, h and d_k only make (3 for a fused one), and how
    many d_model-wide vectors beside them could be their biases."""
    d, found, seen = cfg.d_model, [], set()
    sizes = {d, cfg.h, cfg.d_k}
    for block in m.modules():
        if isinstance(block, (torch.nn.Linear, torch.nn.Embedding, torch.nn.LayerNorm)):
            continue
        own = [p for name, p in block.named_parameters(recurse=False) if id(p) not in seen and p.requires_grad
               and "pos" not in name.lower()]  # (a table of positions is no projection, §3.5; a wrapper may
        # show its block's parameters)
        seen.update(id(p) for p in own)
        weights = sum(p.numel() // (d * d) for p in own if p.dim() >= 2 and set(p.shape) - {1} <= sizes | {3}
                      and p.numel() in (d * d, 3 * d * d))  # (axes of 1 aside: (h, 1, d_model, d_k) per head)
        if weights:
            found.append((weights, sum(p.numel() // d for p in own if p.numel() in (d, 3 * d)
                                       and set(p.shape) - {1} <= sizes | {3})))
    return found


def vocabulary_matrices(m, cfg):
    """``[(name, weight)]`` of the token embedding tables (V x d_model; a table named for positions is not one, §3.5)
    and the pre-softmax linear maps (d_model -> V_tgt) of ``m``, every name a weight goes by (a tied weight is listed
    under each)."""
    vocabularies = {cfg.src_vocab, cfg.tgt_vocab}
    projections = {id(l) for l in output_projections(m, cfg.d_model, {cfg.tgt_vocab})}
    return [(f"{name}.weight" if name else "weight", module.weight) for name, module in m.named_modules(
        remove_duplicate=False) if (isinstance(module, torch.nn.Embedding) and module.num_embeddings in vocabularies
                                    and module.embedding_dim == cfg.d_model and "pos" not in name.lower())
            or id(module) in projections]


def untied_matrices(m, cfg):
    """How many more vocabulary matrices of one shape ``m`` holds than one: the matrices §3.4 shares held apart."""
    storages = defaultdict(set)
    for _, weight in vocabulary_matrices(m, cfg):
        storages[tuple(weight.shape)].add(weight.data_ptr())
    return max((len(s) - 1 for s in storages.values()), default=0)


@pytest.mark.parametrize("component", COUNTED)
@given(drawn=strategies.settings())
def test_parameter_count(impl, device, contract, component, drawn):
    """The number of distinct learned parameters equals the closed form of the paper's architecture (§3.1-3.5):
    4(d^2 + d) per attention, 2 d d_ff + d_ff + d per feed-forward network, 2d per LayerNorm, ..."""
    case = Case(impl, device=device, **drawn)
    m = case.build(component)
    cfg, observed = case.cfg, count([m])
    width = built_d_ff(m, cfg) if not impl.supports(component).takes("d_ff") else None  # fixed in the code itself
    expected = closed_form(component, cfg, d_ff=width)
    others = parts_of_other_roles(m, component, case)
    observed -= sum(count for _, count in others)
    variants = known_variants(component, cfg, contract)
    if contract == "practice" and component in STACKS:
        expected += 2 * cfg.d_model * STACKS[component]
    if observed == expected:
        return
    requirement = f"{expected} parameters, {SECTION[component]}; {cfg}" + (
        f" with the d_ff = {width} its code fixes" if width else "") + "".join(
        f"; not counting {what} ({count})" for what, count in others)
    if contract == "practice" and component in STACKS:
        requirement += " plus a final LayerNorm per stack (contract 'practice')"
    repro = case.reproduction(component, "print(sum(p.numel() for p in m.parameters() if p.requires_grad))")
    combo = best_reading(observed - expected, variants, m, cfg, contract, component)
    if combo:
        causes, words = describe(combo)
        if not causes:  # only readings that conform
            note_on_pass(f"{observed} parameters ({observed - expected:+d} from {expected}): {words}")
            return
        raise Deviation(f"{component}.parameters." + "+".join(causes), requirement,
                        f"{observed} parameters ({observed - expected:+d}): {words}", repro)
    shared = shared_head_projections(m, cfg)
    reading = (f"{shared} projection(s) of d_k x d_k ({cfg.d_k} x {cfg.d_k}) applied to every head's slice, shared "
               f"by the heads, where §3.2.2 gives each head its own d_model x d_k" if shared else
               explain_difference(component, cfg, observed, expected, len(norm_modules(m))))
    failure = Failure(f"{component}.parameters.count", requirement,
                      f"{observed} parameters ({observed - expected:+d}: {reading})", repro)
    raise if_the_checker_sets(impl, component, "h", failure) if component in ATTENTIONS else failure


def at_the_papers_sizes(impl, device, contract, component, failure, cfg):
    """Where ``failure``, a parameter count that failed at ``cfg``, counted a block its code builds at widths of its
    own (:func:`harness.widths_of_its_own`: a ``LayerNorm(512)`` beside projections d_model wide), or one that
    crashes at the checker's sizes and runs at the paper's (:func:`runs_at_the_papers_sizes`): raises what the count
    says at the paper's base sizes (d_model 512, h 8, d_ff 2048), where such code is what its author builds: its
    count there the paper's (or a reading that conforms), ``adapter.sizes_fixed_by_the_code``; else the finding made
    there, with the author's own numbers. Returns where the code takes the sizes it is given (the failure stands)."""
    try:
        fixed = harness.widths_of_its_own(impl.build(component, cfg), cfg)
    except Exception:  # (the author's code, which built at these sizes in the check: no reading of its widths)
        fixed = None
    served_here = isinstance(getattr(impl, "roles", None), dict) and component in impl.roles  # (not from apart)
    if fixed is None and served_here and runs_at_the_papers_sizes(impl, component):
        fixed = "it crashes at the checker's sizes and runs at the paper's: its code fixes a width of its own"
    if fixed is None:
        return
    latest, notes = harness.LATEST_CASE, len(PASS_NOTES)
    paper = dict(cfg=PAPER_BASE, batch=1, src_len=3, tgt_len=4, dtype=torch.float32, seed=0)
    try:
        test_parameter_count.hypothesis.inner_test(impl, device, contract, component, paper)
    except Finding as found:
        if isinstance(found, Missing):
            raise
        found.observed += f" (counted at the paper's base sizes, where its author builds it: {fixed})"
        raise found from None
    except Exception:  # (a crash at the paper's sizes says nothing of the count: the failure stands)
        return
    finally:
        harness.LATEST_CASE, readings = latest, PASS_NOTES[notes:]
        del PASS_NOTES[notes:]
    raise Missing("adapter.sizes_fixed_by_the_code", failure.requirement, f"{failure.observed}; but {fixed}, and "
                  f"built at the paper's base sizes ({PAPER_BASE}), as its author builds it, it has the paper's count"
                  + "".join(f" ({reading})" for reading in readings), failure.reproduction)


def built_d_ff(m, cfg):
    """The inner width of the feed-forward networks in ``m`` (Linear(d_model, w) followed by Linear(w, d_model)),
    for code that fixes it itself (``4 * d_model``) instead of taking d_ff; None when not one width."""
    linears = [l for l in m.modules() if isinstance(l, torch.nn.Linear)]
    widths = {l.out_features for l in linears if l.in_features == cfg.d_model and any(
        o.in_features == l.out_features and o.out_features == cfg.d_model for o in linears)} - {cfg.d_model}
    return widths.pop() if len(widths) == 1 else None


def parts_of_other_roles(m, component, case):
    """``[(what, parameter count)]``: what ``m`` carries that the paper counts under another role: the token and
    learned position tables of a stack or layer that takes token ids, the output projection of a decoder ending
    with it (outside its layers), the LayerNorm of a sub-layer that adds its own residual (§3.1 counts it under the layer)."""
    cfg, parts, tables = case.cfg, [], []
    if component in ("encoder", "decoder", "encoder_layer", "decoder_layer"):
        tables = [e for e in m.modules() if isinstance(e, torch.nn.Embedding)]
        if tables:
            parts.append((f"{len(tables)} embedding table(s) (§3.4, §3.5)", count(tables)))
    if component == "decoder":  # a Linear(d_model, V) outside the layers (V as configured, or as its table sizes it)
        inside_layers = [prefix for prefix, _ in layer_lists(m, cfg.N)]
        vocabularies = {cfg.vocab_size, cfg.tgt_vocab} | {e.num_embeddings for e in tables}
        projections = [l for name, l in m.named_modules() if isinstance(l, torch.nn.Linear)
                       and l.in_features == cfg.d_model and l.out_features in vocabularies
                       and not any(inside(name, prefix) for prefix in inside_layers)]
        if len(projections) > 1:  # (a vocabulary drawn as large as d_model: the attention maps have that shape too)
            projections = [l for l in projections if l.out_features != cfg.d_model]
        if projections:
            parts.append(("the output projection (§3.4)", count(projections)))
    if component in ("feed_forward", "multi_head_attention"):
        norms = called(m, [n for _, n in norm_modules(m)], case, component)
        if norms:
            parts.append((f"{len(norms)} LayerNorm(s) of a sub-layer adding its own residual (§3.1)", count(norms)))
    return parts


def called(m, modules, case, component):
    """Those of ``modules`` that one canonical call of ``m`` runs (none when the call fails)."""
    ran = []
    hooks = [sub.register_forward_hook(lambda sub, *_: ran.append(sub)) for sub in modules]
    try:
        with torch.no_grad():
            m(*canonical_inputs(case, component))
    except Exception:  # the candidate's own code: its failure is other checks' finding
        return []
    finally:
        for hook in hooks:
            hook.remove()
    return [sub for sub in modules if any(sub is r for r in ran)]


def output_projections(m, d_model, vocabularies):
    """The Linear(d_model, V) maps of ``m`` for V in ``vocabularies`` that are not the first map of a feed-forward
    network (whose parent block also holds its partner, a Linear(V, d_model) other than itself: when V = d_model
    the projection has the partner's shape)."""
    found = []
    for parent in m.modules():
        linears = [c for c in parent.children() if isinstance(c, torch.nn.Linear)]
        found += [l for l in linears if l.in_features == d_model and l.out_features in vocabularies and not any(
            o is not l and o.in_features == l.out_features and o.out_features == d_model for o in linears)]
    return found


def count(modules):
    """The distinct learned parameters of ``modules``: a frozen one (``requires_grad = False``, a sinusoid table kept
    as a parameter, §3.5) is a constant, not a parameter of the paper's count."""
    return sum(p.numel() for p in {id(p): p for mod in modules for p in mod.parameters() if p.requires_grad}.values())


def shared_head_projections(m, cfg):
    """How many weights are d_k x d_k (d_k < d_model): one matrix applied to every head's slice of the input."""
    if cfg.d_k == cfg.d_model:
        return 0
    return sum(1 for p in m.parameters() if p.dim() == 2 and tuple(p.shape) == (cfg.d_k, cfg.d_k))


def is_an_embedding_table(p, model, cfg):
    """Whether ``p`` is a vocabulary's embedding matrix, which the pre-softmax map may share (§3.4): shaped by a
    vocabulary and d_model, or the weight of one of the model's lookups (at sizes its author fixed)."""
    return any(s in (cfg.src_vocab, cfg.tgt_vocab, cfg.vocab_size) for s in p.shape) and cfg.d_model in p.shape \
        or any(isinstance(lookup, nn.Embedding) and lookup.weight.data_ptr() == p.data_ptr()
               for lookup in model.modules())


@pytest.mark.parametrize("component", ("encoder", "decoder", "model"))
@given(drawn=strategies.settings())
def test_layers_do_not_share_weights(impl, device, component, drawn):
    """§3.1 "a stack of N = 6 identical layers": identical in structure, each with its own weights (only the
    embeddings and the pre-softmax projection may share a matrix, §3.4)."""
    case = Case(impl, device=device, **drawn)
    case = case.with_config(N=max(2, case.cfg.N))
    m, cfg = case.build(component), case.cfg
    cause = f"{component}.layers_share_weights"
    requirement = f"the N={cfg.N} layers to hold independent weights (§3.1)"
    repro = case.reproduction(component, "print([n for n, _ in m.named_parameters(remove_duplicate=False)])")
    # the same module object at two places: nn.ModuleList([layer] * N)
    for name, layers in layer_lists(m, cfg.N):
        ids = [id(x) for x in layers]
        if len(set(ids)) < len(ids):
            raise Failure(cause, requirement, f"{name or 'the stack'} holds the same module object "
                          f"{len(ids) - len(set(ids)) + 1} times ([layer] * N)", repro)
    # one tensor (or one storage) under two names
    owners = defaultdict(list)
    for name, p in m.named_parameters(remove_duplicate=False):
        if p.numel():
            owners[(p.data_ptr(), p.dtype)].append((name, p))
    for names in owners.values():
        if len({n for n, _ in names}) > 1 and not (component == "model" and is_an_embedding_table(names[0][1], m, cfg)):
            raise Failure(cause, requirement, "one parameter tensor (storage) appears as "
                          + ", ".join(n for n, _ in names[:4]), repro)
    # one layer applied N times while the others idle
    calls = layer_calls(case, component, m)
    for name, counts in calls.items():
        if counts and (max(counts) > 1 or 0 in counts) and sum(counts) >= len(counts):
            raise Failure(cause, requirement, f"the layers of {name or 'the stack'} were called {counts} times "
                          "in one forward pass (one layer reused for the others)", repro)


def passed_between_layers(m, inputs, layers):
    """``[(arguments, output, index of the layer)]`` of each call of ``layers`` in one forward pass of ``m`` on
    ``inputs``, in call order (the tensor and tuple arguments; the output as returned), the stack's output, and the
    exception that ended the pass, if any (then no output)."""
    calls, handles = [], []

    def before(layer, args, kwargs):
        calls.append([[a for a in (*args, *kwargs.values()) if isinstance(a, (torch.Tensor, tuple))], None,
                      next(i for i, known in enumerate(layers) if known is layer)])

    def after(*hook_args):
        calls[-1][1] = hook_args[-1]
    for layer in layers:
        handles += [layer.register_forward_pre_hook(before, with_kwargs=True), layer.register_forward_hook(after)]
    output = crash = None
    try:
        with hooked(handles), torch.no_grad():
            output = m(*inputs)
    except Exception as exc:  # noqa: BLE001 (a tuple handed on crashes the next layer: read below)
        crash = exc
    return calls, output, crash


def same_arguments(these, those):
    return len(these) == len(those) and all(
        isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b) for a, b in zip(these, those))


@pytest.mark.parametrize("component", ("encoder", "decoder"))
@given(drawn=strategies.settings())
def test_each_layer_receives_the_previous_output(impl, device, component, drawn):
    """§3.1: "a stack of N identical layers": each layer takes the output of the one below it (its tensor, when a
    layer returns its attention weights too), neither the stack's input again nor a tuple."""
    case = Case(impl, device=device, **drawn)
    case = case.with_config(N=max(2, case.cfg.N))
    m = case.build(component)
    lists = layer_lists(m, case.cfg.N)
    if not lists:
        raise Missing(f"{component}.layers_not_found", f"a list of the N={case.cfg.N} layers", "none in the stack")
    inputs = canonical_inputs(case, component)
    calls, output, crash = passed_between_layers(m, inputs, lists[0][1])
    requirement = f"layer k + 1 of the N={case.cfg.N} to take the output of layer k (§3.1)"
    for (_, out, below), (received, _, index) in zip(calls, calls[1:]):
        if index != below + 1:
            continue  # (the first layer again: the stack called anew, once per sample for code without a batch axis)
        if isinstance(out, tuple) and any(a is out for a in received):
            raise Failure(f"{component}.tuple_passed_on", requirement,
                          f"a layer returned a tuple of {len(out)} and the stack handed the whole tuple to the next "
                          "layer" + (f" ({type(crash).__name__}: {crash})" if crash else ""))
        produced = out[0] if isinstance(out, tuple) and out else out
        if not isinstance(produced, torch.Tensor) or any(
                isinstance(a, torch.Tensor) and a.shape == produced.shape and torch.equal(a, produced) for a in received):
            continue
        if same_arguments(received, calls[0][0]):
            if same_arguments([output], inputs[:1]):
                raise Failure(f"{component}.layer_outputs_discarded", requirement,
                              "every layer receives the stack's input, and the stack returns that input: the layers' "
                              "outputs are discarded (the assignment of the loop's result dropped)")
            raise Failure(f"{component}.layers_not_chained", requirement,
                          "a later layer receives the same arguments as the first, not the previous layer's output: "
                          "every layer reads the stack's input and only the last one's output is kept")
        raise Missing(f"{component}.layer_inputs_transformed", requirement,
                      "what passes between two layers is changed on the way (a norm or a projection in the loop)")
    if crash is not None:
        raise crash


def layer_calls(case, component, m):
    """``{container name: [calls of each layer]}`` in one forward pass of the author's block (of each of its passes,
    where the canonical call makes one per sample: code without a batch axis)."""
    lists = layer_lists(m, case.cfg.N)
    counts = {name: [0] * len(layers) for name, layers in lists}
    passes = [0]
    inner = getattr(m, "inner", None)
    handles = [inner.register_forward_hook(lambda *_: passes.append(1))] if isinstance(inner, torch.nn.Module) else []
    for name, layers in lists:
        for i, layer in enumerate(layers):
            def hook(*_, name=name, i=i):
                counts[name][i] += 1
            handles.append(layer.register_forward_hook(hook))
    with hooked(handles), torch.no_grad():
        m(*canonical_inputs(case, component))
    return {name: [count // max(sum(passes), 1) for count in layer_counts] for name, layer_counts in counts.items()}


def also_returned(output):
    """The floating tensors a block returns after its output (a stack's keys and values for the decoder, attention
    weights): their parameters take part in what the block computes too."""
    items = list(output) if isinstance(output, (tuple, list)) else []
    return [t for t in items[1:] if isinstance(t, torch.Tensor) and t.is_floating_point()]


def unmasked(inputs):
    """The canonical inputs with every mask all True (so each query attends to several keys)."""
    return tuple(torch.ones_like(x) if isinstance(x, torch.Tensor) and x.dtype == torch.bool else x for x in inputs)


def unused_generator(m, cfg, called):
    """Parameters whose shapes are the generator's (d_model x V_tgt and V_tgt) of a module never called, or of a
    Linear(d_model, V_tgt) (the model's forward may run it after the decoder output the model role returns): the
    generator legitimately receives no gradient from that output."""
    exempt, projections = set(), output_projections(m, cfg.d_model, {cfg.tgt_vocab, cfg.vocab_size})
    for module in m.modules():
        own = list(module.parameters(recurse=False))
        projection = any(module is o for o in projections)
        vocabulary = module.out_features if projection else cfg.tgt_vocab
        if own and (id(module) not in called or projection) and any(p.dim() == 2 for p in own) \
                and all(vocabulary in p.shape and (p.dim() == 1 or cfg.d_model in p.shape) for p in own):
            exempt.update(id(p) for p in own)
    return exempt


@pytest.mark.parametrize("component", MODULE_ROLES)
@given(drawn=strategies.settings())
def test_every_parameter_receives_gradient(impl, device, component, drawn):
    """Every learned parameter takes part in the computation: in train mode (dropout 0), the gradient of a random
    projection of the output (and of the other tensors the block returns) reaches each parameter, finite, and not
    all zero for a weight matrix (§5: all weights are trained). A vector may get an all-zero gradient: the key projection's bias has none (the softmax is
    invariant to it), and an embedding only gets gradient in the rows of the tokens seen."""
    case = Case(impl, device=device, **drawn)
    case = case.with_lengths_at_least(2)
    m = case.build(component, train=True)
    called, returned = set(), []
    handles = [x.register_forward_hook(lambda mod, *_: called.add(id(mod))) for x in m.modules()]
    if isinstance(getattr(m, "inner", None), torch.nn.Module):  # what the author's block returns besides its output
        handles.append(m.inner.register_forward_hook(lambda mod, args, output: returned.extend(also_returned(output))))
    try:
        out = output_tensor(m(*unmasked(canonical_inputs(case, component))), component)
    finally:
        for h in handles:
            h.remove()
    projected = [(t * torch.randn(t.shape, generator=case.generator, dtype=torch.float64).to(t)).sum()
                 for t in [out, *returned] if t.requires_grad]
    if projected:
        sum(projected).backward()
    exempt = unused_generator(m, case.cfg, called) if component == "model" else set()
    none, zero, bad = [], [], []
    for name, p in m.named_parameters():
        if not p.requires_grad or id(p) in exempt:
            continue
        if p.grad is None:
            none.append(name)
        elif not torch.isfinite(p.grad).all():
            bad.append(name)
        elif not p.grad.any() and p.dim() > 1:
            zero.append(name)
    if none or zero or bad:
        observed = "; ".join(f"{what}: {', '.join(names[:6])}" + (" ..." if len(names) > 6 else "")
                             for what, names in (("no gradient", none), ("all-zero gradient", zero),
                                                 ("non-finite gradient", bad)) if names)
        cause = "no_gradient" if none else ("zero_gradient" if zero else "nonfinite_gradient")
        raise Failure(f"{component}.parameters.{cause}", "every learned parameter to receive a gradient "
                      "(an unused parameter is a registered module the forward pass skips)", observed,
                      case.reproduction(component, "out = m(*inputs); out.sum().backward()  # then inspect p.grad"))
