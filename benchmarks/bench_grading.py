"""Throughput of ``python -m conformance grade``: a class of 50 submissions (the reference and the buggy variants of
``tests/mutants.py``, half as .py files, half as notebooks) graded with every core, against the time to merely
execute the same notebooks with ``jupyter nbconvert --execute`` (``pip install nbconvert ipykernel``).

    python benchmarks/bench_grading.py [--count 50] [--jobs N] [--cluster local:2] [-- PYTEST ARGS, e.g. -m ...]

Prints the total wall time, the mean per-submission overhead beyond the checks themselves (a submission's wall
time in the grader minus the time its pytest session ran, and the same with pytest's collection counted as
overhead), and the nbconvert times. With ``--cluster ADDRESS`` the same class is graded on Dask too (``grade
--cluster``, starting the LocalCluster counted) and both throughputs are printed with the cluster's cost against
the local grader.
"""
import argparse
import concurrent.futures
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conformance.grading import runner as grading  # noqa: E402
from tests import mutants  # noqa: E402


def nbconvert(path, out):
    command = ["jupyter", "nbconvert", "--to", "notebook", "--execute", "--output-dir", str(out), str(path)]
    return subprocess.run(command, capture_output=True, text=True).returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--no-nbconvert", action="store_true")
    parser.add_argument("--cluster", help="grade the class on Dask too: local:N or a scheduler's address")
    args, pytest_args = parser.parse_known_args()
    pytest_args = [a for a in pytest_args if a != "--"]
    root = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    try:
        notebooks = mutants.write_class(root / "class", args.count)
        started = time.perf_counter()
        results = grading.grade(root / "class", root / "out", jobs=args.jobs, pytest_args=pytest_args, force=True)
        total, load = time.perf_counter() - started, os.getloadavg()[0]
        graded = [r for r in results.values() if r.get("checks_s") is not None]
        overhead = [r["wall_s"] - r["checks_s"] for r in graded]
        with_collection = [r["wall_s"] - r["checks_s"] + (r.get("collect_s") or 0) for r in graded]
        statuses = {}
        for r in results.values():
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        print(f"graded {len(results)} submissions ({len(notebooks)} notebooks) with {args.jobs} jobs "
              f"{' '.join(pytest_args)}: {total:.1f} s in all ({total / len(results):.2f} s per submission); "
              f"statuses {statuses}")
        print(f"checks alone: mean {statistics.mean(r['checks_s'] for r in graded):.2f} s per submission; "
              f"overhead beyond the checks: mean {statistics.mean(overhead):.3f} s, "
              f"median {statistics.median(overhead):.3f} s, max {max(overhead):.3f} s; counting pytest's collection "
              f"as overhead too: mean {statistics.mean(with_collection):.3f} s")
        if args.cluster:
            started = time.perf_counter()
            there = grading.grade(root / "class", root / "out-cluster", pytest_args=pytest_args, force=True,
                                  cluster=args.cluster)
            on_cluster = time.perf_counter() - started
            same = [(r["status"], r["score"]) for r in there.values()] == [(r["status"], r["score"])
                                                                          for r in results.values()]
            print(f"local ({args.jobs} jobs): {len(results) / total:.3f} submissions/s; --cluster {args.cluster}: "
                  f"{len(there) / on_cluster:.3f} submissions/s ({on_cluster:.1f} s); the cluster costs "
                  f"{100 * (on_cluster - total) / total:+.1f} % against local; same statuses and scores: {same}")
            print(f"checks alone: mean {statistics.mean(r['checks_s'] for r in graded):.2f} s here, "
                  f"{statistics.mean(r['checks_s'] for r in there.values() if r.get('checks_s') is not None):.2f} s "
                  f"on the cluster; load average after each: {load:.1f}, {os.getloadavg()[0]:.1f} "
                  f"(other work on the machine slows either)")
        if not args.no_nbconvert and shutil.which("jupyter"):
            started = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                codes = list(pool.map(lambda p: nbconvert(p, root / "executed"), notebooks))
            executed = time.perf_counter() - started
            print(f"jupyter nbconvert --execute of the {len(notebooks)} notebooks alone ({args.jobs} at a time): "
                  f"{executed:.1f} s ({executed / len(notebooks):.2f} s per notebook, {codes.count(0)} succeeded); "
                  f"grading took {total / len(results):.2f} s per submission")
        elif not args.no_nbconvert:
            print("jupyter is not installed (pip install nbconvert ipykernel): no nbconvert comparison")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
