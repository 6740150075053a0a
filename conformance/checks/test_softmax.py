"""Softmax normalization and scaling (3.2.1, eq. 1): softmax(Q K^T / sqrt(d_k)) over the keys.

The weights are observed inside the implementation's forward (``probes.AttentionRecorder``), so the checks
need no cooperation: the attention function may return its weights or not, and multi-head attention never does.
Every multi-head attention a block builds (each layer's self- and encoder-decoder attention) is measured on its own.
"""
import math

import pytest
import torch
from hypothesis import given

from conformance.contract import strategies
from conformance.contract.harness import Case, canonical_inputs, inputs_not_accepted, output_tensor, role_instances
from conformance.contract.probes import (AttentionRecorder, SoftmaxCall, constant_ratio, gathered, sdpa_scale,
                                set_identity_projections, split_heads)
from conformance.contract.verdicts import Failure, Missing

ATTENTION_ROLES = ("attention", "multi_head_attention")
ENCLOSING_ROLES = ("encoder_layer", "decoder_layer", "encoder", "decoder", "model")
DECODING_ROLES = ("decoder_layer", "decoder", "model")


def observe_attention(case, component, module=None, head_major=False):
    """Run ``component`` (built, unless ``module`` is given) under an AttentionRecorder with known per-head queries
    and keys.

    Returns the recorder, the raw per-head scores Q K^T (batch, h, Lq, Lk), the allowed positions, the per-head
    inputs (for diagnosing a wrong head split) and the case they were drawn for. ``head_major``: packed projections
    laid out head by head (``probes.identity_weight``). A block that takes no key input
    (``forward(x)``: self-attention, its encoder-decoder attention another class) is measured as self-attention,
    keys and values the queries' own sequence (§3.2.3), when the submission has a decoder to attend to the encoder's
    output another way (its own checks say whether it does; a decoder class the checker could not build still
    shows the author's encoder-decoder attention is elsewhere).
    """
    module = module if module is not None else case.build(component)
    missing, signature = inputs_not_accepted(module)
    if "key" in missing:
        if not any(case.impl.supports(role).written for role in DECODING_ROLES):
            raise Failure(f"{component}.self_attention_only", "queries attending over separate keys and values "
                          "(§3.2.2; the encoder-decoder attention of §3.2.3 takes them from the encoder output)",
                          f"{signature} takes no key input, and no decoder does the encoder-decoder attention: "
                          "its queries can attend only to themselves")
        case = case.replace(src_len=case.tgt_len)
    inputs = canonical_inputs(case, component)
    if component == "attention":
        q, k, _, mask = inputs
    else:
        if not set_identity_projections(module, case.cfg.d_model, case.cfg.d_k, head_major):
            raise Missing(f"{component}.projections_unrecognised", "per-head projections of d_model x d_k (§3.2.2)",
                          "parameters whose layout the probe does not recognise")
        if "key" in missing:
            inputs = (inputs[0], inputs[0], inputs[0], inputs[3])
        x, memory, _, mask = inputs
        q, k, mask = split_heads(x, case.cfg.h), split_heads(memory, case.cfg.h), mask.unsqueeze(1)
    with AttentionRecorder() as recorder, torch.no_grad():
        try:
            output_tensor(module(*inputs), component)
        except Exception:
            require_query_key_order_unmasked(case, component, module, inputs)
            raise
    if not recorder.sdpa_calls and not recorder.attention_softmaxes(case.tgt_len, case.src_len):
        require_query_key_order_unmasked(case, component, module, inputs)
    raw = q @ k.transpose(-2, -1)
    return recorder, raw, mask.expand_as(raw), inputs, case


def require_query_key_order_unmasked(case, component, module, inputs):
    """Scores K Q^T, shaped (..., Lk, Lq), that the mask (..., 1, Lk) broadcasts to another shape or cannot be
    broadcast to (a crash when Lq != Lk): called again without a mask, the softmax shows them (before the product
    with the values fails)."""
    with AttentionRecorder() as recorder, torch.no_grad():
        try:
            module(*inputs[:3], None)
        except Exception:
            pass  # (with the query and the key swapped, the product with the values fails when Lq != Lk)
    swapped = [c for c in recorder.softmaxes if c.scores.dim() >= 2
               and tuple(c.scores.shape[-2:]) == (case.src_len, case.tgt_len)]
    if swapped:
        require_query_key_order(swapped[-1], case, component)


def attention_softmax(recorder, case, component):
    """The last softmax over attention scores; None when the implementation calls scaled_dot_product_attention."""
    calls = recorder.attention_softmaxes(case.tgt_len, case.src_len)
    if calls:
        return one_head_at_a_time(calls, case) or gathered(calls, case.batch, case.cfg.h)
    if recorder.sdpa_calls:
        return None
    swapped = recorder.attention_softmaxes(case.src_len, case.tgt_len)
    if swapped:
        require_query_key_order(swapped[-1], case, component)
    if recorder.softmaxes:
        shapes = sorted({tuple(c.scores.shape) for c in recorder.softmaxes})
        raise Failure(f"{component}.scores_wrong_shape", f"a softmax over scores Q K^T of shape (..., Lq={case.tgt_len}"
                      f", Lk={case.src_len}) (§3.2.1)", f"softmax only over tensors of shape {shapes}")
    raise Missing(f"{component}.softmax_not_observed", "a softmax over the attention scores (§3.2.1)",
                  "no call to torch.softmax / F.softmax / Tensor.softmax with scores of shape (..., Lq, Lk)")


def one_head_at_a_time(calls, case):
    """The last h softmax calls joined on a head axis, (batch, h, Lq, Lk), when each scored one head alone,
    (batch, Lq, Lk): code that computes the heads one at a time, on slices of the projections (§3.2.2's head_i);
    else None."""
    heads = calls[-case.cfg.h:]
    one = (case.batch, case.tgt_len, case.src_len)
    if len(heads) < case.cfg.h or any(tuple(c.scores.shape) != one for c in heads):
        return None
    return SoftmaxCall(torch.stack([c.scores for c in heads], 1), heads[-1].dim + (heads[-1].dim > 0),
                       torch.stack([c.weights for c in heads], 1))


def require_query_key_order(call, case, component):
    if tuple(call.scores.shape[-2:]) != (case.tgt_len, case.src_len):
        raise Failure(f"{component}.query_key_swapped", f"scores Q K^T of shape (..., Lq={case.tgt_len}, "
                      f"Lk={case.src_len}) (§3.2.1)", f"scores of shape {tuple(call.scores.shape)}: K Q^T")


@pytest.mark.parametrize("component", ATTENTION_ROLES)
@given(drawn=strategies.settings())
def test_attention_weights_are_distributions_over_keys(impl, device, component, drawn):
    """3.2.1: the weights on the values are a softmax over the keys: non-negative, summing to 1 per query."""
    recorder, _, allowed, _, case = observe_attention(Case(impl, device=device, **drawn), component)
    call = attention_softmax(recorder, case, component)
    if call is None:
        return  # torch's fused attention normalizes by construction; its scale is checked below
    require_query_key_order(call, case, component)
    if call.dim != call.weights.dim() - 1:
        raise Failure(f"{component}.softmax_wrong_axis", "softmax over the keys, the last axis (§3.2.1, eq. 1)",
                      f"softmax over axis {call.dim} of scores shaped {tuple(call.weights.shape)} "
                      f"(Lq={case.tgt_len}, Lk={case.src_len})")
    sums = call.weights.sum(-1).to(torch.float64)
    if call.weights.min() < 0 or not torch.allclose(sums, torch.ones_like(sums), atol=case.atol):
        raise Failure(f"{component}.weights_not_normalized", "weights >= 0 summing to 1 over the keys (§3.2.1)",
                      f"row sums between {sums.min().item():.6g} and {sums.max().item():.6g}, "
                      f"minimum weight {call.weights.min().item():.3g}")


SCALE_MISTAKES = {
    "sqrt_d_model": lambda cfg: 1 / math.sqrt(cfg.d_model),
    "d_k": lambda cfg: 1 / cfg.d_k,
    "d_model": lambda cfg: 1 / cfg.d_model,
    "unscaled": lambda cfg: 1.0,
    "multiplied_by_sqrt_d_k": lambda cfg: math.sqrt(cfg.d_k),
    "scaled_twice": lambda cfg: 1 / math.sqrt(cfg.d_k * cfg.d_model),  # queries pre-scaled by 1/sqrt(d_model) too
}


def name_scale(scale, case, component, module=None):
    """The known mistake a measured score scale matches, or None. A scale of 1 / sqrt(number of keys)
    (``sqrt(K.shape[-1])`` read after K was transposed) is told from a mistake of the same value by measuring again
    with another number of keys."""
    named = [name for name, value in SCALE_MISTAKES.items() if math.isclose(scale, value(case.cfg), rel_tol=1e-3)]
    if math.isclose(scale, 1 / math.sqrt(case.src_len), rel_tol=1e-3):
        longer = max(case.src_len, case.cfg.d_k, case.tgt_len) + 2  # (self-attention: the queries' length too)
        other = case.replace(src_len=longer, tgt_len=longer if case.tgt_len == case.src_len else case.tgt_len)
        if math.isclose(measured_scale(other, component, module) or 0, 1 / math.sqrt(other.src_len), rel_tol=1e-3):
            return "sqrt_key_length"
    return named[0] if named else None


def measured_scale(case, component, module=None):
    """The factor between the scores ``component`` (built, unless ``module`` is given) computes and Q K^T (None when
    they are not proportional)."""
    recorder, raw, allowed, _, case = observe_attention(case, component, module)
    call = attention_softmax(recorder, case, component)
    if call is None:
        return sdpa_scale(recorder.sdpa_calls[-1])
    return constant_ratio(call.scores.to(raw.dtype), raw, allowed)


def diagnose_unproportional_scores(call, inputs, allowed, case, component):
    """Scores that are no multiple of the per-head Q K^T: recognise heads split by ``view`` without transpose."""
    if component == "multi_head_attention":
        x, memory = inputs[0], inputs[1]
        b, h, d_k = x.size(0), case.cfg.h, case.cfg.d_k
        q, k = x.reshape(b, h, -1, d_k), memory.reshape(b, h, -1, d_k)
        if tuple(call.scores.shape[-2:]) == (q.size(2), k.size(2)):
            raw = q @ k.transpose(-2, -1)
            if constant_ratio(call.scores.to(raw.dtype), raw, allowed):
                raise Failure(f"{component}.heads_split_without_transpose",
                              "heads split as (batch, h, length, d_k) by view(batch, length, h, d_k).transpose(1, 2)"
                              " (§3.2.2)", "scores computed from x.view(batch, h, length, d_k): positions and "
                              "features of different heads mixed")
    raise Failure(f"{component}.scores_not_proportional_to_qk",
                  "scores proportional to Q K^T for each head (§3.2.1, eq. 1)",
                  "scores that are not a constant multiple of the per-head Q K^T")


@pytest.mark.parametrize("component", ATTENTION_ROLES)
@given(drawn=strategies.settings())
def test_scores_scaled_by_inverse_sqrt_d_k(impl, device, component, drawn):
    """3.2.1: "We compute the dot products of the query with all keys, divide each by sqrt(d_k)"."""
    recorder, raw, allowed, inputs, case = observe_attention(Case(impl, device=device, **drawn), component)
    call = attention_softmax(recorder, case, component)
    if call is None:
        sdpa = recorder.sdpa_calls[-1]
        scale = sdpa_scale(sdpa)
    else:
        require_query_key_order(call, case, component)
        scale = constant_ratio(call.scores.to(raw.dtype), raw, allowed)
        if scale is None and component == "multi_head_attention":  # (packed projections laid out head by head?)
            again, raw_again, allowed_again, _, _ = observe_attention(case, component, head_major=True)
            packed = attention_softmax(again, case, component)
            scale = None if packed is None else constant_ratio(packed.scores.to(raw.dtype), raw_again, allowed_again)
        if scale is None:
            diagnose_unproportional_scores(call, inputs, allowed, case, component)
    expected = 1 / math.sqrt(case.cfg.d_k)
    if not math.isclose(scale, expected, rel_tol=1e-3):
        mistake = name_scale(scale, case, component) or "wrong"
        raise Failure(f"{component}.scale.{mistake}",
                      f"scores multiplied by 1/sqrt(d_k) = {expected:.6g} (§3.2.1; d_k={case.cfg.d_k}, "
                      f"d_model={case.cfg.d_model}, h={case.cfg.h})",
                      f"scores multiplied by {scale:.6g}" + (f" ({mistake.replace('_', ' ')})" if mistake != "wrong"
                                                            else ""))


def instance_scale(case, attention):
    """The scale an attention built inside a block applies (called on its own as the role is), or None when it is
    not measured (scores not proportional to Q K^T, projections or softmax not recognised: the role's own checks
    say why)."""
    try:
        return measured_scale(case, "multi_head_attention", attention)
    except Exception:  # a finding or a crash of the instance alone: the role's own checks report it
        return None


@pytest.mark.parametrize("component", ENCLOSING_ROLES)
@given(drawn=strategies.settings())
def test_every_attention_is_scaled_by_inverse_sqrt_d_k(impl, device, component, drawn):
    """§3.2.1 in every attention a block builds: each instance of the multi-head attention's class inside it (every
    layer's self-attention and encoder-decoder attention), called on its own as the role is, multiplies its scores by
    1/sqrt(d_k); a slip in how one of them is built shows although the role built alone is right."""
    case = Case(impl, device=device, **drawn)
    block = case.build(component)
    expected = 1 / math.sqrt(case.cfg.d_k)
    scales = [(path, attention, instance_scale(case, attention))
              for path, _, attention in role_instances(case, block, "multi_head_attention")]
    wrong = [found for found in scales if found[2] is not None and not math.isclose(found[2], expected, rel_tol=1e-3)]
    if wrong:
        path, attention, scale = wrong[0]
        mistake = name_scale(scale, case, "multi_head_attention", attention)
        raise Failure(f"{component}.attention_scale_wrong",
                      f"every attention of the {component} scaling its scores by 1/sqrt(d_k) = {expected:.6g} "
                      f"(§3.2.1; d_k={case.cfg.d_k}, d_model={case.cfg.d_model}, h={case.cfg.h})",
                      f"{len(wrong)} of its {len(scales)} attentions with another scale, the first {path!r} "
                      f"multiplying its scores by {scale:.6g}" + (f" ({mistake.replace('_', ' ')})" if mistake else ""),
                      case.reproduction(component))
