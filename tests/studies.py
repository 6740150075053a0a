"""The style studies (``tests/styles/``): implementations written here, each in a style that public code uses, with
an answer key beside it (``tests/styles/<name>.toml``, the format of ``tests/seed_keys/README.md`` plus two fields:
``impl``, the path under ``tests/styles/`` that ``--impl`` takes, and ``style``, what the study imitates). A study
made from another by one planted mistake holds no copy of it: its key's ``[edit]`` names the study's file it starts
from (``from``), the ``line`` changed, the text there (``old``) and what replaces it (``new``).

A study whose key lists no fail or error is *correct*: the suite must raise no fail or error on it and grading must
give it full marks. Every other study carries bugs written on purpose, each listed in its key.

    python tests/studies.py [--only NAME ...] [--out DIR] [-n JOBS]   # checks each, prints its scorecard
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

from conformance.reports import report  # noqa: E402
from tests import answer_keys  # noqa: E402

STYLES = ROOT / "tests" / "styles"
HEADERS = {path.stem: tomllib.loads(path.read_text()) for path in sorted(STYLES.glob("*.toml"))}
STUDIES = {name: header["impl"] for name, header in HEADERS.items()}


def key_path(name):
    return STYLES / f"{name}.toml"


def is_correct(name):
    """A study written without a mistake: its key lists no fail or error."""
    return not [f for f in answer_keys.read_key(key_path(name)).findings if f.kind in answer_keys.FLAGGED]


def edited(edit):
    """The text of the study file ``edit["from"]`` with ``edit["old"]`` replaced by ``edit["new"]`` on line
    ``edit["line"]`` (an error when that line does not hold it: the key no longer fits the study it derives from)."""
    lines = (STYLES / edit["from"]).read_text().splitlines(keepends=True)
    line = lines[edit["line"] - 1]
    if edit["old"] not in line:
        raise ValueError(f"line {edit['line']} of {edit['from']} does not hold {edit['old']!r}: {line!r}")
    lines[edit["line"] - 1] = line.replace(edit["old"], edit["new"])
    return "".join(lines)


def materialise(name, scratch):
    """Copy study ``name`` under ``scratch/name/`` (some studies write beside their files when run; a study derived
    by an edit is written there edited) and return the path ``--impl`` takes there."""
    impl = Path(STUDIES[name])
    source = STYLES / impl.parts[0]
    target = Path(scratch) / name / impl.parts[0]
    if "edit" in HEADERS[name]:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(edited(HEADERS[name]["edit"]))
    elif source.is_dir():
        shutil.copytree(source, target)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return Path(scratch) / name / impl


def check(name, out_dir, timeout=600):
    """The suite's JSON report on study ``name`` (also written, with its markdown, under ``out_dir``)."""
    with tempfile.TemporaryDirectory(prefix=f"study-{name}-") as scratch:
        own = Path(scratch) / "report"
        path = report(materialise(name, scratch), own, timeout=timeout)
        if path is None:
            raise RuntimeError((own / f"{Path(STUDIES[name]).stem}.md").read_text())
        final = Path(out_dir) / f"{name}.json"
        path.replace(final)
        path.with_suffix(".md").replace(final.with_suffix(".md"))
        return json.loads(final.read_text())


def scorecard(name, data):
    """One line judging a report against the study's key: roles found, listed bugs named, false fail/error."""
    key = answer_keys.read_key(key_path(name))
    roles_found = sum(not answer_keys.role_problems(role, bound, data) for role, bound in key.roles.items())
    bugs = [f for f in key.findings if f.kind in answer_keys.FLAGGED]
    named = sum(not answer_keys.finding_problems(f, data, Path(f.file or STUDIES[name]).name) for f in bugs)
    false = answer_keys.unexplained(key, data)
    return (roles_found, len(key.roles), named, len(bugs), false,
            f"{name}: roles {roles_found}/{len(key.roles)}, bugs named {named}/{len(bugs)}, false fail/error "
            f"{len(false)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="check these studies only")
    parser.add_argument("--out", default=None, help="keep the reports here (default: a temporary folder)")
    parser.add_argument("-n", "--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    names = args.only or list(STUDIES)
    unknown = sorted(set(names) - set(STUDIES))
    if unknown:
        parser.error(f"no such study: {', '.join(unknown)} (the studies: {', '.join(STUDIES)})")
    with tempfile.TemporaryDirectory(prefix="studies-") as default_out:
        out = Path(args.out or default_out)
        out.mkdir(parents=True, exist_ok=True)
        start, cards = time.perf_counter(), []
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = {name: pool.submit(check, name, out) for name in names}
            for name, future in futures.items():
                try:
                    cards.append(scorecard(name, future.result()))
                except RuntimeError as exc:  # the run wrote no report: say so, the others still count
                    print(f"{name}: no report ({str(exc)[-600:]})")
    for *_, false, line in cards:
        print(line + "".join(f"\n    {f.splitlines()[0][:240]}" for f in false))
    total = [sum(c[i] for c in cards) for i in range(4)]
    print(f"roles found {total[0]}/{total[1]}, bugs named {total[2]}/{total[3]}, false fail/error "
          f"{sum(len(c[4]) for c in cards)}; {len(cards)} studies in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
