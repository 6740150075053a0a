"""Diagnosis of what a check raised: the verdict, cause and message of a finding or a crash (:func:`classify`),
telling the crashes of the author's code (an error, read by ``conformance.diagnosis.crashes``) from those of the checker's
own doing (:func:`checker_fault`: an import that failed here, a call or configuration the code does not take, a
precondition the call did not meet), which are no verdict on the code (``missing``, with an ``adapter.*`` cause);
and where in the author's code the class or function playing a role is (:func:`role_location`)."""
import ast
import builtins
import functools
import inspect
import linecache
import os
import re
import textwrap
import tokenize
import traceback
import types

import pytest
import torch

from adapters.behaviour import TAKES_TOKEN_IDS
from adapters.building import FIELDS_LEFT_NONE, is_graft
from adapters.lint import self_attributes
from adapters.loading import MissingPackage
from conformance.diagnosis import causes, crashes
from conformance.contract import harness
from conformance.diagnosis.evidence import author_runs_it, runs_at_the_papers_sizes
from conformance.contract.interface import FUNCTION_ROLES, MissingRole
from conformance.contract.verdicts import ERROR, FAIL, MISSING, Finding

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKER_DIRS = tuple(os.path.join(PROJECT_DIR, d) + os.sep for d in ("conformance", "adapters"))
LIBRARY_DIRS = tuple(os.path.dirname(os.path.dirname(m.__file__)) for m in (pytest, os))


def is_checker_code(filename):
    return filename.startswith(CHECKER_DIRS + LIBRARY_DIRS)


def classify(excinfo, component, locate=None, impl=None):
    """(verdict, cause, message) for an exception raised by a check; ``impl`` (the implementation) tells the
    crashes that are the checker's own doing (:func:`checker_fault`). Every verdict record's cause comes from here:
    a cause ``conformance.diagnosis.causes`` does not list raises :class:`conformance.diagnosis.causes.UnlistedCause`, naming it (an
    internal error of the checker, not a verdict on the code)."""
    verdict, cause, message = verdict_of(excinfo, component, locate, impl)
    causes.require(cause)
    return verdict, cause, message


def verdict_of(excinfo, component, locate, impl):
    """:func:`classify`'s (verdict, cause, message), the cause not yet checked against the catalogue."""
    exc = excinfo.value
    if isinstance(exc, Finding):
        if exc.reproduction is None and exc.verdict != MISSING and harness.LATEST_CASE is not None:
            exc.reproduction = harness.LATEST_CASE.reproduction(component)
        return exc.verdict, exc.cause, exc.message
    if isinstance(exc, MissingRole):
        return MISSING, "role.missing", str(exc)
    if isinstance(exc, (pytest.skip.Exception,)):
        return MISSING, "skipped", str(exc)
    crash = crashes.diagnose(exc, excinfo.tb, is_checker_code, locate)
    message = crash.explanation[:500] + f" (at {crash.where})"
    fault = checker_fault(impl, component, crash, exc, excinfo.tb)
    if fault:
        return MISSING, fault[0], f"{fault[1]}: {message}. {MAP_IT}"
    outer = author_runs_it(impl, component) if impl is not None else None
    if outer is not None:
        return (MISSING, "adapter.call_not_as_author", f"{component} crashed under the checker's call, while the "
                f"author's own {outer} calls it without a crash: the checker does not call it as its author does "
                f"({message}). {MAP_IT}")
    refused = rank_refused_as_given(exc, excinfo.tb)  # (after the author's own calls, which say more)
    if refused:
        return (MISSING, "adapter.precondition_not_met", f"the code states a precondition the checker's call did not "
                f"meet (a torch operation's rank, {refused}): {message}. {MAP_IT}")
    if "device" in str(exc) and any(words in str(exc) for words in ("Expected all tensors", "same device",
                                                                     "not on the expected device")):
        return FAIL, "device.tensor_on_wrong_device", "a tensor was left on another device: " + message
    if impl is not None and component in impl.roles and component not in FUNCTION_ROLES \
            and runs_at_the_papers_sizes(impl, component):
        return (MISSING, "adapter.sizes_fixed_by_the_code", f"{component} crashed at the checker's sizes, while built "
                f"at the paper's widths (d_model = 512, h = 8, d_ff = 2048) it runs: its code fixes a size of its "
                f"own ({message}). {MAP_IT}")
    return ERROR, crash.cause, message


ATTENTION_BLOCKS = ("multi_head_attention", "encoder_layer", "decoder_layer", "encoder", "decoder", "model")


REFERENCE_FILE = os.path.join(PROJECT_DIR, "reference", "transformer.py")
MAP_IT = "The checker cannot tell whether the code is at fault: say what plays each role in a conformance.toml beside it"


def checker_fault(impl, component, crash, exc, tb):
    """``(cause, what the checker did)`` when a crash comes from how the checker loaded or called the code rather
    than from the code itself, else None: a name the author's import would have bound had a package been installed;
    a stack that embeds token ids, given vectors by the canonical call; a crash raised in the checker's own code
    with none of the author's running (over an output of a form it did not expect); an ``assert`` of the author's testing only its
    arguments (a precondition the call did not meet); a block that builds on discovery's probe configuration but
    crashes in an ``__init__`` on a drawn one (or divides by a head width of 0 there, splitting the width by a head
    count of its own); or a block of the reference the checker built in place of a broken
    one of the author's and that the author's code calls otherwise (the crash runs through the reference's code,
    or is a call not fitting its signature)."""
    if impl is None:
        return None
    missing = getattr(exc, "name", None)
    if isinstance(exc, MissingPackage):
        return "adapter.import_failed", (f"{exc}: a package missing here, not a mistake (a placeholder stood in "
                                         "for it while loading)")
    if crash.cause == "error.undefined_name" and missing in getattr(impl, "unbound", {}):
        return "adapter.import_failed", (f"{missing!r} was to come from an import that failed while loading "
                                         f"({impl.unbound[missing]}): a package missing here, not a mistake")
    assigned = getattr(getattr(impl, "observed", None), "assigned", {})
    if crash.cause == "error.undefined_name" and missing in assigned:
        return "adapter.global_set_by_main", (f"{missing!r} is a global that {assigned[missing]} sets, and running "
                                              "it did not get that far here (adapters.observe): the code needs the "
                                              "author's own run, not a fix")
    left_none = fields_left_none(tb) if crash.cause == "error.none_used_as_tensor" else None
    if left_none:
        return "adapter.config_field_not_planned", (
            f"{left_none[0]} reads {', '.join(left_none[1])} from its configuration object, a field the checker "
            "cannot set from the sizes it checks: left None, the code used that None (its author's configuration "
            "gives it a value)")
    accelerator = needs_accelerator(exc)
    if accelerator:
        return "adapter.needs_accelerator", accelerator
    if TAKES_TOKEN_IDS in str(exc):
        return "adapter.takes_token_ids", (f"{component} embeds token ids itself, and the checker's canonical call "
                                           "gives it vectors")
    frames = [f for f, _ in traceback.walk_tb(tb) if not is_checker_code(f.f_code.co_filename)]
    raised = crashes.raised_by_the_checker(tb, CHECKER_DIRS, LIBRARY_DIRS)
    if not frames and raised is not None:
        return "adapter.check_crashed", (f"the checker's own code ({os.path.basename(raised.f_code.co_filename)}, "
                                         f"{raised.f_code.co_name}) failed, running none of {component}'s code (an "
                                         "internal error of the checker, or an output of a form this check does not "
                                         "assume)")
    overflow = embedding_overflow(exc, tb)
    case = harness.LATEST_CASE
    if overflow is not None and case is not None and overflow[1] < max(case.cfg.src_vocab, case.cfg.tgt_vocab):
        return "adapter.vocabulary_not_taken", (
            f"an embedding table of {overflow[0]} rows was given token id {overflow[1]}, of the vocabularies the "
            f"checker configured ({case.cfg.src_vocab} source and {case.cfg.tgt_vocab} target tokens): the code sizes "
            "that table otherwise (from a configuration of its own, or one vocabulary for both sides, as §3.4's "
            "shared matrix has it)")
    setup = setup_method(exc)
    if setup:
        return "adapter.needs_setup_call", (f"the code sets {exc.name!r} in {setup}() and expects that method called "
                                            "before this one, a protocol of its own the checker does not know")
    broken = getattr(impl, "broken", None)  # None: the roles were named by the author (CONFORMANCE_ROLES)
    if broken is not None and component in impl.roles and component not in broken and any(
            f.f_code.co_name == "__init__" for f in frames):
        case = harness.LATEST_CASE
        return "adapter.configuration_not_supported", (
            f"{component} builds on the configuration discovery tried but not on "
            f"{case.cfg if case is not None else 'this one'} (a size its code assumes, such as a head count it sets "
            "itself, does not fit)")
    if isinstance(exc, ZeroDivisionError) and any(f.f_code.co_name == "__init__" for f in frames) \
            and component in ATTENTION_BLOCKS and not impl.supports(component).takes("h"):
        return "adapter.head_count_not_taken", (f"{component}'s constructor takes no head count: its code splits the "
                                                "drawn width by a head count of its own, which leaves a head width of 0")
    taken = function_taken_as_a_tensor(exc, tb)
    if taken:
        return "adapter.call_not_as_author", (
            f"{taken[0]} takes a tensor as {taken[1]!r} (its code never calls it, nor names it for a function) where "
            f"the checker's canonical call of {component} gives it a function: its author gives it a tensor there "
            "(the two-tensor \"Add & Norm\" of §3.1, LayerNorm(x + y), given the sub-layer's output y), a call the "
            "checker does not make")
    sequence = number_for_a_sequence(exc, tb)
    if sequence:
        return "adapter.sequence_given_a_number", (f"the code indexes or iterates {sequence}, to which the checker "
                                                   "gave one number: it takes a sequence there (a list of widths, "
                                                   "say), which the checker's configuration does not give")
    precondition = stated_precondition(exc, tb)
    if precondition:
        return "adapter.precondition_not_met", (f"the code states a precondition the checker's call or "
                                                f"configuration did not meet ({precondition})")
    grafts = getattr(impl, "grafts", {}).get(component)
    if grafts and (crash.cause == "error.call_signature_mismatch"
                   or any(f.f_code.co_filename == REFERENCE_FILE for f in frames)
                   or (isinstance(exc, AttributeError) and is_graft(getattr(exc, "obj", None)))):
        return "adapter.graft_does_not_fit", (f"{component} was built with {'; '.join(grafts)} (which does not work), "
                                              "and the code calls that block otherwise")
    return None


def fields_left_none(tb):
    """``(class name, [field, ...])`` for the outermost block of the author's running at the crash that read
    fields of its configuration object the checker could not plan (``adapters.building.ReadFields``, left None);
    None when no such block ran."""
    for frame, _ in traceback.walk_tb(tb):
        cls = type(frame.f_locals.get("self"))
        read = next((FIELDS_LEFT_NONE[c] for c in cls.__mro__ if FIELDS_LEFT_NONE.get(c)), None)
        if read:
            return cls.__name__, [repr(name) for name in read]
    return None


NO_ACCELERATOR = re.compile(r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|No CUDA GPUs are available|"
                            r"no CUDA-capable device|CUDA driver initialization failed")
ON_TWO_DEVICES = re.compile(r"Expected all tensors to be on the same device|same device")


def needs_accelerator(exc):
    """What the checker did, when the code put a tensor on an accelerator itself (a literal ``.cuda()``) and the check
    ran on the CPU: on a machine without one, torch refuses; on a machine with one, a CUDA tensor meets the check's
    CPU inputs. The author runs such code on the accelerator, so the crash is the check's device, not a finding; else
    None. (A tensor the code leaves on the CPU while the check runs on an accelerator stays a finding.)"""
    case = harness.LATEST_CASE
    on_cpu = case is None or torch.device(case.device).type == "cpu"
    text = str(exc)
    if on_cpu and NO_ACCELERATOR.search(text):
        return ("the code moves a tensor to CUDA itself and this machine has none (torch: " + text[:120] +
                "): its author runs it on a GPU; run the checks with --device=cuda on a machine with one")
    if on_cpu and ON_TWO_DEVICES.search(text) and "cuda" in text:
        return ("the code moves a tensor to CUDA itself while the check ran on the CPU: its author runs it on a "
                "GPU; run the checks with --device=cuda")
    return None


def embedding_overflow(exc, tb):
    """``(rows of the table, the largest token id looked up)`` for an ``index out of range`` IndexError raised
    looking up an embedding table (torch's ``embedding``), or None for any other exception."""
    if not isinstance(exc, IndexError) or "index out of range" not in str(exc):
        return None
    frame = next((f for f, _ in reversed(list(traceback.walk_tb(tb))) if f.f_code.co_name == "embedding"), None)
    weight, ids = (frame.f_locals.get("weight"), frame.f_locals.get("input")) if frame is not None else (None, None)
    if not (isinstance(weight, torch.Tensor) and weight.dim() == 2 and isinstance(ids, torch.Tensor) and ids.numel()):
        return None
    return weight.size(0), int(ids.max())


def setup_method(exc):
    """The method other than ``__init__`` that assigns the attribute an AttributeError could not find on a
    module of the author's (``init_keys`` setting ``self.proj_keys``), or None."""
    owner, name = getattr(exc, "obj", None), getattr(exc, "name", None)
    if not isinstance(exc, AttributeError) or not isinstance(owner, torch.nn.Module) or not name:
        return None
    return next((method_name for method_name, method in vars(type(owner)).items()
                 if method_name != "__init__" and callable(method) and name in (self_attributes(method) or ())), None)


def stated_precondition(exc, tb):
    """The statement of the author's code that raised ``exc``, when it states what its function's arguments must be:
    an ``assert`` testing only them (``assert token_ids.ndim == 2``, ``assert d_model == d_word_vec``; or reading
    an attribute the object given lacks, ``assert encoder.model_dim == decoder.model_dim`` given modules where its
    author's code gives configurations), a ``raise``
    under an ``if`` testing only them (``if tie and src_vocab != tgt_vocab: raise ValueError(...)``), or the
    unpacking of an argument's shape (``batch_size, seq_len = x.size()``: an input of another rank was expected).
    A precondition written for callers, so a call not meeting it was the checker's; None for any other crash."""
    raised = raising_statement(tb)
    if raised is None:
        return None
    frame, line, node = raised
    code = frame.f_code
    if isinstance(exc, (AssertionError, AttributeError)) and isinstance(node, ast.Assert):
        tested = node.test  # (failed, or could not even be read on what it was given: ``encoder.model_dim``)
    elif isinstance(exc, ValueError) and "values to unpack" in str(exc) and isinstance(node, ast.Assign) \
            and isinstance(node.targets[0], ast.Tuple):
        tested = node.value if is_shape(node.value) else None
    elif isinstance(node, ast.Raise):
        node, tested = guarding_if(code, line) or (node, None)
    else:
        tested = None
    arguments = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]) - {"self"}
    names = {n.id for n in ast.walk(tested) if isinstance(n, ast.Name)} if tested is not None else set()
    if not names or not names <= read_from_arguments(code, arguments):
        return None
    return f"{ast.unparse(node).splitlines()[0][:120]}, at {code.co_name}"


RANK_REQUIRED = re.compile(r"must be a [1-6]D tensor|[Ee]xpected [1-6]D|batched [1-6]D|[1-6]-D tensor")
"""torch refusing a tensor of another rank (``batch1 must be a 3D tensor``)."""


def rank_refused_as_given(exc, tb):
    """The statement where a torch operation refused the rank of the arguments of the author's function as given,
    that function being the only one of the author's running (the checker called it): the code takes them of
    another rank (``torch.bmm(query, key.transpose(1, 2))``, the heads folded into the batch, 3-D, where the call gave
    4-D), a precondition of its own; None otherwise (a block handing ``torch.bmm`` 4-D heads it made itself)."""
    if not isinstance(exc, RuntimeError) or not RANK_REQUIRED.search(str(exc)):
        return None
    authors = [(f, n) for f, n in traceback.walk_tb(tb) if not is_checker_code(f.f_code.co_filename)]
    node = statement_at(authors[0][0].f_code.co_filename, authors[0][1]) if len(authors) == 1 else None
    if node is None:
        return None
    code = authors[0][0].f_code
    arguments = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]) - {"self"}
    given = {n.id for call in ast.walk(node) if isinstance(call, ast.Call) for a in call.args for n in ast.walk(a)
             if isinstance(n, ast.Name)}
    if not given or not given <= read_from_arguments(code, arguments):
        return None
    return f"{ast.unparse(node).splitlines()[0][:120]}, at {code.co_name}"
NUMBER_AS_SEQUENCE = re.compile(r"'(int|float)' object is not (subscriptable|iterable)|object of type '(int|float)' "
                                r"has no len\(\)")


def number_for_a_sequence(exc, tb):
    """``the argument 'name' of f`` when ``exc`` is Python refusing to index, iterate or measure a number, raised by a
    statement of the author's naming an argument of its function that holds a number
    (``for n_in, n_out in zip(widths[:-1], widths[1:])`` given ``widths=64``); else None."""
    raised = raising_statement(tb) if isinstance(exc, TypeError) and NUMBER_AS_SEQUENCE.search(str(exc)) else None
    if raised is None:
        return None
    frame, _, node = raised
    code = frame.f_code
    arguments = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    named = set(used_as_sequences(node)) if node is not None else set()
    numbers = [a for a in arguments if a in named and type(frame.f_locals.get(a)) in (int, float)]
    return f"the argument {numbers[0]!r} of {code.co_name}" if numbers else None


FUNCTION_TYPE = re.compile(r"\b(builtin_function_or_method|function|method|partial)\b")
FUNCTION_KINDS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial)
FUNCTION_NAME = re.compile(r"sub_?layer|^layer|_layer$|^fn|fn$|func|callable|module|block", re.IGNORECASE)


def function_taken_as_a_tensor(exc, tb):
    """``(function name, argument)`` when ``exc`` is Python or torch refusing a function where an object of another
    kind is expected, raised through a function of the author's given a function in an argument that its code never
    calls and whose name says no function (``forward(self, input_a, input_b)``): it takes a tensor there, and the
    function was the checker's; else None. An argument named for a function (``sublayer``) and used uncalled is the
    author's slip, and stays an error."""
    if not isinstance(exc, (TypeError, AttributeError)) or not FUNCTION_TYPE.search(str(exc)):
        return None
    for frame, _ in traceback.walk_tb(tb):
        code = frame.f_code
        if is_checker_code(code.co_filename):
            continue
        arguments = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        given = [a for a in arguments if isinstance(frame.f_locals.get(a), FUNCTION_KINDS)]
        tree = function_tree(code) if given else None
        if tree is None:
            continue
        called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        taken = [a for a in given if a not in called and not FUNCTION_NAME.search(a)]
        if taken:
            return code.co_name, taken[0]
    return None


SEQUENCE_FUNCTIONS = {"len", "zip", "iter", "enumerate", "list", "tuple", "sorted", "reversed", "sum", "max", "min"}


def used_as_sequences(node):
    """The names ``node`` indexes (``widths[0]``), iterates (``for w in widths``, ``zip(widths, ...)``) or unpacks
    (``*widths``)."""
    for n in ast.walk(node):
        if isinstance(n, (ast.Subscript, ast.Starred)) and isinstance(n.value, ast.Name):
            yield n.value.id
        elif isinstance(n, (ast.For, ast.comprehension)) and isinstance(n.iter, ast.Name):
            yield n.iter.id
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in SEQUENCE_FUNCTIONS:
            yield from (a.id for a in n.args if isinstance(a, ast.Name))


def function_tree(code):
    """The parsed source of the function ``code`` (its block, from its first line), or None when unreadable."""
    lines = linecache.getlines(code.co_filename)[code.co_firstlineno - 1:]
    try:
        return ast.parse(textwrap.dedent("".join(inspect.getblock(lines))))
    except (SyntaxError, IndentationError, tokenize.TokenError):
        return None


def read_from_arguments(code, arguments):
    """``arguments``, the builtins and the local names the function ``code`` assigns from them alone (``B, S =
    src.shape``, ``T = tgt.size(1)``): what an ``assert src_mask.shape == (B, S)`` tests is still what its caller
    gave."""
    known = set(arguments) | set(dir(builtins))
    tree = function_tree(code)
    for node in (n for n in ast.walk(tree) if isinstance(n, ast.Assign)) if tree is not None else ():
        if {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} <= known:
            known |= {n.id for target in node.targets for n in ast.walk(target) if isinstance(n, ast.Name)}
    return known


def guarding_if(code, line):
    """``(the if statement, its test)`` whose body raises at ``line`` of the function ``code`` (``if
    tie_embeddings and src_vocab != tgt_vocab: raise ValueError(...)``), or None."""
    tree = function_tree(code)
    if tree is None:
        return None
    return next(((node, node.test) for node in ast.walk(tree) if isinstance(node, ast.If) and any(
        isinstance(s, ast.Raise) and s.lineno + code.co_firstlineno - 1 == line for s in node.body)), None)


def raising_statement(tb):
    """``(frame, line, statement)`` where the author's code raised (the innermost frame of ``tb`` but those of the
    libraries its statement called, torch's ``__getattr__`` raising for it; its statement parsed, or None when
    unreadable); None when that frame is the checker's own."""
    frame, line = next(((f, n) for f, n in reversed(list(traceback.walk_tb(tb)))
                        if not f.f_code.co_filename.startswith(LIBRARY_DIRS)), (None, None))
    if frame is None or is_checker_code(frame.f_code.co_filename):
        return None
    return frame, line, statement_at(frame.f_code.co_filename, line)


def is_shape(node):
    """``x.shape`` or ``x.size()``."""
    if isinstance(node, ast.Call):
        node = node.func if isinstance(node.func, ast.Attribute) and node.func.attr == "size" else None
        return node is not None
    return isinstance(node, ast.Attribute) and node.attr == "shape"


def statement_at(filename, line):
    """The statement starting at ``line`` of ``filename`` (through its continuation lines), or None."""
    text = ""
    for number in range(line, line + 6):
        text += linecache.getline(filename, number)
        try:
            return ast.parse(textwrap.dedent(text)).body[0]
        except (SyntaxError, IndexError):
            continue
    return None



def role_location(impl, role):
    """``file:line in X``: where the class or function of the author's that plays ``role`` is defined (a class at
    its ``class`` line), the line mapped to its cell for a notebook or a post; None for a role the checker does
    not place (one it stands in for with its own code, the reference's or torch's, or one served by another
    process)."""
    roles = getattr(impl, "roles", None)
    builder = roles.get(role) if isinstance(roles, dict) else None
    found = authors_code(getattr(builder, "target", builder))
    if found is None:
        return None
    target, code = found
    locate = getattr(impl, "locate", None)
    if isinstance(target, type):
        return crashes.class_location(target, locate)
    at = (locate(code.co_filename, code.co_firstlineno) if locate else None) or \
        f"{code.co_filename}:{code.co_firstlineno}"
    return f"{at} in {getattr(target, '__qualname__', code.co_name)}"



def authors_code(target, depth=3):
    """``(class or function, its first code object)`` of the author's behind ``target``: ``target`` itself, or what
    the checker's wrapper of it closes over (an attention method called through ``adapters.wrapping``), ``depth``
    wrappers deep at most; None for code of the checker's, the reference's or a library's."""
    try:
        target = inspect.unwrap(target)
    except ValueError:  # a chain of __wrapped__ that never ends
        return None
    code = crashes.first_code(target)
    if code is None or code.co_filename == REFERENCE_FILE:
        return None
    if not is_checker_code(code.co_filename):
        return target, code
    for cell in (getattr(target, "__closure__", None) or ()) if depth else ():
        inner = getattr(cell.cell_contents, "__func__", cell.cell_contents) if cell_is_set(cell) else None
        found = authors_code(inner, depth - 1) if callable(inner) else None
        if found is not None:
            return found
    return None


def cell_is_set(cell):
    try:
        cell.cell_contents
    except ValueError:  # a closure's variable not yet bound
        return False
    return True
