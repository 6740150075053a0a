"""Adversarial submissions (tests/adversarial/) graded together: each gets an honest row, none is missing, and
none can write into the reports or change its own verdict."""
import json
from pathlib import Path

import pytest

from conformance.grading import runner as grading
from tests import mutants

ADVERSARIAL = Path(__file__).with_name("adversarial")


def build_class(folder):
    """The adversarial submissions as files of ``folder``: each attack appended to its buggy base, if any."""
    folder.mkdir()
    for attack in sorted(ADVERSARIAL.glob("*.py")):
        source = attack.read_text()
        base = source.splitlines()[0].removeprefix("# base:").strip()
        prefix = "" if base == "none" else mutants.header(mutants.BY_NAME[base]) + mutants.apply(
            mutants.BY_NAME[base]) + "\n\n"
        (folder / attack.name).write_text(prefix + source)
    (folder / "honest.py").write_text(mutants.header(mutants.BY_NAME["attention_unscaled"])
                                      + mutants.apply(mutants.BY_NAME["attention_unscaled"]))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("adversarial")
    build_class(root / "class")
    out = root / "out"
    results = grading.grade(root / "class", out, jobs=2, timeout=45, memory=1 << 30, output_limit=4 << 20,
                            pytest_args=["-m", "multi_head_attention"], progress=False)
    return results, out


def test_every_submission_has_a_row(graded):
    results, out = graded
    names = {p.stem for p in ADVERSARIAL.glob("*.py")} | {"honest"}
    assert set(results) == names
    rows = json.loads((out / "summary.json").read_text())["submissions"]
    assert {r["name"] for r in rows} == names
    table = (out / "summary.md").read_text().split("## Class analytics")[0]
    assert table.count("\n| ") == len(names) + 1  # header + one row each
    for name in names:
        assert (out / "feedback" / f"{name}.md").exists()
        assert json.loads((out / "gradescope" / name / "results.json").read_text())["max_score"] == 100


def test_the_honest_buggy_submission_is_graded_with_its_failure(graded):
    results, _ = graded
    honest = results["honest"]
    assert honest["status"] == "graded"
    assert honest["score"] < 100 and honest["components"]["multi_head_attention"][0] == 0  # its mistake costs it
    assert any(c["verdict"] == "fail" and c["check"] == "scores_scaled_by_inverse_sqrt_d_k" for c in honest["checks"])


@pytest.mark.parametrize("name, words", [
    ("patch_allclose", "torch.allclose"), ("patch_numpy", "numpy"), ("patch_pytest", "patched"),
    ("patch_hypothesis", "hypothesis"), ("comparison_mode", "mode"), ("exit_in_forward", "os._exit"),
    ("write_reports", "refused"), ("read_grader", "refused: reading"),
    ("silence_the_watch", "judged apart from the submission's code, but pass beside it"),
    ("invent_checks", "never collected"),
])
def test_tampering_is_detected_and_scores_nothing(graded, name, words):
    result = graded[0][name]
    assert result["status"] == "tampering detected", result["reason"]
    assert words in result["reason"]
    assert result["score"] == 0


def test_patches_do_not_hide_the_failure_from_the_verdicts(graded):
    # the comparison patches are refused by nothing, but the checks' own failure of the scale is still observed
    result = graded[0]["patch_numpy"]
    assert any(c["verdict"] == "fail" for c in result["checks"])


def test_checks_judged_apart_keep_their_verdicts_when_the_watch_is_silenced(graded):
    # the checker patched beside the code (every verdict there a pass) and its watch silenced: the checks run in the
    # judge, where the submission's code never ran, still fail the unscaled attention
    result = graded[0]["silence_the_watch"]
    judged = [c for c in result["checks"] if c["check"] == "agrees_with_reference"]
    assert judged and all(c["verdict"] == "fail" for c in judged)
    assert {c["cause"] for c in judged} == {"multi_head_attention.unscaled"}


def test_forks_and_subprocesses_are_refused_and_said(graded):
    result = graded[0]["fork"]
    assert result["status"] == "graded"
    assert "refused: os.fork" in result["reason"] and "refused: subprocess.Popen ('sleep'" in result["reason"]


def test_reference_handed_in_is_reported(graded):
    result = graded[0]["hand_in_reference"]
    assert result["status"] == "reference handed in"
    assert "reference.transformer" in result["reason"] and result["score"] == 0


def test_exit_at_import_is_graded_as_nothing(graded):
    result = graded[0]["exit_at_import"]
    assert result["status"] == "graded" and result["score"] == 0
    assert all(c["verdict"] == "missing" for c in result["checks"])


def test_hard_coded_outputs_and_lying_tensors_fail(graded):
    result = graded[0]["hardcoded"]
    assert result["status"] == "graded"
    mha = [c for c in result["checks"] if c["component"] == "multi_head_attention"]
    # checks that never look at an output (the constructor's signature, ...) may pass; those that do, fail
    assert mha and sum(c["verdict"] == "fail" for c in mha) > len(mha) // 2
    assert result["score"] < 25
    assert any(c["cause"] == "multi_head_attention.output_not_tensor" for c in mha)


def test_outputs_claiming_equality_gain_nothing_over_the_same_bug_told_honestly(graded):
    """The honest submission's bug (unscaled attention) with every output of its attention turned into a tensor
    subclass that claims to equal anything: no verdict may improve, so its score is at most the honest one's."""
    results, _ = graded
    liar, honest = results["liar_over_bug"], results["honest"]
    assert liar["status"] == "graded", liar["reason"]
    assert liar["score"] <= honest["score"], (liar["score"], honest["score"])
    assert any(c["cause"] == "multi_head_attention.output_not_tensor" for c in liar["checks"])


@pytest.mark.parametrize("name, status", [("hang", "timeout"), ("crash", "crashed"), ("print_megabytes", "output limit")])
def test_runs_that_end_badly_say_so(graded, name, status):
    result = graded[0][name]
    assert result["status"] == status, (result["status"], result["reason"])
    assert result["score"] == 0


def test_memory_exhaustion_says_so(graded):
    result = graded[0]["memory"]
    assert "memory" in result["status"] or "memory" in result["reason"]


def test_no_partial_or_foreign_files_in_the_reports(graded):
    results, out = graded
    assert not list(out.rglob("*.partial"))
    for path in out.rglob("*.json"):
        json.loads(path.read_text())  # every JSON file is whole
    assert json.loads((out / "summary.json").read_text())["submissions"]
