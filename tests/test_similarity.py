"""Similarity between submissions (``conformance.grading.similarity``): a class written here from the reference, two
identical copies, a copy renamed and reordered on its syntax tree (comments and docstrings gone, others added), and
an unrelated correct study (``tests/styles/annotated_practice.py``): the copies are flagged pairwise with their matched
regions, the study is not, and similarity never changes a score. One test grades such a class for real."""
import ast
import builtins
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("copydetect")

from conformance.grading import runner as grading
from conformance.grading import similarity
from tests import studies

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reference" / "transformer.py"
COPIES = ("copy_a", "copy_b", "renamed")
UNRELATED = "annotated_practice"
UNRELATED_ROLES = {  # what the grader's notes name (discovery on tests/styles/annotated_practice.py)
    "layer_norm": "FeatureNorm", "feed_forward": "TwoLayerFFN", "multi_head_attention": "HeadedAttention",
    "embedding": "TokenEmbedding", "positional_encoding": "SinusoidalPositions",
    "sublayer_connection": "PreNormResidual", "encoder_layer": "EncoderBlock", "decoder_layer": "DecoderBlock",
    "encoder": "EncoderStack", "decoder": "DecoderStack", "generator": "VocabProjection",
    "subsequent_mask": "causal_mask", "model": "build_transformer", "attention": "attend"}


class Renamer(ast.NodeTransformer):
    """Renames the module's classes and functions (``MultiHeadAttention`` -> ``MyMultiHeadAttention``, as discovery
    still reads names), every local variable (``v0``, ...) and every attribute set on ``self`` (``a0``, ..., wherever
    it is read), consistently; parameters, methods and imports keep their names."""

    def __init__(self, module):
        self.names = {}
        kept = set(dir(builtins)) | {"self", "CONFORMANCE_ROLES"}
        for node in module.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                self.names[node.name] = ("My" if isinstance(node, ast.ClassDef) else "my_") + node.name
        parameters = {a.arg for node in ast.walk(module) if isinstance(node, ast.arguments)
                      for a in node.posonlyargs + node.args + node.kwonlyargs + [node.vararg, node.kwarg] if a}
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store) \
                            and inner.id not in parameters | kept and inner.id not in self.names:
                        self.names[inner.id] = f"v{len(self.names)}"
        self.attributes = {}
        for node in ast.walk(module):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                self.attributes.setdefault(node.attr, f"a{len(self.attributes)}")

    def visit_Name(self, node):
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_ClassDef(self, node):
        self.generic_visit(node)
        node.name = self.names.get(node.name, node.name)
        methods = [s for s in node.body if isinstance(s, ast.FunctionDef)]
        node.body = [s for s in node.body if not isinstance(s, ast.FunctionDef)] + methods[::-1]  # reordered
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.name = self.names.get(node.name, node.name)
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if not (isinstance(node.value, ast.Name) and node.value.id in ("torch", "nn", "math")):
            node.attr = self.attributes.get(node.attr, node.attr)  # (on self, or on a block of this module)
        return node


def without_docstrings(module):
    for node in ast.walk(module):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                node.body = node.body[1:] or [ast.Pass()]
    return module


def renamed_copy(source):
    """``(code, {role: new name})``: the reference renamed by :class:`Renamer`, its methods in reverse order, its
    docstrings and comments gone (``ast.unparse``) and other comments added, without ``CONFORMANCE_ROLES``."""
    module = without_docstrings(ast.parse(source))
    declared = similarity.declared_roles([similarity.Unit("reference.py", 1, source.splitlines(), ast.parse(source))])
    renamer = Renamer(module)
    module = renamer.visit(module)
    module.body = [s for s in module.body if not (isinstance(s, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "CONFORMANCE_ROLES" for t in s.targets))]
    code = ast.unparse(ast.fix_missing_locations(module))
    code = re.sub(r"^(\s*)def (\w+)", r"\1# my own \2, written from scratch\n\1def \2", code, flags=re.M)
    return code + "\n", {role: renamer.names.get(name, name) for role, name in declared.items()}


def write_class(folder):
    """The class: two identical copies of the reference, the renamed copy, the unrelated study; the roles of the
    renamed copy and of the study (the identical copies declare theirs in ``CONFORMANCE_ROLES``)."""
    folder.mkdir(parents=True, exist_ok=True)
    source = REFERENCE.read_text()
    for name in COPIES[:2]:
        (folder / f"{name}.py").write_text(source)
    code, roles = renamed_copy(source)
    (folder / "renamed.py").write_text(code)
    shutil.copy(ROOT / "tests" / "styles" / f"{UNRELATED}.py", folder / f"{UNRELATED}.py")
    assert studies.is_correct(UNRELATED)
    return {"renamed": roles, UNRELATED: UNRELATED_ROLES}


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("similar") / "class"
    return folder, write_class(folder)


@pytest.fixture(scope="module")
def found(class_folder):
    folder, roles = class_folder
    return similarity.compare_paths(sorted(folder.iterdir()), roles)


def pair(found, a, b):
    return next(p for p in found.data["pairs"] if {p["a"], p["b"]} == {a, b})


def test_the_renaming_is_real(class_folder):
    folder, roles = class_folder
    code, reference = (folder / "renamed.py").read_text(), REFERENCE.read_text()
    assert "class MultiHeadAttention(" in reference and "class MultiHeadAttention(" not in code
    assert "self.a0" in code and not set(re.findall(r"self\.(\w+) =", reference)) & set(
        re.findall(r"self\.(\w+) =", code))  # every attribute renamed
    assert "# my own forward, written from scratch" in code and '"""' not in code
    assert roles["renamed"]["multi_head_attention"] == "MyMultiHeadAttention"
    compile(code, "renamed.py", "exec")


def test_copies_are_flagged_pairwise_with_their_matched_regions(found):
    for a, b in [("copy_a", "copy_b"), ("copy_a", "renamed"), ("copy_b", "renamed")]:
        p = pair(found, a, b)
        assert p["flagged"] and p["score"] >= similarity.THRESHOLD, (a, b, p["score"])
        assert p["overall"]["regions"]["a"] and p["overall"]["regions"]["b"]
        mha = p["components"]["multi_head_attention"]
        assert mha["flagged"] and mha["longest"] >= similarity.LONG_MATCH
        for side in ("a", "b"):
            assert all(r["where"].endswith(".py") and 1 <= r["lines"][0] <= r["lines"][1]
                       for r in mha["regions"][side])
    assert set(found.data["pairs"][0]["components"]) >= {"multi_head_attention", "encoder", "model"}
    assert [sorted(g) for g in found.data["clusters"]] == [sorted(COPIES)]


def test_the_matched_regions_are_the_lines_of_the_role(found):
    p = pair(found, "copy_a", "copy_b")
    lines = REFERENCE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines, 1) if line.startswith("class MultiHeadAttention"))
    end = next(i for i, line in enumerate(lines[start:], start + 1) if line.startswith("class ")) - 1
    for side in ("a", "b"):
        for region in p["components"]["multi_head_attention"]["regions"][side]:
            assert start <= region["lines"][0] <= region["lines"][1] <= end, (region, start, end)


def test_an_unrelated_correct_submission_is_not_flagged(found):
    for name in COPIES:
        p = pair(found, name, UNRELATED)
        assert not p["flagged"] and p["score"] < similarity.THRESHOLD, (name, p["score"])
        assert not any(c["flagged"] for c in p["components"].values()), p["components"]
    assert found.data["submissions"][UNRELATED]["most_similar_to"] in COPIES
    assert found.data["submissions"]["renamed"]["similarity"] >= similarity.THRESHOLD


def test_shared_k_grams_are_those_copydetect_finds(found):
    """The overlap found in arrays holds the positions copydetect's own search gives, pair by pair (its order aside),
    for copies, the renamed copy and the unrelated study alike."""
    from copydetect.utils import find_fingerprint_overlap
    texts = [source.whole for source in found.sources.values()] + [
        text for source in found.sources.values() for text in source.components.values()]
    compared = 0
    for a, b in zip(texts, texts[1:] + texts[:1]):
        ours = similarity.overlap(a, b)
        theirs = find_fingerprint_overlap(a.print.hashes, b.print.hashes, a.print.hash_idx, b.print.hash_idx)
        assert [sorted(x.tolist()) for x in ours] == [sorted(x.tolist()) for x in theirs]
        compared += bool(len(theirs[0]))
    assert compared > len(texts) // 2  # (most neighbours share code: the comparison is not vacuous)


def test_without_roles_the_whole_code_is_compared_and_said_so(class_folder):
    folder, _ = class_folder
    found = similarity.compare_paths([folder / "renamed.py", folder / f"{UNRELATED}.py"],
                                     references=[folder / "copy_a.py"])
    assert all("compared as whole code only" in " ".join(found.data["submissions"][n]["notes"])
               for n in ("renamed", UNRELATED))
    p = pair(found, "renamed", similarity.REFERENCE + "copy_a")
    assert p["flagged"] and p["components"]["multi_head_attention"]["flagged"]  # the solution declares its roles
    assert not pair(found, UNRELATED, similarity.REFERENCE + "copy_a")["flagged"]
    assert not any(p["a"].startswith(similarity.REFERENCE) and p["b"].startswith(similarity.REFERENCE)
                   for p in found.data["pairs"])


def test_a_notebook_is_read_through_its_code_cells(tmp_path):
    source = REFERENCE.read_text()
    blocks = re.split(r"\n(?=class |def )", source)
    notebook = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# my transformer"]}] + [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": block.splitlines(keepends=True)} for block in blocks],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(notebook, indent=1))
    found = similarity.compare_paths([tmp_path / "nb.ipynb", REFERENCE])
    p = found.data["pairs"][0]
    assert p["flagged"] and p["components"]["multi_head_attention"]["flagged"]
    assert any(r["where"].startswith("nb.ipynb") for r in p["overall"]["regions"]["a" if p["a"] == "nb" else "b"])


def test_roles_are_read_from_the_graders_notes():
    notes = ["loaded as python: 1 code cell(s)", "layer_norm: LayerNormalization",
             "attention: MultiHeadAttentionBlock.attention", "encoder: Encoder (features=d_model, layers=layers)",
             "encoder: built with the reference's ...", "masks: boolean, True = may attend"]
    assert similarity.roles_from_notes(notes) == {"layer_norm": "LayerNormalization",
                                                  "attention": "MultiHeadAttentionBlock.attention",
                                                  "encoder": "Encoder"}


def test_similarity_never_changes_a_score(class_folder):
    """``for_class`` on results scored from their checks: every score, status and verdict is what it was."""
    folder, roles = class_folder
    entries = grading.discover(folder)
    checks = [dict(component="attention", family="softmax", check="a", verdict="pass"),
              dict(component="encoder", family="masks", check="b", verdict="fail")]
    results = {name: grading.score(dict(name=name, status="graded", checks=[dict(c) for c in checks],
                                        notes=[f"{r}: {t}" for r, t in roles.get(name, {}).items()]),
                                   grading.load_rubric()) for name, _ in entries}
    before = json.loads(json.dumps(results))
    found = similarity.for_class(results, entries)
    assert found.data["clusters"] == [sorted(COPIES)] or sorted(found.data["clusters"][0]) == sorted(COPIES)
    for name, result in results.items():
        added = {k: v for k, v in result.items() if k not in before[name]}
        assert set(added) == {"similarity", "most_similar_to"}
        assert {k: v for k, v in result.items() if k in before[name]} == before[name]
        assert grading.score(dict(result), grading.load_rubric())["score"] == before[name]["score"]


def test_the_section_shows_pairs_side_by_side_and_the_clusters(found):
    page = found.html()
    assert "<section id='similarity'>" in page and "<ul id='clusters'>" in page
    assert page.count("<li class='cluster'>") == 1 and page.count("<details class='pair'>") == 3
    assert "class='hit'" in page and "<div class='sides'>" in page and UNRELATED not in page.split("<ul")[1]
    assert "&lt;" in page or "&gt;" in page or "&quot;" in page or "&#x27;" in page  # the code is escaped


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded for real on a few checks, the teacher's solution (the reference) given through
    ``similar_to``: ``(output folder, results)``."""
    root = tmp_path_factory.mktemp("graded")
    write_class(root / "class")
    (root / "known").mkdir()
    shutil.copy(REFERENCE, root / "known" / "solution.py")
    out = root / "out"
    return out, grading.grade(root / "class", out, jobs=2, timeout=240, pytest_args=["-m", "subsequent_mask"],
                              progress=False, similar_to=root / "known")


def test_grading_a_class_writes_similarity(graded):
    """The real grader on the class: similarity.json, the summary's fields, the page's section, and the scores are
    those of the checks alone."""
    out, results = graded
    data = json.loads((out / "similarity.json").read_text())
    flagged = {frozenset((p["a"], p["b"])) for p in data["pairs"] if p["flagged"]}
    solution = similarity.REFERENCE + "solution"
    assert flagged == {frozenset(p) for p in [("copy_a", "copy_b"), ("copy_a", "renamed"), ("copy_b", "renamed")]
                       + [(name, solution) for name in COPIES]}
    assert {p["b"] for p in data["pairs"] if p["a"] == UNRELATED} >= {solution}  # compared, not flagged
    assert [sorted(g) for g in data["clusters"]] == [sorted([*COPIES, solution])]
    renamed = next(p for p in data["pairs"] if {p["a"], p["b"]} == {"copy_a", "renamed"})
    assert renamed["components"]["multi_head_attention"]["flagged"]  # the renamed copy's roles from its notes
    assert len(data["submissions"]["renamed"]["components"]) == 15
    summary = {r["name"]: r for r in json.loads((out / "summary.json").read_text())["submissions"]}
    for name in COPIES:
        assert summary[name]["similarity"] >= similarity.THRESHOLD and summary[name]["most_similar_to"] in COPIES
    assert summary[UNRELATED]["similarity"] < similarity.THRESHOLD
    page = (out / "index.html").read_text()
    assert "<section id='similarity'>" in page and page.count("<details class='pair'>") == 6
    assert "most_similar_to" in (out / "summary.csv").read_text().splitlines()[0]
    rubric = grading.load_rubric()
    for name, result in results.items():
        assert result["status"] == "graded", (name, result["reason"])
        alone = grading.score(dict(status=result["status"], checks=result["checks"]), rubric)
        assert result["score"] == alone["score"], name


OPEN_PAIRS = "<script>document.querySelectorAll('details.pair').forEach(function (d) { d.open = true; });</script>"


def test_the_similarity_section_renders_in_a_headless_browser(graded, tmp_path):
    """Headless chromium at 1366x900, every pair opened: no script error, no horizontal scroll, the clusters, the
    pairs' table and their code side by side with highlighted lines."""
    from tests.test_grading import chromium, probed
    browser = chromium()
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium); the page cannot be rendered")
    out, _ = graded
    attributes, dom = probed(browser, (out / "index.html").read_text().replace("</body>", OPEN_PAIRS + "</body>"),
                             tmp_path)
    assert "data-errors" not in attributes, attributes["data-errors"]
    assert int(attributes["data-scroll-width"]) <= 1366
    assert '<section id="similarity">' in dom and dom.count('<li class="cluster">') == 1
    assert dom.count('<tr class="similar">') == 6 and dom.count('<details class="pair" open="">') == 6
    assert dom.count('<div class="sides">') >= 6 and 'class="hit"' in dom


def test_a_missing_similar_to_is_said_in_one_line(tmp_path):
    write_class(tmp_path / "class")
    done = subprocess.run([sys.executable, "-m", "conformance", "grade", str(tmp_path / "class"), "--similar-to",
                           str(tmp_path / "nowhere")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--similar-to" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
