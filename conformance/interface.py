"""The implementation interface: every implementation under test is reduced to a set of *roles*.

An implementation is a mapping ``CONFORMANCE_ROLES = {role name: builder}``. A builder is a class or function
called with the keyword arguments its signature names among the canonical hyperparameters of
:class:`Config` (``d_model``, ``h``, ``d_ff``, ``dropout``, ``N``, ``vocab_size``, ``src_vocab``, ``tgt_vocab``,
``max_len``). Function roles (``attention``, ``padding_mask``, ``subsequent_mask``) are the functions themselves.

Canonical calls (batch first; a mask is boolean, broadcastable to ``(batch, query_len, key_len)``,
``True`` = may attend):

==================== ================================================== ===========================================
role                 built from                                         called as
==================== ================================================== ===========================================
embedding            vocab_size, d_model                                ``m(tokens[B, L])`` -> ``[B, L, d_model]``
positional_encoding  d_model, dropout, max_len                          ``m(x[B, L, d_model])`` -> same shape
attention            (function)                                         ``f(q[..., Lq, d_k], k[..., Lk, d_k],
                                                                        v[..., Lk, d_v], mask)`` -> output or
                                                                        (output, weights)
multi_head_attention h, d_model, dropout                                ``m(query, key, value, mask)``
feed_forward         d_model, d_ff, dropout                             ``m(x)``
layer_norm           d_model                                            ``m(x)``
sublayer_connection  d_model, dropout                                   ``m(x, sublayer)`` (sublayer: a callable)
encoder_layer        d_model, h, d_ff, dropout                          ``m(x, src_mask)``
decoder_layer        d_model, h, d_ff, dropout                          ``m(x, memory, src_mask, tgt_mask)``
encoder              N, d_model, h, d_ff, dropout                       ``m(x, src_mask)``
decoder              N, d_model, h, d_ff, dropout                       ``m(x, memory, src_mask, tgt_mask)``
generator            d_model, vocab_size                                ``m(x)`` -> log-probabilities
model                src_vocab, tgt_vocab, N, d_model, d_ff, h,         ``m(src[B, Ls], tgt[B, Lt], src_mask,
                     dropout, max_len                                   tgt_mask)`` -> ``[B, Lt, d_model]``
padding_mask         (function)                                         ``f(tokens[B, L], pad_idx)`` -> ``[B, 1, L]``
subsequent_mask      (function)                                         ``f(size)`` -> ``[1, size, size]``
==================== ================================================== ===========================================

``src_mask`` is a padding mask ``[B, 1, Ls]``; ``tgt_mask`` is ``[B, Lt, Lt]`` (padding and subsequent positions).
"""
import dataclasses
import functools
import importlib
import inspect
import os
from dataclasses import dataclass

from conformance.verdicts import Unusable

ROLES = (
    "embedding", "positional_encoding", "attention", "multi_head_attention", "feed_forward", "layer_norm",
    "sublayer_connection", "encoder_layer", "decoder_layer", "encoder", "decoder", "generator", "model",
    "padding_mask", "subsequent_mask",
)
FUNCTION_ROLES = ("attention", "padding_mask", "subsequent_mask")
IMPL_ENV_VAR = "CONFORMANCE_IMPL"


class MissingRole(LookupError):
    """The implementation has nothing that plays a role a check needs."""


@dataclass(frozen=True)
class Config:
    """Canonical hyperparameters (Table 3 names)."""
    d_model: int = 512
    h: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    N: int = 6
    vocab_size: int = 11
    src_vocab: int = 11
    tgt_vocab: int = 13
    max_len: int = 5000

    @property
    def d_k(self):
        return self.d_model // self.h


def call_with_canonical_arguments(builder, cfg):
    """Call ``builder`` with the canonical hyperparameters its signature names (all of them for ``**kwargs``)."""
    values = dataclasses.asdict(cfg)
    try:
        parameters = inspect.signature(builder).parameters
    except (TypeError, ValueError):
        return builder(**values)
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return builder(**values)
    return builder(**{name: values[name] for name in parameters if name in values})


class Implementation:
    """An implementation under test: a name and its role builders."""

    def __init__(self, spec, roles, origin=None, notes=(), locate=None, read=None, repair=None, grafts=None,
                 unbound=None, broken=None):
        self.spec = spec
        self.broken = broken  # discovered code: the roles failing under the canonical call on its probe configuration
        self.grafts = dict(grafts or {})  # role -> the reference's blocks built into it in place of broken ones
        self.unbound = dict(unbound or {})  # name -> the failed import that was to bind it, while loading
        self.read = dict(read or {})  # role -> {cause: [message, ...]} found by reading the code (``read_code``)
        self.roles = dict(roles)
        self.origin = origin or spec
        self.notes = list(notes)  # how the code was loaded and mapped, for the report
        self.locate = locate  # (filename, line) -> "path:57 (cell 3, line 5)" for code that ran from cells
        self.repair = repair  # () -> the implementation with its crashes repaired (``adapters.repairs``), or None
        unknown = set(self.roles) - set(ROLES)
        if unknown:
            raise ValueError(f"{spec}: unknown roles {sorted(unknown)}; known roles are {list(ROLES)}")

    def __repr__(self):
        return f"Implementation({self.spec!r}, roles={sorted(self.roles)})"

    @functools.cached_property
    def repaired(self):
        """The implementation made again from the submission's code with its crashes repaired, or None (nothing to
        repair, or no code to repair: ``repair`` is None)."""
        return self.repair() if self.repair is not None else None

    def has(self, role):
        return role in self.roles

    def function(self, role):
        """The function playing a function role."""
        if role not in self.roles:
            raise MissingRole(f"{self.spec} has no {role!r}")
        return self.roles[role]

    def build(self, role, cfg):
        """Build the module playing ``role`` from canonical hyperparameters."""
        return call_with_canonical_arguments(self.function(role), cfg)


def roles_of_module(module, spec):
    roles = getattr(module, "CONFORMANCE_ROLES", None)
    if roles is None:
        raise LookupError(f"{spec}: the module defines no CONFORMANCE_ROLES mapping (see conformance.interface)")
    return Implementation(spec, roles, origin=getattr(module, "__file__", spec))


def load_implementation(spec):
    """Resolve an ``--impl`` value: ``reference``, ``torch``, a file or package path, an importable module, or
    ``remote:FD`` (``conformance.remote``)."""
    if spec == "reference":
        from reference import transformer
        return Implementation("reference", transformer.CONFORMANCE_ROLES, origin=transformer.__file__)
    if spec == "torch":
        from adapters import torch_nn
        return Implementation("torch", torch_nn.CONFORMANCE_ROLES, origin="torch.nn")
    if str(spec).startswith("remote:"):  # roles served by the process beside the submission's code (grading)
        from conformance.remote import connect
        return connect(int(str(spec).removeprefix("remote:")))
    if os.path.exists(spec):
        return load_from_path(spec)
    return roles_of_module(importlib.import_module(spec), spec)


CELL_TIMEOUT_ENV_VAR = "CONFORMANCE_CELL_TIMEOUT"
"""Seconds one cell of a notebook or post may run while loading (default 10)."""


def load_from_path(path):
    """Code from a file or a package directory, whatever its form (``adapters.loading``): its own
    ``CONFORMANCE_ROLES`` if it defines them, else the roles that ``adapters.discovery`` finds."""
    from adapters.discovery import candidates, discover, read_overrides, roles_in_uncompiled_cells
    from adapters.lint import parsed
    from adapters.loading import cell_file, load_code
    loaded = load_code(path, cell_timeout=float(os.environ.get(CELL_TIMEOUT_ENV_VAR, 10)))
    notes = [f"loaded as {loaded.kind}: {len(loaded.cells)} code cell(s)"] + [p.message for p in loaded.problems]
    if loaded.fatal or loaded.module is None:
        return Implementation(path, {}, notes=notes + [loaded.fatal or "nothing could be run"])
    trees = list(parsed((cell_file(loaded.path, cell.number), cell.source) for cell in loaded.cells))
    modules = loaded.project_modules()
    namespace = loaded.namespace(modules)
    roles = getattr(loaded.module, "CONFORMANCE_ROLES", None)
    if isinstance(roles, dict):
        names = {getattr(builder, "__name__", None): role for role, builder in roles.items()}
        return Implementation(path, roles, origin=path, notes=notes, locate=loaded.position,
                              read=read_code(loaded, trees, names, namespace),
                              repair=repairer(path, loaded, trees, lambda new: {
                                  role: new.get(getattr(builder, "__name__", None), builder)
                                  for role, builder in roles.items()}))
    directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    overrides = read_overrides(directory)
    found = discover(namespace, loaded.module.__name__, overrides, modules)
    names = {binding.name: role for role, binding in found.bindings.items()}
    roles, uncompiled = dict(found.roles), []
    for role, (name, problem) in roles_in_uncompiled_cells(loaded.problems, vars(loaded.module), roles).items():
        roles[role] = never_defined(name, problem.message)
        uncompiled.append(f"{role}: {name} is defined in a cell that does not compile ({problem.message})")
    if not roles:
        defined = sorted(candidates(namespace, modules))
        notes.append(f"the code defines: {', '.join(defined)}" if defined else
                     "the code defines no torch.nn.Module class and no function")
    return Implementation(path, roles, origin=path, notes=notes + found.describe() + uncompiled,
                          locate=loaded.position, read=read_code(loaded, trees, names, namespace), grafts=found.grafts,
                          unbound=loaded.unbound, broken=found.broken,
                          repair=repairer(path, loaded, trees, lambda new: discover(
                              new, loaded.module.__name__, overrides, modules).roles))


def repairer(path, loaded, trees, roles_in):
    """A function making the implementation again from the submission's code with its crashes repaired
    (``adapters.repairs``; ``roles_in(namespace)`` finds the roles there), or returning None when nothing needs
    repairing; called only once a check ends in an error, so that loading pays nothing for it."""
    def repaired():
        from adapters.repairs import repaired_namespace
        namespace, repairs = repaired_namespace(trees, vars(loaded.module))
        if not repairs:
            return None
        done = [f"{r.what} (at {loaded.position(*r.where) or r.cls})" for r in repairs]
        return Implementation(path, roles_in(namespace), origin=path, notes=done, locate=loaded.position)
    return repaired


def never_defined(name, problem):
    """The stand-in of a role whose code was never defined, its cell rejected by Python: every use of it is an
    error that says so."""
    def undefined(*args, **kwargs):
        raise Unusable("error.cell_does_not_compile", f"{name} defined by code Python accepts",
                       f"{name} is defined in a cell that does not compile, so it does not exist: {problem}")
    undefined.__name__ = name
    return undefined


def read_code(loaded, trees, role_of_name, namespace):
    """What reading the code (its parsed cells, ``trees``; ``namespace``, the names of the submission's modules)
    finds, ``{role: {cause: [message]}}``: calls with arguments in the wrong order (``adapters.calls``; under the
    role of the class making the call, a top-level factory function counting as the model) and the lints of
    ``adapters.lint`` on the classes playing a role and on the functions building them (under the model)."""
    from adapters.calls import read_calls
    from adapters.lint import read_classes, read_factories
    namespace = {**dict.fromkeys(loaded.unbound), **namespace}  # and what its failed imports were to bind
    found = {}
    for m in read_calls(trees, namespace, loaded.module.__name__):
        role = role_of_name.get(m.caller, "model")
        found.setdefault(role, {}).setdefault("arguments_in_wrong_order", []).append(
            f"{m.message} (at {loaded.position(m.filename, m.line)} in {m.caller})")
    classes = {name: namespace[name] for name in role_of_name if name in namespace}
    for f in read_classes(trees, classes, namespace) + read_factories(trees, classes, namespace):
        found.setdefault(role_of_name.get(f.cls, "model"), {}).setdefault(f.cause, []).append(
            f"{f.message} (at {loaded.position(f.filename, f.line)})")
    return found
