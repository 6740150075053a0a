"""Find candidates: the classes and functions of a submission's own code that may play each role, ranked.

By name first (the synonym families of :mod:`adapters.names`, fuzzily, or a word of a longer name), then by what a
candidate does where its name says nothing: a LayerNorm, an embedding, a positional encoding found by behaviour on
the probe configuration (:data:`SIGNATURES`), a function that makes a causal mask, a class taking two vocabularies.
"""
import ast
import contextlib
import functools
import inspect
import io
import os
import re
import sys
import textwrap
from pathlib import Path

import torch
import torch.nn as nn

from adapters.building import PROBE, Binding, config_fields, probe_build
from adapters.call_plans import first_tensor, returns_table
from adapters.construction import constructor_plan_or_none
from adapters.masks import infer_convention
from adapters.names import (ROLE_NAMES, ROLE_WORDS, argument_role, name_score, names_another_role_exactly,
                            names_padding_only, names_the_role, normalize)
from conformance.contract.interface import FUNCTION_ROLES
from conformance.contract.probes import ignores_input_scale


def candidates(namespace, modules):
    """Classes (nn.Module subclasses) and functions defined by the code itself (in one of ``modules``, the names of
    the submission's own modules), and static methods of its classes."""
    found = {}
    for name, obj in list(namespace.items()):
        if name.startswith("_") or getattr(obj, "__module__", None) not in modules:
            continue
        if inspect.isclass(obj) and issubclass(obj, nn.Module):
            found[name] = obj
            for attribute, value in vars(obj).items():
                if isinstance(value, staticmethod):
                    found[f"{name}.{attribute}"] = value.__func__
        elif inspect.isfunction(obj):
            found[name] = obj
    return found


ROLE_ORDER = ("layer_norm", "feed_forward", "attention", "multi_head_attention", "embedding", "positional_encoding",
              "sublayer_connection", "encoder_layer", "decoder_layer", "encoder", "decoder", "generator",
              "padding_mask", "subsequent_mask", "model")


def accepts(role, obj):
    if role in ("padding_mask", "subsequent_mask"):
        return inspect.isfunction(obj)
    if role == "attention":
        return True
    if role == "model":
        return not inspect.isclass(obj) or takes_two_sequences(obj)
    if role == "generator":
        return inspect.isclass(obj) and maps_to_a_vocabulary(obj)
    return inspect.isclass(obj)


def takes_two_sequences(cls):
    """Whether a module class can be a whole model: its forward takes two inputs (the source and the target, §3), or
    it has ``encode`` and ``decode`` methods. A block taking one input (an embedding block: token lookup and
    positions) never is, whatever its name."""
    if callable(getattr(cls, "encode", None)) and callable(getattr(cls, "decode", None)):
        return True
    try:
        parameters = list(inspect.signature(cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return True  # (nothing to read: its behaviour says)
    return any(p.kind == p.VAR_POSITIONAL for p in parameters) or sum(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters) >= 2


def ranked(role, found, taken, prefer=frozenset(), completed=None):
    """Candidates for ``role``, those named in ``prefer`` first, then (for the model) the functions that build it
    as its author does (``make_model``, rather than a class built of the checker's guesses), then best name first;
    an object already bound to another role is not a candidate. A function whose name says nothing is still a
    subsequent-mask helper when it makes one (:func:`makes_causal_mask`), ranked after the names; so is the model
    class whose forward pass the author's own run completed (``completed``, ``adapters.observe``), whatever its name,
    and one whose name says it holds both stacks (:func:`names_both_stacks`)."""
    scored, layers = [], single_layers(found)
    for name, obj in found.items():
        if name in taken or not accepts(role, obj) or (role in STACK_OF.values() and name in layers):
            continue
        short = name.rsplit(".", 1)[-1]
        score = name_score(short, ROLE_NAMES[role])
        named_for_its_stack = not score and role in STACK_OF and name in layers \
            and names_the_role(short, STACK_OF[role])
        if named_for_its_stack:  # a layer named for its stack (``Encoder``, stacked N times)
            score = name_score(short, ROLE_NAMES[STACK_OF[role]]) or WORD_SCORE
        if score < 1 and names_another_role_exactly(short, role) and not named_for_its_stack \
                or role == "subsequent_mask" and names_padding_only(short):
            continue
        if not score and (any(word in normalize(short) for word in ROLE_WORDS.get(role, ()))
                          or names_the_role(short, role)):
            score = WORD_SCORE
        if not score and role == "subsequent_mask" and makes_causal_mask(obj):
            score = BEHAVIOUR_SCORE
        if not score and role == "model" and (short == completed or names_both_stacks(short)
                                              or takes_two_vocabularies(obj)):
            score = BEHAVIOUR_SCORE
        if not score and role in SIGNATURES and inspect.isclass(obj) and acts_as(role, obj):
            score = BEHAVIOUR_SCORE
        if score:
            scored.append((score, name, obj))
    if role in STACK_OF:  # (``EncoderMultiLayer`` building N ``EncoderSingleLayer``: the stack, not the layer)
        scored = [s for s in scored if not stack_of_rivals(s[2], scored)]
    return sorted(scored, key=lambda t: (t[1] not in prefer, not (role == "model" and inspect.isfunction(t[2])),
                                         -t[0]))


STACK_OF = {"encoder_layer": "encoder", "decoder_layer": "decoder"}
"""The stack (§3.1: N identical layers) each layer role makes up."""


def single_layers(found):
    """The names of the candidate classes that another one builds over and over (in a comprehension, a loop or a
    multiplied list: the N layers of a stack, §3.1) and that repeat no block themselves: one layer, whatever its
    name (``Encoder`` holding one attention and one feed-forward, which the model stacks six times)."""
    return repeated_layers(tuple((name, obj) for name, obj in found.items() if inspect.isclass(obj)))


@functools.lru_cache(maxsize=64)
def repeated_layers(classes):
    names = {id(cls): name for name, cls in classes}
    repeats = {name: blocks_repeated_in(cls, names) for name, cls in classes}
    return frozenset(name for name in set().union(*repeats.values()) if not repeats[name]) if repeats else frozenset()


def stack_of_rivals(obj, scored):
    """Whether candidate class ``obj`` builds N copies of another candidate for the same layer role (``scored``:
    (score, name, object)): it is their stack (§3.1), whatever its name says."""
    rivals = {id(other): name for _, name, other in scored if inspect.isclass(other) and other is not obj}
    return inspect.isclass(obj) and bool(rivals) and bool(blocks_repeated_in(obj, rivals))


def blocks_repeated_in(cls, names):
    """The candidate classes (``names``: id -> name) that ``cls``'s source builds repeatedly: a call of theirs
    inside a comprehension, a loop or a list multiplied (``nn.ModuleList([Layer(...) for _ in range(n)])``)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return set()
    module = sys.modules.get(cls.__module__)
    scope = vars(module) if module is not None else {}
    repeated = set()
    for node in ast.walk(tree):
        if (isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.For))
                or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult))) and not sub_layers_count(node):
            for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
                target = resolved(call.func, scope)
                if id(target) in names and target is not cls:
                    repeated.add(names[id(target)])
    return repeated


def sub_layers_count(node):
    """Whether the repetition ``node`` (a comprehension, a loop, a list multiplied) runs a literal two or three
    times: the residual connections of a layer's two or three sub-layers (§3.1, ``[ResidualConnection(p) for _ in
    range(2)]``), not the N layers of a stack."""
    if isinstance(node, ast.BinOp):
        counts = [side for side in (node.left, node.right) if isinstance(side, ast.Constant)]
    else:
        iters = [node.iter] if isinstance(node, ast.For) else [g.iter for g in node.generators]
        counts = [i.args[-1] for i in iters if isinstance(i, ast.Call) and isinstance(i.func, ast.Name)
                  and i.func.id == "range" and len(i.args) == 1 and isinstance(i.args[0], ast.Constant)]
    return bool(counts) and all(c.value in (2, 3) for c in counts)


def used_in_the_code(found, main, modules):
    """The names of the candidates the code uses: those of its live modules (:func:`live_modules`) and those another
    of the submission's ``modules`` imports, then every candidate one of those names in its source (a block building
    it, a function making the model, a subclass), and so on: what only a dead module names is dead too. Where
    nothing says which modules are live, every candidate another names counts. None when no source can be read
    (nothing then says what is dead code)."""
    names = {id(obj): name for name, obj in found.items()}
    named = {name: names_in_source(obj, names) for name, obj in found.items()}
    if all(n is None for n in named.values()):
        return None
    imported = {id(value) for m in modules - {main} if m in sys.modules for value in vars(sys.modules[m]).values()
                if getattr(value, "__module__", m) != m}
    live = live_modules(main, frozenset(modules))
    used = {name for name, obj in found.items() if getattr(obj, "__module__", None) in (live or {main})
            or id(obj) in imported}
    if live is None:
        return used.union(*[n for n in named.values() if n])
    reached = list(used)
    while reached:
        for name in named.get(reached.pop()) or ():
            if name not in used:
                used.add(name)
                reached.append(name)
    return used


@functools.lru_cache(maxsize=64)
def live_modules(main, modules):
    """The submission's ``modules`` that its code runs: the one loaded (``main``), those another of its files imports
    (a training script that cannot run here included: ``from transformer_model import build_transformer``), and the
    scripts (a ``__main__`` block, or imports of the others). None where no file imports another: then nothing says
    that a module is dead (an old copy kept in a folder of its own, which nothing imports)."""
    loaded = getattr(sys.modules.get(main), "__file__", None)
    if not isinstance(loaded, str) or not os.path.isabs(loaded):
        return None
    root = Path(os.path.realpath(os.path.dirname(loaded)))  # (the submission's folder: never the folders above it)
    files = {m: getattr(sys.modules.get(m), "__file__", None) for m in modules - {main}}
    files = {m: os.path.realpath(f) for m, f in files.items() if isinstance(f, str) and os.path.isabs(f)
             and Path(os.path.realpath(f)).is_relative_to(root)}
    if not files:
        return None
    stems = {m.rsplit(".", 1)[-1] for m in files}
    named, scripts = set(), set()  # (a module's last dotted part, the file naming it); files that are scripts
    for path, text in project_texts(os.path.realpath(loaded)):
        said = set()
        for source, names, plain in IMPORT_LINE.findall(text):
            words = [source, *(f"{source}.{n}" for n in names.split(","))] if source else plain.split(",")
            said |= {w.split(" as ")[0].strip().rsplit(".", 1)[-1] for w in words}
        named |= {(w, path) for w in said & stems}
        if MAIN_BLOCK.search(text) or said & stems:
            scripts.add(path)
    if not named:
        return None
    return {main} | {m for m, f in files.items()
                     if f in scripts or any(w == m.rsplit(".", 1)[-1] and where != f for w, where in named)}


@functools.lru_cache(maxsize=16)
def project_texts(loaded):
    """``((path, text), ...)``: the .py and .ipynb files of the submission whose loaded module's file is ``loaded``:
    a folder's (``__init__.py`` of a project or package: every file under it, at most :data:`FILES_READ`, hidden
    folders left out), else that one file."""
    root = Path(loaded).parent
    if Path(loaded).name != "__init__.py":
        paths = [Path(loaded)]
    else:
        paths = []
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = sorted(d for d in subfolders if not d.startswith((".", "__pycache__")))
            paths += [Path(folder) / n for n in sorted(names) if n.endswith((".py", ".ipynb"))]
            if len(paths) >= FILES_READ:
                break
    texts = []
    for path in paths[:FILES_READ]:
        try:
            texts.append((os.path.realpath(path), path.read_text(errors="replace")))
        except OSError:
            continue
    return tuple(texts)


def called_in_the_code(name, main):
    """Whether a file of the submission (a project's folder, the loaded module ``main`` its ``__init__``) calls a
    function named ``name`` anywhere but where it is defined: a mask helper that no file of a project with scripts
    calls says nothing of the masks its blocks are given. A single file of definitions counts as calling it."""
    loaded = getattr(sys.modules.get(main), "__file__", None)
    if not name or not isinstance(loaded, str) or not os.path.isabs(loaded) or Path(loaded).name != "__init__.py":
        return True  # (one file of definitions, or nothing to read: no call says nothing, taken as called)
    call = re.compile(rf"(?<!def )\b{re.escape(name)}\s*\(")
    return any(call.search(text) for _, text in project_texts(os.path.realpath(loaded)))


IMPORT_LINE = re.compile(r'^[\s"]*(?:from\s+(\.*[\w.]*)\s+import\s+([\w., ]+)|import\s+([\w., ]+))', re.M)
"""An import statement at the start of a line of a .py file, or of a line of a notebook's JSON ("from x import y")."""
MAIN_BLOCK = re.compile(r'^if\s+__name__\s*==\s*[\'"]__main__[\'"]', re.M)
FILES_READ = 400
"""The most files of a project read for its imports."""


def names_in_source(obj, names):
    """The candidates (``names``: id -> candidate name) that ``obj``'s source names, resolved in its module's
    globals (``MultiHeadAttention``, ``layers.MultiHeadAttention``); None when its source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    module = sys.modules.get(getattr(obj, "__module__", None))
    scope = vars(module) if module is not None else getattr(obj, "__globals__", {})
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)):
            target = resolved(node, scope)
            if id(target) in names and target is not obj:
                found.add(names[id(target)])
    return found


def resolved(node, scope):
    """The object a name or a dotted name of some source denotes in ``scope``, or None."""
    if isinstance(node, ast.Name):
        return scope.get(node.id)
    if isinstance(node, ast.Attribute):
        return getattr(resolved(node.value, scope), node.attr, None)
    return None


def without_dead_code(options, used, functions=False, dead=frozenset()):
    """``options`` (ranked candidates of a role) less the classes nothing in the code uses (``used``, from
    :func:`used_in_the_code`) where a class it uses is named at least as well for the role: a class nothing uses
    loses to one that is used (an old version kept beside the one the model builds); where one it uses is named at
    all, in a module no file imports (``dead``, :func:`live_modules`); functions too with ``functions`` (a model's
    factory in a dead module)."""
    if used is None:
        return options
    counted = (lambda obj: True) if functions else inspect.isclass
    scores = [score for score, name, obj in options if counted(obj) and name in used]
    return [(score, name, obj) for score, name, obj in options
            if not counted(obj) or name in used or not scores
            or not any(s >= score for s in scores) and getattr(obj, "__module__", None) not in dead]


WORD_SCORE = 0.8
BEHAVIOUR_SCORE = 0.5
"""The rank of a candidate found by what it does, not by its name (below every name that counts)."""


def normalizes(module, x):
    """§3.1 LayerNorm: vector parameters of its own only (a gain, a bias; no parameterised children), and the same
    output for ``x`` and ``4 x``."""
    return all(p.dim() <= 1 for p in module.parameters(recurse=False)) \
        and not any(True for child in module.children() for _ in child.parameters()) \
        and ignores_input_scale(module, x)


def looks_up_tokens(module, x):
    """§3.4 embeddings: token ids to d_model vectors, one vector per token wherever it stands, or (a block adding
    its positions itself, §3.5) one per token and position: two samples then differ, at any position, by what
    their tokens there are only."""
    tokens = torch.randint(0, PROBE.vocab_size, x.shape[:2], generator=torch.Generator().manual_seed(1))
    tokens[1, 3] = tokens[0, 0]
    tokens[:, 4] = tokens[:, 1]  # the same pair of tokens at positions 1 and 4
    tokens[1, 1:] = torch.where(tokens[1, 1:] == tokens[0, 1:], (tokens[1, 1:] + 1) % PROBE.vocab_size, tokens[1, 1:])
    out = module(tokens)
    if not (isinstance(out, torch.Tensor) and out.is_floating_point() and out.shape == x.shape):
        return False
    apart = out[0] - out[1]
    return bool(torch.allclose(out[0, 0], out[1, 3]) or torch.allclose(apart[1], apart[4], atol=1e-5)
                and not torch.allclose(apart[1], torch.zeros_like(apart[1])))


def adds_positions(module, x):
    """§3.5 positional encodings: what the block adds to its input (or returns, its table) depends on the position
    only: the same for another input, and not the same at every position."""
    other = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    first, second = module(x), module(other)
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
        return False
    if first.shape == x.shape and torch.allclose(first - x, second - other, atol=1e-5):
        added = first - x
    elif returns_table(first, x, known=True) and torch.equal(first, second):
        added = first.reshape(x.shape[1:])
    else:
        return False
    rows = added.reshape(-1, added.shape[-1])  # one row of d_model features per position (and sample)
    return not torch.allclose(rows, rows[:1].expand_as(rows))


def attends(module, x):
    """§3.2.2 multi-head attention: projections of its own taking d_model features in (W^Q, W^K, W^V, W^O), and,
    called on one sequence as query, key and value, d_model vectors out at each position that depend on the other
    positions (a feed-forward network reads one position at a time)."""
    if sum(isinstance(m, nn.Linear) and m.in_features == PROBE.d_model for m in module.modules()) < 3:
        return False
    other = x.clone()
    other[:, -1] += 1.0
    first, second = (first_tensor(module(v, v, v)) for v in (x, other))
    return isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and first.shape == x.shape \
        and not torch.allclose(first[:, 0], second[:, 0], atol=1e-6)


SIGNATURES = {"layer_norm": normalizes, "embedding": looks_up_tokens, "positional_encoding": adds_positions,
              "multi_head_attention": attends}
"""What the blocks of the roles found by behaviour do, called in eval mode on the probe configuration."""


@functools.lru_cache(maxsize=512)
def acts_as(role, cls):
    """Whether module class ``cls``, built on the probe configuration from the hyperparameters its constructor names,
    does what ``role``'s block does (:data:`SIGNATURES`), whatever it is called (``LN``, ``Tok``, ``Pos``)."""
    module = probe_build(Binding(role, cls.__name__, cls, constructor_plan_or_none(cls, role, {})), {})
    if not isinstance(module, nn.Module):
        return False
    x = torch.randn(2, 5, PROBE.d_model, generator=torch.Generator().manual_seed(0))
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            return bool(SIGNATURES[role](module.eval(), x))
    except Exception:  # the candidate's own code: it does not act as the role
        return False


def names_both_stacks(name):
    """Whether ``name``'s words name an encoder and a decoder (``Transformer_Encoder_Decoder``): what holds both
    stacks is the model (§3), though its longest run of words (``TransformerEncoder``) names an encoder."""
    words = {w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)}
    return bool(words & {"encoder", "enc"}) and bool(words & {"decoder", "dec"})


@functools.lru_cache(maxsize=512)
def maps_to_a_vocabulary(cls):
    """Whether module class ``cls`` can be a generator, the map from d_model to the vocabulary's logits (§3.4):
    built on the probe configuration, one of its weights has an axis as long as a vocabulary. An attention head
    ``Head(d_model, d_k)`` has none; a class that does not build there is not ruled out (its checks say why)."""
    try:
        module = probe_build(Binding("generator", cls.__name__, cls, constructor_plan_or_none(cls, "generator", {})),
                             {})
        weights = [p for p in module.parameters() if p.dim() >= 2] if isinstance(module, nn.Module) else None
    except Exception:  # noqa: BLE001 (the class's own code, such as an __init__ that never set up its nn.Module)
        return True
    if weights is None:
        return True
    vocabularies = {PROBE.vocab_size, PROBE.src_vocab, PROBE.tgt_vocab}
    return not weights or any(set(p.shape) & vocabularies for p in weights)


def takes_two_vocabularies(cls):
    """A module class whose constructor takes a source and a target vocabulary size, itself or in its configuration
    object: a whole model, whatever its name (``Translator(..., src_vocab_size, tgt_vocab_size, ...)``)."""
    try:
        parameters = list(inspect.signature(cls).parameters.values()) if inspect.isclass(cls) else []
    except (TypeError, ValueError):
        return False
    names = {argument_role(p.name) for p in parameters}
    for p in parameters:  # or fields of its configuration object its own code reads (config.input_vocab_size, ...)
        fields = config_fields(cls, p) or ()
        source = inspect.getsource(cls) if fields else ""
        names |= {argument_role(f) for f in fields if f".{f}" in source}
    return {"src_vocab", "tgt_vocab"} <= names


def makes_causal_mask(function):
    """True when ``function`` takes a size (and maybe a device) and returns a 3 x 3 mask of the subsequent
    positions in some convention (``create_mask(seq_len, device)`` -> triu(ones, 1).bool()). Only a function whose
    code builds a triangle (``triu``/``tril``) is called: the others might train a model."""
    try:
        parameters = [p for p in inspect.signature(function).parameters.values() if p.default is p.empty]
        source = inspect.getsource(function)
    except (TypeError, ValueError, OSError):
        return False
    if not re.search(r"\b(triu|tril)\b", source):
        return False
    if not 1 <= len(parameters) <= 2:
        return False
    return infer_convention(function) is not None


DEFINITION = re.compile(r"^(class|def)\s+([A-Za-z_]\w*)", re.MULTILINE)


def roles_in_uncompiled_cells(problems, namespace, bound):
    """``{role: (name, problem)}`` for the roles left unbound whose best candidate is defined (``class X`` or
    ``def x`` at the top of a cell) in a cell that does not compile, so that the report says so instead of calling
    the role missing; ``problems`` are the loader's ``CellProblem``s."""
    found = {}
    for problem in problems:
        if problem.kind != "syntax":
            continue
        for keyword, name in DEFINITION.findall(problem.cell.source):
            if name in namespace:
                continue  # defined again elsewhere, and that definition is what discovery saw
            for role in ROLE_ORDER:
                kind_fits = role in ("attention", "model") or (keyword == "def") == (role in FUNCTION_ROLES)
                if role not in bound and role not in found and kind_fits and name_score(name, ROLE_NAMES[role]):
                    found[role] = (name, problem)
                    break
    return found
