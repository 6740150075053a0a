"""Every reproduction script the grader writes (``OUT/reproductions/<name>/``, linked from the feedback) runs in an
interpreter that can import torch but not this project (``python -I -S`` with only torch's folder on its path,
where ``import conformance`` fails) and shows the evidence: a property that fails prints what was observed against
what is required and raises AssertionError, a crash stops the script with it; the same property script holds for
a correct submission. Submissions of both kinds are graded: one that maps its roles (``CONFORMANCE_ROLES``) and
notebooks whose classes the checker discovers."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conformance.grading import reproductions
from conformance.grading import runner as grading
from tests import mutants

ROOT = Path(__file__).resolve().parents[1]
SELECTION = ["-m", "multi_head_attention or positional_encoding"]
TORCH_FOLDER = str(Path(torch.__file__).resolve().parents[1])


def discovered(mutant, folder):
    """The mutant as a notebook without its CONFORMANCE_ROLES: the checker finds its classes by itself."""
    source = (mutants.header(mutant) + mutants.apply(mutant)).split("\nCONFORMANCE_ROLES = {")[0]
    path = folder / f"nb_{mutant.name}.ipynb"
    path.write_text(mutants.notebook(source))
    return path


def isolated(*args, cwd):
    """Run Python without this project: no site hooks, no PYTHONPATH, only torch's folder on the path."""
    launcher = (f"import sys; sys.path[:0] = [{TORCH_FOLDER!r}]; sys.argv = sys.argv[1:]; import runpy; "
                "runpy.run_path(sys.argv[0], run_name='__main__')")
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd)}
    return subprocess.run([sys.executable, "-I", "-S", "-c", launcher, *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("reproductions")
    folder = root / "class"
    folder.mkdir()
    submissions = {"pe_sin_cos_swapped": mutants.write(mutants.BY_NAME["pe_sin_cos_swapped"], folder),
                   "nb_mha_mask_not_passed": discovered(mutants.BY_NAME["mha_mask_not_passed"], folder)}
    results = grading.grade(folder, root / "out", jobs=2, timeout=240, pytest_args=SELECTION, progress=False)
    return root, root / "out", submissions, results


def test_the_isolated_interpreter_cannot_import_the_project(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import torch\ntry:\n    import conformance\nexcept ImportError:\n    print('no conformance')\n"
                     "try:\n    import adapters\nexcept ImportError:\n    print('no adapters')\n")
    done = isolated(str(probe), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.split() == ["no", "conformance", "no", "adapters"], done.stderr


def test_every_script_runs_without_the_project_and_shows_its_evidence(graded, tmp_path):
    _, out, submissions, _ = graded
    scripts = sorted((out / "reproductions").rglob("*.py"))
    assert {p.parent.name for p in scripts} == set(submissions)
    shown = set()
    for script in scripts:
        text = script.read_text()
        assert not re.search(r"\b(conformance|adapters)\.|(import|from) +(conformance|adapters)\b", text), script
        feedback = (out / "feedback" / f"{script.parent.name}.md").read_text()
        assert f"](../reproductions/{script.parent.name}/{script.name})" in feedback
        done = isolated(str(script), str(submissions[script.parent.name]), cwd=tmp_path)
        output = done.stdout + done.stderr
        if "AssertionError: observed:" in output:
            assert done.returncode != 0 and "assert holds" in text and "required:" in output, output
            shown.add("property")
        elif done.returncode != 0:
            assert "Traceback" in output and "Error" in output.strip().splitlines()[-1], output
            shown.add("crash")
        else:
            assert reproductions.NOT_RESTATED in output, output
    assert "property" in shown, shown


def test_a_property_script_holds_for_a_correct_submission(graded, tmp_path):
    _, out, submissions, _ = graded
    for name in ("pe_sin_cos_swapped", "nb_mha_mask_not_passed"):
        script = next(p for p in (out / "reproductions" / name).glob("*.py") if "assert holds" in p.read_text())
        correct = tmp_path / submissions[name].name
        if name.startswith("nb_"):
            correct.write_text(mutants.notebook(mutants.reference_source().split("\nCONFORMANCE_ROLES = {")[0]))
        else:
            correct.write_text(mutants.reference_source())
        done = isolated(str(script), str(correct), cwd=tmp_path)
        assert done.returncode == 0 and "holds here" in done.stdout, done.stdout + done.stderr


def test_the_feedback_says_why_a_finding_has_no_script(graded):
    _, out, _, results = graded
    for name in results:
        feedback = (out / "feedback" / f"{name}.md").read_text()
        reproduce = re.findall(r"^- Reproduce: (.*)$", feedback, re.M)
        assert reproduce, feedback
        assert all(line.startswith(("[`reproductions/", "no standalone script (")) for line in reproduce), reproduce
        assert "from conformance" not in feedback and "load_implementation" not in feedback


def test_recipes_from_the_submissions_process_are_read_as_data():
    good = {"multi_head_attention": {"build": {"name": "MHA", "role": "multi_head_attention",
                                               "arguments": [["h", "h"], ["d_model", "d_model"]]},
                                     "call": [["q", "query"], ["mask", "src_mask"]], "masks": "keep"},
            "model": {"not_expressible": "reason"}, "encoder": {"roles": "encoder"}}
    injected = {"feed_forward": {"build": {"name": "F(); import os; x", "role": "feed_forward", "arguments": []},
                                 "call": None, "masks": None},
                "generator": {"build": {"name": "G", "role": "generator", "arguments": [["d", "value:1); os.x("]]},
                              "call": None, "masks": None}}
    assert reproductions.valid_recipes({**good, **injected}) == good
    assert reproductions.valid_recipes(["not", "a", "dict"]) == {}
