"""Assignment rubrics (``conformance/grading/assignment.py``): the roles an assignment asks for (every role of the
paper, or those of the teacher's ``--solution``, which must earn full marks), checks hidden from students until
``--release``, and ``python -m conformance check``, the student's self-check giving the feedback the grade gives."""
import ast
import csv
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.grading import assignment, reports, runner
from conformance.grading import course as course_module
from conformance.contract.interface import ROLES
from tests import mutants
from tests.test_grading import browser, probed
from tests.test_grading_reports import UNSCALED, check

ROOT = Path(__file__).resolve().parents[1]
SCALE = "scores_scaled_by_inverse_sqrt_d_k"
HIDING = f'[components]\npositional_encoding = {{ hidden = true }}\n[checks]\n"multi_head_attention/{SCALE}" = ' \
         '{ hidden = true }\n'
"""A rubric file hiding one component and one check of another (the default rubric otherwise)."""


def rubric_file(folder, text):
    path = folder / "rubric.toml"
    path.write_text(text)
    return path


def test_a_rubric_file_changes_the_default_where_it_says_and_round_trips(tmp_path):
    rubric = assignment.load_rubric(rubric_file(tmp_path, HIDING + '"attention/output_shape" = 4\n'))
    default = assignment.load_rubric()
    assert rubric["hidden"] == ["positional_encoding", f"multi_head_attention/{SCALE}"]
    assert rubric["components"] == default["components"]  # hidden without a weight keeps the default's (2)
    assert rubric["checks"] == {"attention/output_shape": 4}
    assert default["score"]["required"] == list(ROLES) and default["hidden"] == []
    written = rubric_file(tmp_path, assignment.toml_text(rubric))  # what grade writes for the students' self-check
    assert assignment.load_rubric(written) == rubric


@pytest.mark.parametrize("text, words", [
    ("[components]\nattn = 2\n", "'attn': not one of the roles"),
    ('[checks]\n"attention/no_such_check" = 1\n', "naming a role and a check of the suite"),
    ("[components]\nattention = \"three\"\n", "not a number"),
    ("[credit]\npass = 2\n", "[credit] pass = 2: not a number from 0 to 1"),
    ("[score]\nrequired = [\"encoder\", \"nope\"]\n", "give \"all\" or a list of roles"),
    ("[score]\nrequired = []\n", "give \"all\" or a list of roles"),
    ("[weights]\nattention = 1\n", "[weights]: not a section of a rubric"),
    ("[components]\nattention = { weight = 1, secret = true }\n", "unknown field(s) ['secret']"),
    ("[components]\nattention = { hidden = \"yes\" }\n", "is not true or false"),
    ("[components\n", "not valid TOML"),
    ("[score]\nrequied = \"all\"\n", "['requied']: unknown"),
    ("[score]\na_mistake_costs_the_component = 1\n", "not true or false"),
    ("[credit]\npassed = 1\n", "['passed']: not a verdict"),
])
def test_a_rubric_that_cannot_define_the_assignment_says_what_to_change(tmp_path, text, words):
    with pytest.raises(assignment.RubricError, match="rubric .*rubric.toml: ") as raised:
        assignment.load_rubric(rubric_file(tmp_path, text))
    assert words in str(raised.value)


def result_with(*checks):
    return dict(name="s", submission="s.py", status="graded", reason="", checks=list(checks), notes=[], pe=None)


SCALE_FAIL = dict(verdict="fail", cause="multi_head_attention.scale.unscaled", observed="scores multiplied by 1",
                  line=40)
HIDDEN_ONES = result_with(check("multi_head_attention", SCALE, **SCALE_FAIL), check("multi_head_attention", "shape"),
                          check("attention", "scaled", **UNSCALED), check("positional_encoding", "sinusoid"),
                          check("embedding", "scaled"))


def test_students_see_the_checks_shown_and_a_score_on_them_until_the_release(tmp_path):
    rubric = assignment.load_rubric(rubric_file(tmp_path, HIDING))
    full = assignment.score(json.loads(json.dumps(HIDDEN_ONES)), rubric)
    view = assignment.student_view(full, rubric)
    assert view["withheld"] == 2 and [c["check"] for c in view["checks"]] == ["shape", "scaled", "scaled"]
    # shown (every component weighs 1): multi_head_attention passes its one check shown, attention fails, embedding
    # passes; in full the positional encoding passes too and the MHA's hidden fail costs it
    assert view["score"] == pytest.approx(100 * 2 / 3, abs=0.01)
    assert full["score"] == pytest.approx(100 * 2 / 4, abs=0.01)
    feedback = reports.feedback(view)
    assert "multi_head_attention.scale.unscaled" not in feedback and "positional_encoding" not in feedback
    assert f"Score on the checks shown: **{view['score']:g} / 100**. The results of 2 more check(s)" in feedback
    assert "attention.scale.unscaled" in feedback
    assert assignment.student_view(full, rubric, release=True) is full
    released = reports.feedback(full)
    assert "multi_head_attention.scale.unscaled" in released and f"Score: **{full['score']:g} / 100**" in released


def test_a_role_graded_through_a_hidden_block_is_hidden_with_it(tmp_path):
    rubric = assignment.load_rubric(rubric_file(tmp_path, "[components]\nmulti_head_attention = { hidden = true }\n"))
    full = assignment.score(result_with(check("multi_head_attention", "shape", **SCALE_FAIL),
                                        check("attention", "shape", "missing", "role.missing", "no attention")), rubric)
    assert full["assignment"]["inline"] == {"attention": "multi_head_attention"}
    view = assignment.student_view(full, rubric)
    assert view["checks"] == [] and view["withheld"] == 2 and "the assignment asks for" not in reports.feedback(view)


def test_gradescope_shows_the_tests_of_hidden_checks_once_the_grades_are_published(tmp_path):
    rubric = assignment.load_rubric(rubric_file(tmp_path, HIDING))
    result = assignment.score(json.loads(json.dumps(HIDDEN_ONES)), rubric)
    tests = {t["name"]: t for t in reports.gradescope(result, rubric)["tests"]}
    assert tests["multi_head_attention"]["visibility"] == "after_published"
    assert tests["positional_encoding"]["visibility"] == "after_published"
    assert "multi_head_attention.scale.unscaled" in tests["multi_head_attention"]["output"]
    now = tests["multi_head_attention (the checks shown before the grades are published)"]
    assert (now["visibility"], now["max_score"], now["status"]) == ("visible", 0, "passed")
    assert "scale" not in now["output"] and now["output"] == "1 of 1 checks passed"
    assert tests["attention"]["visibility"] == "visible"
    assert sum(t["max_score"] for t in tests.values()) == pytest.approx(100, abs=0.05)
    released = reports.gradescope(result, rubric, release=True)["tests"]
    assert {t["visibility"] for t in released} == {"visible"} and len(released) == len(tests) - 1


def test_the_teacher_page_and_summary_show_hidden_results_marked(tmp_path):
    rubric = assignment.load_rubric(rubric_file(tmp_path, HIDING))
    result = assignment.score(json.loads(json.dumps(HIDDEN_ONES)), rubric)
    page = reports.page({"s": result}, {}, rubric=rubric)
    marked = [row for row in page.split("<tr") if "hidden-mark" in row]
    assert any("<b>multi_head_attention.scale.unscaled" in row for row in marked)  # its finding
    assert not any("<b>attention.scale.unscaled" in row for row in marked)  # a result students see: no mark
    assert re.findall(r"<tr><td>(\w+)<span class='hidden-mark'", page) == ["multi_head_attention",
                                                                          "positional_encoding"]  # components
    assert "Hidden from students until the grades are released (--release): positional_encoding, " in page
    assert "Released to students" in reports.page({"s": result}, {}, rubric=rubric, release=True)
    assert "Hidden from students until" in reports.summary_markdown({"s": result}, reports.hidden_note(rubric, False))


def test_a_solution_defines_the_roles_asked_for_and_must_earn_full_marks():
    rubric = assignment.load_rubric()
    solution = result_with(check("multi_head_attention", "shape"), check("attention", "scaled"),
                           check("encoder", "shape", "missing", "role.missing", "no encoder"))
    assigned = assignment.for_solution(rubric, solution, "solution.py")
    assert assigned["score"]["required"] == ["attention", "multi_head_attention"] and solution["score"] == 100
    wrong = result_with(check("multi_head_attention", SCALE, **SCALE_FAIL), check("attention", "scaled"))
    with pytest.raises(assignment.RubricError) as raised:
        assignment.for_solution(rubric, wrong, "wrong.py")
    assert str(raised.value).splitlines()[1:] == [
        f"  - fail in multi_head_attention: multi_head_attention.scale.unscaled ({SCALE}) at sub.py:40"]
    with pytest.raises(assignment.RubricError, match="--solution late.py: timeout: did not finish"):
        assignment.for_solution(rubric, dict(wrong, status="timeout", reason="did not finish"), "late.py")


# -- a class graded with a solution and hidden checks ------------------------------------------------------------
def two_components(folder):
    """A submission that writes two of the paper's components, correctly (the reference's feed-forward network and
    layer norm), and nothing else."""
    source = (ROOT / "reference" / "transformer.py").read_text()
    classes = [ast.get_source_segment(source, node) for node in ast.parse(source).body
               if isinstance(node, ast.ClassDef) and node.name in ("FeedForwardNetwork", "LayerNorm")]
    (folder / "two_components.py").write_text("import torch\nimport torch.nn as nn\n\n\n" + "\n\n\n".join(classes))


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The class (two components, an unscaled attention, a reference copy) graded with the reference as solution
    and a rubric hiding the positional encoding and the multi-head attention's scale check; the feedback pages as
    they were before any release."""
    root = tmp_path_factory.mktemp("course")
    folder = root / "class"
    folder.mkdir()
    two_components(folder)
    mutants.write(mutants.BY_NAME["attention_unscaled"], folder)
    shutil.copy(ROOT / "reference" / "transformer.py", folder / "reference_copy.py")
    shutil.copy(ROOT / "reference" / "transformer.py", root / "solution.py")
    out = root / "out"
    results = runner.grade(folder, out, jobs=2, timeout=240, rubric=rubric_file(root, HIDING), progress=False,
                           solution=root / "solution.py")
    feedback = {name: (out / "feedback" / f"{name}.md").read_text() for name in results}
    return root, out, results, feedback


def test_two_correct_components_of_the_solutions_fifteen_score_at_most_two_fifteenths(course):
    root, out, results, feedback = course
    assert json.loads((out / "summary.json").read_text())["rubric"]["score"]["required"] == list(ROLES)
    two = results["two_components"]
    assert {c for c, (share, _) in two["components"].items() if share == 1} == {"feed_forward", "layer_norm"}
    assert two["score"] == pytest.approx(100 * 2 / 15, abs=0.01)  # the default weights are equal: 2 of 15
    assert results["reference_copy"]["score"] == 100
    assert "- `encoder` (0%): the assignment asks for encoder; none found" in feedback["two_components"]


def test_hidden_results_stay_out_of_what_students_see_until_the_release(course, tmp_path):
    root, out, results, feedback = course
    teacher = (out / "summary.md").read_text() + (out / "index.html").read_text()
    assert "multi_head_attention.scale.unscaled" in teacher and "hidden-mark" in teacher
    hidden_check = re.compile(r"`multi_head_attention\.scale\.unscaled`\n\n- Checks: [^\n]*" + SCALE)
    assert not hidden_check.search(feedback["attention_unscaled"])  # (the checks in place may say it, shown)
    assert "attention.scale.unscaled" in feedback["attention_unscaled"]  # the attention's own check is shown
    assert "Score on the checks shown" in feedback["attention_unscaled"]
    tests = json.loads((out / "gradescope" / "attention_unscaled" / "results.json").read_text())["tests"]
    assert {t["name"] for t in tests if t["visibility"] == "after_published"} == {"multi_head_attention",
                                                                                 "positional_encoding"}
    comments = {row["student_id"]: row["comments"] for row in csv.DictReader(io.StringIO(
        (out / "gradebook.csv").read_text()))}  # (a course system shows students the comments)
    view = assignment.student_view(results["attention_unscaled"], assignment.load_rubric(out / "rubric.toml"))
    assert view["counts"] != results["attention_unscaled"]["counts"]
    assert comments["attention_unscaled"] == course_module.comments(view)
    released = tmp_path / "out"
    shutil.copytree(out, released)
    again = runner.grade(root / "class", released, rubric=root / "rubric.toml", progress=False,
                         solution=root / "solution.py", release=True)
    assert {n: r["score"] for n, r in again.items()} == {n: r["score"] for n, r in results.items()}
    shown = (released / "feedback" / "attention_unscaled.md").read_text()
    assert "multi_head_attention.scale.unscaled" in shown and f"Score: **{results['attention_unscaled']['score']:g}" \
        in shown
    assert hidden_check.search(shown)
    tests = json.loads((released / "gradescope" / "attention_unscaled" / "results.json").read_text())["tests"]
    assert {t["visibility"] for t in tests} == {"visible"}


def test_the_class_page_marks_hidden_results_in_a_browser(course, tmp_path):
    _, out, results, _ = course
    attributes, dom = probed(browser(), (out / "index.html").read_text(), tmp_path)
    assert "data-errors" not in attributes, attributes["data-errors"]
    assert int(attributes["data-scroll-width"]) <= 1366
    assert dom.count('<span class="hidden-mark"') >= 1 + 2 * len(results)  # the note; PE and MHA in each
    details = dom.split('<details id="attention_unscaled">', 1)[1].split('<details id="', 1)[0]
    assert '<td>multi_head_attention<span class="hidden-mark"' in details
    assert '<td>attention<span class="hidden-mark"' not in details


def test_the_self_check_gives_the_feedback_the_grade_gives(course, tmp_path):
    """A student with the rubric the grade wrote gets the same page, the hidden checks left out; exit status 1
    for the failures shown."""
    root, out, _, feedback = course
    done = subprocess.run([sys.executable, "-m", "conformance", "check", str(root / "class" / "attention_unscaled.py"),
                           "--rubric", str(out / "rubric.toml"), "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert (tmp_path / "feedback" / "attention_unscaled.md").read_text() == feedback["attention_unscaled"]
    assert done.stdout == feedback["attention_unscaled"] + "\n"


def test_a_solution_without_full_marks_stops_the_grading_listing_what_failed(tmp_path):
    folder = tmp_path / "class"
    mutants.write(mutants.BY_NAME["attention_unscaled"], folder)
    solution = mutants.write(mutants.BY_NAME["attention_unscaled"], tmp_path / "teacher")
    done = subprocess.run([sys.executable, "-m", "conformance", "grade", str(folder), "--out", str(tmp_path / "out"),
                           "--solution", str(solution), "--quiet", "-m", "multi_head_attention"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "not full marks" in done.stderr and "fail in multi_head_attention: multi_head_attention.scale" in done.stderr
    assert not (tmp_path / "out" / "summary.md").exists()  # the class was not graded


@pytest.mark.parametrize("arguments, words", [
    (["check", "no_such_file.py"], "no_such_file.py: not a file, a folder or an importable module"),
    (["check", "sub.py", "--rubric", "missing.toml"], "rubric missing.toml: No such file or directory"),
    (["grade", ".", "--solution", "no_such_solution"], "no_such_solution: not a file, a folder or an importable"),
])
def test_bad_input_is_one_line_and_exit_status_2(tmp_path, arguments, words):
    (tmp_path / "sub.py").write_text("x = 1\n")
    done = subprocess.run([sys.executable, "-m", "conformance", *arguments], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
