"""The grader's worker: a process that imports torch, pytest, hypothesis and the checker once, then forks one child
per submission, so a submission costs its checks and almost nothing else (``python -m conformance.grading.zygote``).

Protocol: one JSON request per line on stdin, ``{"id", "impl", "work", "report_dir", "judge_dir", "timeout",
"memory", "output_limit", "nonce", "args", "scratch"}``; one JSON answer per line on the original stdout when the
child and its judge have ended, ``{"id", "status", "signal", "timed_out", "wall_s", "maxrss_mb", "cpu_s"}`` (the
child's, but ``cpu_s``: the CPU seconds of the child and its judge together; the judge's verdicts are in its
report). The first line it writes is
``{"ready": true, "nodeids": [...]}``: the checks collected (with the grading's pytest arguments, given as
``argv[1:]``), which the grader expects to find in every report.

The worker ends with its grader: when its parent process dies (a Dask worker killed), it kills the children still
running, removes its home (the folder it was started in, which the grader made for it) and the ``scratch`` folders
of their requests, and exits; each child asks Linux to kill it
when the worker dies (``conformance.grading.scratch``).

A child starts its own session (its process group is killed when it ends or runs past its time), gets an address
space limit (``memory`` bytes beyond what the worker had mapped), a file size limit, stdout and stderr redirected to ``work/output.txt``, ``work`` as its directory,
HOME and TMPDIR, and ``conformance.grading.integrity`` armed before pytest runs. Beside it, a second child, the *judge*,
runs the checks judged apart (``conformance.grading.judge``) in ``judge_dir`` against the roles the first one serves over a
socket pair: the judge never loads the submission's code.
"""
import gc
import json
import os
import resource
import select
import shutil
import signal
import socket
import sys
import time

import numpy  # noqa: F401  (imported once here, shared by every child)
import pytest
import torch
import hypothesis.configuration

import conformance.plugin  # noqa: F401
from conformance.hypothesis_setup import function_digest
from conformance.grading import integrity, scratch
import adapters.binding  # noqa: F401
import adapters.loading  # noqa: F401

PYTEST_BASE = ["--pyargs", "conformance", "-q", "-p", "no:cacheprovider", "-p", "_hypothesis_pytestplugin",
               "-p", "conformance.plugin", "-p", "conformance.grading.judge", "-p", "conformance.grading.integrity",
               "-W", "ignore::pytest.PytestAssertRewriteWarning",
               "-p", "no:unraisableexception",  # its cleanup collects garbage again and again: seconds a child
               "-p", "no:logging"]  # (it captures the log records of every phase of every check: nothing reads them)


class Collector:
    def __init__(self):
        self.nodeids = []

    def pytest_collection_finish(self, session):
        self.nodeids = [item.nodeid for item in session.items]
        for item in session.items:  # hypothesis's seeds of the checks, computed once for every child
            inner = getattr(getattr(getattr(item, "obj", None), "hypothesis", None), "inner_test", None)
            if inner is not None:
                inner._hypothesis_internal_add_digest = item.nodeid.encode()  # (as its pytest plugin will)
                function_digest(inner)


def collect(args):
    collector = Collector()
    saved = os.dup(1), os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            pytest.main([*PYTEST_BASE, "--collect-only", *args], plugins=[collector])
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return collector.nodeids


WORKER_PID = None
"""The worker's pid, which its children compare with their parent's (a worker that died as they were forked)."""


def start(folder, answers, other):
    """In a forked child: killed when the worker dies, its own session, out of the worker's pipes (``other``: the
    socket end it must not hold), stdout and stderr into ``folder/output.txt``."""
    scratch.die_with_parent()
    if os.getppid() != WORKER_PID:
        integrity._real_exit(75)
    os.setsid()
    os.close(answers)  # (requests is fd 0, replaced by /dev/null below)
    other.close()
    os.close(signal.set_wakeup_fd(-1))  # the worker's wake-up pipe: not the child's business
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    out = os.open(os.path.join(folder, "output.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)


def leave(code):
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        integrity._real_exit(code)


def run_judge(request, answers, mine, other):
    """In the forked judge: run the checks judged apart against the roles served on socket ``mine``."""
    code = 71
    try:
        folder = os.path.realpath(request["judge_dir"])
        start(folder, answers, other)
        os.chdir(folder)
        hypothesis.configuration.set_hypothesis_home_dir(os.path.join(folder, ".hypothesis"))
        code = int(pytest.main([*PYTEST_BASE, f"--impl=remote:{mine.fileno()}", "--judged-apart=only",
                                f"--report-json={os.path.join(folder, 'report.json')}", *request["args"]]))
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 73
    finally:
        leave(code)


def child(request, answers, mine, other):
    """In the forked child: isolate, arm the integrity plugin, serve the judge on socket ``mine``, run pytest,
    leave with its exit code."""
    code = 71
    try:
        work = os.path.realpath(request["work"])
        start(work, answers, other)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # (Python ignores it): past the output limit, the run stops
        limit = int(request["output_limit"])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        memory = int(request["memory"])
        if memory > 0:  # on top of what the worker had mapped already (torch alone maps gigabytes of address space)
            with open("/proc/self/statm") as f:
                mapped = int(f.read().split()[0]) * resource.getpagesize()
            resource.setrlimit(resource.RLIMIT_AS, (mapped + memory, mapped + memory))
        os.chdir(work)
        os.environ.update(HOME=work, TMPDIR=work, TMP=work, TEMP=work)
        import tempfile
        tempfile.tempdir = None
        hypothesis.configuration.set_hypothesis_home_dir(os.path.join(work, ".hypothesis"))
        integrity.ARMED = {"work": work, "report_dir": os.path.realpath(request["report_dir"]),
                           "nonce": request["nonce"], "private": request.get("private", [])}
        report = os.path.join(request["report_dir"], "report.json")
        code = pytest.main([*PYTEST_BASE, f"--impl={request['impl']}", f"--report-json={report}",
                            f"--serve-judge={mine.fileno()}", "--judged-apart=skip", *request["args"]])
        code = int(code)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 72
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 73
    finally:
        leave(code)


def kill(pid):
    """SIGKILL the session of ``pid`` (a child or a judge), or ``pid`` itself where it has none yet."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def abandon(running, home):
    """The grader died: end the checks still running, remove their scratch folders and the worker's home, exit."""
    for pid, job in running.items():
        kill(pid)
        kill(job["judge"])
    for pid, job in running.items():
        for process in (pid, job["judge"]):
            try:
                os.waitpid(process, 0)
            except ChildProcessError:
                pass
        for folder in job["request"].get("scratch", []):
            shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    integrity._real_exit(0)


def main():
    global WORKER_PID
    args = sys.argv[1:]
    WORKER_PID, grader = os.getpid(), os.getppid()
    home = os.getcwd()
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only the plugins named above: no entry-point scan, no extras
    torch.set_num_threads(1)
    requests = sys.stdin.fileno()
    answers = os.dup(1)
    os.dup2(2, 1)  # anything printed here goes to stderr, never into the answers
    os.set_blocking(requests, False)

    def answer(data):
        line = (json.dumps(data) + "\n").encode()
        while line:
            line = line[os.write(answers, line):]

    wake, woken = os.pipe()
    for fd in (wake, woken):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(woken)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # (a handler, so that the signal writes to the wake-up pipe)
    nodeids = collect(args)
    integrity.canaries()  # their first call imports much of torch (torch.testing): once here, not in every child
    integrity.STATE["canary"].clear()
    gc.collect()
    gc.freeze()  # what is imported stays out of every child's collections (and its pages stay shared)
    answer({"ready": True, "nodeids": nodeids})
    running, judges, ended, buffer, closed = {}, {}, {}, b"", False
    while running or not closed:
        if os.getppid() != grader:
            abandon(running, home)
        ready, _, _ = select.select([wake] if closed else [requests, wake], [], [], 0.1)
        if wake in ready:  # a child ended (SIGCHLD): its answer goes out now, not at the next poll
            try:
                while os.read(wake, 4096):
                    pass
            except BlockingIOError:
                pass
        if requests in ready:
            chunk = os.read(requests, 65536)
            closed = not chunk
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                request["args"] = args + request.get("args", [])
                beside, apart = socket.socketpair()
                pid = os.fork()
                if pid == 0:
                    child(request, answers, beside, apart)
                judge_pid = os.fork()
                if judge_pid == 0:
                    run_judge(request, answers, apart, beside)
                beside.close()
                apart.close()
                running[pid] = dict(request=request, start=time.monotonic(), timed_out=False, judge=judge_pid)
                judges[judge_pid] = pid
        while running:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            try:
                os.killpg(pid, signal.SIGKILL)  # whatever it left behind in its session
            except (ProcessLookupError, PermissionError):
                pass
            ended[pid] = (status, usage)
            child_pid = judges.get(pid, pid)
            job = running.get(child_pid)
            if job is None or child_pid not in ended or job["judge"] not in ended:
                continue  # (its partner still runs)
            del running[child_pid], judges[job["judge"]]
            status, usage = ended.pop(child_pid)
            judge_usage = ended.pop(job["judge"])[1]
            answer({"id": job["request"]["id"], "pid": child_pid,
                    "status": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                    "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                    "timed_out": job["timed_out"], "wall_s": time.monotonic() - job["start"],
                    "maxrss_mb": usage.ru_maxrss / 1024,
                    "cpu_s": sum(u.ru_utime + u.ru_stime for u in (usage, judge_usage))})
        now = time.monotonic()
        for pid, job in running.items():
            if not job["timed_out"] and now - job["start"] > float(job["request"]["timeout"]):
                job["timed_out"] = True
                kill(pid)
                kill(job["judge"])


if __name__ == "__main__":
    main()
