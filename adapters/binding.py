"""Bind roles: which class or function of someone's code plays each role of ``conformance.contract.interface``
(:func:`discover`), the last stage of discovery, which the stages below it serve.

Three kinds of evidence, in order:

1. **names**: class and function names against families of synonyms (``MultiHeadAttentionBlock``,
   ``MultiHeadedAttention``, ``MaskedMultiHeadSelfAttentionBlock``, ... for ``multi_head_attention``), fuzzily, so
   that ``EndoderBlock`` is still an encoder layer (:mod:`adapters.names`, :mod:`adapters.candidates`);
2. **signatures**: constructor arguments mapped onto the canonical hyperparameters by their names (``embed_dim``,
   ``features``, ``hidden`` -> ``d_model``; ``n_head``, ``num_heads`` -> ``h``; ...), sub-blocks built from the roles
   they stand for (``EncoderBlock(features, attn_block, ff_block, dropout)``) (:mod:`adapters.construction`,
   :mod:`adapters.building`), forward arguments by name and position (``forward(decoder_input, encoder_output,
   self_attn_mask, dec_enc_attn_mask)``) (:mod:`adapters.call_plans`);
3. **behaviour**: a candidate must construct and accept the canonical call on a small configuration
   (:mod:`adapters.wrapping`, :mod:`adapters.behaviour`); the first one that does wins. A class whose name says
   nothing is still found by what its block does (:data:`adapters.candidates.SIGNATURES`: a LayerNorm, an embedding,
   a positional encoding), or by where the code uses it: the function a bound multi-head block calls, the class a
   bound block builds at an attribute named for the role (:func:`adapters.assembly.parts_in_built_blocks`).

The result is an :class:`conformance.contract.interface.Implementation` whose ``mapping`` says what was found and how,
and which an adapter file (``conformance.toml`` next to the code, see :func:`read_overrides`) can override.
"""
import functools
import inspect
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from adapters.assembly import (BATCH_FIRST, METHOD_ROLES, assembled_together, calls_as_the_model_makes_them,
                               encode_and_decode_as_forward_calls_them, masks_of_a_pair_helper,
                               masks_of_encode_and_decode, method_role, parts_in_built_blocks)
from adapters.behaviour import (LAID_OUT, MASKED, TAKES_TOKEN_IDS, UNBATCHED_NOTE, canonical_call_error, embeds_token_ids,
                                fails_on_shapes, float32_only, helper_masks, hides_a_masked_key,
                                hides_padded_keys, learns_weights, masking_shown,
                                masks_of_another_shape, reads_token_values, target_shift,
                                works_as_the_author_lays_it_out, works_in_layout,
                                works_memory_first)
from adapters.building import PAPER_WIDTHS, PROBE, Binding, build_error, builds_by_name, constructed_by_name
from adapters.call_plans import (SEQUENCE_FIRST, UNBATCHED, adapt_arguments, derived_inputs, first_tensor,
                                 in_torch_style, plan_arguments, positions_of, returns_table)
from adapters.candidates import (ROLE_ORDER, called_in_the_code, candidates, live_modules, ranked, used_in_the_code,
                                 without_dead_code)
from adapters.construction import (builds_a_module, causal_by_default, causal_flag, constructor_plan,
                                   hyperparameters_fed, remembering_what_is_learned)
from adapters.masks import HEAD_AXIS, KEY_VECTORS, base_convention, describe_convention, infer_convention
from adapters.names import CANONICAL_CALLS, names_a_padding_mask, normalize
from adapters.observe import without_batch_axis
from adapters.wrapping import module_builder, role_builder
from conformance.contract.interface import Implementation

FALLBACK_SCORE = 0.9
"""A candidate that does not work under the canonical call is still bound (so its crash is reported and
diagnosed) when its name is this close to the role's."""


@dataclass
class Discovery:
    """What discovery found: role builders, the bindings behind them, and notes for the report."""
    roles: dict
    bindings: dict
    convention: str
    notes: list
    grafts: dict = field(default_factory=dict)
    """role -> the reference's blocks built into it in place of the submission's own, which do not work"""
    broken: set = field(default_factory=set)
    """The roles bound although they fail under the canonical call on the probe configuration."""
    unbuilt: dict = field(default_factory=dict)
    """role -> the class found for it whose construction could not be planned (so not bound)."""

    def describe(self):
        lines = [b.describe() for b in self.bindings.values()]
        return lines + [f"masks: {describe_convention(self.convention)}"] + self.notes

    @property
    def unusable(self):
        """How many roles were bound although they fail under the canonical call."""
        return sum("does not work under the canonical call" in note for note in self.notes)

    @property
    def embedding_token_ids(self):
        """How many of the :attr:`unusable` roles fail because they embed token ids themselves (a stack that looks
        its tokens up): no shape of the masks makes them work under the canonical call."""
        return sum("does not work under the canonical call" in note and TAKES_TOKEN_IDS in note for note in self.notes)

    @property
    def working(self):
        """How many roles were bound and work under the canonical call."""
        return len(self.bindings) - len(self.broken)


def discover(namespace, module_name, overrides=None, modules=None, observed=None):
    """Bind every role found in ``namespace`` (a submission's module dict); see the module docstring. Where several
    classes could play a role, the one the bound blocks assemble wins (:func:`assembled_together`); ``observed``: what
    the author's own run showed (:class:`adapters.observe.Observation`), or None."""
    with remembering_what_is_learned():
        return bound_and_assembled(namespace, module_name, overrides, modules, observed)


def bound_and_assembled(namespace, module_name, overrides, modules, observed):
    modules = modules or {module_name}
    found, tried = bind_roles(namespace, module_name, overrides, modules, observed=observed), [set()]
    for _ in range(ASSEMBLY_PASSES):
        prefer = assembled_together(found.bindings, candidates(namespace, modules))
        if prefer in tried:
            break
        tried.append(prefer)
        found = bind_roles(namespace, module_name, overrides, modules, frozenset(prefer), observed)
    for role, binding in found.bindings.items():
        problem = float32_only(Implementation(module_name, found.roles), role) if binding.works else None
        if problem is not None:  # (the author computes in float32: so is the role checked, with float32's tolerances)
            found.roles[role].fixed_dtype = torch.float32
            found.notes.append(f"{role}: computes in float32 only, its code fixing that precision (in float64: "
                               f"{problem[:120]}): checked in float32")
    return found


ASSEMBLY_PASSES = 3
"""How many times discovery binds again with :func:`assembled_together`'s preferences (a stack found in one pass
tells which attention block its layers build in the next)."""


def best_failure(kept, failure, score):
    """The failing candidate to bind when none works: the best name (the first tried of equal names), a class
    before a function building the model (whose failure says less about which block is wrong)."""
    if failure[0].role == "model" and inspect.isfunction(failure[0].target):
        score -= 0.5
    return kept if kept is not None and kept[2] >= score else (*failure, score)


ONE_SEQUENCE_ROLES = LAID_OUT + ("embedding", "positional_encoding")
"""The roles whose blocks take sequences, which code trained sentence by sentence gives one at a time."""


def takes_one_sequence(binding, role, problem, bindings, observed):
    """Whether a candidate that fails under the canonical call is to be tried one sample at a time, without a batch
    axis (:data:`UNBATCHED`): the author's own run calls it so, or it fails on shapes and its role mixes positions
    (a lookup or a table says nothing by itself: it is tried so where the blocks already bound take one sequence)."""
    if role not in ONE_SEQUENCE_ROLES or binding.layout is not None:
        return False
    if without_batch_axis(observed, binding.target):
        return True
    return fails_on_shapes(problem) and (role in LAID_OUT or any(b.layout == UNBATCHED for b in bindings.values()))


def whole_masks(binding, module_name, roles, bindings, convention, problem):
    """``problem``, or None once the block works with whole masks where its parameter names (``enc_padding_mask``)
    had them planned in torch's two parts (the code's own convention, as a tutorial's ``padding_mask`` is)."""
    try:
        adapted = Implementation(module_name, roles).build(binding.role, PROBE)
    except Exception:  # noqa: BLE001 - the author's constructor: its crash is the problem already found
        return problem
    if not in_torch_style(getattr(adapted, "arguments", None) or getattr(adapted, "forward_arguments", None) or []):
        return problem
    before = binding.call, binding.masks
    binding.call = plan_arguments(adapted.inner, CANONICAL_CALLS[binding.role], by_name=False)
    roles[binding.role] = module_builder(binding, bindings, convention)
    if canonical_call_error(Implementation(module_name, roles), binding.role) is None \
            or masks_of_another_shape(binding, module_name, roles, bindings, convention):
        binding.notes.append("(its masks whole, not in torch's two parts its parameter names suggest)")
        return None
    binding.call, binding.masks = before
    roles[binding.role] = module_builder(binding, bindings, convention)
    return problem


def takes_a_padding_mask(target):
    """Whether the forward of ``target`` (a class or a function) has a parameter named for a padding mask
    (``src_padding_mask``, ``tgt_key_padding_mask``): a call torch's convention plans in two parts."""
    try:
        parameters = inspect.signature(getattr(target, "forward", target)).parameters
    except (TypeError, ValueError):
        return False
    return any(names_a_padding_mask(name) for name in parameters)


def masks_named_for_padding(binding, module_name, roles, bindings, convention, keep_said):
    """A block whose parameters are named for padding masks (planned in torch's two parts, True = blocked) takes
    them whole in the code's convention where the code's own masks say True = may attend (``keep_said``: its mask
    helper, its attention), or where it hides more of what the masks hide so than in torch's two parts (§3.2.3:
    its behaviour, where nothing else tells how its author's masks read)."""
    hidden = None if keep_said else hides_padded_keys(Implementation(module_name, roles), binding.role)
    before = binding.call, binding.masks, list(binding.notes)
    if whole_masks(binding, module_name, roles, bindings, convention, "torch's two parts") is not None or keep_said:
        return
    if (hides_padded_keys(Implementation(module_name, roles), binding.role) or 0) > (hidden or 0):
        return
    binding.call, binding.masks, binding.notes[:] = before
    roles[binding.role] = module_builder(binding, bindings, convention)


OTHER_POLARITY = {"keep": "blocked", "blocked": "keep"}


def key_vectors_read_by_the_model(binding, module_name, roles, bindings, convention):
    """A model given (batch, L) key-padding vectors makes its attention masks from them itself: what a 1 means in
    them is its own convention, not its blocks'. Where the model hides less of what the masks hide (a padded source
    token, a later target token) in the code's convention than in the other, it takes the other."""
    base = base_convention(binding.masks or convention)
    if not (binding.masks or "").endswith(KEY_VECTORS) or base not in OTHER_POLARITY:
        return
    shown = masking_shown(Implementation(module_name, roles))
    if shown is None or shown == 2:
        return
    before = binding.masks
    binding.masks = OTHER_POLARITY[base] + KEY_VECTORS
    roles["model"] = module_builder(binding, bindings, convention)
    if (masking_shown(Implementation(module_name, roles)) or 0) > shown:
        binding.notes[:] = [n for n in binding.notes if not n.startswith("(masks: ")]
        binding.notes.append(f"(masks: {describe_convention(binding.masks)}; read so because the model makes its "
                             "attention masks from them itself, and hides more of what they hide so)")
        return
    binding.masks = before
    roles["model"] = module_builder(binding, bindings, convention)


def masks_as_the_model_gives_them(binding, polarity, module_name, roles, bindings, convention):
    """A block the author's own model gives its masks in another polarity than the one the checker reads it in
    (``polarity``: a model making its masks from the pad tokens, True where a token is padding, gives its layers
    masks read True = blocked) reads them so, its masks' shape kept, when it still works so."""
    current = binding.masks or convention
    base = base_convention(current)
    if binding.role == "model" or polarity == base:
        return
    before = binding.masks
    binding.masks = polarity + current[len(base):]
    roles[binding.role] = role_builder(binding, bindings, convention)
    if canonical_call_error(Implementation(module_name, roles), binding.role) is None:
        binding.notes[:] = [n for n in binding.notes if not n.startswith("(masks: ")]
        binding.notes.append(f"(masks: {describe_convention(binding.masks)}; read so because the author's own model "
                             "gives it its masks so)")
        return
    binding.masks = before
    roles[binding.role] = role_builder(binding, bindings, convention)


def bind_roles(namespace, module_name, overrides, modules, prefer=frozenset(), observed=None):
    """One pass of :func:`discover`: each role in :data:`ROLE_ORDER` bound to its best working candidate, those
    named in ``prefer`` first."""
    found = candidates(namespace, modules)
    used = used_in_the_code(found, module_name, modules)
    live = live_modules(module_name, frozenset(modules))
    dead = frozenset(modules - live) if live is not None else frozenset()
    overrides = overrides or {}
    bindings, roles, notes, taken, unbuilt = {}, {}, [], set(), {}
    masks = overrides.get("masks", {})
    convention = masks.get("convention", "keep") + (HEAD_AXIS if masks.get("head_axis") else
                                                     KEY_VECTORS if masks.get("key_vectors") else "")
    for role in ROLE_ORDER:
        forced = overrides.get("roles", {}).get(role)
        completed = getattr(observed, "completed", None)  # the author's model, as the author's own run showed
        options = [(1.0, forced, namespace[forced])] if forced in namespace else ranked(role, found, taken, prefer,
                                                                                       completed)
        if not forced and (role != "model" or live is not None):
            kept = without_dead_code(options, used, role == "model", dead)  # (a model tops its tree: its module says)
            dropped = [name for _, name, _ in options if name not in {n for _, n, _ in kept}]
            if dropped:
                notes.append(f"{role}: left aside {', '.join(dropped)}: nothing in the code uses it, while the code "
                             "uses a class named as well for the role")
            options = kept
        first_failure = partial = None
        for score, name, obj in options:
            if role == "model" and first_failure is not None and score < first_failure[2] \
                    and not builds_by_name(obj, getattr(first_failure[0].target, "__name__", None),
                                           first_failure[0].target):
                break  # the model its name says fails: missing, never replaced by a class named less like one
                # (unless that class wraps it: the core of torch.nn.Transformer's kind inside the author's model)
            binding = Binding(role, name, obj, masks=helper_masks(role, bindings, convention))
            binding.runs_in_the_authors_model = ran_in_the_authors_run(binding, observed)
            try:
                if builds_a_module(role, obj):
                    binding.constructor = constructor_plan(obj, role, bindings)
                if role == "model":
                    binding.call = masks_as_the_author_passes_them(binding, observed) or binding.call
                if role == "attention" and learns_weights(binding, bindings):
                    continue  # a block with projections of its own is not the attention function of eq. (1)
                roles[role] = role_builder(binding, bindings, convention)
            except (LookupError, ValueError, TypeError) as exc:
                if score >= FALLBACK_SCORE:
                    first_failure = best_failure(first_failure, (binding, str(exc)), score)
                roles.pop(role, None)
                continue
            problem = canonical_call_error(Implementation(module_name, roles), role)
            if problem is not None and role in LAID_OUT:  # written for (sequence, batch, d_model) tensors?
                problem = works_in_layout(binding, SEQUENCE_FIRST, module_name, roles, bindings, convention, problem,
                                          "(sequence, batch, d_model) tensors, as torch's default layout")
            if problem is not None and takes_one_sequence(binding, role, problem, bindings, observed):
                problem = works_in_layout(binding, UNBATCHED, module_name, roles, bindings, convention, problem,
                                          UNBATCHED_NOTE.format(", as the author's own run calls it" if
                                                                without_batch_axis(observed, obj) else ""))
            if problem is not None and role in ("decoder_layer", "decoder"):  # the encoder's states first?
                problem = works_memory_first(binding, module_name, roles, bindings, convention, problem)
            if problem is not None and role == "padding_mask" \
                    and any(b.layout == SEQUENCE_FIRST for b in bindings.values()):  # (length, batch) tokens?
                problem = works_in_layout(binding, SEQUENCE_FIRST, module_name, roles, bindings, convention, problem,
                                          "(called with (length, batch) token ids, as the rest of the code)")
            if problem is not None and role in MASKED \
                    and masks_of_another_shape(binding, module_name, roles, bindings, convention):
                problem = None  # its masks of another shape
            if problem is not None and role in MASKED:  # a mask named for padding, yet not torch's two parts?
                problem = whole_masks(binding, module_name, roles, bindings, convention, problem)
            if problem is not None and role == "positional_encoding":  # called with the tokens, as its caller does?
                binding.takes_token_ids = True
                roles[role] = module_builder(binding, bindings, convention)
                if canonical_call_error(Implementation(module_name, roles), role) is None \
                        and not reads_token_values(Implementation(module_name, roles)):
                    problem = None
                    binding.notes.append("(called with token ids of the input's shape, as the code's embedding "
                                         "block calls it with the tokens)")
                else:
                    binding.takes_token_ids = False
                    roles[role] = module_builder(binding, bindings, convention)
            if problem is None and role == "multi_head_attention" and partial is None \
                    and "key" in Implementation(module_name, roles).build(role, PROBE).inputs_not_accepted()[0]:
                partial = (binding, roles.pop(role))  # self-attention only: kept unless another one takes keys
                continue
            if problem is None:
                bindings[role] = binding
                taken.add(name)
                first_failure = None
                break
            if score >= FALLBACK_SCORE:
                first_failure = best_failure(first_failure, (binding, problem), score)
            roles.pop(role)
        if partial is not None and role not in bindings:
            bindings[role], roles[role] = partial
            taken.add(partial[0].name)
            first_failure = None
        if first_failure and role not in bindings:
            binding, problem, _ = first_failure
            binding.works = False
            binding.takes_token_ids = TAKES_TOKEN_IDS in problem
            notes.append(f"{role}: {binding.name} does not work under the canonical call ({problem})")
            if role == "positional_encoding" and binding.takes_token_ids:  # (read for more than their shape above)
                notes[-1] += ("; it embeds the token ids it is given, its positions added to their embeddings: "
                              "an embedding block, not an encoding of the positions to check alone (§3.5): not bound")
                continue
            try:
                if builds_a_module(role, binding.target):
                    binding.constructor = constructor_plan(binding.target, role, bindings)
                if role == "model" and not {"vocab_size", "src_vocab", "tgt_vocab"} & hyperparameters_fed(binding,
                                                                                                          bindings):
                    notes[-1] += "; it takes no vocabulary, so it is no model of token sequences: not bound"
                    continue
                roles[role] = role_builder(binding, bindings, convention)
                if not binding.takes_token_ids:
                    binding.takes_token_ids = embeds_token_ids(Implementation(module_name, roles), role)
                if role in MASKED and binding.masks is None and not binding.takes_token_ids \
                        and canonical_call_error(Implementation(module_name, roles), role, PAPER_WIDTHS) is not None:
                    # (code fixing a width of its own runs at the paper's: its masks are read there)
                    masks_of_another_shape(binding, module_name, roles, bindings, convention, PAPER_WIDTHS)
                bindings[role] = binding
                taken.add(binding.name)
            except (LookupError, ValueError, TypeError):
                unbuilt[role] = binding.name
    for role, binding in parts_in_built_blocks(bindings, found, taken).items():
        roles[role] = role_builder(binding, bindings, convention)
        problem = canonical_call_error(Implementation(module_name, roles), role)
        if problem is None or masks_of_another_shape(binding, module_name, roles, bindings, convention):
            bindings[role] = binding
            notes[:] = [n for n in notes if not n.startswith(f"{role}: ") or "does not work" not in n]
        elif not bindings[binding.found_in].works:  # the block it is part of fails too: on the author's own path
            binding.works = False
            bindings[role] = binding
            notes.append(f"{role}: {binding.name} {binding.notes[0]} does not work under the canonical call "
                         f"({problem})")
        else:
            del roles[role]
    shown = {}  # the layout the author's model gives each block its sequences in
    plans, polarities = calls_as_the_model_makes_them(bindings, roles, module_name, shown)
    for role, plan in plans.items():
        binding, before = bindings[role], (bindings[role].call, bindings[role].masks)
        binding.call = plan
        roles[role] = module_builder(binding, bindings, convention)
        problem = canonical_call_error(Implementation(module_name, roles), role)
        if problem is None or not binding.works \
                or masks_of_another_shape(binding, module_name, roles, bindings, convention):
            # (a block broken under the canonical call too is checked under its author's: a crash there is theirs)
            binding.notes.append("(its call read from the author's own code: the sequences told by their "
                                 "lengths, the masks by value)")
            if problem is None and not binding.works:
                binding.works = True
                notes[:] = [n for n in notes if not n.startswith(f"{role}: ") or "does not work" not in n]
        else:
            binding.call, binding.masks = before
            roles[role] = module_builder(binding, bindings, convention)
    for role, polarity in polarities.items():
        masks_as_the_model_gives_them(bindings[role], polarity, module_name, roles, bindings, convention)
    for role, layout in shown.items():  # (a call batch first raises nothing where a table is sliced by the batch)
        binding = bindings[role]
        if layout != SEQUENCE_FIRST or binding.layout is not None:
            continue
        said = "(sequence, batch) token ids" if role == "embedding" else "(sequence, batch, d_model) tensors"
        if works_as_the_author_lays_it_out(binding, layout, module_name, roles, bindings, convention,
                                           f"{said}, as the author's model calls it") and not binding.works:
            binding.works = True
            notes[:] = [n for n in notes if not n.startswith(f"{role}: ") or "does not work" not in n]
    if "model" in bindings and bindings["model"].works:
        key_vectors_read_by_the_model(bindings["model"], module_name, roles, bindings, convention)
    stacks_masks = masks_of_encode_and_decode(bindings, roles, module_name)
    if stacks_masks:
        bindings["model"].masks = stacks_masks
        bindings["model"].notes.append(f"(its encode and decode take masks as its stacks do: "
                                       f"{describe_convention(stacks_masks)})")
        roles["model"] = module_builder(bindings["model"], bindings, convention)
    method_calls = encode_and_decode_as_forward_calls_them(bindings, roles, module_name)
    if method_calls:
        bindings["model"].method_calls, bindings["model"].masks = method_calls
        bindings["model"].notes.append(f"(its encode and decode given their masks whole, as its own forward gives "
                                       f"them: {describe_convention(method_calls[1])})")
        roles["model"] = module_builder(bindings["model"], bindings, convention)
    for role, owner in METHOD_ROLES.items():
        if role not in bindings and owner in bindings:
            found_method = method_role(role, bindings[owner], bindings, convention, module_name, roles)
            if found_method is not None:
                bindings[role], roles[role] = found_method
    for role in ("padding_mask", "subsequent_mask"):
        if role not in bindings:
            from_pair = masks_of_a_pair_helper(role, found, bindings, convention, module_name, roles)
            if from_pair is not None:
                bindings[role], roles[role] = from_pair
    if "positional_encoding" in bindings and bindings["positional_encoding"].works \
            and bindings["positional_encoding"].layout != UNBATCHED:  # (a table alone: read on a batch)
        table = Implementation(module_name, roles).build("positional_encoding", PROBE).eval()
        x = torch.zeros(2, 5, PROBE.d_model)
        given = positions_of(x) if table.tokens_for_positions else x
        named = dict(derived_inputs({"x": x}), x=given)
        if returns_table(first_tensor(table.inner(**adapt_arguments(table.arguments, named, convention))), x):
            bindings["positional_encoding"].adds_table = True
            bindings["positional_encoding"].notes.append("returns the (length, d_model) table, which its caller adds "
                                                         "to the embeddings: checked as x + table")
            roles["positional_encoding"] = module_builder(bindings["positional_encoding"], bindings, convention)
    shift = target_shift(bindings.get("model"), module_name, roles)
    if shift is not None:
        bindings["model"].target_shift = shift
        bindings["model"].notes.append(f"(its forward {shift} itself, as teacher forcing does: called with one more "
                                       "target position, its outputs read at the positions that read the target's "
                                       "tokens)")
        roles["model"] = module_builder(bindings["model"], bindings, convention)
    if any(b.layout == UNBATCHED for b in bindings.values()):  # the lookups and positions, one sequence at a time too
        for role in ("embedding", "positional_encoding"):
            if role in bindings and bindings[role].layout is None and bindings[role].works:
                works_in_layout(bindings[role], UNBATCHED, module_name, roles, bindings, convention, "",
                                UNBATCHED_NOTE.format(", as the rest of the code"))
    if any(b.layout == SEQUENCE_FIRST for r, b in bindings.items()  # the lookups and positions the model feeds are
           if r not in ("embedding", "positional_encoding")):      # called in the model's layout (unless its run
        for role in ("embedding", "positional_encoding"):          # shows them batch first)
            if role in bindings and bindings[role].layout is None and shown.get(role) != BATCH_FIRST:
                bindings[role].layout = SEQUENCE_FIRST
                bindings[role].notes.append("(sequence, batch, d_model) tensors, as the rest of the code")
                roles[role] = module_builder(bindings[role], bindings, convention)
        helper = bindings.get("padding_mask")
        if helper is not None and not helper.works:  # a helper for (sequence, batch) tokens, as the model takes?
            helper.layout = SEQUENCE_FIRST
            roles["padding_mask"] = role_builder(helper, bindings, convention)
            if canonical_call_error(Implementation(module_name, roles), "padding_mask") is None:
                helper.works = True
                helper.notes.append("((sequence, batch) tokens, as the rest of the code)")
                notes[:] = [n for n in notes if not n.startswith("padding_mask: ") or "does not work" not in n]
            else:
                helper.layout = None
                roles["padding_mask"] = role_builder(helper, bindings, convention)
    helper = next((r for r in ("subsequent_mask", "padding_mask") if r in bindings), None)
    inferred = infer_convention(bindings[helper].target, helper) if helper else None
    said_by_helper = bool(inferred) and ("convention" not in masks or masks.get("read_from") == helper)
    if helper and "convention" not in masks:  # the subsequent-mask helper's word first, else the padding helper's
        if inferred and inferred != base_convention(convention):  # (a shape of its masks stays as found)
            return bind_roles(namespace, module_name, {**overrides, "masks": {
                **masks, "convention": inferred, "read_from": helper}}, modules, prefer, observed)
    if helper is None and "convention" not in masks and "multi_head_attention" in bindings \
            and hides_a_masked_key(Implementation(module_name, roles)) is False:  # no helper: read by behaviour
        other = bind_roles(namespace, module_name, {**overrides, "masks": {**masks, "convention": "blocked"}},
                           modules, prefer, observed)
        if hides_a_masked_key(Implementation(module_name, other.roles)):
            other.notes.append("masks: read as True = blocked, the way the attention hides a masked key (no mask "
                               "helper says so)")
            return other
    named = [role for role in MASKED if role in bindings and bindings[role].works
             and takes_a_padding_mask(bindings[role].target)]
    keep_said = bool(named) and base_convention(convention) == "keep" and (
        masks.get("convention") == "keep" or helper and inferred == "keep"
        or "multi_head_attention" not in named and hides_a_masked_key(Implementation(module_name, roles)))
    # (an attention itself named for padding masks speaks for torch's two parts it is called in, not for whole masks)
    for role in named:
        masks_named_for_padding(bindings[role], module_name, roles, bindings, convention, keep_said)
    grafts = {}
    for binding in bindings.values():
        for source in binding.constructor.values():
            sub = bindings.get(source[5:]) if source.startswith("role:") else None
            problem = None if sub is None else build_error(sub, bindings) if sub.composes else "it fails under the canonical call"
            if problem and not any(n.startswith(f"{binding.role}: built with the reference's {sub.role} ")
                                   for n in notes):
                notes.append(f"{binding.role}: built with the reference's {sub.role} in place of {sub.name}, which "
                             f"does not work ({problem[:120]})")
                grafts.setdefault(binding.role, []).append(f"the reference's {sub.role} in place of {sub.name}")
        for sub in constructed_by_name(binding, bindings):
            notes.append(f"{binding.role}: built with the reference's {sub.role} standing in for {sub.name}, which "
                         f"{binding.name} builds itself and which does not work")
            grafts.setdefault(binding.role, []).append(f"the reference's {sub.role} standing in for {sub.name}")
    for binding in bindings.values():  # (what the constructor plan does not show)
        flag = causal_flag(binding.target) if inspect.isclass(binding.target) else None
        if flag and causal_by_default(binding.target, flag):
            binding.notes.append(f"(built with {flag}=False, as its author's code builds it too; with its default, "
                                 f"{flag}=True, where a check asks for its causal build)")
    if masks.get("told") == "by the attention":
        helpers_in_their_own_convention(bindings, roles, convention)
    found = Discovery(roles, bindings, convention, notes, grafts,
                      {role for role, binding in bindings.items() if not binding.works}, unbuilt)
    if found.unusable > found.embedding_token_ids and not {"head_axis", "key_vectors"} & set(masks):
        told = {"convention": base_convention(convention)} if "convention" in masks else {}  # (else read again)
        for shape in ("head_axis", "key_vectors"):  # masks of another shape?
            other = bind_roles(namespace, module_name, {**overrides, "masks": {
                **masks, **told, shape: True}}, modules, prefer, observed)
            if other.working > found.working:
                found = other
    if said_by_helper and "multi_head_attention" in found.bindings \
            and not called_in_the_code(getattr(found.bindings[helper].target, "__name__", ""), module_name) \
            and base_convention(found.bindings["multi_head_attention"].masks or found.convention) == base_convention(
                found.convention) and hides_a_masked_key(Implementation(module_name, found.roles)) is False:
        # (a helper the code calls makes the masks its blocks get; an attention given masks of another polarity, as
        # the author's own model gives them: that evidence holds too)
        return the_attentions_word(found, helper, namespace, module_name, overrides, modules, prefer, observed)
    return found


def the_attentions_word(found, helper, namespace, module_name, overrides, modules, prefer, observed):
    """Discovery with the masks read the way the multi-head attention reads them, where the code's mask helper says
    another convention than the one under which the attention hides a padded key (§3.2.3) and shows a real one: the
    helper's masks may never reach the blocks (a helper nothing calls, a torch-style helper beside an attention of
    the author's), and the blocks are checked as they take masks; each helper's own masks are read in their own
    convention (:func:`helpers_in_their_own_convention`). ``found`` where no other convention does so."""
    shape = {"head_axis": found.convention.endswith(HEAD_AXIS), "key_vectors": found.convention.endswith(KEY_VECTORS)}
    told = {k: v for k, v in overrides.get("masks", {}).items() if k != "read_from"}

    def hides(convention, **shaped):
        masks = {**told, **{k: v for k, v in shaped.items() if v}, "convention": convention, "told": "by the attention"}
        again = bind_roles(namespace, module_name, {**overrides, "masks": masks}, modules, prefer, observed)
        shown = "multi_head_attention" in again.bindings and hides_padded_keys(
            Implementation(module_name, again.roles), "multi_head_attention") == 1
        return again if shown else None
    if not any(shape.values()) and hides(base_convention(found.convention), head_axis=True):
        return found  # (the helper's word holds for masks with a head axis: their shape is the question)
    for other in ("keep", "blocked", "additive"):
        if other == base_convention(found.convention):
            continue
        again = hides(other, **shape)
        if again is not None:
            again.notes.append(f"masks: read as {describe_convention(again.convention)}, the way the attention hides a "
                               f"padded key; the {helper} helper's masks ({describe_convention(found.convention)}) "
                               "are read in their own convention, for its own checks")
            return again
    return found


def helpers_in_their_own_convention(bindings, roles, convention):
    """Each mask helper's masks read in the convention its output shows (:func:`infer_convention`), where the
    blocks take masks in another (:func:`the_attentions_word`)."""
    for role in ("subsequent_mask", "padding_mask"):
        binding = bindings.get(role)
        own = infer_convention(binding.target, role) if binding is not None else None
        if own and own != base_convention(convention):
            binding.masks = own + (binding.masks or convention)[len(base_convention(binding.masks or convention)):]
            roles[role] = role_builder(binding, bindings, convention)


def masks_as_the_author_passes_them(binding, observed):
    """The model's call plan where the author's own call passed a mask to a parameter the plan leaves at its
    default (``forward(src, tgt, mask=None)``, called with a look-ahead triangle): that parameter given the
    canonical mask over the same positions, the target's (..., Lt, Lt) or the source's (..., Ls); else None."""
    call = getattr(observed, "calls", {}).get(getattr(binding.target, "__name__", None))
    if call is None or not inspect.isclass(binding.target):
        return None
    forward = functools.partial(binding.target.forward, None)  # (its parameters after self)
    plan = binding.call or plan_arguments(forward, CANONICAL_CALLS["model"])
    try:
        passed = inspect.signature(forward).bind_partial(*call.args).arguments
    except TypeError:
        return None
    shapes = {name: value[1] for name, value in passed.items()
              if isinstance(value, tuple) and len(value) == 3 and value[0] == "tensor"}
    fed = dict(plan)
    source, target = (next((shapes.get(n) for n, c in plan if c == which), None) for which in ("src", "tgt"))
    if not source or not target:
        return None
    added = []
    for name, shape in shapes.items():
        if name in fed or "mask" not in normalize(name) or len(shape) < 2:
            continue
        if tuple(shape[-2:]) == (target[-1], target[-1]) and "tgt_mask" not in fed.values():
            added.append((name, "tgt_mask"))
        elif shape[-1] == source[-1] != target[-1] and "src_mask" not in fed.values():
            added.append((name, "src_mask"))
    return plan + added if added else None


def ran_in_the_authors_run(binding, observed):
    """Whether the author's own run called ``binding``'s class inside a forward pass of the author's model that
    completed: a block that fails under the canonical call only then is called otherwise by its author, not broken,
    and no stand-in of the reference's takes its place in the blocks that build it."""
    return getattr(observed, "completed", None) is not None and inspect.isclass(binding.target) \
        and binding.target.__name__ in getattr(observed, "calls", {})


def read_overrides(directory):
    """``conformance.toml`` next to the code: ``[roles] model = "make_model"``, ``[masks] convention = "blocked"``."""
    path = Path(directory) / "conformance.toml"
    if not path.is_file():
        return {}
    with open(path, "rb") as f:
        return tomllib.load(f)
