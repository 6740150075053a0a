"""Hostile or broken submissions never take the checker down: for each one, ``python -m conformance report`` and
``pytest conformance --impl=FILE`` finish normally, write their report, say specifically what is wrong with the
code, and list every component (missing, or error where code ran and raised).

Cases: a ``.ipynb`` that is not valid JSON, an empty notebook, a binary file, a notebook with only markdown, a
cell with an endless loop (stopped by the per-cell time limit of ``adapters.loading.load_code``, 10 s by default),
a module calling ``sys.exit(0)`` at import, one calling ``os._exit(0)`` at import.

The runs are restricted to the shapes and masks families (:data:`SELECTION`), whose checks cover every component;
``ROBUSTNESS_ALL=1`` runs every check.
"""
import json
import os
from pathlib import Path

import nbformat
import pytest

from conformance.contract.interface import ROLES
from conformance.reports import report
from tests.suite import run_suite

V4 = nbformat.v4
CLASS_AFTER = "\nclass LayerNorm:\n    pass\n"  # never reached: the exit comes first

CASES = {
    # name: (file name, content, words the report must contain (any of them, case-insensitive))
    "invalid_json_ipynb": ("broken.ipynb", '{"cells": [{"cell_type": "code", "source": ["import torch\\n", ',
                           ["invalid JSON"]),
    "empty_notebook": ("empty.ipynb", nbformat.writes(V4.new_notebook()), ["notebook has no cells"]),
    "binary_file": ("weights.pt", bytes(range(256)) * 4, ["binary content"]),
    "markdown_only_notebook": ("prose.ipynb", nbformat.writes(V4.new_notebook(cells=[
        V4.new_markdown_cell("# My Transformer\nComing soon."), V4.new_markdown_cell("```python\nx = 1\n```")])),
        ["no code cells"]),
    "endless_cell": ("loop.ipynb", nbformat.writes(V4.new_notebook(cells=[
        V4.new_code_cell("import torch"), V4.new_code_cell("while True:\n    pass"),
        V4.new_code_cell("after_the_loop = True")])), ["timed out after"]),
    "sys_exit_at_import": ("exits.py", "import sys\nsys.exit(0)\n" + CLASS_AFTER, ["sys.exit"]),
    "os_exit_at_import": ("hard_exit.py", "import os\nos._exit(0)\n" + CLASS_AFTER, ["os._exit(0) blocked"]),
}
ACCEPTED = {"missing", "error"}
SELECTION = () if os.environ.get("ROBUSTNESS_ALL", "") not in ("", "0") else ("-m", "shapes or masks")


@pytest.fixture(autouse=True)
def short_cell_time_limit(monkeypatch):
    """The endless cell is stopped after 2 s instead of the default 10 s."""
    monkeypatch.setenv("CONFORMANCE_CELL_TIMEOUT", "2")


def write(tmp_path, name):
    file_name, content, _ = CASES[name]
    path = tmp_path / file_name
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return path


def says(text, words):
    return any(w.lower() in text.lower() for w in words)


def assert_every_component_listed(data, context):
    assert set(data["table"]) == set(ROLES), context
    verdicts = {c["component"]: c["verdict"] for c in data["checks"]}
    assert set(verdicts) == set(ROLES), context
    bad = [f"{c['component']}/{c['check']}: {c['verdict']}" for c in data["checks"] if c["verdict"] not in ACCEPTED]
    assert bad == [], context


@pytest.mark.parametrize("name", CASES)
def test_report_command_finishes_and_explains(name, tmp_path):
    path = write(tmp_path, name)
    out = tmp_path / "out"
    written = report(path, out, *SELECTION, timeout=300)
    markdown = (out / f"{path.stem}.md").read_text()
    assert written is not None, markdown
    data = json.loads(Path(written).read_text())
    words = CASES[name][2]
    assert says("\n".join(data["notes"]), words), data["notes"]
    assert says(markdown, words), markdown
    assert_every_component_listed(data, markdown)


@pytest.mark.parametrize("name", CASES)
def test_pytest_run_finishes_and_explains(name, tmp_path):
    path = write(tmp_path, name)
    code, output, data = run_suite(f"--impl={path}", *SELECTION, tmp_path=tmp_path, timeout=300)
    assert data is not None, output[-3000:]
    assert code in (0, 1), output[-3000:]  # tests passed / failed: not an internal error, usage error or crash
    assert says(output, CASES[name][2]) and says("\n".join(data["notes"]), CASES[name][2]), output[-3000:]
    assert_every_component_listed(data, output[-3000:])


@pytest.mark.parametrize("content", [None, "import torch\n\n\nclass Helper:\n    pass\n\n\ndef tokenize(text):\n"
                                           "    return text.split()\n"])
def test_a_run_that_checks_nothing_fails_and_says_what_it_saw(tmp_path, content):
    target = tmp_path / "empty"
    target.mkdir()
    if content is not None:
        target = target / "notes.py"
        target.write_text(content)
    code, output, report = run_suite(f"--impl={target}", tmp_path=tmp_path)
    assert {c["verdict"] for c in report["checks"]} == {"missing"}
    assert code == 1, output
    assert "NOTHING CHECKED" in output and "[roles]\n# embedding = " in output
    if content is not None:
        assert "the code defines: tokenize" in output  # functions it saw (Helper is no torch.nn.Module)
