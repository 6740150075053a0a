"""Information flow through the assembled model (§3.1, §3.4, §3.5), read from what the author's own forward
returns: the output depends on the source and on the target tokens, positions reach both sides, and the embeddings
reach the stacks multiplied by sqrt(d_model)."""
import math

import pytest
import torch
from hypothesis import given

from conformance.contract import strategies
from conformance.contract.harness import PAD, Case, canonical_inputs, difference, output_tensor, seed_generators
from conformance.contract.probes import hooked
from conformance.contract.verdicts import Deviation, Failure, Missing

ROLE = "model"


def own_output(case, module, inputs):
    """What the model's own forward returned for ``inputs``, (batch, target length, ...): its log-probabilities or
    logits (probabilities as their logarithms); else (a model whose forward is not called, or returns another
    layout) the decoder output."""
    with torch.no_grad():
        out = module(*inputs)
    raw = getattr(module, "raw_output", None)
    return logarithm_of_probabilities(raw) if isinstance(raw, torch.Tensor) and raw.shape[:2] == inputs[1].shape \
        else out


def logarithm_of_probabilities(out):
    """A forward ending in a softmax (the next-token probabilities of §3.4) compared as log-probabilities: a change
    of a few per cent in probabilities near 1/V is below any absolute tolerance, and it is as large as a logit's
    change. Anything else as it is."""
    if not out.is_floating_point() or not out.numel() or out.min() < 0 or out.max() > 1 \
            or not torch.allclose(out.sum(-1), torch.ones((), dtype=out.dtype, device=out.device), atol=1e-3):
        return out
    return out.clamp_min(torch.finfo(out.dtype).tiny).log()


def unmasked_source_positions(src_mask, sample=0):
    return [int(p) for p in torch.nonzero(src_mask[sample].any(0)).flatten()]


def causal(tgt):
    """The subsequent-position mask alone, (batch, length, length): every target token real."""
    length = tgt.size(1)
    return torch.tril(torch.ones(1, length, length, dtype=torch.bool, device=tgt.device)).expand(tgt.size(0), -1, -1)


BEFORE = "before = own_output(case, m, (src, tgt, src_mask, tgt_mask))"


def reproduction_showing(case, component, lines, shown, inputs="src, tgt, src_mask, tgt_mask"):
    """A reproduction that runs the author's own block on the check's inputs (a model through its own forward, or
    encode and decode: what it returns) as ``lines`` do, and prints ``shown``: the evidence of the finding."""
    return case.reproduction(component, "\n".join([
        "from conformance.contract.harness import output_tensor, seed_generators",
        "from conformance.checks.test_information_flow import causal, own_output",
        f"{inputs} = canonical_inputs(case, {component!r})", *lines, f"print({shown})"]))


def model_case(impl, device, drawn, src_len=3, tgt_len=3):
    return Case(impl, device=device, **drawn).with_lengths_at_least(src_len, tgt_len)


def other_token(token, vocab):
    """A token id other than ``token`` and the padding id."""
    return 1 + token % (vocab - 1) if vocab > 2 else token


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_output_depends_on_the_source(impl, device, component, drawn):
    """§3.1: the decoder attends over the encoder's output, so the model's output changes when one source token
    that no mask hides changes."""
    case = model_case(impl, device, drawn)
    m = case.build(component)
    src, tgt, src_mask, tgt_mask = canonical_inputs(case, component)
    position = unmasked_source_positions(src_mask)[0]
    changed = src.clone()
    changed[0, position] = token = other_token(int(src[0, position]), case.cfg.src_vocab)
    repro = reproduction_showing(case, component, [
        "changed = src.clone()", f"changed[0, {position}] = {token}", BEFORE,
        "after = own_output(case, m, (changed, tgt, src_mask, tgt_mask))"],
        "'largest change of sample 0:', (after[0] - before[0]).abs().max().item()")
    before, after = own_output(case, m, (src, tgt, src_mask, tgt_mask)), own_output(case, m, (changed, tgt, src_mask,
                                                                                                tgt_mask))
    if torch.equal(before[0], after[0]):
        requirement = "outputs that depend on the source sentence: the decoder attends over the encoder's output " \
                      "(§3.1, §3.2.3)"
        observed = f"identical outputs when source token {position} of sample 0 (not masked) changes"
        unused = discarded_lookups(m, (src, tgt, src_mask, tgt_mask), (changed, tgt, src_mask, tgt_mask))
        if unused:
            raise embeddings_unused(f"{component}.source_embeddings_unused", requirement, observed, unused[0],
                                    "encoder", repro)
        raise Failure(f"{component}.source_ignored", requirement, f"{observed}: the output does not reach back to "
                      "the encoder (is the decoder's result discarded, or the memory not passed on?)", repro)


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_output_depends_on_the_target_tokens(impl, device, component, drawn):
    """§3.4: the target tokens are embedded and fed to the decoder, so the output at the last position changes when
    the last target token changes."""
    case = model_case(impl, device, drawn)
    m = case.build(component)
    src, tgt, src_mask, _ = canonical_inputs(case, component)
    tgt_mask = causal(tgt)  # every target token real
    changed = tgt.clone()
    changed[0, -1] = token = other_token(int(tgt[0, -1]), case.cfg.tgt_vocab)
    repro = reproduction_showing(case, component, [
        "tgt_mask = causal(tgt)", "changed = tgt.clone()", f"changed[0, -1] = {token}", BEFORE,
        "after = own_output(case, m, (src, changed, src_mask, tgt_mask))"],
        "'largest change at the last position:', (after[0, -1] - before[0, -1]).abs().max().item()")
    before, after = own_output(case, m, (src, tgt, src_mask, tgt_mask)), own_output(case, m, (src, changed, src_mask,
                                                                                                tgt_mask))
    if torch.equal(before[0, -1], after[0, -1]):
        requirement = "an output at position t that depends on the target token at t (§3.4: the embeddings of the " \
                      "output tokens are the decoder's input)"
        observed = "identical outputs at the last position when the last target token changes"
        unused = discarded_lookups(m, (src, tgt, src_mask, tgt_mask), (src, changed, src_mask, tgt_mask))
        if unused:
            raise embeddings_unused(f"{component}.target_embeddings_unused", requirement, observed, unused[0],
                                    "decoder", repro)
        raise Failure(f"{component}.target_tokens_ignored", requirement,
                      f"{observed}: the target's embeddings do not reach the output", repro)


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_positions_reach_the_decoder(impl, device, component, drawn):
    """§3.5: "we must inject some information about the ... position of the tokens": a target of one repeated
    token gives different outputs at different positions (without positions, attention over identical tokens gives
    every position the same output)."""
    case = model_case(impl, device, drawn)
    m = case.build(component)
    src, tgt, src_mask, _ = canonical_inputs(case, component)
    same = torch.full_like(tgt, other_token(PAD, case.cfg.tgt_vocab))
    out = own_output(case, m, (src, same, src_mask, causal(tgt)))
    if all(difference(out[:, t], out[:, 0], case) is None for t in range(1, out.size(1))):
        raise Failure(f"{component}.target_positions_missing", "positional encodings added to the target "
                      "embeddings (§3.5), so that positions holding the same token get different outputs",
                      f"the same output at all {out.size(1)} positions of a target made of one repeated token: no "
                      "position information reaches the decoder",
                      reproduction_showing(case, component, [
                          "tgt_mask = causal(tgt)", f"same = torch.full_like(tgt, {int(same[0, 0])})",
                          "out = own_output(case, m, (src, same, src_mask, tgt_mask))"],
                          "'largest difference from position 0:', (out - out[:, :1]).abs().max().item()"))


def order_ignored(before, swapped, changed, case):
    """Whether the outputs ignore the order of the source: those after two tokens swap places are those before
    (within the tolerance, and by less than a thousandth of what changing a token does: without positions they
    differ by rounding alone, while weights at a small initial scale make any change small), and those after a
    token changes are not."""
    swap, change = (swapped - before).abs().max(), (changed - before).abs().max()
    return difference(swapped, before, case) is None and difference(changed, before, case) is not None \
        and bool(swap <= 1e-3 * change)


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_positions_reach_the_encoder(impl, device, component, drawn):
    """§3.5: positional encodings are added to the source embeddings too: swapping two different unmasked source
    tokens changes the output (without positions the encoder is blind to order and the cross-attention sums over
    the same set of keys)."""
    case = model_case(impl, device, drawn)
    m = case.build(component)
    src, tgt, _, tgt_mask = canonical_inputs(case, component)
    src_mask = torch.ones(src.size(0), 1, src.size(1), dtype=torch.bool, device=src.device)  # no padding
    first, second = 0, 1
    src = src.clone()
    src[0, second] = token = other_token(int(src[0, first]), case.cfg.src_vocab)
    swapped, changed = src.clone(), src.clone()
    swapped[0, first], swapped[0, second] = src[0, second], src[0, first]
    changed[0, first] = other_token(int(src[0, second]), case.cfg.src_vocab)
    before = own_output(case, m, (src, tgt, src_mask, tgt_mask))
    after = own_output(case, m, (swapped, tgt, src_mask, tgt_mask))
    if order_ignored(before[0], after[0], own_output(case, m, (changed, tgt, src_mask, tgt_mask))[0], case):
        raise Failure(f"{component}.source_positions_missing", "positional encodings added to the source "
                      "embeddings (§3.5), so that the order of the source tokens matters",
                      f"identical outputs when source tokens {first} and {second} of sample 0 swap places (while "
                      "changing a token does change them): no position information reaches the encoder",
                      reproduction_showing(case, component, [
                          "src_mask = torch.ones_like(src_mask[:, :1])  # no padding",
                          f"src = src.clone(); src[0, {second}] = {token}",
                          f"swapped = src.clone(); swapped[0, {first}], swapped[0, {second}] = src[0, {second}], "
                          f"src[0, {first}]", BEFORE,
                          "after = own_output(case, m, (swapped, tgt, src_mask, tgt_mask))"],
                          "'largest change of sample 0:', (after[0] - before[0]).abs().max().item()"))


def proportional(delta, base):
    """The factor c with delta = c * base (both tensors of one shape, base not zero), else None."""
    base64, delta64 = base.double().flatten(), delta.double().flatten()
    c = float(delta64 @ base64 / (base64 @ base64))
    residual = (delta64 - c * base64).abs().max().item()
    return c if residual <= 1e-4 * max(1.0, abs(c)) * base64.abs().max().item() else None


def traced(model, inner, inputs):
    """Every floating tensor a sub-module of ``inner`` (the author's model inside the adapted ``model``) took as its
    first input or returned during the call of ``model`` on ``inputs``, in call order, with the sub-module's path
    and whether it is an ``nn.Embedding``'s output."""
    records, hooks = [], []
    names = {module: name for name, module in inner.named_modules()}

    def take(module, tensor, embedding=False):
        if isinstance(tensor, (tuple, list)) and tensor:
            tensor = tensor[0]
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
            records.append((names[module], tensor.detach().clone(), embedding))
    for module in inner.modules():
        if module is inner:
            continue
        hooks.append(module.register_forward_pre_hook(lambda mod, args: take(mod, args)))
        hooks.append(module.register_forward_hook(
            lambda mod, args, out: take(mod, out, isinstance(mod, torch.nn.Embedding))))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return records


def changes(first, second):
    """``[(path, change or None, embedding)]`` of two traces (:func:`traced`) of one call with other tokens: the
    change of each record (None where its shape changed)."""
    return [(name, b - a if a.shape == b.shape else None, emb) for (name, a, emb), (_, b, _) in zip(first, second)]


def discarded_lookups(model, inputs, other_inputs):
    """The paths of the ``nn.Embedding`` lookups whose output changes between a call on ``inputs`` and one on
    ``other_inputs`` while nothing computed after them changes but by a multiple of that change (the lookup's own
    scaling and the positions added): embeddings looked up and thrown away. [] when the traces do not line up."""
    inner = getattr(model, "inner", model)
    first, second = traced(model, inner, inputs), traced(model, inner, other_inputs)
    if len(first) != len(second):
        return []
    records, unused = changes(first, second), []
    for i, (name, delta, embedding) in enumerate(records):
        if not embedding or delta is None or not delta.abs().max().item():
            continue
        later = [d for _, d, _ in records[i + 1:] if d is None or d.abs().max().item()]
        if all(d is not None and d.shape == delta.shape and proportional(d, delta) is not None for d in later):
            unused.append(name)
    return unused


def embeddings_unused(cause, requirement, observed, lookup, stack, repro):
    return Failure(cause, requirement, f"{observed}: the lookup {lookup!r} changes with the token, and nothing "
                   f"computed from it beyond its own scaling does (its embeddings never reach the {stack})", repro)


def embedding_scales(first, second):
    """``[(embedding path, factor, path where it was last seen)]``: for each embedding lookup whose output differs
    between two traces (:func:`traced`) of the same call with other tokens, the factor by which that difference is
    multiplied in the last tensor of the trace still proportional to it (the input of the first block that mixes
    positions, after any scaling and the positions are added)."""
    found = []
    if len(first) != len(second):
        return found
    deltas = [record for record in changes(first, second) if record[1] is not None]
    for i, (name, delta, embedding) in enumerate(deltas):
        if not embedding or not delta.abs().max().item():
            continue
        factor, seen = 1.0, name
        for later_name, later, _ in deltas[i + 1:]:
            if later.shape != delta.shape or not later.abs().max().item():
                continue
            c = proportional(later, delta)
            if c is None:
                break
            factor, seen = c, later_name
        found.append((name, factor, seen))
    return found


def lookup_scales(case, component=ROLE):
    """``(embedding_scales, first trace, the model's own output, the author's model)`` of the model of ``case``
    called on its canonical inputs and again with other tokens at the unpadded positions (:func:`embedding_scales`)."""
    m = case.build(component)
    inner = getattr(m, "inner", m)
    src, tgt, src_mask, tgt_mask = canonical_inputs(case, component)
    other_src = torch.where(src_mask.any(1), (src % (case.cfg.src_vocab - 1)) + 1, src)
    other_tgt = (tgt % (case.cfg.tgt_vocab - 1)) + 1
    other_tgt = torch.where(tgt == PAD, tgt, other_tgt)
    first = traced(m, inner, (src, tgt, src_mask, tgt_mask))
    logits = getattr(m, "raw_output", None)
    second = traced(m, inner, (other_src, other_tgt, src_mask, tgt_mask))
    return embedding_scales(first, second), first, logits, inner


def scaled_on_the_shared_projection(inner, embeddings, trace, logits, expected):
    """Whether the model's output (``logits``) is 1 / ``expected`` times the output of a linear map sharing its
    weight with the unscaled ``embeddings`` (§3.4's shared matrix, scaled on the output side instead)."""
    tables = {id(getattr(inner.get_submodule(name), "weight", None)) for name in embeddings}
    shared = {name for name, module in inner.named_modules()
              if isinstance(module, torch.nn.Linear) and id(module.weight) in tables}
    outputs = [tensor for name, tensor, _ in trace if name in shared and logits is not None
               and tensor.numel() == logits.numel()]
    if not outputs:
        return False
    c = proportional(logits.reshape(outputs[-1].shape), outputs[-1])
    return c is not None and math.isclose(c, 1 / expected, rel_tol=1e-3)


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_embeddings_reach_the_stacks_scaled(impl, device, component, drawn):
    """§3.4: "In the embedding layers, we multiply those weights by sqrt(d_model)": changing the tokens changes the
    first input of each stack by sqrt(d_model) times the change of the embedding lookup (positional encodings add a
    table that does not depend on the tokens, eval-mode dropout nothing)."""
    case = model_case(impl, device, drawn)
    scales, first, logits, inner = lookup_scales(case, component)
    if not scales:
        raise Missing(f"{component}.embedding_lookup_not_seen", "an nn.Embedding lookup of the tokens (§3.4)",
                      "no nn.Embedding output changed with the tokens (the lookup is not an nn.Embedding module)")
    expected = math.sqrt(case.cfg.d_model)
    wrong = [(name, c, seen) for name, c, seen in scales if not math.isclose(c, expected, rel_tol=1e-3)]
    if wrong and all(math.isclose(c, 1.0, rel_tol=1e-3) for _, c, _ in wrong) \
            and scaled_on_the_shared_projection(inner, [name for name, _, _ in wrong], first, logits, expected):
        raise Deviation(f"{component}.embedding_scale_on_shared_projection", f"embeddings multiplied by sqrt(d_model) "
                        f"= {expected:.6g} (§3.4)", "unscaled embeddings whose table is shared with the pre-softmax "
                        "projection, and logits divided by sqrt(d_model): the paper's model with the shared matrix "
                        "reparametrized (W = sqrt(d_model) W_paper)", case.reproduction(component))
    if wrong:
        name, c, seen = wrong[0]
        words = "not multiplied by sqrt(d_model)" if math.isclose(c, 1.0, rel_tol=1e-3) else f"multiplied by {c:.6g}"
        raise Failure(f"{component}.embedding_not_scaled" if math.isclose(c, 1.0, rel_tol=1e-3)
                      else f"{component}.embedding_scale_wrong",
                      f"embeddings multiplied by sqrt(d_model) = {expected:.6g} before the stacks (§3.4; "
                      f"d_model={case.cfg.d_model})",
                      f"the output of {name!r} reaches {seen!r} {words}", case.reproduction(component))



def keys_of_attention_calls(module, attention_class, call):
    """The key tensor of every call of an ``attention_class`` module inside ``module`` during ``call()``, with its
    query: ``[(query, key)]`` in call order."""
    seen, handles = [], []

    def before(_, args, kwargs):
        given = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        seen.append((given[0], given[1]) if len(given) >= 2 else (None, None))
    for m in module.modules():
        if isinstance(m, attention_class):
            handles.append(m.register_forward_pre_hook(before, with_kwargs=True))
    with hooked(handles):
        call()
    return seen


@pytest.mark.parametrize("component", ["decoder_layer", "decoder"])
@given(drawn=strategies.settings())
def test_decoder_attends_to_the_memory(impl, device, component, drawn):
    """§3.2.3: "In "encoder-decoder attention" layers, the queries come from the previous decoder layer, and the
    memory keys and values come from the output of the encoder": with source and target of one length and no
    padding, changing the memory changes the output; where it does not, the attention calls show whether the
    encoder-decoder attention takes its keys from the decoder's own input."""
    case = Case(impl, device=device, **drawn)
    length = max(3, case.tgt_len)
    case = case.replace(src_len=length, tgt_len=length)
    m = case.build(component)
    x, memory, _, tgt_mask = canonical_inputs(case, component)
    src_mask = torch.ones(case.batch, 1, length, dtype=torch.bool, device=case.device)
    with torch.no_grad():
        out = output_tensor(m(x, memory, src_mask, tgt_mask), component)
        other = output_tensor(m(x, memory * -2 + 1, src_mask, tgt_mask), component)
    if difference(other, out, case) is not None:
        return
    requirement = "outputs that depend on the memory: the encoder-decoder attention takes its keys and values from " \
                  "the encoder's output (§3.2.3)"
    observed = "the same outputs when the memory changes"
    repro = reproduction_showing(case, component, [
        "src_mask = torch.ones_like(src_mask[:, :1])  # no padding",
        "before = output_tensor(m(x, memory, src_mask, tgt_mask), %r)" % component,
        "after = output_tensor(m(x, memory * -2 + 1, src_mask, tgt_mask), %r)" % component],
        "'largest change:', (after - before).abs().max().item()", inputs="x, memory, src_mask, tgt_mask")
    mha = case.build("multi_head_attention") if impl.has("multi_head_attention") else None
    attention_class = (type(getattr(mha, "inner", mha)), torch.nn.MultiheadAttention)
    with torch.no_grad():
        calls = keys_of_attention_calls(m, attention_class, lambda: m(x, memory, src_mask, tgt_mask))
    from_memory = [k.shape == memory.shape and torch.equal(k, memory) for _, k in calls if k is not None]
    if calls and not any(from_memory) and all(q is not None and torch.equal(q, k) for q, k in calls):
        raise Failure(f"{component}.cross_attention_over_own_input", requirement,
                      f"{observed}: each of its {len(calls)} attention calls takes its keys from its own queries, "
                      "none from the memory", repro)
    raise Failure(f"{component}.memory_ignored", requirement, observed, repro)


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_future_target_tokens_do_not_change_earlier_outputs_in_training(impl, device, component, drawn):
    """§3.2.3: "ensures that the predictions for position i can depend only on the known outputs at positions less
    than i", in training too (P_drop = 0.1, the same dropout draws for both calls): changing the last target token
    leaves every earlier output unchanged."""
    case = model_case(impl, device, drawn).with_config(dropout=0.1)
    m = case.build(component, train=True)
    src, tgt, src_mask, _ = canonical_inputs(case, component)
    changed = tgt.clone()
    changed[:, -1] = token = other_token(int(tgt[0, -1]), case.cfg.tgt_vocab)
    outputs = []
    for target in (tgt, changed):
        seed_generators(case.seed, case.device)
        outputs.append(own_output(case, m, (src, target, src_mask, causal(tgt)))[:, :-1])
    leak = difference(outputs[1], outputs[0], case)
    if leak is None:
        return
    m.eval()
    if difference(own_output(case, m, (src, changed, src_mask, causal(tgt)))[:, :-1],
                  own_output(case, m, (src, tgt, src_mask, causal(tgt)))[:, :-1], case) is not None:
        raise Missing(f"{component}.future_visible_in_eval_too", "causal outputs in training",
                      "a leak in eval mode as well (named by test_future_positions_do_not_change_earlier_outputs)")
    raise Failure(f"{component}.future_visible_in_training", "outputs at positions < t unchanged by the target "
                  "token at t, in training as in eval (§3.2.3)",
                  f"in train mode only, changing the last target token changes earlier outputs: {leak}",
                  reproduction_showing(case, component, [
                      "m.train()", "tgt_mask = causal(tgt)", "changed = tgt.clone()", f"changed[:, -1] = {token}",
                      "seed_generators(case.seed, case.device)  # the same dropout draws for both calls", BEFORE,
                      "seed_generators(case.seed, case.device)",
                      "after = own_output(case, m, (src, changed, src_mask, tgt_mask))"],
                      "'largest change before the last position:', "
                      "(after[:, :-1] - before[:, :-1]).abs().max().item()"))
