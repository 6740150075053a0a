"""The mutants of the reference (``tests/mutants.py``): their edits still apply, and the whole suite, run on each,
catches it with the checks of the right component and names it with the cause the mutant declares; no component
its edits do not touch fails or errors; a mutant that crashes is cited at the line where it does.
The unmodified reference, run once with every family, must give no fail, error or deviation (no false positives).

The suite runs in this process through ``pytest.main`` with the arguments of ``python -m pytest conformance ...``
(``MUTANTS_SUBPROCESS=1``: in a subprocess), under grading's hypothesis profile: the fewest examples any run of the
checker draws (``python tests/mutation_score.py`` uses the default profile, three times the examples). A family
whose check module (``conformance/checks/test_<family>.py``) does not exist yet is skipped. The same judgement, printed as
a table with the scores per family, is ``python tests/mutation_score.py``.
"""
import keyword
import os

import pytest

from adapters.submission import load_implementation
from conformance.grading.runner import GRADING_PROFILE
from conformance.contract.interface import ROLES
from tests import mutants as catalogue
from tests.mutants import FAMILIES, MUTANTS, Mutant, StaleMutant
from tests.mutation_score import (ROOT, Result, assess, false_positives, family_checks, reports_cause, run_mutant,
                                  run_reference)
from tests.suite import once_per_session

IDS = [m.name for m in MUTANTS]
IN_PROCESS = os.environ.get("MUTANTS_SUBPROCESS", "") in ("", "0")
"""The suite runs through ``pytest.main`` in the test's own process (no 3-4 s of imports per mutant); set
``MUTANTS_SUBPROCESS=1`` to run each as ``python -m pytest`` in a subprocess instead (slower, fully isolated)."""


def require_family(family):
    if not (ROOT / family_checks(family)).exists():
        pytest.skip(f"no checks of the {family} family yet ({family_checks(family)})")


# -- the catalogue ------------------------------------------------------------------------------------------------
def test_catalogue_covers_every_family_with_enough_bugs():
    assert len(catalogue.BUGS) >= 30
    assert {m.family for m in catalogue.BUGS} == set(FAMILIES)
    assert {m.component for m in MUTANTS} <= set(ROLES)
    assert catalogue.DEVIATIONS and all(not keyword.iskeyword(m.name) for m in MUTANTS)


@pytest.mark.parametrize("mutant", MUTANTS, ids=IDS)
def test_edits_apply_exactly_once_and_the_mutant_compiles(mutant):
    reference = catalogue.reference_source()
    source = reference
    for old, new in mutant.edits:
        assert source.count(old) == 1, f"{old!r} occurs {source.count(old)} times"
        source = source.replace(old, new)
    assert catalogue.apply(mutant) == source != reference
    compile(source, f"{mutant.name}.py", "exec")


def test_no_two_mutants_are_the_same_program():
    sources = {}
    for m in MUTANTS:
        sources.setdefault(catalogue.apply(m), []).append(m.name)
    assert [names for names in sources.values() if len(names) > 1] == []


def test_apply_refuses_an_edit_that_does_not_match_exactly_once():
    missing = Mutant("gone", "softmax", "attention", "text no longer in the reference", (("no such text", "x"),),
                     cause="attention.scale.wrong")
    with pytest.raises(StaleMutant, match="occurs 0 times"):
        catalogue.apply(missing)
    twice = Mutant("twice", "masks", "attention", "ambiguous text", (("if mask is not None:", "if mask is None:"),),
                   cause="attention.mask_ignored")
    with pytest.raises(StaleMutant, match="occurs 2 times"):
        catalogue.apply(twice)
    with pytest.raises(ValueError):
        Mutant("bad", "no_such_family", "attention", "", (("a", "b"),), cause="attention.scale.wrong")
    with pytest.raises(ValueError, match="names neither"):
        Mutant("bad", "softmax", "attention", "", (("a", "b"),), cause="softmax.wrong")


def test_a_written_mutant_is_a_stand_alone_implementation(tmp_path):
    for mutant in MUTANTS:
        path = catalogue.write(mutant, tmp_path)
        assert path == tmp_path / f"{mutant.name}.py"
        impl = load_implementation(str(path))
        assert set(impl.roles) == set(ROLES), mutant.name


# -- judging a report --------------------------------------------------------------------------------------------
def report(*checks):
    return {"checks": [dict(component=c, check=k, verdict=v, cause=f"{c}.{k}", nodeid=f"{c}/{k}", message="")
                       for c, k, v in checks]}


def test_assess_needs_the_expected_component_and_names_deviations():
    bug = Mutant("b", "softmax", "attention", "", (("a", "b"),), cause="attention.scale")
    dev = Mutant("d", "norm_order", "sublayer_connection", "", (("a", "b"),), deviation=True,
                 cause="sublayer_connection.placement")
    assert assess(bug, report(("attention", "scale", "fail"), ("model", "agrees", "fail")))[:2] == ("caught", True)
    assert assess(bug, report(("attention", "shape", "error")))[:2] == ("caught", True)
    assert assess(bug, report(("model", "agrees", "fail"), ("attention", "scale", "pass")))[:2] == \
        ("other_component", False)
    assert assess(bug, report(("attention", "scale", "deviation")))[:2] == ("missed", False)
    assert assess(bug, None)[:2] == ("no_checks", False)
    assert assess(dev, report(("sublayer_connection", "placement", "deviation")))[:2] == ("caught", True)
    assert assess(dev, report(("sublayer_connection", "placement", "deviation"), ("model", "agrees", "fail")))[:2] \
        == ("reported_as_failure", False)
    assert assess(dev, report(("sublayer_connection", "placement", "pass")))[:2] == ("missed", False)


def test_reports_cause_reads_verdicts_and_what_lies_behind_errors():
    bug = Mutant("b", "softmax", "attention", "", (("a", "b"),), cause="attention.scale")
    dev = Mutant("d", "norm_order", "sublayer_connection", "", (("a", "b"),), deviation=True,
                 cause="sublayer_connection.placement")
    assert reports_cause(bug, report(("attention", "scale", "fail")))
    assert not reports_cause(bug, report(("attention", "scale", "deviation")))
    assert not reports_cause(bug, report(("multi_head_attention", "scale", "fail")))
    assert reports_cause(dev, report(("sublayer_connection", "placement", "deviation")))
    crash = report(("attention", "shape", "error"))
    crash["checks"][0]["behind"] = {"verdict": "fail", "cause": "attention.scale", "message": ""}
    assert reports_cause(bug, crash)


# -- the suite on each mutant ------------------------------------------------------------------------------------
def explain(result: Result):
    flagged = "\n  ".join(result.flagged) or "nothing"
    if result.status == "no_checks":
        flagged = f"nothing: {family_checks(result.family)} has no check of the {result.component} component"
    return (f"mutant {result.name} ({'deviation' if result.deviation else 'bug'}: family {result.family}, expected "
            f"component {result.component}) not caught: {result.status}\nflagged:\n  {flagged}\n"
            f"--- pytest output (tail) ---\n{result.output}")


@pytest.mark.parametrize("mutant", MUTANTS, ids=IDS)
def test_mutant_is_named_by_its_component_with_its_cause(mutant, tmp_path):
    """Every check runs: what flags the mutant, and what must not, are both seen."""
    result = run_mutant(mutant, tmp_path, in_process=IN_PROCESS, extra=[f"--hypothesis-profile={GRADING_PROFILE}"])
    assert result.caught, explain(result)
    assert result.problems == [], f"{mutant.name}:\n" + "\n".join(result.problems)
    assert result.named, (f"{mutant.name}: {mutant.component} does not report {mutant.cause} (first cause: {result.cause}); "
                   f"flagged: {result.flagged}")


def reference_run(tmp_path_factory):
    """``[exit code, output tail, report]`` of the whole suite on the unmodified reference, run once for the
    session (each family's checks are read from it: one start and one collection instead of one a family)."""
    def make():
        code, output, data = run_reference(tmp_path_factory.mktemp("reference"), in_process=IN_PROCESS)
        return [code, output[-3000:], data]
    return once_per_session("mutants-reference", tmp_path_factory, make)


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_has_no_false_positive(family, tmp_path_factory):
    require_family(family)
    code, output, data = reference_run(tmp_path_factory)
    checks = [c for c in (data or {}).get("checks", []) if c["family"] == family]
    assert checks, f"no check of the {family} family ran (exit code {code})\n{output}"
    assert false_positives({"checks": checks}) == [], output
    assert code == 0, output
