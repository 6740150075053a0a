"""Static reading of the calls a submission makes to its own classes, functions and methods: arguments passed in
the wrong order.

Student code often builds its blocks positionally (``DecoderBlock(d_model, attn, cross, ff, dropout)`` against
``def __init__(self, features, self_attn, cross_attn, dropout, feed_forward)``) and calls its helpers so
(``attention(query, key, value)`` against ``def attention(key, query, value)``); the mistake only shows as a crash
deep inside a forward, or as numbers silently wrong. Each positional argument that is a plain name is bound to the
parameter it lands in and compared, by the words of the two names and the families of synonyms of
``adapters.names``, with the other parameters: two arguments that each fit the other's parameter better than
their own were swapped; an argument of one known kind landing in a constructor parameter of another known kind
(``features`` into ``eps``) was misplaced.
"""
import ast
import inspect
import re
from dataclasses import dataclass

from adapters.names import ARGUMENT_NAMES, normalize

GENERIC_WORDS = {"block", "layer", "module", "self", "the", "encoder", "decoder", "enc", "dec", "src", "tgt", "x"}
KIND_OF_NAME = {normalize(s): kind for kind, names in ARGUMENT_NAMES.items() for s in names}
KINDS = {"eps": "eps", "epsilon": "eps", "layernormeps": "eps", "normeps": "eps"}
COMPATIBLE = {"src_vocab": "vocab_size", "tgt_vocab": "vocab_size", "d_v": "d_k"}


@dataclass
class Misplaced:
    callee: str
    """The class called."""
    caller: str | None
    """The class (or top-level function) whose code makes the call."""
    message: str
    filename: str
    line: int


def words(name):
    """The meaningful words of an identifier: ``decoder_feedforward_block`` -> {"feedforward"}."""
    parts = re.findall(r"[a-z]+|[0-9]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower())
    return {p for p in parts if p not in GENERIC_WORDS and len(p) > 1}


def kind(name):
    n = normalize(name)
    return KINDS.get(n) or KIND_OF_NAME.get(n)


def group(name):
    """The kind of value a name stands for, vocabulary sizes of either side counted as one kind."""
    k = kind(name)
    return COMPATIBLE.get(k, k)


def fit(argument, parameter):
    """How well an argument's name fits a parameter's name: shared words, or the same known kind."""
    shared = len(words(argument) & words(parameter))
    same_kind = kind(argument) is not None and kind(argument) == kind(parameter)
    return shared + 2 * same_kind


def misplaced_arguments(call_args, parameters, swaps_only=False):
    """``[(argument, parameter it landed in, parameter it fits)]`` for the positional plain-name arguments (with
    ``swaps_only``, only pairs of arguments that each fit the other's parameter)."""
    bound = list(zip(call_args, parameters))
    found = []
    for i, (argument, parameter) in enumerate(bound):
        if argument is None:
            continue
        for j, (other_argument, other_parameter) in enumerate(bound):
            if j <= i or other_argument is None:
                continue
            if fit(argument, other_parameter) > fit(argument, parameter) and \
                    fit(other_argument, parameter) > fit(other_argument, other_parameter):
                found.append((argument, parameter, other_parameter))
                found.append((other_argument, other_parameter, parameter))
        if not found and not swaps_only and group(argument) and group(parameter) \
                and group(argument) != group(parameter) and not any(group(argument) == group(p) for p in parameters):
            found.append((argument, parameter, None))
    return found


def positional_parameters(function, bound=0):
    """The names a positional call fills, in order, after the first ``bound`` (``self``); None for ``*args``."""
    try:
        parameters = list(inspect.signature(function).parameters.values())[bound:]
    except (TypeError, ValueError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL,) for p in parameters):
        return None
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def callee(node, owner, classes, functions):
    """``(name shown, positional parameters, swaps_only)`` for a call to one of the submission's classes
    (``EncoderBlock(...)``), functions (``attention(...)``) or methods (``self.attention(...)``,
    ``MultiHeadAttentionBlock.attention(...)``); None for any other call. Argument names are compared with the kinds
    of constructor arguments only in constructor calls: elsewhere only swaps count."""
    func = node.func
    if isinstance(func, ast.Name) and func.id in classes:
        return func.id, positional_parameters(classes[func.id].__init__, bound=1), False
    if isinstance(func, ast.Name) and func.id in functions:
        return func.id, positional_parameters(functions[func.id]), True
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    on_self = func.value.id == "self"
    holder = classes.get(owner if on_self else func.value.id)
    method = inspect.getattr_static(holder, func.attr, None) if holder is not None else None
    if isinstance(method, staticmethod):
        bound = 0
    elif isinstance(method, classmethod):
        bound = 1
    elif inspect.isfunction(method):
        bound = 1 if on_self else 0  # ``Class.method(instance, ...)`` passes self itself
    else:
        return None
    name = f"{holder.__name__}.{func.attr}"
    return name, positional_parameters(getattr(method, "__func__", method), bound=bound), True


def enclosing_definitions(tree):
    """``{id(call node): name of the innermost enclosing class, else of the top-level function}``."""
    owners = {}

    def visit(node, owner):
        for child in ast.iter_child_nodes(node):
            inner = owner
            if isinstance(child, ast.ClassDef) or (isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                                                   and owner is None):
                inner = child.name
            if isinstance(child, ast.Call):
                owners[id(child)] = owner
            visit(child, inner)
    visit(tree, None)
    return owners


def read_calls(trees, namespace, module_name):
    """Misplaced arguments in the calls to the classes, functions and methods the submission defines
    (``namespace``, ``module_name``), found in its parsed sources (``trees``, from ``adapters.lint.parsed``); each
    names the class or top-level function making the call."""
    own = {name: obj for name, obj in namespace.items() if getattr(obj, "__module__", None) == module_name}
    classes = {name: obj for name, obj in own.items() if inspect.isclass(obj)}
    functions = {name: obj for name, obj in own.items() if inspect.isfunction(obj)}
    findings = []
    for filename, tree in trees:
        owners = enclosing_definitions(tree)
        for node in ast.walk(tree):
            found = isinstance(node, ast.Call) and callee(node, owners.get(id(node)), classes, functions)
            if not found:
                continue
            name, parameters, swaps_only = found
            if not parameters or not node.args or len(node.args) > len(parameters) \
                    or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            arguments = [a.id if isinstance(a, ast.Name) else None for a in node.args]
            problems = misplaced_arguments(arguments, parameters[: len(arguments)], swaps_only)
            if problems:
                parts = [f"{a!r} lands in {p!r}" + (f" but fits {q!r}" if q else f" (a {kind(a)} value where {kind(p)} "
                                                                                  "is expected)")
                         for a, p, q in problems]
                findings.append(Misplaced(name, owners.get(id(node)),
                                          f"{name}(...) called with arguments in the wrong order: "
                                          + "; ".join(parts), filename, node.lineno))
    return findings
