"""``python -m conformance grade --cluster``: on a LocalCluster of two workers, one of them killed in the middle of a
submission, every report file is the local grader's and its scratch folders are gone; a submission whose worker dies on every try gets a
``worker lost`` row; without Dask, or with an address that is not one, the grader says so and stops cleanly."""
import concurrent.futures
import csv
import functools
import json
import os
import re
import signal
import sys
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conformance.grading import runner as grading
from conformance.grading import scratch
from tests import mutants

try:
    import distributed
except ImportError:
    distributed = None
needs_dask = pytest.mark.skipif(distributed is None, reason="Dask distributed is not installed "
                                                            "(pip install -e '.[cluster]')")
SELECTION = ["-m", "multi_head_attention"]  # a few checks keep the tests quick (both graders get the same)
COUNT = 12
WORKER_RESTART = 240  # s: a killed worker's nanny starts a new one, which warms a zygote (torch's import) on 2 busy cores


@pytest.fixture(scope="module")
def cluster():
    from conformance.grading import cluster as dask_grading
    with dask_grading.local_cluster(2) as local, distributed.Client(local) as client:
        yield local, client


def executing(dask_worker):
    """On a worker: its pid and the keys of the tasks it is running."""
    return os.getpid(), [key for key, task in dask_worker.state.tasks.items() if task.state == "executing"]


def kill_a_busy_worker(client, results, grading_run, timeout=240):
    """Once the first result is written: SIGKILL a worker in the middle of a submission; its pid and task."""
    deadline = time.monotonic() + timeout
    while not list(results.glob("*.json")):
        assert time.monotonic() < deadline and not grading_run.done(), grading_run.done() and grading_run.result()
        time.sleep(0.05)
    busy = [(pid, keys) for pid, keys in client.run(executing).values() if keys]
    assert busy, "no worker was checking a submission"
    os.kill(busy[0][0], signal.SIGKILL)
    return busy[0]


MEASURED = {"wall_s", "checks_s", "collect_s", "maxrss_mb", "cpu_s"}
"""A result's timings and memory: measured anew by every run."""


TAIL_LINES = 12
"""The lines of a submission's output tail compared: a tail of a fixed size whose first, cut line differs."""


def comparable(result):
    """A result less what legitimately differs between two runs: MEASURED, the integrity record's per-run nonce and
    timings, pytest's own timing line in the output ('12 passed in 3.21s') and the submission's scratch folder (a
    fresh temporary folder each run) where the output's tail quotes a path in it, and so the output's size in bytes
    (9.99s against 10.01s is one byte more) and where its tail, a fixed number of characters, starts: only its last
    lines are compared."""
    same = {k: v for k, v in result.items() if k not in MEASURED | {"output_bytes"}}
    if same.get("integrity"):
        same["integrity"] = {k: v for k, v in same["integrity"].items() if k not in {"nonce", *MEASURED}}
    same["output_tail"] = re.sub(r" in \d+\.\d+s\b", " in (time)", same["output_tail"])
    same["output_tail"] = re.sub(r"[\w./-]*/work/", "(scratch)/work/", same["output_tail"])
    same["output_tail"] = same["output_tail"].splitlines()[-TAIL_LINES:]
    return same


def report_files(out):
    """``{relative path: content}`` of every report file, made comparable: results/*.json (``comparable``),
    .cache.json parsed (its order is the order the results came in), index.html less its 'Checked in N s.' line
    (the run's wall time); every other file (summaries, feedback, gradescope, junit.xml, figures) byte for byte."""
    files = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        relative, data = path.relative_to(out).as_posix(), path.read_bytes()
        if relative.startswith("results/"):
            data = comparable(json.loads(data))
        elif relative == ".cache.json":
            data = json.loads(data)
        elif relative == "index.html":
            data = re.sub(rb"<p>Checked in [\d.]+ s\.</p>", b"", data)
        files[relative] = data
    return files


@needs_dask
def test_the_cluster_writes_the_local_graders_reports_though_a_worker_dies_mid_submission(cluster, tmp_path):
    local, client = cluster
    client.wait_for_workers(2, timeout=WORKER_RESTART)
    folder = tmp_path / "class"
    notebooks = mutants.write_class(folder, COUNT)
    assert len(notebooks) == COUNT // 2
    graded_here = grading.grade(folder, tmp_path / "local", jobs=2, timeout=240, pytest_args=SELECTION, progress=False)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(grading.grade, folder, tmp_path / "dask", timeout=240, pytest_args=SELECTION,
                              progress=False, cluster=local.scheduler_address)
        killed_pid, killed_task = kill_a_busy_worker(client, tmp_path / "dask" / "results", running)
        graded_there = running.result(timeout=600)
    assert killed_pid not in client.run(os.getpid).values()  # it died (the nanny started another)
    left = [p for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith(
        (f"{scratch.SUBMISSION}-{killed_pid}-", f"{scratch.WORKER}-{killed_pid}-"))]
    assert not left, f"the killed worker's scratch folders are still there: {left}"
    assert len(killed_task) == 1
    statuses = {r["status"] for r in graded_there.values()}
    assert statuses == {"graded"}, statuses
    assert [comparable(r) for r in graded_there.values()] == [comparable(r) for r in graded_here.values()]
    assert {r["score"] for r in graded_here.values()} != {100.0}  # (the mutants lose marks: a real comparison)
    here, there = report_files(tmp_path / "local"), report_files(tmp_path / "dask")
    assert {"summary.csv", "summary.json", "summary.md", "junit.xml", "index.html", ".cache.json"} <= set(here)
    assert sum(name.startswith(("feedback/", "gradescope/", "results/")) for name in here) == 3 * COUNT
    assert set(there) == set(here)
    for name in here:
        assert there[name] == here[name], name


def die(attempts, *args):
    """In place of the check on a worker: record the try, then kill the worker's own process."""
    with open(attempts, "a") as f:
        f.write(f"{os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGKILL)


@needs_dask
def test_a_submission_whose_worker_dies_is_tried_once_more_then_marked_worker_lost(cluster, tmp_path, monkeypatch):
    local, client = cluster
    client.wait_for_workers(2, timeout=WORKER_RESTART)
    from conformance.grading import cluster as dask_grading
    attempts = tmp_path / "attempts"
    monkeypatch.setattr(dask_grading, "check_shipped", functools.partial(die, attempts))
    folder, out = tmp_path / "class", tmp_path / "out"
    mutants.write(mutants.BY_NAME["attention_unscaled"], folder)
    results = grading.grade(folder, out, pytest_args=SELECTION, progress=False, cluster=local.scheduler_address)
    pids = attempts.read_text().split()
    assert len(pids) == 2 and pids[0] != pids[1]  # tried on two worker processes
    row = results["attention_unscaled"]
    assert (row["status"], row["score"]) == ("worker lost", 0)
    assert "died, on each of 2 tries" in row["reason"]
    with open(out / "summary.csv") as f:
        assert [(r["name"], r["status"], r["score"]) for r in csv.DictReader(f)] == \
            [("attention_unscaled", "worker lost", "0.0")]
    assert json.loads((out / ".cache.json").read_text()) == {"attention_unscaled": None}  # checked again next time
    client.wait_for_workers(2, timeout=WORKER_RESTART)


@needs_dask
def test_a_submission_that_cannot_be_read_gets_a_row_as_without_a_cluster(cluster, tmp_path):
    local, _ = cluster
    package = tmp_path / "class" / "broken_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from .model import *\n")
    (package / "model.py").symlink_to(tmp_path / "nowhere.py")
    rows = [grading.grade(tmp_path / "class", tmp_path / out, pytest_args=SELECTION, progress=False, cluster=address)
            for out, address in (("local", None), ("dask", local.scheduler_address))]
    for results in rows:
        assert results["broken_package"]["status"] == "grader error"
        assert "broken_package/model.py" in results["broken_package"]["reason"]  # the broken link


@needs_dask
def test_an_address_that_is_not_one_stops_the_grader_with_a_message(tmp_path, capsys):
    mutants.write(mutants.BY_NAME["attention_unscaled"], tmp_path / "class")
    code = grading.main([str(tmp_path / "class"), "--out", str(tmp_path / "out"), "--quiet", "--cluster", "nonsense"])
    assert code == 2
    assert "cannot use the Dask cluster 'nonsense'" in capsys.readouterr().err


def test_without_dask_the_runner_works_and_cluster_says_what_to_install(tmp_path, monkeypatch, capsys):
    imported = subprocess.run([sys.executable, "-c", "import sys, conformance.grading.runner; "
                               "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"],
                              capture_output=True, text=True, timeout=120)
    assert imported.stdout.strip() == "[]", imported.stderr
    monkeypatch.setitem(sys.modules, "distributed", None)  # (an import of it raises ImportError)
    monkeypatch.delitem(sys.modules, "conformance.grading.cluster", raising=False)
    monkeypatch.delattr(sys.modules["conformance.grading"], "cluster", raising=False)
    mutants.write(mutants.BY_NAME["attention_unscaled"], tmp_path / "class")
    code = grading.main([str(tmp_path / "class"), "--out", str(tmp_path / "out"), "--quiet", "--cluster", "local:2"])
    assert code == 2
    assert "--cluster needs Dask distributed: pip install -e '.[cluster]'" in capsys.readouterr().err
    assert not (tmp_path / "out" / "results").exists()
