"""Static reading of a submission's own classes, for mistakes that a crash elsewhere may hide from the checks that
run the code: a ``forward`` that returns nothing, an attribute read as ``self.name`` that nothing ever assigns, and
a call of a sub-block (``self.attn(x, mask=mask)``, ``Encoder(n_src_vocab=...)``) that its ``forward`` or its
``__init__`` cannot take, and a name that nothing defines (read in a role class or a function building one).

A block whose ``__init__`` lacks ``super().__init__()`` cannot be built, so the checks never reach its forward; what
the forward does wrong is still there to read. Both lints are conservative: a name counts as assigned if any code
of the submission assigns an attribute of that name, names it in a string (``register_buffer("pe", ...)``,
``setattr``), or the class or ``torch.nn.Module`` defines it; a class with a base from another library (whose own
``__init__`` may assign anything) is not read for attributes. A sub-block's forward is read from its class body,
or from inside its ``__init__`` when it was indented one level too far; one taking ``*args`` or ``**kwargs`` is
not read.
"""
import ast
import builtins
import difflib
import inspect
import textwrap
from dataclasses import dataclass

import torch.nn as nn

MODULE_ATTRIBUTES = set(vars(nn.Module())) | set(dir(nn.Module))
CLOSE_NAME = 0.75
"""How alike (difflib's ratio) a name must be to another to be read as its misspelling."""


@dataclass
class Finding:
    cls: str
    cause: str
    """``forward_returns_nothing``, ``attribute_never_assigned``, ``sub_block_call_misfits`` or
    ``name_never_defined``."""
    message: str
    filename: str
    line: int


def parsed(sources):
    """``(filename, syntax tree)`` of each source that parses (the loader reports those that do not)."""
    for filename, text in sources:
        try:
            yield filename, ast.parse(text)
        except SyntaxError:
            continue


def class_definitions(trees):
    """``{class name: (filename, ClassDef)}``, the last definition of each name (a notebook may redefine one)."""
    found = {}
    for filename, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found[node.name] = (filename, node)
    return found


def assigned_names(trees):
    """Every attribute name any code of the submission assigns, and every string constant it holds."""
    names = set()
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
    return names


def own_body(function):
    """The nodes of a function, without those of the functions, lambdas and classes defined inside it."""
    stack = list(function.body) if isinstance(function.body, list) else [function.body]  # (a lambda's expression)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def method_of(node, name):
    """The method ``name`` defined in the body of a ClassDef, or None."""
    return next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == name), None)


def forward_returns_nothing(name, node):
    """The message if the class body's ``forward`` has no ``return <value>`` (and yields nothing), else None."""
    forward = method_of(node, "forward")
    if forward is None:
        return None
    for inner in own_body(forward):
        if isinstance(inner, (ast.Yield, ast.YieldFrom)) or (isinstance(inner, ast.Return) and inner.value is not None
                                                             and not (isinstance(inner.value, ast.Constant)
                                                                      and inner.value.value is None)):
            return None
    return forward, (f"{name}.forward has no return statement with a value: it returns None, so whatever uses "
                     f"{name} receives None instead of its output")


def self_attributes(function, context=ast.Store):
    """The attribute names ``function``'s source stores (``context=ast.Store``) or reads (``ast.Load``), or None
    when its source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, context)}


def attributes_never_assigned(cls, node, assigned):
    """``[(attribute node, message)]`` for ``self.name`` read in the class's methods and assigned nowhere."""
    if any(base not in (object, nn.Module) and base.__module__ != cls.__module__ for base in cls.__mro__):
        return []
    known = assigned | MODULE_ATTRIBUTES | set(dir(cls))
    for base in cls.__mro__:
        known |= set(getattr(base, "__annotations__", {}))
    found, seen = [], set()
    for method in node.body:
        if not (isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.args.args) or any(
                isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in method.decorator_list):
            continue
        self_name = method.args.args[0].arg
        for function in ast.walk(method):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            for inner in own_body(function):
                if isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Load) \
                        and isinstance(inner.value, ast.Name) and inner.value.id == self_name \
                        and inner.attr not in known and inner.attr not in seen:
                    seen.add(inner.attr)
                    where = getattr(function, "name", "a lambda")
                    found.append((inner, f"{cls.__name__} reads {self_name}.{inner.attr}, which no code assigns "
                                         f"(read in {where}; a typo, or an assignment left out of __init__?)"))
    return found


def forward_of(node):
    """The ``forward`` FunctionDef of a ClassDef: in its body, else nested in its ``__init__``; None if neither."""
    init = method_of(node, "__init__")
    nested = (f for f in ast.walk(init) if isinstance(f, ast.FunctionDef) and f.name == "forward") if init else ()
    return method_of(node, "forward") or next(nested, None)


def call_misfit(call, forward):
    """Why ``call`` cannot bind to ``forward``'s parameters (after ``self``), or None."""
    a = forward.args
    if a.vararg or a.kwarg or any(isinstance(x, ast.Starred) for x in call.args) \
            or any(k.arg is None for k in call.keywords):
        return None
    positional = [p.arg for p in (a.posonlyargs + a.args)[1:]]
    required = positional[:len(positional) - len(a.defaults)]
    required += [p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
    if len(call.args) > len(positional):
        return f"{len(call.args)} positional arguments where it takes at most {len(positional)}"
    given = set(positional[:len(call.args)])
    unknown = [k.arg for k in call.keywords if k.arg not in positional + [p.arg for p in a.kwonlyargs]]
    if unknown:
        return f"no parameter named {', '.join(unknown)}"
    missing = [name for name in required if name not in given | {k.arg for k in call.keywords}]
    return f"{', '.join(missing)} not given" if missing else None


def parameters_of(function):
    return ", ".join(p.arg for p in (function.args.posonlyargs + function.args.args)[1:])


def sub_block_calls_that_misfit(name, node, definitions):
    """``[(call node, message)]``: calls ``self.x(...)`` where ``__init__`` made ``self.x = Block(...)``, one of the
    submission's classes, whose forward cannot take the call, and calls ``Block(...)`` that its ``__init__`` cannot
    take (a block written for another version of its sub-blocks)."""
    init = method_of(node, "__init__")
    blocks = {}
    for statement in ast.walk(init) if init else ():
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call) \
                and isinstance(statement.value.func, ast.Name) and statement.value.func.id in definitions:
            for target in statement.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self":
                    blocks[target.attr] = statement.value.func.id
    found = []
    for method in node.body:
        if not isinstance(method, ast.FunctionDef):
            continue
        for call in ast.walk(method):
            if not isinstance(call, ast.Call):
                continue
            if isinstance(call.func, ast.Name) and call.func.id in definitions:
                block = call.func.id
                constructor = method_of(definitions[block][1], "__init__")
                misfit = constructor and call_misfit(call, constructor)
                if misfit:
                    found.append((call, f"{name}.{method.name} builds {block}(...), whose __init__("
                                        f"{parameters_of(constructor)}) cannot take that call: {misfit}"))
            elif method.name != "__init__" and isinstance(call.func, ast.Attribute) \
                    and isinstance(call.func.value, ast.Name) and call.func.value.id == "self" \
                    and call.func.attr in blocks:
                block = blocks[call.func.attr]
                forward = forward_of(definitions[block][1])
                misfit = forward and call_misfit(call, forward)
                if misfit:
                    found.append((call, f"{name}.{method.name} calls self.{call.func.attr}(...), a {block}, whose "
                                        f"forward({parameters_of(forward)}) cannot take that call: {misfit}"))
    return found


def names_bound_in(function):
    """Every name a function binds: its parameters (and those of the functions inside it), assignments, imports."""
    bound = set()
    for n in ast.walk(function):
        if isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            bound.add(n.id)
        elif isinstance(n, ast.alias):
            bound.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not function:
            bound.add(n.name)
    return bound


def undefined_names(function, namespace):
    """``[(Name node, closest name the function binds or None)]``, one per name the function reads that neither it,
    the submission's module nor Python defines (a NameError waiting for the line to run)."""
    bound, found, seen = names_bound_in(function), [], set()
    for n in ast.walk(function):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in bound | seen \
                and n.id not in namespace and not hasattr(builtins, n.id):
            seen.add(n.id)
            close = difflib.get_close_matches(n.id, sorted(bound), n=1, cutoff=CLOSE_NAME)
            found.append((n, close[0] if close else None))
    return found


def names_never_defined(owner, function, namespace):
    """``[(Name node, message)]`` for the :func:`undefined_names` of a function."""
    return [(n, f"{owner} reads {n.id}, which no code that ran defines" +
             (f" ({close}, which it defines, misspelled?)" if close else ""))
            for n, close in undefined_names(function, namespace)]


def defined_at_top(trees, namespace):
    """The names the submission's module defines: those of ``namespace`` (its module dict, what ran) and those its
    sources bind at their top level, in a cell or block that failed here too (a package missing on this machine is
    no fault of the code that reads the names it was to define)."""
    names = set(namespace)
    for _, tree in trees:
        for statement in tree.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(statement.name)
            else:
                names |= names_bound_in(statement)
    return names


def read_factories(trees, classes, namespace):
    """Findings for the submission's top-level functions that build one of ``classes`` (``build_transformer``):
    names they read that nothing defines."""
    findings, namespace = [], defined_at_top(trees, namespace)
    for filename, tree in trees:
        for function in tree.body:
            if isinstance(function, ast.FunctionDef) and any(
                    isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in classes
                    for c in ast.walk(function)):
                findings += [Finding(function.name, "name_never_defined", message, filename, n.lineno)
                             for n, message in names_never_defined(function.name, function, namespace)]
    return findings


def read_classes(trees, classes, namespace):
    """Findings for the given classes (``{name: class}``) in the submission's parsed sources (``trees``, from
    :func:`parsed`); ``namespace``, the submission's module dict, holds the names defined at its top."""
    definitions = class_definitions(trees)
    assigned = assigned_names(trees)
    findings, namespace = [], defined_at_top(trees, namespace)
    for name, cls in classes.items():
        if name not in definitions or not inspect.isclass(cls):
            continue
        filename, node = definitions[name]
        returns = forward_returns_nothing(name, node)
        if returns:
            findings.append(Finding(name, "forward_returns_nothing", returns[1], filename, returns[0].lineno))
        for attribute, message in attributes_never_assigned(cls, node, assigned):
            findings.append(Finding(name, "attribute_never_assigned", message, filename, attribute.lineno))
        for call, message in sub_block_calls_that_misfit(name, node, definitions):
            findings.append(Finding(name, "sub_block_call_misfits", message, filename, call.lineno))
        for method in (m for m in node.body if isinstance(m, ast.FunctionDef)):
            findings += [Finding(name, "name_never_defined", message, filename, n.lineno)
                         for n, message in names_never_defined(f"{name}.{method.name}", method, namespace)]
    return findings
