"""Wrap a bound candidate under its role's canonical call: the builders and callables an Implementation holds.

A module role is built from its plan and wrapped (:class:`Adapted`, :class:`AdaptedModel` for the whole model,
through its forward or its ``encode`` and ``decode``); a function role (attention, the mask helpers) becomes a
callable taking the canonical arguments. Inputs are given by the call plan, masks in the code's convention, tensors
in its layout.
"""
import ast
import contextlib
import copy
import dataclasses
import functools
import inspect
import itertools

import torch
import torch.nn as nn

from adapters import alignment, recipes
from adapters.building import PROBE, build_from_plan, probe_build
from adapters.call_plans import (LENGTH, SEQUENCE_FIRST, UNBATCHED, adapt_arguments, argument_values, derived_inputs,
                                 first_tensor, forward_parameters, from_layout, in_layout, in_torch_style, output_among,
                                 inputs_not_accepted, name_words, per_sample, plan_arguments, positions_of,
                                 returns_table, setup_call, stacked)
from adapters.construction import causal_by_default, causal_flag, constructed_with, hyperparameters_fed
from adapters.lint import self_attributes
from adapters.masks import (FULL_SHAPE, HEAD_AXIS, KEY_VECTORS, LENGTHS, from_convention, full_masks, probe_masks,
                            torch_part)
from adapters.names import CANONICAL_CALLS, normalize
from conformance.contract.harness import PAD
from conformance.contract.interface import FUNCTION_ROLES, Config


class Transparent(nn.Module):
    """A wrapper whose parameters are named as in the wrapped module (``w_q.weight``, not ``inner.w_q.weight``), so
    that checks matching parameter names (the reference's weights copied by name) see the candidate's own."""

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self.inner.named_parameters(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)


class Adapted(Transparent):
    """A candidate module under the canonical call of its role (inputs by name, masks converted, tensors in the
    code's layout)."""

    def __init__(self, inner, role, convention, layout=None, arguments=None, tokens_for_positions=False,
                 adds_table=False):
        super().__init__()
        self.inner, self.role, self.convention, self.layout = inner, role, convention, layout
        self.arguments = arguments or plan_arguments(inner, CANONICAL_CALLS[role])
        self.tokens_for_positions, self.adds_table = tokens_for_positions, adds_table
        """A positional encoding called with token ids (only their shape counts) instead of the embeddings."""
        self.setup, self.setup_arguments = setup_call(inner, role, {c for _, c in self.arguments})
        self.given, self.masks_cut = None, False
        owned = owned_sub_layer(inner) if role == "sublayer_connection" and "sublayer" not in {
            c for _, c in self.arguments} else None
        if owned is not None:  # (the wrapper owns its sub-layer: the one the canonical call gives takes its place)
            self.given = GivenSubLayer()
            setattr(inner, owned, self.given)

    def forward(self, *args):
        """The block called on copies of the tensors it is given, as its author's enclosing block calls it with
        tensors made for it alone (an embedding's output, a sum): a block adding to its input in place
        (``x += pe``) leaves the checker's own tensors, to which its output is compared, as they were."""
        args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        if self.layout == UNBATCHED:
            return per_sample(self.called, args)
        return self.called(*args)

    def called(self, *args):
        """The block's output for the canonical inputs ``args`` (one sample's, for code without a batch axis)."""
        named = derived_inputs(dict(zip(CANONICAL_CALLS[self.role], args)))
        named = in_layout(full_masks(named) if (self.convention or "").endswith(FULL_SHAPE) else named, self.layout)
        if self.given is not None:
            self.given.function = named["sublayer"]
        if self.setup:  # state the forward reads, set first as the author's own code does (init_keys(key))
            getattr(self.inner, self.setup)(**argument_values(self.setup_arguments, named, self.convention))
        given = dict(named, x=positions_of(named["x"])) if self.tokens_for_positions else named
        # whether the call's masks hide keys from some queries only (a causal triangle) where key vectors cannot
        # say it: masks given as key vectors, or in torch's two parts with a key-padding parameter only
        fed = {torch_part(c) or (c, None) for _, c in self.arguments}
        self.masks_cut = any(
            name.endswith("mask") and isinstance(m, torch.Tensor) and m.dim() == 3
            and not torch.equal(m, m.any(-2, keepdim=True).expand_as(m))
            and ((self.convention or "").endswith(KEY_VECTORS)
                 or (name, "padding") in fed and not {(name, None), (name, "attention")} & fed)
            for name, m in named.items())
        out = output_among(self.inner(**adapt_arguments(self.arguments, given, self.convention)), self.role, named)
        if self.role == "positional_encoding" and returns_table(out, named["x"], self.adds_table):
            out = named["x"] + out  # the (length, d_model) table alone: its caller adds it, as the author's does
        if self.role in ("encoder", "decoder") and isinstance(out, torch.Tensor) and out.dim() == 4 \
                and out.shape[1:3] == named["x"].shape[:2]:
            out = out[-1]  # every layer's output stacked on a new first axis (DETR's decoder): the last layer's
        return from_layout(out, self.layout)

    def around(self, inner):
        """This adapter (its call plan, masks and layout) around ``inner``, another instance of its module's class
        (one built inside a block), sharing nothing else with it."""
        other = copy.copy(self)
        other._modules = dict(self._modules, inner=inner)
        return other

    def inputs_not_accepted(self):
        """See :func:`inputs_not_accepted`; nothing for a forward not defined at all (its own error says why)."""
        forward = type(self.inner).forward
        if forward is nn.Module.forward:
            return [], None
        missing, signature = inputs_not_accepted(forward, self.arguments, CANONICAL_CALLS[self.role],
                                                 f"{type(self.inner).__name__}.forward", skip=1)
        given = {"sublayer"} if self.given is not None else set()
        return [c for c in missing if c not in {c for _, c in self.setup_arguments} | given], signature

    def unfed_mask_parameters(self):
        """The parameters of its forward named for a mask that its call plan gives nothing."""
        return unfed_mask_parameters(self.inner, self.arguments)


class GivenSubLayer(nn.Module):
    """In place of the sub-layer a residual wrapper owns (``SubLayer(layer, d_model)``, whose forward takes no
    callable): the sub-layer the canonical call gives (§3.1's Sublayer(x)), applied to the first input the wrapper
    passes on (its other inputs, a context or a mask, are the owned sub-layer's own business)."""

    def __init__(self):
        super().__init__()
        self.function = None

    def forward(self, x, *args, **kwargs):
        return self.function(x)


def owned_sub_layer(wrapper):
    """The attribute name of the one child of a residual wrapper that holds a weight matrix (the sub-layer it owns
    and calls itself: not its norm, whose gain and bias are vectors, nor its dropout), or None."""
    owned = [name for name, child in wrapper.named_children() if any(p.dim() > 1 for p in child.parameters())]
    return owned[0] if len(owned) == 1 else None


def unfed_mask_parameters(module, arguments):
    """The parameters of ``module``'s forward named for a mask (``cross_attention_mask``) that the call plan
    ``arguments`` gives nothing: the checker could not tell which of its masks each one takes."""
    fed = {name for name, _ in arguments or ()}
    return [p.name for p in forward_parameters(module) if "mask" in normalize(p.name) and p.name not in fed]


def random_state(device, state=None):
    """The state of the generator dropout draws from on ``device`` (CPU, or the device's own), or set it back."""
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device) if state is None else torch.cuda.set_rng_state(state, device)
    return torch.random.get_rng_state() if state is None else torch.random.set_rng_state(state)


class AdaptedModel(Transparent):
    """A whole model under the canonical call: through its own ``forward`` when that takes the source and the
    target, else through its ``encode`` and ``decode`` methods. Its output is the decoder output (``d_model``
    features): the call's own result when it has that shape, else, for a call ending in log-probabilities or
    logits, the last output of that shape one of the model's sub-modules made (the decoder's, or its final norm's),
    read with forward hooks. What the author's own call returned is kept as :attr:`raw_output`. ``calls``: the plans
    of ``encode`` and ``decode`` as its own forward calls them, where discovery read them from its run."""

    def __init__(self, inner, convention, d_model=None, layout=None, target_shift=None, arguments=None,
                 calls=None):
        super().__init__()
        self.inner, self.convention, self.d_model, self.layout = inner, convention, d_model, layout
        self.target_shift = target_shift
        """How its forward shifts the target (:mod:`adapters.alignment`): it is then called with one more target
        position, and its outputs read at the positions that read the canonical target's tokens."""
        methods = callable(getattr(inner, "encode", None)) and callable(getattr(inner, "decode", None))
        own_forward = type(inner).forward is not nn.Module.forward
        forward_plan = (arguments or plan_arguments(inner, CANONICAL_CALLS["model"])) if own_forward else []
        self.forward_arguments = (forward_plan if {c for _, c in forward_plan} >= {"src", "tgt"} or not methods
                                  else None)
        torch_style = in_torch_style(forward_plan)  # encode and decode take their masks as forward does
        by_name = not forward_plan  # (whole, where forward takes them whole whatever its names say)
        self.encode_arguments = (plan_arguments(inner.encode, ["src", "src_mask"], torch_style, by_name)
                                 if methods else None)
        self.decode_arguments = (plan_arguments(inner.decode, ["memory", "src_mask", "tgt", "tgt_mask"], torch_style,
                                                by_name) if methods else None)
        if calls:  # (as the author's own forward calls them, read from its run)
            self.encode_arguments, self.decode_arguments = calls["encode"], calls["decode"]

    @property
    def masks_from_tokens(self):
        """A model that takes no mask builds its own from the pad index: the positions the canonical masks pad are
        given the pad token, so that its masks are the canonical ones."""
        return "src_mask" not in {c.split(":")[0] for _, c in (self.forward_arguments or self.encode_arguments or [])}

    @property
    def reads_a_start_token(self):
        """Its decoder reads a start token of the model's own before the target's (:data:`alignment.PREPENDS`)."""
        return self.target_shift == alignment.PREPENDS and self.forward_arguments is not None

    def by_encode_and_decode(self):
        """The same model called through its ``encode`` and ``decode`` methods (the path its author's own decoding
        takes) when the canonical call goes through its ``forward``; else None, and None for a ``forward`` that makes
        its own masks from the pad index (``forward(x, y)``): nothing the checker saw says in what shape and
        convention ``encode`` and ``decode`` take them."""
        if self.forward_arguments is None or self.encode_arguments is None or self.masks_from_tokens:
            return None
        other = copy.copy(self)
        other.forward_arguments = None
        if not (self.convention or "keep").endswith((HEAD_AXIS, KEY_VECTORS, FULL_SHAPE)) and not other.runs() \
                and copy.copy(other).given_a_head_axis().runs():
            other.given_a_head_axis()  # (as its author's own decoding gives them, forward adding it itself)
        return other

    def given_a_head_axis(self):
        """This model with its masks given a head axis, (batch, 1, Lq|1, Lk)."""
        self.convention = (self.convention or "keep") + HEAD_AXIS
        return self

    def runs(self):
        """Whether a call of two samples, 5 source and 4 target positions (the last source position padded)
        returns, the random state left as it was."""
        device = next(itertools.chain(self.inner.parameters(), self.inner.buffers()), torch.empty(0)).device
        state = random_state(device)
        try:
            with torch.no_grad():
                self(torch.randint(1, 7, (2, 5), device=device), torch.randint(1, 7, (2, 4), device=device),
                     *probe_masks(device))
            return True
        except Exception:  # (the author's code, called with masks of a shape it does not take)
            return False
        finally:
            random_state(device, state)

    def forward(self, src, tgt, src_mask, tgt_mask):
        """The call as planned; where the first call finds that the model's own forward does not give the decoder
        output (and so turns to ``encode`` and ``decode``), that call is made again from the same inputs and the
        same random state, as every later call will be made: two calls of one model always agree on the path (and
        on whether the masked tokens are replaced by the pad token, which only a maskless forward needs)."""
        planned, state = self.forward_arguments, random_state(src.device)
        out = self.called_as_planned(src, tgt, src_mask, tgt_mask)
        if planned is not None and self.forward_arguments is None:
            random_state(src.device, state)
            out = self.called_as_planned(src, tgt, src_mask, tgt_mask)
        return out

    def called_as_planned(self, src, tgt, src_mask, tgt_mask):
        if self.masks_from_tokens:
            src = src.masked_fill(~src_mask.any(-2).expand_as(src), PAD)  # (the keys no query may see)
            tgt = tgt.masked_fill(~tgt_mask.any(-2).expand_as(tgt), PAD)
        if self.target_shift is None or self.layout is not None or self.forward_arguments is None:
            return self.called(src, tgt, src_mask, tgt_mask)  # (encode and decode are given the target as it is)
        length = alignment.decoder_length(tgt.size(1), self.target_shift)
        tgt, tgt_mask = alignment.extended(tgt, tgt_mask, self.target_shift, PAD)
        out = self.called(src, tgt, src_mask, tgt_mask, length=length)
        self.raw_output = alignment.aligned(self.raw_output, self.target_shift)
        return alignment.aligned(out, self.target_shift)

    def called(self, src, tgt, src_mask, tgt_mask, length=None):
        """The decoder output of the author's call (``length``: how many target positions its decoder reads,
        where that is not ``tgt``'s); for code without a batch axis, one sample at a time."""
        if self.layout != UNBATCHED:
            return self.called_once(src, tgt, src_mask, tgt_mask, length)
        raw = []

        def one_sample(*inputs):
            out = self.called_once(*inputs, length)
            raw.append(self.raw_output)
            return out
        out = per_sample(one_sample, (src, tgt, src_mask, tgt_mask))
        self.raw_output = stacked(raw)
        return out

    def called_once(self, src, tgt, src_mask, tgt_mask, length=None):
        """:meth:`called` on inputs in the code's layout (a sample's, for code without a batch axis)."""
        named = in_layout({"src": src, "tgt": tgt, "src_mask": src_mask, "tgt_mask": tgt_mask}, self.layout)
        wanted = (*named["tgt"].shape[:2], self.d_model)
        if length is not None:
            wanted = (wanted[0], length, self.d_model)
        if self.forward_arguments is not None:
            call = lambda: self.inner(**self.forward_values(named))  # noqa: E731
            if self.encode_arguments is None:  # nothing else to call: its output, whatever it is, is checked
                out, raw = decoder_output(self.inner, wanted, call)
                self.raw_output = from_layout(raw, self.layout)
                return from_layout(raw if out is None else out, self.layout)
            try:
                out, raw = decoder_output(self.inner, wanted, call)
            except TypeError:  # a forward that does not fit the canonical call: encode and decode are used
                out = None
            if out is not None:
                self.raw_output = from_layout(raw, self.layout)
                return from_layout(out, self.layout)
            self.forward_arguments = None
        named["memory"] = first_tensor(self.inner.encode(**argument_values(self.encode_arguments, named,
                                                                           self.convention)))
        decode = lambda: self.inner.decode(**argument_values(self.decode_arguments, named, self.convention))  # noqa: E731
        out, raw = decoder_output(self.inner, wanted, decode)
        self.raw_output = from_layout(raw, self.layout)
        return from_layout(raw if out is None else out, self.layout)

    def forward_values(self, named):
        """The keyword arguments of its own forward for the canonical inputs ``named``; its masks whole where its
        convention says so (:func:`whole_model_masks`)."""
        values = argument_values(self.forward_arguments, named, self.convention)
        if self.layout is None and (self.convention or "").endswith(FULL_SHAPE):
            return whole_model_masks(values, self.forward_arguments, named, self.convention)
        return values

    def inputs_not_accepted(self):
        """The canonical inputs a model called through its own forward only takes no parameter for (not its masks
        when it makes them from the pad tokens it is given)."""
        if self.forward_arguments is None:
            return self.encode_and_decode_inputs_not_accepted()
        if self.encode_arguments is not None:
            return [], None
        missing, signature = inputs_not_accepted(type(self.inner).forward, self.forward_arguments,
                                                 CANONICAL_CALLS["model"], f"{type(self.inner).__name__}.forward", skip=1)
        return [c for c in missing if not (self.masks_from_tokens and c.endswith("mask"))], signature

    def unfed_mask_parameters(self):
        """See :meth:`Adapted.unfed_mask_parameters` (its forward's, when called through it)."""
        return unfed_mask_parameters(self.inner, self.forward_arguments) if self.forward_arguments else []

    def encode_and_decode_inputs_not_accepted(self):
        """The masks that ``encode`` or ``decode`` take no parameter for, and the signatures of those that drop one
        (joined by "and"): a source padding mask dropped by either leaves the padded source visible."""
        missing, shown = [], []
        for method, arguments, wanted in (("encode", self.encode_arguments, ["src_mask"]),
                                          ("decode", self.decode_arguments, ["src_mask", "tgt_mask"])):
            planned = {torch_part(c) for _, c in arguments}  # (torch's attention part alone drops the padding)
            kept = [(n, c) for n, c in arguments
                    if (torch_part(c) or (c, None))[1] != "attention" or (torch_part(c)[0], "padding") in planned]
            dropped, signature = inputs_not_accepted(getattr(type(self.inner), method), kept, wanted,
                                                     f"{type(self.inner).__name__}.{method}", skip=1)
            missing += [c for c in dropped if c not in missing]
            halved = {c.split(":")[0] for _, c in arguments} - {c.split(":")[0] for _, c in kept}
            if dropped:
                shown.append(signature + (" (its mask taken as torch's attention part, without the padding)"
                                          if set(dropped) <= halved else ""))
        return ([], None) if self.masks_from_tokens else (missing, " and ".join(shown) or None)


def decoder_output(model, shape, call):
    """``(the decoder output, the call's result)`` of ``call`` (a call of ``model``): the result when it has
    ``shape`` (batch, target length, d_model), else the last output of that shape a sub-module of ``model``
    returned during the call, else None."""
    made = []

    def record(module, args, output):
        output = first_tensor(output)
        if isinstance(output, torch.Tensor) and tuple(output.shape) == shape:
            made.append(output)
    hooks = [m.register_forward_hook(record) for m in model.modules() if m is not model]
    try:
        out = first_tensor(call())
    finally:
        for hook in hooks:
            hook.remove()
    if isinstance(out, torch.Tensor) and tuple(out.shape) == shape:
        return out, out
    return (made[-1] if made else None), out


TENSOR_SIZE_NAMES = {"seq", "tgt", "trg", "x", "tokens", "sequence", "target"}


def function_role(binding, convention):
    """The canonical callable for a function role (attention, the mask helpers)."""
    convention = binding.masks or convention
    target, role = binding.target, binding.role
    if role == "subsequent_mask":
        arguments = plan_arguments(target, CANONICAL_CALLS[role])

        name, _ = next(((n, c) for n, c in arguments if c == "size"), ("size", "size"))
        takes_tokens = normalize(name) in TENSOR_SIZE_NAMES

        def called_with(value):
            return from_convention(target(**argument_values(arguments, {"size": value}, "keep")), convention)

        def subsequent_mask(size):
            return called_with(torch.ones(1, size, dtype=torch.long) if takes_tokens else size)
        if takes_tokens:  # a target-mask helper (``make_trg_mask(trg)``, pad index PAD): its padding is checked too
            subsequent_mask.of_tokens = called_with
        return subsequent_mask
    if role == "padding_mask":
        arguments = plan_arguments(target, CANONICAL_CALLS[role])
        by_lengths = any(c.endswith(":" + LENGTHS) for _, c in arguments)

        def padding_mask(tokens, pad_idx):
            named = in_layout(dict(zip(CANONICAL_CALLS[role], (tokens, pad_idx)), **{LENGTH: tokens.size(-1)}),
                              binding.layout)  # (a helper told its rows: as many queries as keys, self-attention's)
            if by_lengths:  # (the tokens' padding as their lengths, where lengths can say it)
                named["src_mask"] = (tokens != pad_idx).unsqueeze(-2)
            mask = from_convention(target(**adapt_arguments(arguments, named, None)), convention)
            if by_lengths:
                mask = over_every_key(mask, tokens.size(-1))
            if binding.layout == SEQUENCE_FIRST and isinstance(mask, torch.Tensor) and mask.shape == tokens.shape:
                mask = mask.unsqueeze(-2)  # torch's key-padding mask, (batch, length) in either layout
            return mask
        padding_mask.hyperparameters = {"pad_idx"} & {c for _, c in arguments}  # (a pad index its code may fix)
        return padding_mask
    return attention_function(binding, convention)


def over_every_key(mask, length):
    """A mask made from sequence lengths, over the keys of the longest sequence (a batch padded to it, as its
    author's data is), widened to ``length`` keys: those past every sequence's end are padding in every row."""
    if not isinstance(mask, torch.Tensor) or mask.size(-1) >= length:
        return mask
    return torch.cat([mask, mask.new_zeros(*mask.shape[:-1], length - mask.size(-1))], -1)


def attention_function(binding, convention):
    """The canonical attention callable of ``binding``: a function, an attention module such as
    ``ScaledDotProductAttention(d_k, dropout)`` or a method of a multi-head block, each built for the width of the
    queries and, where they come split into heads (batch, h, length, d_k), for that many heads: a block's method
    that reads its sizes from its block (``self.d_model``) sees the d_model = h·d_k of the queries it is given."""
    target = binding.target

    def callee(query):
        if binding.part_of is None and not inspect.isclass(target):
            return target
        h = query.size(-3) if query.dim() >= 4 else PROBE.h
        cfg = dataclasses.replace(PROBE, d_model=query.size(-1) * h, h=h)
        if binding.part_of is not None and binding.part_of[1] is None:  # a method of a block
            owner, _, within = binding.part_of
            block = build_from_plan(owner, cfg, within, convention=convention).to(query.device, query.dtype).eval()
            return getattr(block, target.__name__)
        return build_from_plan(binding, cfg, {}, convention=convention).to(query.device, query.dtype).eval()

    def attention(query, key, value, mask=None):
        function = callee(query)
        arguments = plan_arguments(function, CANONICAL_CALLS["attention"])
        if inspect.ismethod(function) and not {"key", "value"} <= {c for _, c in arguments}:
            for canonical, attribute in stored_inputs(function).items():  # keys and values its block holds
                setattr(function.__self__, attribute, key if canonical == "key" else value)
        return function(**adapt_arguments(arguments, dict(zip(CANONICAL_CALLS["attention"], (query, key, value, mask))),
                                          convention))
    if binding.part_of is None and not inspect.isclass(target):
        attention.inputs_not_accepted = lambda: inputs_not_accepted(
            target, plan_arguments(target, CANONICAL_CALLS["attention"]), CANONICAL_CALLS["attention"], binding.name)
    elif binding.part_of is not None and binding.part_of[1] is None:
        attention = method_attention(binding, attention)
    return attention


def method_attention(binding, attention):
    """``attention``, the canonical call of an attention written as a method of a block (``Owner.method(Q, K, V)``),
    with what a free function's has: ``inputs_not_accepted``, the canonical inputs its parameters take none of (the
    keys and values its block stores for it taken), and, where the block's constructor has a causal switch
    (``MultiHeadAttention(d_model, h, masking=False)``, :func:`causal_flag`), ``causal``: the same call on the block
    built with that switch on, as the author's decoder builds its masked self-attention (§3.2.3)."""
    owner, function = binding.part_of[0], binding.target
    unbound = functools.partial(function, None)  # (its signature after ``self``)
    wanted = CANONICAL_CALLS["attention"]

    def not_accepted():
        missing, signature = inputs_not_accepted(unbound, plan_arguments(unbound, wanted), wanted, binding.name)
        stored = stored_inputs_of(owner.target, function) if inspect.isclass(owner.target) else {}
        return [c for c in missing if c not in stored], signature
    attention.inputs_not_accepted = not_accepted
    flag = causal_flag(owner.target) if inspect.isclass(owner.target) else None
    if flag:
        def causal(query, key, value, mask=None):
            with constructed_with(owner.target, flag, True):
                return attention(query, key, value, mask)
        causal.inputs_not_accepted = not_accepted
        attention.causal = causal
    return attention


def stored_inputs(method):
    """``{"key": attribute, "value": attribute}`` for an attention method that reads its keys and values from its
    block, where another method stored them (``init_keys(key)`` setting ``self.key_heads``, ``self.value_heads``,
    which ``attend(query, mask)`` reads): the attributes it reads that ``__init__`` and it itself do not set, named
    for keys and for values; {} unless both are found."""
    return stored_inputs_of(type(method.__self__), method.__func__)


def stored_inputs_of(cls, function):
    """:func:`stored_inputs` of the method ``function`` of ``cls``."""
    read, made = self_attributes(function, ast.Load), self_attributes(cls.__init__)
    if read is None or made is None:
        return {}
    state = sorted(read - made - (self_attributes(function) or set()))
    found = {canonical: next((a for a in state if any(w.startswith(canonical) for w in name_words(a))), None)
             for canonical in ("key", "value")}
    return found if all(found.values()) else {}


def role_builder(binding, bindings, convention):
    """The canonical callable of a function role, or the builder of a module role."""
    return (function_role(binding, convention) if binding.role in FUNCTION_ROLES
            else module_builder(binding, bindings, convention))


def module_builder(binding, bindings, convention):
    """The canonical builder of a module role: construct from the plan, wrap under the canonical call. A block with
    a causal switch (:func:`causal_flag`) is built with it off, and with it on by ``build.causal``, as the author's
    decoder builds its self-attention (§3.2.3)."""
    convention = binding.masks or convention
    flag = causal_flag(binding.target) if isinstance(binding.target, type) else None
    off = flag and causal_by_default(binding.target, flag)  # (on unless turned off, as its author's encoder does)

    def built(cfg_values, causal=False):
        cfg = Config(**cfg_values)
        with (constructed_with(binding.target, flag, causal) if causal or off else contextlib.nullcontext()):
            inner = build_from_plan(binding, cfg, bindings, convention=convention)
        if binding.role == "model":
            return AdaptedModel(inner, convention, cfg.d_model, binding.layout, binding.target_shift, binding.call,
                                binding.method_calls)
        return Adapted(inner, binding.role, convention, binding.layout, binding.call,
                       binding.role == "positional_encoding" and binding.takes_token_ids, binding.adds_table)

    def build(**cfg_values):
        return built(cfg_values)
    build.__name__ = f"build_{binding.role}"
    build.target = binding.target  # the author's class, for the checks that watch its instances inside other blocks
    build.hyperparameters = hyperparameters_fed(binding, bindings)
    build.template = functools.partial(recipes.template, binding, bindings, build)  # (a reproduction's, on request)
    if binding.role == "model" and one_vocabulary(binding, bindings, convention):
        build.hyperparameters.discard("tgt_vocab")  # (a Case then draws one vocabulary for both sides)
    if flag:
        def causal(**cfg_values):
            return built(cfg_values, causal=True)
        build.causal = causal  # the block as the author's decoder builds it, its own causal switch on (§3.2.3)
    return build


def one_vocabulary(binding, bindings, convention):
    """Whether the model has one vocabulary, whatever it is given: built on the probe configuration, it embeds the
    source and the target with one table (``encoder.src_word_emb.weight = decoder.trg_word_emb.weight``), or it
    builds only where the two vocabularies are one size (a constructor tying them refuses two)."""
    model = probe_build(binding, bindings, convention)
    if model is None:
        one = dataclasses.replace(PROBE, tgt_vocab=PROBE.src_vocab)
        return probe_build(binding, bindings, convention, one) is not None
    tables = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]
    return len(tables) >= 2 and len({id(t) for t in tables}) == 1


DECODER_SIDE = {"dec", "decoder", "cross", "tgt", "trg", "target"}
"""The words of a model's mask parameter for an attention whose queries are the target's."""


def whole_model_masks(values, arguments, named, convention):
    """A whole model's arguments ``values`` with its masks whole, one (batch, Lq, Lk) mask each: the
    encoder-decoder attention's (a parameter named ``cross``) the source's mask with the target's rows, another
    source mask with the rows of the side its name says (``encoder_self_attention_mask``: the source's); the
    target's mask has its rows already."""
    for name, canonical in arguments:
        words = name_words(name)
        if canonical in ("src_mask", "tgt_mask") and "cross" in words:
            canonical = "src_mask"
            values[name] = argument_values([(name, canonical)], named, convention)[name]
        mask = values.get(name)
        if canonical == "src_mask" and isinstance(mask, torch.Tensor) and mask.dim() == 3:
            rows = named["tgt" if words & DECODER_SIDE else "src"].shape[1]
            values[name] = mask.expand(mask.size(0), rows, mask.size(-1)).clone()
    return values
