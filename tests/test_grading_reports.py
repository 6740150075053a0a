"""The grading reports of hand-made results: the class's analytics count who got what (in ``summary.md`` and
``index.html``), and a student's feedback leads with what to fix (markdown, the page's details, Gradescope)."""
import html
import re

import pytest

from conformance.grading import analytics, reports, runner

REQUIRES = "scores multiplied by 1/sqrt(d_k) (§3.2.1)"


def check(component, name, verdict="pass", cause="", observed="", line=None):
    """A check record; a fail or deviation has a message as ``verdicts.Finding`` writes it, an error a crash's."""
    at = f" (at sub.py:{line} in Block.forward)" if line else ""
    message = (f"{cause}: the paper requires {REQUIRES}; observed {observed}{at}\nReproduce:\nrepro()"
               if verdict in ("fail", "deviation") else f"{observed}{at}")
    return dict(component=component, family="behaviour", check=name, verdict=verdict, cause=cause, message=message,
                nodeid=f"{component}::{name}")


def graded(name, *checks, status="graded"):
    result = dict(name=name, submission=f"{name}.py", status=status, reason="", checks=list(checks), notes=[],
                  pe=None)
    rubric = runner.load_rubric()
    rubric["components"] = {**rubric["components"], "attention": 3}  # (a component weighing more than another)
    return runner.score(result, rubric)


UNSCALED = dict(verdict="fail", cause="attention.scale.unscaled", observed="scores multiplied by 1", line=12)
CLASS = {
    "a": graded("a", check("attention", "scaled", **UNSCALED), check("attention", "shape"),
                check("feed_forward", "relu")),
    "b": graded("b", check("attention", "scaled", **UNSCALED),
                check("feed_forward", "relu", "deviation", "feed_forward.gelu", "GELU")),
    "c": graded("c", check("attention", "scaled"), check("attention", "shape"),
                check("feed_forward", "relu", "error", "error.undefined_name", "name 'x' is not defined", 30)),
    "d": graded("d", status="timeout"),
}


def markdown_rows(text, heading):
    """The cells of the table under ``heading`` in a markdown page."""
    table = text.split(heading, 1)[1].split("\n\n", 2)[1]
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines()[2:]]


def html_rows(text, ident):
    """The cells of the table ``ident`` of a page, as HTML."""
    table = text.split(f"id='{ident}'", 1)[1].split("</table>", 1)[0]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table)]
    return [cells for cells in rows if cells]  # (not the header)


def test_analytics_count_who_got_each_cause_and_check():
    causes = analytics.by_cause(CLASS)
    assert [(row["verdict"], row["key"], row["names"]) for row in causes] == [
        ("fail", "scale.unscaled", ["a", "b"]), ("error", "undefined_name", ["c"]), ("deviation", "gelu", ["b"])]
    assert causes[0]["detail"] == ("§3.2.1: the scores are not scaled at all (in 1 check(s): attention/scaled)"
                                   )  # the catalogue's meaning (conformance/diagnosis/causes.py), not the message's words
    assert causes[1]["detail"].startswith("the code uses a name that is defined nowhere it can see (in 1 check(s)")
    summary = reports.summary_markdown(CLASS)
    assert markdown_rows(summary, "### Findings by cause")[0] == [
        "fail", "scale.unscaled", "2", causes[0]["detail"], "[a](feedback/a.md), [b](feedback/b.md)"]
    assert markdown_rows(summary, "### Findings by check")[0] == [
        "fail", "attention/scaled", "2", "attention.scale.unscaled (2)", "[a](feedback/a.md), [b](feedback/b.md)"]
    page = reports.page(CLASS, {})
    assert html_rows(page, "causes")[0][2:] == ["2", html.escape(causes[0]["detail"]),
                                                "<a href='#a'>a</a>, <a href='#b'>b</a>"]
    assert all(f"<details id='{name}'>" in page for name in CLASS)  # where the links lead


def test_pass_rates_per_component_and_histogram():
    rates = {row["component"]: row for row in analytics.component_rates(CLASS)}  # d, not graded, is left out
    assert (rates["attention"]["have"], rates["attention"]["failed"], rates["attention"]["rate"]) == (
        ["a", "b", "c"], ["a", "b"], 1 / 3)
    assert (rates["feed_forward"]["failed"], rates["feed_forward"]["deviating"], rates["feed_forward"]["rate"]) == (
        ["c"], ["b"], 2 / 3)
    summary = reports.summary_markdown(CLASS)
    assert markdown_rows(summary, "### Pass rate per component")[0] == [
        "attention", "3", "1", "0", "2", "0", "33%", "[a](feedback/a.md), [b](feedback/b.md)"]
    assert [(row[0], row[-1]) for row in html_rows(reports.page(CLASS, {}), "rates")] == [
        ("attention", "<a href='#a'>a</a>, <a href='#b'>b</a>"), ("feed_forward", "<a href='#c'>c</a>")]
    # a and b: attention (weight 3) lost, feed_forward (1) kept: 25; c the other way round: 75; d: 0
    assert [CLASS[n]["score"] for n in "abcd"] == [25, 25, 75, 0]
    counts = {f"{low:g}-{high:g}": n for low, high, n in analytics.histogram(CLASS)}
    assert counts == {**{f"{i}-{i + 10}": 0 for i in range(0, 100, 10)}, "0-10": 1, "20-30": 2, "70-80": 1}
    assert markdown_rows(summary, "### Scores")[2] == ["20-30", "2", "##"]
    assert reports.histogram_svg(analytics.histogram(CLASS)).count("<rect ") == 10


STUDENT = graded(
    "s", check("embedding", "scaled"), check("embedding", "shape"),
    check("attention", "scaled", **UNSCALED), check("attention", "shape"),
    check("attention", "dropped", "deviation", "attention.attention_dropout", "dropout on the weights"),
    check("multi_head_attention", "shape", "error", "error.undefined_name", "name 'x' is not defined", 30),
    check("feed_forward", "relu", "deviation", "feed_forward.gelu", "GELU"),
    *(check("decoder", name, "missing", "role.missing", "s.py has no 'decoder'") for name in ("a", "b", "c")))


def in_order(text, *parts):
    places = [text.index(part) for part in parts]
    return places == sorted(places)


def test_feedback_leads_with_what_to_fix():
    """Errors, then fails (each with its cause, line and requirement), then deviations, then one line per component
    (failing ones first): a role not there is one line."""
    feedback = reports.feedback(STUDENT)
    assert in_order(feedback, "## What to fix", "**error** in `multi_head_attention`: `error.undefined_name`",
                    "**fail** in `attention`: `attention.scale.unscaled`", "## Deviations",
                    "`attention.attention_dropout`", "`feed_forward.gelu`", "## Component by component",
                    "- `attention` (0%)", "- `multi_head_attention` (0%)", "- `feed_forward` (100%)",
                    "- `embedding` (100%): 2 of 2 checks passed",
                    "- `decoder` (0%): the assignment asks for decoder; none found: none of its 3 checks ran")
    assert in_order(feedback, "`attention.scale.unscaled`", "- Where: `sub.py:12`",
                    f"- What the paper requires: {REQUIRES}", "- Observed: scores multiplied by 1")
    assert "repro()" not in feedback  # (the checker's own snippet: a student runs the standalone script instead)
    script = "reproductions/student/02-scores.py"
    linked = reports.feedback(STUDENT, {("attention", "attention.scale.unscaled"): (script, None),
                                        ("multi_head_attention", "error.undefined_name"): (None, "why not")})
    assert in_order(linked, "`error.undefined_name`", "- Reproduce: no standalone script (why not)",
                    "`attention.scale.unscaled`", f"- Reproduce: [`{script}`](../{script})")
    assert sum("decoder" in line for line in feedback.splitlines()) == 1 and "missing" not in feedback
    details = reports.details_html(STUDENT, None)
    assert in_order(details, "What to fix", "error.undefined_name", "attention.scale.unscaled", "Deviations",
                    "feed_forward.gelu", "Component by component", "<td>decoder</td>")
    assert details.count("<td>decoder</td>") == 1 and details.count("decoder;") == 1  # one row


def test_gradescope_tests_fail_first_with_findings_first():
    tests = reports.gradescope(STUDENT)["tests"]
    assert [t["name"] for t in tests] == ["attention", "multi_head_attention", "feed_forward", "embedding", "decoder"]
    output = tests[0]["output"].splitlines()
    assert [line.split(":")[0] for line in output[:2]] == ["fail", "deviation"]
    assert output[2] == "1 of 3 checks passed; 1 deviation(s); 1 fail or error"
    assert "at sub.py:12: the paper requires" in tests[0]["output"]
    assert [t["status"] for t in tests] == ["failed", "failed", "passed", "passed", "failed"]
    assert tests[-1]["score"] == 0 and "the assignment asks for decoder" in tests[-1]["output"]


def test_one_mistake_is_one_item_and_one_row():
    """A crash and the code's reading citing one line of one component are one item of the feedback (its checks
    and both causes listed); the same mistake in two components is one row of the class's findings by cause."""
    crash = check("feed_forward", "relu", "error", "error.attribute_never_assigned", "no attribute 'w3'", 25)
    reading = check("feed_forward", "attributes_read_are_assigned", "fail", "feed_forward.attribute_never_assigned",
                    "self.w3 read, never assigned", 25)
    unscaled = check("multi_head_attention", "scaled", "fail", "multi_head_attention.scale.unscaled",
                     "scores multiplied by 1", 40)
    result = graded("e", crash, reading, check("attention", "scaled", **UNSCALED), unscaled)
    result["notes"] = ["feed_forward: FF (d_model=d_model)"]
    mistakes = analytics.digest(result)["mistakes"]
    assert [(m["component"], m["cause"], m["checks"]) for m in mistakes] == [
        ("feed_forward", "error.attribute_never_assigned", ["attributes_read_are_assigned", "relu"]),
        ("attention", "attention.scale.unscaled", ["scaled"]),
        ("multi_head_attention", "multi_head_attention.scale.unscaled", ["scaled"])]
    feedback = reports.feedback(result)
    assert feedback.count("### ") == 3 and "- Also reported as: `feed_forward.attribute_never_assigned`" in feedback
    assert in_order(feedback, "## How the checker read your code", "<details>", "- feed_forward: FF (d_model=d_model)",
                    "</details>")
    rows = analytics.by_cause({"e": result})
    assert [(row["verdict"], row["key"], row["names"], len(row["records"])) for row in rows] == [
        ("error", "attribute_never_assigned", ["e"], 2), ("fail", "scale.unscaled", ["e"], 2)]


def test_a_positional_encoding_table_is_drawn_once():
    """Submissions whose encodings are the same table share one drawing; another table gets its own."""
    pytest.importorskip("matplotlib")
    table = reports.paper_table(8, 6)
    reports.table_picture.cache_clear()
    first, again = reports.pe_picture(table), reports.pe_picture([list(row) for row in table])
    other = reports.pe_picture([[v + 0.5 for v in row] for row in table])
    assert first is again and first.startswith(b"\x89PNG") and other != first
    assert reports.table_picture.cache_info().misses == 2
    assert reports.pe_picture(None) is None and reports.pe_picture([]) is None
