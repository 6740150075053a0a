"""Times the full default conformance suite on the reference, against the floor of importing torch.

    python benchmarks/bench_suite.py [--repeat 3] [--impl reference]

Prints the floor (``python -c "import torch"``), the suite serial and with ``-n 2``, and their ratios to the
floor. Targets (issue 4): the suite under 30 s on 2 cores and under 10x the floor.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wall_time(command, repeat):
    """Median wall time of ``command`` over ``repeat`` runs; the command must succeed."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--impl", default="reference")
    args = parser.parse_args()
    suite = [sys.executable, "-m", "pytest", "conformance", "-q", f"--impl={args.impl}"]
    floor = wall_time([sys.executable, "-c", "import torch"], args.repeat)
    rows = [("floor: python -c 'import torch'", floor),
            ("suite, one process (-p no:xdist)", wall_time(suite + ["-p", "no:xdist"], args.repeat)),
            ("suite, -n 2", wall_time(suite + ["-n", "2"], args.repeat))]
    print(f"conformance suite on --impl={args.impl}, median of {args.repeat} runs, {os.cpu_count()} cores")
    for name, seconds in rows:
        print(f"{name:40s} {seconds:7.2f} s   {seconds / floor:5.1f}x floor")


if __name__ == "__main__":
    main()
