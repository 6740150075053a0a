"""The third-party corpus (``tests/third_party/``, see its README): the vendored implementations, copied into a
scratch folder to be checked (some write beside their files when imported), and the implementation-by-component
matrix of their verdicts.

    python tests/corpus.py [--out reports/third_party] [-n JOBS]   # checks each, writes reports and the matrix
"""
import argparse
import concurrent.futures
import json
import shutil
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conformance.interface import ROLES  # noqa: E402
from tests import answer_keys  # noqa: E402
from conformance.reports import report  # noqa: E402
from conformance.verdicts import SEVERITY  # noqa: E402

CORPUS = ROOT / "tests" / "third_party"
ENTRIES = {e["name"]: e for e in tomllib.loads((CORPUS / "manifest.toml").read_text())["implementation"]}
HELD_TO_KEY = tuple(ENTRIES)
"""The entries ``tests/test_answer_keys.py`` holds to their keys: all of them (what the checker still misses is written
in the key as a ``known_gap`` or ``role_gaps``, a strict xfail; ``python tests/corpus.py`` shows where each stands)."""


def key_path(name):
    return CORPUS / f"{name}.toml"


def materialise(name, scratch):
    """Copy the vendored files of ``name`` under ``scratch/name/`` and return the path ``--impl`` takes there."""
    target = Path(scratch) / name
    shutil.copytree(CORPUS / name, target)
    return target / ENTRIES[name]["impl"]


def check(name, out_dir, timeout=600):
    """The suite's JSON report on corpus entry ``name`` (also written, with its markdown, under ``out_dir``)."""
    with tempfile.TemporaryDirectory(prefix=f"corpus-{name}-") as scratch:
        own = Path(scratch) / "report"  # (two entries may share a file name, transformer.py: no shared partial file)
        path = report(materialise(name, scratch), own, timeout=timeout)
        if path is None:
            raise RuntimeError((own / f"{Path(ENTRIES[name]['impl']).stem}.md").read_text())
        final = Path(out_dir) / f"{name}.json"
        path.replace(final)
        path.with_suffix(".md").replace(final.with_suffix(".md"))
        return json.loads(final.read_text())


def worst(verdicts):
    return max(verdicts, key=lambda v: SEVERITY[v]) if verdicts else ""


def matrix(reports):
    """Markdown: one row per implementation, one column per component, the worst verdict of each cell."""
    lines = ["# Third-party corpus: worst verdict per component", "",
             "Made by `python tests/corpus.py`; the expected results are in `tests/third_party/<name>.toml`. "
             "An empty cell: the implementation has no such role.", "",
             "| implementation | " + " | ".join(ROLES) + " |", "|---" * (len(ROLES) + 1) + "|"]
    for name, data in reports.items():
        if "no_report" in data:
            lines.append(f"| {name} | " + " | ".join(["no report"] * len(ROLES)) + " |")
            continue
        cells = [worst([c["verdict"] for c in data["checks"] if c["component"] == role and c["verdict"] != "missing"])
                 for role in ROLES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def scorecard(name, data):
    """One line judging a report against the entry's key: roles found, listed bugs named, false fail/error."""
    key = answer_keys.read_key(key_path(name))
    roles_found = sum(not answer_keys.role_problems(role, bound, data) for role, bound in key.roles.items())
    bugs = [f for f in key.findings if f.kind in answer_keys.FLAGGED]
    named = sum(not answer_keys.finding_problems(f, data, Path(f.file or ENTRIES[name]["impl"]).name) for f in bugs)
    false = answer_keys.unexplained(key, data)
    return (roles_found, len(key.roles), named, len(bugs), false,
            f"{name}: roles {roles_found}/{len(key.roles)}, bugs named {named}/{len(bugs)}, false fail/error "
            f"{len(false)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "reports" / "third_party"))
    parser.add_argument("-n", "--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start, reports = time.perf_counter(), {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {name: pool.submit(check, name, out) for name in ENTRIES}
        for name, future in futures.items():
            try:
                reports[name] = future.result()
            except RuntimeError as exc:  # the run wrote no report: the matrix says so, the others still count
                reports[name] = {"checks": [], "no_report": str(exc)[-2000:]}
            print(f"{name}: " + (f"no report ({reports[name]['no_report'][-600:]})" if "no_report" in reports[name]
                                 else "checked"), file=sys.stderr)
    cards = [scorecard(name, data) for name, data in reports.items()]
    total = [sum(c[i] for c in cards) for i in range(4)]
    summary = (f"roles found {total[0]}/{total[1]} ({total[0] / total[1]:.0%}), bugs named {total[2]}/{total[3]}, "
               f"false fail/error {sum(len(c[4]) for c in cards)}")
    (out.parent / "third_party.md").write_text(
        matrix(reports) + "\n## Against the expected results\n\n" + "".join(f"- {c[5]}\n" for c in cards)
        + f"\nIn all: {summary}.\n")
    for *_, false, line in cards:
        print(line + "".join(f"\n    {f.splitlines()[0][:240]}" for f in false))
    print(summary)
    print(f"{len(reports)} implementations in {time.perf_counter() - start:.0f} s; matrix: {out.parent / 'third_party.md'}")


if __name__ == "__main__":
    main()
