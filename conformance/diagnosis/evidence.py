"""Evidence before blame (issue 23): a crash of a block called the checker's way is the author's fault only where
the author's own code, calling it its own way, crashes too.

The author's enclosing blocks call a sub-block as the author meant it to be called (its mask layout, an argument
that is a function, sizes it takes from elsewhere): when the model, a stack or a layer runs on its canonical call
and every instance of the sub-block's class inside it returns, the sub-block works where its author uses it, and
its crash under the checker's own call says only that the checker does not know how to call it.

Every fail and error record also names its evidence (:func:`evidence`). While a check runs, the harness records the
calling pattern of each call it makes to its component (:class:`CheckCalls`: argument names, and of each tensor its
rank, kind and axes of size 1); the author's enclosing blocks are run under a recorder of the same patterns
(:func:`authors_calls`). A failure on a pattern that the author's outermost running block never uses is the checker's
way of calling, not the author's bug. A failure of a role that the checks in place (``conformance.checks.test_in_place``) also
find on the author's own forward pass is replayed there: its evidence is :data:`REPLAYED`, whatever the check's own
call was."""
import contextlib
import dataclasses
import functools
import inspect
import sys

import torch
import torch.nn as nn

from adapters.behaviour import canonical_call_error
from adapters.building import PAPER_BASE, authors_own_blocks
from conformance.contract import harness
from conformance.contract.interface import FUNCTION_ROLES, ROLES

ENCLOSING = {
    "positional_encoding": ("model", "encoder", "decoder"),
    "embedding": ("model", "encoder", "decoder"),
    "multi_head_attention": ("encoder_layer", "decoder_layer", "encoder", "decoder", "model"),
    "feed_forward": ("encoder_layer", "decoder_layer", "encoder", "decoder", "model"),
    "layer_norm": ("sublayer_connection", "encoder_layer", "decoder_layer", "encoder", "decoder", "model"),
    "sublayer_connection": ("encoder_layer", "decoder_layer", "encoder", "decoder", "model"),
    "encoder_layer": ("encoder", "model"),
    "decoder_layer": ("decoder", "model"),
    "encoder": ("model",),
    "decoder": ("model",),
    "generator": ("model",),
}
"""The roles whose blocks may hold each role's blocks, innermost first."""
assert set(ENCLOSING) <= set(ROLES) and all(set(outer) <= set(ROLES) for outer in ENCLOSING.values())


def author_runs_it(impl, role):
    """The enclosing role whose canonical call, built from the author's own sub-blocks only, ran every call of
    ``role``'s class inside it to its end, or None. None also when the role's class is unknown (declared roles,
    functions) or no enclosing block runs. A function role played by a module class (an attention module its
    multi-head block builds and calls with the heads in the batch axis) is read so too."""
    return _author_runs_it(impl, role)


@functools.lru_cache(maxsize=64)
def _author_runs_it(impl, role):
    cls = author_target(impl.roles.get(role))
    if not isinstance(cls, type) or "forward" not in vars(cls):
        return None
    for outer in (FUNCTION_ENCLOSING if role in FUNCTION_ROLES else ENCLOSING).get(role, ()):
        if not impl.has(outer) or outer in FUNCTION_ROLES:
            continue
        calls = {"started": 0, "returned": 0}
        own = cls.forward

        def watched(self, *args, **kwargs):
            calls["started"] += 1
            out = own(self, *args, **kwargs)
            calls["returned"] += 1
            return out

        cls.forward = watched
        try:
            with authors_own_blocks() as grafted:  # the outer block as its author wrote it: no reference inside
                problem = canonical_call_error(impl, outer)
        finally:
            cls.forward = own
        if problem is None and not grafted and calls["started"] and calls["started"] == calls["returned"]:
            return outer
    return None


# -- the evidence of a finding (issue 23, section 3) -----------------------------------------------------------------
AUTHORS_CALL = "author's call"
"""The check called the role as the author's own code calls it (the same calling pattern), or the role is the model,
which nothing of the author's calls."""
REFERENCE_SUBSTITUTION = "reference substitution"
"""The fault was located by putting the candidate's blocks in place of the reference's, one role at a time."""
CHECKERS_CALL = "checker's call"
"""The check called the role in the checker's canonical way, and no block of the author's that runs calls it: there is
nothing of the author's to compare the call with."""
WITHOUT_A_CALL = "without a call"
"""The check found the fault without calling the role (its code read, its parameters counted, its construction)."""
REPLAYED = "replayed on the author's call"
"""The fault shows on the author's own call: found by a check in place, on the sub-block's calls recorded while the
author's model ran its own forward pass, or found on the checker's call and found there again."""
KINDS = (AUTHORS_CALL, REPLAYED, REFERENCE_SUBSTITUTION, CHECKERS_CALL, WITHOUT_A_CALL)

FUNCTION_ENCLOSING = {
    "attention": ("multi_head_attention", "encoder_layer", "decoder_layer", "encoder", "decoder", "model"),
    "padding_mask": ("model",),
    "subsequent_mask": ("model",),
}
"""The roles whose blocks may call each function role, innermost first."""
assert set(FUNCTION_ENCLOSING) <= set(ROLES) and all(set(o) <= set(ROLES) for o in FUNCTION_ENCLOSING.values())


# -- calling patterns ------------------------------------------------------------------------------------------------
def tensor_form(ndim, dtype, shape):
    """A tensor argument's form: ``("tensor", ndim, kind, axes of size 1)``, the axes counted from the last (-1)."""
    kind = "bool" if dtype == torch.bool else "float" if dtype.is_floating_point or dtype.is_complex else "integer"
    return ("tensor", ndim, kind, tuple(i - ndim for i, n in enumerate(shape) if n == 1))


def argument_form(value):
    """The form of one argument, what a calling convention is made of; None for None (an argument left out)."""
    if isinstance(value, torch.Tensor):
        return tensor_form(value.dim(), value.dtype, value.shape)
    if value is None:
        return None
    if isinstance(value, bool):
        return ("bool",)
    if isinstance(value, (int, float)):
        return ("number",)
    if isinstance(value, (tuple, list)):
        return ("sequence",)
    if callable(value):  # a function, a lambda, a module handed to an add-and-norm block
        return ("function",)
    return (type(value).__name__,)


@functools.lru_cache(maxsize=512)
def parameters_of(function, method=False):
    """The signature of ``function`` without its first parameter when it is a ``method`` (``self``), or None."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    parameters = list(signature.parameters.values())
    if method and parameters:
        signature = signature.replace(parameters=parameters[1:])
    return signature


def calling_pattern(function, args, kwargs, method=False, form=argument_form):
    """How a call passes its arguments to ``function`` (the forward or the function called): ``frozenset`` of
    ``(parameter name, form)``, bound to the parameters by name so that a call by position and one by keyword read
    alike; arguments left out or None are absent. Unbound (a call that does not fit) by position and keyword."""
    signature = parameters_of(function, method) if function is not None else None
    try:
        bound = signature.bind(*args, **kwargs).arguments if signature is not None else None
    except TypeError:
        bound = None
    if bound is None:
        bound = {**{f"#{i}": a for i, a in enumerate(args)}, **kwargs}
    named = {}
    for name, value in bound.items():
        parameter = signature.parameters.get(name) if signature is not None else None
        if parameter is not None and parameter.kind is parameter.VAR_POSITIONAL:
            named.update({f"{name}#{i}": v for i, v in enumerate(value)})
        elif parameter is not None and parameter.kind is parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return frozenset((name, form(value)) for name, value in named.items() if form(value) is not None)


def form_fits(author, check):
    """Whether the check passed an argument of the form the author passes. Tensors: of one kind, and, aligned from
    their last axes as broadcasting aligns them, the check's has size 1 wherever the author's has (a layout the
    author broadcasts, a (batch, 1, 1, Lk) mask, is not given as (batch, 1, Lk), whose batch then meets the heads);
    axes only one of them has do not count (the author's (Lq, Lk) mask broadcasts over the batch and heads a
    (batch, 1, Lq, Lk) one spells out), nor does a size 1 the check drew where the author's is longer. Float tensors
    of three axes or more are of one rank, though: the author's (batch * h, L, d_k) queries hold the heads in the
    batch axis, where the check's (batch, h, L, d_k) give them one of their own."""
    if author == check:
        return True
    if not author[0] == check[0] == "tensor" or author[2] != check[2]:
        return False
    if author[2] == "float" and min(author[1], check[1]) >= 3 and author[1] != check[1]:
        return False
    reach = min(author[1], check[1])
    return {i for i in author[3] if i >= -reach} <= set(check[3])


CARRIERS = ("tensor", "function")
"""The forms that make a calling convention: a flag or a number one call passes and another leaves to its default
(``need_weights=False``) is no other convention."""


def pattern_fits(author, check):
    """Whether a check's calling pattern is one of the author's: each tensor or function argument the check passed
    the author passes too, in a form that fits. An argument the author passes and the check leaves to its default
    (annotated-style ``attention(q, k, v, mask, dropout=self.dropout)``) is no other convention."""
    author = {name: form for name, form in author if form[0] in CARRIERS}
    check = {name: form for name, form in check if form[0] in CARRIERS}
    return check.keys() <= author.keys() and all(form_fits(author[name], check[name]) for name in check)


def describe_form(form):
    if form[0] != "tensor":
        return {"function": "a function", "number": "a number", "sequence": "a sequence"}.get(form[0], f"a {form[0]}")
    _, ndim, kind, ones = form
    return f"a {kind} {ndim}-d tensor" + (f" (size 1 on axis {', '.join(str(i + ndim) for i in ones)})" if ones
                                          else "")


def describe_pattern(pattern):
    """``query: a float 3-d tensor, mask: a bool 4-d tensor (size 1 on axis 1, 2)``."""
    pattern = [(name, form) for name, form in pattern if form[0] in CARRIERS]
    return ", ".join(f"{name.lstrip('#') if not name.startswith('#') else 'argument ' + name[1:]}: "
                     f"{describe_form(form)}" for name, form in sorted(pattern)) or "no arguments"


# -- the author's code: what plays a role, and watching its calls ----------------------------------------------------
CHECKER_MODULES = ("adapters", "conformance", "torch", "builtins", "functools", "typing")


def is_checkers(obj):
    return (getattr(obj, "__module__", None) or "").split(".")[0] in CHECKER_MODULES


def author_target(value, depth=0):
    """The author's class or function behind a role's builder or callable (``build.target``, the function a
    function role's adapter closes over, or the value itself where the author named it), or None."""
    if isinstance(value, type):
        return value
    target = getattr(value, "target", None)
    if target is not None:
        return target
    if not callable(value):
        return None
    if not is_checkers(value):
        return value
    if depth > 3:
        return None
    for cell in getattr(value, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if (inspect.isfunction(inner) or isinstance(inner, type)) and not is_checkers(inner):
            return inner
    for cell in getattr(value, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:
            continue
        if inspect.isfunction(inner):
            found = author_target(inner, depth + 1)
            if found is not None:
                return found
    return None


def watched(function, log, method=False):
    """``function`` recording each call's calling pattern in ``log`` (``[pattern, returned]`` items); a ``method``'s
    first argument (``self``) is not part of it."""
    @functools.wraps(function)
    def recording(*args, **kwargs):
        entry = [calling_pattern(function, args[1:] if method else args, kwargs, method), False]
        log.append(entry)
        out = function(*args, **kwargs)
        entry[1] = True
        return out
    return recording


def cells_holding(value, target, depth=0, seen=None):
    """The closure cells of ``value`` and of the functions it closes over that hold ``target``."""
    seen = set() if seen is None else seen
    if id(value) in seen or depth > 4:
        return []
    seen.add(id(value))
    found = []
    for cell in getattr(value, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:
            continue
        if inner is target:
            found.append(cell)
        elif inspect.isfunction(inner):
            found += cells_holding(inner, target, depth + 1, seen)
    return found


@contextlib.contextmanager
def watching(target, log, adapter=None, everywhere=True):
    """While it lasts, every call of ``target`` (a module class: its instances' forward; a function: where the
    author's code looks it up, its module globals (``everywhere``: every module's), a class holding it as a method,
    the closure of ``adapter``) is recorded in ``log``; restored always."""
    restore = []
    try:
        if isinstance(target, type):
            if "forward" in vars(target):
                own = vars(target)["forward"]
                restore.append(functools.partial(setattr, target, "forward", own))
            else:  # inherited: watched on this class only
                own = target.forward
                restore.append(functools.partial(delattr, target, "forward"))
            target.forward = watched(own, log, method=True)
        elif callable(target):
            wrapper = watched(target, log)
            spaces = [getattr(target, "__globals__", {})] + ([vars(m) for m in list(sys.modules.values())
                                                              if getattr(m, "__dict__", None) is not None
                                                              and not is_checkers(m)] if everywhere else [])
            done = set()
            for space in spaces:
                if id(space) in done:
                    continue
                done.add(id(space))
                for name, value in list(space.items()):
                    if value is target:
                        restore.append(functools.partial(space.__setitem__, name, value))
                        space[name] = wrapper
            owner = getattr(target, "__globals__", {}).get(getattr(target, "__qualname__", "").split(".")[0])
            name = target.__name__ if hasattr(target, "__name__") else None
            if isinstance(owner, type) and name and vars(owner).get(name) is target:
                restore.append(functools.partial(setattr, owner, name, target))
                setattr(owner, name, watched(target, log, method=True))
            for cell in cells_holding(adapter, target) if adapter is not None else ():
                restore.append(functools.partial(setattr, cell, "cell_contents", target))
                cell.cell_contents = wrapper
        yield log
    finally:
        for undo in reversed(restore):
            undo()


# -- the check's calls ---------------------------------------------------------------------------------------------
class CheckCalls:
    """The calls one check makes to its component's role: module roles by hooks on the author's module inside what
    :meth:`Case.build` returns (the adapter's call as the author's forward receives it), function roles by watching
    the author's function for the length of each call. ``log``: ``[pattern, returned]`` items; ``replayed``: set
    when the check ran the author's model to read the role in place (``conformance.checks.test_in_place``)."""

    def __init__(self, role):
        self.role, self.log, self.replayed = role, [], False

    def module(self, role, module):
        if role != self.role:
            return
        inner = getattr(module, "inner", module)
        inner = inner if isinstance(inner, nn.Module) else module
        forward = type(inner).forward
        if isinstance(getattr(inner, "method", None), str) and hasattr(inner, "block"):  # a method of a block
            forward = getattr(type(inner.block), inner.method, forward)
        log, open_calls = self.log, []

        def before(_, args, kwargs):
            entry = [calling_pattern(forward, args, kwargs, method=True), False]
            log.append(entry)
            open_calls.append(entry)

        def after(*_):
            if open_calls:
                open_calls.pop()[1] = True

        inner.register_forward_pre_hook(before, with_kwargs=True)
        inner.register_forward_hook(after)

    @contextlib.contextmanager
    def function(self, role, function):
        """Around one call of a function role: yields what to call in ``function``'s place."""
        target = author_target(function) if role == self.role else None
        if target is None:
            yield function
        elif target is function:  # the author's own function, called directly
            yield watched(function, self.log)
        else:
            with watching(target, self.log, adapter=function, everywhere=False):
                yield function

    def patterns(self, crashed):
        """The patterns of the calls made; those of the calls that did not return when ``crashed`` (an error), if
        any did not."""
        broke = {p for p, returned in self.log if not returned}
        return broke if crashed and broke else {p for p, _ in self.log}


# -- the author's calls ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class AuthorsCalls:
    """How the author's own enclosing block ``outer`` calls a role: the calling ``patterns`` of its calls, and
    whether the block ``ran`` (built from the author's own sub-blocks, its canonical call returned, and every call
    of the role in it)."""
    outer: str
    patterns: frozenset
    ran: bool


def authors_calls(impl, role):
    """``[AuthorsCalls]`` for each enclosing role of ``role`` (innermost first) whose block, built from the author's
    own sub-blocks only, calls it; cached per (implementation, role)."""
    return _authors_calls(impl, role)


@functools.lru_cache(maxsize=64)
def _authors_calls(impl, role):
    if role not in FUNCTION_ROLES and role == "model":
        return ()
    target = author_target(impl.roles.get(role))
    if target is None or (role not in FUNCTION_ROLES and not isinstance(target, type)):
        return ()
    found = []
    for outer in (FUNCTION_ENCLOSING if role in FUNCTION_ROLES else ENCLOSING).get(role, ()):
        if not impl.has(outer) or outer in FUNCTION_ROLES:
            continue
        log = []
        try:
            with authors_own_blocks() as grafted, watching(target, log):
                problem = canonical_call_error(impl, outer)
        except Exception:  # noqa: BLE001 (the author's code: it says nothing of how it calls the role)
            continue
        if grafted or not log:  # a reference block inside: not the author's own block
            continue
        found.append(AuthorsCalls(outer, frozenset(p for p, _ in log),
                                  problem is None and all(returned for _, returned in log)))
    return tuple(found)


def observed_patterns(impl, role):
    """The calling patterns of ``role`` seen while the author's own entry points ran (``impl.observed``: a module
    class's first forward call, positional arguments only), as a set."""
    observation = getattr(impl, "observed", None)
    target = author_target(impl.roles.get(role))
    if observation is None or not isinstance(target, type) or target.__name__ not in observation.calls:
        return set()
    call = observation.calls[target.__name__]
    if not isinstance(call.args, tuple):
        return set()
    return {calling_pattern(target.forward, call.args, {}, method=True, form=summary_form)}


def summary_form(summary):
    """:func:`argument_form` of what ``adapters.observe.summary`` kept of an argument."""
    if summary is None:
        return None
    if isinstance(summary, tuple) and len(summary) == 3 and summary[0] == "tensor":
        _, shape, dtype = summary
        return tensor_form(len(shape), getattr(torch, dtype, torch.float32), shape)
    if isinstance(summary, tuple) and summary and summary[0] == "module":
        return ("function",)
    if isinstance(summary, tuple) and len(summary) == 2 and summary[0] == "object":
        return ("function",) if summary[1] in ("function", "method", "builtin_function_or_method", "partial") \
            else (summary[1],)
    return argument_form(summary)


# -- the evidence of a record ----------------------------------------------------------------------------------------
@dataclasses.dataclass
class Evidence:
    """What a fail or error record rests on: its ``kind`` (one of :data:`KINDS`), or, where the author's own block
    calls the role only otherwise, ``not_as_author`` (the words saying both calls): the record is then missing."""
    kind: str
    not_as_author: str = ""


def evidence(impl, role, cause, check_calls, crashed, in_place=None):
    """The :class:`Evidence` of a fail (``crashed`` False) or error record of ``role`` with ``cause``;
    ``check_calls``: the check's :class:`CheckCalls` (None when it made none); ``in_place``: the checks in place,
    ``(impl, role) -> causes`` found on the author's own forward pass (handed down by the plugin, which sits above
    the checks), or None to replay nothing."""
    if ".disagrees_in_" in cause:
        return Evidence(REFERENCE_SUBSTITUTION)
    if cause.endswith(".parameters.count"):  # read from the block as built, whatever calls the check made beside
        return Evidence(WITHOUT_A_CALL)
    if check_calls is not None and check_calls.replayed:
        return Evidence(REPLAYED)
    found = on_the_checkers_call(impl, role, check_calls, crashed)
    if (found.kind == CHECKERS_CALL and not crashed and in_place is not None
            and isinstance(getattr(impl, "roles", None), dict) and cause in in_place(impl, role)):
        return Evidence(REPLAYED)
    return found


def on_the_checkers_call(impl, role, check_calls, crashed):
    """:func:`evidence` from the calls the check made and those the author's code makes."""
    checked = check_calls.patterns(crashed) if check_calls is not None else set()
    if not checked:
        return Evidence(WITHOUT_A_CALL)
    if role == "model":
        return Evidence(AUTHORS_CALL)
    if not isinstance(getattr(impl, "roles", None), dict):  # no implementation, or roles served from apart
        return Evidence(CHECKERS_CALL)                          # (grading's judge): no author's code here to run
    if any(pattern_fits(a, c) for a in observed_patterns(impl, role) for c in checked):
        return Evidence(AUTHORS_CALL)
    calls = authors_calls(impl, role)
    ran = [found for found in calls if found.ran]
    if ran:  # the outermost block that runs: its masks are the author's own, an inner one may pass the checker's on
        outer = ran[-1]
        if any(pattern_fits(a, c) for a in outer.patterns for c in checked):
            return Evidence(AUTHORS_CALL)
        return Evidence(CHECKERS_CALL, f"the author's {outer.outer} calls it as ("
                        + "); (".join(sorted(describe_pattern(p) for p in outer.patterns))
                        + "); the check called it as (" + "); (".join(sorted(describe_pattern(p) for p in checked))
                        + ")")
    if any(pattern_fits(a, c) for found in calls for a in found.patterns for c in checked):
        return Evidence(AUTHORS_CALL)
    return Evidence(CHECKERS_CALL)


@functools.lru_cache(maxsize=64)
def runs_at_the_papers_sizes(impl, role):
    """Whether ``role``'s canonical call crashes at the checker's small sizes and runs when it is built at the
    paper's base sizes (:data:`PAPER_BASE`): code that fixes a size of its own somewhere (a literal 512, a table as
    long as d_model) runs as its author runs it, and its crash at the checker's sizes is no evidence."""
    saved = harness.LATEST_CASE
    try:
        with authors_own_blocks():
            return canonical_call_error(impl, role) is not None and canonical_call_error(impl, role, PAPER_BASE) is None
    finally:
        harness.LATEST_CASE = saved
