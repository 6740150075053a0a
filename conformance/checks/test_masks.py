"""Masks (§3.1, §3.2.3): padding keys and future positions take no part in the outputs.

Convention (``conformance.contract.interface``): a mask is boolean, ``True`` = may attend. The checks change the inputs
at the positions a mask hides and require the outputs that may not see them to stay the same; when they change,
the known mistakes are told apart: a mask that is ignored, inverted, applied after the softmax, filled with 0.
"""
import pytest
import torch
from hypothesis import given

from adapters.building import is_graft
from conformance.contract import strategies
from conformance.contract.harness import (PAD, Case, at_real_positions, canonical_inputs, difference,
                                          if_the_checker_sets, inputs_not_accepted, output_tensor,
                                          padded_target_positions, unfed_mask_parameters)
from conformance.contract.probes import AttentionRecorder, gathered
from conformance.contract.verdicts import Deviation, Failure, Missing

PADDED_ROLES = ("attention", "multi_head_attention", "encoder_layer", "encoder", "decoder_layer", "decoder", "model")
CAUSAL_ROLES = ("attention", "multi_head_attention", "decoder_layer", "decoder", "model")
MASKED_WEIGHT = 1e-6

# where each role's padding mask is, which inputs hold the padded positions (index, position axis), whether the
# compared outputs are the rows of the unpadded positions (self-attention over the padded input)
PADDING = {
    "attention": dict(mask=3, altered=((1, 2), (2, 2)), own_rows=False),
    "multi_head_attention": dict(mask=3, altered=((1, 1), (2, 1)), own_rows=False),
    "encoder_layer": dict(mask=1, altered=((0, 1),), own_rows=True),
    "encoder": dict(mask=1, altered=((0, 1),), own_rows=True),
    "decoder_layer": dict(mask=2, altered=((1, 1),), own_rows=False),
    "decoder": dict(mask=2, altered=((1, 1),), own_rows=False),
    "model": dict(mask=2, altered=((0, 1),), own_rows=False),
}
WHAT_CHANGES = {"attention": "keys and values", "multi_head_attention": "keys and values",
                "encoder_layer": "input positions", "encoder": "input positions",
                "decoder_layer": "memory positions", "decoder": "memory positions", "model": "source tokens"}


def call(module, inputs, component):
    """The output of ``module`` on ``inputs``; a model's at its real target positions only, where its padding is read
    from the tokens (:func:`conformance.contract.harness.padded_target_positions`)."""
    with torch.no_grad():
        out = output_tensor(module(*inputs), component)
    return at_real_positions(out, padded_target_positions(module, inputs[3])) if component == "model" else out


def with_padding(case):
    """At least two source positions (so one can be padded), the source and target lengths still different."""
    if case.src_len >= 2:
        return case
    return case.replace(src_len=2 if case.tgt_len != 2 else 3)


def changed(case, x, where, axis, vocab=None):
    """``x`` with new values at the positions ``where`` (batch, length) along ``axis``; other entries kept."""
    shape = [1] * x.dim()
    shape[0], shape[axis] = where.size(0), where.size(1)
    select = where.reshape(shape).expand_as(x)
    new = case.other_tokens(x, vocab) if vocab is not None else case.randn(*x.shape) * 3
    return torch.where(select, new, x)


def key_mask(component, inputs):
    """(batch, Ls) bool: True where the padding mask lets the queries attend."""
    mask = inputs[PADDING[component]["mask"]]
    return mask.reshape(mask.size(0), mask.size(-1))


def change_positions(case, component, inputs, where):
    """The inputs with the padded-position tensors changed at ``where`` (the same new tensor for key and value
    when they are one tensor)."""
    inputs, done = list(inputs), {}
    vocab = case.cfg.src_vocab if component == "model" else None
    for index, axis in PADDING[component]["altered"]:
        original = inputs[index]
        if id(original) not in done:
            done[id(original)] = changed(case, original, where, axis, vocab)
        inputs[index] = done[id(original)]
    return tuple(inputs)


def change_values(case, component, inputs, where):
    """Attention and multi-head attention: the inputs with only the values (not the keys) changed at ``where``."""
    index, axis = PADDING[component]["altered"][-1]
    inputs = list(inputs)
    inputs[index] = changed(case, inputs[index], where, axis)
    return tuple(inputs)


def masked_after_softmax(case, component, module, inputs, out):
    """True when the outputs ignore the values at the masked keys (the weights there are 0 in the end) although
    they depend on the masked keys: the mask zeroes the weights after a softmax taken over all keys. Only of a
    block that takes a mask and values of their own, and whose outputs do change with the values at the real keys
    (else values it ignores everywhere, or never receives, would say nothing of where a mask was applied)."""
    if component not in ("attention", "multi_head_attention"):
        return False
    if {"value", "src_mask"} & set(inputs_not_accepted(module)[0]):
        return False
    keep = key_mask(component, inputs)
    if difference(call(module, change_values(case, component, inputs, keep), component), out, case) is None:
        return False
    return difference(call(module, change_values(case, component, inputs, ~keep), component), out, case) is None


def all_true(inputs, index):
    inputs = list(inputs)
    inputs[index] = torch.ones_like(inputs[index])
    return tuple(inputs)


def zero_padding_hidden(case, component, module, inputs, out):
    """Whether a block that takes no mask hides padding given in-band, as zero vectors at the padded positions (its
    stack zeroing them, its attention leaving out the keys that are zero): appending two zero vectors to its
    (key) input leaves the outputs at the real positions as they were. A block that does not hide them gives the
    zero keys a weight, and its outputs change."""
    if component not in ("multi_head_attention", "encoder_layer", "encoder", "decoder_layer", "decoder"):
        return False
    longer, done = list(inputs), {}
    for index, axis in PADDING[component]["altered"]:
        x = inputs[index]
        if id(x) not in done:
            done[id(x)] = torch.cat([x, torch.zeros_like(x.narrow(axis, 0, 2))], axis)
        longer[index] = done[id(x)]
    mask = PADDING[component]["mask"]
    longer[mask] = torch.cat([inputs[mask], torch.zeros_like(inputs[mask][..., :2])], -1)
    result = call(module, tuple(longer), component)
    if PADDING[component]["own_rows"]:
        result = result[:, :out.size(1)]
    return result.shape == out.shape and difference(result, out, case) is None


def lengths_it_runs_at(case, component, module):
    """``case``, or for a decoder that crashes when the source and target lengths differ (as when its
    encoder-decoder attention is given the target's mask, §3.2.3), the case at equal lengths where it runs: there
    the check can still say which mask reaches which attention. The crash itself is what the other checks report."""
    if component not in ("decoder_layer", "decoder") or case.src_len == case.tgt_len or case.tgt_len < 2:
        return case
    try:
        call(module, canonical_inputs(case, component), component)
        return case
    except RuntimeError:
        equal = case.replace(src_len=case.tgt_len)
        try:
            call(module, canonical_inputs(equal, component), component)
        except RuntimeError:
            return case
        return equal


@pytest.mark.parametrize("component", PADDED_ROLES)
@given(drawn=strategies.settings())
def test_masked_keys_do_not_change_outputs(impl, device, component, drawn):
    """§3.2.3 (and the padding of batched sequences): a key the padding mask hides gets no weight, so changing it
    (for the encoders the padded input positions, for the decoders the padded memory positions, for the model the
    padded source tokens) leaves every output that attends to it unchanged."""
    case = with_padding(Case(impl, device=device, **drawn))
    module = case.build(component)
    case = lengths_it_runs_at(case, component, module)
    inputs = canonical_inputs(case, component)
    keep = key_mask(component, inputs)
    padded = ~keep
    own_rows = PADDING[component]["own_rows"]
    out = call(module, inputs, component)
    hidden_changed = call(module, change_positions(case, component, inputs, padded), component)
    rows = (lambda y: y[keep]) if own_rows else (lambda y: y)
    leak = difference(rows(hidden_changed), rows(out), case)
    if leak is None:
        return
    what = WHAT_CHANGES[component]
    requirement = (f"outputs{' at the unpadded positions' if own_rows else ''} unchanged when the padded {what} "
                   f"change (§3.2.3: masked keys get weight 0; mask True = may attend)")
    observed = f"after changing the {int(padded.sum())} padded {what}, {leak}"
    # inverted: the outputs that should see the real positions see only the padded ones
    samples = padded.any(-1)
    real_changed = call(module, change_positions(case, component, inputs, keep), component)
    inverted_rows = (lambda y: y[padded]) if own_rows else (lambda y: y[samples])
    if difference(inverted_rows(real_changed), inverted_rows(out), case) is None:
        raise Failure(f"{component}.mask_inverted", requirement,
                      f"{observed}, while changing the real (unpadded) {what} leaves the outputs that attend to "
                      "padding unchanged: the mask is read as True = blocked")
    if masked_after_softmax(case, component, module, inputs, out):
        raise Failure(f"{component}.mask_applied_after_softmax", requirement,
                      f"{observed}, but not after changing only their values: the weights are zeroed after a "
                      "softmax over all keys, whose normalization still includes the masked keys")
    if "src_mask" in inputs_not_accepted(module)[0] and zero_padding_hidden(case, component, module, inputs, out):
        return  # (padding carried in-band, as zero vectors its enclosing code writes at the padded positions)
    require_mask_parameter(module, component, requirement, observed, "src_mask")
    ignored = call(module, all_true(inputs, PADDING[component]["mask"]), component)
    if difference(rows(ignored), rows(out), case) is None:
        raise Failure(f"{component}.mask_ignored", requirement,
                      f"{observed}; the outputs equal those computed with an all-True mask: the mask is not used")
    raise Failure(f"{component}.masked_keys_visible", requirement, observed)


@pytest.mark.parametrize("component", ("model",))
@given(drawn=strategies.settings())
def test_appended_padding_does_not_change_outputs(impl, device, component, drawn):
    """§3.2.3: pad tokens appended to the source, with the padding mask hiding them, leave every output of the
    model unchanged (also for a model that takes no mask and builds its own from the pad index)."""
    case = Case(impl, device=device, **drawn)
    case = case.replace(src_len=max(1, min(case.src_len, case.cfg.max_len - 2)))  # the longer source within max_len
    module = case.build(component)
    src, tgt, src_mask, tgt_mask = inputs = canonical_inputs(case, component)
    longer = (torch.cat([src, torch.full_like(src[:, :2], PAD)], 1), tgt,
              torch.cat([src_mask, torch.zeros_like(src_mask[..., :2])], -1), tgt_mask)
    leak = difference(call(module, longer, component), call(module, inputs, component), case)
    if leak is not None:
        raise Failure(f"{component}.masked_keys_visible", "outputs unchanged when pad tokens, hidden by the padding mask, "
                      "are appended to the source (§3.2.3)", f"after appending 2 pad tokens, {leak}")


def causal_inputs(case, component):
    """Self-attention inputs with a subsequent mask (attention, multi-head attention), else canonical inputs;
    and the index of the target input and of the target mask."""
    c, b, lt = case.cfg, case.batch, case.tgt_len
    if component == "attention":
        x = case.randn(b, c.h, lt, c.d_k)
        return (x, x, x, case.subsequent_mask(lt).unsqueeze(1)), (0, 1, 2), 3
    if component == "multi_head_attention":
        x = case.randn(b, lt, c.d_model)
        return (x, x, x, case.subsequent_mask(lt)), (0, 1, 2), 3
    return canonical_inputs(case, component), ((1,) if component == "model" else (0,)), 3


@pytest.mark.parametrize("component", CAUSAL_ROLES)
@given(drawn=strategies.settings())
def test_future_positions_do_not_change_earlier_outputs(impl, device, component, drawn):
    """§3.2.3: "We need to prevent leftward information flow in the decoder": with the subsequent mask
    (target mask for the decoders and the model), changing the target inputs at positions >= t leaves the outputs
    at positions < t unchanged."""
    case = Case(impl, device=device, **drawn)
    if case.tgt_len < 2:
        case = case.replace(tgt_len=2 if case.src_len != 2 else 3)
    module = case.build(component)
    inputs, targets, mask_index = causal_inputs(case, component)
    t = int(torch.randint(1, case.tgt_len, (1,), generator=case.generator))
    future = torch.zeros(case.batch, case.tgt_len, dtype=torch.bool, device=case.device)
    future[:, t:] = True
    axis = 2 if component == "attention" else 1
    vocab = case.cfg.tgt_vocab if component == "model" else None
    new = changed(case, inputs[targets[0]], future, axis, vocab)
    altered = tuple(new if i in targets else x for i, x in enumerate(inputs))
    earlier = (lambda y: y[:, :, :t]) if component == "attention" else (lambda y: y[:, :t])
    out = call(module, inputs, component)
    leak = difference(earlier(call(module, altered, component)), earlier(out), case)
    if leak is None:
        return
    mask = "tgt_mask" if component in ("decoder_layer", "decoder", "model") else "src_mask"
    causal = case.build(component, causal=True) if mask in inputs_not_accepted(module)[0] else None
    if causal is not None and difference(earlier(call(causal, altered, component)),
                                         earlier(call(causal, inputs, component)), case) is None:
        return  # (causal by construction, as the author's decoder builds it)
    requirement = (f"outputs at positions < t={t} independent of the target inputs at positions >= t (§3.2.3: "
                   "position i attends to positions j <= i; subsequent mask = tril, True = may attend)")
    observed = f"after changing the target inputs at positions {t}..{case.tgt_len - 1}, at positions < {t}: {leak}"
    require_mask_parameter(module, component, requirement, observed, mask)
    unmasked = call(module, all_true(inputs, mask_index), component)
    ignored = difference(unmasked, out, case) is None
    note = "; the outputs equal those computed with an all-True target mask: the mask is not used" if ignored else ""
    raise Failure(f"{component}.{'mask_ignored' if ignored else 'future_visible'}", requirement, observed + note)


def require_mask_parameter(module, component, requirement, observed, mask=None):
    """A leak from a forward that has no parameter for ``mask`` (the canonical mask the check gives; any mask when
    None) is named so."""
    missing, signature = inputs_not_accepted(module)
    if component in ("attention", "multi_head_attention") and getattr(module, "masks_cut", False):
        raise Missing("adapter.mask_not_expressible_as_key_vectors", requirement,
                      f"{observed}: the block takes its masks as (batch, Lk) key-padding vectors, which cannot hide "
                      "keys from some queries only (the causal triangle), and has no causal switch the checker "
                      "could turn on")
    masks = [c for c in missing if c.endswith("mask") and mask in (None, c)]
    unfed = unfed_mask_parameters(module) if component == "model" and mask in (None, "tgt_mask") and getattr(
        module, "masks_from_tokens", False) else []
    if unfed:  # (pad tokens say the padding, never the causal triangle its author may pass there)
        raise Missing("adapter.mask_parameter_not_fed", requirement,
                      f"{observed}: {signature} makes its masks from the pad tokens, and has the mask parameters "
                      f"{', '.join(unfed)}, to which the checker could not tell what to give")
    grafts = sorted({type(m).__name__ for m in module.modules() if is_graft(m)}) if masks == ["tgt_mask"] else []
    if grafts:  # (the author's own block, which the reference's stands in for, may mask the future by construction)
        raise Missing("adapter.graft_does_not_fit", requirement,
                      f"{observed}: {signature} passes no mask to the reference's {', '.join(grafts)} standing in "
                      "for the author's broken block, which may hide the positions by construction")
    unfed = unfed_mask_parameters(module) if masks else []
    if unfed:  # (mask parameters there are: which mask each takes is what the checker could not tell)
        raise Missing("adapter.mask_parameter_not_fed", requirement,
                      f"{observed}: {signature} has the mask parameters {', '.join(unfed)}, to which the checker "
                      f"could not tell how to give the canonical {', '.join(masks)}")
    if masks:
        raise Failure(f"{component}.mask_not_accepted", requirement,
                      f"{observed}: {signature} takes no mask argument (the canonical {', '.join(masks)} has "
                      "nowhere to go), so nothing can stop its attention from seeing every position")


def recorded_weights(recorder, case, component):
    """The last softmax over (Lq, Lk) scores as (batch, heads, Lq, Lk) weights and scores; None when torch's fused
    scaled_dot_product_attention ran instead (it computes no separate softmax)."""
    calls = [c for c in recorder.softmaxes if c.weights.dim() >= 2
             and tuple(c.weights.shape[-2:]) == (case.tgt_len, case.src_len)]
    if not calls:
        if recorder.sdpa_calls:
            return None
        raise Missing(f"{component}.softmax_not_observed", "a softmax over the attention scores (§3.2.1)",
                      f"no softmax over scores of shape (..., Lq={case.tgt_len}, Lk={case.src_len})")
    call_ = gathered(calls, case.batch, case.cfg.h)
    if call_.weights.numel() % (case.batch * case.tgt_len * case.src_len):
        raise Missing(f"{component}.weights_layout_unrecognised", "attention weights (batch, heads, Lq, Lk)",
                      f"a softmax output of shape {tuple(call_.weights.shape)}")
    axis = samples_axis(call_.weights, case.batch)
    weights, scores = call_.weights.movedim(axis, 0), call_.scores.movedim(axis, 0)
    shape = (case.batch, -1, case.tgt_len, case.src_len)
    return weights.reshape(shape).to(torch.float64).cpu(), scores.reshape(shape).to(torch.float64).cpu()


def samples_axis(weights, batch):
    """The leading axis of the recorded weights that runs over the samples: 0, unless only another axis of ``batch``
    entries holds, within each of its entries, one set of keys at weight exactly 0 for every head and query (a
    padding mask hides the same keys from every query of a sample): heads-first code computes (h, batch, Lq, Lk)."""
    def one_pattern_per_sample(axis):
        zero = (weights.movedim(axis, 0) == 0).reshape(batch, -1, weights.size(-1))
        return bool(zero.any()) and bool((zero == zero[:, :1]).all())
    leading = [a for a in range(weights.dim() - 2) if weights.size(a) == batch]
    if batch < 2 or 0 in leading and one_pattern_per_sample(0):
        return 0
    return next((a for a in leading if a and one_pattern_per_sample(a)), 0)


@pytest.mark.parametrize("component", ("attention", "multi_head_attention"))
@given(drawn=strategies.settings())
def test_masked_attention_weights_are_zero(impl, device, component, drawn):
    """§3.2.3: masking by "setting to -inf all values in the input of the softmax": the attention weights (the
    softmax output) at masked keys are 0 (below 1e-6)."""
    case = with_padding(Case(impl, device=device, **drawn))
    module = case.build(component)
    inputs = canonical_inputs(case, component)
    with AttentionRecorder() as recorder:
        out = call(module, inputs, component)
    found = recorded_weights(recorder, case, component)
    if found is None:
        return  # the fused kernel masks before its softmax; the invariance check covers it
    weights, scores = found
    keep = key_mask(component, inputs)[:, None, None, :].expand_as(weights).cpu()
    masked = weights[~keep]
    if not masked.numel() or masked.abs().max() < MASKED_WEIGHT:
        return
    requirement = ("attention weights exactly 0 at the keys the mask hides (§3.2.3: scores set to -inf before the "
                   "softmax)")
    observed = f"weights up to {masked.abs().max().item():.3g} at masked keys"
    require_mask_parameter(module, component, requirement, observed)
    samples = (~keep).flatten(1).any(-1)
    real = weights[keep & samples[:, None, None, None]]
    if real.numel() and real.abs().max() < MASKED_WEIGHT:
        raise Failure(f"{component}.mask_inverted", requirement,
                      f"{observed} and 0 at every real key of the padded samples: the mask is read as True = blocked")
    if masked_after_softmax(case, component, module, inputs, out):
        raise Failure(f"{component}.mask_applied_after_softmax", requirement,
                      f"{observed} by the softmax, yet the outputs do not depend on the values at the masked keys: "
                      "the mask is applied to the weights after the softmax (the remaining weights no longer sum "
                      "to 1)")
    masked_scores = scores[~keep]
    if masked_scores.abs().max() == 0 and scores[keep].abs().max() > 0:
        raise Failure(f"{component}.masked_scores_set_to_zero", requirement,
                      f"{observed}: the masked scores entering the softmax are 0 (masked_fill with 0, not -inf)")
    raise Failure(f"{component}.masked_weights_nonzero", requirement, f"{observed}: the mask does not reach the scores")


# -- the mask helpers ------------------------------------------------------------------------------------------
def as_boolean(result, role):
    """A helper's mask as a bool tensor (0/1 integers and floats accepted); additive masks are a failure."""
    if not isinstance(result, torch.Tensor):
        raise Failure(f"{role}.not_a_tensor", "a boolean mask tensor (True = may attend)", f"a {type(result).__name__}")
    if result.dtype == torch.bool:
        return result
    values = result.detach().to(torch.float64)
    if result.is_floating_point() and (torch.isinf(values).any() or (values < 0).any()):
        raise Failure(f"{role}.additive_not_boolean", "a boolean mask, True = may attend (conformance.contract.interface)",
                      f"an additive {result.dtype} mask with values {sorted(set(values.flatten().tolist()))[:4]}")
    if not ((values == 0) | (values == 1)).all():
        raise Failure(f"{role}.not_boolean", "a boolean mask, True = may attend",
                      f"a {result.dtype} mask with values other than 0 and 1")
    return values != 0


def broadcast(mask, shape, role, requirement):
    """``mask`` expanded to ``shape``; a head axis of size 1 after the batch's, which a mask made for the (batch, h,
    Lq, Lk) scores carries (``(1, 1, L, L)``, ``(batch, 1, 1, L)``), is the same mask and is dropped first."""
    while mask.dim() > len(shape) and mask.size(1) == 1:
        mask = mask.squeeze(1)
    try:
        if mask.dim() > len(shape):
            raise RuntimeError("too many dimensions")
        return mask.expand(*shape)
    except RuntimeError:
        raise Failure(f"{role}.shape", requirement, f"a mask of shape {tuple(mask.shape)}, not broadcastable to "
                      f"{shape}") from None


@pytest.mark.parametrize("component", ["padding_mask"])
@given(drawn=strategies.settings())
def test_padding_mask_helper(impl, device, component, drawn):
    """§3.2.3 and the interface: ``padding_mask(tokens, pad_idx)`` is ``(tokens != pad_idx)`` shaped
    ``(batch, 1, length)``: every query may attend to the real tokens, none to the padding."""
    case = Case(impl, device=device, **drawn)
    f = case.build("padding_mask")
    b, length = case.batch, max(3, case.src_len)
    pad = int(torch.randint(0, 3, (1,), generator=case.generator))
    tokens = torch.randint(3, case.cfg.vocab_size, (b, length), generator=case.generator)
    tokens[torch.rand(b, length, generator=case.generator) < 0.4] = pad
    tokens[:, 0], tokens[0, -1] = 3, pad
    tokens = tokens.to(case.device)
    keep = tokens != pad
    requirement = (f"(tokens != pad_idx={pad}).unsqueeze(-2): shape ({b}, 1, {length}), True at the real tokens "
                   "(§3.2.3; True = may attend)")
    mask = as_boolean(f(tokens, pad), "padding_mask")
    if mask.shape == tokens.shape:  # one flag per token, (batch, length): the keys' flags, as its blocks read them
        mask = mask[:, None, :]
    square = (b, length, length)
    got = broadcast(mask, square, "padding_mask", requirement).cpu()
    expected = keep[:, None, :].expand(square).cpu()
    if torch.equal(got, expected):
        return
    observed = f"a mask of shape {tuple(mask.shape)}"
    if torch.equal(got, ~expected):
        raise Failure("padding_mask.inverted", requirement, f"{observed}, True at the padding: (tokens == pad_idx)")
    if torch.equal(got, keep[:, :, None].expand(square).cpu()):
        raise Failure("padding_mask.masks_queries", requirement,
                      f"{observed} that hides the padded queries, not the padded keys: (batch, length, 1)")
    if pad != PAD and torch.equal(got, (tokens != PAD)[:, None, :].expand(square).cpu()):
        raise if_the_checker_sets(impl, "padding_mask", "pad_idx", Failure(
            "padding_mask.pad_idx_ignored", requirement, f"{observed} equal to (tokens != 0): the pad_idx argument "
            f"({pad}) is ignored"))
    raise Failure("padding_mask.wrong", requirement,
                  f"{observed} differing from (tokens != pad_idx) at {int((got != expected).sum())} entries")


@pytest.mark.parametrize("component", ["subsequent_mask"])
@given(drawn=strategies.settings())
def test_subsequent_mask_helper(impl, device, component, drawn):
    """§3.2.3: "ensures that the predictions for position i can depend only on the known outputs at positions less
    than i": ``subsequent_mask(size)`` is lower-triangular, diagonal included, shaped ``(1, size, size)``."""
    case = Case(impl, device=device, **drawn)
    f = case.build("subsequent_mask")
    size = max(3, case.tgt_len)
    ones = torch.ones(size, size, dtype=torch.bool)
    expected = torch.tril(ones)
    requirement = f"torch.tril(ones(1, {size}, {size})): True where key j <= query i (§3.2.3; True = may attend)"
    mask = as_boolean(f(size), "subsequent_mask")
    got = broadcast(mask, (1, size, size), "subsequent_mask", requirement)[0].cpu()
    if torch.equal(got, expected):
        return
    observed = f"a mask of shape {tuple(mask.shape)}"
    named = {
        "inverted": (torch.triu(ones, 1), "True at the future positions only: triu(ones, 1), the torch convention "
                                          "True = blocked"),
        "triu": (torch.triu(ones), "upper-triangular (triu): each position sees itself and the future, not the past"),
        "excludes_diagonal": (torch.tril(ones, -1), "tril(ones, -1): a position may not attend to itself"),
        "includes_next_position": (torch.tril(ones, 1), "tril(ones, 1): each position sees the next one"),
    }
    for name, (table, words) in named.items():
        if torch.equal(got, table):
            raise Failure(f"subsequent_mask.{name}", requirement, f"{observed}, {words}")
    raise Failure("subsequent_mask.wrong", requirement,
                  f"{observed} differing from tril at {int((got != expected).sum())} of {size * size} entries")


@pytest.mark.parametrize("component", ["subsequent_mask"])
@given(drawn=strategies.settings())
def test_target_mask_helper_masks_keys_not_queries(impl, device, component, drawn):
    """§3.2.3: a target-mask helper that takes the target tokens (``make_trg_mask(trg)``, padding and subsequent
    positions in one mask) hides the padded *keys* with the future ones: ``(tgt != pad).unsqueeze(-2) & tril``. A
    padding part shaped over the queries (``unsqueeze(-1)``) masks whole rows of the padded queries instead, so
    those rows attend to no key at all (or uniformly to every key, the future included)."""
    case = Case(impl, device=device, **drawn)
    f = case.build("subsequent_mask")
    if not hasattr(f, "of_tokens"):
        return  # a helper of the target's size only has no padding to place
    b, length = case.batch, max(3, case.tgt_len)
    tokens = torch.randint(3, 7, (b, length), generator=case.generator)
    padded = torch.randint(1, length, (b,), generator=case.generator)
    tokens[torch.arange(length)[None, :] >= padded[:, None]] = PAD
    keep, tril = tokens != PAD, torch.tril(torch.ones(length, length, dtype=torch.bool))
    requirement = (f"(tgt != pad_idx={PAD}).unsqueeze(-2) & tril(ones({length}, {length})): the padded keys and "
                   "the future ones hidden from every query (§3.2.3; True = may attend)")
    square = (b, length, length)
    mask = as_boolean(f.of_tokens(tokens.to(case.device)), "subsequent_mask")
    got = broadcast(mask, square, "subsequent_mask", requirement).cpu()
    if torch.equal(got, keep[:, None, :] & tril) or torch.equal(got, tril.expand(square)):
        return  # a causal part alone already hides the trailing padding from every real query
    observed = f"on a target padded after positions {padded.tolist()}, a mask of shape {tuple(mask.shape)}"
    if torch.equal(got, keep[:, :, None] & tril):
        raise Failure("subsequent_mask.padding_masks_queries", requirement,
                      f"{observed} that hides the rows of the padded queries, not the padded keys: "
                      "(tgt != pad_idx).unsqueeze(-1), so a padded query attends to no key at all")
    raise Failure("subsequent_mask.target_mask_wrong", requirement,
                  f"{observed} differing from it at {int((got != (keep[:, None, :] & tril)).sum())} entries")


@pytest.mark.parametrize("component", ("model",))
@given(drawn=strategies.settings())
def test_encode_and_decode_hide_padded_source(impl, device, component, drawn):
    """§3.2.3: a model whose ``forward`` is checked above also has ``encode`` and ``decode`` methods (the path its
    author's own decoding takes, one step at a time): through them too, the padded source tokens change no
    output."""
    case = with_padding(Case(impl, device=device, **drawn))
    path = getattr(case.build(component), "by_encode_and_decode", lambda: None)()
    if path is None:
        return  # one path only, checked by test_masked_keys_do_not_change_outputs
    inputs = canonical_inputs(case, component)
    padded = ~key_mask(component, inputs)
    leak = difference(call(path, change_positions(case, component, inputs, padded), component),
                      call(path, inputs, component), case)
    if leak is None:
        return
    requirement = ("outputs of decode(encode(src, src_mask), ...) unchanged when the padded source tokens change "
                   "(§3.2.3: masked keys get weight 0), as through forward")
    observed = f"through encode and decode, after changing the {int(padded.sum())} padded source tokens, {leak}"
    require_mask_parameter(path, component, requirement, observed, "src_mask")
    raise Failure(f"{component}.masked_keys_visible", requirement, observed)


def masks_reach_their_attention(case, module, component, src_mask, tgt_mask):
    """Whether, called with these masks in the canonical places, the padded memory position stays hidden from every
    output (cross-attention gets the source mask) and the last target position from the earlier ones (self-attention
    gets the causal mask)."""
    b, length, d = case.batch, src_mask.size(-1), case.cfg.d_model
    x, memory = case.randn(b, length, d), case.randn(b, length, d)
    out = call(module, (x, memory, src_mask, tgt_mask), component)
    memory_changed, x_changed = memory.clone(), x.clone()
    memory_changed[0, -1] += 3
    x_changed[:, -1] += 3
    padded_hidden = difference(call(module, (x, memory_changed, src_mask, tgt_mask), component), out, case) is None
    earlier = call(module, (x_changed, memory, src_mask, tgt_mask), component)[:, :-1]
    return padded_hidden and difference(earlier, out[:, :-1], case) is None


@pytest.mark.parametrize("component", ("decoder_layer", "decoder"))
@given(drawn=strategies.settings())
def test_each_mask_reaches_its_attention(impl, device, component, drawn):
    """§3.2.3: in the decoder, the source padding mask goes to the encoder-decoder attention and the subsequent
    mask to the self-attention. With source and target of one length (so that either mask fits either attention),
    a padded memory position changes no output and the last target position no earlier one; where that holds only
    with the two masks given in each other's place, the block hands them on swapped."""
    case = Case(impl, device=device, **drawn)
    module = case.build(component)
    length = max(3, case.tgt_len)
    src_mask = torch.ones(case.batch, 1, length, dtype=torch.bool, device=case.device)
    src_mask[0, 0, -1] = False
    tgt_mask = case.subsequent_mask(length).expand(case.batch, -1, -1)
    if masks_reach_their_attention(case, module, component, src_mask, tgt_mask):
        return
    try:
        swapped = masks_reach_their_attention(case, module, component, tgt_mask, src_mask)
    except Exception:  # noqa: BLE001 (the masks do not fit each other's places: nothing to tell)
        swapped = False
    if not swapped:
        raise Missing(f"{component}.masks_not_told_apart", "the source mask on the cross-attention and the "
                      "subsequent mask on the self-attention (§3.2.3)", "a leak in either order of the masks: the "
                      "masking checks above say where")
    raise Failure(f"{component}.masks_swapped", "the source padding mask on the encoder-decoder attention and the "
                  "subsequent mask on the self-attention (§3.2.3)",
                  f"a padded memory position or a later target position changes the outputs with the masks given as "
                  f"(src_mask, tgt_mask), and neither does with the two given in each other's place: the "
                  f"{component} hands its masks on swapped")


@pytest.mark.parametrize("component", ("attention", "multi_head_attention", "model"))
@given(drawn=strategies.settings())
def test_fully_masked_query_row_stays_finite(impl, device, component, drawn):
    """§3.2.3 masks by "setting to -inf all values in the input of the softmax which correspond to illegal
    connections"; when every key of a query is masked (cross-attention from a target onto a source that is all
    padding) a literal -inf makes that row's softmax 0/0 = NaN, which then spreads through every later layer. A
    large negative finite fill (-1e9) or a guarded row keeps the outputs finite. -inf is the paper's own word and
    such a row arises only for a sequence made of padding alone, so the NaN is a note on robustness (a deviation),
    not a failure."""
    case = Case(impl, device=device, **drawn)
    module = case.build(component)
    inputs = list(canonical_inputs(case, component))
    index = PADDING[component]["mask"]
    inputs[index] = inputs[index].clone()
    inputs[index][0] = False  # the first sample's keys (for the model: its source tokens) all masked
    out = call(module, inputs, component)
    if torch.isnan(out).any():
        raise Deviation(f"{component}.nan_on_fully_masked_row", "finite outputs when all keys of a query are masked "
                      "(§3.2.3 sets masked scores to -inf before the softmax: fill with a large negative finite "
                      "value such as -1e9, or guard a row with no key left)",
                      f"{int(torch.isnan(out).sum())} NaN output(s) of {out.numel()} with the first sample's "
                      f"{WHAT_CHANGES[component]} all masked: a row of -inf scores gives softmax 0/0",
                      case.reproduction(component, f"inputs = list(canonical_inputs(case, {component!r})); "
                                                   f"inputs[{index}] = inputs[{index}].clone(); "
                                                   f"inputs[{index}][0] = False; print(m(*inputs))"))
