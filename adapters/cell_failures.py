"""What of a cell still runs after one of its statements fails: the cell stops there, as in Jupyter, unless the
failure is the machine's and not the author's, a package not installed here. Then the statement is skipped, the
names it was to bind are recorded as unbound (reading them later is no mistake of the author's), and the rest of the
cell runs: a failed ``import spacy``, a ``data = load_dataset(...)`` that needs it, a ``loader = DataLoader(data)``
that needs that, and the ``import torch.nn as nn`` and the classes after them still load."""
import __future__
import ast
import traceback

ANNOTATIONS_AS_TEXT = __future__.annotations.compiler_flag
"""Compiler flag under which annotations are kept as text, never evaluated (PEP 563)."""


def failing_statement(exc: BaseException, body: list[ast.stmt], filename: str) -> int | None:
    """Index in ``body`` of the top-level statement of the cell (compiled as ``filename``) that raised ``exc``."""
    line = next((line for f, line in traceback.walk_tb(exc.__traceback__)
                 if f.f_code.co_filename == filename and f.f_code.co_name == "<module>"), None)
    return next((i for i, s in enumerate(body) if line is not None and s.lineno <= line <= s.end_lineno), None)


def failed_import(exc: BaseException | None, body: list[ast.stmt], filename: str) -> int | None:
    """Index in ``body`` of the top-level import statement of a cell that raised ``exc`` (an ImportError), if so."""
    if not isinstance(exc, ImportError):
        return None
    failed = failing_statement(exc, body, filename)
    return failed if failed is not None and isinstance(body[failed], (ast.Import, ast.ImportFrom)) else None


def needing_a_missing_package(exc: BaseException | None, body: list[ast.stmt], filename: str,
                              unbound: dict) -> int | None:
    """Index in ``body`` of the top-level statement, not a definition, that raised ``exc``, a NameError for a name
    ``unbound`` holds (a failed import's, or one a statement skipped for it was to bind): what the author ran with
    the package installed, and no mistake of theirs here."""
    if not isinstance(exc, NameError) or exc.name not in unbound:
        return None
    failed = failing_statement(exc, body, filename)
    definitions = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return failed if failed is not None and not isinstance(body[failed], definitions) else None


def annotation_of_missing_package(exc: BaseException | None, body: list[ast.stmt], filename: str,
                                  unbound: dict) -> int | None:
    """Index in ``body`` of the top-level definition that raised ``exc``, a NameError for a name whose import
    failed (``unbound``: a package not installed here), when that name appears in one of its annotations
    (``def __init__(self, vocab: torchtext.vocab.Vocab)``): an annotation must not stop a class from loading."""
    if not isinstance(exc, NameError) or exc.name not in unbound:
        return None
    failed = failing_statement(exc, body, filename)
    statement = body[failed] if failed is not None else None
    if isinstance(statement, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
            and exc.name in annotation_names(statement):
        return failed
    return None


def annotation_names(definition: ast.stmt) -> set[str]:
    """The names read in the annotations of the functions (and the class body) of ``definition``."""
    annotations = []
    for node in ast.walk(definition):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            annotations += [a.annotation for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs
                            + [arguments.vararg, arguments.kwarg] if a is not None and a.annotation is not None]
            annotations += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
    return {n.id for a in annotations for n in ast.walk(a) if isinstance(n, ast.Name)}


def names_bound(statement: ast.stmt) -> list[str]:
    """The names a top-level statement binds: an import's (``import a.b`` binds ``a``), an assignment's, a loop's
    or a ``with``'s targets, a definition's name."""
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return [alias.asname or (alias.name if isinstance(statement, ast.ImportFrom) else alias.name.split(".")[0])
                for alias in statement.names]
    if isinstance(statement, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return [statement.name]
    targets = {ast.Assign: lambda s: s.targets, ast.AnnAssign: lambda s: [s.target],
               ast.AugAssign: lambda s: [s.target], ast.For: lambda s: [s.target],
               ast.With: lambda s: [i.optional_vars for i in s.items if i.optional_vars is not None]}
    found = targets.get(type(statement), lambda s: [])(statement)
    return [n.id for t in found for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
