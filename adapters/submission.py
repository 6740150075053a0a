"""A submission turned into an :class:`~conformance.contract.interface.Implementation`, the one downward pipeline the checks
consume: load the code as its author runs it (``adapters.cells``, ``adapters.loading``), observe its author's own
runs (``adapters.observe``), discover its roles by name and behaviour (``adapters.binding`` and the stages below
it), read it for mistakes no call shows (``adapters.calls``, ``adapters.lint``), and keep a way to repair what
crashes (``adapters.repairs``)."""
import contextlib
import dataclasses
import importlib.util
import io
import os

from adapters import torch_nn
from adapters.calls import read_calls
from adapters.binding import discover, read_overrides
from adapters.building import PROBE
from adapters.call_plans import padding_by_lengths
from adapters.masks import LENGTHS
from adapters.candidates import candidates, roles_in_uncompiled_cells
from adapters.cells import code_of
from adapters.in_place import reading_note
from adapters.lint import parsed, read_classes, read_factories
from adapters.loading import cell_file, load_code
from adapters.observe import (derived_globals, describe_knobs, observe, pad_globals_read, size_knobs,
                              with_pad_index)
from adapters.repairs import repaired_namespace
from conformance.contract.interface import Implementation, set_size_globals
from conformance.contract.verdicts import Unusable
from reference import transformer


def load_implementation(spec):
    """Resolve an ``--impl`` value: ``reference``, ``torch``, a file or package path, or an importable module or
    package (its own ``CONFORMANCE_ROLES`` if it defines them, else discovered like its file or folder)."""
    if spec == "reference":
        return Implementation("reference", transformer.CONFORMANCE_ROLES, origin=transformer.__file__)
    if spec == "torch":
        return Implementation("torch", torch_nn.CONFORMANCE_ROLES, origin="torch.nn")
    if os.path.exists(spec):
        return load_from_path(spec)
    return load_from_path(module_path(spec))


class ImplementationNotFound(LookupError):
    """``--impl`` names no file, folder or importable module."""


def module_path(name):
    """The file of an importable module, or the folder of a package, found without running it."""
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise ImplementationNotFound(f"{name}: not a file, a folder or an importable module ({exc})") from None
    if found is None or found.origin is None:
        raise ImplementationNotFound(f"{name}: not a file, a folder or an importable module")
    if found.submodule_search_locations:
        return os.path.dirname(found.origin)
    return found.origin


CELL_TIMEOUT_ENV_VAR = "CONFORMANCE_CELL_TIMEOUT"
"""Seconds one cell of a notebook or post may run while loading (default 10)."""


def makes_masks_from_tokens(build):
    """Whether the model ``build`` makes (built on the probe configuration) takes no mask and makes its own from the
    pad tokens (:attr:`adapters.wrapping.AdaptedModel.masks_from_tokens`)."""
    if build is None:
        return False
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return bool(getattr(build(**dataclasses.asdict(PROBE)), "masks_from_tokens", False))
    except Exception:  # noqa: BLE001 - the author's code: its checks say why it does not build
        return False


def load_from_path(path):
    """Code from a file or a package directory, whatever its form (``adapters.loading``): its own
    ``CONFORMANCE_ROLES`` if it defines them, else the roles that ``adapters.binding`` finds. A folder that keeps
    its code in a notebook is that notebook (``adapters.cells.code_of``)."""
    given, path = path, code_of(path)
    loaded = load_code(path, cell_timeout=float(os.environ.get(CELL_TIMEOUT_ENV_VAR, 10)))
    notes = [f"loaded as {loaded.kind}: {len(loaded.cells)} code cell(s)"] + [p.message for p in loaded.problems]
    if path != given:
        notes.insert(0, f"{given} holds no module that only defines code: its notebook {path} is what is checked")
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
    classes = [c for c in candidates(namespace, modules).values() if isinstance(c, type)]
    observation = observe(loaded, modules, classes)
    notes += observation.describe()
    modules = loaded.project_modules()  # (what the author's scripts imported, and the globals they set)
    namespace = loaded.namespace(modules)
    knobs = size_knobs(namespace, modules, classes)
    if knobs:
        notes.append(describe_knobs(knobs))
        derived_globals(knobs, modules)
        set_size_globals(knobs, PROBE)
    found = discover(namespace, loaded.module.__name__, overrides, modules, observation)
    for builder in found.roles.values() if knobs else ():  # the sizes reach the code through its globals
        if isinstance(getattr(builder, "hyperparameters", None), set):
            builder.hyperparameters |= {"src_vocab" if f == "vocab_size" else f for _, _, f in knobs} - {
                "max_len", "pad_idx"}
    names = {binding.name: role for role, binding in found.bindings.items()}
    roles, uncompiled = dict(found.roles), []
    if "padding_mask" in roles:  # (a pad index of its own the helper reads, whoever else reads it)
        roles["padding_mask"] = with_pad_index(roles["padding_mask"], knobs + pad_globals_read(roles["padding_mask"]))
    for role, (name, problem) in roles_in_uncompiled_cells(loaded.problems, vars(loaded.module), roles).items():
        roles[role] = never_defined(name, problem.message)
        uncompiled.append(f"{role}: {name} is defined in a cell that does not compile ({problem.message})")
    if not roles:
        defined = sorted(candidates(namespace, modules))
        notes.append(f"the code defines: {', '.join(defined)}" if defined else
                     "the code defines no torch.nn.Module class and no function")
    padding = padding_by_lengths(found.bindings)
    if padding:
        notes.append("the model takes its padding as sequence lengths: the checks pad at the end of each sequence")
    elif makes_masks_from_tokens(roles.get("model")):
        padding = LENGTHS
        notes.append("the model makes its masks from the pad tokens: the checks pad at the end of each sequence, as "
                     "its data is padded")
    notes += found.describe() + uncompiled
    reading = reading_note(found.bindings, observation, roles.get("model"))
    if reading:
        notes.append(reading)
    return Implementation(path, roles, origin=path, notes=notes, padding=padding,
                          locate=loaded.position, read=read_code(loaded, trees, names, namespace), grafts=found.grafts,
                          unbound=loaded.unbound, broken=found.broken, size_knobs=knobs, observed=observation,
                          unbuilt=found.unbuilt,
                          repair=repairer(path, loaded, trees, lambda new: discover(
                              new, loaded.module.__name__, overrides, modules, observation).roles))


def repairer(path, loaded, trees, roles_in):
    """A function making the implementation again from the submission's code with its crashes repaired
    (``adapters.repairs``; ``roles_in(namespace)`` finds the roles there), or returning None when nothing needs
    repairing; called only once a check ends in an error, so that loading pays nothing for it."""
    def repaired():
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
    undefined.never_compiled = True  # no code to read either: the checks that read code say the same error
    return undefined


def read_code(loaded, trees, role_of_name, namespace):
    """What reading the code (its parsed cells, ``trees``; ``namespace``, the names of the submission's modules)
    finds, ``{role: {cause: [message]}}``: calls with arguments in the wrong order (``adapters.calls``; under the
    role of the class making the call, a top-level factory function counting as the model) and the lints of
    ``adapters.lint`` on the classes playing a role and on the functions building them (under the model)."""
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
