"""Norm order (§3.1, §5.4): "the output of each sub-layer is LayerNorm(x + Sublayer(x))" (post-norm), told apart
from pre-norm x + Sublayer(LayerNorm(x)) (contract "practice") and from the broken placements, and whether a stack
ends with a final LayerNorm.

The sub-layer connection is called with a known sub-layer. Layers are probed through their weights: with every
parameter outside the LayerNorms zeroed each sub-layer outputs 0; with the d_model-sized biases set to a vector c
(weights still zero) each sub-layer outputs c (or 0 when its last projection has no bias). The outputs of both
probes are compared with what each placement predicts; placements the probes cannot tell apart give a *missing*
verdict, never a failure. Every LayerNorm a block builds, in every layer, is also checked for a small eps and,
called on its own, for normalizing each position's d_model features alone.
"""
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given

from conformance.contract import strategies
from conformance.contract.harness import Case, canonical_inputs, difference, output_tensor, role_instances
from conformance.contract.probes import hooked
from conformance.contract.verdicts import Deviation, Failure, Missing
from conformance.contract.weights import (EPS_LIMIT, inside, layer_lists, norm_eps, norm_modules, perturb_norms, reset_norms,
                                 sub_layer_modules, zero_non_norm_parameters)

# (cause, formula in words, y -> next y given the sub-layer f and the layer normalization ln)
PLACEMENTS = (
    ("post_norm", "LayerNorm(x + Sublayer(x))", lambda x, f, ln: ln(x + f(x))),
    ("pre_norm", "x + Sublayer(LayerNorm(x))", lambda x, f, ln: x + f(ln(x))),
    ("norm_missing", "x + Sublayer(x)", lambda x, f, ln: x + f(x)),
    ("norm_on_sublayer_output", "x + LayerNorm(Sublayer(x))", lambda x, f, ln: x + ln(f(x))),
    ("residual_missing", "LayerNorm(Sublayer(x))", lambda x, f, ln: ln(f(x))),
    ("residual_missing", "Sublayer(LayerNorm(x))", lambda x, f, ln: f(ln(x))),
    ("residual_missing", "Sublayer(x)", lambda x, f, ln: f(x)),
    ("norm_on_residual_branch", "LayerNorm(x) + Sublayer(x)", lambda x, f, ln: ln(x) + f(x)),
    ("norm_on_residual_branch", "LayerNorm(x) + Sublayer(LayerNorm(x))", lambda x, f, ln: ln(x) + f(ln(x))),
    ("norm_twice", "LayerNorm(x + Sublayer(LayerNorm(x)))", lambda x, f, ln: ln(x + f(ln(x)))),
    ("sublayer_output_unused", "LayerNorm(x)", lambda x, f, ln: ln(x)),
    ("sublayer_output_unused", "x", lambda x, f, ln: x),
)
ACCEPTED = {"paper": "post_norm", "practice": "pre_norm"}
REQUIRED = {"paper": "§3.1: each sub-layer's output is LayerNorm(x + Sublayer(x)) (post-norm)",
            "practice": "contract 'practice': pre-norm x + Sublayer(LayerNorm(x)) (the paper's §3.1 is post-norm)"}
SUBLAYERS = {"encoder_layer": 2, "decoder_layer": 3}
MATCH = 0.01  # distance (relative to the input's norm) under which an output matches a placement


def call(m, inputs, role):
    """Call with autograd on: torch.nn's fused inference fast paths (and nested tensors) stay off. A block
    returning a tuple is read by its first item."""
    with torch.enable_grad():
        out = m(*inputs)
    if isinstance(out, (tuple, list)) and out:
        out = out[0]
    return output_tensor(out, role).detach()


def distance(a, b, scale):
    """``|a - b| / scale`` (b may be seq-first when a is batch-first); inf for incompatible shapes."""
    if a.shape != b.shape:
        if a.dim() == 3 and a.transpose(0, 1).shape == b.shape:
            b = b.transpose(0, 1)
        else:
            return math.inf
    return ((a.double() - b.double()).norm() / max(float(scale), 1e-30)).item()


def layer_norms(module, d_model):
    """Candidate normalizations: a plain layer norm, and the module's own norm-like module (after any reset)."""
    plain = lambda z: F.layer_norm(z, (d_model,))  # noqa: E731
    found = norm_modules(module)
    if not found:
        return [plain]
    own = found[0][1]

    def own_norm(z):
        with torch.no_grad():
            return own(z)
    return [plain, own_norm]


def nearest(observations, scale, lns, sub_layers=(), contract="paper", narrow=None):
    """``[(distance, cause, formula)]`` sorted. ``observations`` = [(output, x, alternatives)], each alternative a
    sequence of sub-layers applied to x in turn; an observation's distance is that of its closest alternative.
    Every sub-layer in the same placement; when none matches and ``sub_layers`` names them, each in its own
    (``x + LayerNorm(Sublayer(x))`` around the attentions, no norm around the feed-forward network, ...), the
    combinations keeping most sub-layers in the contract's placement first (the input of a sub-layer after a
    post-norm one is already normalized, so LayerNorm(x) and x cannot be told apart there; ``narrow(i, causes)``
    keeps those of sub-layer i's matching placements that a further probe allows, given those of the ones before)."""
    ranked = [(d, c[0][0], c[0][1]) for d, c in placement_distances(observations, scale, lns,
                                                                   [(p,) for p in PLACEMENTS])]
    if ranked[0][0] > MATCH and len(sub_layers) > 1:
        mixed = placement_distances(observations, scale, lns, [
            c for c in itertools.product(PLACEMENTS, repeat=len(sub_layers)) if len({p[1] for p in c}) > 1])
        in_contract = {c: sum(p[0] == ACCEPTED[contract] for p in c) for d, c in mixed if d <= MATCH}
        matched = [(d, c) for d, c in mixed if c in in_contract and in_contract[c] == max(in_contract.values())]
        if matched:
            ranked.insert(0, (max(d for d, _ in matched), *mixed_placement([c for _, c in matched], sub_layers, narrow)))
    return ranked


def placement_distances(observations, scale, lns, combinations):
    """``[(distance, combination)]`` sorted, for combinations of placements (one for all sub-layers, or one each)."""
    ranked = []
    for combination in combinations:
        best = math.inf
        for ln in lns:
            dist = 0.0
            try:
                for out, x, alternatives in observations:
                    closest = math.inf
                    for sublayers in alternatives:
                        y = x
                        for i, f in enumerate(sublayers):
                            y = combination[i % len(combination)][2](y, f, ln)
                        closest = min(closest, distance(out, y, scale))
                    dist = max(dist, closest)
            except RuntimeError:
                dist = math.inf
            best = min(best, dist)
        ranked.append((best, combination))
    return sorted(ranked, key=lambda r: r[0])


def mixed_placement(matched, sub_layers, narrow=None):
    """(cause, formula) for the combinations, one placement per sub-layer, that match: each sub-layer's formulas
    (several where the probe cannot tell them apart, unless ``narrow`` rules some out), the cause from the broken
    placements it can tell."""
    options = [list(dict.fromkeys(c[i] for c in matched)) for i in range(len(matched[0]))]
    if narrow is not None:
        for i, option in enumerate(options):
            options[i] = narrow(i, option, options[:i]) or option
    causes = [o[0][0] for o in options if len({p[0] for p in o}) == 1 and o[0][0] not in ACCEPTED.values()]
    formula = "; ".join(f"{name}: " + " or ".join(p[1] for p in o) for name, o in zip(sub_layers, options))
    return "+".join(dict.fromkeys(causes)) or "mixed_placements", formula


def summary(ranked, n=4):
    return ", ".join(f"{formula}: {dist:.2g}" for dist, _, formula in ranked[:n])


def require_placement(role, contract, ranked, repro, tie_breaker=None, all_sub_layers_run=None):
    """Verdict from the ranked placements: pass for the contract's placement, deviation for the other accepted
    one, failure for a broken one, missing when the probe cannot tell (``tie_breaker`` narrows down a list of
    matching causes; ``all_sub_layers_run()`` says whether a reading of an unused sub-layer output is belied by
    every sub-layer running: its output then reaches the layer in a way the probe does not model, such as a
    sub-layer adding its own residual and norm, or a last map without a bias for the probe to set)."""
    matched = [r for r in ranked if r[0] <= MATCH]
    distances = "relative distances " + summary(ranked)
    if not matched:
        raise Missing(f"{role}.norm_order.unrecognised", REQUIRED[contract],
                      f"an output matching none of the placements probed ({distances})", repro)
    causes = list(dict.fromkeys(cause for _, cause, _ in matched))
    if len(causes) > 1 and tie_breaker is not None:
        kept = tie_breaker(causes)
        ruled_out = [c for c in causes if c not in kept]
        if ruled_out:
            ranked = [r for r in ranked if r[1] not in ruled_out]
            distances = "relative distances " + summary(ranked) + f"; {', '.join(ruled_out)} ruled out by the " \
                "shift probe"
        causes = kept
    formula = next(f for _, c, f in matched if c == causes[0])
    if len(causes) > 1:
        if any(c in ACCEPTED.values() for c in causes):
            raise Missing(f"{role}.norm_order.undecided", REQUIRED[contract],
                          f"the probe cannot tell {' / '.join(causes)} apart ({distances})", repro)
        raise Failure(f"{role}.norm_order.{causes[0]}", REQUIRED[contract],
                      f"{formula} (or {', '.join(causes[1:])}; {distances})", repro)
    cause = causes[0]
    if cause == ACCEPTED[contract]:
        return
    if cause == "sublayer_output_unused" and all_sub_layers_run is not None and all_sub_layers_run():
        raise Missing(f"{role}.norm_order.sub_layer_output_not_seen", REQUIRED[contract],
                      f"{formula}, although every sub-layer runs: its output reaches the layer's in a way the probe "
                      f"does not model (a sub-layer adding its own residual and norm?) ({distances})", repro)
    if cause in ACCEPTED.values():
        raise Deviation(f"{role}.norm_order.{cause}", REQUIRED[contract], f"{formula} ({distances})", repro)
    raise Failure(f"{role}.norm_order.{cause}", REQUIRED[contract], f"{formula} ({distances})", repro)


@pytest.mark.parametrize("component", ["sublayer_connection"])
@given(drawn=strategies.settings())
def test_sublayer_connection_placement(impl, device, contract, component, drawn):
    """§3.1: the connection computes LayerNorm(x + Sublayer(x)); probed with a known affine sub-layer."""
    case = Case(impl, device=device, **drawn)
    m, d = case.build(component), case.cfg.d_model
    x = case.randn(case.batch, case.tgt_len, d) * 2 + 0.5
    weight, bias = case.randn(d, d) / math.sqrt(d), case.randn(d)
    sublayer = lambda z: z @ weight + bias  # noqa: E731
    out = call(m, (x, sublayer), component)
    ranked = nearest([(out, x, [[sublayer]])], x.norm(), layer_norms(m, d))
    require_placement(component, contract, ranked, case.reproduction(
        component, f"x = torch.randn(2, 3, {d}); W = torch.randn({d}, {d})\n"
                   "print(m(x, lambda z: z @ W), torch.nn.functional.layer_norm(x + x @ W, x.shape[-1:]))"))


def probe_inputs(case, role):
    inputs = list(canonical_inputs(case, role))
    inputs[0] = inputs[0] * 2 + 0.5
    return inputs


def nearest_per_sub_layer(m, case, inputs, component, contract, observations):
    """The placements ranked with each sub-layer in its own, each forced to output its own vector (the layer's
    attentions and feed-forward network taken in the order its forward calls them); None when the layer's
    sub-layers cannot be told apart so."""
    d, k = case.cfg.d_model, SUBLAYERS[component]
    sub_layers = in_run_order(m, sub_layer_modules(m), inputs, component)
    if len(sub_layers) != k:
        return None
    outputs = [case.randn(d) + 1.0 for _ in sub_layers]
    for (_, module), c in zip(sub_layers, outputs):
        zero_non_norm_parameters(module, bias_value=c, d_model=d)
    x = inputs[0]
    constants = [lambda z, c=c: c.expand_as(z) for c in outputs]

    def narrow(i, placements, previous):
        """A last sub-layer matching several residual placements (its constant output hides its input) is read on
        the built layer (:func:`last_sub_layer_reading`): fed the very stream it adds to, it is x + Sublayer(x),
        or LayerNorm(x) + Sublayer(LayerNorm(x)) where a norm of its own runs before it; otherwise not."""
        if i != k - 1 or len(placements) < 2 or not {p[0] for p in placements} & {"pre_norm", "norm_missing"}:
            return placements
        reading = last_sub_layer_reading(case, case.build(component), inputs, component)
        if reading is None:
            return placements
        fed_the_stream, norms_between = reading
        kept = [p for p in placements if (p[1] in FED_THE_STREAM) == fed_the_stream]
        before = {p[0] for p in previous[-1]} if previous else set()
        own_norms = norms_between - (1 if before == {"post_norm"} else 0 if before == {"pre_norm"} else -1)
        if fed_the_stream and own_norms >= 0:
            kept = [p for p in kept if (p[1] == "x + Sublayer(x)") == (own_norms == 0)]
        return kept
    return nearest(observations + [(call(m, inputs, component), x, [constants])], x.norm(), layer_norms(m, d),
                   [f"self.{name}" for name, _ in sub_layers], contract, narrow)


def in_run_order(layer, sub_layers, inputs, component):
    """``sub_layers`` (``[(name, module)]``, in registration order) in the order the layer's forward first calls
    them (a feed-forward network registered before the attention it follows); those it does not call last."""
    first = {}

    def called(name):
        def hook(*_):
            first.setdefault(name, len(first))  # (returning nothing: a pre-hook's result replaces the inputs)
        return hook
    hooks = [module.register_forward_pre_hook(called(name)) for name, module in sub_layers]
    try:
        call(layer, inputs, component)
    except Exception:  # (the author's code: the order stays the registration's, the check reports the crash)
        return sub_layers
    finally:
        for hook in hooks:
            hook.remove()
    return sorted(sub_layers, key=lambda entry: first.get(entry[0], len(sub_layers)))


FED_THE_STREAM = ("x + Sublayer(x)", "LayerNorm(x) + Sublayer(LayerNorm(x))")
"""The residual placements whose sub-layer reads the very tensor its output is added to."""


def last_sub_layer_reading(case, layer, inputs, component):
    """``(fed the stream, norms between)`` for the layer's last sub-layer, or None when it cannot be read: whether
    its input is the residual stream its output is added to (the layer's output less the sub-layer's), and how many
    norm calls ran between the sub-layer before it and it. Every norm is first given a gain and bias of its own,
    so a norm before the sub-layer changes what a norm after the previous sub-layer made."""
    subs = [module for _, module in in_run_order(layer, sub_layer_modules(layer), inputs, component)]
    norms = [module for _, module in norm_modules(layer)]
    if len(subs) < 2 or any(norm_modules(sub) for sub in subs):  # wrappers holding their own norm
        return None
    with torch.no_grad():
        for norm in norms:
            for p in norm.parameters():
                p.copy_(1.0 + case.randn(*p.shape) * 0.5)
    events, seen = [], {}

    def record_last(module, args, output):
        if args and torch.is_tensor(args[0]) and torch.is_tensor(output):
            seen["input"], seen["output"] = args[0].detach(), output.detach()
    hooks = [subs[-1].register_forward_hook(record_last), subs[-2].register_forward_hook(
        lambda *_: events.append("previous")), subs[-1].register_forward_pre_hook(lambda *_: events.append("last"))]
    hooks += [norm.register_forward_hook(lambda *_: events.append("norm")) for norm in norms]
    try:
        out = call(layer, inputs, component)
    finally:
        for hook in hooks:
            hook.remove()
    if not seen or seen["input"].shape != out.shape or events.count("previous") != 1 or events.count("last") != 1:
        return None
    stream = out - seen["output"]
    between = events[events.index("previous"):events.index("last")].count("norm")
    return distance(seen["input"], stream, stream.norm()) < 1e-4, between


@pytest.mark.parametrize("component", ["encoder_layer", "decoder_layer"])
@given(drawn=strategies.settings())
def test_layer_placement(impl, device, contract, component, drawn):
    """§3.1: each of the layer's sub-layers (2 in the encoder, 3 in the decoder) sits in LayerNorm(x + Sublayer(x)).
    Probed through the weights: sub-layers forced to output 0, then a known vector c."""
    case = Case(impl, device=device, **drawn)
    d, k = case.cfg.d_model, SUBLAYERS[component]
    inputs = probe_inputs(case, component)
    x = inputs[0]
    repro = case.reproduction(component, "# zero every parameter outside the LayerNorms, then call m canonically")
    m = case.build(component)
    if not norm_modules(m):
        raise Missing(f"{component}.norm_order.no_norm_module", REQUIRED[contract],
                      "no LayerNorm-like submodule to keep while zeroing the others", repro)
    reset_norms(m)
    zero_non_norm_parameters(m)
    zero = lambda z: torch.zeros_like(z)  # noqa: E731
    observations = [(call(m, inputs, component), x, [[zero] * k])]
    ranked = nearest(observations, x.norm(), layer_norms(m, d))
    c = case.randn(d) + 1.0
    if zero_non_norm_parameters(m, bias_value=c, d_model=d):
        # each sub-layer now outputs c; failing that, some output 0 (a last projection without bias)
        const = lambda z: c.expand_as(z)  # noqa: E731
        out = call(m, inputs, component)
        ranked = nearest(observations + [(out, x, [[const] * k])], x.norm(), layer_norms(m, d))
        if ranked[0][0] > MATCH:
            ranked = nearest_per_sub_layer(m, case, inputs, component, contract, observations) or ranked
        if ranked[0][0] > MATCH:
            partial = list(itertools.product([const, zero], repeat=k))[1:-1]
            ranked = nearest(observations + [(out, x, partial)], x.norm(), layer_norms(m, d))

    def tie_breaker(causes):
        """With constant sub-layers, pre-norm and a missing norm agree, and so do post-norm and
        LayerNorm(x + Sublayer(LayerNorm(x))). With the built weights, shifting the input by a constant s
        (LayerNorm removes it) shifts a pre-norm layer's output by s, leaves a doubly normalized one unchanged,
        and changes a post-norm or norm-less one otherwise; a pre-norm layer's norms change its output."""
        fresh = case.build(component)
        y0 = call(fresh, inputs, component)
        shifted = call(fresh, [x + 3.0] + inputs[1:], component) - y0
        shifts, invariant = distance(shifted, torch.full_like(y0, 3.0), y0.norm()) < 1e-3, \
            distance(shifted, torch.zeros_like(y0), y0.norm()) < 1e-3
        if {"post_norm", "norm_twice"} <= set(causes):
            causes = [c for c in causes if c != ("post_norm" if invariant else "norm_twice")]
        if {"pre_norm", "norm_missing"} <= set(causes):
            norms_matter = shifts
            if not shifts and norm_modules(fresh):
                perturb_norms(fresh)
                norms_matter = distance(call(fresh, inputs, component), y0, y0.norm()) > 1e-6
            causes = [c for c in causes if c != ("norm_missing" if norms_matter else "pre_norm")]
        return causes
    require_placement(component, contract, ranked, repro, tie_breaker=tie_breaker,
          all_sub_layers_run=lambda: all_run(case.build(component), inputs, component))


def all_run(layer, inputs, component):
    """Whether one call of ``layer`` runs every one of its sub-layers (attentions, feed-forward network)."""
    ran = set()
    subs = sub_layer_modules(layer)
    hooks = [m.register_forward_hook(lambda m, *_: ran.add(id(m))) for _, m in subs]
    try:
        call(layer, inputs, component)
    finally:
        for hook in hooks:
            hook.remove()
    return bool(subs) and all(id(m) in ran for _, m in subs)


@pytest.mark.parametrize("component", ["encoder", "decoder"])
@given(drawn=strategies.settings())
def test_stack_final_norm(impl, device, contract, component, drawn):
    """§3.1: a post-norm stack ends with its last layer's LayerNorm, nothing after it; a pre-norm stack (contract
    "practice") needs a final LayerNorm (torch.nn.Transformer adds one to both stacks)."""
    case = Case(impl, device=device, **drawn)
    case = case.with_config(N=max(2, case.cfg.N))
    m, d = case.build(component), case.cfg.d_model
    repro = case.reproduction(component, "print(m)")
    lists = layer_lists(m, case.cfg.N)
    if len(lists) != 1:
        raise Missing(f"{component}.norm_order.layers_not_found", "a stack of N layers (§3.1)",
                      f"{len(lists)} lists of N={case.cfg.N} modules of one class", repro)
    prefix, layers = lists[0]
    outside = [(name, norm) for name, norm in norm_modules(m) if not inside(name, prefix)]
    outputs, order = {}, []

    def record(key):
        def hook(module, args, output):
            out = output[0] if isinstance(output, (tuple, list)) else output
            outputs[key] = out.detach()
            order.append(key)
        return hook
    handles = [layer.register_forward_hook(record("layer")) for layer in set(layers)]
    handles += [norm.register_forward_hook(record(name)) for name, norm in outside]
    passes = []  # what each call of the author's block left (one per sample for code without a batch axis)
    if isinstance(getattr(m, "inner", None), torch.nn.Module):
        handles.append(m.inner.register_forward_hook(lambda *_: passes.append(dict(outputs))))
    try:
        inputs = probe_inputs(case, component)
        out = call(m, inputs, component)
    finally:
        for h in handles:
            h.remove()
    if len(passes) == out.size(0) and all(seen.get("layer") is not None and seen["layer"].shape == out.shape[1:]
                                          for seen in passes):  # one pass per sample: their outputs as one batch
        outputs = {key: torch.stack([seen[key] for seen in passes]) for key in passes[-1]
                   if all(key in seen for seen in passes)}
    if "layer" not in outputs:
        raise Missing(f"{component}.norm_order.layers_not_called", "a stack of N layers (§3.1)",
                      "no layer of the stack was called as a module", repro)
    last = outputs["layer"]
    scale = out.norm()
    unused = [name for name, _ in outside if name not in outputs]
    applied = [key for key in order if key != "layer" and distance(out, outputs[key], scale) < 1e-7]
    if applied:
        final = f"the norm-like module {applied[-1]!r}"
    elif distance(out, last, scale) < 1e-6:
        final = None
    elif distance(out, F.layer_norm(last, (d,)), scale) < 1e-3:
        final = "a layer normalization (functional)"
    else:
        raise Missing(f"{component}.norm_order.final_operation_unknown", REQUIRED[contract],
                      "the stack's output is neither the last layer's output nor a normalization of it", repro)
    note = f" (a norm-like module {unused[0]!r} is registered after the layers but never called)" if unused else ""
    if contract == "paper":
        if final:
            raise final_norm_deviation(component, final, last, d, repro)
        return
    if final:
        return
    requirement = "contract 'practice': a final LayerNorm after the last (pre-norm) layer"
    if distance(last, F.layer_norm(last, (d,)), last.norm()) < 1e-3:
        raise Deviation(f"{component}.norm_order.post_norm_without_final_norm", requirement,
                        "no final LayerNorm; the last layer's output is already normalized (post-norm layers)"
                        + note, repro)
    raise Failure(f"{component}.norm_order.final_norm_missing", requirement,
                  "the last layer's unnormalized output is returned" + note, repro)


def final_norm_deviation(component, final, last, d, repro):
    """A final norm under the paper's contract: after layers whose output is not normalized (pre-norm layers) it is
    the final LayerNorm pre-norm needs, part of the pre-norm deviation; after post-norm layers, an extra one."""
    requirement = "§3.1: the stack's output is its last layer's output (post-norm needs no final norm)"
    if distance(last, F.layer_norm(last, (d,)), last.norm()) >= 1e-3:
        return Deviation(f"{component}.norm_order.pre_norm", requirement, f"{final} applied after the last layer, "
                         "whose output is not normalized: the final LayerNorm of a pre-norm stack, part of pre-norm "
                         "x + Sublayer(LayerNorm(x))", repro)
    return Deviation(f"{component}.norm_order.extra_final_norm", requirement,
                     f"{final} applied after the last layer", repro)


ENCLOSING_ROLES = ("feed_forward", "sublayer_connection", "encoder_layer", "decoder_layer", "encoder", "decoder",
                   "model")


@pytest.mark.parametrize("component", ENCLOSING_ROLES)
@given(drawn=strategies.settings())
def test_every_layer_norm_has_a_small_eps(impl, device, component, drawn):
    """§3.1 LayerNorm (Ba et al. 2016): eps only guards the division, so every LayerNorm a block builds, in every
    layer, adds a small eps to the variance (a LayerNorm built with eps = 1, or with d_model passed where eps goes,
    leaves small activations far from unit variance)."""
    case = Case(impl, device=device, **drawn)
    built = case.build(component)
    large = [(path, eps) for path, eps in norm_eps(getattr(built, "inner", built)) if eps > EPS_LIMIT]
    if large:
        path, eps = large[0]
        raise Failure(f"{component}.layer_norm_eps_wrong", f"every LayerNorm built with a small eps (at most "
                      f"{EPS_LIMIT:g}; §3.1, Ba et al. 2016)",
                      f"{len(large)} LayerNorm(s) with a large eps, the first {path!r} with eps = {eps:g}"
                      + (" = d_model: the d_model argument bound to eps" if math.isclose(eps, case.cfg.d_model)
                         else ""), case.reproduction(component))


def norm_inputs(case, block, component):
    """``{path: (module, input shape)}``: the norm-like modules inside the built ``block`` (and the instances of the
    layer_norm role's class) that its canonical call applies to activations of d_model features, with the shape of
    the first such input (seen before the norm runs, so a norm that then raises is seen too)."""
    inner = getattr(block, "inner", block)
    paths = {path for path, _ in norm_modules(inner) if path}
    paths |= {path for path, _, _ in role_instances(case, block, "layer_norm")}
    seen = {}

    def before(module, args, kwargs, path):
        x = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if x is not None and x.dim() >= 2 and x.size(-1) == case.cfg.d_model:
            seen.setdefault(path, (module, tuple(x.shape)))
    handles = [m.register_forward_pre_hook(lambda m, a, k, path=path: before(m, a, k, path), with_kwargs=True)
               for path, m in inner.named_modules() if path in paths]
    with hooked(handles):
        try:
            call(block, canonical_inputs(case, component), component)
        except Exception:  # (the block's crash is reported by every other check; the norms reached are seen)
            pass
    return seen


def mixed_axis(case, norm, shape):
    """The leading axis of ``shape`` across which ``norm`` (called on its own on inputs of that shape) mixes
    positions: changing the entries after the first along that axis changes its output at the first; None when it
    normalizes each position's features alone (or cannot be called so: the block's other checks say why)."""
    x = case.randn(*shape) * 3 + 1
    try:
        with torch.no_grad():
            y = norm(x)
            for axis in [a for a in range(len(shape) - 1) if shape[a] > 1]:
                changed = torch.cat([x.narrow(axis, 0, 1), case.randn(*x.narrow(axis, 1, shape[axis] - 1).shape)], axis)
                if difference(norm(changed).narrow(axis, 0, 1), y.narrow(axis, 0, 1), case) is not None:
                    return axis
    except Exception:
        return None
    return None


@pytest.mark.parametrize("component", ENCLOSING_ROLES)
@given(drawn=strategies.settings())
def test_every_layer_norm_normalizes_each_position(impl, device, component, drawn):
    """§3.1 LayerNorm (Ba et al. 2016) in every norm a block builds: each norm the block applies to activations of
    d_model features, called on its own on inputs of the shape the block gives it, normalizes the d_model features
    of each position alone: its output at one position does not change when the other positions change (a norm
    built over the sequence axis, or with the normalized shape (length, d_model), mixes them)."""
    case = Case(impl, device=device, **drawn)
    case = case.with_lengths_at_least(2).replace(batch=3)
    block = case.build(component)
    for path, (norm, shape) in norm_inputs(case, block, component).items():
        axis = mixed_axis(case, norm, shape)
        if axis is not None:
            raise Failure(f"{component}.layer_norm_axis_wrong", "every LayerNorm normalizing the d_model features "
                          "of each position on its own (Ba et al. 2016, §3.1)",
                          f"{path!r}, on inputs of shape {shape} (as the {component} gives it), changes its output "
                          f"at one position when only the other positions along axis {axis} change: it normalizes "
                          "across positions, not over the last d_model features", case.reproduction(component))
