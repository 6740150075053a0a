"""The verdict record of each check: while a check runs, the calls it makes are watched (the evidence of a
finding, ``conformance.diagnosis.evidence``); what it raised is diagnosed (``conformance.diagnosis.classify``); a check that ended in
an error runs again on the repaired code (what is found behind the error); the record (component, family, check,
verdict, cause, message, and where in the author's code the role is) becomes pytest's outcome, goes to the run's
results, and at the end of the run to ``--report-json``."""
import json
import os
import warnings

import pytest

from conformance.contract import harness
from conformance.diagnosis import classify as diagnosis
from conformance.collection import check_of, component_of, family_of, is_a_check
from conformance.diagnosis.evidence import CheckCalls, evidence
from conformance.contract.interface import ROLES, MissingRole
from conformance.options import EXPECTED, NOTES, PART_OF_A_RUN, RESULTS
from conformance.contract.verdicts import (DEVIATION, ERROR, FAIL, MISSING, PASS, PASS_NOTES, SEVERITY, Failure,
                                  Finding, summary_table)

BEHIND = pytest.StashKey[tuple]()
CALLS = pytest.StashKey[CheckCalls]()
"""The calls the check made to its component's role (``conformance.diagnosis.evidence.CheckCalls``)."""


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    ours = is_a_check(pyfuncitem)
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
                f"{diagnosis.MAP_IT}", None)
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
        verdict, cause, message = diagnosis.classify(pytest.ExceptionInfo.from_exception(again),
                                                     component_of(item), repaired.locate, repaired)
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
    if not is_a_check(item):
        return
    if call.when == "setup":
        harness.LATEST_CASE = None
        PASS_NOTES.clear()
    if call.when == "call" or (call.when == "setup" and call.excinfo is not None):
        impl = getattr(item, "funcargs", {}).get("impl")
        record = record_of(item, call, impl)
        set_outcome(report, item, record)
        report.user_properties.append(("conformance", record))
        if impl is not None and not item.config.stash.get(NOTES, None):
            item.config.stash[NOTES] = list(impl.notes)
            report.user_properties.append(("conformance_notes", list(impl.notes)))


def counted_as_built(item, impl, excinfo):
    """``excinfo``; or, where it holds a parameter count that failed on a block whose code fixes widths of its own
    (``conformance.checks.test_parameters.at_the_papers_sizes``), what the count says at the paper's base sizes,
    where its author builds it: missing (``adapter.sizes_fixed_by_the_code``) where it is the paper's there, else the
    finding made there."""
    failure = excinfo.value if excinfo is not None else None
    if not (isinstance(failure, Failure) and failure.cause.endswith(".parameters.count")) or impl is None \
            or harness.LATEST_CASE is None or "contract" not in getattr(item, "funcargs", {}):
        return excinfo
    from conformance.checks.test_parameters import at_the_papers_sizes  # (a module of checks: loaded as they run)
    try:
        at_the_papers_sizes(impl, item.funcargs["device"], item.funcargs["contract"], component_of(item), failure,
                            harness.LATEST_CASE.cfg)
    except Finding as found:
        return pytest.ExceptionInfo.from_exception(found)
    return excinfo


def record_of(item, call, impl):
    """The verdict record of a check that ran (or whose set-up failed): a fail or a deviation names where the role
    is in the author's code (``where``); an error's message already names the line that raised."""
    component = component_of(item)
    excinfo = counted_as_built(item, impl, call.excinfo)
    verdict, cause, message = (PASS, "", "; ".join(PASS_NOTES)) if excinfo is None else diagnosis.classify(
        excinfo, component, getattr(impl, "locate", None), impl)
    verdict, cause, message, kind = with_evidence(item, impl, verdict, cause, message)
    record = dict(component=component, family=family_of(item), check=check_of(item), verdict=verdict, cause=cause,
                  message=message + read_beside(impl, component, cause), nodeid=item.nodeid)
    if kind is not None:
        record["evidence"] = kind
    where = diagnosis.role_location(impl, component) if verdict in (FAIL, DEVIATION) else None
    if where:
        record["where"] = where
    hidden = behind(item, verdict, cause)
    if hidden:
        record["behind"] = hidden
        record["message"] += (f"\nbehind this error, with {'; '.join(hidden['repairs'])}: {hidden['verdict']}"
                              + (f" {hidden['cause']}: {hidden['message']}" if hidden["cause"] else ""))
    return record


def set_outcome(report, item, record):
    """pytest's outcome of a check from its record: a fail or an error fails; a deviation fails under
    ``--strict`` only; missing is a skip; what the expected-results file lists is an expected failure. What pytest
    prints of a failing check is its component and cause: the terminal summary gives each finding in full, once."""
    verdict, message = record["verdict"], record["message"]
    strict = item.config.getoption("strict")
    expected = item.config.stash[EXPECTED].get(f"{record['component']}/{record['check']}")
    if expected and expected.get("verdict", verdict) == verdict and verdict != PASS:
        record["expected"] = True
        report.outcome, report.wasxfail = "skipped", expected.get("reason", "listed in the expected file")
    elif verdict == DEVIATION:
        report.outcome = "failed" if strict else "passed"
        report.longrepr = f"[{record['component']}] {record['cause']}" if strict else None
    elif verdict == MISSING:
        report.outcome, report.longrepr = "skipped", (str(item.path), item.location[1] or 0, message)
    elif verdict in (FAIL, ERROR):
        report.longrepr = f"[{record['component']}] {record['cause']}"


class RunResults:
    """The run's results, gathered in the process that reports (pytest-xdist's controller, which receives the
    workers' reports): the records each check's report carries, and the notes of the first. Registered with pytest
    when the session starts, since pytest gives its report hook no config."""

    def __init__(self, config):
        self.config = config

    def pytest_runtest_logreport(self, report):
        for key, value in report.user_properties:
            if key == "conformance":
                self.config.stash[RESULTS].append(value)
            elif key == "conformance_notes":
                self.config.stash[NOTES] = value


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    session.config.pluginmanager.register(RunResults(session.config), "conformance-results")


def nothing_checked(config, records):
    """True when every check ran and found no role to check (a run that checked nothing never passes); grading's
    two processes judge that from their merged records instead."""
    return bool(records) and all(r["verdict"] == MISSING for r in records) and not config.stash.get(PART_OF_A_RUN,
                                                                                                   False)


def unmatched_expectations(config, records):
    seen = {f"{r['component']}/{r['check']}" for r in records if r.get("expected")}
    return sorted(set(config.stash[EXPECTED]) - seen)


def first_line(text):
    return (text.splitlines() or [""])[0]


def grouped(keyed):
    """``[(key, [record, ...])]`` for ``(key, record)`` pairs, a key starting with the verdict: worst verdict first,
    then by the first of the group's components in the order of ROLES, then by the rest of the key."""
    groups = {}
    for key, r in keyed:
        groups.setdefault(key, []).append(r)
    return sorted(groups.items(), key=lambda g: (-SEVERITY[g[0][0]], min(role_order(r["component"]) for r in g[1]),
                                                 g[0][1:]))


def role_order(component):
    return ROLES.index(component) if component in ROLES else len(ROLES)


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
