"""Build a candidate from its plan: a :class:`Binding` (which class or function plays a role, how its constructor is
fed and how it is called) instantiated on a configuration, with its sub-blocks built first.

Where a sub-block of the candidate's cannot be built or does not work, the reference's block of that role is grafted
in its place (:func:`build_sub_block`), or stands in for a broken class the block builds itself (:func:`stand_in`),
so that the enclosing block's own code is still checked; :func:`authors_own_blocks` builds without them.
"""
import ast
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import io
import textwrap
import types
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from adapters import multipliers, projections
from adapters.call_plans import MethodModule, call_plan, constant, first_tensor
from adapters.masks import from_convention
from adapters.names import CANONICAL_CALLS
from conformance.contract.harness import PAD
from conformance.contract.interface import FUNCTION_ROLES, Config, call_with_canonical_arguments
from reference.transformer import CONFORMANCE_ROLES as REFERENCE

PROBE = Config(d_model=12, h=3, d_ff=24, dropout=0.0, N=2, vocab_size=11, src_vocab=11, tgt_vocab=13, max_len=16)
PAPER_BASE = Config(N=2, dropout=0.0)
"""The base model's widths (Table 3: d_model = 512, h = 8, d_ff = 2048), with two layers a stack (a width is what
code fixes) and small vocabularies: where code that crashes at the checker's sizes runs as its author builds it."""
PAPER_WIDTHS = dataclasses.replace(PAPER_BASE, max_len=PROBE.max_len)
"""The paper's widths with the probe's table length, where discovery reads how such code is called (a table of
5000 positions built in Python loops, as some code builds it, costs seconds at each build)."""


@dataclass
class Binding:
    """How one role is played: the class or function, how its constructor is fed, how it is called."""
    role: str
    name: str
    target: object
    constructor: dict = field(default_factory=dict)   # argument -> what feeds it
    call: list = field(default_factory=list)           # forward argument -> canonical input
    notes: list = field(default_factory=list)
    works: bool = True
    """False when bound although it fails under the canonical call (the best candidate there was)."""
    layout: str = None
    """``SEQUENCE_FIRST`` for code written for (sequence, batch, d_model) tensors, found by behaviour or read from
    the author's model's run."""
    part_of: tuple = None
    """``(enclosing binding, path, bindings)`` for a block found inside a bound block (:func:`parts_in_built_blocks`)
    and built as that block builds it; the path is None for a method of the enclosing block."""
    masks: str = None
    """The mask convention of this role where its masks have another shape than the others' (found by behaviour:
    a layer taking key-padding vectors, its attention block taking masks with a head axis)."""
    found_in: str = None
    """The role of the bound block this one was found in (:func:`parts_in_built_blocks`)."""
    adds_table: bool = False
    """A positional encoding that returns its table, which its caller adds to the embeddings."""
    takes_token_ids: bool = False
    """A stack or layer that embeds token ids itself: its canonical call (vectors) fails, yet the blocks that build
    it call it with tokens, so they are built with it and not with a stand-in."""
    target_shift: str = None
    """A model whose forward shifts the target itself (:mod:`adapters.alignment`), observed by calling it."""
    method_calls: dict = None
    """A model's ``{"encode": plan, "decode": plan}`` read from its own forward's calls of them, where they differ
    from the plans of its forward's (:func:`adapters.assembly.encode_and_decode_as_forward_calls_them`)."""
    runs_in_the_authors_model: bool = False
    """A block the author's own run called inside a forward pass of the author's model that completed: failing
    under the canonical call only, it is called otherwise by its author, not broken."""

    @property
    def composes(self):
        """Whether the blocks that build this one are built with it (else with the reference's in its place)."""
        return self.works or self.takes_token_ids or self.runs_in_the_authors_model

    def describe(self):
        parts = [f"{self.role}: {self.name}"]
        if self.constructor:
            parts.append("(" + ", ".join(f"{k}={v}" for k, v in self.constructor.items()) + ")")
        if self.call:
            parts.append("called as (" + ", ".join(f"{k}<-{v}" for k, v in self.call) + ")")
        return " ".join(parts + self.notes)


def canonical_value(canonical, cfg, role):
    if canonical.startswith("value:"):
        return constant(canonical)
    values = dataclasses.asdict(cfg)
    if canonical in ("d_k", "d_v"):
        return cfg.d_model // cfg.h
    if canonical == "pad_idx":
        return PAD
    if canonical == multipliers.D_FF_PER_D_MODEL:
        return multipliers.multiple(cfg)
    if canonical == "vocab_size" and role == "model":
        return cfg.src_vocab
    return values[canonical]


def probe_build(binding, bindings, convention="keep", cfg=PROBE):
    """``binding`` built on the probe configuration (or ``cfg``; its prints swallowed), or None when its own code
    fails there (its checks say what is wrong with it)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return build_from_plan(binding, cfg, bindings, convention=convention)
    except Exception:  # the candidate's own code
        return None


def config_fields(target, parameter):
    """``{field: default}`` when ``parameter`` of ``target``'s constructor takes a configuration object: its
    annotation (or the global its name or annotation names) is a plain class of the submission's own that builds
    with no arguments (``config: VanillaTransformerConfig``), or else the constructor only reads fields of it
    (``cfg.d_model``, ``model_config.src_vocab_size``: :func:`fields_read`, each without a default); else None.
    What builds the object (the class, or :class:`ReadFields`) is remembered for building."""
    annotation = parameter.annotation
    namespace = getattr(getattr(target, "__init__", None), "__globals__", {})
    if isinstance(annotation, str):
        annotation = namespace.get(annotation)
    if not inspect.isclass(annotation) or issubclass(annotation, (nn.Module, torch.Tensor)) \
            or annotation.__module__ in ("builtins", "typing") or annotation.__module__.startswith("torch"):
        return _read_fields_of(target, parameter)
    try:
        fields = {p.name: p.default for p in inspect.signature(annotation).parameters.values()}
        annotation()
    except Exception:  # not a configuration that builds on its defaults
        return _read_fields_of(target, parameter)
    if not fields or any(default is inspect.Parameter.empty for default in fields.values()):
        return _read_fields_of(target, parameter)
    config_fields.classes[(target, parameter.name)] = annotation
    return fields


config_fields.classes = {}


FIELDS_LEFT_NONE = {}
"""The class (or factory) -> the fields of its configuration object that it read and the checker could not plan, so
left None (:class:`ReadFields`): a crash on such a None is the checker's doing (``conformance.diagnosis.classify``)."""


class ReadFields(types.SimpleNamespace):
    """A configuration object made of the fields a constructor reads: those the checker plans are set; any other
    reads as None (a field no weight depends on, such as a tokenisation switch compared to an enum), and is
    remembered for its reader (:data:`FIELDS_LEFT_NONE`)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        read = FIELDS_LEFT_NONE.setdefault(self.__dict__.get("_reader"), [])
        if name not in read:
            read.append(name)
        return None


def _read_fields_of(target, parameter):
    if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY) \
            or parameter.default is not parameter.empty:
        return None
    fields = fields_read(target, parameter.name)
    if not fields:
        return None
    config_fields.classes[(target, parameter.name)] = functools.partial(ReadFields, _reader=target)
    return dict.fromkeys(fields, inspect.Parameter.empty)


def source_tree(function):
    """The parsed source of ``function`` (a constructor, a factory), read and parsed once a function: discovery asks
    for a constructor's again for each of its arguments; None where it has none to read."""
    try:
        return _parsed_source(function)
    except TypeError:  # an unhashable callable (no function: inspect reads no source of it either)
        return None


@functools.lru_cache(maxsize=None)
def _parsed_source(function):
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (TypeError, OSError, SyntaxError, ValueError):
        return None


def fields_read(target, name):
    """The attributes ``target``'s constructor (or ``target``, a factory function) reads from its argument ``name``
    (``cfg.d_model``), in order, when that is all it does with it (not passed on, stored or called); else ``[]``."""
    tree = source_tree(target.__init__ if inspect.isclass(target) else target)
    if tree is None:
        return []
    function = tree.body[0] if tree.body and isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)) \
        else None
    if function is None:
        return []
    read = {id(node.value): node.attr for node in ast.walk(function) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == name and isinstance(node.ctx, ast.Load)}
    uses = [node for node in ast.walk(function) if isinstance(node, ast.Name) and node.id == name]
    if not read or any(id(node) not in read for node in uses):
        return []
    return list(dict.fromkeys(read.values()))


def stack_layer_role(role):
    return {"encoder": "encoder_layer", "decoder": "decoder_layer"}.get(role)


def build_from_plan(binding, cfg, bindings, depth=0, convention="keep"):
    """Instantiate ``binding.target`` with canonical arguments and freshly built sub-blocks (``convention``: the
    code's mask convention, for the stand-ins of :func:`standing_in`)."""
    if depth > 4:
        raise RecursionError("sub-blocks nest too deeply")
    if binding.part_of is not None:  # the enclosing block, built with the part's own class (it is what is checked)
        owner, path, within = binding.part_of
        token = KEPT.set(KEPT.get() + (binding.target,))
        try:
            with standing_in(binding, cfg, bindings, convention):
                block = build_from_plan(owner, cfg, within, depth + 1, convention)
        finally:
            KEPT.reset(token)
        if path is None:
            return MethodModule(block, binding.target.__name__)
        return (projections.with_projections(block, path) if binding.role == "multi_head_attention"
                else block.get_submodule(path))
    kwargs = {}
    vocabularies = sub_block_vocabularies(binding.constructor, cfg) if binding.role == "model" else {}
    for argument, source in binding.constructor.items():
        if argument == "**":
            inner = bindings.get(stack_layer_role(binding.role))
            if inner is not None:
                for name, inner_source in inner.constructor.items():
                    if not inner_source.startswith(("role:", "class:")) and inner_source != "layers" and name != "**":
                        kwargs[name] = canonical_value(inner_source, cfg, inner.role)
        elif source.startswith("role:"):
            sub_cfg = dataclasses.replace(cfg, vocab_size=vocabularies[argument]) if argument in vocabularies else cfg
            kwargs[argument] = build_sub_block(bindings[source[5:]], sub_cfg, bindings, depth + 1, convention)
        elif source.startswith("class:"):  # a class the block builds itself (``self_attention(hid_dim, ...)``)
            kwargs[argument] = bindings[source[6:]].target
        elif source == "config":
            kwargs[argument] = config_fields.classes[(binding.target, argument)]()  # its fields are set below
        elif "." in argument:
            continue  # a field of a configuration object, set below
        elif source == "layers":
            layer = bindings[stack_layer_role(binding.role) or "encoder_layer"]
            kwargs[argument] = nn.ModuleList(build_from_plan(layer, cfg, bindings, depth + 1, convention)
                                             for _ in range(cfg.N))
        else:
            kwargs[argument] = canonical_value(source, cfg, binding.role)
    for argument, source in binding.constructor.items():
        if "." in argument:
            holder, field_name = argument.split(".", 1)
            setattr(kwargs[holder], field_name, canonical_value(source, cfg, binding.role))
    with standing_in(binding, cfg, bindings, convention):
        built = binding.target(**kwargs)
    if not isinstance(built, nn.Module):  # a function that builds no module: not the builder of a role
        raise TypeError(f"{binding.name} returned {type(built).__name__}, not a torch.nn.Module")
    return built


def builds_by_name(cls, name, inner):
    """Whether the class ``cls`` builds the class ``inner`` in its ``__init__``, by the global ``name``
    (``self.attn = MultiHeadAttention(n_head, d_model, ...)``)."""
    init = getattr(cls, "__init__", None)
    code = getattr(init, "__code__", None)
    return inspect.isclass(cls) and inspect.isclass(inner) and code is not None and name in code.co_names \
        and init.__globals__.get(name) is inner


def constructed_by_name(binding, bindings):
    """The broken bindings (they fail under their canonical call) whose class ``binding``'s ``__init__`` builds
    itself, by its global name; not a class without a forward of its own (nothing tells how the block calls it: the
    crash it causes is the finding)."""
    return [b for b in bindings.values() if not b.composes and b is not binding and inspect.isclass(b.target)
            and b.target.forward is not nn.Module.forward and builds_by_name(binding.target, b.name, b.target)]


KEPT = contextvars.ContextVar("kept", default=())
"""While a block is built for a part found inside it (:attr:`Binding.part_of`): the part's own class, which no
stand-in replaces, broken or not (the stand-in would be the reference's code checked in the author's place)."""
AUTHORS_OWN = contextvars.ContextVar("authors_own", default=None)
"""While :func:`authors_own_blocks` lasts: the list of the roles whose reference graft could not be avoided."""


@contextlib.contextmanager
def authors_own_blocks():
    """Build blocks from the author's own sub-blocks only, broken or not: no stand-in, and a reference graft only
    where the author's sub-block cannot even be built (its role is then added to the list this yields), so that a
    block runs as its author wrote it."""
    grafted = []
    token = AUTHORS_OWN.set(grafted)
    try:
        yield grafted
    finally:
        AUTHORS_OWN.reset(token)


@contextlib.contextmanager
def standing_in(binding, cfg, bindings, convention):
    """While ``binding``'s class is built, the broken classes it builds by name are replaced in its module by
    stand-ins (:func:`stand_in`), so that its own code is still checked (the grafting of :func:`build_sub_block`
    for blocks a class makes itself)."""
    broken = [b for b in constructed_by_name(binding, bindings) if b.target not in KEPT.get()] \
        if AUTHORS_OWN.get() is None else []
    namespace = binding.target.__init__.__globals__ if broken else {}
    for b in broken:
        namespace[b.name] = stand_in(b, cfg, convention)
    try:
        yield
    finally:
        for b in broken:
            namespace[b.name] = b.target


def returned_tuple_length(cls):
    """How many items the class's forward returns in a tuple (``return out, weights``: 2), read from its source;
    0 when it returns no tuple."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    except (OSError, TypeError, SyntaxError):
        return 0
    return next((len(node.value.elts) for node in ast.walk(tree)
                 if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple)), 0)


def stand_in(broken, cfg, convention):
    """A class taking the broken class's constructor and forward arguments that computes the reference's role: the
    hyperparameters read from the constructor's arguments (by the binding's plan), the inputs from the forward's
    (masks in the code's ``convention``), a tuple of as many items if the broken forward returns one, the output
    in each place (the author's caller may unpack ``weights, out`` as well as ``out, weights``)."""
    signature = inspect.signature(broken.target)
    parameters = list(inspect.signature(broken.target.forward).parameters.values())[1:]
    plan = call_plan(parameters, CANONICAL_CALLS[broken.role])
    items = returned_tuple_length(broken.target)
    fields = {f.name for f in dataclasses.fields(Config)}

    class StandIn(nn.Module):
        grafted_by_checker = True

        def __init__(self, *args, **kwargs):
            super().__init__()
            arguments = signature.bind(*args, **kwargs).arguments
            values = {broken.constructor[n]: v for n, v in arguments.items()
                      if broken.constructor.get(n) in fields and isinstance(v, (int, float))}
            self.reference = grafted_reference(broken.role, dataclasses.replace(cfg, **values))

        def forward(self, *args, **kwargs):
            given = inspect.Signature(parameters).bind(*args, **kwargs).arguments
            named = {c: given.get(p.name) for p, c in zip(parameters, plan) if c}
            inputs = []
            for canonical in CANONICAL_CALLS[broken.role]:
                value = named.get(canonical)
                if canonical in ("key", "value") and value is None:
                    value = named.get("query")  # a self-attention forward(x, mask)
                if canonical.endswith("mask") and isinstance(value, torch.Tensor):
                    value = from_convention(value, convention)
                    value = value[:, 0] if value.dim() == 4 else value  # a head axis the reference adds itself
                inputs.append(value)
            out = self.reference(*inputs)
            return (out,) * items if items else out  # (its output in every place: whichever the caller reads)

    StandIn.__name__ = StandIn.__qualname__ = f"{broken.name}StandIn"
    return StandIn


SOURCE_WORDS, TARGET_WORDS = ("src", "source", "input", "enc"), ("tgt", "trg", "target", "output", "dec")


def sub_block_vocabularies(constructor, cfg):
    """``{argument: vocabulary size}`` for the embeddings, stacks and generator a model receives built: the source
    side (and an encoder that embeds) gets src_vocab, the target side, a decoder and the generator tgt_vocab (an
    embedding's side by the argument's name, else by order)."""
    sizes, embeddings = {}, [a for a, s in constructor.items() if s == "role:embedding"]
    for i, argument in enumerate(embeddings):
        name = argument.lower()
        target = any(w in name for w in TARGET_WORDS) or (i > 0 and not any(w in name for w in SOURCE_WORDS))
        sizes[argument] = cfg.tgt_vocab if target else cfg.src_vocab
    sizes.update({a: cfg.tgt_vocab for a, s in constructor.items() if s in ("role:generator", "role:decoder")})
    sizes.update({a: cfg.src_vocab for a, s in constructor.items() if s == "role:encoder"})  # (stacks that embed)
    return sizes


class GraftedFunction(nn.Module):
    """The reference's function of a role (eq. (1)'s attention) as a block, returning its output alone: what is put
    in place of a broken class of the candidate's playing that role."""
    grafted_by_checker = True

    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, *args, **kwargs):
        return first_tensor(self.function(*args, **kwargs))


def grafted_reference(role, cfg):
    """The reference's block of ``role``, built in place of a candidate's broken one and marked so
    (``grafted_by_checker``: its code is not the candidate's, so what it does is no finding of the candidate's)."""
    if role in FUNCTION_ROLES:
        return GraftedFunction(REFERENCE[role])
    block = call_with_canonical_arguments(REFERENCE[role], cfg)
    block.grafted_by_checker = True
    return block


def is_graft(module):
    """Whether ``module`` is a block of the reference's built in place of the candidate's (or a stand-in for one)."""
    return getattr(module, "grafted_by_checker", False) is True


def build_sub_block(binding, cfg, bindings, depth, convention="keep"):
    """A sub-block handed to a constructor (``EncoderBlock(features, attention_block, ...)``): the candidate's own,
    or, when the candidate's cannot even be built (its own checks report why), the reference's, so that the
    enclosing block's own code is still checked (the mapping notes say so)."""
    own = AUTHORS_OWN.get()
    if not binding.composes and own is None:
        return grafted_reference(binding.role, cfg)
    try:
        return build_from_plan(binding, cfg, bindings, depth, convention)
    except Exception:  # the candidate's own code; its role's checks report the error
        if own is not None:
            own.append(binding.role)
        return grafted_reference(binding.role, cfg)


def build_error(binding, bindings):
    """None when ``binding`` builds on the probe configuration, else the error."""
    try:
        build_from_plan(binding, PROBE, bindings)
    except Exception as exc:  # the candidate's own code
        return f"{type(exc).__name__}: {exc}"
    return None
