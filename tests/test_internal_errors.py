"""The checker's own crash is never a verdict on the author (issue 23): an exception escaping the reading of
``--impl`` stops the run once, with the checker's traceback and a request for a bug report, as pytest's internal
error; a path that does not exist is the command line's mistake, said in one line."""
from tests.suite import run_suite

BREAK_DISCOVERY = '''
import adapters.submission

def crash(*args, **kwargs):
    raise KeyError("a crash inside the checker's discovery")

adapters.submission.load_from_path = crash
'''


def test_a_crash_in_the_checkers_own_reading_is_an_internal_error_reported_once(tmp_path):
    (tmp_path / "conftest.py").write_text(BREAK_DISCOVERY)
    model = tmp_path / "model.py"
    model.write_text("import torch.nn as nn\n\nclass Encoder(nn.Module):\n    pass\n")
    code, output, report = run_suite("--pyargs", "conformance", f"--impl={model}", "-p", "no:xdist", cwd=tmp_path,
                                     tmp_path=tmp_path)
    assert code == 3, output
    assert output.count("INTERNAL ERROR of the checker") == 1, output
    assert "a crash inside the checker's discovery" in output and "please report it" in output, output
    assert "error.KeyError" not in output and "ERROR " not in output.replace("INTERNAL ERROR", ""), output


def test_a_path_that_does_not_exist_is_a_usage_error(tmp_path):
    code, output, report = run_suite(f"--impl={tmp_path / 'nowhere.py'}", tmp_path=tmp_path)
    assert code == 4, output
    assert "not a file, a folder or an importable module" in output, output
    assert "Traceback" not in output, output
