"""Tests of adapters.cells and adapters.loading: recognising kinds from content, cutting cells, and running them
without crashing."""
import importlib.util
import inspect
import json
import os
import pickle
import signal
import sys
import threading
import traceback

import nbformat
import pytest
import torch

from adapters.cells import detect_kind, extract_cells
from adapters.loading import load_code
from tests.suite import SEEDS, run_suite, seed


NOTEBOOK = nbformat.writes(nbformat.v4.new_notebook(cells=[
    nbformat.v4.new_markdown_cell("# Title"),
    nbformat.v4.new_code_cell("import torch.nn as nn"),
    nbformat.v4.new_code_cell("class Net(nn.Module):\n    pass"),
]))
EXPORT = """Intro prose before any cell.

In [1]:
import math
print("hello")

hello

## A heading

Some prose, with words: it does not compile.

In [ ]:
def half(x):
    return x / 2

half(3)

1.5

In [None]:
values = [half(2)]
values

tensor([[1., 2.],
        [3., 4.]])

More prose.
"""
MARKDOWN = """---
title: A post
tags: [nlp]
---

Some words.

```python
import math
```

```bash
pip install torch
```

```
def double(x):
    return 2 * x
```

```
Size([3])
```

```
this is not python at all
```

```py
answer = double(21)
```
"""


def json_line(text, code_line):
    """The line of a notebook's JSON text that holds ``code_line`` (one source line a JSON string, as Jupyter
    writes them)."""
    lines = [n for n, line in enumerate(text.splitlines(), 1) if line.strip().startswith(json.dumps(code_line)[:-1])]
    assert len(lines) == 1, (code_line, lines)
    return lines[0]


def write(tmp_path, name, content):
    path = tmp_path / name
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return path


def kinds(result):
    return [p.kind for p in result.problems]


@pytest.mark.parametrize("name, content, kind", [
    ("model.py", NOTEBOOK, "notebook"),
    ("model.ipynb", EXPORT, "notebook-text"),
    ("model.py", MARKDOWN, "markdown"),
    ("model.md", "import torch\nx = 1\n", "python"),
    ("model.ipynb", "x = (\n", "python"),
], ids=["notebook", "export", "markdown", "python", "broken-python"])
def test_kind_comes_from_content_not_extension(tmp_path, name, content, kind):
    path = write(tmp_path, name, content)
    assert detect_kind(content) == kind
    assert extract_cells(path)[0] == kind
    assert load_code(path).kind == kind


def test_text_export_keeps_code_and_drops_outputs_and_prose(tmp_path):
    kind, cells = extract_cells(write(tmp_path, "export.txt", EXPORT))
    assert kind == "notebook-text"
    assert [c.source for c in cells] == ['import math\nprint("hello")\n',
                                         "def half(x):\n    return x / 2\n\nhalf(3)\n",
                                         "values = [half(2)]\nvalues\n"]
    assert [(c.label, c.first_line) for c in cells] == [("cell 1", 4), ("cell 2", 14), ("cell 3", 22)]
    result = load_code(write(tmp_path, "export.txt", EXPORT))
    assert result.problems == [] and result.fatal is None
    assert result.module.values == [1.0]
    assert result.cells[0].output == "hello\n"


def test_text_export_cell_with_syntax_error_is_reported_not_cut(tmp_path):
    text = "In [1]:\ndef ok():\n    return 1\n\ndef broken(x):\n    '''doc'''\n  return x\n\nSome output\n"
    result = load_code(write(tmp_path, "export.txt", text))
    assert result.cells[0].source.count("def ") == 2
    assert kinds(result) == ["syntax"]
    assert result.problems[0].lineno == 7
    assert "cell 1, line 6 (file line 7): IndentationError" in result.problems[0].message


def test_markdown_front_matter_and_fences(tmp_path):
    result = load_code(write(tmp_path, "post.txt", MARKDOWN))
    assert result.kind == "markdown"
    assert [c.source.strip().splitlines()[0] for c in result.cells] == ["import math", "def double(x):",
                                                                        "answer = double(21)"]
    assert [(c.label, c.first_line) for c in result.cells] == [("code block 1", 9), ("code block 2", 17),
                                                               ("code block 3", 30)]
    assert result.problems == []
    assert result.module.answer == 42


def test_syntax_error_cell_is_skipped_and_later_cells_run(tmp_path):
    text = "In [1]:\nclass Broken(:\n    pass\n\nIn [2]:\nimport torch.nn as nn\nclass Good(nn.Module):\n    pass\n"
    result = load_code(write(tmp_path, "nb.txt", text))
    assert kinds(result) == ["syntax"]
    assert result.problems[0].message.startswith("cell 1, line 1 (file line 2): SyntaxError")
    assert not hasattr(result.module, "Broken")
    assert issubclass(result.module.Good, torch.nn.Module)


def test_role_defined_in_a_cell_that_does_not_compile_is_an_error_not_missing(tmp_path):
    from adapters.submission import load_implementation
    from conformance.contract.verdicts import Unusable
    text = ('In [1]:\nimport torch\n\nIn [2]:\ndef subsequent_mask(size):\n    """doc"""\n  return torch.tril('
            'torch.ones(size, size, dtype=torch.bool))\n\nIn [3]:\ndef unrelated():\n    return 1\n')
    impl = load_implementation(write(tmp_path, "nb.txt", text))
    with pytest.raises(Unusable) as caught:
        impl.function("subsequent_mask")(3)
    assert caught.value.cause == "error.cell_does_not_compile"
    assert "subsequent_mask is defined in a cell that does not compile" in caught.value.message
    assert "cell 2, line 3" in caught.value.message and "IndentationError" in caught.value.message
    assert not impl.has("padding_mask")  # defined nowhere: missing, as before
    assert any(n.startswith("subsequent_mask: subsequent_mask is defined in a cell") for n in impl.notes)


def test_a_class_whose_cell_does_not_compile_passes_no_check_that_reads_code(tmp_path):
    """Its code cannot be read either: the checks that read code give its error too, none passes on nothing."""
    from adapters.submission import load_implementation
    from conformance.checks import test_construction
    from conformance.contract.verdicts import Unusable
    text = ("In [1]:\nimport torch.nn as nn\n\nIn [2]:\nclass MultiHeadAttention(nn.Module):\n"
            "    def forward(self, query, key, value, mask=None)\n        return query\n")
    impl = load_implementation(write(tmp_path, "nb.txt", text))
    with pytest.raises(Unusable) as caught:
        test_construction.test_names_read_are_defined(impl, "multi_head_attention")
    assert caught.value.cause == "error.cell_does_not_compile"


def test_missing_module_is_an_import_problem_and_the_cell_goes_on(tmp_path):
    code = "import math\nimport no_such_module_xyz\nfrom no_such_module_xyz import thing\nafter = math.pi\n"
    result = load_code(write(tmp_path, "code.txt", code))
    assert kinds(result) == ["import", "import"]
    assert [p.lineno for p in result.problems] == [2, 3]
    assert "ModuleNotFoundError: No module named 'no_such_module_xyz'" in result.problems[0].message
    assert result.module.after == pytest.approx(3.14159, abs=1e-5)


def test_statements_needing_a_missing_package_are_skipped_and_the_cell_goes_on(tmp_path):
    """The data preparation of a notebook whose package is not installed here fails, and what reads its results
    fails with it; the imports and classes after them in the same cell still load, as they did for the author."""
    code = ("from no_such_datasets_xyz import load_corpus\ncorpus = load_corpus('wmt')\npairs = [p for p in corpus]\n"
            "import torch.nn as nn\nclass Net(nn.Module):\n    pass\ntotal = len(pairs)\nafter = 1\n")
    result = load_code(write(tmp_path, "code.txt", code))
    assert kinds(result) == ["import", "exception", "exception", "exception"]
    assert [p.lineno for p in result.problems] == [1, 2, 3, 7]
    assert issubclass(result.module.Net, torch.nn.Module) and result.module.after == 1
    assert set(result.unbound) == {"load_corpus", "corpus", "pairs", "total"}


def test_a_mistake_of_the_authors_still_stops_the_cell(tmp_path):
    code = "import math\nvalue = undefined_name_xyz + 1\nafter = math.pi\n"
    result = load_code(write(tmp_path, "code.txt", code))
    assert kinds(result) == ["exception"] and not hasattr(result.module, "after")


def test_a_folder_keeping_its_model_in_a_notebook_is_that_notebook(tmp_path):
    from adapters.cells import code_of
    model = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import torch.nn as nn\nclass Net(nn.Module):\n    pass\nclass Head(nn.Module):\n    pass")])
    plots = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch.nn as nn\nclass Tiny(nn.Module):"
                                                                      "\n    pass")])
    (tmp_path / "notes").mkdir()
    (tmp_path / ".ipynb_checkpoints").mkdir()
    for path, notebook in [("notes/model.ipynb", model), ("model - Copy.ipynb", model), ("plots.ipynb", plots),
                           (".ipynb_checkpoints/model-checkpoint.ipynb", model)]:
        (tmp_path / path).write_text(nbformat.writes(notebook))
    (tmp_path / "train.py").write_text("import torch\nfor step in range(3):\n    print(step)\n")
    assert code_of(str(tmp_path)) == str(tmp_path / "notes" / "model.ipynb")
    (tmp_path / "layers.py").write_text("import torch.nn as nn\nclass Net(nn.Module):\n    pass\n")
    assert code_of(str(tmp_path)) == str(tmp_path)  # a module that only defines code: the folder is the project


def test_exception_keeps_earlier_definitions_and_points_at_the_line(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("def f():\n    return 1 / 0"),
        nbformat.v4.new_code_cell("kept = 1\nf()\nlost = 2"),
    ])
    text = nbformat.writes(nb)
    result = load_code(write(tmp_path, "nb.txt", text))
    assert kinds(result) == ["exception"]
    message = result.problems[0].message
    assert message == (f"cell 2, line 2 (file line {json_line(text, 'f()')}), raised in cell 1, line 2 (file line "
                       f"{json_line(text, '    return 1 / 0')}): ZeroDivisionError: division by zero")
    assert result.module.kept == 1 and not hasattr(result.module, "lost")


def test_magics_are_removed_and_recorded(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%matplotlib inline\n!pip install thing\nimport math\nlen?\n"),
        nbformat.v4.new_code_cell("%%time\nslow = 1"),
        nbformat.v4.new_code_cell("get_ipython().run_line_magic('load_ext', 'autoreload')\nx = 2"),
        nbformat.v4.new_code_cell("%%writefile written.py\nwritten = 3"),
        nbformat.v4.new_code_cell("if True:\n    !ls\n    y = 4"),
    ])
    monkeypatch.chdir(tmp_path)
    text = nbformat.writes(nb)
    result = load_code(write(tmp_path, "nb.txt", text))
    assert kinds(result) == ["magic"] * 5
    assert result.problems[0].message == (f"cell 1, line 1 (file line {json_line(text, '%matplotlib inline')}): IPython "
                                          "magic or shell line removed: %matplotlib inline, !pip install thing, len?")
    assert result.cells[0].source == "pass\npass\nimport math\npass\n"
    assert result.cells[4].source == "if True:\n    pass\n    y = 4"
    assert (result.module.slow, result.module.x, result.module.y) == (1, 2, 4)
    assert not hasattr(result.module, "written") and not (tmp_path / "written.py").exists()


def test_endless_cell_is_stopped_and_later_cells_run(tmp_path):
    def on_alarm(signum, frame):
        raise AssertionError("the caller's handler must not fire")

    text = "In [1]:\nwhile True:\n    pass\n\nIn [2]:\ndone = True\n"
    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        result = load_code(write(tmp_path, "nb.txt", text), cell_timeout=0.3)
        assert signal.getsignal(signal.SIGALRM) is on_alarm
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert kinds(result) == ["timeout"]
    assert "timed out after 0.3 s" in result.problems[0].message
    assert result.module.done is True


def test_timeout_outside_the_main_thread_and_total_limit(tmp_path):
    text = "In [1]:\nwhile True:\n    pass\n\nIn [2]:\nwhile True:\n    pass\n\nIn [3]:\ndone = True\n"
    path = write(tmp_path, "nb.txt", text)
    results = []
    worker = threading.Thread(target=lambda: results.append(load_code(path, cell_timeout=0.3)))
    worker.start()
    worker.join(10)
    assert kinds(results[0]) == ["timeout", "timeout"] and results[0].module.done
    result = load_code(path, cell_timeout=5, total_timeout=0.3)
    assert kinds(result) == ["timeout"] * 3
    assert "total time limit of 0.3 s" in result.problems[0].message
    assert "skipped" in result.problems[2].message and not hasattr(result.module, "done")


@pytest.mark.parametrize("line", ["sys.exit(0)", "exit()", "os._exit(0)", "os.abort()", "os.kill(os.getpid(), 9)"])
def test_exit_attempts_are_recorded_and_the_process_survives(tmp_path, line):
    exit_functions = os._exit, os.abort, os.kill
    result = load_code(write(tmp_path, "code.txt", f"import os, sys\nbefore = 1\n{line}\nafter = 2\n"))
    assert kinds(result) == ["exit"] and result.problems[0].lineno == 3
    assert result.module.before == 1 and not hasattr(result.module, "after")
    assert (os._exit, os.abort, os.kill) == exit_functions


def test_input_does_not_block(tmp_path):
    result = load_code(write(tmp_path, "code.txt", "name = input('name? ')\n"))
    assert kinds(result) == ["exception"] and "EOFError" in result.problems[0].message


@pytest.mark.parametrize("content, fatal, kind", [
    ('{"cells": [', "invalid JSON", "unreadable"),
    ('{"metadata": {}}', "not a Jupyter notebook", "unreadable"),
    (nbformat.writes(nbformat.v4.new_notebook()), "notebook has no cells", "notebook"),
    (nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# only prose")])),
     "notebook has no code cells", "notebook"),
    (b"PK\x03\x04\x00\x00binary", "binary content", "unreadable"),
    (b"\xff\xd8\xff\xe0 jpeg-ish", "not UTF-8", "unreadable"),
    ("", "empty file", "python"),
], ids=["bad-json", "json-not-notebook", "empty-notebook", "markdown-only", "nul-bytes", "not-utf8", "empty"])
def test_unloadable_content_gives_a_fatal_message(tmp_path, content, fatal, kind):
    result = load_code(write(tmp_path, "bad.txt", content))
    assert fatal in result.fatal
    assert (result.kind, result.module, result.cells) == (kind, None, [])


def test_missing_path_gives_a_fatal_message(tmp_path):
    assert "cannot read" in load_code(tmp_path / "absent.txt").fatal
    assert "holds no Python module that only defines code" in load_code(tmp_path).fatal


def test_notebook_without_metadata_still_loads(tmp_path):
    text = json.dumps({"cells": [{"cell_type": "code", "source": ["x = ", "5\n"]}]})
    result = load_code(write(tmp_path, "nb.txt", text))
    assert result.kind == "notebook" and result.module.x == 5


def test_package_directory(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .model import Net\nfrom .broken import nothing\n")
    (package / "model.py").write_text("import torch.nn as nn\n\nclass Net(nn.Module):\n    pass\n")
    (package / "broken.py").write_text("x = 1\nraise ValueError('bad config')\n")
    result = load_code(package)
    assert result.kind == "package"
    assert issubclass(result.module.Net, torch.nn.Module)
    assert pickle.loads(pickle.dumps(result.module.Net())).__class__ is result.module.Net
    assert kinds(result) == ["exception"]
    assert result.problems[0].message == "pkg/broken.py, line 2: ValueError: bad config"
    assert not (package / "__pycache__").exists()


def test_source_location_traceback_getsource_and_pickle(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import torch.nn as nn\nclass Net(nn.Module):\n    size = 1"),
        nbformat.v4.new_code_cell("class Net(nn.Module):\n    size = 2\n"
                                  "    def forward(self, x):\n        return x[5]"),
    ])
    text = nbformat.writes(nb)
    result = load_code(write(tmp_path, "nb.txt", text))
    net = result.module.Net()
    assert "size = 2" in inspect.getsource(result.module.Net)
    assert pickle.loads(pickle.dumps(net)).size == 2
    try:
        net(torch.zeros(2))
    except IndexError as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
    assert frame.line == "return x[5]"
    assert result.source_location(frame.filename, frame.lineno) == \
        f"cell 2, line 4 (file line {json_line(text, '        return x[5]')})"
    assert result.source_location("elsewhere.py", 4) is None


def test_real_seeds_load():
    detected = set()
    for path in map(seed, SEEDS):
        result = load_code(path, cell_timeout=5, total_timeout=30)
        assert result.fatal is None, path.name
        detected.add(result.kind)
        classes = [v for v in vars(result.module).values()
                   if isinstance(v, type) and issubclass(v, torch.nn.Module) and v.__module__ == result.module.__name__]
        assert classes, f"{path.name}: no nn.Module subclass; problems: {[p.message for p in result.problems]}"
    assert {"notebook", "notebook-text", "markdown"} <= detected


PROJECT_NEEDING_PACKAGES = {
    "corpus_needing_packages.py": "from datasets_not_installed_here import load_dataset\nimport tokenizers_not_here.models as tm\n",
    "model_needing_packages.py": '''
import torch
import torch.nn as nn

from corpus_needing_packages import load_dataset


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class Generator(nn.Module):
    def __init__(self, d_model, vocab_size):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)
        self.vocabulary = load_dataset("a corpus")

    def forward(self, x):
        return torch.log_softmax(self.proj(x), dim=-1)
''',
}


def test_a_package_missing_here_is_stood_in_for_and_its_use_is_no_finding(tmp_path):
    """A project module importing packages that are not installed here (directly or through another module of the
    project) still loads: placeholders stand in, so its classes are found; code that uses such a package gets
    ``adapter.import_failed`` (missing), never an error of the author's. (Module names no other test's project uses:
    the tests load many projects in one process, and a cached ``model`` would stand in for this one's.)"""
    for name, source in PROJECT_NEEDING_PACKAGES.items():
        (tmp_path / "project" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "project" / name).write_text(source)
    loaded = load_code(tmp_path / "project")
    assert {"FeedForward", "Generator"} <= set(vars(loaded.module)) | {
        n for m in loaded.project_modules() for n in vars(sys.modules[m])}
    assert any("placeholder stood in" in p.message for p in loaded.problems), [p.message for p in loaded.problems]
    assert importlib.util.find_spec("datasets_not_installed_here") is not None  # libraries that ask do not crash
    code, output, report = run_suite(f"--impl={tmp_path / 'project'}", "-k", "output_shape", tmp_path=tmp_path)
    verdicts = {(c["component"], c["verdict"], c["cause"]) for c in report["checks"]}
    assert ("feed_forward", "pass", "") in verdicts, output
    assert ("generator", "missing", "adapter.import_failed") in verdicts, output
