"""Times the full default conformance suite on the reference, against the floor of importing torch, then once on
each style study (``tests/styles/``).

    python benchmarks/bench_suite.py [--repeat 3] [--impl reference] [--no-studies]

Prints the floor (``python -c "import torch"``), the suite serial and with ``-n 2``, and their ratios to the
floor; then the suite with ``-n 2`` on each style study (from a scratch copy), with its exit status (a finding
makes it 1). Targets: the suite under 30 s on 2 cores and under 10x the floor (issue 4); each study under 30 s on
2 cores (issue 13).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wall_time(command, repeat, check=True):
    """Median wall time of ``command`` over ``repeat`` runs (with ``check``, each must succeed) and the last exit
    status."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, check=check, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times), done.returncode


def time_studies():
    """The suite with ``-n 2`` on each style study, from a scratch copy: ``[(name, seconds, status)]``."""
    sys.path.insert(0, ROOT)
    from tests import studies
    rows = []
    for name in studies.STUDIES:
        with tempfile.TemporaryDirectory() as scratch:
            impl = studies.materialise(name, scratch)
            seconds, status = wall_time([sys.executable, "-m", "pytest", "conformance", "-q", f"--impl={impl}",
                                         "-n", "2"], 1, check=False)
        rows.append((name, seconds, status))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--impl", default="reference")
    parser.add_argument("--no-studies", action="store_true", help="skip the runs on the style studies")
    args = parser.parse_args()
    suite = [sys.executable, "-m", "pytest", "conformance", "-q", f"--impl={args.impl}"]
    floor = wall_time([sys.executable, "-c", "import torch"], args.repeat)[0]
    rows = [("floor: python -c 'import torch'", floor),
            ("suite, one process (-p no:xdist)", wall_time(suite + ["-p", "no:xdist"], args.repeat)[0]),
            ("suite, -n 2", wall_time(suite + ["-n", "2"], args.repeat)[0])]
    print(f"conformance suite on --impl={args.impl}, median of {args.repeat} runs, {os.cpu_count()} cores")
    for name, seconds in rows:
        print(f"{name:40s} {seconds:7.2f} s   {seconds / floor:5.1f}x floor")
    if not args.no_studies:
        print("\nthe suite (-n 2) once on each style study (target: under 30 s)")
        for name, seconds, status in time_studies():
            print(f"{name:40s} {seconds:7.2f} s   exit {status}{'   OVER 30 s' if seconds > 30 else ''}")


if __name__ == "__main__":
    main()
