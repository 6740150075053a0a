"""A developer's tool: run the checker on the public implementations checked out in the ignored scratch folder and
count what it claims about them. Nothing in CI or the tests needs it: fetched code is never committed.

    python benchmarks/score_public.py [--scratch scratch] [--out DIR] [--only NAME ...] [PATH ...]

A checkout is a folder ``scratch/<owner>+<name>/`` (for example ``git --git-dir <fetched repo> archive HEAD | tar -x
-C scratch/<owner>+<name>``). For a repository listed in ``benchmarks/public/manifest.toml`` the checker is pointed
at the path recorded there and the report is held to the repository's key (``benchmarks/public/<name>.toml``: roles
found, bugs named, fail/error the key does not explain). Any other checkout, or a PATH given on the command line, is
checked as a whole folder and every fail or error is listed, one line each, to be read by a person: on code nobody
here has keyed, each is either a real bug or a false alarm.
"""
import argparse
import collections
import json
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conformance.reports import report  # noqa: E402
from tests import answer_keys  # noqa: E402

PUBLIC = ROOT / "benchmarks" / "public"
MANIFEST = {e["repo"].replace("/", "+"): e for e in tomllib.loads((PUBLIC / "manifest.toml").read_text())["implementation"]}


def subjects(scratch, only, paths):
    """``[(label, path to check, manifest entry or None)]`` for the checkouts in ``scratch`` and the extra paths."""
    found = []
    for folder in sorted(p for p in Path(scratch).glob("*") if p.is_dir()):
        if only and folder.name not in only:
            continue
        entry = MANIFEST.get(folder.name)
        found.append((folder.name, folder / entry["impl"] if entry else folder, entry))
    return found + [(Path(p).name, Path(p), None) for p in paths]


def flagged(data):
    """Every fail or error record of a report: ``(component, check, cause, first line of its message)``."""
    return [(c["component"], c["check"], c["cause"], c["message"].splitlines()[0][:200])
            for c in data["checks"] if c["verdict"] in answer_keys.FLAGGED]


def against_key(entry, data):
    """One line: the report held to the repository's key."""
    key = answer_keys.read_key(PUBLIC / f"{entry['name']}.toml")
    roles = sum(not answer_keys.role_problems(role, name, data) for role, name in key.roles.items())
    bugs = [f for f in key.findings if f.kind in answer_keys.FLAGGED]
    named = sum(not answer_keys.finding_problems(f, data, Path(f.file or entry["impl"]).name) for f in bugs)
    false = answer_keys.unexplained(key, data)
    return (f"roles {roles}/{len(key.roles)}, bugs named {named}/{len(bugs)}, unexplained fail/error {len(false)}"
            + "".join(f"\n      {line.splitlines()[0][:200]}" for line in false))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="more folders or files to check")
    parser.add_argument("--scratch", default=str(ROOT / "scratch"))
    parser.add_argument("--only", nargs="*", default=(), help="checkout folder names to check")
    parser.add_argument("--out", default=None, help="keep the reports here (default: a temporary folder)")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    totals = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="public-") as default_out:
        out = Path(args.out or default_out)
        for label, path, entry in subjects(args.scratch, set(args.only), args.paths):
            written = report(path, out / label, timeout=args.timeout)
            if written is None:
                print(f"{label}: no report")
                totals["no report"] += 1
                continue
            data = json.loads(Path(written).read_text())
            if not data["checks"]:  # (the checker stopped before its checks: its own error, in the report's log)
                print(f"{label}: a report with no checks (the checker itself failed: see {written})")
                totals["no checks"] += 1
                continue
            records = flagged(data)
            totals["fail/error"] += len(records)
            totals["implementations"] += 1
            print(f"{label}: {len(records)} fail/error" + (f"; key: {against_key(entry, data)}" if entry else ""))
            for component, check, cause, message in records:
                print(f"    {component}/{check}: {cause}: {message}")
    print(", ".join(f"{k} {v}" for k, v in totals.items()))


if __name__ == "__main__":
    main()
