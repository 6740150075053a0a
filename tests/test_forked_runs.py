"""``tests.forked``: a suite run forked from the warm server behaves as ``python -m pytest`` in a subprocess would: its
exit status, its output, the environment and working directory it is given, and a timeout that kills it."""
import subprocess

import pytest

from tests.forked import run_pytest

CHECKS = '''
import os
import time


def test_sees_its_environment():
    print("marker", os.environ["FORKED_MARKER"], os.path.basename(os.getcwd()))


def test_fails():
    assert False, "failed on purpose"


def test_sleeps():
    time.sleep(60)
'''


@pytest.fixture
def checks(tmp_path):
    (tmp_path / "test_forked_example.py").write_text(CHECKS)
    return tmp_path


def test_a_forked_run_takes_its_directory_and_environment_and_returns_pytests_status(checks):
    code, output = run_pytest(["-q", "-s", "-p", "no:cacheprovider", "-k", "environment"], checks,
                              {"FORKED_MARKER": "seen", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert code == 0 and f"marker seen {checks.name}" in output
    code, output = run_pytest(["-q", "-p", "no:cacheprovider", "-k", "fails"], checks, {}, timeout=120)
    assert code == 1 and "failed on purpose" in output


def test_a_forked_run_past_its_time_is_killed(checks):
    with pytest.raises(subprocess.TimeoutExpired):
        run_pytest(["-q", "-p", "no:cacheprovider", "-k", "sleeps"], checks, {}, timeout=3)
