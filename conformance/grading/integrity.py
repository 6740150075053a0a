"""Guard rails for grading: a pytest plugin (``-p conformance.grading.integrity``) loaded into the process that runs the
checks on a submission, armed by the grader's worker (``conformance.grading.zygote``) before any student code is loaded.

Student code runs in the same process as the checks that must look inside it (those that only call it are judged
apart, ``conformance.grading.judge``), so this plugin watches for what would let it change their verdicts, and records (in ``integrity.json`` beside the report, read by the grader) what it saw:

- *patched*: a comparison (``torch.allclose``, ``torch.testing.assert_close``, ``numpy.allclose``, ...), a pytest,
  pluggy or hypothesis internal, or a checker function replaced; found by comparing every callable of those modules,
  every attribute of their classes (and ``torch.Tensor``'s, ``nn.Module``'s, ``numpy.ndarray``'s) and their
  ``__code__`` with a snapshot taken before the submission loaded, once it has loaded and at the end (the
  comparisons themselves after every check);
- *canary*: known-answer probes (``torch.allclose(0, 1)`` must be False, ...) that fail, and torch function or
  dispatch modes left active between checks;
- *events* (a ``sys.addaudithook`` hook, which Python code cannot remove): forks, subprocesses, ``os.system``,
  ``exec``, killing other processes and writes/deletes outside the submission's own work folder are refused and
  recorded; attribute assignments on classes of the checker and its libraries, ctypes, ``gc.get_objects`` and reads
  of the checker's files or of other processes' ``/proc`` entries by student code are recorded (and the latter two
  refused);
- *reference*: roles that are (or are built from) ``reference/transformer.py``;
- ``os._exit`` is replaced by a guard while the checks run.

A determined attacker in the same process can still subvert all of this (it could find the plugin's own state);
the grader therefore also validates the report from outside (every collected check present, exit status
consistent with the verdicts) and treats any record here as *tampering detected*.
"""
import json
import math
import os
import sys
import time
import types

import numpy
import pytest
import torch

from conformance.diagnosis.classify import PROJECT_DIR

ARMED = None
"""Set by the worker before the run: ``{"work": dir, "report_dir": dir, "nonce": str, "private": [path prefix]}``
(private: the grader's output folder and the other submissions' scratch folders, neither read nor written)."""

REFERENCE_DIR = os.path.join(PROJECT_DIR, "reference") + os.sep
CHECKER_FILES = tuple(os.path.join(os.path.dirname(REFERENCE_DIR[:-1]), d) + os.sep
                      for d in ("conformance", "adapters", "reference", "tests", "benchmarks"))
LIBRARY_DIRS = tuple({os.path.dirname(os.path.dirname(m.__file__)) for m in (pytest, os, torch, numpy)}) + (
    os.path.join(PROJECT_DIR, "conformance") + os.sep, os.path.join(PROJECT_DIR, "adapters"))
PROTECTED_PREFIXES = ("torch.testing", "numpy.testing", "numpy.core.numeric", "numpy._core.numeric", "_pytest",
                      "pytest", "pluggy", "hypothesis", "conformance", "adapters", "reference")
PROTECTED_EXACT = ("torch", "torch.functional", "torch.nn.functional", "numpy", "math", "builtins", "sys", "os",
                   "json", "operator")
PROTECTED_TYPES_MODULES = ("torch", "numpy", "_pytest", "pytest", "pluggy", "hypothesis", "conformance", "adapters",
                           "builtins")
EXPECTED_CHANGES = {"sys.unraisablehook", "sys.excepthook", "sys.displayhook", "os._exit", "sys.breakpointhook",
                    "torch.manual_seed"}
"""Replaced by pytest's own plugins, hypothesis (which wraps torch.manual_seed) or this plugin while the checks
run. (The canaries still test what the checks use.)"""
FILE_HELPERS = ("pathlib.py", "shutil.py", "codecs.py", "_pyio.py", "os.py", "glob.py", "subprocess.py",
                "genericpath.py", "io.py")
LIBRARY_PROGRAMS = {"fc-list", "fc-match", "ldconfig", "file", "git", "hg", "uname", "lscpu", "nvidia-smi", "gcc", "cc", "g++", "c++"}
"""Programs that libraries run to find things out (refused all the same when the submission's code runs them)."""
CLASS_DUNDERS = {"__eq__", "__ne__", "__bool__", "__call__", "__getattr__", "__getattribute__", "__init__",
                 "__torch_function__", "__torch_dispatch__", "__lt__", "__le__", "__gt__", "__ge__"}
CRITICAL = ("torch.allclose", "torch.isclose", "torch.equal", "torch.testing.assert_close", "numpy.allclose",
            "numpy.isclose", "numpy.array_equal", "math.isclose", "conformance.contract.harness.difference",
            "conformance.contract.harness.assert_close", "conformance.diagnosis.classify.classify", "conformance.reporting.findings")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

PROCESS_EVENTS = ("os.fork", "os.forkpty", "subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", "os.exec",
                  "pty.spawn", "os.startfile")
"""Refused, and reported, but not counted as tampering: a notebook may well try to run pip or nvidia-smi."""
STATE = {"patched": [], "canary": [], "events": [], "processes": [], "reference": [], "checks": 0, "started": None}
_snapshot = {}
_in_hook = False
_real_exit = os._exit
_impl = None


def record(kind, text):
    entries = STATE[kind]
    if text not in entries and len(entries) < 50:
        entries.append(text)


# -- snapshot of the callables a verdict depends on ---------------------------------------------------------
def protected_modules():
    for name, module in list(sys.modules.items()):
        if module is None or not isinstance(name, str):
            continue
        if name in PROTECTED_EXACT or name.startswith(PROTECTED_PREFIXES) and name != "conformance.grading.integrity":
            yield name, module


def entries():
    """``(key, value)`` for every callable of the protected modules and every attribute of their classes."""
    for name, module in protected_modules():
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in items:
            if attr.startswith("__") or not callable(value):
                continue
            yield f"{name}.{attr}", value
            if isinstance(value, type) and value.__module__ == name and not name.startswith("torch"):
                for member, content in list(vars(value).items()):
                    if (not member.startswith("__") or member in CLASS_DUNDERS) and is_behaviour(content):
                        yield f"{name}.{attr}.{member}", content
    for cls in (torch.Tensor, torch.nn.Module, numpy.ndarray):
        for member, content in list(vars(cls).items()):
            if not member.startswith("__") or member in CLASS_DUNDERS:
                yield f"{cls.__module__}.{cls.__name__}.{member}", content


def is_behaviour(content):
    """Methods, properties and other descriptors (not the state a class keeps in its attributes)."""
    return callable(content) or isinstance(content, (property, classmethod, staticmethod)) or \
        hasattr(type(content), "__get__")


def snapshot():
    return {key: (value, getattr(value, "__code__", None)) for key, value in entries()}


def compare_snapshot():
    """Record every entry of the snapshot that was replaced (or whose code was) since it was taken."""
    now = dict(entries())
    for key, (original, code) in _snapshot.items():
        if key in now and key not in EXPECTED_CHANGES:
            value = now[key]
            if value is not original or getattr(value, "__code__", None) is not code:
                record("patched", key)


def critical_unchanged():
    """The cheap check run after every test: the comparisons the checks use are the originals."""
    for key in CRITICAL:
        module, _, attr = key.rpartition(".")
        value = getattr(sys.modules.get(module), attr, None)
        if key in _snapshot and value is not _snapshot[key][0]:
            record("patched", key)


# -- known answers ------------------------------------------------------------------------------------------
def canaries():
    zero, one = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    probes = {
        "torch.allclose": lambda: torch.allclose(zero, one) is False and torch.allclose(one, one) is True,
        "torch.equal": lambda: torch.equal(zero, one) is False,
        "torch.isclose": lambda: not bool(torch.isclose(zero, one).any()),
        "Tensor.__eq__": lambda: not bool((zero == one).any()),
        "torch.testing.assert_close": lambda: raises(lambda: torch.testing.assert_close(zero, one)),
        "numpy.allclose": lambda: numpy.allclose([0.0], [1.0]) is False or numpy.allclose([0.0], [1.0]) == False,  # noqa: E712
        "numpy.isclose": lambda: not bool(numpy.isclose([0.0], [1.0]).any()),
        "numpy.array_equal": lambda: not numpy.array_equal([0.0], [1.0]),
        "numpy.testing.assert_allclose": lambda: raises(lambda: numpy.testing.assert_allclose([0.0], [1.0])),
        "math.isclose": lambda: math.isclose(0.0, 1.0) is False,
        "torch function mode stack empty": lambda: torch._C._len_torch_function_stack() == 0,
        "torch dispatch mode stack empty": lambda: torch._C._len_torch_dispatch_stack() == 0,
        "no trace function": lambda: sys.gettrace() is None and sys.getprofile() is None,
    }
    for name, probe in probes.items():
        try:
            ok = probe()
        except Exception as exc:  # a probe that raises is as suspicious as one that answers wrongly
            ok, name = False, f"{name} ({type(exc).__name__})"
        if not ok:
            record("canary", name)


def raises(function):
    try:
        function()
    except AssertionError:
        return True
    return False


# -- the audit hook ----------------------------------------------------------------------------------------
def student_frame():
    """The file of the nearest frame of the submission's code (compiled from a file in its work folder), or None.
    (Code that a submission compiles under a made-up file name escapes this attribution; refusals do not depend on
    it.)"""
    frame, work = sys._getframe(2), ARMED["work"]
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(work):
            return filename
        frame = frame.f_back
    return None


def caller():
    """The file of the code that asked for the operation (through pathlib, shutil, io or os: their caller)."""
    frame = sys._getframe(3)
    while frame is not None and frame.f_code.co_filename.endswith(FILE_HELPERS):
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else ""


def inside(path, directory):
    path = os.path.realpath(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else ""
    return path == directory or path.startswith(directory + os.sep)


def audit(event, args):
    global _in_hook
    if ARMED is None or _in_hook:
        return
    _in_hook = True
    try:
        refusal = refusal_of(event, args)
    finally:
        _in_hook = False
    if refusal:
        record("processes" if event.startswith(PROCESS_EVENTS) else "events", refusal)
        raise PermissionError(f"refused while grading: {refusal}")


def refusal_of(event, args):
    """The reason to refuse ``event``, or None (recording what is only suspicious)."""
    work = ARMED["work"]
    if event == "subprocess.Popen" and not caller().startswith(ARMED["work"]) and \
            os.path.basename(os.fsdecode(args[0] or args[1][0])) in LIBRARY_PROGRAMS:
        return None  # ctypes.util.find_library, platform, version probes of libraries
    if event in ("os.fork", "os.forkpty", "subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", "os.exec",
                 "pty.spawn", "os.startfile"):
        return f"{event} {str(args[:2])[:120]}"
    if event in ("os.kill", "os.killpg", "signal.pthread_kill") and args and args[0] not in (os.getpid(), 0):
        return f"{event} {args[:2]}"
    if event == "open":
        path, mode, flags = args
        if not isinstance(path, (str, bytes)):
            return None
        path = os.path.abspath(os.fsdecode(path))
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags or 0) & WRITE_FLAGS
        if writing and not inside(path, work) and not allowed_write(path):
            return f"writing {path}"
        if any(inside(path, d) or path.startswith(d) for d in ARMED.get("private", ())) \
                and not inside(path, work) and not inside(path, ARMED["report_dir"]):
            return f"reading {path}"
        if path.startswith("/proc/") and path.split("/")[2].isdigit() and int(path.split("/")[2]) != os.getpid():
            return f"reading {path}"
        if path.startswith(CHECKER_FILES) and caller().startswith(ARMED["work"]):
            return f"reading the checker's file {path}"
        return None
    if event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                 "os.symlink", "os.link", "shutil.rmtree", "shutil.move", "os.utime"):
        paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
        outside = [p for p in paths if not inside(os.path.abspath(os.fsdecode(p)), work) and not allowed_write(p)]
        return f"{event} {os.fsdecode(outside[0])}" if outside else None
    if event == "object.__setattr__" and args:
        target = args[0]
        module = getattr(target, "__module__", "") if isinstance(target, type) else ""
        if isinstance(module, str) and module.split(".")[0] in PROTECTED_TYPES_MODULES:
            where = caller()  # the code that assigns (not what it was called from)
            if where.startswith(ARMED["work"]):
                record("patched", f"{module}.{target.__name__}.{args[1]} (set from {os.path.basename(where)})")
        return None
    if event in ("ctypes.dlopen", "ctypes.dlsym", "ctypes.addressof", "gc.get_objects", "gc.get_referrers",
                 "gc.get_referents"):
        where = student_frame()
        if where:
            record("events", f"{event} from {os.path.basename(where)}")
    return None


def allowed_write(path):
    path = os.path.realpath(os.fsdecode(path))
    if path in ("/dev/null",) or path.startswith("/dev/shm/"):
        return True
    return STATE.get("finishing") and inside(path, ARMED["report_dir"])


def guarded_exit(code=0):
    record("events", f"os._exit({code!r}) refused")
    raise SystemExit(code)


def at_fork_child():
    _real_exit(70)  # a fork of the grading process does nothing: it ends at once


# -- the reference handed in -------------------------------------------------------------------------------
def reference_origin(obj):
    """'reference.transformer.X' when ``obj`` is, or is an instance of, something defined by the reference."""
    for candidate in [obj] + (list(type(obj).__mro__) if not isinstance(obj, type) else list(obj.__mro__)):
        module = getattr(candidate, "__module__", None)
        module = module if isinstance(module, str) else ""
        code = candidate.__code__ if isinstance(candidate, types.FunctionType) else None
        if module.startswith("reference") or (code and code.co_filename.startswith(REFERENCE_DIR)):
            return f"{module}.{getattr(candidate, '__qualname__', type(candidate).__name__)}"
    return None


def inspect_roles(impl):
    for role, builder in impl.roles.items():
        origin = reference_origin(builder)
        if origin:
            record("reference", f"{role}: {origin}")
    build = impl.build

    def watched_build(role, cfg):
        module = build(role, cfg)
        try:  # the module itself only: the checker may graft the reference's sub-blocks in place of broken ones
            origin = reference_origin(module)
            if origin:
                record("reference", f"{role}: builds {origin}")
        except Exception:  # the watch never changes a verdict
            pass
        return module
    impl.build = watched_build


# -- pytest hooks -----------------------------------------------------------------------------------------
def pytest_configure(config):
    if ARMED is None:
        return
    STATE["started"] = time.perf_counter()
    os._exit = guarded_exit
    os.register_at_fork(after_in_child=at_fork_child)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    global _snapshot
    if ARMED is not None:
        STATE["collected"] = time.perf_counter()
        _snapshot = snapshot()  # every plugin configured, the checks collected, the submission not yet loaded


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    global _impl
    yield
    impl = getattr(item, "funcargs", {}).get("impl")
    if ARMED is not None and impl is not None and impl is not _impl:
        _impl = impl
        inspect_roles(impl)
        compare_snapshot()  # what loading the submission changed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield
    if ARMED is not None:
        STATE["checks"] += 1
        critical_unchanged()
        canaries()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    if ARMED is None:
        return
    compare_snapshot()
    canaries()
    STATE["finishing"] = True  # the report may now be written (by the conformance plugin, then below)
    STATE["exitstatus"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if ARMED is None or not STATE.get("finishing"):
        return
    directory = ARMED["report_dir"]
    pe = positional_encoding_table()
    if pe is not None:
        with open(os.path.join(directory, "pe.json"), "w") as f:
            json.dump(pe, f)
    data = {k: STATE[k] for k in ("patched", "canary", "events", "processes", "reference", "checks")}
    data.update(nonce=ARMED["nonce"], exitstatus=STATE["exitstatus"], checks_s=time.perf_counter() - STATE["started"],
                collect_s=STATE.get("collected", STATE["started"]) - STATE["started"])
    with open(os.path.join(directory, "integrity.json"), "w") as f:
        json.dump(data, f)


def positional_encoding_table(d_model=64, length=48):
    """The submission's positional encoding added to zeros (its table), for the feedback picture; None if none."""
    if _impl is None or not _impl.has("positional_encoding"):
        return None
    try:
        from conformance.contract.interface import Config
        torch.manual_seed(0)
        module = _impl.build("positional_encoding", Config(d_model=d_model, dropout=0.0, max_len=max(length, 5000)))
        module.eval()
        with torch.no_grad():
            out = module(torch.zeros(1, length, d_model))
        if type(out) is not torch.Tensor or tuple(out.shape) != (1, length, d_model):
            return None
        return [[float(v) for v in row] for row in out[0].double().tolist()]
    except Exception:
        return None


sys.addaudithook(audit)
