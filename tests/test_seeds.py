"""The five seed notebooks and posts (``../shared/seeds/``, read in place) held to their answer keys
(``tests/seed_keys/``, written by reading each seed's code, not the checker's output): every real mistake is
reported at its component with its cause and line, nothing else fails or errors, and what is right stays clean.

Each seed is checked once, with ``python -m conformance report`` (its own process), and its tests share the run
(one xdist group per seed). A key line the checker gets wrong today carries ``known_gap``: a strict xfail. The
committed reports under ``reports/seeds/`` are outputs to read; the last test says when they are stale
(regenerate them with ``python -m conformance report ../shared/seeds/*.txt --out reports/seeds -n 2``)."""
import json

import pytest

from conformance.reports import report
from tests import answer_keys
from tests.suite import ROOT

SEED_DIR = ROOT.parent / "shared" / "seeds"
SEEDS = {path.stem: path for path in sorted(SEED_DIR.glob("*.txt"))}
KEYS = {stem: answer_keys.read_key(ROOT / "tests" / "seed_keys" / f"{stem}.toml") for stem in SEEDS}
COMMITTED = ROOT / "reports" / "seeds"
RUNS = {}

pytestmark = pytest.mark.skipif(not SEEDS, reason="no seeds in ../shared/seeds")


def seed_report(stem, tmp_path_factory):
    """The suite's JSON report on a seed (one run per seed and process)."""
    if stem not in RUNS:
        out = tmp_path_factory.mktemp(stem)
        path = report(SEEDS[stem], out, timeout=900)
        assert path is not None, (out / f"{stem}.md").read_text()
        RUNS[stem] = json.loads(path.read_text())
    return RUNS[stem]


def key_lines(lines_of):
    """One pytest parameter per key line (``lines_of(key)`` gives ``(label, line, known gap)``), in its seed's
    xdist group, a strict xfail where the key marks a known gap."""
    out = []
    for stem, key in KEYS.items():
        for i, (label, line, gap) in enumerate(lines_of(key)):
            marks = [pytest.mark.xdist_group(stem)]
            if gap:
                marks.append(pytest.mark.xfail(reason=f"known gap: {gap}", strict=True))
            out.append(pytest.param(stem, line, marks=marks, id=f"{stem[:3]}-{i}-{label}"))
    return out


SEED_PARAMS = [pytest.param(stem, marks=pytest.mark.xdist_group(stem), id=stem) for stem in SEEDS]


@pytest.mark.parametrize("stem, role", key_lines(lambda key: [(r, r, key.role_gaps.get(r)) for r in key.roles]))
def test_role_is_mapped_as_the_key_says(stem, role, tmp_path_factory):
    problems = answer_keys.role_problems(role, KEYS[stem].roles[role], seed_report(stem, tmp_path_factory))
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("stem, finding", key_lines(lambda key: [(f.label, f, f.known_gap) for f in key.findings]))
def test_key_finding_is_reported_with_its_cause(stem, finding, tmp_path_factory):
    problems = answer_keys.finding_problems(finding, seed_report(stem, tmp_path_factory), SEEDS[stem].name)
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("stem", SEED_PARAMS)
def test_no_role_is_checked_that_the_code_does_not_have(stem, tmp_path_factory):
    assert answer_keys.unknown_roles(KEYS[stem], seed_report(stem, tmp_path_factory)) == []


@pytest.mark.parametrize("stem", SEED_PARAMS)
def test_every_fail_and_error_is_in_the_key(stem, tmp_path_factory):
    problems = answer_keys.unexplained(KEYS[stem], seed_report(stem, tmp_path_factory))
    assert problems == [], "fail or error outside the key:\n" + "\n".join(problems)


@pytest.mark.parametrize("stem, clean", key_lines(lambda key: [(c.label, c, c.known_gap) for c in key.clean]))
def test_clean_component_is_not_flagged(stem, clean, tmp_path_factory):
    problems = answer_keys.clean_problems(clean, seed_report(stem, tmp_path_factory))
    assert problems == [], f"{clean.label} is right ({clean.what}), yet:\n" + "\n".join(problems)


@pytest.mark.parametrize("stem, false_finding", key_lines(lambda key: [
    (f"{component}:{cause}", (component, cause, why), f"the checker's false finding: {why}")
    for component, cause, why in key.false_findings]))
def test_known_false_finding_is_gone(stem, false_finding, tmp_path_factory):
    problems = answer_keys.false_finding_problems(false_finding, seed_report(stem, tmp_path_factory))
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("stem", SEED_PARAMS)
def test_committed_report_is_current(stem, tmp_path_factory):
    """Not an expectation: the committed report is what the checker says now (regenerate it to accept a change)."""
    def verdicts(data):
        return {c["nodeid"]: (c["verdict"], c["cause"]) for c in data["checks"]}
    committed = verdicts(json.loads((COMMITTED / f"{stem}.json").read_text()))
    now = verdicts(seed_report(stem, tmp_path_factory))
    changed = {k: (committed.get(k), now.get(k)) for k in committed.keys() | now.keys() if committed.get(k) != now.get(k)}
    assert changed == {}, "verdicts changed (committed, now):\n" + "\n".join(f"{k}: {v}" for k, v in sorted(changed.items()))
