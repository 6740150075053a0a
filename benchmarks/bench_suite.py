"""Times the default conformance suite against the floor of importing torch, measured in the same run: on the
reference (in one process and with ``-n 2``), then on each style study (``tests/styles/``), with where the time
went, stage by stage (``benchmarks/stage_timer.py``); with ``--paper-sizes``, the reference at the paper's base
sizes (``benchmarks/paper_sizes.py``) beside its small twin; with ``--fixed-sizes``, the reference built at those
sizes whatever each check asks (``benchmarks/fixed_sizes.py``), as code that fixes its own sizes is.

    python benchmarks/bench_suite.py [--repeat 3] [--impl reference] [--no-studies] [--only NAME ...]
                                     [--studies-jobs N] [--paper-sizes [-k EXPR]] [--fixed-sizes]

Each run prints its wall time and CPU time (all its processes), each with its ratio to the floor's (``python -c
"import torch"``; the machine may be shared: CPU time varies less), and its stages in wall seconds: ``start``
(Python, pytest, torch, hypothesis and the plugin imported), ``collect``, ``load``/``observe``/``discover`` (reading
``--impl``), the checks (each family's in the breakdown of the reference), ``between`` (pytest's work between the
checks) and ``report``. Targets (issue 25): the reference within 5x of the floor, each study within
10 s, the paper's sizes within 2x of the small twin.
"""
import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READING = ("load", "observe", "discover")


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(command, stages_out=None):
    """``(wall seconds, CPU seconds of the command's processes, exit status, {stage: [wall, cpu]} summed over its
    processes)`` of one run of ``command``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (ROOT, os.environ.get("PYTHONPATH")))))
    with tempfile.TemporaryDirectory() as scratch:
        if stages_out:
            env["STAGE_TIMER_OUT"] = os.path.join(scratch, "stages.json")
        cpu, start = children_cpu(), time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall, cpu = time.perf_counter() - start, children_cpu() - cpu
        stages = {}
        for path in glob.glob(os.path.join(scratch, "stages.json*")):
            with open(path) as f:
                for stage, (w, c) in json.load(f).items():
                    stages[stage] = [stages.get(stage, [0, 0])[0] + w, stages.get(stage, [0, 0])[1] + c]
    return wall, cpu, done.returncode, stages


def median_run(command, repeat, stages=True):
    """The run of median wall time among ``repeat`` runs of ``command``."""
    runs = sorted((timed_run(command, stages) for _ in range(repeat)), key=lambda r: r[0])
    return runs[len(runs) // 2]


def suite(impl, *extra):
    return [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", f"--impl={impl}",
            "-p", "benchmarks.stage_timer", *extra]


def grouped(stages):
    """The stages as the table's columns: start, collect, load, observe, discover, checks, between, report."""
    checks = sum(w for s, (w, _) in stages.items() if s.startswith("family:"))
    return [stages.get(s, [0, 0])[0] for s in ("start", "collect", *READING)] + [
        checks, stages.get("between checks", [0, 0])[0], stages.get("report", [0, 0])[0]]


HEADER = (f"{'run':42s} {'wall':>7s} {'floor':>6s} {'CPU':>7s} {'floor':>6s} | {'start':>6s} {'collect':>7s} {'load':>6s} "
          f"{'observe':>7s} {'discover':>8s} {'checks':>7s} {'between':>7s} {'report':>6s}")


def row(name, run, floor):
    """A run's line: wall seconds and their ratio to the floor's, CPU seconds and theirs, then its stages."""
    wall, cpu, status, stages = run
    cells = " ".join(f"{v:{w}.2f}" for v, w in zip(grouped(stages), (6, 7, 6, 7, 8, 7, 7, 6)))
    flag = "" if status == 0 else f"   exit {status}"
    return f"{name:42s} {wall:7.2f} {wall / floor[0]:5.1f}x {cpu:7.2f} {cpu / floor[1]:5.1f}x | {cells}{flag}"


def families(stages):
    """``family seconds`` of each family of checks, longest first."""
    found = sorted(((s.removeprefix("family:"), w) for s, (w, _) in stages.items() if s.startswith("family:")),
                   key=lambda f: -f[1])
    return "  ".join(f"{name} {seconds:.2f}" for name, seconds in found)


def time_studies(floor, only, jobs):
    sys.path.insert(0, ROOT)
    from tests import studies
    names = [n for n in studies.STUDIES if not only or n in only]
    print(f"\nthe suite once on each style study ({'-n %d' % jobs if jobs > 1 else 'one process'}; target: within "
          "10 s)")
    print(HEADER)
    walls = []
    for name in names:
        with tempfile.TemporaryDirectory() as scratch:
            impl = studies.materialise(name, scratch)
            run = timed_run(suite(impl, *(["-n", str(jobs)] if jobs > 1 else ["-p", "no:xdist"])), True)
        walls.append(run[0])
        print(row(name, run, floor) + ("   OVER 10 s" if run[0] > 10 else ""))
    if walls:
        print(f"{'studies: wall median, max':42s} {statistics.median(walls):7.2f} {max(walls):7.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--impl", default="reference")
    parser.add_argument("--no-studies", action="store_true", help="skip the runs on the style studies")
    parser.add_argument("--only", nargs="*", help="only these style studies")
    parser.add_argument("--studies-jobs", type=int, default=1, help="xdist workers for each study (1: none)")
    parser.add_argument("--paper-sizes", action="store_true",
                        help="also the reference at the paper's base sizes beside its small twin (minutes)")
    parser.add_argument("-k", dest="keyword", help="with --paper-sizes: only the checks pytest's -k selects")
    parser.add_argument("--fixed-sizes", action="store_true",
                        help="also the reference built at the paper's sizes whatever a check asks")
    args = parser.parse_args()
    floors = [timed_run([sys.executable, "-c", "import torch"]) for _ in range(args.repeat)]
    floor = (statistics.median(f[0] for f in floors), statistics.median(f[1] for f in floors))
    print(f"conformance suite on --impl={args.impl}, median of {args.repeat} runs, {os.cpu_count()} cores, load "
          f"average {os.getloadavg()[0]:.1f}, PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')}")
    print(f"floor: python -c 'import torch' {floor[0]:.2f} s wall, {floor[1]:.2f} s CPU (below: the wall seconds of each "
          "run and their ratio to the floor's; the CPU seconds of all its processes and theirs; its stages, wall)")
    print(HEADER)
    serial = median_run(suite(args.impl, "-p", "no:xdist"), args.repeat)
    print(row("suite, one process (-p no:xdist)", serial, floor))
    print(row("suite, -n 2", median_run(suite(args.impl, "-n", "2"), args.repeat), floor))
    print(f"  checks by family, one process: {families(serial[3])}")
    if args.paper_sizes:
        selected = ["-k", args.keyword] if args.keyword else []
        small = timed_run(suite(args.impl, "-p", "no:xdist", *selected), True)
        paper = timed_run(suite(args.impl, "-p", "no:xdist", "-p", "benchmarks.paper_sizes", *selected), True)
        print(f"\nthe paper's base sizes (d_model 512, h 8, d_ff 2048, N 6) beside the drawn small ones, one process"
              f"{' -k ' + repr(args.keyword) if args.keyword else ''} (target: within 2x)")
        print(HEADER)
        print(row("drawn sizes", small, floor))
        print(row("paper's sizes", paper, floor) + f"   {paper[0] / small[0]:.1f}x the drawn sizes")
        print(f"  checks by family, paper's sizes: {families(paper[3])}")
    if args.fixed_sizes:
        fixed = timed_run(suite(args.impl, "-p", "no:xdist", "-p", "benchmarks.fixed_sizes"), True)
        print("\nbuilt at the paper's base sizes whatever a check asks (code fixing its own sizes: the checker "
              "finds it out and says so), one process")
        print(HEADER)
        print(row("sizes of its own", fixed, floor) + f"   {fixed[0] / serial[0]:.1f}x the suite at drawn sizes")
    if not args.no_studies:
        time_studies(floor, args.only, args.studies_jobs)


if __name__ == "__main__":
    main()
