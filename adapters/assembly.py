"""The whole assembly: roles read from how the bound blocks are built and call each other.

Where several classes could play a role, the one the bound blocks build wins (:func:`assembled_together`); roles no
class was bound to on its own are found inside a bound block (:func:`parts_in_built_blocks`: a class it builds, a
method, a function its forward calls, the stacks of a model), and masks are planned as the model passes them.
"""
import ast
import contextlib
import inspect
import io
import re
import textwrap

import torch

from adapters import projections
from adapters.behaviour import canonical_call_error, helper_masks
from adapters.building import PROBE, Binding, authors_own_blocks, probe_build
from adapters.call_plans import SEQUENCE_FIRST, forward_parameters, in_torch_style, name_words, plan_arguments
from adapters.candidates import ROLE_ORDER, ranked
from adapters.construction import builds_a_module, constructor_plan_or_none
from adapters.masks import HEAD_AXIS, MASK_CONVENTIONS, from_convention, to_convention, torch_part
from adapters.names import (CANONICAL_CALLS, FUTURE_WORDS, ROLE_NAMES, SUBMODULE_NAMES, name_score,
                            names_another_role_exactly, names_padding_only, normalize)
from adapters.wrapping import Adapted, AdaptedModel, function_role
from conformance.contract.harness import PAD, Case, canonical_inputs
from conformance.contract.interface import FUNCTION_ROLES, Implementation

METHOD_ROLES = {"padding_mask": "model", "subsequent_mask": "model"}
"""Function roles that code often writes as a method of the block that uses them, and that do not depend on the
sizes the block was built with (an attention method reads its head width from the instance: not one of them)."""


def method_role(role, owner, bindings, convention, module_name, roles):
    """``(binding, function)`` for a function role written as a method of the ``owner`` binding's class
    (``Seq2Seq.make_src_mask(src)`` reading the pad index from the instance): the method of an instance built on
    the probe configuration, when its name says the role and it works under the role's canonical call; else None."""
    methods = sorted((name for name, value in vars(owner.target).items() if inspect.isfunction(value)
                      and method_names_the_role(name, role)), key=lambda name: -name_score(name, ROLE_NAMES[role]))
    if not methods:
        return None
    instance = probe_build(owner, bindings, convention)
    if instance is None:
        return None
    for name in methods:
        binding = Binding(role, f"{owner.name}.{name}", getattr(instance, name),
                          masks=helper_masks(role, bindings, convention))
        function = function_role(binding, convention)
        if role == "padding_mask":
            function = with_instance_pad(function)
        if canonical_call_error(Implementation(module_name, {**roles, role: function}), role) is None:
            return binding, function
    return None


def method_names_the_role(name, role):
    """Whether a method's name says it makes ``role``'s mask: a near miss of the role's names that is no other
    role's name exactly (``make_pad_mask`` is no subsequent mask), or, for the subsequent mask, a mask named for the
    future positions it hides (``create_autoregressive_mask``, §3.2.3)."""
    if names_another_role_exactly(name, role) or role == "subsequent_mask" and names_padding_only(name):
        return False
    words = name_words(name)
    return bool(name_score(name, ROLE_NAMES[role])) or role == "subsequent_mask" and "mask" in words \
        and bool(words & FUTURE_WORDS)


def with_instance_pad(padding_mask):
    """A padding-mask method reads the pad index its instance was built with (PAD): the canonical call's pad_idx
    is honoured by swapping the two token values before the call."""
    def padding_mask_of_instance(tokens, pad_idx):
        swapped = torch.where(tokens == pad_idx, PAD, torch.where(tokens == PAD, pad_idx, tokens))
        return padding_mask(swapped, PAD)
    return padding_mask_of_instance


ENCLOSED = {"multi_head_attention": ("attention",),
            "encoder_layer": ("multi_head_attention", "feed_forward", "layer_norm", "sublayer_connection"),
            "decoder_layer": ("multi_head_attention", "feed_forward", "layer_norm", "sublayer_connection"),
            "encoder": ("encoder_layer", "layer_norm"), "decoder": ("decoder_layer", "layer_norm"),
            "model": ("encoder", "decoder", "embedding", "positional_encoding", "generator")}
"""The roles whose blocks an enclosing role's block is built of (§3.1)."""


def encloses(outer, role):
    """Whether ``outer``'s block is built of ``role``'s, directly or through its parts."""
    return any(part == role or encloses(part, role) for part in ENCLOSED.get(outer, ()))


LAYERED = ("encoder_layer", "decoder_layer", "encoder", "decoder")
"""The parts that tell their enclosing block (the stack of the bound layers, the model of the bound stacks): the
other parts (a LayerNorm, a feed-forward network) are in every layer."""


def assembled_together(bindings, found):
    """The names of the candidates to prefer where a role has rivals (``found``, the candidates), the whole
    assembly deciding: the classes the outermost bound enclosing block is built of (those of the model when it is
    bound; the ``MultiHeadedAttention`` the stack's layers build, not an older ``MultiHeadAttention`` of the same
    file), else the enclosing classes built of the bound parts (the stack of the bound layers)."""
    inside = {}
    for role, binding in bindings.items():
        module = probe_build(binding, bindings) if inspect.isclass(binding.target) and binding.works else None
        if module is not None:
            inside[role] = {type(m) for m in module.modules() if m is not module}
    prefer = set()
    for role in ROLE_ORDER:
        classes = {name: obj for _, name, obj in ranked(role, found, set()) if inspect.isclass(obj)}
        if len(classes) < 2:
            continue
        if role == "model" and role in bindings and bindings[role].works:
            continue  # a working model is the anchor of the assembly, not chosen again by the parts it builds
        outers = [outer for outer in inside if encloses(outer, role)]
        outermost = [outer for outer in outers if not any(encloses(o, outer) for o in outers)]
        chosen = {name for name, cls in classes.items() if any(cls in inside[outer] for outer in outermost)}
        parts = {bindings[p].target for p in ENCLOSED.get(role, ()) if p in bindings and p in LAYERED}
        for name, cls in classes.items() if not chosen and parts else ():  # the stacks of bound layers
            module = probe_build(Binding(role, name, cls, constructor_plan_or_none(cls, role, bindings)), bindings)
            if module is not None and any(type(m) in parts for m in module.modules() if m is not module):
                chosen.add(name)
        prefer |= chosen
    return prefer


def parts_in_built_blocks(bindings, found, taken):
    """``{role: binding}`` for roles no class or function was bound to on its own, found inside a bound block as
    that block builds them (:attr:`Binding.part_of`): a class of the role's name the block builds
    (``ScaledDotProductAttention(temperature=d_k ** 0.5)``), a method of the multi-head block computing attention
    (``MultiHeadedAttention.attention``) or of the model computing the positional encodings
    (``Transformer.get_position_encoding``), and the stacks (:func:`stacks_in_the_model`)."""
    parts = stacks_in_the_model(bindings, found)
    for role in ROLE_ORDER:
        if role in bindings or role in parts or role in METHOD_ROLES or role == "model":
            continue
        outers = [o for o in ROLE_ORDER if o in bindings and encloses(o, role)
                  and builds_a_module(o, bindings[o].target)]
        for outer in outers:  # the innermost first (ROLE_ORDER goes outwards)
            block = probe_build(bindings[outer], bindings)
            kinds = {obj: name for _, name, obj in ranked(role, found, taken) if inspect.isclass(obj)}
            path = next((p for p, m in block.named_modules() if p and type(m) in kinds and can_play(role, m)),
                        None) if block else None
            if path is None and block is not None:  # a class of the submission's at an attribute named for the role
                kinds = {obj: name for name, obj in found.items() if inspect.isclass(obj) and name not in taken}
                path = next((p for p, m in block.named_modules() if type(m) in kinds and can_play(role, m)
                             and p.rsplit(".", 1)[-1].rstrip("_0123456789") in SUBMODULE_NAMES.get(role, ())), None)
            if path is not None:
                parts[role] = Binding(role, kinds[type(block.get_submodule(path))], type(block.get_submodule(path)),
                                      part_of=(bindings[outer], path, bindings), found_in=outer,
                                      notes=[f"(the {outer}'s {path}, as {bindings[outer].name} builds it)"])
                if role == "multi_head_attention" and projections.has_no_parameters(block.get_submodule(path)):
                    parts[role].notes.append(projections.describe(bindings[outer].target, path))
                break
            methods = [n for n, value in vars(bindings[outer].target).items()
                       if inspect.isclass(bindings[outer].target) and inspect.isfunction(value)
                       and n not in ("__init__", "forward")
                       and (name_score(n, ROLE_NAMES[role]) or normalize(n) in SHORT_NAMES.get(role, ()))]
            if block is not None and methods and role in FUNCTION_ROLES + ("positional_encoding",):
                parts[role] = Binding(role, f"{bindings[outer].name}.{methods[0]}", getattr(type(block), methods[0]),
                                      part_of=(bindings[outer], None, bindings), found_in=outer,
                                      notes=[f"(a method of the {outer}, called on it as {bindings[outer].name} "
                                             "builds it)"])
                break
            called = functions_called(bindings[outer].target, found, taken) if role == "attention" else []
            if called:
                parts[role] = Binding(role, called[0], found[called[0]], found_in=outer,
                                      notes=[f"(the function {bindings[outer].name}.forward calls)"])
                break
    return parts


def can_play(role, module):
    """Whether a sub-module a block builds may play ``role``: scaled dot-product attention has no weights of its own
    (§3.2.1), so a module holding parameters (a multi-head block with its projections, a cross-attention class)
    does not play ``attention``."""
    return role != "attention" or next(module.parameters(), None) is None


def functions_called(cls, found, taken):
    """The submission's own functions of three or more parameters that ``cls.forward`` calls by name, outermost calls
    first, none already bound: the attention of eq. (1) that a multi-head block calls, whatever its name
    (``sdpa(q, k, v, mask)``)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    except (TypeError, OSError, SyntaxError, AttributeError):
        return []
    names = [node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    return [name for name in dict.fromkeys(names) if name in found and name not in taken
            and inspect.isfunction(found[name]) and len(inspect.signature(found[name]).parameters) >= 3]


SHORT_NAMES = {"attention": ("attn", "attend")}
"""Short method names of a role (a method ``attn`` of a multi-head block)."""


def stacks_in_the_model(bindings, found):
    """``{role: binding}`` for the encoder and decoder stacks that no class of their own was bound to, found in the
    built model instead: the outermost of its blocks of the submission's own classes (``found``) that holds the bound
    encoder (decoder) layers and not the others (``ModelBlock(config, EncoderLayer)``). Its inputs are those of its
    layers' forward under the same names (a stack passes ``y`` and ``mask`` on to its layers)."""
    model = bindings.get("model")
    built = probe_build(model, bindings) if model is not None and model.works else None
    if built is None:
        return {}
    names = {cls: name for name, cls in found.items() if inspect.isclass(cls)}
    stacks = {}
    for role, layer, other in (("encoder", "encoder_layer", "decoder_layer"),
                               ("decoder", "decoder_layer", "encoder_layer")):
        if role in bindings or layer not in bindings:
            continue
        for path, block in built.named_modules():
            kinds = {type(m) for m in block.modules() if m is not block}
            if path and type(block) in names and bindings[layer].target in kinds \
                    and (other not in bindings or bindings[other].target not in kinds):
                inner = next(m for m in block.modules() if type(m) is bindings[layer].target)
                passed_on = dict(plan_arguments(inner, CANONICAL_CALLS[layer]))  # its layers' inputs, same names
                own = dict(plan_arguments(block, CANONICAL_CALLS[role]))
                call = [(p.name, passed_on.get(p.name, own.get(p.name))) for p in forward_parameters(block)]
                stacks[role] = Binding(role, names[type(block)], type(block), part_of=(model, path, bindings),
                                       found_in="model", call=[(name, c) for name, c in call if c],
                                       notes=[f"(the model's {path}, as {model.name} builds it)"])
                break
    return stacks


SEQUENCES_BY_LENGTH = {
    "multi_head_attention": {"tgt": ["query"], "src": ["key", "value"]},
    "encoder_layer": {"src": ["x"]}, "encoder": {"src": ["x"]},
    "decoder_layer": {"tgt": ["x"], "src": ["memory"]}, "decoder": {"tgt": ["x"], "src": ["memory"]},
}
"""The canonical sequences of each role the model's own run tells by their length: the target's stream (the
queries of the encoder-decoder attention, §3.2.3) and the source's (the memory, its keys and values)."""


LAYOUT_SHOWN = ("embedding", "positional_encoding", *SEQUENCES_BY_LENGTH)
"""The roles whose layout the model's own run tells: the blocks that mix positions, and the lookups and positions it
feeds, which a call in another layout does not make fail (a table written for (sequence, batch, d_model) tensors,
given them batch first, slices its rows by the batch and adds row b to every position of sample b)."""

BATCH_FIRST = "batch first"
"""The canonical layout, as the model's run shows it (a block's :attr:`Binding.layout` is then None)."""


def calls_as_the_model_makes_them(bindings, roles, module_name, layouts=None):
    """``{role: call plan}`` for the layers, stacks and attention blocks, read from how the author's own code calls
    them: the working model's forward, else each working stack's (one that embeds token ids itself run on tokens;
    built of the author's own blocks, on a source of 5 and a target of 7 positions). Each parameter gets the canonical input it was given there, the sequences told
    by their length (:data:`SEQUENCES_BY_LENGTH`: ``block(key, query, value, mask)`` called as
    ``block(x, x, x, src_mask)`` takes x three times; ``attention(k, context)`` called as ``attention(x, memory)``
    takes its queries first) and the masks by value. Only a call that shows every sequence of its role is read (an
    attention's encoder-decoder call, not its self-attention); a parameter it does not show keeps what the
    canonical plan gives it. Returns the plans that differ from the canonical one, and each block's mask polarity
    where its masks showed one (:func:`convention_shown`). ``layouts``, where given,
    gets the layout each block of :data:`LAYOUT_SHOWN` was called in (:func:`layout_shown`: :data:`SEQUENCE_FIRST`,
    :data:`BATCH_FIRST`), where all its calls that show one show the same."""
    implementation = Implementation(module_name, roles)
    case = Case(implementation, PROBE, batch=2, src_len=5, tgt_len=7, dtype=torch.float32, seed=0)
    plans, polarities, seen_layouts = {}, {}, {}
    for top in ("model", "encoder", "decoder"):
        if watched_run(top, bindings, implementation, case, plans, polarities, seen_layouts) and top == "model":
            break
    if layouts is not None:
        layouts.update({role: next(iter(seen - {None})) for role, seen in seen_layouts.items()
                        if len(seen - {None}) == 1})
    return ({role: plan for role, (_, plan) in plans.items() if plan},
            {role: next(iter(seen)) for role, seen in polarities.items() if len(seen) == 1})


def watched_run(top, bindings, implementation, case, plans, polarities, layouts=None):
    """Run the working ``top`` block (built of the author's own blocks) on its canonical inputs, adding to ``plans``
    (role -> (whether its call showed every sequence, plan or None)) what its calls of the other blocks show, to
    ``polarities`` (role -> {convention}) how the masks they are given read (:func:`convention_shown`), and to
    ``layouts`` (role -> the set of layouts its calls showed, :func:`layout_shown`) how the blocks of
    :data:`LAYOUT_SHOWN` were given their sequences; whether it ran."""
    binding = bindings.get(top)
    if binding is None or not binding.composes:  # (a stack that embeds token ids itself is run on tokens)
        return False
    try:
        with authors_own_blocks():
            adapted = implementation.build(top, PROBE)
    except Exception:  # the author's code: it is checked, not learned from
        return False
    if not isinstance(adapted, (AdaptedModel, Adapted)):
        return False
    inputs = canonical_inputs(case, top)
    if not binding.works:
        inputs = (case.tokens(inputs[0].shape[1], PROBE.vocab_size), *inputs[1:])
    convention = binding.masks or adapted.convention
    given = {mask: to_convention(value, convention) for mask, value in zip(CANONICAL_CALLS[top], inputs)
             if mask.endswith("mask")}
    canonical = {mask: value for mask, value in zip(CANONICAL_CALLS[top], inputs) if mask.endswith("mask")}
    lengths = {case.src_len: "src", case.tgt_len: "tgt"}
    hooks = []

    def arguments(module, args, kwargs):
        """One call's arguments by parameter name; None where they do not bind to its forward."""
        try:
            return inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments
        except TypeError:
            return None

    def note_polarity(role, passed, plan):
        """Add to ``polarities`` how each mask ``plan`` ((parameter, canonical input)) names was given (a part of
        torch's two, True = blocked by design, is no canonical mask and shows nothing)."""
        for name, c in plan:
            shown = convention_shown(passed.get(name), canonical.get(c))
            if shown:
                polarities.setdefault(role, set()).add(shown)

    def watch(role):
        def pre_hook(module, args, kwargs):
            if plans.get(role, (False,))[0]:
                return
            planned = bindings[role].call or plan_arguments(module, CANONICAL_CALLS[role])
            passed = arguments(module, args, kwargs)
            if passed is None:
                return
            learned, complete = learned_plan(role, passed, given, lengths, PROBE.d_model)
            note_polarity(role, passed, [*planned, *learned.items()])
            if complete:
                shown = set(learned.values())
                plan = [(name, learned.get(name, c)) for name, c in planned if name in learned or c not in shown]
                plan += [(name, c) for name, c in learned.items() if name not in dict(plan)]
                order = list(inspect.signature(module.forward).parameters)
                plan.sort(key=lambda entry: order.index(entry[0]))
            elif role not in plans:  # (its masks alone, where the canonical plan feeds the parameter nothing)
                taken = {name for name, _ in planned} | {c for _, c in planned}
                plan = list(planned) + [(name, c) for name, c in learned.items() if c.endswith("mask")
                                        and name not in taken and c not in taken]
            else:
                return
            plans[role] = (complete, plan if sorted(plan) != sorted(planned) else None)
        return pre_hook

    def watch_masks(role):  # (a block called by another block only, whose masks are all its call shows)
        def pre_hook(module, args, kwargs):
            passed = arguments(module, args, kwargs)
            if passed is None:
                return
            note_polarity(role, passed, bindings[role].call or plan_arguments(module, CANONICAL_CALLS[role]))
        return pre_hook

    def watch_layout(role):
        def pre_hook(module, args, kwargs):
            passed = arguments(module, args, kwargs)
            if passed is None:
                return
            layouts.setdefault(role, set()).add(layout_shown(passed, case.batch, lengths, PROBE.d_model))
        return pre_hook
    for role in dict.fromkeys((*SEQUENCES_BY_LENGTH, "attention", *(LAYOUT_SHOWN if layouts is not None else ()))):
        watched = bindings.get(role)
        if watched is None or role == top or not inspect.isclass(watched.target):
            continue
        part = watched.part_of  # (a block found in the model: that one, not every instance of its class)
        blocks = ([adapted.inner.get_submodule(part[1])] if part and part[0] is binding and part[1] else
                  [m for m in adapted.inner.modules() if type(m) is watched.target])
        if role in SEQUENCES_BY_LENGTH:
            hooks += [m.register_forward_pre_hook(watch(role), with_kwargs=True) for m in blocks]
        if role == "attention":
            hooks += [m.register_forward_pre_hook(watch_masks(role), with_kwargs=True) for m in blocks]
        if layouts is not None and role in LAYOUT_SHOWN:
            hooks += [m.register_forward_pre_hook(watch_layout(role), with_kwargs=True) for m in blocks]
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            adapted(*inputs)
    except Exception:  # the author's code
        return False
    finally:
        for hook in hooks:
            hook.remove()
    return True


def convention_shown(value, expected):
    """The convention (``keep``, ``blocked`` or ``additive``) in which the mask ``value`` a block was given by the
    author's own code is the canonical mask ``expected`` (True = may attend), whatever its shape (a head axis, the
    same mask for every query); None when it is neither, or not a mask (a model that makes its masks from the pad
    tokens, True where a token is padding, gives its layers masks read True = blocked)."""
    if not isinstance(value, torch.Tensor) or not isinstance(expected, torch.Tensor) or value.dim() < 2:
        return None
    shown = []
    for convention in ("additive",) if value.is_floating_point() and torch.isinf(value).any() else ("keep", "blocked"):
        read = from_convention(value, convention)
        read = read.squeeze(1) if read.dim() == 4 and read.size(1) == 1 else read
        try:
            shape = torch.broadcast_shapes(read.shape, expected.shape)
        except RuntimeError:
            return None
        if torch.equal(read.expand(shape), expected.expand(shape)):
            shown.append(convention)
    return shown[0] if len(shown) == 1 else None


def layout_shown(passed, batch, lengths, d_model):
    """The layout of one call's sequences (``passed``: its arguments by name; vectors d_model wide, 3-d, and token
    ids, 2-d): :data:`SEQUENCE_FIRST` where each has a length (one of ``lengths``) on axis 0 and the ``batch`` on axis
    1, :data:`BATCH_FIRST` where each has them the other way round; None where they show neither, or both."""
    shown = set()
    for value in passed.values():
        if not isinstance(value, torch.Tensor) or value.dtype == torch.bool:
            continue
        if (value.dim() == 3 and value.is_floating_point() and value.size(-1) == d_model) \
                or (value.dim() == 2 and not value.is_floating_point()):
            first, second = value.shape[:2]
            if first in lengths and second == batch:
                shown.add(SEQUENCE_FIRST)
            elif first == batch and second in lengths:
                shown.add(BATCH_FIRST)
    return shown.pop() if len(shown) == 1 else None


def learned_plan(role, passed, given, lengths, d_model):
    """``{parameter: canonical input}`` read from one call of a ``role`` block (``passed``: its arguments by
    name): the masks ``given`` by value, the sequences (tensors d_model wide) by their length (``lengths``: length
    -> "src" or "tgt"), and whether the call shows every sequence of its role (:data:`SEQUENCES_BY_LENGTH`)."""
    learned, sides = {}, {side: list(names) for side, names in SEQUENCES_BY_LENGTH[role].items()}
    for name, value in passed.items():
        if not isinstance(value, torch.Tensor):
            continue
        mask = next((mask for mask, expected in given.items() if mask in CANONICAL_CALLS[role]
                     and value.shape == expected.shape and torch.equal(value, expected)), None)
        side = {lengths[s] for s in value.shape[:-1] if s in lengths} if value.is_floating_point() \
            and value.dim() >= 2 and value.size(-1) == d_model else set()
        if mask is not None:
            learned[name] = mask
        elif side - sides.keys():  # (a sequence this role does not take: the call is another's use of the class)
            return {}, False
        elif len(side) == 1:
            names = sides[side.pop()]
            learned[name] = names.pop(0) if len(names) > 1 else names[0]
    shown = set(learned.values())
    return learned, all(any(c in shown for c in names) for names in SEQUENCES_BY_LENGTH[role].values())


def masks_of_encode_and_decode(bindings, roles, module_name):
    """The mask convention of a model whose ``forward`` makes its masks from the pad tokens it is given while its
    ``encode`` and ``decode`` take masks: that of the stacks they pass them on to (found by behaviour, a head axis
    for instance); None when the model's own is already set, or no stack took another one."""
    model = bindings.get("model")
    if model is None or not model.works or model.masks is not None:
        return None
    try:
        adapted = Implementation(module_name, roles).build("model", PROBE)
    except Exception:  # the author's code: it is checked, not learned from
        return None
    if not isinstance(adapted, AdaptedModel) or adapted.forward_arguments is None \
            or adapted.encode_arguments is None or not adapted.masks_from_tokens:
        return None
    return next((bindings[role].masks for role in ("encoder", "decoder", "encoder_layer", "decoder_layer")
                 if role in bindings and bindings[role].masks), None)


def encode_and_decode_as_forward_calls_them(bindings, roles, module_name):
    """``({"encode": plan, "decode": plan}, mask convention)`` for a model whose ``forward`` takes torch's two mask
    parts and hands its own ``encode`` and ``decode`` masks of its making (``self.encode(src, src_padding_mask
    .unsqueeze(1).unsqueeze(2))``): each of their mask parameters planned as a torch part (:func:`in_torch_style`)
    that the forward's call gives the canonical mask whole takes it whole, in the one convention (polarity and
    shape, :data:`MODEL_CONVENTIONS`) in which every such value is the canonical mask. None where nothing changes
    (a forward passing its parts on, or not calling them) or no one convention says every value. The convention is
    then the model's: every mask its forward takes is one of torch's parts, in torch's convention whatever it is."""
    model = bindings.get("model")
    implementation = Implementation(module_name, roles)
    try:
        adapted = implementation.build("model", PROBE) if model is not None and model.works else None
    except Exception:  # the author's code: it is checked, not learned from
        return None
    if not isinstance(adapted, AdaptedModel) or adapted.forward_arguments is None or adapted.encode_arguments is None \
            or not in_torch_style(adapted.encode_arguments + adapted.decode_arguments) \
            or any(c.endswith("mask") for _, c in adapted.forward_arguments):  # (its own masks all torch's parts)
        return None
    inputs = canonical_inputs(Case(implementation, PROBE, batch=2, src_len=5, tgt_len=7, dtype=torch.float32, seed=0),
                              "model")
    canonical, passed = dict(zip(CANONICAL_CALLS["model"], inputs)), {}

    def watched(method, own):
        def call(*args, **kwargs):
            with contextlib.suppress(TypeError):
                passed.setdefault(method, inspect.signature(own).bind_partial(*args, **kwargs).arguments)
            return own(*args, **kwargs)
        return call
    for method in ("encode", "decode"):
        setattr(adapted.inner, method, watched(method, getattr(adapted.inner, method)))
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            adapted(*inputs)
    except Exception:  # the author's code
        return None

    def whole(value, mask, convention):
        made = to_convention(canonical[mask], convention)
        return isinstance(value, torch.Tensor) and value.shape == made.shape and torch.equal(value.to(made.dtype), made)
    plans = {"encode": adapted.encode_arguments, "decode": adapted.decode_arguments}
    parts = [(method, name, part[0]) for method, plan in plans.items() for name, c in plan if (part := torch_part(c))]
    for convention in MODEL_CONVENTIONS:
        learned = {(method, name): mask for method, name, mask in parts
                   if whole(passed.get(method, {}).get(name), mask, convention)}
        if learned and len(learned) == len(parts):
            return {method: [(name, learned.get((method, name), c)) for name, c in plan]
                    for method, plan in plans.items()}, convention
    return None


MODEL_CONVENTIONS = tuple(base + shape for base in MASK_CONVENTIONS for shape in ("", HEAD_AXIS))
"""The conventions in which a model's forward may hand its ``encode`` and ``decode`` their masks whole."""


def masks_of_a_pair_helper(role, found, bindings, convention, module_name, roles):
    """``(binding, function)`` for a mask role played by one element of a helper that makes both masks at once
    (``create_masks(src, tgt, pad) -> (src_mask, tgt_mask)``, §3.2.3): the element as wide as the source is the
    padding mask, the (target, target) one the target's mask (its padding and the subsequent positions); each is
    bound when it works under the role's canonical call; else None. Only a function named for masks whose code
    builds a triangle is called."""
    for name, helper in found.items():
        element = pair_element(helper, role) if inspect.isfunction(helper) and "mask" in normalize(name) else None
        if element is None:
            continue
        binding = Binding(role, f"{name} (its {'source' if role == 'padding_mask' else 'target'} mask)", element,
                          masks=helper_masks(role, bindings, convention))
        function = function_role(binding, convention)
        if canonical_call_error(Implementation(module_name, {**roles, role: function}), role) is None:
            return binding, function
    return None


def pair_element(helper, role):
    """The function of the canonical arguments of ``role`` that calls ``helper(src, tgt[, pad])`` and returns the
    element of its pair of masks that plays ``role``; None when ``helper`` makes no such pair."""
    try:
        required = [p for p in inspect.signature(helper).parameters.values() if p.default is p.empty]
        source = inspect.getsource(helper)
    except (TypeError, ValueError, OSError):
        return None
    if len(required) not in (2, 3) or not re.search(r"\b(triu|tril)\b", source):
        return None

    def masks(src, tgt, pad_idx):
        return helper(src, tgt, pad_idx) if len(required) == 3 else helper(src, tgt)
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            pair = masks(torch.full((2, 5), PAD + 1), torch.full((2, 4), PAD + 1), PAD)
    except Exception:  # the author's helper, on tokens it was not written for: no pair
        return None
    if not isinstance(pair, (tuple, list)) or len(pair) < 2 or not all(isinstance(m, torch.Tensor) for m in pair):
        return None
    sides = [i for i, m in enumerate(pair) if m.shape[-1] == 5] + [i for i, m in enumerate(pair)
                                                                    if m.dim() >= 2 and m.shape[-2:] == (4, 4)]
    if len(sides) != 2 or sides[0] == sides[1]:
        return None
    source_side, target_side = sides

    def padding_mask(tokens, pad_idx):
        return masks(tokens, tokens[..., :1].clone().fill_(pad_idx + 1), pad_idx)[source_side]

    def target_mask(tgt):
        return masks(tgt[..., :1].clone().fill_(PAD + 1), tgt, PAD)[target_side]
    return padding_mask if role == "padding_mask" else target_mask
