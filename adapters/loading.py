"""Load other people's code (Python file, package, project folder, notebook, notebook text export, markdown post)
cell by cell into one fresh module, recording every problem instead of raising.

The cells come from :mod:`adapters.cells`.  Each cell is compiled under its own file name (``<path>#cell3``)
registered in :mod:`linecache`, so tracebacks show the code and :meth:`LoadedCode.source_location` maps them back
to the original file; a package or a project folder is imported as its author does, with a placeholder standing in
for a package not installed here.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.machinery
import importlib.util
import io
import itertools
import linecache
import os
import pkgutil
import signal
import sys
import textwrap
import threading
import time
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path

from adapters.cell_failures import (ANNOTATIONS_AS_TEXT, annotation_of_missing_package, failed_import,
                                    names_bound, needing_a_missing_package)
from adapters.cells import Cell, LoadError, extract_cells, install_roots, project_files

OUTPUT_TAIL = 2048
"""At most this many trailing characters of what a cell prints are kept in :attr:`Cell.output`."""

_SERIAL = itertools.count(1)


@dataclass
class CellProblem:
    """Something that went wrong with one cell; the other cells still ran."""
    cell: Cell
    kind: str
    """One of "syntax", "exception", "magic", "timeout", "exit", "import"."""
    message: str
    lineno: int | None
    """Line in the original file, when known."""


@dataclass
class LoadedCode:
    """The outcome of :func:`load_code`."""
    path: str
    kind: str
    """"python", "package", "project" (a folder of modules and packages), "notebook", "notebook-text", "markdown"
    or "unreadable"."""
    module: types.ModuleType | None
    cells: list[Cell]
    problems: list[CellProblem]
    fatal: str | None
    """Why nothing could be loaded at all (binary content, bad JSON, no code), else None."""
    roots: list[str] = field(default_factory=list)
    """The folders put on ``sys.path`` for the author's own imports (:func:`project_roots`)."""
    unbound: dict = field(default_factory=dict)
    """Name -> the problem of the top-level import that was to bind it and failed (a package not installed)."""

    def project_modules(self) -> set[str]:
        """The names of the modules that are the submission's own: the one loaded, and every module imported
        from under its folder (a package's submodules, a file's sibling modules), never an installed library."""
        if self.module is None:
            return set()
        own = {self.module.__name__}
        base = Path(self.path).resolve() if self.kind in FOLDERS else Path(self.path).resolve().parent
        folders = tuple(str(f) + os.sep for f in [base] + [Path(r).resolve() for r in self.roots
                                                              if base.is_relative_to(Path(r))])
        for name, module in list(sys.modules.items()):
            filename = getattr(module, "__file__", None)
            if not isinstance(filename, str) or _installed(filename) or name.startswith(SUBMISSION_PREFIX):
                continue  # (a module the loader named is another load's submission, one beside this one)
            resolved = os.path.realpath(filename)
            if resolved.startswith(folders) and not resolved.startswith(CHECKER_PACKAGES):
                own.add(name)
        return own

    def namespace(self, modules: set[str]) -> dict:
        """What discovery reads: the loaded module's names, then those of the submission's other ``modules`` (its
        :meth:`project_modules`); a class or function that another module defines under a name already taken
        (two sub-packages each with a ``DecoderLayer``) is kept under its qualified name, ``package.module.Name``."""
        merged = dict(vars(self.module))
        for name in sorted(modules - {self.module.__name__}):
            for key, value in vars(sys.modules[name]).items():
                if key not in merged:
                    merged[key] = value
                elif merged[key] is not value and getattr(value, "__module__", None) == name:
                    merged[f"{name}.{key}"] = value  # a second definition of the name: both stay candidates
        return merged

    def source_location(self, filename: str, lineno: int) -> str | None:
        """Map a code file name and line (as in tracebacks) to e.g. "cell 3, line 5 (file line 57)"; None when the
        code is not this submission's."""
        if self.kind in FOLDERS:
            if not os.path.isabs(filename):
                return None
            try:
                rel = Path(filename).resolve().relative_to(Path(self.path).resolve())
            except (ValueError, OSError):
                return None
            return f"{Path(self.path).name}/{rel.as_posix()}, line {lineno}"
        cell = self._cell_of(filename)
        return None if cell is None else _where(cell, lineno)

    def position(self, filename: str, lineno: int) -> str | None:
        """``path:line`` in the original file, followed by the cell for notebooks and posts, for code that ran
        from one of this submission's cells; None otherwise."""
        cell = self._cell_of(filename)
        if cell is None:
            return None
        file_line = _file_line(cell, lineno)
        if self.kind == "python":
            return f"{self.path}:{file_line or lineno}"
        return f"{self.path}{f':{file_line}' if file_line else ''} ({cell.label}, line {lineno})"

    def _cell_of(self, filename: str) -> Cell | None:
        head, sep, number = filename.rpartition("#cell")
        if sep and head == self.path and number.isdigit() and 0 < int(number) <= len(self.cells):
            return self.cells[int(number) - 1]
        return None


class _Timeout(BaseException):
    """Raised inside a cell that ran out of time (a BaseException, so ``except Exception`` cannot swallow it)."""


class _ExitBlocked(BaseException):
    """Raised instead of ending the process (os._exit, os.abort, killing itself) while code is loading."""


def _where(cell: Cell, line: int) -> str:
    text = f"{cell.label}, line {line}"
    return text + (f" (file line {cell.first_line + line - 1})" if cell.first_line > 1 else "")


def _file_line(cell: Cell, line: int | None) -> int | None:
    return cell.first_line + line - 1 if cell.first_line and line else None


class _Tail(io.TextIOBase):
    """A write-only text stream keeping the last :data:`OUTPUT_TAIL` characters."""
    encoding = "utf-8"

    def __init__(self):
        super().__init__()
        self.text = ""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.text = (self.text + s)[-OUTPUT_TAIL:]
        return len(s)


def _call_with_limit(run, seconds: float) -> None:
    """Call ``run()``; raise :class:`_Timeout` in it after ``seconds``.  Uses SIGALRM (re-fired every 50 ms in case
    the code swallows it) in the main thread, a trace function elsewhere; the previous handler and timer come back."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        deadline = time.monotonic() + seconds

        def tracer(frame, event, arg):
            if time.monotonic() > deadline:
                raise _Timeout
            return tracer

        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            run()
        finally:
            sys.settrace(previous)
        return
    armed = [True]

    def on_alarm(signum, frame):
        if armed[0]:
            raise _Timeout

    handler = signal.signal(signal.SIGALRM, on_alarm)
    started = time.monotonic()
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
    try:
        try:
            run()
        finally:
            armed[0] = False
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        if old_delay:
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - started), 1e-3), old_interval)


@contextlib.contextmanager
def _sandbox(path: str):
    """Keep loaded code from ending the process, reading stdin, opening plot windows, writing bytecode, or changing
    sys.argv and the working directory for good."""
    exits, real_kill = (os._exit, os.abort, os.kill), os.kill
    state = sys.argv, sys.stdin, sys.dont_write_bytecode
    backend, cwd = os.environ.get("MPLBACKEND"), os.getcwd()

    def blocked(name):
        def stop(*args):
            raise _ExitBlocked(f"{name}({', '.join(map(repr, args))}) blocked")
        return stop

    def kill(pid, sig):
        if pid <= 0 or pid == os.getpid():
            raise _ExitBlocked(f"os.kill({pid}, {sig!r}) of the loading process blocked")
        real_kill(pid, sig)

    os._exit, os.abort, os.kill = blocked("os._exit"), blocked("os.abort"), kill
    sys.argv, sys.stdin, sys.dont_write_bytecode = [path], io.StringIO(), True
    os.environ["MPLBACKEND"] = "Agg"
    try:
        yield
    finally:
        os._exit, os.abort, os.kill = exits
        sys.argv, sys.stdin, sys.dont_write_bytecode = state
        if backend is None:
            os.environ.pop("MPLBACKEND", None)
        else:
            os.environ["MPLBACKEND"] = backend
        with contextlib.suppress(OSError):
            os.chdir(cwd)


def cell_file(path: str, number: int) -> str:
    return f"{path}#cell{number}"


def _register(filename: str, source: str) -> None:
    lines = [line if line.endswith("\n") else line + "\n" for line in source.splitlines(True)]
    linecache.cache[filename] = (len(source), None, lines, filename)


def _problem(result: LoadedCode, cell: Cell, exc: BaseException, limit: float, total: float | None) -> CellProblem:
    """Describe what ``exc``, raised while running ``cell``, means and where it came from."""
    frames = [(f.f_code.co_filename, line or 0) for f, line in traceback.walk_tb(exc.__traceback__)]
    ours = [(name, line) for name, line in frames if result.source_location(name, line)]
    if result.kind in FOLDERS:
        own = ours
    else:
        own = [(name, line) for name, line in frames if name == cell_file(result.path, cell.number)]
    where, lineno = cell.label, None
    if own:
        where = result.source_location(*own[-1])
        lineno = own[-1][1] if result.kind in FOLDERS else _file_line(cell, own[-1][1])
        if ours and ours[-1] != own[-1]:
            where += f", raised in {result.source_location(*ours[-1])}"
    if isinstance(exc, _Timeout):
        kind = "timeout"
        text = (f"stopped after {limit:.3g} s: the total time limit of {total:g} s was reached" if total
                else f"timed out after {limit:g} s (per-cell limit)")
    elif isinstance(exc, SystemExit):
        kind, text = "exit", f"SystemExit({exc.code!r}) (sys.exit() or exit() called) caught, loading went on"
    elif isinstance(exc, _ExitBlocked):
        kind, text = "exit", str(exc)
    elif isinstance(exc, SyntaxError) and exc.filename and result.source_location(exc.filename, exc.lineno or 0):
        kind, where, lineno = "syntax", result.source_location(exc.filename, exc.lineno or 0), exc.lineno
        text = f"{type(exc).__name__}: {exc.msg}"
    else:
        kind = "import" if isinstance(exc, ImportError) else "exception"
        text = f"{type(exc).__name__}: {exc}"
    if len(text) > 500:
        text = text[:500] + "..."
    return CellProblem(cell, kind, f"{where}: {text}", lineno)


def _execute(result: LoadedCode, cell: Cell, run, deadline: float, limit: float, total: float | None,
             out: _Tail) -> BaseException | None:
    """Run ``run()`` until ``deadline`` (the time limit ``limit`` for messages) with output captured; record and
    return what it raised, if anything."""
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            _call_with_limit(run, max(deadline - time.monotonic(), 1e-3))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        result.problems.append(_problem(result, cell, exc, limit, total))
        return exc
    return None


SUBMISSION_PREFIX = "submission_"
"""The start of the name of every module the loader loads a file under (:func:`_module_name`)."""


def _module_name(path: str) -> str:
    return f"{SUBMISSION_PREFIX}{hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:10]}_{next(_SERIAL)}"


def _run_cells(result: LoadedCode, cell_timeout: float, total_timeout: float) -> None:
    namespace = result.module.__dict__
    deadline = time.monotonic() + total_timeout
    ran = []
    last_class = None  # the class defined at the end of the latest cell: indented cells may continue it
    for cell in result.cells:
        if cell.magics:
            line, _ = cell.magics[0]
            shown = ", ".join(text for _, text in cell.magics[:3]) + (", ..." if len(cell.magics) > 3 else "")
            result.problems.append(CellProblem(cell, "magic", f"{_where(cell, line)}: IPython magic or shell line "
                                                              f"removed: {shown}", _file_line(cell, line)))
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            result.problems.append(CellProblem(cell, "timeout", f"{cell.label}: skipped, the total time limit of "
                                                                f"{total_timeout:g} s was used up", None))
            continue
        filename = cell_file(result.path, cell.number)
        _register(filename, cell.source)
        out = _Tail()
        try:
            with contextlib.redirect_stderr(out):  # compiler warnings
                code = compile(cell.source, filename, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", None)
            where = _where(cell, line) if line else cell.label
            if isinstance(exc, IndentationError) and last_class in namespace and \
                    _continue_class(namespace[last_class], cell, filename, namespace, out):
                result.problems.append(CellProblem(cell, "continuation", f"{cell.label}: indented code read as the "
                                                   f"continuation of class {last_class} (methods attached)", None))
                continue
            result.problems.append(CellProblem(cell, "syntax", f"{where}: {type(exc).__name__}: "
                                                               f"{getattr(exc, 'msg', exc)}", _file_line(cell, line)))
            continue
        ran.append(cell.source)
        limit = min(cell_timeout, remaining)
        total = total_timeout if limit < cell_timeout else None
        body, cell_end = ast.parse(cell.source).body, time.monotonic() + limit
        last_class = body[-1].name if body and isinstance(body[-1], ast.ClassDef) else None
        flags = 0
        while True:  # a package not installed here stops no cell (adapters.cell_failures)
            exc = _execute(result, cell, lambda: exec(code, namespace), cell_end, limit, total, out)
            failed = failed_import(exc, body, filename)
            if failed is None and not flags:
                failed = annotation_of_missing_package(exc, body, filename, result.unbound)
                if failed is not None:  # its annotations read as text, as `from __future__ import annotations` does
                    flags = ANNOTATIONS_AS_TEXT
                    result.problems[-1].message += (" (an annotation naming a package not installed here: the "
                                                    "definitions ran again from there, annotations read as text)")
                    body = body[failed:]
                    code = compile(ast.Module(body, []), filename, "exec", flags=flags, dont_inherit=True)
                    continue
            if failed is None:
                failed = needing_a_missing_package(exc, body, filename, result.unbound)
            if failed is None:
                break
            for bound in names_bound(body[failed]):  # names it was to bind: reading them is no mistake
                result.unbound[bound] = result.problems[-1].message
            body = body[failed + 1:]
            code = compile(ast.Module(body, []), filename, "exec", flags=flags, dont_inherit=True)
        cell.output = out.text
    # inspect.getsource(cls) searches the module's file for the first class of that name (Python < 3.13): the cells
    # go there latest first, so that a class redefined in a later cell is found in its latest form.
    _register(result.module.__file__, "".join(s if s.endswith("\n") else s + "\n" for s in reversed(ran)))


def _continue_class(cls, cell: Cell, filename: str, namespace: dict, out) -> bool:
    """Attach the functions of an indented ``cell`` to ``cls``: a blog post that splits a class over several code
    blocks (the later ones indented, often with a tab). False when the dedented cell is not just definitions."""
    lines = [line.expandtabs(4) for line in cell.source.splitlines(True)]
    source = textwrap.dedent("".join(lines))
    try:
        with contextlib.redirect_stderr(out):
            tree = ast.parse(source)
    except SyntaxError:
        return False
    if not tree.body or not all(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in tree.body):
        return False
    _register(filename, source)
    defined = {}
    exec(compile(tree, filename, "exec", dont_inherit=True), namespace, defined)
    for name, function in defined.items():
        setattr(cls, name, function)
    return True


class MissingPackage(ImportError):
    """Raised when code uses something from a package that is not installed here (a placeholder stood in for it
    while loading): the author's environment had it, so this is no mistake of the code."""


class _Placeholder(type):
    """The metaclass of what a placeholder module hands out: a class that can be subclassed or passed around, and
    raises :class:`MissingPackage` when called or instantiated; its attributes are placeholders too. A class of the
    code's own that takes one among other, real bases (a mixin: ``class Transformer(nn.Module,
    PyTorchModelHubMixin)``) is an ordinary class: it is built, and its missing attributes are missing."""

    def __getattr__(cls, name):
        if name.startswith("__") or _mixes_one_in(cls):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}", cls.package)

    def __call__(cls, *args, **kwargs):
        if _mixes_one_in(cls):
            return super().__call__(*args, **kwargs)
        raise MissingPackage(f"{cls.__qualname__} comes from {cls.package}, which is not installed here",
                             name=cls.package)


def _mixes_one_in(cls) -> bool:
    """Whether ``cls`` is a class of the code's own with a real base besides the placeholders among its bases."""
    return "package" not in vars(cls) and any(not isinstance(base, _Placeholder) and base is not object
                                              for base in cls.__mro__[1:])


def _placeholder(qualname: str, package: str) -> type:
    return _Placeholder(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname, "package": package})


def _placeholder_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # a package: its submodules are placeholders too
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)  # (importlib.util.find_spec asks)

    def attribute(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _placeholder(f"{name}.{attr}", name.split(".")[0])

    module.__getattr__ = attribute
    return module


PLACEHOLDER_ATTEMPTS = 8
"""How many missing packages one module's import may stand in for before loading gives up on it."""


def _import_with_placeholders(result: LoadedCode, name: str, directory: Path, cell_timeout: float, out) -> None:
    """Import module ``name`` of the project; where it stops on a package that is not installed here (and is no
    part of the project), stand a placeholder module in for that package, note it, and import again: the project's
    classes still load, and code that uses the package raises :class:`MissingPackage` when it runs."""
    for _ in range(PLACEHOLDER_ATTEMPTS):
        known = {problem.message for problem in result.problems}
        exc = _execute(result, result.cells[0], lambda: importlib.import_module(name),
                       time.monotonic() + cell_timeout, cell_timeout, None, out)
        if exc is not None and len(result.problems) > len(known) and result.problems[-1].message in known:
            result.problems.pop()  # a module imported earlier already met this failure
        missing = getattr(exc, "name", None) if type(exc) is ModuleNotFoundError else None
        if not missing or missing in sys.modules or (directory / missing.split(".")[0]).exists() \
                or (directory / f"{missing.split('.')[0]}.py").exists():
            return
        inner = import_root(directory, missing.split(".")[0])
        if inner is not None:  # (a package of the project's own, imported from a folder its scripts run in)
            sys.path.insert(0, str(inner))
            result.roots.insert(0, str(inner))
            if result.problems and result.problems[-1].kind == "import":
                result.problems.pop()
            sys.modules.pop(name, None)
            continue
        for depth in range(1, missing.count(".") + 2):
            parent = ".".join(missing.split(".")[:depth])
            sys.modules.setdefault(parent, _placeholder_module(parent))
        result.unbound[missing.split(".")[0]] = f"{missing} is not installed here: a placeholder stood in for it"
        if result.problems and result.problems[-1].kind == "import":
            result.problems[-1].message += " (a placeholder stood in for it; the module was imported again)"
        sys.modules.pop(name, None)


def import_root(directory: Path, package: str) -> Path | None:
    """The folder under ``directory`` (within four levels, the shallowest) that holds the project's own ``package``
    (a folder of Python files, or ``package.py``) and is not yet on ``sys.path``: the folder the author's code runs
    in (``backend/`` for ``from app.shared import layers`` in ``backend/app/...``); None where there is none."""
    for depth in range(1, 5):
        for folder in sorted(directory.glob("/".join(["*"] * depth))):
            if folder.name != package or any(part.startswith(".") or part in ("site-packages", "node_modules")
                                              for part in folder.relative_to(directory).parts):
                continue
            if folder.is_dir() and next(folder.rglob("*.py"), None) is not None \
                    and str(folder.parent) not in sys.path and folder.parent != directory:
                return folder.parent
        own_file = sorted(directory.glob("/".join(["*"] * (depth - 1) + [f"{package}.py"])))
        if own_file and str(own_file[0].parent) not in sys.path and own_file[0].parent != directory:
            return own_file[0].parent
    return None


def _import_package(result: LoadedCode, cell_timeout: float) -> None:
    """Import a package directory as its author does, under its own name (its parent is on ``sys.path``, so
    ``from transformer.Layers import ...`` works), then each of its submodules: their classes are the project's
    too. A name some other module already holds in ``sys.modules`` is imported under a private name instead."""
    directory = Path(result.path).resolve()
    taken = sys.modules.get(directory.name)
    own = directory.name.isidentifier() and (taken is None or _is_under(getattr(taken, "__file__", None), directory))
    name = directory.name if own else _module_name(result.path)
    spec = importlib.util.spec_from_file_location(name, directory / "__init__.py",
                                                  submodule_search_locations=[str(directory)])
    result.module = importlib.util.module_from_spec(spec)
    sys.modules[name] = result.module
    out = _Tail()
    _execute(result, result.cells[0], lambda: spec.loader.exec_module(result.module),
             time.monotonic() + cell_timeout, cell_timeout, None, out)
    for info in pkgutil.walk_packages([str(directory)], prefix=f"{name}."):
        if info.name.rsplit(".", 1)[-1].startswith(("test", "_")) or info.name in sys.modules:
            continue
        _import_with_placeholders(result, info.name, directory.parent, cell_timeout, out)
    result.cells[0].output = out.text


def _import_project(result: LoadedCode, cell_timeout: float) -> None:
    """Import a project folder as its author does, with the folder on ``sys.path``, and the folders installing it
    would put there (:func:`install_roots`: ``src/`` of the src layout): every module of it that only defines code
    (:func:`project_files`), under its dotted name (``models.definitions.transformer_model``; ``pkg.blocks`` for
    ``src/pkg/blocks.py``), each within ``cell_timeout``. Scripts (training loops at top level) and tests are left
    alone."""
    directory = Path(result.path).resolve()
    installed = install_roots(directory)
    for folder in [directory, *installed]:
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
            result.roots.insert(0, str(folder))
    result.module = types.ModuleType(_module_name(result.path))
    result.module.__file__ = str(directory / "__init__.py")
    sys.modules[result.module.__name__] = result.module
    out = _Tail()
    for file in project_files(directory):
        base = next((root for root in installed if file.is_relative_to(root)), directory)
        name = ".".join(file.relative_to(base).with_suffix("").parts)
        if name.endswith(".__init__"):
            name = name.removesuffix(".__init__")
        if name == "__init__" or name in sys.modules:  # (the root's own __init__.py is no module of it)
            continue
        folder = shadowed_folder(directory, base, name)
        if folder is not None:  # (run from inside that folder, as its scripts are: its modules are top-level)
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
                result.roots.insert(0, str(folder))
            name = ".".join(file.relative_to(folder).with_suffix("").parts)
        _import_with_placeholders(result, name, directory, cell_timeout, out)
    result.cells[0].output = out.text


def shadowed_folder(directory: Path, base: Path, name: str) -> Path | None:
    """The plain folder (no ``__init__.py``) module ``name`` lies in when a module from outside the project owns its
    name (``code/`` and the standard library's ``code``): its scripts run from inside it; else None."""
    top = name.split(".")[0]
    folder = base / top
    if "." not in name or (folder / "__init__.py").exists():
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    return folder if origin and not _is_under(origin, directory) else None


FOLDERS = ("package", "project")
CHECKER = Path(__file__).resolve().parents[1]


CHECKER_PACKAGES = tuple(str(CHECKER / package) + os.sep for package in ("adapters", "conformance", "reference"))
"""The checker's own packages: never a submission's modules, even where a submission sits inside the checker's
folder (a test's files)."""


def _installed(filename: str) -> bool:
    """An installed package's file (told from its name: no file system call for the thousand modules of torch)."""
    return any(part in ("site-packages", "dist-packages") for part in Path(filename).parts)


def _is_under(filename, directory) -> bool:
    try:
        return filename is not None and Path(filename).resolve().is_relative_to(Path(directory).resolve())
    except OSError:
        return False


PROJECT_MARKERS = ("LICENSE", "LICENCE", "LICENSE.txt", "LICENSE.md", "README.md", "README.rst", "README",
                   "setup.py", "setup.cfg", "pyproject.toml", "requirements.txt", ".git")


def enclosing_package(path: str, roots: list[str]) -> str | None:
    """The dotted name of the package a file sits in (its folder and those above it holding an ``__init__.py``),
    when the folder above that package is on ``sys.path`` (one of ``roots``, put there first): then the file's
    relative imports (``from .attention import ...``) resolve as when its author imports it. None otherwise."""
    folder, names = Path(path).resolve().parent, []
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        names.insert(0, folder.name)
        folder = folder.parent
    if not names:
        return None
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
        roots.append(str(folder))
    return ".".join(names)


def project_roots(path: str) -> list[str]:
    """Where the author's imports start from: the folder holding the file (or the package), the nearest folder
    above it that looks like a project's root (a licence, a README, a setup file, a .git), within three levels, and
    the folders installing that project would put on the import path (:func:`install_roots`)."""
    here = Path(path).resolve().parent
    roots = [here]
    for folder in [here, *here.parents][:4]:
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            roots += [folder, *install_roots(folder)]
            break
    return list(dict.fromkeys(str(r) for r in roots))


def load_code(path: str | os.PathLike, *, cell_timeout: float = 10.0, total_timeout: float = 60.0) -> LoadedCode:
    """Run the code at ``path`` cell by cell in a fresh module registered in :data:`sys.modules`.

    Never raises for bad input: problems of single cells (syntax errors, exceptions, failed imports, IPython magics,
    timeouts, exit attempts) go to ``problems`` and the other cells still run; when nothing can be run at all,
    ``fatal`` says why.  A package directory is imported as a whole, within ``cell_timeout``."""
    path = str(path)
    try:
        kind, cells = extract_cells(path)
    except LoadError as exc:
        return LoadedCode(path, exc.kind, None, [], [], str(exc))
    except Exception as exc:  # a bug or a pathological input must not take the caller down
        return LoadedCode(path, "unreadable", None, [], [], f"could not read the code: {type(exc).__name__}: {exc}")
    result = LoadedCode(path, kind, None, cells, [], None)
    result.roots = project_roots(path)
    for root in reversed(result.roots):  # kept for the run: the checks call code that may import as it goes
        if root not in sys.path:
            sys.path.insert(0, root)
    with _sandbox(path):
        if kind == "package":
            _import_package(result, cell_timeout)
        elif kind == "project":
            _import_project(result, cell_timeout)
        else:
            result.module = types.ModuleType(_module_name(path))
            result.module.__file__ = os.path.abspath(path)
            result.module.__package__ = enclosing_package(path, result.roots)
            sys.modules[result.module.__name__] = result.module
            _run_cells(result, cell_timeout, total_timeout)
    return result
