"""A course's operations (issue 24): ``--roster`` maps submissions to students (ids and names in the summary and the
gradebook, a submission not on the roster and a roster line with no submission said as such), ``gradebook.csv``
in the layout course systems import, and ``--only`` checks the named submissions again while the others keep their
stored results and every class report is written again."""
import csv
import json
import shutil
import subprocess
import sys

import pytest

from conformance.grading import course
from conformance.grading import runner as grading
from tests import mutants
from tests.suite import ROOT

SELECTION = ["-m", "multi_head_attention"]  # a few checks keep the tests quick
ROSTER = "\ufeffFile,Student ID,Name,Section\nreference_copy.py,s1,Ada Lovelace,A\nattention_unscaled,s2,Bob,B\n" \
         "ghost.ipynb,s3,Cy,A\n"


def table(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    folder = root / "class"
    folder.mkdir()
    shutil.copy(ROOT / "reference" / "transformer.py", folder / "reference_copy.py")
    mutants.write(mutants.BY_NAME["attention_unscaled"], folder)
    (folder / "stray.py").write_text("x = 1\n")
    (root / "roster.csv").write_text(ROSTER, encoding="utf-8")
    out = root / "out"
    results = grading.grade(folder, out, jobs=2, timeout=240, pytest_args=SELECTION, progress=False,
                            roster=root / "roster.csv")
    return root, folder, out, results


def test_the_roster_puts_ids_and_names_in_the_summary(graded):
    root, _, out, _ = graded
    rows = {r["submission"]: r for r in table(out / "summary.csv")}
    assert set(rows) == {"reference_copy.py", "attention_unscaled.py", "stray.py", "ghost.ipynb"}
    assert (rows["reference_copy.py"]["student_id"], rows["reference_copy.py"]["student_name"]) == ("s1",
                                                                                                  "Ada Lovelace")
    assert rows["attention_unscaled.py"]["student_id"] == "s2"  # the roster named it without its suffix
    assert rows["stray.py"]["student_id"] == "" and rows["stray.py"]["student_name"] == course.NOT_ON_ROSTER
    assert rows["ghost.ipynb"]["status"] == course.NO_SUBMISSION and rows["ghost.ipynb"]["student_id"] == "s3"
    markdown = (out / "summary.md").read_text()
    assert "| Ada Lovelace " in markdown and "| no submission " in markdown
    page = (out / "index.html").read_text()
    assert "Ada Lovelace" in page and "On the roster with no submission: Cy (s3, ghost.ipynb)" in page


def test_the_gradebook_has_one_row_per_student_in_the_layout_course_systems_import(graded):
    _, _, out, results = graded
    rows = table(out / "gradebook.csv")
    assert list(rows[0]) == ["student_id", "name", "score", "out_of", "comments"]
    by_id = {r["student_id"]: r for r in rows}
    assert set(by_id) == {"s1", "s2", "stray", "s3"}
    assert float(by_id["s1"]["score"]) == results["reference_copy"]["score"] == 100
    bug = by_id["s2"]
    assert float(bug["score"]) == results["attention_unscaled"]["score"] < 100 and bug["out_of"] == "100"
    assert bug["comments"].startswith("graded") and "fail" in bug["comments"]
    assert "feedback/attention_unscaled.md" in bug["comments"]
    assert by_id["stray"]["name"] == course.NOT_ON_ROSTER
    assert by_id["s3"]["score"] == "" and by_id["s3"]["comments"] == course.NO_SUBMISSION


def test_only_checks_the_named_submissions_again_and_rewrites_the_class_reports(graded):
    root, folder, out, _ = graded
    stored = {p.stem: json.loads(p.read_text()) for p in (out / "results").glob("*.json")}
    (folder / "reference_copy.py").write_text((folder / "reference_copy.py").read_text() + "\n# changed\n")
    (out / "index.html").write_text("stale")
    (out / "gradebook.csv").write_text("stale")
    again = grading.grade(folder, out, jobs=1, timeout=240, pytest_args=SELECTION, progress=False,
                          only=["stray.py"], roster=root / "roster.csv")
    assert again["stray"]["integrity"]["nonce"] != stored["stray"]["integrity"]["nonce"]  # checked again
    for name in ("reference_copy", "attention_unscaled"):  # kept, though reference_copy changed
        assert again[name]["integrity"]["nonce"] == stored[name]["integrity"]["nonce"]
        assert json.loads((out / "results" / f"{name}.json").read_text()) == stored[name]
    assert "Ada Lovelace" in (out / "index.html").read_text()
    assert len(table(out / "gradebook.csv")) == 4
    with pytest.raises(grading.SetupError, match="--only nobody: no submission of that name"):
        grading.grade(folder, out, pytest_args=SELECTION, progress=False, only=["nobody"])


def test_only_names_a_submission_never_graded_the_others_get_a_not_graded_row(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "one.py").write_text("x = 1\n")
    (folder / "two.py").write_text("y = 2\n")
    results = grading.grade(folder, tmp_path / "out", jobs=1, pytest_args=SELECTION, progress=False, only=["one"])
    assert results["one"]["status"] == "graded"
    assert results["two"]["status"] == "not graded" and results["two"]["score"] == 0
    assert not (tmp_path / "out" / "results" / "two.json").exists()


def test_the_roster_is_read_with_a_byte_order_mark_and_extra_columns(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER + "\n,,,\n", encoding="utf-8")
    students = course.read_roster(path)
    assert [(s.file, s.student_id, s.name) for s in students] == [
        ("reference_copy.py", "s1", "Ada Lovelace"), ("attention_unscaled", "s2", "Bob"), ("ghost.ipynb", "s3", "Cy")]


@pytest.mark.parametrize("text, says", [
    ("name,id\nx.py,1\n", "the header must name the columns file and student_id"),
    ("file,student_id\nx.py,1\nx.py,2\n", "line 3: x.py is on the roster twice"),
    ("file,student_id\n,1\n", "line 2: no file named"),
])
def test_a_roster_that_cannot_be_used_is_said_in_one_line(tmp_path, text, says):
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "one.py").write_text("x = 1\n")
    (tmp_path / "roster.csv").write_text(text)
    done = subprocess.run([sys.executable, "-m", "conformance", "grade", str(tmp_path / "class"), "--roster",
                           str(tmp_path / "roster.csv"), "--out", str(tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 2 and says in output and len(output.strip().splitlines()) == 1, output
