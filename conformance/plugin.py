"""The pytest plugin: ``--impl``, ``--device``, ``--contract``, ``--expected``, ``--report-json``, verdicts per
check, and the component-by-property table at the end of the run. pytest's own ``--strict`` (which also makes
markers strict) makes deviations fail the run.

Registered through the ``pytest11`` entry point ``conformance`` (see pyproject.toml).
"""
import ast
import builtins
import json
import linecache
import os
import textwrap
import tomllib
import traceback
import warnings

import conformance.startup  # noqa: F401  (first: before hypothesis is imported)
import hypothesis.core
import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

from adapters.behaviour import TAKES_TOKEN_IDS
from adapters.building import is_graft
from adapters.lint import self_attributes
from adapters.loading import MissingPackage
from adapters.submission import ImplementationNotFound, load_implementation
from conformance.diagnosis import causes, crashes
from conformance.contract import harness, verdicts
from conformance.diagnosis.evidence import CheckCalls, author_runs_it, evidence, runs_at_the_papers_sizes
from conformance.contract.interface import FUNCTION_ROLES, IMPL_ENV_VAR, ROLES, MissingRole
from conformance.contract.verdicts import DEVIATION, ERROR, FAIL, MISSING, PASS, PASS_NOTES, Finding, summary_table

FAMILIES = ("shapes", "masks", "embeddings", "positional_encoding", "softmax", "norm_order", "parameters",
            "layer_norm", "behaviour", "construction", "information_flow", "in_place")
CONTRACTS = ("paper", "practice")
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
CHECKER_DIRS = tuple(os.path.join(os.path.dirname(PACKAGE_DIR), d) + os.sep for d in ("conformance", "adapters"))
LIBRARY_DIRS = tuple(os.path.dirname(os.path.dirname(m.__file__)) for m in (pytest, os))

settings.register_profile("ci", max_examples=6, deadline=None, derandomize=True, database=None,
                          report_multiple_bugs=False, phases=(Phase.explicit, Phase.generate),
                          suppress_health_check=list(HealthCheck))
settings.register_profile("grade", parent=settings.get_profile("ci"), max_examples=2)
settings.register_profile("thorough", max_examples=200, deadline=None, report_multiple_bugs=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])


DIGESTS = {}


def function_digest(function, compute=hypothesis.core.function_digest):
    """hypothesis's digest of a check (the seed of its derandomized examples), remembered: hypothesis reads the
    function's source again for it, twice a check, ~4 ms each, a second or more of every run; grading's worker
    computes them once for all its forks (``conformance.grading.zygote``). The digest also covers the key hypothesis's
    pytest plugin sets on the function for each parametrized item (its node id), so the key is part of ours."""
    key = (id(function), getattr(function, "_hypothesis_internal_add_digest", None))
    if key not in DIGESTS:
        DIGESTS[key] = (function, compute(function))  # (the function is kept: its id stays its own)
    return DIGESTS[key][1]


hypothesis.core.function_digest = function_digest


def pytest_addoption(parser):
    group = parser.getgroup("conformance", "Transformer conformance checks")
    group.addoption("--impl", default=os.environ.get(IMPL_ENV_VAR, "reference"),
                    help="implementation under test: 'reference', 'torch', a module name, a .py file, a project "
                         "folder or package, a Jupyter notebook (.ipynb) or its text export, a markdown post "
                         f"(default: ${IMPL_ENV_VAR} or 'reference')")
    group.addoption("--device", default="cpu", help="device every check runs on (cpu, cuda, cuda:1, ...)")
    group.addoption("--contract", default="paper", choices=CONTRACTS,
                    help="the contract claimed: 'paper' (post-norm) or 'practice' (pre-norm with final LayerNorm)")
    group.addoption("--expected", metavar="TOML", help="expected-results file: accepted failures and deviations")
    group.addoption("--report-json", metavar="PATH", help="write the verdict of every check as JSON")


def pytest_configure(config):
    for family in FAMILIES:
        config.addinivalue_line("markers", f"{family}: checks of the {family.replace('_', ' ')} property family")
    for role in ROLES:
        config.addinivalue_line("markers", f"{role}: checks of the {role.replace('_', ' ')} component")
    torch.set_num_threads(1)  # the checks use small tensors: threads cost more than they give, and xdist forks
    if not config.getoption("hypothesis_profile", None):
        settings.load_profile("ci")
    config.stash[RESULTS] = []
    config.stash[EXPECTED] = read_expected(config.getoption("expected"))


RESULTS = pytest.StashKey[list]()
EXPECTED = pytest.StashKey[dict]()
NOTES = pytest.StashKey[list]()
"""How the implementation was loaded and mapped onto the roles (the discovery's notes)."""


def read_expected(path):
    """``{"component/check": {"verdict": ..., "reason": ...}}`` from a TOML file with ``[[expected]]`` tables."""
    if not path:
        return {}
    with open(path, "rb") as f:
        entries = tomllib.load(f).get("expected", [])
    return {f"{e['component']}/{e['check']}": e for e in entries}


def brief_failure(excinfo, style=None):
    """A check's failure in one line. pytest's own formatting (which hypothesis also asks for each failing example)
    parses the source file of every frame of the traceback, torch's included, again for each frame: most of the
    time of a run on a buggy implementation. The report gives the verdict's message in its place anyway."""
    return "".join(traceback.format_exception_only(excinfo.type, excinfo.value)).strip()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if getattr(item, "module", None) is not None and item.module.__name__.startswith("conformance."):
            item.repr_failure = brief_failure
        component, family = component_of(item), family_of(item)
        if component in ROLES:
            item.add_marker(getattr(pytest.mark, component))
        if family in FAMILIES:
            item.add_marker(getattr(pytest.mark, family))


IMPL = pytest.StashKey[object]()
"""The implementation under test; a plugin may put one here before the first check (grading's judge does)."""
PART_OF_A_RUN = pytest.StashKey[bool]()
"""Set by a plugin that runs only part of the checks in this process (grading's two processes): whether anything
was checked is then judged from the merged records of both."""


BUG_REPORT = ("This is a bug in the checker, not in the code under test: please report it with the traceback above "
              "and the code it was run on.")


def implementation(config):
    """The implementation under test (``--impl``), loaded once. Loading records every failure of the author's code
    as a note, so an exception escaping it is the checker's own: the run stops once, with the checker's traceback,
    as pytest's internal error (exit status 3), never as hundreds of errors blamed on the author."""
    if IMPL not in config.stash:
        try:
            config.stash[IMPL] = load_implementation(config.getoption("impl"))
        except ImplementationNotFound as exc:  # nothing at that path or name: the command line's mistake
            pytest.exit(f"--impl: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
        except Exception:  # noqa: BLE001 (the checker's own crash: stop the run and say so)
            pytest.exit(f"INTERNAL ERROR of the checker while reading --impl={config.getoption('impl')}:\n"
                        f"{traceback.format_exc()}{BUG_REPORT}", returncode=pytest.ExitCode.INTERNAL_ERROR)
    return config.stash[IMPL]


@pytest.fixture(scope="session")
def impl(request):
    """The implementation under test (``--impl``)."""
    return implementation(request.config)


@pytest.fixture(scope="session")
def device(request):
    return request.config.getoption("device")


@pytest.fixture(scope="session")
def contract(request):
    return request.config.getoption("contract")


def component_of(item):
    callspec = getattr(item, "callspec", None)
    if callspec and "component" in callspec.params:
        return callspec.params["component"]
    marker = item.get_closest_marker("component")
    return marker.args[0] if marker else "model"


def family_of(item):
    return item.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")


def check_of(item):
    return item.originalname.removeprefix("test_")


def is_checker_code(filename):
    return filename.startswith(CHECKER_DIRS + LIBRARY_DIRS)


def classify(excinfo, component, locate=None, impl=None):
    """(verdict, cause, message) for an exception raised by a check; ``impl`` (the implementation) tells the
    crashes that are the checker's own doing (:func:`checker_fault`). Every verdict record's cause comes from here:
    a cause ``conformance.diagnosis.causes`` does not list raises :class:`conformance.diagnosis.causes.UnlistedCause`, naming it (an
    internal error of the checker, not a verdict on the code)."""
    verdict, cause, message = diagnosis(excinfo, component, locate, impl)
    causes.require(cause)
    return verdict, cause, message


def diagnosis(excinfo, component, locate, impl):
    """:func:`classify`'s (verdict, cause, message), the cause not yet checked against the catalogue."""
    exc = excinfo.value
    if isinstance(exc, Finding) and exc.verdict == FAIL and exc.cause.endswith((".dropout_missing",
                                                                                ".dropout_rate_ignored")) \
            and not takes(impl, component, "dropout"):
        return (MISSING, "adapter.dropout_rate_not_taken", f"{component}'s constructor takes no dropout rate, so the "
                "checker cannot set one: where the code applies dropout, if anywhere, is judged with the block that "
                f"does ({exc.cause}: {exc.observed})")
    if isinstance(exc, Finding) and exc.verdict == FAIL and exc.cause.endswith(".parameters.count") \
            and component in ATTENTION_BLOCKS and not takes(impl, component, "h"):
        return (MISSING, "adapter.head_count_not_taken", f"{component}'s constructor takes no head count, so the "
                "checker cannot set the one the count was drawn for: a width its code splits into a head count of "
                f"its own may not divide ({exc.cause}: {exc.observed})")
    if isinstance(exc, Finding) and exc.verdict == FAIL and exc.cause == "padding_mask.pad_idx_ignored" \
            and not takes(impl, component, "pad_idx"):
        return (MISSING, "adapter.pad_idx_not_taken", "the padding-mask helper takes no pad index, so the checker "
                "cannot set one: its code fixes its own (a global or a constant), which a mask equal to "
                f"(tokens != 0) may well be ({exc.cause}: {exc.observed})")
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


def takes(impl, role, hyperparameter):
    """Whether the builder of ``role`` feeds ``hyperparameter`` to the code (unknown counts as yes)."""
    fed = impl.hyperparameters(role) if impl is not None and hasattr(impl, "hyperparameters") else None
    return fed is None or hyperparameter in fed


REFERENCE_FILE = os.path.join(os.path.dirname(PACKAGE_DIR), "reference", "transformer.py")
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
            and component in ATTENTION_BLOCKS and not takes(impl, component, "h"):
        return "adapter.head_count_not_taken", (f"{component}'s constructor takes no head count: its code splits the "
                                                "drawn width by a head count of its own, which leaves a head width of 0")
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
    an ``assert`` testing only them (``assert token_ids.ndim == 2``, ``assert d_model == d_word_vec``), or the
    unpacking of an argument's shape (``batch_size, seq_len = x.size()``: an input of another rank was expected).
    A precondition written for callers, so a call not meeting it was the checker's; None for any other crash."""
    if not isinstance(exc, (AssertionError, ValueError)):
        return None
    frame, line = next(((f, n) for f, n in reversed(list(traceback.walk_tb(tb)))), (None, None))
    if frame is None or is_checker_code(frame.f_code.co_filename):
        return None
    node = statement_at(frame.f_code.co_filename, line)
    if isinstance(exc, AssertionError) and isinstance(node, ast.Assert):
        tested = node.test
    elif "values to unpack" in str(exc) and isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
        tested = node.value if is_shape(node.value) else None
    else:
        tested = None
    code = frame.f_code
    arguments = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]) - {"self"}
    names = {n.id for n in ast.walk(tested) if isinstance(n, ast.Name)} if tested is not None else set()
    if not names or not names <= arguments | set(dir(builtins)):
        return None
    return f"{ast.unparse(node).splitlines()[0][:120]}, at {code.co_name}"


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


BEHIND = pytest.StashKey[tuple]()
CALLS = pytest.StashKey[CheckCalls]()
"""The calls the check made to its component's role (``conformance.diagnosis.evidence.CheckCalls``)."""


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    ours = getattr(pyfuncitem, "module", None) is not None and pyfuncitem.module.__name__.startswith("conformance.")
    if ours:
        harness.WATCH = pyfuncitem.stash[CALLS] = CheckCalls(component_of(pyfuncitem))
    try:
        return (yield)
    except Exception as exc:
        harness.WATCH = None
        look_behind(pyfuncitem, exc)
        raise
    finally:
        harness.WATCH = None


def with_evidence(item, impl, verdict, cause, message):
    """``(verdict, cause, message, evidence kind)`` of a record: a fail or error gets its evidence
    (``conformance.diagnosis.evidence``), or, made on a call the author's own enclosing block never makes while that block
    runs and calls the role otherwise, becomes missing (``adapter.call_not_as_author``); other verdicts get None."""
    if verdict not in (FAIL, ERROR):
        return verdict, cause, message, None
    from conformance.checks.test_in_place import findings as in_place  # (a module of checks: loaded as they run)
    component = component_of(item)
    found = evidence(impl, component, cause, item.stash.get(CALLS, None), verdict == ERROR, in_place)
    if found.not_as_author:
        return (MISSING, "adapter.call_not_as_author", f"{component} {'crashed' if verdict == ERROR else 'failed'} "
                f"under a call its author never makes: {found.not_as_author} "
                f"({first_line(message) if message.startswith(cause) else f'{cause}: {first_line(message)}'}). "
                f"{MAP_IT}", None)
    return verdict, cause, message, found.kind


def look_behind(item, exc):
    """A check that ended in an error is run again on the implementation with its crashes repaired
    (``Implementation.repaired``); what it finds there is stashed, to be reported behind the error."""
    impl = item.funcargs.get("impl")
    if impl is None or impl.repair is None or isinstance(exc, (MissingRole, pytest.skip.Exception)) or (
            isinstance(exc, Finding) and exc.verdict != ERROR):
        return
    try:
        repaired = impl.repaired
    except Exception:  # the repaired code fails where discovery runs it: nothing to say behind the error
        impl.repair = None
        return
    if repaired is None:
        return
    try:
        item.obj(**{**{name: item.funcargs[name] for name in item._fixtureinfo.argnames}, "impl": repaired})
        item.stash[BEHIND] = (PASS, "", "", repaired.notes)
    except Exception as again:  # the check's own verdict, or a crash of the repaired code
        verdict, cause, message = classify(pytest.ExceptionInfo.from_exception(again), component_of(item),
                                           repaired.locate, repaired)
        item.stash[BEHIND] = (verdict, cause, message + read_beside(impl, component_of(item), cause), repaired.notes)


def read_beside(impl, component, cause):
    """What reading the component's code found that explains a crash of tensor shapes (arguments passed in the
    wrong order: queries and keys swapped crash as soon as their lengths differ), as words to add to it."""
    found = impl.read.get(component, {}).get("arguments_in_wrong_order", []) if impl is not None else []
    if not found or cause not in ("error.shape_mismatch", "error.RuntimeError"):
        return ""
    return f"; reading the code: {found[0]}"


def behind(item, verdict, cause):
    """``{"verdict", "cause", "message", "repairs"}`` found behind an error by :func:`look_behind`, else None (also
    when the repaired code ends in the same error)."""
    found = item.stash.get(BEHIND, None)
    if verdict != ERROR or found is None or found[:2] == (verdict, cause):
        return None
    return dict(zip(("verdict", "cause", "message", "repairs"), found))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # hypothesis would offer a `git apply` patch adding failing examples to the checker's own code: not the user's
    item.__dict__.pop("_hypothesis_failing_examples", None)
    outcome = yield
    report = outcome.get_result()
    if not hasattr(item, "module") or not item.module.__name__.startswith("conformance."):
        return
    if call.when == "setup":
        harness.LATEST_CASE = None
        PASS_NOTES.clear()
    if call.when == "call" or (call.when == "setup" and call.excinfo is not None):
        impl = getattr(item, "funcargs", {}).get("impl")
        verdict, cause, message = (PASS, "", "; ".join(PASS_NOTES)) if call.excinfo is None else classify(
            call.excinfo, component_of(item), getattr(impl, "locate", None), impl)
        verdict, cause, message, kind = with_evidence(item, impl, verdict, cause, message)
        message += read_beside(impl, component_of(item), cause)
        record = dict(component=component_of(item), family=family_of(item), check=check_of(item),
                      verdict=verdict, cause=cause, message=message, nodeid=item.nodeid)
        if kind is not None:
            record["evidence"] = kind
        hidden = behind(item, verdict, cause)
        if hidden:
            record["behind"] = hidden
            record["message"] += (f"\nbehind this error, with {'; '.join(hidden['repairs'])}: {hidden['verdict']}"
                                  + (f" {hidden['cause']}: {hidden['message']}" if hidden["cause"] else ""))
        strict = item.config.getoption("strict")
        expected = item.config.stash[EXPECTED].get(f"{record['component']}/{record['check']}")
        if expected and expected.get("verdict", verdict) == verdict and verdict != PASS:
            record["expected"] = True
            report.outcome, report.wasxfail = "skipped", expected.get("reason", "listed in the expected file")
        elif verdict == DEVIATION:
            report.outcome = "failed" if strict else "passed"
            report.longrepr = message if strict else None
        elif verdict == MISSING:
            report.outcome, report.longrepr = "skipped", (str(item.path), item.location[1] or 0, message)
        elif verdict in (FAIL, ERROR):
            report.longrepr = f"[{record['component']}] [{kind}] {message}"
        report.user_properties.append(("conformance", record))
        if impl is not None and not item.config.stash.get(NOTES, None):
            item.config.stash[NOTES] = list(impl.notes)
            report.user_properties.append(("conformance_notes", list(impl.notes)))


def pytest_runtest_logreport(report):
    if CONFIG is None:
        return
    for key, value in report.user_properties:
        if key == "conformance":
            CONFIG.stash[RESULTS].append(value)
        elif key == "conformance_notes":
            CONFIG.stash[NOTES] = value


CONFIG = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    global CONFIG
    CONFIG = session.config


def pytest_terminal_summary(terminalreporter, config):
    records = config.stash.get(RESULTS, [])
    if not records or hasattr(config, "workerinput"):
        return
    from tabulate import tabulate
    table = summary_table(records)
    families = [f for f in FAMILIES if any(f in row for row in table.values())]
    rows = [[c] + [table[c].get(f, "") for f in families] for c in ROLES if c in table]
    tr = terminalreporter
    tr.write_sep("=", f"conformance of {config.getoption('impl')} (contract: {config.getoption('contract')})")
    for note in config.stash.get(NOTES, []):
        tr.write_line(f"note: {note}")
    tr.write_line(tabulate(rows, headers=["component"] + families, tablefmt="github"))
    for (verdict, component, cause), group in findings(records):
        tag = " (expected)" if all(r.get("expected") for r in group) else ""
        checks = ", ".join(sorted({r["check"] for r in group}))
        tr.write_line(f"{verdict.upper():9} {component} [{checks}]{tag}{evidence_tag(group)}: "
                      f"{group[0]['message'].splitlines()[0]}")
    for (verdict, component, cause, crash), group in findings_behind_errors(records):
        checks = ", ".join(sorted({r["check"] for r in group}))
        tr.write_line(f"{verdict.upper():9} {component} [{checks}] behind {crash}: "
                      f"{first_line(group[0]['behind']['message']) if cause else 'passes once repaired'}")
    for key in unmatched_expectations(config, records):
        tr.write_line(f"WARNING expected-results entry {key!r} matches no finding of this run")
    if nothing_checked(config, records):
        tr.write_sep("=", "NOTHING CHECKED", red=True)
        tr.write_line(nothing_checked_help(config.getoption("impl"), config.stash.get(NOTES, [])))


def nothing_checked(config, records):
    """True when every check ran and found no role to check (a run that checked nothing never passes); grading's
    two processes judge that from their merged records instead."""
    return bool(records) and all(r["verdict"] == MISSING for r in records) and not config.stash.get(PART_OF_A_RUN, False)


def nothing_checked_help(spec, notes):
    """What a user reads when nothing was checked: what was seen, and a conformance.toml to fill in."""
    template = "\n".join(f'# {role} = "..."' for role in ROLES)
    return (f"No role of the paper's Transformer was found in {spec}, so nothing was checked: this run fails.\n"
            + "".join(f"  {n}\n" for n in notes)
            + "Name the classes and functions that play each role in a conformance.toml beside the code "
              "(a class or function name, Class.method for a method):\n[roles]\n" + template)


def grouped(keyed):
    """``[(key, [record, ...])]`` for ``(key, record)`` pairs, a key starting (verdict, component, cause): worst
    verdict first, then by component in the order of ROLES, then by cause."""
    groups = {}
    for key, r in keyed:
        groups.setdefault(key, []).append(r)
    order = {role: i for i, role in enumerate(ROLES)}
    return sorted(groups.items(), key=lambda g: (-verdicts.SEVERITY[g[0][0]], order.get(g[0][1], 99), g[0][2]))


def findings(records):
    """``[((verdict, component, cause), [record, ...])]``: the non-passing checks grouped by their cause."""
    return grouped(((r["verdict"], r["component"], r["cause"]), r) for r in records if r["verdict"] != PASS)


def findings_behind_errors(records):
    """``[((verdict, component, cause, crash cause), [record, ...])]``: what the checks that ended in an error find
    once the crash is repaired, grouped like :func:`findings`."""
    return grouped(((r["behind"]["verdict"], r["component"], r["behind"]["cause"], r["cause"]), r)
                   for r in records if "behind" in r)


def evidence_tag(group):
    """`` [author's call]``: the evidence kinds of a group of records (fail or error), or ""."""
    kinds = sorted({r["evidence"] for r in group if r.get("evidence")})
    return f" [{'; '.join(kinds)}]" if kinds else ""


def first_line(text):
    return (text.splitlines() or [""])[0]


def unmatched_expectations(config, records):
    seen = {f"{r['component']}/{r['check']}" for r in records if r.get("expected")}
    return sorted(set(config.stash[EXPECTED]) - seen)


def pytest_sessionfinish(session):
    config = session.config
    if hasattr(config, "workerinput"):
        return
    records = config.stash.get(RESULTS, [])
    for key in unmatched_expectations(config, records) if records else ():
        warnings.warn(f"expected-results entry {key!r} matches no finding of this run")
    if nothing_checked(config, records) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    path = config.getoption("report_json")
    if path:  # (also when no check ran here: grading's process beside the code may have left them all to the judge)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"implementation": config.getoption("impl"), "contract": config.getoption("contract"),
                       "device": config.getoption("device"), "notes": config.stash.get(NOTES, []),
                       "table": summary_table(records),
                       "checks": sorted(records, key=lambda r: r["nodeid"])}, f, indent=2)
