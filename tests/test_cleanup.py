"""A grader that dies leaves nothing running and no scratch folder behind (issue 24): its zygote ends the checks
still running and removes their folders when the grader is killed with SIGKILL (a Dask worker lost); a zygote
killed with SIGKILL takes its children with it; the next grader sweeps the folders of dead processes."""
import concurrent.futures
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.grading import checking as grading
from conformance.grading import scratch

ROOT = Path(__file__).resolve().parents[1]
SELECTION = ["-m", "multi_head_attention"]
LIMITS = dict(timeout=300.0, memory=2 << 30, output_limit=64 << 20)
GRADER = """
import sys
from pathlib import Path
from conformance.grading import checking
worker = checking.Worker({selection!r})
print(worker.process.pid, flush=True)
checking.check_submission(worker, "slow", Path(sys.argv[1]), {limits!r})
"""


def running(pid):
    """Whether ``pid`` is a live process (a zombie waiting for its parent is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def children(pid):
    """The pids whose parent is ``pid`` and that lead a session of their own (a zygote's children)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if entry.name.isdigit() and int(fields[1]) == pid and int(fields[3]) == int(entry.name):
            found.append(int(entry.name))
    return found


def ours(folder):
    """The grader's scratch folders in ``folder`` (torch keeps a cache of its own in the temporary directory)."""
    return [p for p in folder.iterdir() if scratch.OWNED.match(p.name)]


def until(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what()
        time.sleep(0.1)


@pytest.fixture
def slow(tmp_path):
    """A submission whose import leaves a mark in its folder, then sleeps: its checks are still running when a
    process is killed."""
    path = tmp_path / "slow.py"
    path.write_text("import time\nopen('started', 'w').close()\ntime.sleep(120)\n")
    return path


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_grader_leaves_no_check_running_and_no_scratch_folder(tmp_path, slow):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp), PYTHONPATH=str(ROOT))
    grader = subprocess.Popen([sys.executable, "-c", GRADER.format(selection=SELECTION, limits=LIMITS), str(slow)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        zygote = int(grader.stdout.readline())
        until(lambda: len(children(zygote)) == 2 and any(temp.glob("grade-*/work/started")), 120,
              lambda: f"the child and judge of the slow submission did not start: {children(zygote)}")
        checks = children(zygote)
        assert sorted(p.name.split("-")[0] for p in ours(temp)) == ["grade", "grader"]
        grader.send_signal(signal.SIGKILL)
        grader.wait()
        until(lambda: not any(map(running, [zygote, *checks])), 10,
              lambda: f"still running: {[p for p in [zygote, *checks] if running(p)]}")
        until(lambda: not ours(temp), 5, lambda: f"left behind: {ours(temp)}")
    finally:
        if grader.poll() is None:
            grader.kill()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_zygote_takes_its_checks_with_it_and_the_grader_removes_their_folder(slow, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    worker = grading.Worker(SELECTION)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            checked = pool.submit(grading.check_submission, worker, "slow", slow, LIMITS)
            zygote = worker.process.pid
            until(lambda: len(children(zygote)) == 2 and any(tmp_path.glob("grade-*/work/started")), 120,
                  lambda: "the slow submission's checks did not start")
            checks = children(zygote)
            assert len(list(tmp_path.glob("grade-*"))) == 1
            os.kill(zygote, signal.SIGKILL)
            with pytest.raises(RuntimeError, match="the grading worker ended"):
                checked.result(timeout=10)
        until(lambda: not any(map(running, checks)), 10, lambda: "a check outlived its zygote")
        assert not list(tmp_path.glob("grade-*"))
    finally:
        worker.close()
    assert not list(tmp_path.glob("grader-worker-*"))


def test_the_next_grader_sweeps_the_folders_of_dead_processes_only(tmp_path):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(ended.stdout)
    left = [tmp_path / f"grade-{dead}-x1", tmp_path / f"grader-worker-{dead}-x2"]
    kept = [tmp_path / f"grade-{os.getpid()}-x3", tmp_path / f"grade-nopid-x4", tmp_path / f"other-{dead}-x5"]
    for folder in left + kept:
        (folder / "work").mkdir(parents=True)
    assert sorted(scratch.sweep(tmp_path)) == sorted(p.name for p in left)
    assert sorted(tmp_path.iterdir()) == sorted(kept)
