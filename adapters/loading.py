"""Load other people's code (Python file, package, notebook, notebook text export, markdown post) cell by cell
into one fresh module, recording every problem instead of raising.

The kind of input is recognised from its content, never from its file name.  Each cell is compiled under its own
file name (``<path>#cell3``) registered in :mod:`linecache`, so tracebacks show the code and
:meth:`LoadedCode.source_location` maps them back to the original file.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.machinery
import importlib.util
import io
import itertools
import json
import linecache
import os
import pkgutil
import re
import signal
import sys
import textwrap
import threading
import time
import traceback
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path


OUTPUT_TAIL = 2048
"""At most this many trailing characters of what a cell prints are kept in :attr:`Cell.output`."""

_SERIAL = itertools.count(1)
_MARKER = re.compile(r"^In ?\[[^\]\n]*\]:[ \t]*$", re.M)
_FENCE = re.compile(r"( {0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*")
_PY_TAGS = {"python", "python3", "py", "py3", "ipython", "ipython3"}
_PY_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug", "memit", "autoreload"}
_MAGIC_LINE = re.compile(r"""[ \t]*(?:
    %|!(?!\[)|\?\??[\w.]               # %magic, !shell (not a markdown image), ?name
    |[\w.]+\?\??[ \t]*$                # name? / name??
    |[\w.]+(?:[ \t]*,[ \t]*[\w.]+)*[ \t]*=[ \t]*[%!]   # files = !ls
    |get_ipython\(\)                   # magics as exported by nbconvert
)""", re.X)
_GET_IPYTHON = re.compile(r"[ \t]*get_ipython\(\)")
_CODE_START = re.compile(r"""[ \t]*(?:(?:async[ \t]+)?def[ \t]+\w+[ \t]*\(|class[ \t]+\w+|import[ \t]+\w
    |from[ \t]+[\w.]+[ \t]+import\b|@\w|return\b
    |(?:if|elif|else|for|while|with|try|except|finally)\b.*:[ \t]*$)""", re.X)


@dataclass
class Cell:
    """One unit of code, run in order with the others."""
    number: int
    """1-based position among the code cells."""
    source: str
    """The code as executed (IPython magics replaced by ``pass``)."""
    label: str
    """Human label: "cell 3", "code block 2" or the file name."""
    first_line: int
    """Line of the original file where the cell starts (1-based); 0 if unknown."""
    magics: list[tuple[int, str]] = field(default_factory=list)
    """(line in the cell, text) of each IPython magic or shell line removed."""
    output: str = ""
    """The tail of what the cell printed."""


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
        folders = [base] + [Path(r) for r in self.roots if base.is_relative_to(Path(r))]
        for name, module in list(sys.modules.items()):
            filename = getattr(module, "__file__", None)
            if filename and not _is_library(filename) and any(_is_under(filename, f) for f in folders):
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


class LoadError(ValueError):
    """Raised by :func:`extract_cells` when the content yields no code at all."""

    def __init__(self, message: str, kind: str = "unreadable"):
        super().__init__(message)
        self.kind = kind


class _Timeout(BaseException):
    """Raised inside a cell that ran out of time (a BaseException, so ``except Exception`` cannot swallow it)."""


class _ExitBlocked(BaseException):
    """Raised instead of ending the process (os._exit, os.abort, killing itself) while code is loading."""


def _where(cell: Cell, line: int) -> str:
    text = f"{cell.label}, line {line}"
    return text + (f" (file line {cell.first_line + line - 1})" if cell.first_line > 1 else "")


def _file_line(cell: Cell, line: int | None) -> int | None:
    return cell.first_line + line - 1 if cell.first_line and line else None


def _compiles(source: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(source, "<check>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError):
            return False
    return True


def _parse(source: str) -> ast.Module | None:
    """The syntax tree of ``source`` when it compiles, else None."""
    return ast.parse(source) if _compiles(source) else None


# --- recognising the kind and cutting the text into cells -----------------------------------------------------------

def detect_kind(text: str) -> str:
    """The kind of ``text`` from its content: "notebook" (JSON), "python" (compiles as is), "notebook-text" (has
    ``In [..]:`` marker lines), "markdown" (has ``` fences) or "python" (anything else)."""
    if text.lstrip().startswith("{"):
        return "notebook"
    if _compiles(text):
        return "python"
    if _MARKER.search(text):
        return "notebook-text"
    if any(_FENCE.fullmatch(line) for line in text.splitlines()):
        return "markdown"
    return "python"


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LoadError(f"cannot read {path}: {exc.strerror or exc}") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        data = data.decode("utf-16").encode()
    if b"\0" in data:
        raise LoadError("binary content (NUL bytes), not source code")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LoadError(f"binary content: not UTF-8 text (undecodable byte at offset {exc.start})") from None


def _strip_magics(source: str) -> tuple[str, list[tuple[int, str]]]:
    """Replace IPython magics, shell escapes, help lines and ``get_ipython()`` calls by ``pass`` at the same
    indentation (line numbers are kept); a cell magic whose body is not Python blanks the whole cell."""
    lines = source.split("\n")
    found = []
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        found.append((first + 1, lines[first].strip()))
        name = (lines[first].strip()[2:].split() or [""])[0]
        lines[first] = "pass"
        if name not in _PY_CELL_MAGICS:
            return "\n".join(lines[:first + 1] + [""] * (len(lines) - first - 1)), found
    pattern = _GET_IPYTHON if _compiles("\n".join(lines)) else _MAGIC_LINE
    for i, line in enumerate(lines):
        if pattern.match(line):
            found.append((i + 1, line.strip()))
            lines[i] = line[:len(line) - len(line.lstrip())] + "pass"
    return "\n".join(lines), found


def _make_cell(number: int, source: str, label: str, first_line: int) -> Cell:
    code, magics = _strip_magics(source)
    return Cell(number, code, label, first_line, magics)


def _literal(node: ast.AST) -> bool:
    """Whether ``node`` reads like a printed value: constants, containers of them, or reprs with arguments such as
    ``tensor([[0.5]], dtype=torch.float64)``."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(map(_literal, node.elts))
    if isinstance(node, ast.Dict):
        return all(k is None or _literal(k) for k in node.keys) and all(map(_literal, node.values))
    if isinstance(node, ast.Call):
        return (_dotted(node.func) and bool(node.args or node.keywords) and all(map(_literal, node.args))
                and all(_literal(k.value) or _dotted(k.value) for k in node.keywords))
    return False


def _dotted(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) or isinstance(node, ast.Attribute) and _dotted(node.value)


def _inert(tree: ast.Module) -> bool:
    """No statement does anything: comments, ``pass``, bare names or constants."""
    return all(isinstance(s, ast.Pass)
               or isinstance(s, ast.Expr) and (_dotted(s.value) or isinstance(s.value, ast.Constant))
               for s in tree.body)


def _printed(tree: ast.Module) -> bool:
    """Every statement is a bare value that reads like printed output."""
    return all(isinstance(s, ast.Expr) and (_literal(s.value) or _dotted(s.value)) for s in tree.body)


def _export_code(lines: list[str]) -> int:
    """How many of the lines after an ``In [..]:`` marker are code rather than printed output or markdown.

    The lines form chunks separated by blank lines.  The code is the longest run of chunks that compiles, less
    trailing chunks that do nothing or read like printed values after a displaying statement.  When the chunk after
    that run looks like code (``def``, ``class``, ``import``...), the cell has a syntax error: the code-looking chunks
    are kept so that it gets reported; so is the first chunk when no run compiles."""
    clean = _strip_magics("\n".join(lines))[0].split("\n")
    ends = [i + 1 for i, line in enumerate(clean) if line.strip() and (i + 1 == len(clean) or not clean[i + 1].strip())]
    starts = [0] + [next(j for j in range(e, len(clean)) if clean[j].strip()) for e in ends[:-1]]

    def upto(k: int) -> str:
        return "\n".join(clean[:ends[k - 1]]) + "\n"

    def looks_like_code(k: int) -> bool:
        chunk = [line for line in clean[starts[k]:ends[k]] if not line.lstrip().startswith("#")]
        return bool(chunk) and bool(_CODE_START.match(chunk[0]))

    if not ends:
        return 0
    good = next((k for k in range(len(ends), 0, -1) if _compiles(upto(k))), 0)
    n = good if good else 1
    while n < len(ends) and looks_like_code(n):
        n += 1
    if n > good:
        return ends[n - 1]
    while good > 1:
        chunk, before = _parse("\n".join(clean[starts[good - 1]:ends[good - 1]])), _parse(upto(good - 1))
        if chunk is None or before is None:
            break
        if not (_inert(chunk) or _printed(chunk) and before.body and isinstance(before.body[-1], ast.Expr)):
            break
        good -= 1
    return ends[good - 1]


def _export_cells(text: str) -> list[Cell]:
    lines = text.splitlines()
    markers = [i for i, line in enumerate(lines) if _MARKER.fullmatch(line)]
    cells = []
    for marker, end in zip(markers, markers[1:] + [len(lines)]):
        body = lines[marker + 1:end]
        skip = next((i for i, line in enumerate(body) if line.strip()), len(body))
        code = body[skip:skip + _export_code(body[skip:])]
        if code:
            n = len(cells) + 1
            cells.append(_make_cell(n, "\n".join(code) + "\n", f"cell {n}", marker + 2 + skip))
    return cells


def _markdown_cells(text: str) -> list[Cell]:
    """Fenced blocks tagged python/py (or untagged ones that compile), unless they only show printed values."""
    lines = text.splitlines()
    cells, i = [], 0
    while i < len(lines):
        m = _FENCE.fullmatch(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, tag = len(m[1]), m[2], m[3].strip("{}.").lower()
        close = re.compile(rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*")
        j = next((j for j in range(i + 1, len(lines)) if close.fullmatch(lines[j])), len(lines))
        body = "".join((line.lstrip() if line[:indent].strip() else line[indent:]) + "\n" for line in lines[i + 1:j])
        code = _strip_magics(body)[0]
        tree = _parse(code)
        if (tag in _PY_TAGS or tag == "" and tree is not None) and (tree is None or not _printed(tree)):
            n = len(cells) + 1
            cells.append(_make_cell(n, body, f"code block {n}", i + 2))
        i = j + 1
    return cells


def _notebook_cells(text: str) -> list[Cell]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LoadError(f"invalid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}): "
                        "not a readable notebook") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells", data.get("worksheets")), list):
        raise LoadError("JSON without a 'cells' list: not a Jupyter notebook")
    raw = data.get("cells", [])
    if "nbformat" in data:  # else nbformat would take it for a version 1 notebook and lose the cells
        import nbformat  # only notebooks need it
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw = nbformat.reads(text, as_version=4).cells
        except Exception:  # nbformat rejects notebooks missing metadata; their cells are still usable
            pass
    starts = _source_lines(text, data.get("cells", []), len(raw))
    sources = []
    for c, start in zip(raw, starts):
        if isinstance(c, dict) and c.get("cell_type") == "code":
            source = c.get("source", "")
            source = "".join(source) if isinstance(source, list) else str(source)
            if source.strip():
                sources.append((source, start))
    if not sources:
        raise LoadError(f"notebook has no code cells ({len(raw)} cells in all)" if raw else "notebook has no cells",
                        kind="notebook")
    return [_make_cell(n, s, f"cell {n}", start) for n, (s, start) in enumerate(sources, 1)]


def _source_lines(text: str, cells: list, count: int) -> list[int]:
    """The line of the notebook's JSON file where each of the first ``count`` cells' source starts, or 0 where
    that cannot be told: a source saved as a list of lines, one JSON string a line (as Jupyter writes them), starts
    on the line after its ``"source": [``; a source saved as one string has no file line for each of its lines."""
    if len(cells) < count:
        return [0] * count
    lines, starts, position = text.splitlines(), [], 0
    for cell in cells[:count]:
        found = SOURCE_KEY.search(text, position)
        if found is None or not isinstance(cell, dict):
            return [0] * count
        position, line, source = found.end(), text.count("\n", 0, found.start()) + 2, cell.get("source")
        written = lines[line - 1].strip() if line <= len(lines) else ""
        fits = found[1] and isinstance(source, list) and source and any(
            written.startswith(json.dumps(source[0], ensure_ascii=ascii)[:-1]) for ascii in (False, True))
        starts.append(line if fits else 0)
    return starts


SOURCE_KEY = re.compile(r'"source"\s*:\s*(\[)?')


def extract_cells(path: str | os.PathLike) -> tuple[str, list[Cell]]:
    """The kind of the file or package directory at ``path`` and its code cells, in order.

    Raises :class:`LoadError` (with the kind, "unreadable" unless known) when there is no code to run."""
    path = Path(path)
    if path.is_dir():
        init = path / "__init__.py"
        if init.is_file():
            return "package", [Cell(1, _read_text(init), f"{path.name}/__init__.py", 1)]
        if not project_files(path):
            raise LoadError(f"directory {path} holds no Python module that only defines code (classes, functions)")
        return "project", [Cell(1, "", f"{path.name}/", 1)]
    text = _read_text(path)
    kind = detect_kind(text)
    if kind == "notebook":
        return kind, _notebook_cells(text)
    if kind == "notebook-text":
        cells = _export_cells(text)
    elif kind == "markdown":
        cells = _markdown_cells(text)
    else:
        cells = [_make_cell(1, text, path.name, 1)] if text.strip() else []
    if not cells:
        raise LoadError(f"no code found ({kind} content)" if text.strip() else "empty file", kind=kind)
    return kind, cells


# --- running the cells ----------------------------------------------------------------------------------------------

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


def _failed_import(exc: BaseException | None, body: list[ast.stmt], filename: str) -> int | None:
    """Index in ``body`` of the top-level import statement of a cell that raised ``exc`` (an ImportError), if so."""
    if not isinstance(exc, ImportError):
        return None
    line = next((line for f, line in traceback.walk_tb(exc.__traceback__)
                 if f.f_code.co_filename == filename and f.f_code.co_name == "<module>"), None)
    return next((i for i, s in enumerate(body) if isinstance(s, (ast.Import, ast.ImportFrom))
                 and line is not None and s.lineno <= line <= s.end_lineno), None)


def _module_name(path: str) -> str:
    return f"submission_{hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:10]}_{next(_SERIAL)}"


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
        while True:  # a failed top-level import is recorded and the rest of the cell still runs
            exc = _execute(result, cell, lambda: exec(code, namespace), cell_end, limit, total, out)
            failed = _failed_import(exc, body, filename)
            if failed is None:
                break
            for alias in body[failed].names:  # names the failed import was to bind: reading them is no mistake
                bound = alias.asname or (alias.name if isinstance(body[failed], ast.ImportFrom)
                                         else alias.name.split(".")[0])
                result.unbound[bound] = result.problems[-1].message
            body = body[failed + 1:]
            code = compile(ast.Module(body, []), filename, "exec", dont_inherit=True)
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
    raises :class:`MissingPackage` when called or instantiated; its attributes are placeholders too."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}", cls.package)

    def __call__(cls, *args, **kwargs):
        raise MissingPackage(f"{cls.__qualname__} comes from {cls.package}, which is not installed here",
                             name=cls.package)


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
        for depth in range(1, missing.count(".") + 2):
            parent = ".".join(missing.split(".")[:depth])
            sys.modules.setdefault(parent, _placeholder_module(parent))
        result.unbound[missing.split(".")[0]] = f"{missing} is not installed here: a placeholder stood in for it"
        if result.problems and result.problems[-1].kind == "import":
            result.problems[-1].message += " (a placeholder stood in for it; the module was imported again)"
        sys.modules.pop(name, None)


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
    """Import a project folder as its author does, with the folder on ``sys.path``: every module of it that only
    defines code (:func:`project_files`), under its dotted name (``models.definitions.transformer_model``), each
    within ``cell_timeout``. Scripts (training loops at top level) and tests are left alone."""
    directory = Path(result.path).resolve()
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
        result.roots.insert(0, str(directory))
    result.module = types.ModuleType(_module_name(result.path))
    result.module.__file__ = str(directory / "__init__.py")
    sys.modules[result.module.__name__] = result.module
    out = _Tail()
    for file in project_files(directory):
        name = ".".join(file.relative_to(directory).with_suffix("").parts)
        if name.endswith(".__init__"):
            name = name.removesuffix(".__init__")
        if name in sys.modules:
            continue
        _import_with_placeholders(result, name, directory, cell_timeout, out)
    result.cells[0].output = out.text


DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
               ast.AnnAssign, ast.Try)


def project_files(directory: Path) -> list[Path]:
    """The modules of a project folder that only define code: every top-level statement an import, a definition,
    an assignment, a docstring, a ``try`` (of imports) or an ``if __name__ == "__main__"`` block; not tests, not
    hidden or private folders, not a virtual environment; sorted, packages' ``__init__`` first."""
    found = []
    for file in sorted(Path(directory).rglob("*.py")):
        parts = file.relative_to(directory).parts
        if any(p.startswith((".", "_")) and p != "__init__.py" or p in ("tests", "test", "venv", "env", "build")
               for p in parts) or file.name.startswith(("test_", "setup")) or not all(
                p.isidentifier() for p in parts[:-1] + (file.stem,)):
            continue
        try:
            tree = ast.parse(_read_text(file))
        except (SyntaxError, ValueError, OSError, LoadError):
            continue
        if all(isinstance(node, DEFINITIONS) or _is_docstring(node) or _is_main_guard(node) for node in tree.body):
            found.append(file)
    return sorted(found, key=lambda f: (f.parent.parts, f.name != "__init__.py", f.name))


def _is_docstring(node) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


def _is_main_guard(node) -> bool:
    return isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)


FOLDERS = ("package", "project")
CHECKER = Path(__file__).resolve().parents[1]


def _is_library(filename: str) -> bool:
    """An installed package's file, or the checker's own."""
    return any(part in ("site-packages", "dist-packages") for part in Path(filename).parts) or any(
        _is_under(filename, CHECKER / package) for package in ("adapters", "conformance", "reference"))


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
    """Where the author's imports start from: the folder holding the file (or the package), and the nearest folder
    above it that looks like a project's root (a licence, a README, a setup file, a .git), within three levels."""
    here = Path(path).resolve().parent
    roots = [here]
    for folder in [here, *here.parents][:4]:
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            roots.append(folder)
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
