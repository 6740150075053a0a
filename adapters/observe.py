"""Observe the author's own usage before guessing (issue 23): run what the author wrote to be run, under a recorder,
and learn from it how the code is built and called.

What is run, in this order, each under a time budget:

1. the ``if __name__ == "__main__":`` blocks the loader left alone: those of a notebook's cells or of a file (in
   Jupyter a cell runs as ``__main__``, so a notebook's main block is code its author ran), run in the loaded
   module's namespace, so that the globals it sets (``d_model = 512``) are set as the author's classes expect;
   and those of the project's own modules, in their module's namespace;
2. the demo scripts of a project folder that the loader did not import (``demo.py``, ``example.py``, ``main.py``:
   modules with top-level statements), as ``__main__``; not a training script, which may write or download before
   its model's first forward pass.

While they run, every construction of one of the submission's ``nn.Module`` classes and every forward call of its
instances are recorded (:class:`Observation`); the run stops, by a sentinel raised from a forward hook, as soon as
a module built at top level (the model, not one of its parts) completes a forward pass, so that a training loop is
never run to its end.

What the checker takes from it (:func:`size_knobs`): where the author's classes take no size at all and read
them from globals (set by the main block it ran) or from a constants module (``D_MODEL = 512``, ``n_heads = 8``),
those globals are the author's way of configuring a block, and the checker sets them to its own configuration
before it builds one (``conformance.contract.interface.set_size_globals``), rather than build at one width and feed another.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import dis
import inspect
import io
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn

from adapters import cells, loading
from adapters.names import argument_role
from conformance.contract.interface import DERIVED_GLOBALS

BUDGET = 20.0
"""Seconds all the author's entry points together may run while observed."""

DEMO_SCRIPTS = ("demo", "demos", "example", "examples", "sample", "quickstart", "usage", "inference", "translate",
                "main", "run")
"""Words naming a project's demo scripts, in the order they are tried. Only these are run: a training script
(``train.py``) may write checkpoints or fetch data before its model's first forward pass."""

SIZE_FIELDS = ("d_model", "h", "d_ff", "N", "vocab_size", "src_vocab", "tgt_vocab", "max_len", "dropout")
"""The fields of ``conformance.contract.interface.Config`` an author's globals can set."""


class Observed(BaseException):
    """Raised from a forward hook once a top-level module completed a forward pass: what was to be seen is seen.
    A BaseException, so that the author's ``except Exception`` does not swallow it."""


@dataclass
class Call:
    """One forward call of a module of the author's: the shapes (or types) of what it was given."""
    args: tuple
    kwargs: dict
    output: object


@dataclass
class Observation:
    """What running the author's entry points showed."""
    ran: list = field(default_factory=list)
    """What was run (``"main block of cell 9"``, ``"demo.py"``), with how it ended."""
    constructed: dict = field(default_factory=dict)
    """Class name -> how its first instance was constructed, ``(args, kwargs)`` as summaries."""
    calls: dict = field(default_factory=dict)
    """Class name -> its first forward :class:`Call`."""
    completed: str | None = None
    """The class of the top-level module whose forward pass completed (the author's model), or None."""
    assigned: dict = field(default_factory=dict)
    """Global name -> where an entry point assigns it (``main block of cell 9``): the names the author's code gets
    from its main block."""

    def describe(self):
        if not self.ran:
            return []
        seen = f"; the forward pass of {self.completed} completed" if self.completed else ""
        return [f"observed the author's own usage: ran {', '.join(self.ran)}{seen}"]


def summary(value):
    """A short, comparable form of an argument: a tensor's shape and dtype, a module's class, else the value."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype).removeprefix("torch."))
    if isinstance(value, nn.Module):
        return ("module", type(value).__name__)
    if isinstance(value, (int, float, bool, str, type(None))):
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(summary(v) for v in value[:8])
    return ("object", type(value).__name__)


def main_guards(tree):
    """The top-level ``if __name__ == "__main__":`` statements of a parsed module."""
    return [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
            and "__name__" in ast.unparse(node.test)]


def assigned_names(nodes):
    """The global names that statements ``nodes`` assign (at their own level and in nested blocks, not in
    functions or classes)."""
    names = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return names


def entry_points(loaded, modules):
    """``[(label, code, namespace)]``: what the author wrote to be run and the loader did not run (see the module
    docstring), in the order it is tried."""
    found = []
    if loaded.kind not in loading.FOLDERS:
        for cell in loaded.cells:
            tree = cells._parse(cell.source)
            filename = loading.cell_file(loaded.path, cell.number)
            for guard in main_guards(tree) if tree is not None else ():
                label = f"the main block of {cell.label}" if len(loaded.cells) > 1 else "the main block"
                found.append((label, ast.Module(guard.body, []), filename, vars(loaded.module)))
    for name in sorted(modules - {loaded.module.__name__}):
        module = sys.modules.get(name)
        filename = getattr(module, "__file__", None)
        if module is None or not filename or not filename.endswith(".py"):
            continue
        try:
            tree = ast.parse(Path(filename).read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for guard in main_guards(tree):
            found.append((f"the main block of {os.path.basename(filename)}", ast.Module(guard.body, []), filename,
                          vars(module)))
    if loaded.kind in loading.FOLDERS:
        for script in project_scripts(Path(loaded.path)):
            try:
                tree = ast.parse(script.read_text())
            except (OSError, SyntaxError, ValueError):
                continue
            namespace = {"__name__": "__main__", "__file__": str(script), "__builtins__": __builtins__}
            found.append((str(script.relative_to(loaded.path)), tree, str(script), namespace))
    return found


def project_scripts(directory):
    """The project's demo scripts (:data:`DEMO_SCRIPTS`) that the loader did not import (top-level statements other
    than definitions), not tests, in the order of :data:`DEMO_SCRIPTS`."""
    imported = set(cells.project_files(directory))
    order = {name: i for i, name in enumerate(DEMO_SCRIPTS)}
    scripts = []
    for file in sorted(directory.rglob("*.py")):
        parts = file.relative_to(directory).parts
        if file in imported or any(p.startswith((".", "_")) or p in ("tests", "test", "venv", "env", "build")
                                   for p in parts) or file.name.startswith(("test_", "setup", "conftest")):
            continue
        words = [w for w in re.split(r"[_\W]+", file.stem.lower()) if w in order]
        if words:
            scripts.append((min(order[w] for w in words), len(parts), str(file), file))
    return [file for *_, file in sorted(scripts)]


class Recorder:
    """Records the construction and the forward calls of the author's module classes; raises :class:`Observed`
    once a module built at top level completes a forward pass."""

    def __init__(self, classes, observation):
        self.classes = {cls for cls in classes if inspect.isclass(cls) and issubclass(cls, nn.Module)}
        self.observation = observation
        self.depth = 0
        self.top = set()  # ids of instances built outside any other author's constructor
        self.originals = {}

    def __enter__(self):
        for cls in self.classes:
            if "__init__" in vars(cls):
                self.originals[cls] = vars(cls)["__init__"]
                cls.__init__ = self.wrap(cls, vars(cls)["__init__"])
        self.handle = nn.modules.module.register_module_forward_hook(self.forward_hook)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        for cls, init in self.originals.items():
            cls.__init__ = init
        return False

    def wrap(self, cls, init):
        recorder = self

        def __init__(module, *args, **kwargs):
            if type(module) is cls:
                recorder.observation.constructed.setdefault(cls.__name__, (summary(args), {
                    k: summary(v) for k, v in kwargs.items()}))
                if recorder.depth == 0:
                    recorder.top.add(id(module))
            recorder.depth += 1
            try:
                init(module, *args, **kwargs)
            finally:
                recorder.depth -= 1
        __init__.__wrapped__ = init
        return __init__

    def forward_hook(self, module, args, output):
        if type(module) not in self.classes:
            return None
        name = type(module).__name__
        self.observation.calls.setdefault(name, Call(summary(tuple(args)), {}, summary(output)))
        if id(module) in self.top and self.observation.completed is None:
            self.observation.completed = name
            raise Observed(name)
        return None


def observe(loaded, modules, classes, budget=BUDGET):
    """Run the author's entry points (:func:`entry_points`) under a :class:`Recorder` of ``classes``, within
    ``budget`` seconds in all; never raises for what the author's code does."""
    observation = Observation()
    deadline = time.monotonic() + budget
    for label, tree, filename, namespace in entry_points(loaded, modules):
        observation.assigned.update(dict.fromkeys(assigned_names(tree.body), label))
    with loading._sandbox(loaded.path), torch_state(), Recorder(classes, observation):
        for label, tree, filename, namespace in entry_points(loaded, modules):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or observation.completed:
                break
            try:
                code = compile(tree, filename, "exec", dont_inherit=True)
            except (SyntaxError, ValueError):
                continue
            ended = run_one(code, namespace, filename, remaining)
            observation.ran.append(f"{label} ({ended})")
    return observation


@contextlib.contextmanager
def torch_state():
    """Torch's global settings as they were before the author's code ran (its default dtype, grad mode, random
    state and thread count), whatever the code set."""
    dtype, grad, rng, threads = (torch.get_default_dtype(), torch.is_grad_enabled(), torch.random.get_rng_state(),
                                 torch.get_num_threads())
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.random.set_rng_state(rng)
        torch.set_num_threads(threads)


def run_one(code, namespace, filename, seconds):
    """Run one entry point, its output swallowed; how it ended, in words."""
    directory = os.path.dirname(os.path.abspath(filename))
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), contextlib.chdir(directory):
            loading._call_with_limit(lambda: exec(code, namespace), seconds)
    except Observed as seen:
        return f"stopped after the forward pass of {seen}"
    except loading._Timeout:
        return f"stopped after {seconds:.0f} s"
    except (Exception, SystemExit, loading._ExitBlocked) as exc:  # the author's code: recorded, never raised
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    return "ran to its end"


def size_knobs(namespace, modules, module_classes):
    """The globals through which the author's code takes its sizes, ``[(module dict, name, Config field)]``; [] when
    there are none.

    They are the module-level numbers of the submission's modules (the loaded module's globals, set by its main
    block when observed, and those of its other modules, a copy ``from constants import D_MODEL`` included) whose
    names are those of the canonical sizes (``D_MODEL``, ``n_heads``, ``N_LAYERS``, ``SRC_VOCAB_SIZE``, ``DROPOUT``
    ...). Setting them before a block is built is how its author configures it: the checker does the same
    (``conformance.contract.interface.set_size_globals``), instead of feeding a constructor that takes nothing.

    Where no class takes a size as a constructor argument, all of them are knobs, a width among them. Where some
    classes do and others read constants (``FeedForward(d_model)`` reading ``D_FF``, ``MultiHeadAttention(h)``
    reading ``D_MODEL``), the knobs are the constants a class's own code reads (:func:`globals_read`): the author
    sets them to match the arguments, and so does the checker. A dropout rate is then no knob: a rate given as an
    argument that does not reach the blocks reading the constant is what ``dropout_rate_ignored`` names (§5.4)."""
    sizes = [p for cls in module_classes for p in constructor_parameters(cls)
             if argument_role(p) in ("d_model", "h", "d_ff")]
    knobs, seen = [], set()
    sources = [namespace] + [vars(sys.modules[m]) for m in sorted(modules) if m in sys.modules]
    for values in sources:
        if id(values) in seen:
            continue
        seen.add(id(values))
        for name, value in list(values.items()):
            if name.startswith("_") or type(value) not in (int, float):
                continue
            canonical = argument_role(name)
            if canonical in SIZE_FIELDS and type(value) is int and value > 0 or canonical == "dropout" \
                    and type(value) is float and 0 <= value < 1 or canonical == "pad_idx" and type(value) is int:
                knobs.append((values, name, canonical))
    if not sizes:
        return knobs if any(field == "d_model" for _, _, field in knobs) else []
    read = {(id(values), name) for cls in module_classes for values, name in globals_read(cls)}
    return [(values, name, field) for values, name, field in knobs
            if (id(values), name) in read and field != "dropout"]


def derived_globals(knobs, modules):
    """Record, for each module holding size knobs, the top-level assignments that compute a number or a scalar tensor
    from them with library functions only (``embedding_multiplier = torch.sqrt(torch.tensor(num_model_dims))``,
    ``D_K = D_MODEL // N_HEADS``), in order (``conformance.contract.interface.DERIVED_GLOBALS``): the checker sets
    the knobs, and these follow as they did when the author's sizes were set."""
    own = {id(vars(sys.modules[m])) for m in modules if m in sys.modules}
    for values in {id(values): values for values, _, _ in knobs}.values():
        path = values.get("__file__")
        try:
            tree = ast.parse(Path(path).read_text())
        except (OSError, TypeError, ValueError, SyntaxError):
            continue
        sizes, codes = {name for v, name, _ in knobs if v is values}, []
        for node in tree.body:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            read = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            value = values.get(node.targets[0].id)
            if read & sizes and node.targets[0].id not in sizes and library_calls_only(node.value, values, own) \
                    and (type(value) in (int, float) or isinstance(value, torch.Tensor) and value.dim() == 0):
                codes.append(compile(ast.Module([node], []), path, "exec"))
                sizes.add(node.targets[0].id)
        if codes:
            DERIVED_GLOBALS[id(values)] = values, codes


def library_calls_only(expression, values, own):
    """Whether every call in ``expression`` is of a builtin or of a library (``torch.sqrt``, ``math.sqrt``), none of
    the submission's own code (``own``: ids of its modules' dicts), resolved in the module dict ``values``."""
    for call in (n for n in ast.walk(expression) if isinstance(n, ast.Call)):
        target = call.func
        while isinstance(target, ast.Attribute):
            target = target.value
        if not isinstance(target, ast.Name):
            return False
        origin = values.get(target.id, getattr(builtins, target.id, None))
        module = sys.modules.get(getattr(origin, "__module__", None) or getattr(origin, "__name__", ""))
        if origin is None or module is not None and id(vars(module)) in own:
            return False
    return True


def constructor_parameters(cls):
    """The names of ``cls``'s constructor parameters, () when it has no readable signature."""
    try:
        return tuple(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        return ()


def globals_read(cls):
    """``[(module dict, name)]``: the global names the methods ``cls`` defines itself read (their nested functions
    and comprehensions included), each with the module dict it is read from."""
    found = []
    for method in vars(cls).values():
        function = inspect.unwrap(getattr(method, "__func__", method)) if callable(
            getattr(method, "__func__", method)) else None
        found += function_globals(function)
    return found


def function_globals(function):
    """``[(module dict, name)]``: the global names ``function`` reads, its nested functions and comprehensions
    included; [] for what has no code."""
    code, found = getattr(function, "__code__", None), []
    stack = [code] if code is not None else []
    while stack:
        code = stack.pop()
        found += [(function.__globals__, i.argval) for i in dis.get_instructions(code)
                  if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
        stack += [c for c in code.co_consts if inspect.iscode(c)]
    return found


def pad_globals_read(helper, depth=0):
    """``[(module dict, name, "pad_idx")]``: the module-level pad indices (``PAD_IDX = 1``, its vocabulary's padding
    token) that the author's function behind the canonical padding-mask ``helper`` reads (found through the closures
    of the checker's wrappers around it); [] where none is read or no function of the author's is found."""
    if depth > 3 or not callable(helper):
        return []
    if not getattr(helper, "__module__", "").startswith(("adapters", "conformance")):
        return [(values, name, "pad_idx") for values, name in function_globals(helper)
                if argument_role(name) == "pad_idx" and type(values.get(name)) is int]
    found = []
    for cell in getattr(helper, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:  # (an empty cell)
            continue
        if inspect.isfunction(inner) or hasattr(inner, "target"):
            found += pad_globals_read(getattr(inner, "target", inner), depth + 1)
    return found


def with_pad_index(helper, knobs):
    """The canonical padding-mask helper ``helper`` of code whose helper takes no pad index and reads a global one
    (``(tokens != PAD_ID)``): the pad index it is asked for is set through those globals for the call."""
    pads = [(values, name) for values, name, canonical in knobs if canonical == "pad_idx"]
    taken = getattr(helper, "hyperparameters", None)
    if not pads or taken is None or "pad_idx" in taken:
        return helper

    def padding_mask(tokens, pad_idx):
        saved = [values[name] for values, name in pads]
        for values, name in pads:
            values[name] = pad_idx
        try:
            return helper(tokens, pad_idx)
        finally:
            for (values, name), value in zip(pads, saved):
                values[name] = value
    padding_mask.__name__ = getattr(helper, "__name__", "padding_mask")
    padding_mask.hyperparameters = {"pad_idx"}
    return padding_mask


def describe_knobs(knobs):
    names = sorted({f"{name} ({canonical})" for _, name, canonical in knobs if canonical != "pad_idx"})
    return (f"the code takes its sizes from globals it sets itself, not from its constructors: {', '.join(names)}; "
            "the checker sets them to its own before building, as the author's configuration does")


def without_batch_axis(observation, cls):
    """Whether the author's own run called ``cls`` with one sequence and no batch axis: its first tensor argument
    (length,) token ids or a (length, d_model) matrix (code trained sentence by sentence)."""
    call = getattr(observation, "calls", {}).get(getattr(cls, "__name__", None))
    tensors = [a for a in (call.args if call else ()) if isinstance(a, tuple) and a[:1] == ("tensor",)]
    if not tensors:
        return False
    _, shape, dtype = tensors[0]
    return len(shape) == (2 if dtype.startswith(("float", "bfloat")) else 1)
