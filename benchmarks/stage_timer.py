"""A pytest plugin for the benchmarks: where a run of the suite spends its time, by stage.

    python -m pytest conformance -p benchmarks.stage_timer ...   (with the project's root on PYTHONPATH)

With ``STAGE_TIMER_OUT`` set, each process of the run (the controller, and each xdist worker) writes there, as JSON,
``{stage: [wall seconds, CPU seconds]}`` (``<path>.<worker id>`` for a worker). The stages: ``start`` (the
interpreter's start to the session's: Python, pytest, torch, hypothesis and the plugin imported), ``collect``;
``load``, ``observe`` and ``discover`` (reading ``--impl``, timed around ``adapters.submission``'s stages, ``load``
being the rest of it); ``family:<name>`` (the setup, call and teardown of each family's checks, reading ``--impl``
excluded); ``between checks`` (pytest's own work between them) and ``report`` (the verdict table, the JSON report).
"""
import functools
import json
import os
import time

import pytest

STAGES = {}
LAST = {}


def now():
    return time.perf_counter(), time.process_time()


def add(stage, start, end, less=(0.0, 0.0)):
    """Add the time from ``start`` to ``end`` (``now()`` pairs), less ``less``, to ``stage``."""
    wall, cpu = STAGES.get(stage, (0.0, 0.0))
    STAGES[stage] = (wall + end[0] - start[0] - less[0], cpu + end[1] - start[1] - less[1])


def total(stages):
    """The time of ``stages`` so far, a (wall, CPU) pair."""
    found = [STAGES.get(s, (0.0, 0.0)) for s in stages]
    return sum(w for w, _ in found), sum(c for _, c in found)


def minus(a, b):
    return a[0] - b[0], a[1] - b[1]


READING = ("load", "observe", "discover")


def timed(stage, function):
    """``function`` adding its time to ``stage``, less that of the reading stages it calls."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        inner, start = total(READING), now()
        try:
            return function(*args, **kwargs)
        finally:
            add(stage, start, now(), minus(total(READING), inner))
    return wrapper


def pytest_configure(config):
    from adapters import submission
    from conformance import collection
    for stage in READING:
        name = "load_implementation" if stage == "load" else stage
        setattr(submission, name, timed(stage, getattr(submission, name)))
    collection.load_implementation = submission.load_implementation


def since_process_start():
    """(wall, CPU) seconds since this process started, read from /proc (0, 0 where it cannot be read)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        tick = os.sysconf("SC_CLK_TCK")
        return time.time() - boot - int(fields[19]) / tick, time.process_time()
    except (OSError, ValueError, IndexError, StopIteration):
        return 0.0, 0.0


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    STAGES["start"] = since_process_start()
    LAST["session"] = now()


def pytest_collection_finish(session):
    LAST["item"] = now()
    add("collect", LAST["session"], LAST["item"])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start, reading = now(), total(READING)
    add("between checks", LAST.get("item", start), start)
    yield
    LAST["item"] = now()
    family = item.module.__name__.rsplit(".", 1)[-1].removeprefix("test_") if getattr(item, "module", None) else "?"
    add(f"family:{family}", start, LAST["item"], minus(total(READING), reading))


@pytest.hookimpl(hookwrapper=True)
def pytest_terminal_summary(terminalreporter, config):
    start = now()
    yield
    add("report", start, now())


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_sessionfinish(session):
    start = now()
    yield
    add("report", start, now())


def pytest_unconfigure(config):
    path = os.environ.get("STAGE_TIMER_OUT")
    if path:
        worker = getattr(config, "workerinput", {}).get("workerid")
        with open(f"{path}.{worker}" if worker else path, "w") as f:
            json.dump(STAGES, f)
