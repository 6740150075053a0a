"""Bad input at the command line gets a clear, specific message and a non-zero exit, never a traceback
(issue 24): a folder that does not exist, a file where the folder goes, a folder with no submission in it, a
submission that cannot be read, a rubric that is not TOML; and the help says what the commands do, that other
options go to pytest, and which forms ``--impl`` reads."""
import os
import subprocess
import sys

import pytest

from tests.suite import ROOT


def conformance(*args):
    done = subprocess.run([sys.executable, "-m", "conformance", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("make, code, says", [
    (lambda tmp: tmp / "nowhere", 2, "no such folder"),
    (lambda tmp: (tmp / "one.py").write_text("x = 1\n") and tmp / "one.py", 2, "not a folder"),
    (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", 2, "holds no submission"),
    (lambda tmp: unreadable(tmp / "class"), 2, "cannot be read"),
])
def test_grading_bad_input_is_said_in_one_line(tmp_path, make, code, says):
    status, output = conformance("grade", str(make(tmp_path)), "--out", str(tmp_path / "out"))
    assert status == code, output
    assert says in output and "Traceback" not in output, output
    assert len(output.strip().splitlines()) == 1, output


def unreadable(folder):
    """A class folder with one good submission and one that cannot be read (a file without read permission; for
    root, whom permissions do not stop, a link to a file whose reading fails)."""
    (folder / "project").mkdir(parents=True)
    (folder / "good.py").write_text("x = 1\n")
    bad = folder / "project" / "model.py"
    if os.geteuid() == 0:
        bad.symlink_to("/proc/self/mem")
    else:
        bad.write_text("x = 1\n")
        bad.chmod(0)
    return folder


def test_a_rubric_that_is_not_toml_is_said_in_one_line(tmp_path):
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "one.py").write_text("x = 1\n")
    (tmp_path / "rubric.toml").write_text("[score\nmax = 10\n")
    status, output = conformance("grade", str(tmp_path / "class"), "--rubric", str(tmp_path / "rubric.toml"))
    assert status == 2 and "not valid TOML" in output and "Traceback" not in output, output
    assert len(output.strip().splitlines()) == 1, output
    status, output = conformance("grade", str(tmp_path / "class"), "--rubric", str(tmp_path / "none.toml"))
    assert status == 2 and "cannot be read" in output and len(output.strip().splitlines()) == 1, output


def test_help_says_what_the_commands_do_and_where_other_options_go():
    status, output = conformance("--help")
    assert status == 0 and "grade classes of them." in output, output
    status, output = conformance("grade", "--help")
    assert status == 0 and "Options not listed here go to pytest" in output, output
    done = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert "Jupyter notebook" in " ".join(done.stdout.split()), done.stdout[-2000:]
