"""What code a submission holds, cut into cells: the first step of loading (:mod:`adapters.loading` runs them).

The kind of input is recognised from its content, never from its file name (:func:`detect_kind`): a Python file is
one cell; a Jupyter notebook, a notebook's text export (``In [3]:`` markers) or a markdown post (fenced code blocks)
is cut into its code cells, IPython magics and shell lines removed and recorded; a package is its ``__init__.py``; a
project folder is the modules in it that only define code (:func:`project_files`).
"""
from __future__ import annotations

import ast
import configparser
import contextlib
import json
import os
import re
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path

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


class LoadError(ValueError):
    """Raised by :func:`extract_cells` when the content yields no code at all."""

    def __init__(self, message: str, kind: str = "unreadable"):
        super().__init__(message)
        self.kind = kind


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
        if init.is_file() and not imports_from_inside(path):
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


DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
               ast.AnnAssign, ast.Try)


def project_files(directory: Path) -> list[Path]:
    """The modules of a project folder that only define code: every top-level statement an import, a definition,
    an assignment, a docstring, a ``try`` (of imports), a ``sys.path`` set-up or an ``if __name__ == "__main__"``
    block; not tests, not hidden or private folders, not a virtual environment; sorted, packages' ``__init__``
    first."""
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
        if all(isinstance(node, DEFINITIONS) or _is_docstring(node) or _is_main_guard(node) or _is_path_setup(node)
               for node in tree.body):
            found.append(file)
    return sorted(found, key=lambda f: (f.parent.parts, f.name != "__init__.py", f.name))


MODULE_CLASS = re.compile(r"^\s*class\s+\w+\s*\([^)]*\bModule\b", re.M)


def notebook_of_folder(directory: Path) -> Path | None:
    """The notebook a folder without a module that only defines code keeps its model in: of the notebooks in it (not
    in hidden or private folders, not Jupyter's checkpoints), the one whose code cells define the most
    ``torch.nn.Module`` classes, the shortest path of those (a copy's name is longer); None when no notebook defines
    one."""
    found = []
    for file in sorted(Path(directory).rglob("*.ipynb")):
        if any(p.startswith((".", "_")) for p in file.relative_to(directory).parts[:-1]):
            continue
        try:
            code = "\n".join(cell.source for cell in _notebook_cells(_read_text(file)))
        except (LoadError, OSError, ValueError):
            continue
        classes = len(MODULE_CLASS.findall(code))
        if classes:
            found.append((-classes, len(str(file)), str(file), file))
    return min(found)[-1] if found else None


def code_of(path: str) -> str:
    """``path``, or, for a folder that keeps its code in a notebook (no package, no module that only defines code:
    a project of notebooks beside its data), that notebook (:func:`notebook_of_folder`)."""
    folder = Path(path)
    if not folder.is_dir() or (folder / "__init__.py").is_file() or not any(folder.rglob("*.ipynb")) \
            or project_files(folder):
        return path
    notebook = notebook_of_folder(folder)
    return path if notebook is None else str(notebook)


def imports_from_inside(directory: Path) -> bool:
    """Whether the folder's own modules import one another by names rooted inside it (``from blocks.layers import
    EncoderLayer`` beside a ``blocks/`` folder): code run from the folder itself, a project's root though it holds an
    ``__init__.py``, not a package imported from the folder above."""
    inner = {child.stem for child in Path(directory).iterdir() if child.name != "__init__.py" and (
        child.suffix == ".py" or child.is_dir()) and child.stem.isidentifier()}
    for file in project_files(directory):
        try:
            tree = ast.parse(_read_text(file))
        except (SyntaxError, ValueError, OSError, LoadError):
            continue
        for node in ast.walk(tree):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [
                alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if any(name.split(".")[0] in inner for name in names):
                return True
    return False


def _is_docstring(node) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


def _is_path_setup(node) -> bool:
    """``sys.path.insert(1, ".")``: a module making its sibling folders importable, still a module of definitions."""
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
        and ast.unparse(node.value.func) in ("sys.path.insert", "sys.path.append")


def _is_main_guard(node) -> bool:
    return isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)


SRC_FOLDER = "src"
"""The folder of the src layout: a project's packages under ``src/``, importable only once the project is installed."""


def install_roots(directory: Path) -> list[Path]:
    """The folders under a project folder that installing it (``pip install .``) puts on the import path: those its
    packaging declares (setuptools' ``package-dir`` and ``packages.find.where`` in pyproject.toml or setup.cfg,
    ``package_dir`` in setup.py, poetry's ``from``, hatch's wheel ``packages``), else the ``src`` folder of the src
    layout (not one holding an ``__init__.py``: that ``src`` is a package its author imports as ``src.model``, its
    modules importing each other relatively). Only folders inside the project that hold a module or a package are
    kept."""
    directory = Path(directory).resolve()
    declared = _declared_roots(directory)
    if not declared and not (directory / SRC_FOLDER / "__init__.py").is_file():
        declared = [SRC_FOLDER]
    roots = []
    for name in declared:
        folder = (directory / name).resolve()
        if folder != directory and folder.is_relative_to(directory) and folder.is_dir() and any(
                child.suffix == ".py" or (child / "__init__.py").is_file() for child in folder.iterdir()):
            roots.append(folder)
    return list(dict.fromkeys(roots))


def _declared_roots(directory: Path) -> list[str]:
    """The package folders the project's packaging files name, relative to the project (unreadable files: none)."""
    found = []
    unreadable = (LoadError, ValueError, AttributeError, TypeError, configparser.Error)
    with contextlib.suppress(*unreadable):
        tool = tomllib.loads(_read_text(directory / "pyproject.toml")).get("tool", {})
        setuptools = tool.get("setuptools", {})
        found += [setuptools.get("package-dir", {}).get("", "")]
        found += list(setuptools.get("packages", {}).get("find", {}).get("where", [])) \
            if isinstance(setuptools.get("packages"), dict) else []
        found += [entry.get("from", "") for entry in tool.get("poetry", {}).get("packages", [])
                  if isinstance(entry, dict)]
        wheel = tool.get("hatch", {}).get("build", {}).get("targets", {}).get("wheel", {})
        found += [str(Path(package).parent) for package in wheel.get("packages", [])]
    with contextlib.suppress(*unreadable):
        config = configparser.ConfigParser()
        config.read_string(_read_text(directory / "setup.cfg"))
        found += re.findall(r"^\s*=\s*(\S+)", config.get("options", "package_dir", fallback=""), re.M)
        found += [config.get("options.packages.find", "where", fallback="")]
    with contextlib.suppress(*unreadable):
        found += re.findall(r"package_dir\s*=\s*\{\s*['\"]{2}\s*:\s*['\"]([^'\"]+)['\"]",
                            _read_text(directory / "setup.py"))
    return [name for name in found if isinstance(name, str) and name.strip(". /")]
