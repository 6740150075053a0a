"""Try a bound candidate under the canonical call on the probe configuration: whether it works (:func:`canonical_call_error`), and
the ways of calling it that make it work when the first does not (tensors sequence first, masks of another shape,
token ids given to a stack that embeds them itself), and how a model's forward shifts its target.
"""
import contextlib
import inspect
import io
import re

import torch

from adapters import alignment
from adapters.building import PROBE, probe_build
from adapters.call_plans import (adapt_arguments, argument_values, derived_inputs, first_tensor, plan_arguments,
                                 positions_of)
from adapters.masks import (FULL_SHAPE, HEAD_AXIS, KEY_VECTORS, LENGTHS, NO_HEAD_AXIS, base_convention,
                           describe_convention, probe_masks)
from adapters.wrapping import role_builder
from adapters.names import CANONICAL_CALLS
from conformance.contract.harness import (PAD, Case, canonical_inputs, difference, expected_shape, inputs_not_accepted,
                                         run)
from conformance.contract.interface import Implementation
from conformance.contract.verdicts import Missing

TAKES_TOKEN_IDS = "Expected tensor for argument #1 'indices'"
"""What torch says when an embedding is given vectors: the block given them embeds token ids itself."""


MASKED = ("attention", "multi_head_attention", "encoder_layer", "decoder_layer", "encoder", "decoder", "model")
"""The roles called with masks."""


def masks_of_another_shape(binding, module_name, roles, bindings, convention, cfg=PROBE):
    """Whether ``binding`` works under the canonical call (on ``cfg``) with its masks in another shape
    (:data:`HEAD_AXIS`, :data:`KEY_VECTORS`, for the attention function :data:`NO_HEAD_AXIS`, for the blocks of
    :data:`WHOLE_MASKS` :data:`FULL_SHAPE`), which it then keeps (``roles`` updated, a note added)."""
    base = base_convention(convention)
    whole = (FULL_SHAPE,) if binding.role in WHOLE_MASKS else ()
    for shape in (HEAD_AXIS, KEY_VECTORS) + ((NO_HEAD_AXIS,) if binding.role == "attention" else ()) + whole:
        if convention.endswith(shape):
            continue
        binding.masks = base + shape
        roles[binding.role] = role_builder(binding, bindings, convention)
        if canonical_call_error(Implementation(module_name, roles), binding.role, cfg) is None:
            binding.notes.append(f"(masks: {describe_convention(binding.masks)})")
            return True
    binding.masks = None
    roles[binding.role] = role_builder(binding, bindings, convention)
    return False


WHOLE_MASKS = ("multi_head_attention", "encoder_layer", "decoder_layer", "encoder", "decoder", "model")
"""The roles that may take their masks whole (:data:`FULL_SHAPE`): those whose queries one input gives, and a
model whose encoder-decoder attention takes a source mask of its own (one source mask would serve queries of two
lengths, the encoder's and the decoder's: :func:`adapters.wrapping.whole_model_masks`)."""


LAID_OUT = ("multi_head_attention", "encoder_layer", "decoder_layer", "encoder", "decoder", "model")
"""The roles whose layout is told by behaviour: they mix positions, so a call in the wrong one fails or mixes
samples."""


def helper_masks(role, bindings, convention):
    """The convention of a mask helper's masks where the blocks it makes masks for take them with a head axis
    (found by behaviour, :func:`masks_of_another_shape`): with the head axis too; else None (the code's)."""
    if role in MASK_CALLS and any((b.masks or "").endswith(HEAD_AXIS) for b in bindings.values()):
        return convention.removesuffix(KEY_VECTORS) + HEAD_AXIS
    return None


def learns_weights(binding, bindings):
    """Whether ``binding``'s class, built on the probe configuration, has parameters of its own."""
    module = probe_build(binding, bindings) if inspect.isclass(binding.target) else None
    return module is not None and any(True for _ in module.parameters())


MASK_CALLS = {
    "padding_mask": lambda case: (case.tokens(5, PROBE.vocab_size).index_fill(1, torch.tensor([4]), PAD), PAD),
    "subsequent_mask": lambda case: (3,),
}
"""The canonical calls of the mask helpers on the probe configuration (tokens with padding; size 3)."""


def works_in_layout(binding, layout, module_name, roles, bindings, convention, problem, note):
    """Try ``binding`` in ``layout`` (:data:`SEQUENCE_FIRST`, :data:`UNBATCHED`): None, with ``note`` added, when it
    then works under the canonical call; else its layout and builder as before and ``problem`` unchanged."""
    before, binding.layout = binding.layout, layout
    roles[binding.role] = role_builder(binding, bindings, convention)
    if canonical_call_error(Implementation(module_name, roles), binding.role) is None:
        binding.notes.append(note)
        return None
    binding.layout = before
    roles[binding.role] = role_builder(binding, bindings, convention)
    return problem


def works_as_the_author_lays_it_out(binding, layout, module_name, roles, bindings, convention, note):
    """Try ``binding`` in the ``layout`` the author's own model gives it its sequences in (read from the model's run,
    :func:`adapters.assembly.calls_as_the_model_makes_them`): kept, with ``note`` added, when it then works under
    the canonical call and keeps each sample's output its own (:func:`keeps_samples_apart`: a block the author's
    model calls in a layout not the block's own is the model's mistake, not the block's); whether it was kept."""
    before, binding.layout = binding.layout, layout
    roles[binding.role] = role_builder(binding, bindings, convention)
    implementation = Implementation(module_name, roles)
    if canonical_call_error(implementation, binding.role) is None and keeps_samples_apart(implementation,
                                                                                         binding.role):
        binding.notes.append(note)
        return True
    binding.layout = before
    roles[binding.role] = role_builder(binding, bindings, convention)
    return False


def keeps_samples_apart(implementation, role):
    """Whether ``role``, called canonically on a batch of 3 (in its layout), gives each sample the output it gives
    that sample alone (§3): a call in a layout not the block's own mixes the samples or reads the batch axis as the
    positions, without raising anything."""
    case = Case(implementation, PROBE, batch=3, src_len=5, tgt_len=7, dtype=torch.float32, seed=0)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            module = case.build(role)
            batched, inputs = run(case, role, module=module)
            for i in range(case.batch):
                alone, _ = run(case, role, module=module, inputs=tuple(
                    x[i:i + 1] if isinstance(x, torch.Tensor) and x.dim() and x.size(0) == case.batch else x
                    for x in inputs))
                if difference(batched[i:i + 1], alone, case) is not None:
                    return False
    except Exception:  # the candidate's own code: it does not work this way
        return False
    return True


SEQUENCES_SWAPPED = {"x": "memory", "memory": "x"}


def works_memory_first(binding, module_name, roles, bindings, convention, problem):
    """Try a decoder layer or stack with its two sequences the other way round (the encoder's states first, under
    names that say neither side): None, with a note, when it then works and returns the target's shape; else its
    call and builder as before and ``problem`` unchanged."""
    instance = probe_build(binding, bindings, binding.masks or convention)
    planned = binding.call or (plan_arguments(instance, CANONICAL_CALLS[binding.role]) if instance is not None else [])
    if instance is None or not {"x", "memory"} <= {c for _, c in planned}:
        return problem
    before, binding.call = binding.call, [(name, SEQUENCES_SWAPPED.get(c, c)) for name, c in planned]
    roles[binding.role] = role_builder(binding, bindings, convention)
    case = Case(Implementation(module_name, roles), PROBE, batch=2, src_len=5, tgt_len=7, dtype=torch.float32,
                seed=0)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            out, _ = run(case, binding.role)
        works = isinstance(out, torch.Tensor) and tuple(out.shape) == expected_shape(case, binding.role)
    except Exception:  # the candidate's own code: it does not work this way either
        works = False
    if works:
        binding.notes.append("(called with the encoder's states first: " + ", ".join(
            f"{name}<-{c}" for name, c in binding.call if c in SEQUENCES_SWAPPED) + ")")
        return None
    binding.call = before
    roles[binding.role] = role_builder(binding, bindings, convention)
    return problem


SHAPE_FAILURE = re.compile(r"shape|size|dimension|unpack|AssertionError|IndexError", re.IGNORECASE)
"""What a block says when it is given tensors of another rank than it takes: a batch axis it has no room for."""


def fails_on_shapes(problem):
    """Whether a candidate's failure under the canonical call (``canonical_call_error``' text) is one of shapes."""
    return bool(SHAPE_FAILURE.search(problem))


UNBATCHED_NOTE = "(one sequence at a time, (length, d_model) without a batch axis{}: each sample called alone)"


def canonical_call_error(implementation, role, cfg=PROBE, dtype=torch.float32):
    """Build the role on a small configuration (or ``cfg``) and make the canonical call (in float32, or ``dtype``);
    None if it works, else the error."""
    case = Case(implementation, cfg, batch=2, src_len=5, tgt_len=7, dtype=dtype, seed=0)
    try:
        if role in MASK_CALLS:  # the harness has no canonical call of the mask helpers: theirs is made here
            arguments = MASK_CALLS[role](case)
            out = implementation.function(role)(*arguments)
            if not isinstance(out, torch.Tensor):
                return f"returned {type(out).__name__}, not a tensor"
            tokens = arguments[0]
            if role == "padding_mask" and (out.dim() < 2 or out.shape[0] != tokens.shape[0]
                                           or out.shape[-1] != tokens.shape[-1]):
                return f"returned shape {tuple(out.shape)} for tokens {tuple(tokens.shape)}: not a mask over the keys"
            return None
        out, inputs = run(case, role)
        if role == "positional_encoding" and isinstance(out, torch.Tensor) and out.shape != inputs[0].shape:
            return (f"returned shape {tuple(out.shape)} for input {tuple(inputs[0].shape)}: neither x plus its "
                    "positions nor the table of its length (§3.5)")
        if role == "attention" and "value" in inputs_not_accepted(implementation.function(role))[0]:
            return "takes no values: its scores alone, Q K^T scaled, not the attention of eq. (1)"
    except Missing as exc:  # a model taking lengths: probed again with its padding at the end of each sequence
        if exc.cause == "adapter.padding_not_expressible_as_lengths" and implementation.padding is None:
            implementation.padding = LENGTHS
            return canonical_call_error(implementation, role)
        return f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # the candidate's own code: any exception means "does not fit"
        return f"{type(exc).__name__}: {exc}"
    return None


PRECISIONS_MEET = re.compile(r"dtype|Float.*Double|Double.*Float|float32.*float64|float64.*float32")
"""What torch says when tensors of two precisions meet in one operation (``expected scalar type Float but found
Double``, ``mat1 and mat2 must have the same dtype``)."""


def float32_only(implementation, role):
    """The error ``role`` (which works in float32) raises in float64 when tensors of the two precisions meet there:
    its code fixes float32 somewhere (a softmax given ``dtype=torch.float``, a float32 table it multiplies), as code
    written for float32 training does; else None."""
    problem = canonical_call_error(implementation, role, dtype=torch.float64)
    return problem if problem is not None and PRECISIONS_MEET.search(problem) else None


def embeds_token_ids(implementation, role):
    """Whether a stack that fails under its canonical call (vectors) works when given token ids in their place: it
    embeds them itself, however it fails on vectors (torch's embedding error, or ``batch, length = src.shape``)."""
    if role not in ("encoder", "decoder"):
        return False
    case = Case(implementation, PROBE, batch=2, src_len=5, tgt_len=7, dtype=torch.float32, seed=0)
    try:
        first, *rest = canonical_inputs(case, role)
        tokens = case.tokens(first.shape[1], PROBE.vocab_size)
        out, _ = run(case, role, inputs=(tokens, *rest))
    except Exception:  # the candidate's own code: any exception means it does not take token ids either
        return False
    return isinstance(out, torch.Tensor) and tuple(out.shape[:2]) == tuple(tokens.shape)


def reads_token_values(implementation):
    """Whether the positional encoding, called with token ids in place of its input (:func:`positions_of`), reads
    their values and not their shape alone: other ids of the same shape give another output. It then embeds the
    tokens itself (an embedding with the positions added to it), and is no encoding its caller hands the tokens
    only to say how many positions there are: its output is no x + PE to read (§3.5)."""
    try:
        table = implementation.build("positional_encoding", PROBE).eval()
        x = torch.zeros(2, 5, PROBE.d_model)
        named = derived_inputs({"x": x})
        outputs = [first_tensor(table.inner(**adapt_arguments(table.arguments, dict(named, x=ids), table.convention)))
                   for ids in (positions_of(x), torch.zeros_like(positions_of(x)))]
    except Exception:  # the candidate's own code: what it reads is not established
        return True
    return not (isinstance(outputs[0], torch.Tensor) and isinstance(outputs[1], torch.Tensor)
                and torch.equal(*outputs))


def target_shift(binding, module_name, roles):
    """How the bound model's forward shifts the target (:func:`adapters.alignment.target_shift`), observed by
    calling it on the probe configuration with a target of distinct tokens; None when it does not."""
    if binding is None or not binding.works or binding.layout is not None:
        return None
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            model = Implementation(module_name, roles).build("model", PROBE).eval()
    except Exception:  # the candidate's own code
        return None
    if getattr(model, "forward_arguments", None) is None:
        return None  # called through encode and decode: the decoder is given the target as it is
    tgt = alignment.probe_target(2, 5, PROBE.tgt_vocab, PAD)
    src = alignment.probe_target(2, 7, PROBE.src_vocab, PAD)
    named = {"src": src, "tgt": tgt, "src_mask": torch.ones(2, 1, 7, dtype=torch.bool),
             "tgt_mask": torch.tril(torch.ones(5, 5, dtype=torch.bool)).expand(2, 5, 5)}
    return alignment.target_shift(  # the author's forward alone (not the canonical call's fallback to decode)
        model.inner, lambda: model.inner(**argument_values(model.forward_arguments, named, model.convention)), tgt)


def hides_a_masked_key(impl):
    """Whether the multi-head attention of ``impl`` (with its call's mask convention) leaves its output unchanged
    when a key the canonical mask hides changes (§3.2.3): True, False (the key shows: the mask is read the other
    way round, or ignored), or None when the block cannot be called so."""
    outputs = padded_key_outputs(impl, "multi_head_attention")
    return None if outputs is None else bool(torch.allclose(outputs[0], outputs[1], atol=1e-5))


def masking_shown(impl):
    """What the model of ``impl`` (with its call's mask convention) hides of what the canonical masks hide
    (§3.2.3): how many of a padded source token and a later target token leave its outputs (at the earlier target
    positions) unchanged when they change, 0 to 2, and 0 where its outputs do not follow a real token of each side
    either (a reading that hides everything); None when it cannot be called so."""
    torch.manual_seed(0)
    vocab = min(PROBE.src_vocab, PROBE.tgt_vocab)  # (a model of one vocabulary takes no more)
    src, tgt = torch.randint(1, vocab, (2, 5)), torch.randint(1, vocab, (2, 4))
    src_mask, tgt_mask = probe_masks()
    calls = [(src, tgt), (other_token_at(src, -1, vocab), tgt), (src, other_token_at(tgt, -1, vocab)),
             (other_token_at(src, 0, vocab), tgt), (src, other_token_at(tgt, 0, vocab))]
    outputs = outputs_of(impl, "model", [(s, t, src_mask, tgt_mask) for s, t in calls])
    if outputs is None:
        return None
    before, padded, future, real_source, real_target = outputs
    if torch.allclose(before, real_source, atol=1e-5) or torch.allclose(before, real_target, atol=1e-5):
        return 0
    return (int(torch.allclose(before, padded, atol=1e-5))
            + int(torch.allclose(before[:, :-1], future[:, :-1], atol=1e-5)))


def hides_padded_keys(impl, role):
    """Whether ``role`` of ``impl`` (a block called with a padding mask: an attention, a layer, a stack) leaves its
    outputs unchanged when a key its canonical padding mask hides changes, while a key it leaves visible changes
    them (§3.2.3): 1 or 0; None when it cannot be called so. A model: :func:`masking_shown`."""
    if role == "model":
        return masking_shown(impl)
    outputs = padded_key_outputs(impl, role)
    if outputs is None:
        return None
    before, padded, real = outputs
    return int(torch.allclose(before, padded, atol=1e-5) and not torch.allclose(before, real, atol=1e-5))


def padded_key_outputs(impl, role):
    """The outputs of ``role`` (an attention, a layer, a stack) called with the probe's padding mask on a memory,
    on it with its padded last key changed and on it with its first (real) key changed; an encoder's at its real
    positions. None when it cannot be called so."""
    torch.manual_seed(0)
    x, memory = torch.randn(2, 4, PROBE.d_model), torch.randn(2, 5, PROBE.d_model)
    src_mask, tgt_mask = probe_masks()
    changed = [memory.clone(), memory.clone()]
    changed[0][:, -1] += 3 * torch.randn(2, PROBE.d_model)
    changed[1][:, 0] += 3 * torch.randn(2, PROBE.d_model)
    inputs = {"multi_head_attention": lambda m: (x, m, m, src_mask), "encoder_layer": lambda m: (m, src_mask),
              "encoder": lambda m: (m, src_mask), "decoder_layer": lambda m: (x, m, src_mask, tgt_mask),
              "decoder": lambda m: (x, m, src_mask, tgt_mask)}.get(role)
    outputs = None if inputs is None else outputs_of(impl, role, [inputs(m) for m in [memory, *changed]])
    if outputs is None:
        return None
    return [out[:, :-1] if role in ("encoder_layer", "encoder") else out for out in outputs]


def other_token_at(tokens, position, vocab):
    """``tokens`` with another token id in [1, vocab) at ``position`` of every sample."""
    changed = tokens.clone()
    changed[:, position] = tokens[:, position] % (vocab - 1) + 1
    return changed


def outputs_of(impl, role, calls):
    """The outputs of ``role`` built on the probe configuration (eval mode) for each argument tuple of ``calls``:
    tensors of one shape, all finite; else None."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
            block = impl.build(role, PROBE).eval()
            outputs = [block(*arguments) for arguments in calls]
    except Exception:  # noqa: BLE001 - the author's code under a call it may not take: no reading
        return None
    outputs = [out[0] if isinstance(out, (tuple, list)) else out for out in outputs]
    if not all(isinstance(out, torch.Tensor) and out.shape == outputs[0].shape and out.isfinite().all()
               for out in outputs) or outputs[0].dim() < 2:
        return None
    return outputs
