"""Checking one submission (``check_submission``): a process forked from the worker (``conformance.grading.zygote``)
with its limits, in a scratch folder of its own, beside the judge apart (``conformance.grading.judge``); the report
read as evidence, never trusted; and where submissions run (``Local``, or Dask in ``conformance.grading.cluster``).
Shared by the grader (``conformance.grading.runner``) and the Dask placement, which import it; it imports neither.
"""
import collections
import concurrent.futures
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from conformance.grading import reproductions, scratch
from conformance.grading.assignment import VERDICTS
from conformance.grading.files import read_json
from conformance.contract.verdicts import summary_table

OUTPUT_TAIL = 4000
BIG_OUTPUT = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


# -- the worker -----------------------------------------------------------------------------------------------
class Worker:
    """The forking worker process (``conformance.grading.zygote``) and the answers it sends back."""

    def __init__(self, pytest_args=(), unset=()):
        """``unset``: environment variables the worker must not inherit, besides the checker's own. The scratch
        folders that dead graders left are swept first."""
        scratch.sweep()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CONFORMANCE", "PYTEST", "HYPOTHESIS")) and k not in unset}
        self.home = scratch.folder(scratch.WORKER)
        self.process = subprocess.Popen([sys.executable, "-m", "conformance.grading.zygote", *pytest_args],
                                        cwd=self.home, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                        text=True, start_new_session=True)
        ready = json.loads(self.process.stdout.readline() or "{}")
        if not ready.get("ready"):
            raise RuntimeError("the grading worker did not start (see its messages above)")
        self.nodeids = ready["nodeids"]
        self.pending, self.lock = {}, threading.Lock()
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.process.stdout:
            answer = json.loads(line)
            with self.lock:
                future = self.pending.pop(answer["id"], None)
            if future:
                future.set_result(answer)
        with self.lock:
            for future in self.pending.values():
                future.set_exception(RuntimeError("the grading worker ended"))

    def submit(self, request):
        future = concurrent.futures.Future()
        with self.lock:
            self.pending[request["id"]] = future
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        return future

    def close(self):
        try:
            self.process.stdin.close()
            self.process.wait(timeout=30)
        except Exception:
            os.killpg(self.process.pid, signal.SIGKILL)
        shutil.rmtree(self.home, ignore_errors=True)


# -- one submission ---------------------------------------------------------------------------------------------
def check_submission(worker, name, path, limits, private=(), leftovers=()):
    """Check one submission in its own process; the result dict (verdicts, status, timings). ``leftovers``: more
    folders for the worker to remove if this process dies meanwhile (besides the submission's scratch folder)."""
    folder = Path(scratch.folder(scratch.SUBMISSION))
    try:
        work, report_dir, judge_dir = folder / "work", folder / "report", folder / "judge"
        work.mkdir()
        report_dir.mkdir(mode=0o700)
        judge_dir.mkdir(mode=0o700)
        copy = work / path.name
        (shutil.copytree if path.is_dir() else shutil.copy2)(path, copy)
        nonce = secrets.token_hex(16)
        private = [*private, os.path.join(os.path.realpath(tempfile.gettempdir()), scratch.SUBMISSION + "-")]
        started = time.perf_counter()
        answer = worker.submit(dict(id=secrets.token_hex(8), impl=str(copy), work=str(work),
                                    report_dir=str(report_dir), judge_dir=str(judge_dir), nonce=nonce, args=[],
                                    private=private, scratch=[str(folder), *map(str, leftovers)], **limits)).result()
        result = result_from(name, path, answer, work, report_dir, nonce, worker.nodeids, limits, judge_dir)
        result["wall_s"] = round(time.perf_counter() - started, 3)
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def valid_report(data):
    """The report's checks when it has the expected form (the grader treats it as data), else None."""
    if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
        return None
    fields = ("component", "family", "check", "verdict", "cause", "message", "nodeid")
    checks = []
    for c in data["checks"]:
        if not isinstance(c, dict) or not all(isinstance(c.get(f), str) for f in fields) \
                or c["verdict"] not in VERDICTS:
            return None
        checks.append({f: c[f] for f in fields})
    return checks


NOT_COMPILED = "error.cell_does_not_compile"


def result_from(name, path, answer, work, report_dir, nonce, nodeids, limits, judge_dir):
    """The submission's result from what its processes left: exit status, report, integrity record, output, and
    the verdicts of the checks judged apart (``judge_dir/report.json``, written where its code never ran)."""
    output_file = work / "output.txt"
    size = output_file.stat().st_size if output_file.exists() else 0
    with open(output_file, "rb") if output_file.exists() else open(os.devnull, "rb") as f:
        f.seek(max(0, size - OUTPUT_TAIL))
        tail = f.read().decode(errors="replace").replace(str(work) + os.sep, "")
    integrity = read_json(report_dir / "integrity.json")
    if not isinstance(integrity, dict) or integrity.get("nonce") != nonce:
        integrity = None
    data = read_json(report_dir / "report.json")
    checks = valid_report(data) if integrity else None
    result = dict(name=name, submission=path.name, status="graded", reason="", checks=[], notes=[],
                  output_bytes=size, output_tail=tail, maxrss_mb=round(answer.get("maxrss_mb", 0), 1),
                  cpu_s=round(answer.get("cpu_s", 0), 3),
                  checks_s=round(integrity.get("checks_s", 0), 3) if integrity else None, integrity=integrity,
                  collect_s=round(integrity.get("collect_s", 0), 3) if integrity else None,
                  pe=None)
    code, sig = answer.get("status"), answer.get("signal")
    problems = []
    if answer.get("timed_out"):
        result.update(status="timeout", reason=f"did not finish within {limits['timeout']:g} s; stopped")
    elif sig == signal.SIGXFSZ or size >= limits["output_limit"]:
        result.update(status="output limit", reason=f"printed more than {limits['output_limit'] >> 20} MiB; stopped")
    elif sig is not None:
        signame = signal.Signals(sig).name
        memory = sig == signal.SIGKILL
        result.update(status="out of memory" if memory else "crashed",
                      reason=f"the process was killed ({signame}; memory limit "
                             f"{limits['memory'] >> 20} MiB)" if memory else
                      f"the interpreter crashed ({signame})")
    elif checks is None:
        if "MemoryError" in tail or "DefaultCPUAllocator: can't allocate" in tail:
            result.update(status="out of memory",
                          reason=f"ran out of memory (limit {limits['memory'] >> 20} MiB) before the checks finished")
        else:
            result.update(status="exited", reason=f"the process ended with exit status {code} before the checks "
                                                  "finished (sys.exit, os._exit or a crash at import)")
    if checks is not None:
        apart = {c["nodeid"]: c for c in valid_report(read_json(judge_dir / "report.json")) or []}
        for c in checks:  # (a check the judge could not settle, missing apart, claims nothing: its verdict stands)
            if c["nodeid"] in apart and apart[c["nodeid"]]["verdict"] not in (c["verdict"], "missing"):
                problems.append(f"{c['check']} of {c['component']} is {apart[c['nodeid']]['verdict']} judged apart "
                                f"from the submission's code, but {c['verdict']} beside it")
        failing = any(c["verdict"] in ("fail", "error") for c in checks)  # what the exit status reflects
        expected = set(nodeids)
        counted = collections.Counter(c["nodeid"] for c in checks)
        foreign = sorted(n for n, k in counted.items() if n not in expected or k > 1)
        if foreign:
            problems.append(f"the report holds {len(foreign)} check(s) never collected, or twice ({foreign[0]}, ...)")
        beside = [c for c in checks if c["nodeid"] not in apart and c["nodeid"] in expected]
        apart = {n: c for n, c in apart.items() if n in expected}
        checks = beside + list(apart.values())
        for c in checks:
            c["message"] = c["message"].replace(str(work) + os.sep, "")
        seen = {c["nodeid"] for c in checks}
        absent = [n for n in nodeids if n not in seen]
        for nodeid in absent:
            checks.append(dict(component="model", family="behaviour", check=nodeid.split("::")[-1].split("[")[0],
                               verdict="error", cause="grading.check_did_not_report",
                               message="this check left no verdict (the run was cut short or tampered with)",
                               nodeid=nodeid))
        if integrity["exitstatus"] != code and result["status"] == "graded":
            problems.append(f"the process exit status ({code}) is not the checks' ({integrity['exitstatus']})")
        if code == 0 and failing:
            problems.append("exit status 0 although checks failed")
        result["checks"] = checks
        result["table"] = summary_table(checks)
        result["recipes"] = reproductions.valid_recipes(read_json(report_dir / "recipes.json"))
        result["notes"] = [str(n).replace(str(work) + os.sep, "") for n in data.get("notes", [])
                           if isinstance(n, str)][:40]
        pe = read_json(report_dir / "pe.json")
        if isinstance(pe, list) and pe and all(isinstance(r, list) and len(r) == len(pe[0]) and
                                               all(isinstance(v, (int, float)) for v in r) for r in pe):
            result["pe"] = pe
    if integrity:
        problems += [f"patched {p}" for p in integrity.get("patched", [])]
        problems += [f"comparison canary failed: {p}" for p in integrity.get("canary", [])]
        problems += [f"refused: {e}" for e in integrity.get("events", [])]
        if integrity.get("reference") and result["status"] == "graded" and not problems:
            result.update(status="reference handed in",
                          reason="the submission hands in the reference implementation (imported "
                                 + "; ".join(sorted(set(r.split(": ", 1)[1].removeprefix("builds ")
                                                       for r in integrity["reference"]))[:4])
                                 + ")")
    refused = [f"refused: {e}" for e in integrity.get("processes", [])] if integrity else []
    if refused:
        result["reason"] = "; ".join(filter(None, [result["reason"]] + refused[:4]))
    if problems and result["status"] in ("graded", "exited"):
        result.update(status="tampering detected", reason="; ".join(problems[:8]))
    elif problems:
        result["reason"] += "; also " + "; ".join(problems[:4])
    uncompiled = [c for c in result["checks"] if c["cause"] == NOT_COMPILED]
    if result["status"] == "graded" and uncompiled and all(c["cause"] == NOT_COMPILED for c in result["checks"]
                                                             if c["verdict"] != "missing"):
        where = uncompiled[0]["message"].split("\n")[0].rsplit("so it does not exist: ", 1)[-1]
        result.update(status="error", reason=f"the code does not compile ({where}): none of its checks could run")
    if result["status"] == "graded" and any("MemoryError" in c["message"] or "can't allocate memory" in c["message"]
                                            for c in result["checks"]):
        result["reason"] = f"ran out of memory (limit {limits['memory'] >> 20} MiB) in some checks"
    if size > BIG_OUTPUT and result["status"] == "graded":
        result["reason"] = f"printed {size / (1 << 20):.1f} MiB"
    return result


# -- where submissions run ------------------------------------------------------------------------------------
class SetupError(Exception):
    """The grading cannot start (a cluster that cannot be reached, an extra that is not installed)."""


UNCHECKED = ("grader error", "worker lost", "not graded")
"""The statuses of submissions that were never judged: not cached, checked again by the next run."""


def unchecked(name, path, status, reason):
    """The row of a submission that was never judged."""
    return dict(name=name, submission=path.name, status=status, reason=reason, checks=[], notes=[], output_bytes=0,
                output_tail="", pe=None)


class Placement:
    """Where submissions run: ``submit(name, path, limits, private)`` gives a future of the result dict,
    ``as_completed(futures)`` yields them as they end, ``close()`` ends it all."""

    def failure(self, exc):
        """``(status, reason)`` of a submission whose check raised ``exc``."""
        return "grader error", repr(exc)


class Local(Placement):
    """This machine: one zygote ``Worker``, ``jobs`` submissions at a time (default: every core)."""
    as_completed = staticmethod(concurrent.futures.as_completed)

    def __init__(self, pytest_args, jobs=None):
        self.worker = Worker(pytest_args)
        self.pool = concurrent.futures.ThreadPoolExecutor(jobs or os.cpu_count() or 1)

    def submit(self, name, path, limits, private):
        return self.pool.submit(check_submission, self.worker, name, path, limits, private)

    def close(self):
        self.pool.shutdown(cancel_futures=True)
        self.worker.close()
