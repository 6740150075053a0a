"""Mutation score: runs the conformance suite on every mutant of the reference (``tests/mutants.py``) and says
which are caught, by which component's checks, per property family.

    python tests/mutation_score.py [--jobs N] [--json PATH] [--family F ...] [-k SUBSTRING] [--timeout S]
                                   [-- PYTEST ARGS, e.g. --hypothesis-profile=grade]

Each mutant is written to a temporary directory and checked in its own ``python -m pytest conformance`` process
(all checks, no ``-x``, so every component that flags it is seen), ``--jobs`` of them at a time. A bug is
*caught* when a check of the mutant's component gives *fail* or *error*; a deviation mutant (pre-norm, GELU, ...)
is caught when a check of its component gives *deviation* and no check fails or errors. It is *named* when, on top
of that, its component reports the cause the mutant declares (``Mutant.cause``, the truth written with it), and
no component its edits do not touch fails or errors. The reference itself is run alongside as the baseline (it must
have no fail, error or deviation).

Exit status: 0 when every mutant is caught and named, and the reference is clean; 1 otherwise.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests import mutants as catalogue  # noqa: E402
from conformance.contract.verdicts import SEVERITY  # noqa: E402
from tests.answer_keys import FLAGGED, cited_lines, outcomes  # noqa: E402
from tests.forked import run_pytest  # noqa: E402
from tests.mutants import FAMILIES, StaleMutant  # noqa: E402



def family_checks(family):
    """The pytest target holding exactly the checks of ``family`` (the plugin names a check's family after its
    module). ``-m <family>`` is not exact: the positional_encoding and layer_norm markers also name components,
    so they select that component's checks in every family too."""
    return f"conformance/checks/test_{family}.py"


def suite_arguments(impl_path, report, markers=None, target="conformance", extra=()):
    """``TARGET -q -p no:randomly --impl=PATH --report-json=REPORT [-m MARKERS] [EXTRA]``."""
    arguments = [target, "-q", "-p", "no:randomly", f"--impl={impl_path}", f"--report-json={report}"]
    return arguments + (["-m", markers] if markers else []) + list(extra)


def run_suite(impl_path, workdir, markers=None, timeout=600, in_process=False, target="conformance", extra=()):
    """``python -m pytest TARGET -q -p no:randomly --impl=PATH --report-json=...`` from the repository root
    (``TARGET``: all of ``conformance`` or one family's module, see :func:`family_checks`).

    Returns ``(exit code, output, report or None)``; the report is None when no check ran (or pytest crashed).
    Hypothesis' files go to ``workdir``, not the repository; torch runs single-threaded (the callers run several
    suites at once). ``in_process=True`` runs the same pytest command with ``pytest.main`` in this process (no
    timeout): it saves the 3-4 s of importing torch, hypothesis and pytest that each subprocess pays."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    report = workdir / f"report-{Path(impl_path).stem}-{Path(target).stem}-{(markers or 'all').replace(' ', '_')}.json"
    report.unlink(missing_ok=True)
    arguments = suite_arguments(impl_path, report, markers, target, extra)
    if in_process:
        code, output = run_pytest_here(arguments, workdir)
    else:
        env = {key: value for key, value in os.environ.items()  # not the settings of a pytest (xdist worker) above
               if not key.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST")) and key != "CONFORMANCE_IMPL"}
        env["HYPOTHESIS_STORAGE_DIRECTORY"] = str(workdir / ".hypothesis")
        env.setdefault("OMP_NUM_THREADS", "1")
        code, output = run_pytest(arguments, ROOT, env, timeout)
    data = json.loads(report.read_text()) if report.exists() else None
    return code, output, data


def run_pytest_here(arguments, workdir):
    """``pytest.main(arguments)`` from the repository root in this process; ``(exit code, terminal output)``."""
    import contextlib
    import io

    import pytest
    from hypothesis.configuration import set_hypothesis_home_dir

    output, cwd = io.StringIO(), os.getcwd()
    impl = os.environ.pop("CONFORMANCE_IMPL", None)
    set_hypothesis_home_dir(Path(workdir) / ".hypothesis")
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            # pytest-benchmark would warn, in an xdist worker, that xdist disables it: it has nothing to do here;
            # the unraisable-exception plugin ends each session with five full collections of this whole process
            code = pytest.main(arguments + ["-p", "no:benchmark", "-p", "no:unraisableexception"])
    finally:
        os.chdir(cwd)
        set_hypothesis_home_dir(None)
        if impl is not None:
            os.environ["CONFORMANCE_IMPL"] = impl
    return int(code), output.getvalue()


@dataclass
class Result:
    name: str
    family: str
    component: str
    deviation: bool
    status: str  # caught | missed | other_component | reported_as_failure | no_checks | stale | timeout
    caught: bool
    named: bool = False  # caught with the declared cause, nothing flagged outside the components it touches
    flagged: list = field(default_factory=list)  # "component/check: verdict" of every non-pass, non-missing check
    cause: str = ""
    problems: list = field(default_factory=list)  # flagged elsewhere, a crash line not cited
    returncode: int = None
    seconds: float = 0.0
    output: str = ""  # the tail of pytest's output when something is off


def assess(mutant, report):
    """``(status, caught, flagged, first cause)`` of a mutant from the suite's JSON report (None: no check ran)."""
    if report is None:
        return "no_checks", False, [], ""
    checks = [c for c in report["checks"] if c["verdict"] in FLAGGED + ("deviation",)]
    checks.sort(key=lambda c: (c["component"] != mutant.component, -SEVERITY[c["verdict"]], c["nodeid"]))
    flagged = [f"{c['component']}/{c['check']}: {c['verdict']}" for c in checks]
    own = [c for c in checks if c["component"] == mutant.component]
    failing = [c for c in checks if c["verdict"] in FLAGGED]
    if mutant.deviation:
        if failing:
            return "reported_as_failure", False, flagged, failing[0]["cause"]
        named = [c for c in own if c["verdict"] == "deviation"]
        if named:
            return "caught", True, flagged, named[0]["cause"]
        return ("other_component" if checks else "missed"), False, flagged, checks[0]["cause"] if checks else ""
    own_failing = [c for c in own if c["verdict"] in FLAGGED]
    if own_failing:
        return "caught", True, flagged, own_failing[0]["cause"]
    if failing:
        return "other_component", False, flagged, failing[0]["cause"]
    return "missed", False, flagged, checks[0]["cause"] if checks else ""


def reports_cause(mutant, report, key=lambda cause: cause):
    """Does the mutant's component report the mutant's declared cause (as a verdict or behind an error), with the
    verdict its kind calls for? Causes are compared through ``key``."""
    wanted = ("deviation",) if mutant.deviation else FLAGGED
    return any(verdict in wanted and key(cause) == key(mutant.cause)
               for component, verdict, cause, _ in outcomes(report or {"checks": []})
               if component == mutant.component)


def flagged_elsewhere(mutant, report):
    """Fails and errors on components none of the mutant's edits touch (``mutants.touched_components``)."""
    touched = catalogue.touched_components(mutant)
    return sorted({f"{c['component']}/{c['check']}: {c['verdict']} {c['cause']}" for c in (report or {}).get("checks", [])
                   if c["verdict"] in FLAGGED and c["component"] not in touched})


def crash_not_cited(mutant, report, path):
    """For a mutant that crashes: the problem when no error of a component it touches cites the line of the
    mutant's file where it crashes, else None."""
    line = catalogue.crash_line(mutant)
    if line is None:
        return None
    touched = catalogue.touched_components(mutant)
    cited = set().union(*(cited_lines(message, Path(path).name) for component, verdict, _, message
                          in outcomes(report or {"checks": []}) if verdict == "error" and component in touched))
    return None if line in cited else (f"the crash is at line {line} of {Path(path).name} "
                                       f"({mutant.crash_at!r}); the errors cite lines {sorted(cited) or 'none'}")


def run_mutant(mutant, workdir, markers=None, timeout=600, in_process=False, target="conformance", extra=()):
    """Write ``mutant`` under ``workdir``, run the suite on it (``target`` restricted to ``markers`` if given) and
    assess it."""
    workdir = Path(workdir)
    start = time.perf_counter()
    result = Result(mutant.name, mutant.family, mutant.component, mutant.deviation, "missed", False)
    try:
        path = catalogue.write(mutant, workdir)
        code, output, report = run_suite(path, workdir, markers, timeout, in_process, target, extra)
    except StaleMutant as exc:
        result.status, result.output = "stale", str(exc)
        return result
    except subprocess.TimeoutExpired:
        result.status, result.seconds = "timeout", time.perf_counter() - start
        return result
    result.returncode, result.seconds = code, time.perf_counter() - start
    result.status, result.caught, result.flagged, result.cause = assess(mutant, report)
    result.problems = flagged_elsewhere(mutant, report) + list(filter(None, [crash_not_cited(mutant, report, path)]))
    result.named = result.caught and reports_cause(mutant, report) and not result.problems
    if not result.named:
        result.output = output[-4000:]
    return result


def run_reference(workdir, markers=None, timeout=600, in_process=False, target="conformance", extra=()):
    """The unmodified reference run the same way: ``(exit code, output, report)``."""
    Path(workdir).mkdir(parents=True, exist_ok=True)
    path = Path(workdir) / "reference_baseline.py"
    path.write_text(catalogue.reference_source())
    return run_suite(path, workdir, markers, timeout, in_process, target, extra)


def false_positives(report):
    """``component/check: verdict (cause)`` of every fail, error or deviation in a report of the reference."""
    if report is None:
        return []
    return [f"{c['component']}/{c['check']}: {c['verdict']} ({c['cause']})" for c in report["checks"]
            if c["verdict"] in FLAGGED + ("deviation",)]


# -- printing ---------------------------------------------------------------------------------------------------
CAUGHT_TEXT = {"caught": "yes", "missed": "NO", "other_component": "NO (other component)",
               "reported_as_failure": "NO (reported as failure)", "no_checks": "NO (no check ran)",
               "stale": "NO (stale edits)", "timeout": "NO (timeout)"}


def flagged_summary(flagged, component, limit=3):
    """The expected component's flagged checks by name, then the other components that flagged something."""
    own = [f.split(":")[0] for f in flagged if f.startswith(component + "/")]
    others = list(dict.fromkeys(f.split("/")[0] for f in flagged if not f.startswith(component + "/")))
    text = ", ".join(own[:limit]) + (f" +{len(own) - limit}" if len(own) > limit else "")
    if others:
        text += ("; " if text else "") + "also " + ", ".join(others[:limit]) + \
            (f" +{len(others) - limit}" if len(others) > limit else "")
    return text or "-"


def mutant_table(results):
    from tabulate import tabulate
    rows = [[r.name + (" (deviation)" if r.deviation else ""), r.family, r.component, CAUGHT_TEXT[r.status],
             "yes" if r.named else "NO",
             flagged_summary(r.flagged, r.component), r.cause or "-"] for r in results]
    return tabulate(rows, headers=["mutant", "family", "expected component", "caught?", "named?", "flagged by",
                                   "first cause"], tablefmt="simple")


def scores(results):
    """``{family: (bugs caught, bugs named, bugs, deviations reported, deviations named, deviations)}`` plus
    ``"overall"``."""
    table = {}
    for key in [f for f in FAMILIES if any(r.family == f for r in results)] + ["overall"]:
        rs = [r for r in results if key in ("overall", r.family)]
        bugs, devs = [r for r in rs if not r.deviation], [r for r in rs if r.deviation]
        table[key] = (sum(r.caught for r in bugs), sum(r.named for r in bugs), len(bugs),
                      sum(r.caught for r in devs), sum(r.named for r in devs), len(devs))
    return table


def score_table(results):
    from tabulate import tabulate
    rows = []
    for family, (caught, named, bugs, reported, devs_named, devs) in scores(results).items():
        rows.append([family, f"{caught}/{bugs}", f"{100 * caught / bugs:.0f}%" if bugs else "-",
                     f"{named}/{bugs}", f"{100 * named / bugs:.0f}%" if bugs else "-",
                     f"{reported}/{devs} ({devs_named} named)" if devs else "-"])
    return tabulate(rows, headers=["family", "bugs caught", "mutation score", "caught with the right cause",
                                   "cause score", "deviations reported"], tablefmt="simple")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                        help="suites run at once (default: the CPU count)")
    parser.add_argument("--json", metavar="PATH", help="write every mutant's result and the scores as JSON")
    parser.add_argument("--family", action="append", choices=FAMILIES, help="only the mutants of this family")
    parser.add_argument("-k", dest="substring", help="only the mutants whose name contains SUBSTRING")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed to one suite run")
    parser.add_argument("--keep", metavar="DIR", help="write the mutants and reports to DIR (kept)")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]  # given to every suite run
    selected = [m for m in catalogue.MUTANTS if (not args.family or m.family in args.family)
                and (not args.substring or args.substring in m.name)]
    if not selected:
        parser.error("no mutant selected")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        workdir = Path(args.keep or tmp)
        # A thread pool of subprocesses: each job is one pytest process; threads only wait on them.
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            baseline = pool.submit(run_reference, workdir / "reference", None, args.timeout, extra=extra)
            futures = {pool.submit(run_mutant, m, workdir / m.name, None, args.timeout, extra=extra): m
                       for m in selected}
            done = {}
            for i, future in enumerate(concurrent.futures.as_completed(futures), 1):
                r = future.result()
                done[r.name] = r
                print(f"[{i}/{len(selected)}] {r.name}: {CAUGHT_TEXT[r.status]} ({r.seconds:.1f} s)",
                      file=sys.stderr, flush=True)
            ref_code, ref_output, ref_report = baseline.result()
    order = {f: i for i, f in enumerate(FAMILIES)}
    results = sorted(done.values(), key=lambda r: (order[r.family], r.deviation))
    wrong = false_positives(ref_report)
    print(mutant_table(results))
    print()
    print(score_table(results))
    print()
    if ref_report is None:
        print(f"reference baseline: no report (exit code {ref_code})\n{ref_output[-2000:]}")
    else:
        print(f"reference baseline: {len(ref_report['checks'])} checks, " +
              (f"{len(wrong)} false positive(s): " + "; ".join(wrong) if wrong else "no fail, error or deviation"))
    missed = [r for r in results if not r.caught]
    if missed:
        print(f"not caught ({len(missed)}): " + ", ".join(f"{r.name} [{r.family}/{r.component}: {r.status}]"
                                                           for r in missed))
    unnamed = [r for r in results if r.caught and not r.named]
    if unnamed:
        print(f"caught without their cause ({len(unnamed)}): " + "; ".join(
            f"{r.name} [expected {catalogue.BY_NAME[r.name].cause}, first {r.cause}"
            + (f"; {', '.join(r.problems)}" if r.problems else "") + "]" for r in unnamed))
    print(f"{len(results)} mutants in {time.perf_counter() - start:.0f} s with {args.jobs} job(s)"
          + (f" ({' '.join(extra)})" if extra else ""))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "mutants": [asdict(r) for r in results],
            "scores": {f: dict(zip(("bugs_caught", "bugs_named", "bugs", "deviations_reported", "deviations_named",
                                    "deviations"), s))
                       for f, s in scores(results).items()},
            "reference": {"exit_code": ref_code, "false_positives": wrong},
        }, indent=2))
    return 1 if missed or unnamed or wrong or ref_report is None else 0


if __name__ == "__main__":
    sys.exit(main())
