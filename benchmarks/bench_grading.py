"""Throughput of ``python -m conformance grade``: a class of 50 submissions (the reference and the buggy variants of
``tests/mutants.py``, half as .py files, half as notebooks) graded with every core, against the time to merely
execute the same notebooks with ``jupyter nbconvert --execute`` (``pip install nbconvert ipykernel``).

    python benchmarks/bench_grading.py [--count 50] [--jobs N] [--baseline REV] [--cluster local:2] [-- PYTEST ARGS]

The grader runs as the command line does, in a process of its own, so that the CPU time of everything it starts
(its worker, each submission's two processes) is counted as well as the wall time: CPU seconds hold still when
other work shares the machine, wall seconds do not. Prints the total wall and CPU time, the mean per-submission
overhead beyond the checks themselves (a submission's wall time in the grader minus the time its pytest session
ran, and the same with pytest's collection counted as overhead), the nbconvert times, and the ratio of grading a
submission to executing a notebook (the issue's measure: within 0.5x).

``--baseline REV`` grades the same class with the checker of another revision (a git revision of this repository,
or a folder holding the checker), in the same run, and says whether every submission's status, score and verdicts
(check by check, with their causes) are the same. With ``--cluster ADDRESS`` the same class is graded on Dask too
(``grade --cluster``, starting the LocalCluster counted) and both throughputs are printed with the cluster's cost
against the local grader.
"""
import argparse
import concurrent.futures
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from conformance.grading import runner as grading  # noqa: E402
from tests import mutants  # noqa: E402


def children_cpu():
    """CPU seconds (user and system) of this process's ended children and everything they waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def grade_with(tree, folder, out, jobs, pytest_args):
    """Grade ``folder`` with the checker at ``tree`` in a process of its own, as ``python -m conformance grade``
    does: ``(wall s, CPU s, {name: result})``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    command = [sys.executable, "-m", "conformance", "grade", str(folder), "--out", str(out), "--force", "--quiet",
               "--jobs", str(jobs), *pytest_args]
    cpu, started = children_cpu(), time.perf_counter()
    subprocess.run(command, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    wall, cpu = time.perf_counter() - started, children_cpu() - cpu
    return wall, cpu, {p.stem: json.loads(p.read_text()) for p in sorted((out / "results").glob("*.json"))}


def checkout(revision, into):
    """The checker's tree at ``revision``: the folder itself if it is one, else ``git archive`` of the revision
    unpacked into ``into``."""
    if Path(revision).is_dir():
        return Path(revision).resolve()
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def outcome(result):
    """What grading decided about a submission: status, score and each check's verdict and cause."""
    return result["status"], result.get("score"), sorted((c["nodeid"], c["verdict"], c["cause"])
                                                         for c in result.get("checks", []))


def differences(results, others):
    """The names of the submissions whose outcome differs between two gradings of the same class."""
    return sorted(n for n in results.keys() | others.keys()
                  if n not in results or n not in others or outcome(results[n]) != outcome(others[n]))


def describe(label, wall, cpu, results, jobs):
    graded = [r for r in results.values() if r.get("checks_s") is not None]
    statuses = {}
    for r in results.values():
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    overhead = [r["wall_s"] - r["checks_s"] for r in graded]
    with_collection = [r["wall_s"] - r["checks_s"] + (r.get("collect_s") or 0) for r in graded]
    print(f"{label}: graded {len(results)} submissions with {jobs} jobs in {wall:.1f} s "
          f"({wall / len(results):.2f} s per submission), {cpu:.1f} CPU s ({cpu / len(results):.2f} per submission); "
          f"statuses {statuses}")
    if graded:
        print(f"  checks alone: mean {statistics.mean(r['checks_s'] for r in graded):.2f} s per submission; "
              f"overhead beyond the checks: mean {statistics.mean(overhead):.3f} s, "
              f"median {statistics.median(overhead):.3f} s, max {max(overhead):.3f} s; counting pytest's "
              f"collection as overhead too: mean {statistics.mean(with_collection):.3f} s")
    spent = [r["cpu_s"] for r in results.values() if r.get("cpu_s")]
    if spent:  # (a checker that reports it: the child's and its judge's CPU time)
        print(f"  CPU: {statistics.mean(spent):.2f} s a submission in its two processes (the checks beside its code "
              f"and the judge apart), {(cpu - sum(spent)) / len(results):.2f} s in the grader and its worker")


def nbconvert(path, out):
    jupyter = Path(sys.executable).with_name("jupyter")
    command = [str(jupyter) if jupyter.exists() else "jupyter", "nbconvert", "--to", "notebook", "--execute",
               "--output-dir", str(out), str(path)]
    return subprocess.run(command, capture_output=True, text=True).returncode


def on_cluster(root, address, results, wall, jobs, pytest_args):
    """The same class graded on Dask (in this process), its throughput against the local grading's."""
    started = time.perf_counter()
    there = grading.grade(root / "class", root / "out-cluster", pytest_args=pytest_args, force=True,
                          cluster=address, progress=False)
    elapsed = time.perf_counter() - started
    print(f"local ({jobs} jobs): {len(results) / wall:.3f} submissions/s; --cluster {address}: "
          f"{len(there) / elapsed:.3f} submissions/s ({elapsed:.1f} s); the cluster costs "
          f"{100 * (elapsed - wall) / wall:+.1f} % against local; same statuses and scores: "
          f"{not differences(results, there)}; load average after: {os.getloadavg()[0]:.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--no-nbconvert", action="store_true")
    parser.add_argument("--baseline", metavar="REV", help="grade the class with this revision's checker too "
                                                          "(a git revision or a folder) and compare")
    parser.add_argument("--cluster", help="grade the class on Dask too: local:N or a scheduler's address")
    args, pytest_args = parser.parse_known_args()
    pytest_args = [a for a in pytest_args if a != "--"]
    root = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    try:
        notebooks = mutants.write_class(root / "class", args.count)
        per_submission = {}
        if args.baseline:
            tree = checkout(args.baseline, root / "baseline")
            wall, cpu, before = grade_with(tree, root / "class", root / "out-baseline", args.jobs, pytest_args)
            describe(f"baseline {args.baseline}", wall, cpu, before, args.jobs)
            per_submission["baseline"] = (wall / len(before), cpu / len(before))
        wall, cpu, results = grade_with(ROOT, root / "class", root / "out", args.jobs, pytest_args)
        describe("this tree", wall, cpu, results, args.jobs)
        per_submission["this tree"] = (wall / len(results), cpu / len(results))
        if args.baseline:
            changed = differences(results, before)
            print(f"same statuses, scores and verdicts (with their causes) as the baseline: {not changed}"
                  + (f"; differ: {', '.join(changed[:10])}" if changed else ""))
        if args.cluster:
            on_cluster(root, args.cluster, results, wall, args.jobs, pytest_args)
        if args.no_nbconvert:
            return
        cpu, started = children_cpu(), time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            codes = list(pool.map(lambda p: nbconvert(p, root / "executed"), notebooks))
        executed, cpu = time.perf_counter() - started, children_cpu() - cpu
        if not codes.count(0):
            print("jupyter nbconvert executed no notebook (pip install nbconvert ipykernel): no comparison")
            return
        print(f"jupyter nbconvert --execute of the {len(notebooks)} notebooks alone ({args.jobs} at a time): "
              f"{executed:.1f} s ({executed / len(notebooks):.2f} s per notebook), {cpu:.1f} CPU s "
              f"({cpu / len(notebooks):.2f} per notebook); {codes.count(0)} succeeded")
        for label, (wall, cpu_each) in per_submission.items():
            print(f"grading a submission against executing a notebook, {label}: "
                  f"{wall / (executed / len(notebooks)):.2f}x wall, {cpu_each / (cpu / len(notebooks)):.2f}x CPU")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
