"""Running the conformance suite in a process of its own, as a user would (``tests.forked``), and reading its JSON
report."""
import fcntl
import json
import os
import tomllib
from pathlib import Path

from tests.forked import run_pytest

ROOT = Path(__file__).resolve().parents[1]
SEED_DIR = ROOT.parent / "shared" / "seeds"
SEEDS = {path.stem: SEED_DIR / tomllib.loads(path.read_text())["seed"]
         for path in sorted((ROOT / "tests" / "seed_keys").glob("*.toml"))}
"""The five seeds (real notebooks and posts by other people), read in place from ``../shared/seeds/``: listed by
their answer keys, so that a test needing one fails when the folder is missing instead of vanishing."""


def seed(stem):
    """The path of seed ``stem``; a clear failure when it is not beside the repository."""
    path = SEEDS[stem]
    if not path.is_file():
        raise FileNotFoundError(f"seed {path.name} is missing: the tests read the seeds in place from {SEED_DIR} "
                                f"(a checkout of the project beside ../shared)")
    return path


def run_suite(*args, cwd=ROOT, env=None, tmp_path=None, timeout=600):
    """``python -m pytest conformance ARGS --report-json``; returns (exit code, output, report or None)."""
    report = Path(tmp_path or cwd) / f"report-{os.getpid()}-{len(args)}-{abs(hash(args))}.json"
    arguments = [*(args if "--pyargs" in args else ("conformance", *args)), "-q", "-p", "no:randomly",
                 f"--report-json={report}"]
    code, output = run_pytest(arguments, cwd, {**os.environ, **(env or {})}, timeout)
    data = json.loads(report.read_text()) if report.exists() else None
    return code, output, data


def verdicts(report, verdict):
    """``{(component, check, cause)}`` of the checks with ``verdict``."""
    return {(c["component"], c["check"], c["cause"]) for c in report["checks"] if c["verdict"] == verdict}


def run_on_source(tmp_path, filename, source, *args):
    """The suite on ``source`` saved as ``tmp_path/filename``: (exit code, output, report, {(component, check):
    record})."""
    path = tmp_path / filename
    path.write_text(source)
    code, output, report = run_suite(f"--impl={path}", *args, tmp_path=tmp_path)
    return code, output, report, {(c["component"], c["check"]): c for c in (report or {}).get("checks", [])}


def once_per_session(name, tmp_path_factory, make):
    """``make()``'s JSON-able result, made once for the whole test session: shared by pytest-xdist's workers through
    a file in their common temporary folder (made under a lock by the first to ask)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    saved = shared / f"once-{name}.json"
    with open(shared / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not saved.exists():
            saved.write_text(json.dumps(make()))
    return json.loads(saved.read_text())
