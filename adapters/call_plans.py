"""Plan calls: which canonical input feeds each parameter of a candidate's forward (or method), and the values given.

Forward arguments are mapped by name, then by the words of long names, then by position (:func:`call_plan`); masks
go in torch's two parts where the code takes them so, padding as sequence lengths where a parameter is named for
them, and arguments the math does not use get a harmless constant. The planned call is then made with the canonical
inputs (:func:`argument_values`), in the code's tensor layout (:data:`SEQUENCE_FIRST`) and mask convention.
"""
import ast
import inspect
import re
import weakref

import torch
import torch.nn as nn

from adapters.lint import self_attributes
from adapters.masks import LENGTHS, REQUIRED, mask_lengths, to_convention, torch_mask, torch_part
from adapters.names import (CANONICAL_CALLS, FUTURE_WORDS, NORMALIZED_CALL_NAMES, names_a_padding_mask,
                           normalize)
from conformance.contract.harness import PAD


def constant(source):
    """The value of a ``value:...`` entry of a constructor or call plan (a harmless constant, or a probe value of
    :func:`learn_arguments`)."""
    return ast.literal_eval(source.removeprefix("value:"))


def forward_parameters(target):
    """The parameter names of the forward (or of the function) after ``self``."""
    function = (getattr(target.block, target.method) if isinstance(target, MethodModule) else
                target.forward if isinstance(target, nn.Module) else target)
    try:
        return [p for p in inspect.signature(function).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def call_plan(parameters, wanted, torch_style=False, by_name=True):
    """Which canonical input (of ``wanted``) feeds each forward parameter: by name first, then by position;
    parameters with defaults that match nothing keep their defaults. Masks come in torch's two parts when a
    parameter is named for padding (unless ``by_name`` is false), or when the code's other calls take them so
    (``torch_style``)."""
    plan = [None] * len(parameters)
    for i, p in enumerate(parameters):
        if is_switch(p):  # (a flag's default says what it takes: never a tensor input)
            continue
        n = normalize(p.name)
        plan[i] = lengths_of(p.name, wanted, plan) or pad_index_of(p.name, wanted) or length_of_x(p.name, wanted)
        for canonical in wanted if plan[i] is None else ():
            if n in NORMALIZED_CALL_NAMES[canonical] and canonical not in plan:
                if canonical in ("src_mask",) and "tgt_mask" in wanted and n in ("mask", "attnmask", "attentionmask"):
                    continue
                plan[i] = canonical
                break
    if LENGTH in plan:  # (a block told the length of its input, not given it: its device too, not the CPU)
        plan = [DEVICE if c is None and "device" in normalize(p.name) else c for p, c in zip(parameters, plan)]
    if torch_style or by_name and any(names_a_padding_mask(p.name) for p in parameters):
        return attention_inputs(parameters, torch_style_plan(parameters, plan, wanted), wanted)
    for i, p in enumerate(parameters):
        if plan[i] is None and not is_switch(p):  # (a mask its words name may feed two parameters)
            plan[i] = mask_of_its_stream(p.name, parameters, plan, wanted) \
                or by_words(p.name, [c for c in wanted if c not in plan]) or mask_named_again(p.name, wanted, plan)
    for i, p in enumerate(parameters):
        if plan[i] is None:
            remaining = [c for c in wanted if c not in plan]
            if normalize(p.name) in ("dk", "dkey", "headdim"):
                plan[i] = "d_k"
            elif remaining and p.default is p.empty:
                plan[i] = remaining[0]
            elif p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                plan[i] = harmless_argument(p.name)
    return attention_inputs(parameters, plan, wanted)


def attention_inputs(parameters, plan, wanted):
    """An attention's ``plan`` (``wanted`` holds the query) made to feed it its queries and its keys. A plan that
    gives no query is no attention's call: the first parameter takes the query where nothing else, or only a
    one-letter name, planned it (``forward(k, context=None)``: ``k`` the stream its queries come from, not the
    ``k`` of ``k, v``). A parameter named for the encoder's output (``context``, ``memory``, ``enc_output``:
    :func:`names_a_memory`) takes the keys where no other parameter does, the values then coming from it as well
    (§3.2.3: the encoder-decoder attention's keys and values are the encoder's output)."""
    if "query" not in wanted:
        return plan
    plan = list(plan)
    tensors = [i for i, p in enumerate(parameters) if not is_switch(p)
               and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if "query" not in plan and tensors:
        first, name = tensors[0], normalize(parameters[tensors[0]].name)
        alone = not any(c in ("key", "value") for i, c in enumerate(plan) if i != first)  # (not k of k, v)
        if plan[first] is None or plan[first] in ("key", "value") and len(name) == 1 and alone:
            plan[first] = "query"
    memory = next((i for i in tensors if plan[i] in (None, "value:None") and names_a_memory(parameters[i].name)),
                  None)
    if memory is not None and "key" in wanted and "key" not in plan:
        plan[memory] = "key"
    return plan


def names_a_memory(name):
    """Whether a parameter's name is one of the encoder output's (``context``, ``memory``, ``enc_output``), not a
    letter (``m`` may be a mask) nor a decoding state or cache (``states``: :func:`harmless_argument`)."""
    n = normalize(name)
    return n in NORMALIZED_CALL_NAMES["memory"] and len(n) > 1 and harmless_argument(name) is None


def is_switch(parameter):
    """Whether a forward parameter is a switch: its default is True or False (``subsequent_mask=True``), so its
    author's calls give it a flag, never a tensor, whatever its name shares with a canonical input."""
    return isinstance(parameter.default, bool)


def lengths_of(name, wanted, plan):
    """``"src_mask:lengths"`` (or the target's) for a forward parameter named for sequence lengths (``src_lengths``,
    ``tgt_lens``, ``lengths``): padding given as the length of each sequence, the masks built from it by the code
    itself (a padding-mask helper's, ``padding_mask(lens)``: the padding of the tokens it is to mask); else None."""
    words = name_words(name)
    if not words & {"lengths", "lens", "seqlens"}:
        return None
    if wanted == CANONICAL_CALLS["padding_mask"]:
        return f"src_mask:{LENGTHS}"
    target = bool(words & WORDS["target"] - {"output", "out"})
    mask = "tgt_mask" if target else "src_mask"
    taken = {c for c in plan if c}
    if mask not in wanted or f"{mask}:{LENGTHS}" in taken:
        return None
    return f"{mask}:{LENGTHS}"


LENGTH, DEVICE = "length", "device"
"""Inputs derived from a block's input ``x``: its sequence length and its device (:meth:`derived_inputs`)."""
LENGTH_NAMES = {"l", "n", "t", "sz", "size", "len", "length", "seqlen", "seqlength", "sequencelength", "seqsize",
                "numpositions", "npositions", "maxlen", "ntokens", "numtokens"}


def length_of_x(name, wanted):
    """``"length"`` for a parameter named for a sequence length (``L``, ``seq_len``) of a block whose canonical call
    gives it one sequence ``x`` alone (a positional encoding called ``pos(L, device)`` for the rows of the first
    ``L`` positions, §3.5), or of a padding-mask helper, by words alone (``pad_masking(x, target_len)``, as many
    query rows as the tokens: never the pad index, whatever its position; its tokens may be ``t``); else None."""
    if wanted not in (["x"], CANONICAL_CALLS["padding_mask"]) or normalize(name) in NORMALIZED_CALL_NAMES["x"]:
        return None
    spelled = wanted == ["x"] and normalize(name) in LENGTH_NAMES
    return LENGTH if spelled or name_words(name) & {"len", "length"} else None


def derived_inputs(named):
    """``named`` with the length (the axis before the features) and the device of its ``x``, for the plans that
    ask for them (:func:`length_of_x`)."""
    x = named.get("x")
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        return named
    return dict(named, **{LENGTH: x.size(-2), DEVICE: x.device})


PAD_WORDS, INDEX_WORDS = {"pad", "padding"}, {"id", "idx", "index", "token", "ix", "value", "symbol"}


def pad_index_of(name, wanted):
    """``"value:PAD"`` for a forward parameter named for the pad index (``pad_id``, ``pad_idx``, ``padding_idx``,
    ``pad_token_id``, a bare ``pad``) of a call that wants no pad index: the block makes its masks from the tokens
    it is given (§3.2.3), and the checker pads with PAD; else None. A ``*mask*`` name is a mask, not an index."""
    words = name_words(name)
    if "pad_idx" in wanted or words & {"mask", "masks"} or not words & PAD_WORDS:
        return None
    named = normalize(name) in NORMALIZED_CALL_NAMES["pad_idx"] or words & INDEX_WORDS
    return f"value:{PAD}" if named else None


def torch_style_plan(parameters, plan, wanted):
    """The plan of a call in torch's convention, whose masks come in two parts (``src_key_padding_mask`` (batch,
    key) and ``src_mask`` (query, key), True = blocked, as ``nn.TransformerEncoderLayer`` takes them): each mask
    parameter gets the ``padding`` or the ``attention`` part of the canonical mask its name names (the target's,
    else the source's; an attention part marked :data:`REQUIRED` where the parameter has no default), the other
    inputs as planned, and what is left its default (None when it has none)."""
    masks = [c for c in wanted if c.endswith("mask")]
    memory_named = any(name_words(p.name) & MEMORY_SIDE for p in parameters if "mask" in normalize(p.name))
    for i, p in enumerate(parameters):
        n = normalize(p.name)
        if is_switch(p):
            continue
        if "mask" not in n:
            if plan[i] is None:
                plan[i] = by_words(p.name, [c for c in wanted if c not in plan and not c.endswith("mask")])
            continue
        target = names_the_target_mask(p.name) or memory_named and not name_words(p.name) - PLAIN_MASK_WORDS
        base = "tgt_mask" if target and "tgt_mask" in masks else masks[0] if masks else None
        part = "padding" if names_a_padding_mask(p.name) else "attention" + (REQUIRED if p.default is p.empty else "")
        plan[i] = f"{base}:{part}" if base else "value:None"
    for i, p in enumerate(parameters):
        if plan[i] is None:
            remaining = [c for c in wanted if not c.endswith("mask") and c not in plan]
            plan[i] = remaining[0] if remaining and p.default is p.empty else (
                "value:None" if p.default is p.empty else None)
    return plan


MEMORY_SIDE = {"memory", "src", "source", "enc", "encoder", "cross"}
PLAIN_MASK_WORDS = {"mask", "masks", "attn", "attention", "key", "padding", "pad"}
"""A torch-style decoder call whose other masks name the memory's side (``memory_mask``,
``memory_key_padding_mask``) leaves its plainly named ``mask`` (or ``attn_mask``, ``key_padding_mask``) to the
target: the sequence its self-attention reads."""


def name_words(name):
    """The lower-case words of a name (``lookAheadMask``, ``enc_padding_mask``)."""
    return set(re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()))


CROSS_KEYS = {"kv", "keyvalue", "cross", "crs"}
"""Words naming the decoder's cross-attention or its keys and values, which come from the encoder (§3.2.3): a mask
named for them (``kv_mask``, ``crs_mask``) hides the source's padding."""


def mask_of_its_stream(name, parameters, plan, wanted):
    """The canonical mask of the stream a mask parameter is named for, where another parameter of the same call bears
    that stream's name (``inputs_mask`` beside ``inputs``, ``memory_mask`` beside ``memory``), or None: the memory's
    and the source's mask is the source's, the target's the target's, and a block's own stream ``x`` takes the
    target's in a call that also takes the memory (a decoder's queries are the target's, §3.2.3), else the source's."""
    stem = re.sub(r"_?masks?$", "", name, flags=re.IGNORECASE)
    stream = next((c for p, c in zip(parameters, plan) if p.name == stem), None) if stem not in ("", name) else None
    mask = ("tgt_mask" if "memory" in wanted else "src_mask") if stream == "x" else STREAM_MASKS.get(stream)
    return mask if mask in wanted else None


STREAM_MASKS = {"memory": "src_mask", "src": "src_mask", "tgt": "tgt_mask"}
"""The mask of each stream of a call other than a block's own ``x`` (:func:`mask_of_its_stream`)."""


def mask_named_again(name, wanted, plan):
    """The canonical mask, already planned for another parameter, that a mask parameter's words name plainly (the
    source's padding given to the encoder and again to the decoder: ``src_key_padding_mask``, ``enc_padding_mask``,
    ``kv_mask``), or None."""
    words = name_words(name)
    if not words & {"mask", "masks"}:
        return None
    mask = "tgt_mask" if names_the_target_mask(name) else "src_mask" if words & (
        WORDS["source"] | CROSS_KEYS | {"padding", "pad"}) else None
    return mask if mask in wanted and mask in plan else None


def names_the_target_mask(name):
    """Whether a mask argument's name says it is the target's (a causal mask: ``look_ahead_mask``, ``targets_mask``,
    ``dec_self_mask``) rather than the source's padding (``enc_padding_mask``, ``dec_padding_mask``: the padding of
    the memory the decoder attends to, ``enc_dec_attn_mask``, ``inputs_mask``)."""
    words = name_words(name)
    if words & {"padding", "pad"} and not words & {"tgt", "trg", "target", "targets"} or words & {"enc", "encoder"} \
            and words & {"dec", "decoder"}:  # (the memory's padding, or the encoder-decoder attention's mask)
        return False
    return bool(words & (WORDS["target"] - {"output", "out"} | {"targets"} | FUTURE_WORDS))


WORDS = {
    "source": {"src", "source", "enc", "encoder", "input", "inputs", "inp"},
    "target": {"trg", "tgt", "target", "dec", "decoder", "output", "out"},
    "encoded": {"representations", "representation", "repr", "reps", "memory", "hidden", "states", "encoded",
                "outputs", "output", "out", "enc"},
}
"""The words long argument names are made of (``trg_token_ids_batch``, ``src_representations_batch``)."""


ENCODER_SIDE = {"src", "source", "enc", "encoder"}
"""The words that put a sequence on the encoder's side (not ``input``: a decoder's input is its target stream)."""


def by_words(name, remaining):
    """The canonical input of ``remaining`` a long argument name spells out in words, or None: a mask of the
    target or the source (the cross-attention's is the source's; the self-attention's, besides it, the target's; or
    the only mask left), the encoder's output (``src_representations_batch``: source words and an encoded one; in a
    decoder's call any sequence named for the encoder's side, ``enc_feats``), the decoder's own stream (named for
    the target's side, ``dec_feats``), the source or the target tokens."""
    words = name_words(name)
    source, target = bool(words & WORDS["source"]), bool(words & WORDS["target"] - {"output", "out"})
    masks = [c for c in remaining if c.endswith("mask")]
    if "mask" in words or "masks" in words:  # (the one mask left, when the name says neither side)
        wanted = "tgt_mask" if names_the_target_mask(name) else "src_mask" if source or "cross" in words else \
            masks[0] if len(masks) == 1 else "tgt_mask" if "self" in words else None
    elif "memory" in remaining and source and words & WORDS["encoded"] - {"enc"}:
        wanted = "memory"
    elif "memory" in remaining and words & ENCODER_SIDE and not target:  # a decoder's two sequences, told by side:
        wanted = "memory"                                                # (enc_rep, dec_rep), memory first or not
    elif "x" in remaining and target and not words & ENCODER_SIDE:
        wanted = "x"
    else:
        wanted = "tgt" if target else "src" if source else None
    return wanted if wanted in remaining else None


def harmless_argument(name):
    """What a required call argument the math does not use is given (``device`` -> "cpu"; a dropout module, a
    decoding cache or state -> None), as a ``value:`` entry of a call plan; None when its name says nothing."""
    n = normalize(name)
    if "device" in n:
        return "value:'cpu'"
    if any(word in n for word in ("dropout", "cache", "state", "past", "incremental")):
        return "value:None"
    return None


def first_tensor(result):
    """Blocks that return tuples (output, weights) or lists: the first tensor is the output."""
    while isinstance(result, (tuple, list)) and result:
        result = result[0]
    return result


def output_among(result, role, named):
    """A block's output among what it returns (``named``: its inputs, in its layout): of a tuple or list, the tensor
    of its role's output shape, the query's (a multi-head attention, the blocks of §3.1) or the query's with the
    value's width (scaled dot-product attention), in whichever place (``(weights, output)`` as well as
    ``(output, weights)``); else the first tensor."""
    like = named.get("query", named.get("x"))
    if not isinstance(result, (tuple, list)) or not isinstance(like, torch.Tensor):
        return first_tensor(result)
    shape = like.shape
    if role == "attention" and isinstance(named.get("value"), torch.Tensor):
        shape = like.shape[:-1] + named["value"].shape[-1:]
    return next((t for t in result if isinstance(t, torch.Tensor) and t.shape == shape), first_tensor(result))


SEQUENCE_FIRST = "sequence first"
"""The layout of code written for torch's default (sequence, batch, d_model) tensors (``batch_first=False``)."""
SEQUENCES = ("x", "query", "key", "value", "memory", "tokens", "src", "tgt")


UNBATCHED = "one sample at a time"
"""The layout of code written for one sequence at a time: (length, d_model) matrices and (length,) token ids, no
batch axis (code trained sentence by sentence). Such a block is called once per sample of the canonical batch."""


def per_sample(call, args):
    """``call(*args)`` made once per sample of the batch, each tensor argument given without its batch axis (one
    broadcast over the batch, a (1, Lq, Lk) mask, given its only row), and the outputs stacked on a new batch axis."""
    batch = next((a.size(0) for a in args if isinstance(a, torch.Tensor) and a.dim() > 0), None)
    if batch is None:  # (no batch to go through)
        return call(*args)
    return stacked([call(*(sample_of(a, sample, batch) for a in args)) for sample in range(batch)])


def sample_of(value, sample, batch):
    """Sample ``sample`` of a batch-first tensor ``value``, its batch axis dropped; anything else as it is."""
    if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.size(0) not in (batch, 1):
        return value
    return value[sample if value.size(0) == batch else 0]


def stacked(outputs):
    """The per-sample outputs of a block called one sample at a time (their first tensors) as one batch."""
    outputs = [first_tensor(out) for out in outputs]
    return torch.stack(outputs) if all(isinstance(out, torch.Tensor) for out in outputs) else outputs[0]


def in_layout(named, layout):
    """The canonical (batch-first) inputs ``named`` in the code's ``layout``."""
    if layout != SEQUENCE_FIRST:
        return named
    return {k: v.transpose(0, 1) if k in SEQUENCES and isinstance(v, torch.Tensor) and v.dim() >= 2 else v
            for k, v in named.items()}


def from_layout(out, layout):
    """An output in the code's ``layout`` as a batch-first one."""
    if layout == SEQUENCE_FIRST and isinstance(out, torch.Tensor) and out.dim() >= 2:
        return out.transpose(0, 1)
    return out


class MethodModule(nn.Module):
    """A method of a built block as a module of its own (``Transformer.get_position_encoding(x)``): the block moves
    with it, but its parameters are not this module's."""

    def __init__(self, block, method):
        super().__init__()
        object.__setattr__(self, "block", block)  # (not registered: its parameters belong to the block's role)
        self.method = method

    def forward(self, *args, **kwargs):
        return getattr(self.block, self.method)(*args, **kwargs)

    def _apply(self, fn, *args, **kwargs):
        self.block._apply(fn, *args, **kwargs)
        return super()._apply(fn, *args, **kwargs)

    def train(self, mode=True):
        self.block.train(mode)
        return super().train(mode)


def positions_of(x):
    """Token ids (ones) of the shape of the embeddings ``x`` without their feature axis: what a positional encoding
    that its caller calls with the tokens is given."""
    return torch.ones(x.shape[:-1], dtype=torch.long, device=x.device)


def returns_table(out, x, known=False):
    """Whether a positional encoding returned its (length, d_model) table for ``x`` (or (1, length, d_model))
    rather than ``x`` plus it; ``known``: discovery found that it does, so a batch of one says nothing else."""
    return isinstance(out, torch.Tensor) and x.dim() == 3 and out.shape[-2:] == x.shape[1:] and (
        out.dim() == 2 or out.dim() == 3 and out.size(0) == 1 and (x.size(0) > 1 or known))


def setup_call(inner, role, taken):
    """``(name, plan)`` of the set-up method of ``inner`` (:func:`setup_method`) when each of its parameters gets a
    canonical input its forward does not take (``init_keys(key)``), else ``(None, [])``."""
    name = setup_method(type(inner))
    if name is None:
        return None, []
    try:
        required = [p for p in inspect.signature(getattr(inner, name)).parameters.values() if p.default is p.empty]
    except (TypeError, ValueError):
        return None, []
    plan = plan_arguments(getattr(inner, name), [c for c in CANONICAL_CALLS[role] if c not in taken])
    fed = {n for n, c in plan if not c.startswith("value:")}
    return (name, plan) if required and all(p.name in fed for p in required) else (None, [])


def setup_method(cls):
    """The method other than ``__init__`` and ``forward`` that sets state ``forward`` reads and ``__init__`` does
    not set (``init_keys(self, key): self.proj_key = ...``), or is named to (``init_keys(self, states)`` passing
    them on to its sub-layers), or None. Read once a class and the code of its ``__init__`` and ``forward``: every
    build of a block asks, and a check or an observation may have wrapped either for a while."""
    code = tuple(getattr(getattr(cls, name, None), "__code__", None) for name in ("__init__", "forward"))
    read = SETUP_METHODS.setdefault(cls, {})
    if code not in read:
        read[code] = setup_method_read(cls)
    return read[code]


SETUP_METHODS = weakref.WeakKeyDictionary()


def setup_method_read(cls):
    """:func:`setup_method`, read from the source of the class."""
    made, read = self_attributes(cls.__init__), self_attributes(cls.forward, ast.Load)
    if made is None or read is None:
        return None
    for name, method in vars(cls).items():
        if name in ("__init__", "forward") or name.startswith("_") or not inspect.isfunction(method) \
                or any(word in name for word in ("weight", "param", "reset")):
            continue
        sets = self_attributes(method)
        if sets is not None and (sets - made & read or name.startswith(("init_", "set_", "prepare"))):
            return name
    return None


def inputs_not_accepted(function, arguments, wanted, shown, skip=0):
    """``(the inputs wanted (a role's canonical call) that no parameter of function receives, its signature as
    shown)``, from the call plan ``arguments``; nothing for a function taking ``*args`` or ``**kwargs``."""
    try:
        parameters = list(inspect.signature(function).parameters.values())[skip:]
    except (TypeError, ValueError):
        return [], None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return [], None
    taken = {c.split(":")[0] for _, c in arguments}
    return [c for c in wanted if c not in taken], f"{shown}({', '.join(p.name for p in parameters)})"


def adapt_arguments(arguments, named, convention):
    """Keyword arguments for the candidate from the canonical inputs ``named``. An attention's mask is all it is told
    of what to hide: given as lengths, it must be padding alone (a causal triangle would be lost; such code takes
    its causality otherwise, from a flag the checker does not set)."""
    named = dict(named)
    if "query" in named:
        named["d_k"] = named["query"].size(-1)
    return argument_values(arguments, named, convention, padding_alone="query" in named)


def argument_values(arguments, named, convention, padding_alone=False):
    """Keyword arguments from the canonical inputs ``named`` by the call plan ``arguments``: masks in the code's
    ``convention`` (as lengths, of padding alone when told: :func:`adapters.masks.mask_lengths`), and the harmless
    constants the plan gives what the math does not use (``value:...``)."""
    values = {}
    for name, c in arguments:
        if c.startswith("value:"):
            values[name] = constant(c)
        elif c.endswith(":" + LENGTHS) and c.split(":")[0] in named:
            values[name] = mask_lengths(named[c.split(":")[0]], padding_alone)
        elif ":" in c and c.split(":")[0] in named:
            values[name] = torch_mask(named[c.split(":")[0]], c.split(":")[1])
        elif c in named:
            values[name] = to_convention(named[c], convention) if c.endswith("mask") else named[c]
    return values


def plan_arguments(function, wanted, torch_style=False, by_name=True):
    """(parameter name, canonical input) pairs for a forward or method, by name and then by position."""
    parameters = forward_parameters(function)
    return [(p.name, c) for p, c in zip(parameters, call_plan(parameters, wanted, torch_style, by_name)) if c]


def in_torch_style(arguments):
    """Whether a call plan gives masks in torch's two parts."""
    return any(torch_part(c) for _, c in arguments)


def padding_by_lengths(bindings):
    """``"lengths"`` when the bound model's forward takes its padding as sequence lengths (:func:`lengths_of`),
    else None: the checks then pad at the end of each sequence, as lengths can say."""
    model = bindings.get("model")
    if model is None or not inspect.isclass(model.target):
        return None
    try:
        parameters = [p for p in list(inspect.signature(model.target.forward).parameters.values())[1:]
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None
    plan = call_plan(parameters, CANONICAL_CALLS["model"])
    return LENGTHS if any(c and c.endswith(":" + LENGTHS) for c in plan) else None
