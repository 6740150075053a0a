"""``python -m conformance grade``: a class made of the five seeds (read in place), the reference and buggy
variants gives every report file with one row each; unchanged submissions are not checked again; scores follow
the rubric; the HTML page renders in a real browser."""
import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.grading import runner as grading
from tests import answer_keys, mutants, students, studies
from tests.suite import SEEDS, seed

ROOT = Path(__file__).resolve().parents[1]
BUGS = ["attention_unscaled", "attention_scale_d_k"]
SELECTION = ["-m", "multi_head_attention"]  # a few checks keep the tests quick


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    folder = root / "class"
    folder.mkdir()
    for stem in SEEDS:
        path = seed(stem)
        (folder / path.name).symlink_to(path)  # read in place
    shutil.copy(ROOT / "reference" / "transformer.py", folder / "reference_copy.py")
    for name in BUGS:
        mutants.write(mutants.BY_NAME[name], folder)
    out = root / "out"
    results = grading.grade(folder, out, jobs=2, timeout=240, pytest_args=SELECTION, progress=False)
    return folder, out, results


def names(folder):
    return {name for name, _ in grading.discover(folder)}


def test_every_report_file_with_one_row_each(graded):
    folder, out, results = graded
    expected = names(folder)
    assert len(expected) == len(SEEDS) + 1 + len(BUGS)
    assert set(results) == expected
    summary = json.loads((out / "summary.json").read_text())
    assert [r["name"] for r in summary["submissions"]] == list(results)
    with open(out / "summary.csv") as f:
        assert sorted(r["name"] for r in csv.DictReader(f)) == sorted(expected)
    markdown = (out / "summary.md").read_text()
    assert all(f"| {name} " in markdown for name in expected)
    html = (out / "index.html").read_text()
    assert html.count("<tr class='submission'>") == len(expected)
    suites = ET.parse(out / "junit.xml").getroot()
    assert sorted(s.get("name") for s in suites.iter("testsuite")) == sorted(expected)
    for name in expected:
        feedback = (out / "feedback" / f"{name}.md").read_text()
        assert feedback.startswith(f"# Feedback for {name}")
        gradescope = json.loads((out / "gradescope" / name / "results.json").read_text())
        assert {"score", "max_score", "tests"} <= set(gradescope)
        assert all({"name", "score", "max_score", "output"} <= set(t) for t in gradescope["tests"])
    assert not list(out.rglob("*.partial"))


def test_verdicts_and_scores(graded):
    _, out, results = graded
    assert results["reference_copy"]["status"] == "graded" and results["reference_copy"]["score"] == 100
    for name in BUGS:
        bug = results[name]
        assert bug["status"] == "graded" and bug["score"] < 100
        assert any(c["verdict"] == "fail" and c["cause"].startswith("multi_head_attention.scale")
                   for c in bug["checks"]), bug["checks"]
        feedback = (out / "feedback" / f"{name}.md").read_text()
        cause = "multi_head_attention." + mutants.BY_NAME[name].cause.removeprefix("attention.")
        assert f"**fail** in `multi_head_attention`: `{cause}`" in feedback
        assert "What the paper requires: scores multiplied by 1/sqrt(d_k)" in feedback
    for name, result in results.items():
        assert result["status"] in ("graded", "reference handed in", "exited", "timeout", "crashed"), name
        assert 0 <= result["score"] <= result["max_score"]


def test_class_analytics_count_who_failed_a_check(graded):
    """summary.md counts the submissions that failed the scale check, both mutants among them, each linked."""
    _, out, results = graded
    key = "multi_head_attention/scores_scaled_by_inverse_sqrt_d_k"
    failed = [name for name, r in results.items() if r["status"] == "graded" and any(
        c["verdict"] == "fail" and f"{c['component']}/{c['check']}" == key for c in r["checks"])]
    assert set(BUGS) <= set(failed)
    markdown = (out / "summary.md").read_text().split("### Findings by check", 1)[1]
    row = next([c.strip() for c in line.split("|")[1:-1]] for line in markdown.splitlines()
               if line.startswith("| fail ") and f" {key} " in line)
    assert row[2] == str(len(failed)) and row[4] == ", ".join(f"[{n}](feedback/{n}.md)" for n in failed)
    assert all((out / "feedback" / f"{name}.md").exists() for name in failed)


def test_feedback_names_the_line_of_an_error(graded):
    """The lines come from the seeds' answer keys (``tests/seed_keys/``), read off the seeds by hand."""
    folder, out, results = graded
    located = [c for r in results.values() for c in r["checks"] if c["verdict"] == "error" and "(at " in c["message"]]
    for check in located:
        assert "/tmp/grade-" not in check["message"]  # the grader's scratch folder never shows
    cited = 0
    for stem in SEEDS:
        key = answer_keys.read_key(ROOT / "tests" / "seed_keys" / f"{stem}.toml")
        for finding in key.findings:
            if finding.kind == "error" and finding.component == "multi_head_attention" and not finding.behind \
                    and not finding.known_gap:
                feedback = (out / "feedback" / f"{stem}.md").read_text()
                assert any(f"{SEEDS[stem].name}:{line}" in feedback for line in finding.line), (finding, feedback[:3000])
                cited += 1
    assert cited >= 3


def test_pictures(graded):
    pytest.importorskip("matplotlib")
    _, out, results = graded
    assert (out / "figures" / "verdicts.png").stat().st_size > 1000
    assert (out / "figures" / "reference_copy-pe.png").stat().st_size > 1000
    assert "data:image/png;base64," in (out / "index.html").read_text()


def test_each_submission_reports_the_cpu_time_of_its_two_processes(graded):
    """``cpu_s``: the CPU seconds of the process beside the code and of the judge, measured by the worker when both
    ended; the two take turns, so together they are never much more than the submission's wall time."""
    _, _, results = graded
    checked = [r for r in results.values() if r.get("checks_s") is not None]
    assert checked and all(0 < r["cpu_s"] <= 2 * r["wall_s"] + 0.5 for r in checked), [
        (r["name"], r.get("cpu_s"), r["wall_s"]) for r in checked]


def test_unchanged_submissions_are_not_checked_again(graded, tmp_path):
    folder, out, results = graded
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    again = grading.grade(folder, copy, jobs=2, pytest_args=SELECTION, progress=False)
    assert {n: r["wall_s"] for n, r in again.items()} == {n: r["wall_s"] for n, r in results.items()}


def test_a_changed_submission_is_checked_again(tmp_path):
    folder = tmp_path / "class"
    mutants.write(mutants.BY_NAME["attention_unscaled"], folder)
    selection = ["-m", "subsequent_mask"]
    stored = tmp_path / "out" / "results" / "attention_unscaled.json"

    def mark_stored_result():  # a result read back from the cache keeps the mark; one checked again has none
        stored.write_text(json.dumps({**json.loads(stored.read_text()), "marked": True}))

    grading.grade(folder, tmp_path / "out", jobs=1, pytest_args=selection, progress=False)
    mark_stored_result()
    assert grading.grade(folder, tmp_path / "out", jobs=1, pytest_args=selection,
                         progress=False)["attention_unscaled"].get("marked")  # unchanged: from the cache
    path = folder / "attention_unscaled.py"
    path.write_text(path.read_text() + "\n# changed\n")
    second = grading.grade(folder, tmp_path / "out", jobs=1, pytest_args=selection, progress=False)
    assert "marked" not in second["attention_unscaled"]
    mark_stored_result()
    forced = grading.grade(folder, tmp_path / "out", jobs=1, pytest_args=selection, progress=False, force=True)
    assert "marked" not in forced["attention_unscaled"]


def test_rubric_weights_and_credit(tmp_path):
    checks = [dict(component="attention", family="softmax", check="a", verdict="pass"),
              dict(component="attention", family="shapes", check="output_shape", verdict="fail"),
              dict(component="encoder", family="norm_order", check="c", verdict="deviation"),
              dict(component="encoder", family="masks", check="d", verdict="missing")]
    result = dict(status="graded", checks=checks)
    rubric = grading.load_rubric()
    rubric["components"] = {**rubric["components"], "attention": 3}
    grading.score(result, rubric)
    # attention: one fail costs the component (weight 3); encoder: the deviation earns 1.0, the missing check is out
    assert result["score"] == pytest.approx(100 * (3 * 0 + 1 * 1) / 4, abs=0.01)
    custom = tmp_path / "rubric.toml"
    custom.write_text('[score]\nmax = 10\na_mistake_costs_the_component = false\n[credit]\npass = 1.0\n'
                      'deviation = 0.5\n[components]\nattention = 1\nencoder = 1\n[families]\n[checks]\n'
                      '"attention/output_shape" = 3\n')
    grading.score(result, grading.load_rubric(custom))
    # the file changes the default rubric where it says: the softmax family still weighs 2
    assert result["score"] == pytest.approx(10 * (2 / 5 + 0.5) / 2, abs=0.01)
    result["status"] = "tampering detected"
    assert grading.score(result, rubric)["score"] == 0


def test_every_role_is_required_by_default_and_one_written_inline_is_graded_where_it_is_written(tmp_path):
    checks = [dict(component="multi_head_attention", family="softmax", check="a", verdict="pass"),
              dict(component="attention", family="softmax", check="a", verdict="missing"),
              dict(component="padding_mask", family="masks", check="b", verdict="missing")]
    rubric = grading.load_rubric()
    rubric["components"] = {**rubric["components"], "attention": 3, "multi_head_attention": 3}
    graded = grading.score(dict(status="graded", checks=checks), rubric)
    # attention is written inside the MHA and graded through it; no model encloses the padding mask: it earns 0
    assert graded["components"]["attention"][0] == 1 and graded["components"]["padding_mask"][0] == 0
    assert graded["assignment"] == dict(lacking=["padding_mask"], inline={"attention": "multi_head_attention"},
                                        not_asked=[])
    assert graded["score"] == pytest.approx(100 * (3 + 3) / (3 + 3 + 1), abs=0.01)
    custom = tmp_path / "rubric.toml"
    custom.write_text("[score]\nrequired = [\"multi_head_attention\"]\n[credit]\npass = 1.0\n")
    graded = grading.score(dict(status="graded", checks=checks), grading.load_rubric(custom))
    assert graded["score"] == 100 and graded["assignment"]["lacking"] == []  # the padding mask is not asked for


def test_command_line(tmp_path):
    folder = tmp_path / "class"
    mutants.write(mutants.BY_NAME["attention_unscaled"], folder)
    done = subprocess.run([sys.executable, "-m", "conformance", "grade", str(folder), "--out", str(tmp_path / "out"),
                           "--jobs", "1", "-m", "subsequent_mask"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "passed 1, failed 0" in done.stderr  # the progress line's running counts
    assert (tmp_path / "out" / "index.html").exists()


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def browser():
    """The headless browser of the page-rendering tests; without one they skip, except in CI (CI=true), where
    .ci/run installs chromium and its absence fails."""
    found = chromium()
    if found is None and os.environ.get("CI") == "true":
        pytest.fail("chromium is not installed: CI must render the page (.ci/run installs it)")
    if found is None:
        pytest.skip("chromium is not installed (apt-get install chromium); the page cannot be rendered")
    return found


PROBE = """<script>
(function () {
  var root = document.documentElement;
  function note(text) { root.setAttribute('data-errors', (root.getAttribute('data-errors') || '') + text + ';'); }
  window.addEventListener('error', function (event) { note(event.message); });
  var error = console.error;
  console.error = function () { note(Array.prototype.join.call(arguments, ' ')); error.apply(console, arguments); };
  window.addEventListener('load', function () {
    root.setAttribute('data-scroll-width', root.scrollWidth);
    root.setAttribute('data-broken-images', Array.from(document.images).filter(function (i) {
      return !i.naturalWidth; }).length);
    var score = document.querySelector('#summary th[title=score]');
    if (score) score.click();
    root.setAttribute('data-sorted', Array.from(document.querySelectorAll('#summary tbody td:first-child'),
                                                function (c) { return c.textContent; }).join(' '));
  });
})();
</script>"""
"""Put first in a page's head: every uncaught error (a script that does not parse included) and every console.error
goes into the root element's ``data-errors``; once loaded, the page's scrollWidth, the images that did not decode
and the summary table's names after a click on its score header go into attributes too, which --dump-dom shows."""


def probed(browser, html_text, folder, name="page"):
    """``(root element's attributes, dumped DOM)`` of ``html_text`` with :data:`PROBE`, rendered by headless chromium
    at 1366x900 (a screenshot left in ``folder/NAME.png``)."""
    page = folder / f"{name}.html"
    page.write_text(html_text.replace("<head>", "<head>" + PROBE, 1))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", f"--user-data-dir={folder}",
             "--window-size=1366,900"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    subprocess.run([browser, *flags, f"--screenshot={folder / f'{name}.png'}", page.as_uri()], capture_output=True,
                   timeout=120)
    root = re.search(r"<html([^>]*)>", dom.stdout)
    return {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', root[1])}, dom.stdout


def test_the_html_page_renders_in_a_headless_browser(graded, tmp_path):
    """The page in headless chromium at 1366x900: the summary table, the positional-encoding heatmaps, the histogram
    and the analytics render, with no script error and no horizontal scroll, and a header click sorts. Errors are
    caught by :data:`PROBE`, a script put first in the page that writes them into the DOM that --dump-dom prints
    (chromium's own log on stderr is full of unrelated messages, dbus and GPU); it is shown to catch one. In CI
    (CI=true) a missing chromium fails: .ci/run installs it."""
    _, out, results = graded
    attributes, dom = probed(browser(), (out / "index.html").read_text(), tmp_path)
    assert "data-errors" not in attributes, attributes["data-errors"]
    assert int(attributes["data-scroll-width"]) <= 1366  # (present: the probe ran once the page had loaded)
    assert dom.count('<tr class="submission">') == len(results)
    assert attributes["data-broken-images"] == "0"
    assert 'alt="positional encoding of reference_copy"' in dom and 'alt="verdicts"' in dom
    assert dom.count("<rect ") == 10 and '<section id="analytics">' in dom
    assert all(f'<table class="sortable" id="{t}">' in dom for t in ("rates", "causes", "checks"))
    assert attributes["data-sorted"].split() == sorted(results, key=lambda n: results[n]["score"])
    assert (tmp_path / "page.png").stat().st_size > 5000
    broken, _ = probed(browser(), "<html><head></head><body><script>notDefined()</script></body></html>", tmp_path,
                       "broken")
    assert "notDefined" in broken["data-errors"]


def test_correct_code_in_every_style_grades_full_marks(tmp_path):
    """Correct implementations written otherwise than the reference (the student styles, and the style studies whose
    keys list no mistake) grade 100: deviations are named, not penalised, and what the checker cannot call is no
    fault."""
    folder = tmp_path / "class"
    for style in students.STYLES:
        students.write(None, folder, style)
    correct = [name for name in studies.STUDIES if studies.is_correct(name)]
    assert correct, "no correct style study"
    scores = graded_scores(correct, folder, tmp_path)
    assert all(status == "graded" and score == 100 for status, score in scores.values()), {
        name: found for name, found in scores.items() if found != ("graded", 100)}


def graded_scores(names, folder, tmp_path):
    """``{submission: (status, score)}`` of the style studies ``names`` graded with what ``folder`` already holds."""
    folder.mkdir(exist_ok=True)
    for name in names:
        impl = studies.materialise(name, tmp_path / "scratch")
        root = tmp_path / "scratch" / name / Path(studies.STUDIES[name]).parts[0]  # the study's file or folder
        if root.is_dir():  # a project: handed in as its folder (the one holding its package, if it is one)
            shutil.copytree(root, folder / name)
        else:  # one file: a module or a notebook
            shutil.copy(impl, folder / f"{name}{impl.suffix}")
    results = grading.grade(folder, tmp_path / "out", jobs=2, progress=False)
    return {name: (r["status"], r["score"]) for name, r in results.items()}


def test_a_submission_whose_code_does_not_compile_is_an_error_not_a_count_of_checks(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "broken.py").write_text("import torch.nn as nn\n\n\nclass MultiHeadAttention(nn.Module):\n"
                                      "    def forward(self, q, k, v, mask=None)\n        return q\n")
    result = grading.grade(folder, tmp_path / "out", jobs=1, pytest_args=SELECTION, progress=False)["broken"]
    assert result["status"] == "error" and result["score"] == 0, result["reason"]
    assert "does not compile (broken.py, line 5: SyntaxError" in result["reason"], result["reason"]
    assert "Status: **error**" in (tmp_path / "out" / "feedback" / "broken.md").read_text()


SETTINGS_PROBE = """
import json, os

def pytest_collection_finish(session):
    found = {}
    for item in session.items:
        used = getattr(getattr(item, "obj", None), "_hypothesis_internal_use_settings", None)
        if used is not None:
            found[item.nodeid] = [used.max_examples, used.derandomize]
    with open(os.environ["SETTINGS_PROBE_OUT"], "w") as f:
        json.dump(found, f)
"""


def test_every_check_graded_draws_the_grading_profiles_examples(tmp_path):
    """hypothesis fixes a check's settings when its module is imported: a module of checks imported by a grading
    plugin, before the profile is loaded, would keep hypothesis's defaults (100 random examples) while grading."""
    from conformance.grading.zygote import PYTEST_BASE
    (tmp_path / "settings_probe.py").write_text(SETTINGS_PROBE)
    out = tmp_path / "settings.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]), SETTINGS_PROBE_OUT=str(out),
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")  # (as the grader's worker runs it)
    subprocess.run([sys.executable, "-m", "pytest", *PYTEST_BASE, "-p", "settings_probe", "--collect-only",
                    "--impl=reference", f"--hypothesis-profile={grading.GRADING_PROFILE}"],
                   cwd=tmp_path, env=env, check=True, capture_output=True)
    found = json.loads(out.read_text())
    assert len(found) > 100
    assert {nodeid: drawn for nodeid, drawn in found.items() if drawn != [2, True]} == {}
