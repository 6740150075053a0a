"""Checks in place (issue 23): the author's model runs its own forward pass, and its sub-blocks are verified against
the paper's math on what they were really given and returned, with their own weights.

A sub-block's own calling convention may stay unknown to the checker (an add-and-norm taking a function that returns
a pair, an attention taking the keys' lengths and a causal flag); the author's model calls it as its author meant.
So the model is built and called on its canonical call, every call of its modules is recorded
(``adapters.in_place``), and for each instance of a role's class inside it:

* a LayerNorm's output is a per-position normalization of its input, with its own gain and bias (§3.1, "LayerNorm(x +
  Sublayer(x))"); the gains and biases are moved off 1 and 0 first, so that applying them shows;
* a multi-head attention's scores are its own query and key projections' per-head products Q K^T times 1/sqrt(d_k),
  and its output, before the output projection, is softmax(Q K^T / sqrt(d_k)) V of its own projections (§3.2.1,
  §3.2.2); the mask the model applied is read from the weights it gave (a key with weight 0 is masked), so that a
  mask the checker does not know is never taken for a fault;
* an add-and-norm's output is LayerNorm(x + Sublayer(x)) of its own input and the output of the sub-layer it called
  (§3.1, §5.4; pre-norm is the practice contract's);
* changing the last target token leaves the outputs of every module of the model at the earlier target positions as
  they were (§3.2.3), and where they change first says where the future leaks in.

A sub-block whose recorded calls these readings do not fit (projections packed otherwise, no softmax seen) gets no
verdict: ``adapter.not_read_in_place``. Every fail here is evidence of kind "replayed on the author's call"
(``conformance.diagnosis.evidence``), and a failure a direct check finds on the checker's own call counts as replayed when the
check here finds it too (:func:`findings`).
"""
import contextlib
import functools
import inspect
import itertools
import math

import pytest
import torch
import torch.nn as nn
from hypothesis import given

from adapters.in_place import ROLES, record
from conformance.contract import harness, strategies
from conformance.contract.harness import (Case, at_real_positions, canonical_inputs, difference,
                                          padded_target_positions, role_instances, unfed_mask_parameters)
from conformance.contract.interface import Config, MissingRole
from conformance.contract.probes import SoftmaxWatch, constant_ratio, sdpa_scale
from conformance.checks.test_layer_norm import affine_parameters, factors, fits, wrong_axis
from conformance.checks.test_norm_order import layer_norms, nearest, require_placement
from conformance.checks.test_softmax import SCALE_MISTAKES
from conformance.contract.verdicts import Failure, Finding, Missing
from conformance.contract.weights import EPS_LIMIT, is_bias_name, is_norm_module

MASKED = -1e4
"""Scores at or below this are a mask's fill (-1e9, -inf), not Q K^T / sqrt(d_k) of the checker's inputs."""


# -- the author's model, run and recorded ----------------------------------------------------------------------------
def in_place_case(impl, device, drawn):
    """At least four source and target positions and a batch of three: heads, positions and samples all differ, and
    a target position is never read for a sample."""
    case = Case(impl, device=device, **drawn)
    return case.with_lengths_at_least(4).replace(batch=3)


class Run:
    """The model built on ``case`` and run once on its canonical call (``inputs``, else drawn; the target tokens
    changed from position ``changed_from`` on, if given): ``recording`` (``adapters.in_place.Recording``),
    ``attention`` (the softmaxes and fused attention calls seen, a ``SoftmaxWatch``, unless ``softmaxes`` is False),
    and :meth:`instances`."""

    def __init__(self, case, inputs=None, changed_from=None, softmaxes=True):
        if not case.impl.has("model"):
            raise MissingRole(f"{case.impl.spec} has no 'model': there is no forward pass of the author's to watch")
        if harness.WATCH is not None:
            harness.WATCH.replayed = True  # (what the check finds, it finds on the author's own call)
        self.case = case
        try:
            self.model = case.build("model")
        except Exception as exc:  # noqa: BLE001 (the model's own checks report why it does not build)
            raise Missing("adapter.not_read_in_place", "the author's model built, to run its own forward pass",
                          f"building it raised {type(exc).__name__}: {str(exc)[:200]}") from exc
        inner = getattr(self.model, "inner", self.model)
        moved = torch.Generator().manual_seed(case.seed)
        with torch.no_grad():
            for module in inner.modules():  # gains and biases off 1 and 0: applying them shows
                if is_norm_module(module):
                    for p in module.parameters(recurse=False):
                        p.add_((0.5 * torch.rand(p.shape, generator=moved, dtype=torch.float64) + 0.25).to(p))
        self.inputs = inputs if inputs is not None else canonical_inputs(case, "model")
        src, tgt, src_mask, tgt_mask = self.inputs
        if changed_from is not None:
            tgt = tgt.clone()
            tgt[:, changed_from:] = tgt[:, changed_from:] % (case.cfg.tgt_vocab - 1) + 1
        self.attention = SoftmaxWatch()
        try:
            with self.attention if softmaxes else contextlib.nullcontext(), torch.no_grad(), \
                    record(inner, self.marks) as self.recording:
                self.model(src, tgt, src_mask, tgt_mask)
        except Exception as exc:  # noqa: BLE001 (the model's own checks report its crash, not its sub-blocks')
            raise Missing("adapter.not_read_in_place", "the author's model running its own forward pass",
                          f"its canonical call raised {type(exc).__name__}: {str(exc)[:200]}") from exc

    def marks(self):
        return len(self.attention.softmaxes), len(self.attention.sdpa_calls)

    def instances(self, role):
        found = [m for _, m, _ in role_instances(self.case, self.model, role)]
        return self.recording.of(found)


def verify(case, role, contract="paper", run=None):
    """``[Finding]``: what the recorded calls of ``role``'s instances inside the author's model show (fails and
    deviations, at most one per cause); raises Missing when no call of it could be read."""
    if not case.impl.has(role):
        raise MissingRole(f"{case.impl.spec} has no {role!r}")
    run = run or Run(case, softmaxes=role == "multi_head_attention")
    calls = run.instances(role)
    if not calls:
        raise Missing("adapter.not_read_in_place", f"a {role} inside the author's model, recorded as it runs",
                      f"no call of the {role}'s class during the model's forward pass")
    verifier = VERIFIERS[role]
    found, unread = {}, []
    for call in calls:
        try:
            verifier(case, call, run, contract)
        except Missing as missing:
            unread.append(missing)
        except Finding as finding:
            found.setdefault(finding.cause, finding)
    if not found and len(unread) == len(calls):
        raise Missing("adapter.not_read_in_place", unread[0].requirement, f"{unread[0].observed} (each of the "
                      f"{len(calls)} calls of the {role}'s class recorded in the author's forward pass)")
    return list(found.values())


def at(call):
    """Where a recorded call was made, in words."""
    return f"the {type(call.module).__name__} at {call.path or 'the model itself'}, as the author's model calls it"


# -- LayerNorm (§3.1) ------------------------------------------------------------------------------------------------
LN_REQUIRED = ("y = gain * (x - mean) / sqrt(var + eps) + bias over the d_model features of each position, eps small "
               "(§3.1, LayerNorm(x + Sublayer(x)); Ba et al. 2016)")


def layer_norm_in_place(case, call, run, contract):
    x, y = (call.tensors or [None])[0], call.out
    if x is None or y is None or x.shape != y.shape or x.dim() < 2:
        raise Missing("adapter.not_read_in_place", LN_REQUIRED, f"{at(call)}: no input and output of one shape")
    d = x.shape[-1]
    x, y = x.double().cpu().reshape(-1, *x.shape[-2:]), y.double().cpu().reshape(-1, *x.shape[-2:])
    spread = (x - x.mean(-1, keepdim=True)).abs().amax(-1)
    informative = spread > 1e-9 * (1 + x.abs().amax(-1))  # (a row constant across its features, such as a padded
    if not informative.any():                            # position the model zeroed, says nothing: 0 / 0)
        raise Missing("adapter.not_read_in_place", LN_REQUIRED, f"{at(call)}: every position it was given is "
                      "constant across its features")
    if not informative.all():
        x, y = x[informative].unsqueeze(0), y[informative].unsqueeze(0)
    gain, bias, scalars = affine_parameters(call.module, d)  # (one scalar gain and bias: the direct checks' matter)
    gain = gain if gain is not None else next((p for n, p in scalars if not is_bias_name(n)), None)
    bias = bias if bias is not None else next((p for n, p in scalars if is_bias_name(n)), None)
    g = gain.detach().double().cpu() if gain is not None else torch.ones(d, dtype=torch.float64)
    b = bias.detach().double().cpu() if bias is not None else torch.zeros(d, dtype=torch.float64)
    normalized = (y - b) / g
    c = factors(x, normalized, case)
    if c is None:
        if factors(x, y, case) is not None:
            raise Failure("layer_norm.gain_and_bias_not_applied", LN_REQUIRED,
                          f"{at(call)}: its output is the plain normalization of its input, its gain and bias unused")
        axis = wrong_axis(x, normalized, case)
        if axis:
            raise Failure("layer_norm.normalizes_over_wrong_axis", LN_REQUIRED,
                          f"{at(call)}: its output is its input normalized over {axis}, not over the features of "
                          "each position")
        ratio = (normalized * x).sum(-1, keepdim=True) / (x * x).sum(-1, keepdim=True)
        if difference(normalized, ratio * x, case, atol=10 * case.atol, rtol=1e-4) is None:
            raise Failure("layer_norm.mean_not_subtracted", LN_REQUIRED, f"{at(call)}: its output, less its bias "
                          "and divided by its gain, is a per-position multiple of x: the mean is not subtracted")
        raise Failure("layer_norm.not_normalized", LN_REQUIRED, f"{at(call)}: its output, less its bias and divided "
                      "by its gain, is no per-position multiple of x - mean")
    found = [eps for form in ("inside", "outside") for unbiased in (False, True)
             if (eps := fits(c, x, form, unbiased)) is not None]
    if any(abs(eps) <= EPS_LIMIT + 1e-3 * x.var(-1).min().item() for eps in found):
        return
    if fits(c, x, "variance", False) is not None:
        raise Failure("layer_norm.divides_by_variance", LN_REQUIRED,
                      f"{at(call)}: x - mean divided by the variance, not its square root")
    if found and not eps_given_by_its_builder(call.module):
        raise Failure("layer_norm.eps_too_large", LN_REQUIRED, f"{at(call)}: eps = {min(found, key=abs):.6g}, from "
                      f"its outputs, where the paper's is a small stabilizer (at most {EPS_LIMIT:g})")
    if found:  # (an eps the block that builds the norm gave it: every_layer_norm_has_a_small_eps names that block)
        return
    raise Failure("layer_norm.not_normalized", LN_REQUIRED, f"{at(call)}: x - mean scaled by a factor no eps gives")


def eps_given_by_its_builder(norm):
    """Whether a norm's ``eps`` differs from its class's default: chosen by the block that built it, not the class."""
    try:
        default = inspect.signature(type(norm).__init__).parameters["eps"].default
    except (KeyError, TypeError, ValueError):
        return False
    return isinstance(getattr(norm, "eps", None), (int, float)) and default is not inspect.Parameter.empty \
        and norm.eps != default


# -- multi-head attention (§3.2) -------------------------------------------------------------------------------------
MHA_REQUIRED = ("scores Q K^T / sqrt(d_k) of the block's own query and key projections, and softmax(Q K^T / sqrt(d_k))"
                " V of its value projection before the output projection (§3.2.1, §3.2.2)")


def heads(x, h, batch):
    """``(batch, length, d_model)`` (or sequence first) -> ``(batch, h, length, d_k)``."""
    if x.shape[0] != batch:
        x = x.transpose(0, 1)
    return x.reshape(x.shape[0], x.shape[1], h, -1).transpose(1, 2).double()


def projections(call):
    """The calls of square ``nn.Linear`` maps made inside an attention's call, in order: the query, key and value
    projections, then the output projection (last)."""
    width = call.out.shape[-1] if call.out is not None else None
    return [c for c in call.walk() if c is not call and isinstance(c.module, nn.Linear) and c.returned
            and c.module.in_features == c.module.out_features == width]


def attention_in_place(case, call, run, contract):
    linear = projections(call)
    start, end = call.marks[0], call.marks[1]
    softmaxes = run.attention.softmaxes[start[0]:end[0]]
    fused = run.attention.sdpa_calls[start[1]:end[1]]
    if len(linear) != 4 or len(softmaxes) + len(fused) != 1:
        raise Missing("adapter.not_read_in_place", MHA_REQUIRED, f"{at(call)}: {len(linear)} square projections and "
                      f"{len(softmaxes) + len(fused)} softmaxes recorded, where three projections, one softmax over "
                      "the scores and an output projection are read")
    if fused:
        d_k = fused[0].query.size(-1)
        return require_scale(sdpa_scale(fused[0]), d_k, case, call)
    scores, weights = softmaxes[0].scores.double(), softmaxes[0].weights.double()
    batch = case.batch
    h = scores.shape[-3] if scores.dim() == 4 else scores.shape[0] // batch if scores.dim() == 3 else 0
    if not h or softmaxes[0].dim != scores.dim() - 1:
        raise Missing("adapter.not_read_in_place", MHA_REQUIRED, f"{at(call)}: scores of shape "
                      f"{tuple(scores.shape)} over axis {softmaxes[0].dim}, not read as (batch, heads, Lq, Lk)")
    allowed = (weights > 0) & (scores > MASKED)
    for q, k in itertools.permutations(linear[:-1], 2):
        Q, K = heads(q.out, h, batch), heads(k.out, h, batch)
        if Q.shape[:2] + K.shape[2:3] != (batch, h, scores.shape[-1]) or Q.shape[2] != scores.shape[-2]:
            continue
        raw = (Q @ K.transpose(-2, -1)).reshape(scores.shape)
        scale = constant_ratio(scores, raw, allowed)
        if scale is None:
            continue
        d_k = Q.shape[-1]
        require_scale(scale, d_k, case, call)
        values = [v for v in linear[:-1] if v is not q and v is not k] or [k]
        return require_output(call, linear[-1], raw.reshape(Q.shape[:3] + K.shape[2:3]) / math.sqrt(d_k),
                              allowed.reshape(Q.shape[:3] + K.shape[2:3]), heads(values[0].out, h, batch), case)
    raise Missing("adapter.not_read_in_place", MHA_REQUIRED, f"{at(call)}: its scores are no constant multiple of "
                  "Q K^T for any two of its projections")


def require_scale(scale, d_k, case, call):
    expected = 1 / math.sqrt(d_k)
    if math.isclose(scale, expected, rel_tol=1e-3):
        return
    cfg = Config(d_model=d_k * case.cfg.h, h=case.cfg.h)
    named = [name for name, value in SCALE_MISTAKES.items() if math.isclose(scale, value(cfg), rel_tol=1e-3)]
    mistake = named[0] if named else "wrong"
    raise Failure(f"multi_head_attention.scale.{mistake}", f"scores multiplied by 1/sqrt(d_k) = {expected:.6g} "
                  f"(§3.2.1; d_k={d_k})", f"{at(call)}: scores multiplied by {scale:.6g}"
                  + (f" ({mistake.replace('_', ' ')})" if mistake != "wrong" else ""))


def require_output(call, output_projection, scores, allowed, values, case):
    """The heads' outputs, concatenated, as the output projection received them, at the positions where the mask is
    known: a query whose every key the model masked (a padded query's row filled whole) has weights no mask says."""
    known = allowed.any(-1).all(1)  # (batch, Lq)
    allowed = allowed | ~known[:, None, :, None]
    weighted = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ values  # (batch, h, Lq, d_k)
    expected = weighted.transpose(1, 2).reshape(weighted.shape[0], weighted.shape[2], -1)
    given_ = output_projection.tensors[0].double()
    if given_.shape != expected.shape and given_.transpose(0, 1).shape == expected.shape:
        given_ = given_.transpose(0, 1)
    if given_.shape != expected.shape:
        raise Missing("adapter.not_read_in_place", MHA_REQUIRED, f"{at(call)}: its output projection is given a "
                      f"tensor of shape {tuple(given_.shape)}, where the heads' outputs are {tuple(expected.shape)}")
    wrong = difference(given_[known], expected[known], case, atol=10 * case.atol, rtol=1e-3)
    if wrong is None:
        return
    unmoved = weighted.reshape(expected.shape)
    if difference(given_[known], unmoved[known], case, atol=10 * case.atol, rtol=1e-3) is None:
        raise Failure("multi_head_attention.heads_merged_without_transpose", MHA_REQUIRED,
                      f"{at(call)}: the heads' outputs concatenated by a reshape that does not move the head axis "
                      "back first")
    raise Failure("multi_head_attention.in_place_disagrees", MHA_REQUIRED,
                  f"{at(call)}: the output projection's input differs from softmax(Q K^T / sqrt(d_k)) V of the "
                  f"block's own projections, under the mask its weights show: {wrong}")


FUTURE_REQUIRED = ("outputs at target positions < t independent of the target tokens at positions >= t (§3.2.3: "
                   "position i attends to positions j <= i)")


def future_in_place(case, run):
    """§3.2.3: changing the target tokens from the last position on leaves the outputs of every block of the
    author's model at the earlier target positions as they were; a failure names the first of the author's blocks (in
    the order the calls returned; torch's own layers inside them are not named) where they changed."""
    t = case.tgt_len - 1
    changed = Run(case, run.inputs, changed_from=t, softmaxes=False)
    padded = padded_target_positions(run.model, run.inputs[3])  # (rows no loss reads, where the tokens say padding)
    before, after = run.recording.in_return_order(), changed.recording.in_return_order()
    if [c.path for c in before] != [c.path for c in after]:
        return
    for first, second in zip(before, after):
        a, b = first.out, second.out
        if a is None or b is None or a.shape != b.shape or a.dim() != 3 or type(first.module).__module__.startswith(
                "torch."):  # (positions and features, not heads; the author's blocks)
            continue
        axis = 1 if a.shape[:2] == (case.batch, case.tgt_len) else 0 if a.shape[:2] == (case.tgt_len, case.batch) \
            else None
        a, b = (at_real_positions(z, padded, axis) for z in (a, b)) if axis is not None else (a, b)
        wrong = difference(a.narrow(axis, 0, t), b.narrow(axis, 0, t), case) if axis is not None else None
        if wrong is not None:
            observed = (f"after changing the target tokens at positions >= {t}, the outputs at positions < {t} "
                        f"change, first in the output of {at(first)}: {wrong}")
            unfed = unfed_mask_parameters(run.model)
            if unfed:  # (the mask its author passes there, which the checker could not tell, may hide them)
                raise Missing("adapter.mask_parameter_not_fed", FUTURE_REQUIRED, f"{observed}; its forward has the "
                              f"mask parameters {', '.join(unfed)}, which the checker's call leaves at their "
                              "defaults")
            raise Failure("model.future_visible", FUTURE_REQUIRED, observed)


# -- the add-and-norm around a sub-layer (§3.1, §5.4) ----------------------------------------------------------------
def residual_in_place(case, call, run, contract):
    x, out = (call.tensors or [None])[0], call.out
    inner = [c for c in call.calls if c.returned and c.out is not None]
    sublayers = [c for c in inner if not is_norm_module(c.module) and not isinstance(c.module, nn.Dropout)
                 and c.out.shape == getattr(x, "shape", None)]
    if x is None or out is None or out.shape != x.shape or len(sublayers) != 1:
        raise Missing("adapter.not_read_in_place", "LayerNorm(x + Sublayer(x)) (§3.1)", f"{at(call)}: "
                      f"{len(sublayers)} sub-layer calls of its input's shape inside it, where one is read")
    sublayer = sublayers[0]
    seen = (sublayer.tensors or [None])[0]

    def recorded(z):  # the sub-layer, known only at the input it was given
        if seen is None or z.shape != seen.shape or difference(z, seen, case, atol=10 * case.atol) is not None:
            return torch.full_like(z, float("nan"))
        return sublayer.out

    ranked = nearest([(out, x, [[recorded]])], x.norm(), layer_norms(call.module, x.shape[-1]), contract=contract)
    try:
        require_placement("sublayer_connection", contract, ranked, None)
    except Finding as finding:
        finding.observed = f"{at(call)}: {finding.observed}"
        raise


VERIFIERS = {"layer_norm": layer_norm_in_place, "multi_head_attention": attention_in_place,
             "sublayer_connection": residual_in_place}


def raise_first(case, role, found):
    """Raise the first of the findings ``found`` (a fail before a deviation), with a reproduction that runs the
    author's model and reads ``role`` in place."""
    for finding in sorted(found, key=lambda f: isinstance(f, Failure), reverse=True)[:1]:
        finding.reproduction = case.reproduction("model", "from conformance.checks.test_in_place import Run, future_in_place, "
                                                 "verify\n" + ("future_in_place(case, Run(case))" if role == "model"
                                                                else f"print([f.message for f in verify(case, {role!r})])"))
        raise finding


# -- the checks ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("component", ["layer_norm"])
@given(drawn=strategies.settings())
def test_layer_norms_normalize_in_place(impl, device, component, drawn):
    """§3.1: every LayerNorm the author's model runs normalizes the features of each position it is given, with its
    own gain and bias."""
    case = in_place_case(impl, device, drawn)
    raise_first(case, component, verify(case, component))


@pytest.mark.parametrize("component", ["multi_head_attention"])
@given(drawn=strategies.settings())
def test_attentions_attend_in_place(impl, device, component, drawn):
    """§3.2.1, §3.2.2: every multi-head attention the author's model runs computes softmax(Q K^T / sqrt(d_k)) V of its
    own projections, under the mask the model gives it."""
    case = in_place_case(impl, device, drawn)
    raise_first(case, component, verify(case, component))


@pytest.mark.parametrize("component", ["model"])
@given(drawn=strategies.settings())
def test_later_target_tokens_leave_earlier_positions_in_place(impl, device, component, drawn):
    """§3.2.3: no module of the author's model, run on its own forward pass, changes its outputs at a target position
    when a later target token changes."""
    case = in_place_case(impl, device, drawn)
    try:
        future_in_place(case, Run(case, softmaxes=False))
    except Failure as failure:
        raise_first(case, component, [failure])


@pytest.mark.parametrize("component", ["sublayer_connection"])
@given(drawn=strategies.settings())
def test_residuals_add_in_place(impl, device, contract, component, drawn):
    """§3.1, §5.4: every add-and-norm block the author's model runs returns LayerNorm(x + Sublayer(x)) of its input
    and of the sub-layer it called."""
    case = in_place_case(impl, device, drawn)
    raise_first(case, component, verify(case, component, contract))


# -- replaying a direct check's finding ------------------------------------------------------------------------------
REPLAY = dict(cfg=Config(d_model=12, h=3, d_ff=24, dropout=0.0, N=2, vocab_size=13, src_vocab=13, tgt_vocab=11,
                         max_len=12), batch=3, src_len=5, tgt_len=4, dtype=torch.float64, seed=0)


@functools.lru_cache(maxsize=64)
def findings(impl, role, contract="paper"):
    """The causes the checks in place find for ``role`` on the author's own forward pass (one drawn setting), as a
    frozenset; empty when the role is not checked in place or nothing can be read."""
    if role not in ROLES or not impl.has(role) or not impl.has("model"):
        return frozenset()
    saved, case = harness.LATEST_CASE, Case(impl, **REPLAY)
    try:
        run = Run(case)
        found = {f.cause for f in verify(case, role, contract, run)}
    except Exception:  # noqa: BLE001 (the author's model does not run here: nothing is replayed)
        return frozenset()
    finally:
        harness.LATEST_CASE = saved  # (the record being reported keeps its own reproduction)
    return frozenset(found)
