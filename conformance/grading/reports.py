"""The reports of a graded class (``conformance.grading.runner``): summary table (markdown, CSV, JSON), an HTML page with
the table and per-submission details, one feedback page per student, a Gradescope ``results.json`` per
submission, JUnit XML, and pictures (the submission's positional encoding next to the paper's, the class's
verdicts) when matplotlib is installed. Every file is written whole (``grading.write_atomic``)."""
import base64
import csv
import functools
import html
import io
import json
import math
import xml.etree.ElementTree as ET

from tabulate import tabulate

from conformance.grading import course, reproductions
from conformance.grading.analytics import (LOCATION, by_cause, by_check, component_rates, digest, histogram,
                                           score_line)
from conformance.grading.assignment import VERDICTS, hidden_component, hidden_finding, student_view
from conformance.grading.files import write_atomic
from conformance.grading.similarity import STYLE as SIMILARITY_STYLE
from conformance.contract.interface import ROLES
from conformance.reporting import first_line

COLOURS = {"pass": "#c8e6c9", "deviation": "#fff3c4", "missing": "#e0e0e0", "fail": "#ffcdd2", "error": "#f8bbd0"}
SUMMARY_FIELDS = ["name", "submission", "student_id", "student_name", "status", "score", "max_score", *VERDICTS, "reason", "similarity",
                  "most_similar_to"]
"""``similarity``: the submission's highest similarity to another source, ``most_similar_to``: that source
(``conformance.grading.similarity``; evidence, never part of the score). ``student_id``, ``student_name``: from
``--roster`` (``conformance.grading.course``)."""


def rows(results):
    return [dict(name=r["name"], submission=r.get("submission", ""), student_id=r.get("student_id", ""),
                 student_name=r.get("student_name", ""), status=r["status"], score=r.get("score", 0),
                 max_score=r.get("max_score", 0), **{v: r.get("counts", {}).get(v, 0) for v in VERDICTS},
                 reason=r.get("reason", ""), similarity="" if r.get("similarity") is None else r["similarity"],
                 most_similar_to=r.get("most_similar_to", "")) for r in results.values()]


# -- pictures -------------------------------------------------------------------------------------------------
def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


def png(figure):
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    pyplot().close(figure)
    return buffer.getvalue()


def paper_table(length, d_model):
    return [[math.sin(p / 10000 ** (i / d_model)) if i % 2 == 0 else math.cos(p / 10000 ** ((i - 1) / d_model))
             for i in range(d_model)] for p in range(length)]


def pe_picture(pe):
    """The submission's positional encoding next to the paper's, as heatmaps (PNG bytes), or None; drawn once for
    the tables that several submissions share (the paper's encoding computed alike)."""
    return table_picture(tuple(map(tuple, pe))) if pe else None


@functools.lru_cache(maxsize=64)
def table_picture(pe):
    plt = pyplot()
    if plt is None:
        return None
    paper = paper_table(len(pe), len(pe[0]))
    figure, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    difference = [[a - b for a, b in zip(ra, rb)] for ra, rb in zip(pe, paper)]
    for ax, data, title in zip(axes, (pe, paper, difference), ("submission", "paper (§3.5)", "difference")):
        image = ax.imshow(data, aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
        ax.set_title(title)
        ax.set_xlabel("dimension")
        ax.set_ylabel("position")
    figure.colorbar(image, ax=axes, shrink=0.8)
    return png(figure)


def verdict_picture(results):
    """Submissions by components, coloured by the worst verdict (PNG bytes), or None."""
    plt = pyplot()
    if plt is None or not results:
        return None
    from matplotlib.colors import ListedColormap
    severity = {v: i for i, v in enumerate(("pass", "deviation", "missing", "fail", "error"))}
    names = list(results)
    grid = []
    for name in names:
        worst = {}
        for c in results[name]["checks"]:
            worst[c["component"]] = max(worst.get(c["component"], 0), severity[c["verdict"]])
        grid.append([worst.get(role, 2) if results[name]["status"] == "graded" else 4 for role in ROLES])
    figure, ax = plt.subplots(figsize=(8, 0.3 * len(names) + 2))
    ax.imshow(grid, cmap=ListedColormap([COLOURS[v] for v in severity]), vmin=0, vmax=4, aspect="auto")
    ax.set_xticks(range(len(ROLES)), ROLES, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_title("worst verdict per component (grey: missing; pink: error or not graded)")
    return png(figure)


# -- what a student reads, in order: what to fix, the deviations, one line per component ------------------------
def sections(digested):
    """``[(title, findings)]``: the fails and errors, then the deviations (those there are)."""
    return [(title, found) for title, found in (("What to fix (fails and errors)", digested["mistakes"]),
                                                ("Deviations (named variants of practice, not mistakes)",
                                                 digested["deviations"])) if found]


def share_text(line):
    return "not scored" if line["share"] is None else f"{line['share']:.0%}"


def finding_markdown(number, f, scripts=None):
    """One finding of the feedback page: its cause, checks, place in the file, what the cause means, what the paper
    requires, what was observed (the first message and up to two other ones) and how to reproduce it (``scripts``:
    ``conformance.grading.reproductions.write_scripts``'s standalone scripts)."""
    lines = [f"### {number}. **{f['verdict']}** in `{f['component']}`: `{f['cause']}`", "",
             "- Checks: " + ", ".join(f"`{c}`" for c in f["checks"])]
    lines += ["- Also reported as: " + ", ".join(f"`{c}`" for c in f["also"])] if f.get("also") else []
    lines += ["- Where: " + ", ".join(f"`{w}`" for w in f["where"])] if f["where"] else []
    lines += [f"- What it means: {f['meaning']}", f"- What the paper requires: {f['requirement']}"]
    lines += ["- Observed: " + text.replace("\n", "\n  ") for text in f["observed"][:3]]
    lines += [f"- ... and {len(f['observed']) - 3} more like it"] if len(f["observed"]) > 3 else []
    path, why = (scripts or {}).get(reproductions.key(f), (None, None))
    if path:
        lines += [f"- Reproduce: [`{path}`](../{path}), a script that needs only torch and your file: "
                  f"`python {path.rsplit('/', 1)[-1]} PATH_OF_YOUR_SUBMISSION`"]
    elif why:
        lines += [f"- Reproduce: no standalone script ({why})"]
    return lines + [""]


def feedback(result, scripts=None):
    """The student's feedback page (markdown), in reading order: what to fix (each fail and error, by cause, with
    its reproduction script of ``scripts``), the deviations, one line per component (a role not found is one line),
    then how the code was read. ``result`` is what the student may see (``assignment.student_view``): with
    ``withheld`` check results, its score is on the checks shown."""
    digested = digest(result)
    score = f"**{result.get('score', 0):g} / {result.get('max_score', 0):g}**"
    lines = [f"# Feedback for {result['name']}", "",
             f"Submission: `{result.get('submission', '')}`. Status: **{result['status']}**."
             + (f" {result['reason']}" if result.get("reason") else ""), "",
             f"Score on the checks shown: {score}. The results of {result['withheld']} more check(s) count too; they "
             "are hidden until the grades are released." if result.get("withheld") else f"Score: {score}.", ""]
    for title, found in sections(digested):
        lines += [f"## {title}", ""]
        for number, f in enumerate(found, 1):
            lines += finding_markdown(number, f, scripts)
    if digested["components"]:
        lines += ["## Component by component", ""] + [
            f"- `{line['component']}` ({share_text(line)}): {line['text']}" for line in digested["components"]] + [""]
    if result.get("pe"):
        lines += ["## Your positional encoding", "", f"![positional encoding](../figures/{result['name']}-pe.png)", ""]
    if result.get("notes"):
        lines += ["## How the checker read your code", "", "<details><summary>Its notes (how each component was "
                  "found, built and called, and what it repaired to get there)</summary>", ""] + [
            f"- {n}" for n in result["notes"]] + ["", "</details>", ""]
    if result["status"] != "graded" and result.get("output_tail"):
        lines += ["## The end of what your code printed", "", "```", result["output_tail"][-2000:], "```", ""]
    return "\n".join(lines)


def finding_line(f):
    """A finding in one line (Gradescope's output)."""
    where = f" at {', '.join(f['where'])}" if f["where"] else ""
    return (f"{f['verdict']}: {f['cause']} in {', '.join(f['checks'])}{where}: the paper requires {f['requirement']}"
            f"; observed {LOCATION.sub('', first_line(f['observed'][0]))}")


def component_output(digested, line):
    """A component's findings in one line each (its fails and errors, then its deviations), then its line."""
    return "\n".join([finding_line(f) for f in digested["mistakes"] + digested["deviations"]
                      if f["component"] == line["component"]] + [line["text"]])


def gradescope(result, rubric=None, release=False):
    """Gradescope's results.json: one test per component scored, weighted as in the rubric (a component the
    assignment does not ask for is not scored), failing components first, each test's output its fails and errors,
    then its deviations, then its line. Until ``release``, a test whose result a hidden check of ``rubric`` takes
    part in is visible ``after_published`` (once the grades are published), with, when the component has checks
    shown, a test of no points beside it that gives their findings now."""
    digested, scored = digest(result), result.get("components", {})
    shown = digest(student_view(result, rubric, release)) if rubric else digested
    weights = sum(w for _, w in scored.values()) or 1
    tests = []
    for line in digested["components"]:
        if line["component"] not in scored:
            continue
        share, weight = scored[line["component"]]
        maximum = result["max_score"] * weight / weights
        secret = rubric is not None and not release and hidden_component(result, rubric, line["component"])
        tests.append({"name": line["component"],
                      "score": round(maximum * share if result["status"] == "graded" else 0, 2),
                      "max_score": round(maximum, 2), "status": "passed" if share == 1 else "failed",
                      "output": component_output(digested, line),
                      "visibility": "after_published" if secret else "visible"})
        now = next((s for s in shown["components"] if s["component"] == line["component"]), None) if secret else None
        if now is not None:
            tests.append({"name": f"{line['component']} (the checks shown before the grades are published)",
                          "score": 0, "max_score": 0, "output": component_output(shown, now), "visibility": "visible",
                          "status": "failed" if now["counts"]["fail"] + now["counts"]["error"] else "passed"})
    hidden = sum(t["visibility"] != "visible" for t in tests)
    return {"score": result.get("score", 0), "max_score": result.get("max_score", 0), "tests": tests,
            "output": f"{result['status']}. {result.get('reason', '')}".strip() + (
                f" {hidden} test(s) are shown once the grades are published." if hidden else "")}


# -- the class's analytics, as rows of text (the page's links are anchors, summary.md's the feedback pages) ------
def cell(text):
    """A markdown table cell: one line, its pipes escaped."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def bucket(low, high):
    return f"{low:g}-{high:g}"


def tally_rows(rows, link):
    """The rows of a :func:`analytics.tally` table: verdict, key, submissions, detail, the submissions linked by
    ``link(name)``."""
    return [[row["verdict"], row["key"], len(row["names"]), row["detail"], ", ".join(map(link, row["names"]))]
            for row in rows]


def rate_rows(results, link):
    """The rows of the pass rates per component, the submissions with a fail or error linked."""
    return [[row["component"], len(row["have"]), len(row["have"]) - len(row["failed"]), len(row["deviating"]),
             len(row["failed"]), len(row["absent"]), "" if row["rate"] is None else f"{row['rate']:.0%}",
             ", ".join(map(link, row["failed"]))] for row in component_rates(results)]


RATE_HEADERS = ["component", "have it", "no fail or error", "of which with deviations", "fail or error", "absent",
                "pass rate", "with a fail or error"]
CAUSE_HEADERS = ["verdict", "cause", "submissions", "what it means (and where found)", "who"]
CHECK_HEADERS = ["verdict", "check", "submissions", "causes (submissions)", "who"]


def summary_markdown(results, note="", absent=()):
    """summary.md: the table (then the roster's students with no submission, ``absent``; ``note`` under it: what is
    hidden from students), then the class's analytics (scores, pass rates per component, findings by cause and by
    check, each submission linked to its feedback page)."""
    def link(name):
        return f"[{name}](feedback/{name}.md)"

    def table(headers, rows):
        return tabulate([[cell(v) for v in row] for row in rows], headers=headers, tablefmt="github") + "\n"

    return "\n".join([
        "# Class summary", "", table(SUMMARY_FIELDS, [[s[f] for f in SUMMARY_FIELDS] for s in
                                       rows(results) + course.absent_rows(absent, SUMMARY_FIELDS)]),
        *([note, ""] if note else []),
        "## Class analytics", "", score_line(results), "", "### Scores", "",
        table(["score", "submissions", ""], [[bucket(low, high), n, "#" * n] for low, high, n in histogram(results)]),
        "### Pass rate per component (graded submissions)", "", table(RATE_HEADERS, rate_rows(results, link)),
        "### Findings by cause (fails and errors first, the most common first)", "",
        table(CAUSE_HEADERS, tally_rows(by_cause(results), link)),
        "### Findings by check", "", table(CHECK_HEADERS, tally_rows(by_check(results), link))])


def junit(results):
    suites = ET.Element("testsuites", name="conformance")
    for r in results.values():
        checks = r["checks"]
        suite = ET.SubElement(suites, "testsuite", name=r["name"], tests=str(max(1, len(checks))),
                              failures=str(sum(c["verdict"] == "fail" for c in checks)),
                              errors=str(sum(c["verdict"] == "error" for c in checks) + (r["status"] != "graded")),
                              skipped=str(sum(c["verdict"] == "missing" for c in checks)))
        status = ET.SubElement(suite, "testcase", classname=f"{r['name']}.grading", name="status")
        if r["status"] != "graded":
            ET.SubElement(status, "error", message=r["status"]).text = r.get("reason", "")
        for c in checks:
            case = ET.SubElement(suite, "testcase", classname=f"{r['name']}.{c['component']}", name=c["check"])
            if c["verdict"] in ("fail", "error"):
                ET.SubElement(case, "failure" if c["verdict"] == "fail" else "error",
                              message=c["cause"]).text = c["message"]
            elif c["verdict"] == "missing":
                ET.SubElement(case, "skipped", message=c["message"][:200])
            elif c["verdict"] == "deviation":
                ET.SubElement(case, "system-out").text = f"deviation {c['cause']}: {c['message']}"
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


# -- the page ---------------------------------------------------------------------------------------------------
STYLE = ("body{font-family:sans-serif;margin:2em}h3,h4{margin:1.2em 0 .4em}"
         ".scroll{overflow:auto;max-width:100%;max-height:80vh;margin:.4em 0}table{border-collapse:collapse}"
         "td,th{border:1px solid #bbb;padding:3px 6px;font-size:13px;vertical-align:top}"
         "th{background:#eee;position:sticky;top:0;cursor:pointer}th[data-order=up]::after{content:' \\25b2'}"
         "th[data-order=down]::after{content:' \\25bc'}img{max-width:100%}"
         + "".join(f".{v}{{background:{c}}}" for v, c in COLOURS.items()) +
         "details{margin:.6em 0}pre{background:#f6f6f6;padding:6px;margin:0;white-space:pre-wrap;"
         "overflow-wrap:anywhere;max-width:70em}td.detail{min-width:16em;max-width:40em;overflow-wrap:anywhere}"
         "td.list{min-width:12em;max-width:24em;overflow-wrap:anywhere}#histogram rect{fill:#5c8dd6}"
         ".hidden-mark{display:inline-block;margin-left:4px;padding:0 4px;border:1px dashed #555;border-radius:3px;"
         "font-size:11px;background:#fff}"
         + SIMILARITY_STYLE)
SCRIPT = """<script>
function sortBy(th) {  // a click on a header sorts its table by that column, again the other way
  var table = th.closest('table'), body = table.tBodies[0], i = th.cellIndex, up = th.dataset.order !== 'up';
  Array.prototype.forEach.call(th.parentNode.cells, function (c) { delete c.dataset.order; });
  th.dataset.order = up ? 'up' : 'down';
  function key(row) {
    var c = row.cells[i], v = c ? (c.dataset.sort !== undefined ? c.dataset.sort : c.textContent.trim()) : '';
    var number = v.replace(/%$/, '');  // (a percentage sorts as its number)
    return number !== '' && !isNaN(number) ? Number(number) : v.toLowerCase();
  }
  Array.from(body.rows).sort(function (a, b) {
    var x = key(a), y = key(b);
    return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
  }).forEach(function (row) { body.appendChild(row); });
}
document.querySelectorAll('table.sortable th').forEach(function (th) {
  th.addEventListener('click', function () { sortBy(th); });
});
function openTarget() {  // a link to a submission opens its details
  var target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (target && target.tagName === 'DETAILS') target.open = true;
}
window.addEventListener('hashchange', openTarget);
openTarget();
</script>"""


def table(headers, body, ident=None, titles=None):
    """A sortable table in a box of its own that scrolls; ``body``: its rows' HTML."""
    e = html.escape
    head = "".join(f"<th title='{e(t)}'>{e(h)}</th>" for h, t in zip(headers, titles or headers))
    return (f"<div class='scroll'><table class='sortable'{f' id={ident!r}' if ident else ''}><thead><tr>{head}</tr>"
            f"</thead><tbody>{''.join(body)}</tbody></table></div>")


def td(value, sort=None, css=None):
    """A cell of escaped text; ``sort``: the value its column sorts by."""
    return (f"<td{f' data-sort={sort!r}' if sort is not None else ''}{f' class={css!r}' if css else ''}>"
            f"{html.escape(str(value))}</td>")


def anchor(name):
    e = html.escape
    return f"<a href='#{e(name)}'>{e(name)}</a>"


def histogram_svg(buckets):
    """The scores' histogram as an inline SVG figure."""
    e, width, height, step = html.escape, 640, 160, 60
    top = max(n for *_, n in buckets) or 1
    bars = []
    for i, (low, high, n) in enumerate(buckets):
        x, tall = 40 + i * step, height * n / top
        bars.append(f"<g><title>{e(bucket(low, high))}: {n}</title><rect x='{x}' y='{20 + height - tall:.1f}' "
                    f"width='{step - 8}' height='{tall:.1f}'></rect><text x='{x + step / 2 - 4}' "
                    f"y='{16 + height - tall:.1f}' text-anchor='middle'>{n}</text><text x='{x + step / 2 - 4}' "
                    f"y='{height + 36}' text-anchor='middle'>{e(bucket(low, high))}</text></g>")
    return (f"<figure id='histogram'><svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height + 50}' "
            f"font-size='12' role='img' aria-label='histogram of the scores'>{''.join(bars)}</svg>"
            "<figcaption>Submissions by score (a bucket holds its low end; the last one also the maximum).</figcaption>"
            "</figure>")


def analytics_html(results):
    """The class's analytics: scores, pass rates per component, findings by cause and by check (the rows of
    ``summary.md``, the submissions linked to their details)."""
    def tr(cells, css=None):
        *text, links = cells
        return f"<tr{f' class={css!r}' if css else ''}>{''.join(map(td, text))}<td>{links}</td></tr>"

    def tallied(rows):
        return [tr(row, css=row[0]) for row in tally_rows(rows, anchor)]

    return "".join([
        "<section id='analytics'><h2>Class analytics</h2>", f"<p>{html.escape(score_line(results))}</p>",
        histogram_svg(histogram(results)), "<h3>Pass rate per component (graded submissions)</h3>",
        table(RATE_HEADERS, map(tr, rate_rows(results, anchor)), "rates"),
        "<h3>Findings by cause (fails and errors first, the most common first)</h3>",
        table(CAUSE_HEADERS, tallied(by_cause(results)), "causes"), "<h3>Findings by check</h3>",
        table(CHECK_HEADERS, tallied(by_check(results)), "checks"), "</section>"])


FINDING_HEADERS = ["verdict", "component", "cause: what it means, its checks, where", "the paper requires",
                   "observed"]


def hidden_mark(released):
    """The page's mark of a result hidden from students (``released``: shown to them since ``--release``)."""
    return (f"<span class='hidden-mark' title='holds results students see only once the grades are released "
            f"(--release)'>{'hidden, released' if released else 'hidden'}</span>")


def hidden_note(rubric, release):
    """One line naming the components and checks the rubric hides from students, and whether they are released."""
    if not rubric or not rubric.get("hidden"):
        return ""
    return (("Released to students" if release else "Hidden from students until the grades are released (--release)")
            + ": " + ", ".join(rubric["hidden"]) + ".")


def finding_row(f, mark=""):
    e = html.escape
    where = f"<br>at {e(', '.join(f['where']))}" if f["where"] else ""
    reproduce = (f"<details><summary>reproduce</summary><pre>{e(f['reproduction'][:3000])}</pre></details>"
                 if f["reproduction"] else "")
    return (f"<tr class='{f['verdict']}'><td>{e(f['verdict'])}{mark}</td>{td(f['component'])}"
            f"<td class='list'><b>{e(f['cause'])}"
            f"</b>: {e(f['meaning'])}<br>in {e(', '.join(f['checks']))}{where}</td>"
            f"{td(f['requirement'], css='detail')}"
            f"<td class='detail'><pre>{e(chr(10).join(f['observed'][:3])[:1500])}</pre>{reproduce}</td></tr>")


def details_html(r, picture, rubric=None, release=False):
    """One submission's details, in the feedback's order, the results hidden from students by ``rubric`` marked."""
    e, digested = html.escape, digest(r)

    def mark(hidden):
        return hidden_mark(release) if hidden else ""

    parts = [f"<details id='{e(r['name'])}'><summary><b>{e(r['name'])}</b>: {e(r['status'])}, "
             f"{r.get('score', 0):g} / {r.get('max_score', 0):g} {e(r.get('reason', ''))}</summary>"]
    for title, found in sections(digested):
        parts.append(f"<h4>{e(title)}</h4>" + table(FINDING_HEADERS, [
            finding_row(f, mark(rubric is not None and hidden_finding(r, rubric, f))) for f in found]))
    if digested["components"]:
        parts.append("<h4>Component by component</h4>" + table(["component", "score share", "checks"], [
            f"<tr><td>{e(line['component'])}"
            f"{mark(rubric is not None and hidden_component(r, rubric, line['component']))}</td>"
            f"{td(share_text(line), sort=-1 if line['share'] is None else line['share'])}"
            f"{td(line['text'])}</tr>" for line in digested["components"]]))
    if picture:
        parts.append(f"<h4>Positional encoding</h4><img alt='positional encoding of {e(r['name'])}' "
                     f"src='data:image/png;base64,{picture}'>")
    if r.get("notes"):
        parts.append("<h4>How the code was read</h4><ul>" + "".join(f"<li>{e(n)}</li>" for n in r["notes"]) + "</ul>")
    if r["status"] != "graded" and r.get("output_tail"):
        parts.append(f"<pre>{e(r['output_tail'][-2000:])}</pre>")
    return "".join(parts) + "</details>"


def page(results, pictures, elapsed=None, similarity=None, rubric=None, release=False, absent=()):
    """index.html: self-contained (inline CSS, a small inline script sorting the tables, pictures as data URIs);
    ``similarity`` (``conformance.grading.similarity``) gives its section after the analytics; ``absent``: the
    roster's students with no submission, named under the table. The teacher's page shows every result, those that
    ``rubric`` hides from students marked."""
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Conformance grades</title><style>{STYLE}"
             f"</style></head><body><h1>Conformance grades ({len(results)} submissions)</h1>"]
    if elapsed is not None:
        parts.append(f"<p>Checked in {elapsed:.1f} s.</p>")
    if hidden_note(rubric, release):
        parts.append(f"<p id='hidden-note'>{hidden_mark(release)} {e(hidden_note(rubric, release))}</p>")
    severity = {v: i for i, v in enumerate(("pass", "deviation", "missing", "fail", "error"))}
    summary = []
    for row, r in zip(rows(results), results.values()):
        worst = {}
        for c in r["checks"]:
            if severity[c["verdict"]] >= severity.get(worst.get(c["component"]), -1):
                worst[c["component"]] = c["verdict"]
        summary.append("<tr class='submission'>" + "".join(
            td(row[f]) if f != "name" else f"<td>{anchor(r['name'])}</td>" for f in SUMMARY_FIELDS) + "".join(
            f"<td class='{worst.get(role, '')}'>{e(worst.get(role, ''))}</td>" for role in ROLES) + "</tr>")
    parts.append(table(SUMMARY_FIELDS + [role[:10] for role in ROLES], summary, "summary",
                       titles=SUMMARY_FIELDS + list(ROLES)))
    if absent:
        parts.append(f"<p class='absent'>On the roster with {course.NO_SUBMISSION}: " + ", ".join(
            e(f"{s.name or s.file} ({s.student_id}, {s.file})") for s in absent) + "</p>")
    if pictures.get("verdicts"):
        parts.append(f"<h2>Verdicts</h2><img alt='verdicts' src='data:image/png;base64,{pictures['verdicts']}'>")
    parts.append(analytics_html(results))
    if similarity is not None:
        parts.append(similarity.html(lambda name: anchor(name) if name in results else e(name)))
    parts.append("<h2>Submissions</h2>")
    parts += [details_html(r, pictures.get(r["name"]), rubric, release) for r in results.values()]
    parts.append(f"{SCRIPT}</body></html>")
    return "\n".join(parts)


def write_all(results, out, rubric, elapsed=None, pe_pictures=None, similarity=None, release=False, absent=()):
    """Every report file under ``out``; ``pe_pictures`` holds the PE pictures already drawn (by submission);
    ``similarity`` (``conformance.grading.similarity``) gives ``similarity.json`` and the page's section; ``absent``:
    the roster's students with no submission (``conformance.grading.course``), rows of the summary and gradebook.
    What students read (feedback, reproductions, Gradescope) leaves out the checks ``rubric`` hides until
    ``release``; the teacher's summary and page show them, marked."""
    summary = rows(results) + course.absent_rows(absent, SUMMARY_FIELDS)
    write_atomic(out / "summary.md", summary_markdown(results, hidden_note(rubric, release), absent))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=SUMMARY_FIELDS)
    writer.writeheader()
    writer.writerows(summary)
    write_atomic(out / "summary.csv", buffer.getvalue())
    write_atomic(out / "summary.json", json.dumps({"rubric": rubric, "submissions": summary}, indent=1))
    pictures, shown = {}, {}
    for name, r in results.items():
        view = shown[name] = student_view(r, rubric, release)
        scripts = reproductions.write_scripts(out, view, digest(view)["mistakes"])
        write_atomic(out / "feedback" / f"{name}.md", feedback(view, scripts))
        write_atomic(out / "gradescope" / name / "results.json", json.dumps(gradescope(r, rubric, release), indent=1))
        picture = (pe_pictures or {}).get(name) or pe_picture(r.get("pe"))
        if picture:
            write_atomic(out / "figures" / f"{name}-pe.png", picture)
            pictures[name] = base64.b64encode(picture).decode()
    picture = verdict_picture(results)
    if picture:
        write_atomic(out / "figures" / "verdicts.png", picture)
        pictures["verdicts"] = base64.b64encode(picture).decode()
    write_atomic(out / "junit.xml", junit(results))
    write_atomic(out / "gradebook.csv", course.gradebook(results, absent, rubric["score"]["max"], shown))
    if similarity is not None:
        write_atomic(out / "similarity.json", similarity.json())
    write_atomic(out / "index.html", page(results, pictures, elapsed, similarity, rubric, release, absent))
