"""Plan construction: what each constructor argument of a candidate is fed (:func:`constructor_plan`).

Arguments are mapped onto the canonical hyperparameters by their names, onto built sub-blocks by their annotations
and names (``EncoderBlock(features, attn_block, ff_block, dropout)``), and, where a name says nothing or says a size
twice, learned by building the candidate with probe values and reading which weights took each one
(:func:`learn_arguments`).
"""
import ast
import contextlib
import contextvars
import functools
import inspect
import io
import re
import sys
import textwrap
import weakref

import torch
import torch.nn as nn

from adapters import multipliers
from adapters.building import (AUTHORS_OWN, KEPT, PROBE, Binding, build_from_plan, config_fields, probe_build,
                               source_tree, stack_layer_role)
from adapters.call_plans import name_words
from adapters.names import FUTURE_WORDS, NORMALIZED_SUBMODULE_NAMES, argument_role, normalize
from conformance.contract.probes import is_kernel_one_convolution


def submodule_role(parameter, bindings, role):
    """The role of a constructor argument that receives an already-built block: by annotation, then by name
    (a generic ``layer`` or ``block`` of a stack is that stack's layer)."""
    annotation = parameter.annotation
    if isinstance(annotation, str):
        annotation_name = annotation
    else:
        annotation_name = getattr(annotation, "__name__", "")
    for bound_role, binding in bindings.items():
        if annotation_name and binding.name == annotation_name:
            return bound_role
    if annotation_name in ("ModuleList", "list", "List"):
        return "layers"
    n = normalize(parameter.name)
    if n in ("layer", "block") and stack_layer_role(role):
        return stack_layer_role(role)
    if n in ("layers", "encoderblocks", "decoderblocks", "blocks", "encoderlayers", "decoderlayers", "layerlist"):
        return "layers"
    for sub_role, names in NORMALIZED_SUBMODULE_NAMES.items():
        if n in names:
            return sub_role
    return None


def constructor_plan(target, role, bindings):
    """Map each constructor argument of ``target`` to a canonical value, a built sub-role, or its default.

    Returns ``{argument: source}``; raises LookupError naming an argument nothing can feed.
    """
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return {}
    plan, counts, optional = {}, [], []
    for p in parameters:
        if p.kind is p.VAR_POSITIONAL:
            continue
        if p.kind is p.VAR_KEYWORD:
            inner = bindings.get({"encoder": "encoder_layer", "decoder": "decoder_layer"}.get(role, ""), None)
            plan["**"] = f"kwargs of {inner.name}" if inner else "nothing"
            continue
        fields = config_fields(target, p)
        if fields is not None:  # a configuration object: its fields are planned like arguments
            plan[p.name] = "config"
            for field_name, default in fields.items():
                source = config_field_source(field_name, default, role)
                if source is None and (type(default) is int or default is p.empty):
                    optional.append(f"{p.name}.{field_name}")
                if source is not None or type(default) is int or default is p.empty:
                    plan[f"{p.name}.{field_name}"] = source
            continue
        canonical = argument_role(p.name)
        sub = submodule_role(p, bindings, role) if canonical is None else None
        if sub == "layers" and role in ("encoder", "decoder", "model") and is_a_count(target, p):
            canonical, sub = "N", None  # ``layers=6``: how many layers, not a list of built ones
        if canonical == "N" and role not in ("encoder", "decoder", "model") or canonical in UNUSED_SIZES.get(role, ()):
            canonical = None  # a size the role does not take (``d_hid`` of a positional encoding): learned
        if canonical == "vocab_size" and role == "model":
            canonical = "src_vocab"
        if canonical:
            plan[p.name] = canonical
        elif sub == "layers":
            plan[p.name] = "layers"
        elif sub and sub in bindings and sub != role:
            builds_it = inspect.isclass(bindings[sub].target) and bindings[sub].part_of is None \
                and calls_argument(target, p.name)
            plan[p.name] = f"class:{sub}" if builds_it else f"role:{sub}"
        elif p.default is not p.empty:
            if role in ("encoder", "decoder", "model") and type(p.default) is int:
                counts.append(p.name)
            continue
        else:
            plan[p.name] = None  # learned below, by building
    sizes = [name for name, source in plan.items() if source in SIZES]
    unknown = [name for name, source in plan.items() if source is None]
    if unknown or len({plan[n] for n in sizes}) < len(sizes):  # a name that says nothing, or one size said twice:
        unknown += sizes                                         # every size is learned by building
    if unknown:
        plan.update(learn_arguments(target, role, plan, unknown, bindings, optional))
    plan = {name: source for name, source in plan.items() if source is not None}  # unlearned fields: defaults
    plan.update(tied_to_the_width(parameters, plan))
    plan.update(multipliers.d_ff_multipliers(role, plan, parameters, lambda trial: probe_build(
        Binding(role, getattr(target, "__name__", str(target)), target, trial), bindings), PROBE.d_model))
    plan.update(layer_counts(target, role, plan, [n for n in counts if n not in plan], bindings))
    plan.update(defaulted_widths(target, role, plan, parameters, bindings))
    return plan


def defaulted_widths(target, role, plan, parameters, bindings):
    """The defaulted size arguments that no name read (``Embeddings(vocab_size, emb_dims=512)``) and that set the
    width of a weight: d_model, or d_ff where the role has an inner width no other argument feeds; learned by
    building (:func:`learn_arguments`). Their defaults are the author's configuration, not a fixed size: the block
    is built at the configuration under check, never blamed for a width it was not given."""
    names = [p.name for p in parameters if p.name not in plan and type(p.default) is int and p.default > 1]
    if not names:
        return {}
    try:
        learned = learn_arguments(target, role, plan, names, bindings, optional=names)
    except LookupError:  # the candidate's own code under probe values: its defaults stand
        return {}
    inner_free = "d_ff" not in UNUSED_SIZES.get(role, ()) and "d_ff" not in plan.values() and role != "generator"
    return {name: source for name, source in learned.items()
            if source == "d_model" or source == "d_ff" and inner_free}


def is_a_count(target, parameter):
    """Whether a constructor argument is a number, not a block: an integer default, or read by ``range()`` in the
    constructor (``for _ in range(layers)``)."""
    if type(parameter.default) is int:
        return True
    tree = source_tree(target.__init__)
    return tree is not None and any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
        and any(isinstance(a, ast.Name) and a.id == parameter.name for a in node.args) for node in ast.walk(tree))


def calls_argument(target, name):
    """Whether ``target``'s constructor calls its argument ``name`` (``self.sa = self_attention(hid_dim, ...)``): it
    takes a class, and builds the block itself with sizes of its own choosing."""
    tree = source_tree(target.__init__)
    return tree is not None and any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                                    and node.func.id == name for node in ast.walk(tree))


def layer_counts(target, role, plan, names, bindings):
    """The defaulted arguments of a stack or model, named otherwise (``n_e=6, n_d=6``), that set how many layers it
    builds: each built with its own probe value, those that come out as the length of a list of layers mean N."""
    probes = dict(zip(names, PROBE_SIZES))
    trial = Binding(role, getattr(target, "__name__", target), target,
                    {**plan, **{n: f"value:{v}" for n, v in probes.items()}})
    module = probe_build(trial, bindings)
    if module is None:  # the candidate's own code under probe values: its defaults stand
        return {}
    lengths = {len(m) for m in module.modules() if isinstance(m, (nn.ModuleList, nn.Sequential))}
    return {name: "N" for name, value in probes.items() if value in lengths}


def config_field_source(name, default, role):
    """What feeds a field of a configuration object: the hyperparameter its name says, a dropout for any
    ``*_dropout`` probability, else None (an integer is learned by building; anything else keeps its default)."""
    canonical = argument_role(name)
    if canonical == "N" and role not in ("encoder", "decoder", "model") or canonical in UNUSED_SIZES.get(role, ()):
        return None
    if canonical == "vocab_size" and role == "model":
        return "src_vocab"
    if canonical is None and type(default) is float and "drop" in normalize(name):
        return "dropout"
    return canonical


def tied_to_the_width(parameters, plan):
    """Defaulted arguments left out of ``plan`` whose default is the default of the argument mapped to d_model
    (``d_word_vec=512, d_model=512``): widths the code asserts equal, given d_model too."""
    defaults = {p.name: p.default for p in parameters if type(p.default) is int}
    widths = {default for name, default in defaults.items() if plan.get(name) == "d_model"}
    return {name: "d_model" for name, default in defaults.items() if name not in plan and default in widths}


SIZES = ("d_model", "d_ff", "vocab_size", "src_vocab", "tgt_vocab", "max_len", "N")
UNUSED_SIZES = {"positional_encoding": ("d_ff", "vocab_size"), "layer_norm": ("d_ff", "vocab_size", "max_len"),
                "multi_head_attention": ("d_ff", "vocab_size", "max_len"), "feed_forward": ("vocab_size", "max_len")}
"""Sizes a role's contract does not give it (``conformance.contract.interface``): an argument named for one is learned."""
PROBE_SIZES = (30, 42, 54, 66, 78, 90, 102, 114)
"""Values no canonical size of :data:`PROBE` takes, each even and a multiple of its head count (a width is split
into heads, a sinusoid table into pairs): a constructor argument built with one is found by it."""


LEARNED = contextvars.ContextVar("learned", default=None)
"""What :func:`learn_arguments` found during one discovery, by everything its probe build depends on: ranking
candidates and assembling the roles plan the same class against the same bindings again and again, and each probe
build can be a whole model (one taking its layer count as an unnamed argument builds dozens of layers)."""


@contextlib.contextmanager
def remembering_what_is_learned():
    token = LEARNED.set({})
    try:
        yield
    finally:
        LEARNED.reset(token)


def bindings_state(bindings, depth=0):
    """What of ``bindings`` a build from a plan reads: each role's class, how it is fed, whether it composes, and
    the block a part is built within."""
    return tuple((role, binding_state(b, depth)) for role, b in bindings.items())


def binding_state(b, depth):
    part = b.part_of
    if part is not None:
        part = (binding_state(part[0], depth + 1), part[1], bindings_state(part[2], depth + 1)) if depth < 3 \
            else id(part)
    return (id(b.target), b.name, tuple(b.constructor.items()), b.works, b.takes_token_ids, b.layout, b.masks,
            b.adds_table, part)


def remembered(learn):
    @functools.wraps(learn)
    def learn_once(target, role, plan, unknown, bindings, optional=()):
        memo = LEARNED.get()
        if memo is None or AUTHORS_OWN.get() is not None:  # (a build that lists the author's broken blocks: anew)
            return learn(target, role, plan, unknown, bindings, optional)
        key = (id(target), role, tuple(plan.items()), tuple(unknown), tuple(optional), KEPT.get(),
               bindings_state(bindings))
        if key not in memo:
            try:
                memo[key] = (learn(target, role, plan, unknown, bindings, optional), None)
            except LookupError as exc:
                memo[key] = (None, str(exc))
        learned, problem = memo[key]
        if problem is not None:
            raise LookupError(problem)
        return dict(learned)
    return learn_once


@remembered
def learn_arguments(target, role, plan, unknown, bindings, optional=()):
    """What constructor arguments whose names say nothing mean (``hid_dim``, ``pf_dim``, ``filter_size``,
    ``d_word_vec``, ``enc_voc_size``, an argument the math does not use such as ``device`` or ``trg_sos_idx``), or
    whose names say the same size twice (``d_model`` and ``hidden``), learned from what gets built: each is given
    its own probe value, and the weights that come out say which size it is (the width of a LayerNorm or of a
    square projection: d_model; a projection between d_model and it: d_ff; the rows of an embedding: a vocabulary
    or, named for positions, max_len; the length of a list of layers: N). A projection out of d_model into an
    argument named for d_model, where d_ff is another argument's or no size of the role, is a second width
    (``d_embed`` and ``d_model = h x d_k``): the paper has one, so both are fed d_model (§3.2.2). Arguments that
    shape no weight get a harmless value (``device`` -> "cpu", an index -> 0). Raises LookupError when building
    fails or says nothing."""
    name_of = getattr(target, "__name__", target)
    probes, learned = dict(zip(unknown, PROBE_SIZES)), {}
    for name in unknown:
        n = normalize(name)
        if "device" in n:
            learned[name] = "value:'cpu'"
        elif re.split(r"_|(?<=[a-z])(?=[A-Z])", name)[-1].lower() in ("idx", "index", "id", "token"):
            learned[name] = "pad_idx"
        elif "drop" in n:
            learned[name] = "dropout"
        elif n.startswith(("log", "use", "return", "output", "verbose", "debug")) \
                and not n.endswith(("dim", "size", "vocab", "len", "length", "features")):  # a switch, not a size
            learned[name] = "value:False"
        elif "head" in n and plan.get(name) is None:  # a count of heads shapes no weight: the name is all there is
            learned[name] = "h"
    probes = {name: value for name, value in probes.items() if name not in learned}
    if not probes:
        return learned
    trial = Binding(role, name_of, target, {**plan, **learned, **{n: f"value:{v}" for n, v in probes.items()}})
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            module = build_from_plan(trial, PROBE, bindings)
        parts = list(module.modules()) if isinstance(module, nn.Module) else []  # (an __init__ may skip nn.Module's)
        kept = list(tables(module)) if parts else []
    except Exception as exc:  # the candidate's own code under probe values
        raise LookupError(f"cannot tell what constructor arguments {', '.join(probes)} of {name_of} are (built "
                          f"with probe values: {type(exc).__name__}: {exc})") from None
    maps = [(m, widths) for m in parts for widths in [position_wise_widths(m)] if widths is not None]
    d_model = next((n for n, v in probes.items() if any(
        isinstance(m, nn.LayerNorm) and tuple(m.normalized_shape) == (v,)
        or isinstance(m, nn.Embedding) and m.embedding_dim == v for m in parts)
        or any(widths == (v, v) for _, widths in maps)), None)
    if d_model is None and role == "generator":  # Linear(d_model, V): the width it takes in
        d_model = next((n for n, v in probes.items() if any(
            isinstance(m, nn.Linear) and m.in_features == v for m in parts)), None)
    if d_model is None:  # no weight: a table (a buffer or a tensor attribute, a sinusoid's) as wide as d_model
        d_model = next((n for n, v in probes.items() if any(t.dim() >= 2 and t.shape[-1] == v
                                                            for t in kept)), None)
    fed_width = any(source == "d_model" for name, source in plan.items() if name not in probes)
    if d_model is None and not fed_width:  # Linear(a, b) then Linear(b, a): the first one takes in d_model
        first = next((widths for _, widths in maps if widths[0] in probes.values()
                      and widths[::-1] in [w for _, w in maps]), None)
        d_model = next((n for n, v in probes.items() if first is not None and v == first[0]), None)
    model_width = probes.get(d_model, PROBE.d_model)
    d_ff_given = "d_ff" in UNUSED_SIZES.get(role, ()) or "d_ff" in plan.values()
    for name, value in probes.items():
        lists = [m for m in parts if isinstance(m, nn.ModuleList) and len(m) == value]
        rows = [m for m in parts if isinstance(m, nn.Embedding) and m.num_embeddings == value]
        positions = [t for t in kept if t.dim() >= 2 and t.shape[-2] == value]
        inner = [m for m, widths in maps if set(widths) == {model_width, value}]
        n = normalize(name)
        if name == d_model:
            learned[name] = "d_model"
        elif lists:
            learned[name] = "N"
        elif rows:
            learned[name] = ("max_len" if any(w in n for w in ("pos", "len", "max", "seq")) and "voc" not in n else
                             "vocab_size" if role != "model" else
                             "tgt_vocab" if any(w in n for w in ("tgt", "trg", "dec", "out", "target")) else "src_vocab")
        elif inner and plan.get(name) == "d_model" and d_ff_given and role != "generator":
            learned[name] = "d_model"  # a second width named for d_model (d_embed and d_model, h x d_k): equal
        elif inner:  # a map out of d_model: into a vocabulary for the generator, else the inner width
            learned[name] = "vocab_size" if role == "generator" else "d_ff"
        elif role in multipliers.FEED_FORWARD_HOLDERS and multipliers.widens(module, model_width, value):
            learned[name] = multipliers.D_FF_PER_D_MODEL  # the inner width as a multiple of d_model
        elif positions:  # the rows of a table kept beside the weights (a sinusoid's): one per position
            learned[name] = "max_len"
        elif plan.get(name) is not None:  # a size its name says, that no weight shows: the name's reading stands
            learned[name] = plan[name]
        elif "vocab" in n and role == "model":  # a vocabulary no table takes: the other side's table is shared
            learned[name] = "src_vocab"
        elif name in optional:  # a field of a configuration object: its default stands
            learned[name] = None
        elif any(w in n for w in ("len", "max", "seq")):  # a bound on the length that sizes no weight of its own
            learned[name] = "max_len"                     # (only a mask buffer, or a table sized by the larger bound)
        else:
            raise LookupError(f"cannot tell what constructor argument {name!r} of {name_of} is (built with "
                              f"{name}={value}, no weight took that size)")
    return learned


def position_wise_widths(module):
    """``(in, out)`` widths of a map applied at each position alike: an ``nn.Linear``, or a convolution of kernel
    size 1 (:func:`conformance.contract.probes.is_kernel_one_convolution`); None for any other module."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    if is_kernel_one_convolution(module):
        return module.in_channels, module.out_channels
    return None


def tables(module):
    """The tensors a module keeps besides its learned weights: buffers, frozen parameters (a sinusoid table held
    as ``nn.Parameter`` with ``requires_grad = False``), and tensors set as plain attributes."""
    for m in module.modules():
        yield from m.buffers(recurse=False)
        yield from (p for p in m.parameters(recurse=False) if not p.requires_grad)
        yield from (v for v in vars(m).values() if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter))


def hyperparameters_fed(binding, bindings, depth=0):
    """The canonical hyperparameters (sizes, h, dropout) that reach ``binding``'s constructor, its own and its
    sub-blocks' (a feed-forward network whose width is fixed in its code, ``4 * d_model``, is not fed d_ff)."""
    if binding.part_of is not None:  # what its block is fed; a method of a block takes no constructor argument
        return hyperparameters_fed(binding.part_of[0], bindings, depth + 1) if binding.part_of[1] else set()
    fed = set()
    for source in binding.constructor.values():
        inner = (bindings.get(source.split(":", 1)[1]) if source.startswith(("role:", "class:"))
                 else bindings.get(stack_layer_role(binding.role) or "") if source in ("layers",) or "kwargs of" in source
                 else None)
        if inner is not None and inner is not binding and depth < 4:
            fed |= hyperparameters_fed(inner, bindings, depth + 1)
        elif source in SIZES + ("h", "dropout"):
            fed.add(source)
        elif source == multipliers.D_FF_PER_D_MODEL:
            fed.add("d_ff")
    return fed


def constructor_plan_or_none(cls, role, bindings):
    try:
        return constructor_plan(cls, role, bindings)
    except (LookupError, ValueError, TypeError):
        return {}


def builds_a_module(role, target):
    """Whether ``target`` is built from canonical hyperparameters: a module class, or a function building the
    model (``make_model(src_vocab, tgt_vocab, N, ...)``)."""
    return inspect.isclass(target) or (role == "model" and inspect.isfunction(target))


CAUSAL_FLAG_WORDS = {"mask", "masked", "masking"} | FUTURE_WORDS
"""Words of a constructor flag that switches a block's own causal mask on (``masking=False``, ``causal=False``,
``mask_future=False``): the decoder's self-attention built with it, the encoder's without (§3.2.3)."""


def causal_flag(target):
    """The name of the boolean constructor parameter that makes ``target``'s block mask the future itself, or None:
    one that defaults to False, or one that defaults to True (``is_masked=True``: the causal build is the default)
    that the author's own code turns off somewhere (``MultiHeadAttention(..., is_masked=False)`` for the encoder's
    self-attention, :func:`turned_off_by_its_author`). A True default its author never turns off is left as it is
    (``use_mask=True`` may mean "apply the mask given")."""
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    return next((p.name for p in parameters if name_words(p.name) & CAUSAL_FLAG_WORDS and (
        p.default is False or p.default is True and turned_off_by_its_author(target, p.name))), None)


def causal_by_default(target, flag):
    """Whether ``target``'s causal switch ``flag`` (:func:`causal_flag`) is on unless its caller turns it off."""
    try:
        return inspect.signature(target).parameters[flag].default is True
    except (TypeError, ValueError, KeyError):
        return False


def turned_off_by_its_author(target, name):
    """Whether the author's code builds the class ``target`` with its argument ``name`` given False (by keyword or
    in its place): a call of the class, by its name or a dotted one, in the module that defines it or in one that
    imports it (its classes' and functions' code where the module's own cannot be read, as a notebook's cells)."""
    read = TURNED_OFF.setdefault(target, {})
    if name not in read:
        read[name] = any(gives_false(tree, scope, target, name) for tree, scope in code_naming(target))
    return read[name]


TURNED_OFF = weakref.WeakKeyDictionary()


def code_naming(target):
    """``(syntax tree, globals)`` of the code of each module holding ``target`` among its globals."""
    for module in list(sys.modules.values()):
        scope = getattr(module, "__dict__", None)
        if not isinstance(scope, dict) or not any(value is target for value in list(scope.values())):
            continue
        try:
            yield ast.parse(inspect.getsource(module)), scope
            continue
        except (OSError, TypeError, SyntaxError, ValueError):
            pass
        for value in list(scope.values()):
            if (inspect.isclass(value) or inspect.isfunction(value)) and value.__module__ == module.__name__:
                try:
                    yield ast.parse(textwrap.dedent(inspect.getsource(value))), scope
                except (OSError, TypeError, SyntaxError, IndentationError):
                    continue


def gives_false(tree, scope, target, name):
    """Whether a call in ``tree`` of what ``scope`` names ``target`` gives its argument ``name`` False."""
    place = list(inspect.signature(target).parameters).index(name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or named_object(node.func, scope) is not target:
            continue
        given = next((k.value for k in node.keywords if k.arg == name), None)
        if given is None and place < len(node.args) and not any(isinstance(a, ast.Starred)
                                                                 for a in node.args[:place + 1]):
            given = node.args[place]
        if isinstance(given, ast.Constant) and given.value is False:
            return True
    return False


def named_object(node, scope):
    """The object a name or dotted name (``MultiHeadAttention``, ``layers.MultiHeadAttention``) denotes in
    ``scope``, or None."""
    if isinstance(node, ast.Name):
        return scope.get(node.id)
    if isinstance(node, ast.Attribute):
        try:
            return getattr(named_object(node.value, scope), node.attr, None)
        except Exception:  # (an attribute of the author's that computes, and fails)
            return None
    return None


@contextlib.contextmanager
def constructed_with(target, name, value):
    """While open, ``target`` (a class) is built with its constructor argument ``name`` set to ``value``, whatever
    the construction plan gives it."""
    original = target.__init__
    signature = inspect.signature(original)

    def init(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments[name] = value
        original(*bound.args, **bound.kwargs)

    target.__init__ = init
    try:
        yield
    finally:
        target.__init__ = original
