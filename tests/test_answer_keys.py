"""Other people's code held to answer keys written by reading it, not from the checker's output (format:
``tests/seed_keys/README.md``): the five seed notebooks and posts (``../shared/seeds/``, read in place; keys in
``tests/seed_keys/``) and the style studies (``tests/styles/``, keys beside them). Every real mistake
is reported at its component with its cause and line, nothing else fails or errors, what is right stays clean, and
every role the code has is found and checked.

Each subject is checked once, in its own process (``python -m conformance report``; a study from a scratch
copy), and its tests share the run (across pytest-xdist's workers too). A key line the checker gets wrong today carries
``known_gap``: a strict xfail. The committed seed reports under ``reports/seeds/`` are outputs to read; the last test
says when they are stale (regenerate them with ``python -m conformance report ../shared/seeds/*.txt --out
reports/seeds -n 2``)."""
import json
from pathlib import Path

import pytest

from conformance.reports import report
from tests import answer_keys, studies
from tests.suite import ROOT, SEEDS, once_per_session, seed

KEYS = {subject: answer_keys.read_key(ROOT / "tests" / "seed_keys" / f"{subject}.toml") for subject in SEEDS}
KEYS.update({name: answer_keys.read_key(studies.key_path(name)) for name in studies.STUDIES})
COMMITTED = ROOT / "reports" / "seeds"
RUNS = {}


def subject_report(subject, tmp_path_factory):
    """The suite's JSON report on a seed or a style study: one run per subject for the whole session, shared by
    pytest-xdist's workers (:func:`tests.suite.once_per_session`)."""
    def make():
        out = tmp_path_factory.mktemp(subject)
        if subject not in SEEDS:
            return studies.check(subject, out, timeout=900)
        path = report(seed(subject), out, timeout=900)
        assert path is not None, (out / f"{subject}.md").read_text()
        return json.loads(path.read_text())
    if subject not in RUNS:
        RUNS[subject] = once_per_session(f"answer-key-run-{subject}", tmp_path_factory, make)
    return RUNS[subject]


def cited_file(subject, finding):
    """The file name a message cites for a finding of ``subject``."""
    if subject in SEEDS:
        return SEEDS[subject].name
    return Path(finding.file or studies.STUDIES[subject]).name


def key_lines(lines_of):
    """One pytest parameter per key line (``lines_of(key)`` gives ``(label, line, known gap)``), a strict xfail
    where the key marks a known gap."""
    out = []
    for subject, key in KEYS.items():
        for i, (label, line, gap) in enumerate(lines_of(key)):
            marks = [pytest.mark.xfail(reason=f"known gap: {gap}", strict=True)] if gap else []
            out.append(pytest.param(subject, line, marks=marks, id=f"{subject[:12]}-{i}-{label}"))
    return out


SUBJECTS = list(KEYS)


@pytest.mark.parametrize("subject, role", key_lines(lambda key: [(r, r, key.role_gaps.get(r)) for r in key.roles]))
def test_role_is_mapped_as_the_key_says(subject, role, tmp_path_factory):
    problems = answer_keys.role_problems(role, KEYS[subject].roles[role], subject_report(subject, tmp_path_factory))
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("subject, finding", key_lines(lambda key: [(f.label, f, f.known_gap) for f in key.findings]))
def test_key_finding_is_reported_with_its_cause(subject, finding, tmp_path_factory):
    report = subject_report(subject, tmp_path_factory)
    problems = answer_keys.finding_problems(finding, report, cited_file(subject, finding))
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("subject", SUBJECTS)
def test_no_role_is_checked_that_the_code_does_not_have(subject, tmp_path_factory):
    assert answer_keys.unknown_roles(KEYS[subject], subject_report(subject, tmp_path_factory)) == []


@pytest.mark.parametrize("subject", SUBJECTS)
def test_every_fail_and_error_is_in_the_key(subject, tmp_path_factory):
    problems = answer_keys.unexplained(KEYS[subject], subject_report(subject, tmp_path_factory))
    assert problems == [], "fail or error outside the key:\n" + "\n".join(problems)


@pytest.mark.parametrize("subject, clean", key_lines(lambda key: [(c.label, c, c.known_gap) for c in key.clean]))
def test_clean_component_is_not_flagged(subject, clean, tmp_path_factory):
    problems = answer_keys.clean_problems(clean, subject_report(subject, tmp_path_factory))
    assert problems == [], f"{clean.label} is right ({clean.what}), yet:\n" + "\n".join(problems)


@pytest.mark.parametrize("subject, false_finding", key_lines(lambda key: [
    (f"{component}:{cause}", (component, cause, why), f"the checker's false finding: {why}")
    for component, cause, why in key.false_findings]))
def test_known_false_finding_is_gone(subject, false_finding, tmp_path_factory):
    problems = answer_keys.false_finding_problems(false_finding, subject_report(subject, tmp_path_factory))
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("subject", list(SEEDS))
def test_committed_seed_report_is_current(subject, tmp_path_factory):
    """Not an expectation: the committed report is what the checker says now (regenerate it to accept a change)."""
    def verdicts(data):
        return {c["nodeid"]: (c["verdict"], c["cause"]) for c in data["checks"]}
    committed = verdicts(json.loads((COMMITTED / f"{subject}.json").read_text()))
    now = verdicts(subject_report(subject, tmp_path_factory))
    changed = {k: (committed.get(k), now.get(k)) for k in committed.keys() | now.keys() if committed.get(k) != now.get(k)}
    assert changed == {}, "verdicts changed (committed, now):\n" + "\n".join(f"{k}: {v}" for k, v in sorted(changed.items()))


def test_a_derived_study_is_its_source_with_the_one_edit_of_its_key():
    """A study derived by an edit (``[edit]`` in its key) differs from the study it starts from on that line only,
    and an edit that no longer fits its source is an error, not a silently unchanged copy."""
    for name, header in studies.HEADERS.items():
        if "edit" not in header:
            continue
        edit = header["edit"]
        source = (studies.STYLES / edit["from"]).read_text().splitlines()
        derived = studies.edited(edit).splitlines()
        assert [i + 1 for i, (a, b) in enumerate(zip(source, derived)) if a != b] == [edit["line"]], name
        with pytest.raises(ValueError, match="does not hold"):
            studies.edited({**edit, "line": edit["line"] + 1})
