"""Bad input at the command line gets a clear, specific message and a non-zero exit, never a traceback
(issue 24): a folder that does not exist, a file where the folder goes, a folder with no submission in it; and the
help says what the commands do, that other options go to pytest, and which forms ``--impl`` reads."""
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
    (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", 1, "holds no submission"),
])
def test_grading_bad_input_is_said_in_one_line(tmp_path, make, code, says):
    status, output = conformance("grade", str(make(tmp_path)), "--out", str(tmp_path / "out"))
    assert status == code, output
    assert says in output and "Traceback" not in output, output


def test_help_says_what_the_commands_do_and_where_other_options_go():
    status, output = conformance("--help")
    assert status == 0 and "grade classes of them." in output, output
    status, output = conformance("grade", "--help")
    assert status == 0 and "Options not listed here go to pytest" in output, output
    done = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert "Jupyter notebook" in " ".join(done.stdout.split()), done.stdout[-2000:]
