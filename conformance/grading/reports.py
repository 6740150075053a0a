"""The reports of a graded class (``conformance.grading.runner``): summary table (markdown, CSV, JSON), an HTML page with
the table and per-submission details, one feedback page per student, a Gradescope ``results.json`` per
submission, JUnit XML, and pictures (the submission's positional encoding next to the paper's, the class's
verdicts) when matplotlib is installed. Every file is written whole (``grading.write_atomic``)."""
import base64
import csv
import html
import io
import json
import math
import xml.etree.ElementTree as ET

from tabulate import tabulate

from conformance.grading.runner import VERDICTS, write_atomic
from conformance.interface import ROLES

PAPER = {
    "embedding": "§3.4: learned embeddings of dimension d_model, multiplied by sqrt(d_model).",
    "positional_encoding": "§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...), added to "
                           "the embeddings, followed by dropout.",
    "attention": "§3.2.1, eq. (1): softmax(Q K^T / sqrt(d_k)) V, the softmax over the keys, masked positions "
                 "set to -inf before it.",
    "multi_head_attention": "§3.2.2: h heads of d_k = d_model / h, projections W^Q, W^K, W^V, concatenation and "
                            "W^O.",
    "feed_forward": "§3.3: FFN(x) = max(0, x W1 + b1) W2 + b2, inner dimension d_ff.",
    "layer_norm": "§5.4 / [1]: layer normalization over d_model with gain and bias.",
    "sublayer_connection": "§5.4: LayerNorm(x + Dropout(Sublayer(x))) (post-norm).",
    "encoder_layer": "§3.1: self-attention then feed-forward, each in a residual sub-layer connection.",
    "decoder_layer": "§3.1: masked self-attention, attention over the encoder output, feed-forward.",
    "encoder": "§3.1: a stack of N = 6 identical layers.",
    "decoder": "§3.1: a stack of N = 6 identical layers, subsequent positions masked.",
    "generator": "§3.4: a linear projection to the vocabulary and a (log-)softmax.",
    "model": "§3: the encoder-decoder, embeddings shared as in §3.4.",
    "padding_mask": "§3.2.3: padded keys may not be attended to.",
    "subsequent_mask": "§3.2.3: position i may attend only to positions <= i.",
}
COLOURS = {"pass": "#c8e6c9", "deviation": "#fff3c4", "missing": "#e0e0e0", "fail": "#ffcdd2", "error": "#f8bbd0"}
SUMMARY_FIELDS = ["name", "submission", "status", "score", "max_score", *VERDICTS, "reason"]


def rows(results):
    return [dict(name=r["name"], submission=r.get("submission", ""), status=r["status"], score=r.get("score", 0),
                 max_score=r.get("max_score", 0), **{v: r.get("counts", {}).get(v, 0) for v in VERDICTS},
                 reason=r.get("reason", "")) for r in results.values()]


def grouped(result):
    """``{component: {"passed": [check], "other": [check record]}}`` in the order of the roles."""
    out = {}
    order = {role: i for i, role in enumerate(ROLES)}
    for c in sorted(result["checks"], key=lambda c: (order.get(c["component"], 99), c["check"])):
        entry = out.setdefault(c["component"], {"passed": [], "other": []})
        (entry["passed"] if c["verdict"] == "pass" else entry["other"]).append(c)
    return out


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
    """The submission's positional encoding next to the paper's, as heatmaps (PNG bytes), or None."""
    plt = pyplot()
    if plt is None or not pe:
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


# -- the files --------------------------------------------------------------------------------------------------
def feedback(result):
    """The student's feedback page (markdown)."""
    lines = [f"# Feedback for {result['name']}", "",
             f"Submission: `{result.get('submission', '')}`. Status: **{result['status']}**."
             + (f" {result['reason']}" if result.get("reason") else ""), "",
             f"Score: **{result.get('score', 0):g} / {result.get('max_score', 0):g}**.", ""]
    if result.get("pe"):
        lines += [f"![positional encoding](../figures/{result['name']}-pe.png)", ""]
    if result.get("notes"):
        lines += ["## How your code was read", ""] + [f"- {n}" for n in result["notes"]] + [""]
    for component, entry in grouped(result).items():
        scored = result.get("components", {}).get(component)
        lines += [f"## {component} ({f'{scored[0]:.0%}' if scored else 'not found, not scored'})", "",
                  f"What the paper requires: {PAPER.get(component, '')}", ""]
        if entry["passed"]:
            lines += ["Passed: " + ", ".join(f"`{c['check']}`" for c in entry["passed"]) + ".", ""]
        for c in entry["other"]:
            message = c["message"].strip().replace("\n", "\n  ")
            lines += [f"- **{c['verdict']}** `{c['check']}` (`{c['cause']}`): {message}"]
        lines += [""]
    if result["status"] != "graded" and result.get("output_tail"):
        lines += ["## The end of what your code printed", "", "```", result["output_tail"][-2000:], "```", ""]
    return "\n".join(lines)


def gradescope(result):
    """Gradescope's results.json: one test per component scored, weighted as in the rubric (a component the
    submission does not have, and the rubric does not require, is not scored)."""
    tests = []
    weights = sum(w for _, w in result.get("components", {}).values()) or 1
    for component, entry in grouped(result).items():
        if component not in result.get("components", {}):
            continue
        share, weight = result["components"][component]
        maximum = result["max_score"] * weight / weights
        output = [f"{c['verdict']}: {c['check']}: {c['message'].splitlines()[0] if c['message'] else ''}"
                  for c in entry["other"]]
        tests.append({"name": component, "score": round(maximum * share if result["status"] == "graded" else 0, 2),
                      "max_score": round(maximum, 2), "status": "passed" if share == 1 else "failed",
                      "output": "\n".join(output) or "all checks passed"})
    return {"score": result.get("score", 0), "max_score": result.get("max_score", 0),
            "output": f"{result['status']}. {result.get('reason', '')}".strip(), "tests": tests}


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


def page(results, pictures, elapsed=None):
    """index.html: self-contained (inline CSS, pictures as data URIs)."""
    e = html.escape
    head = ("<!doctype html><html><head><meta charset='utf-8'><title>Conformance grades</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #bbb;"
            "padding:3px 6px;font-size:13px}th{background:#eee}" + "".join(
                f".{v}{{background:{c}}}" for v, c in COLOURS.items()) +
            "details{margin:.6em 0}pre{background:#f6f6f6;padding:6px;white-space:pre-wrap}</style></head><body>")
    parts = [head, f"<h1>Conformance grades ({len(results)} submissions)</h1>"]
    if elapsed is not None:
        parts.append(f"<p>Checked in {elapsed:.1f} s.</p>")
    parts.append("<table id='summary'><tr>" + "".join(f"<th>{e(f)}</th>" for f in SUMMARY_FIELDS)
                 + "".join(f"<th title='{e(r)}'>{e(r[:10])}</th>" for r in ROLES) + "</tr>")
    severity = {v: i for i, v in enumerate(("pass", "deviation", "missing", "fail", "error"))}
    for row, r in zip(rows(results), results.values()):
        worst = {}
        for c in r["checks"]:
            if severity[c["verdict"]] >= severity.get(worst.get(c["component"]), -1):
                worst[c["component"]] = c["verdict"]
        parts.append("<tr class='submission'>" + "".join(
            f"<td>{e(str(row[f]))}</td>" if f != "name" else f"<td><a href='#{e(r['name'])}'>{e(r['name'])}</a></td>"
            for f in SUMMARY_FIELDS) + "".join(
            f"<td class='{worst.get(role, '')}'>{e(worst.get(role, ''))}</td>" for role in ROLES) + "</tr>")
    parts.append("</table>")
    if pictures.get("verdicts"):
        parts.append(f"<h2>Verdicts</h2><img alt='verdicts' src='data:image/png;base64,{pictures['verdicts']}'>")
    parts.append("<h2>Submissions</h2>")
    for r in results.values():
        parts.append(f"<details id='{e(r['name'])}'><summary><b>{e(r['name'])}</b>: {e(r['status'])}, "
                     f"{r.get('score', 0):g} / {r.get('max_score', 0):g} {e(r.get('reason', ''))}</summary>")
        if pictures.get(r["name"]):
            parts.append(f"<img alt='positional encoding of {e(r['name'])}' "
                         f"src='data:image/png;base64,{pictures[r['name']]}'>")
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in r.get("notes", [])) + "</ul>")
        parts.append("<table><tr><th>component</th><th>check</th><th>verdict</th><th>cause</th><th>message</th></tr>")
        for component, entry in grouped(r).items():
            for c in entry["other"]:
                parts.append(f"<tr class='{c['verdict']}'><td>{e(component)}</td><td>{e(c['check'])}</td>"
                             f"<td>{e(c['verdict'])}</td><td>{e(c['cause'])}</td>"
                             f"<td><pre>{e(c['message'][:1500])}</pre></td></tr>")
            if entry["passed"]:
                parts.append(f"<tr class='pass'><td>{e(component)}</td><td colspan='4'>passed: "
                             f"{e(', '.join(c['check'] for c in entry['passed']))}</td></tr>")
        parts.append("</table>")
        if r["status"] != "graded" and r.get("output_tail"):
            parts.append(f"<pre>{e(r['output_tail'][-2000:])}</pre>")
        parts.append("</details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_all(results, out, rubric, elapsed=None, pe_pictures=None):
    """Every report file under ``out``; ``pe_pictures`` holds the PE pictures already drawn (by submission)."""
    summary = rows(results)
    write_atomic(out / "summary.md", "# Class summary\n\n" + tabulate(
        [[s[f] for f in SUMMARY_FIELDS] for s in summary], headers=SUMMARY_FIELDS, tablefmt="github") + "\n")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=SUMMARY_FIELDS)
    writer.writeheader()
    writer.writerows(summary)
    write_atomic(out / "summary.csv", buffer.getvalue())
    write_atomic(out / "summary.json", json.dumps({"rubric": rubric, "submissions": summary}, indent=1))
    pictures = {}
    for name, r in results.items():
        write_atomic(out / "feedback" / f"{name}.md", feedback(r))
        write_atomic(out / "gradescope" / name / "results.json", json.dumps(gradescope(r), indent=1))
        picture = (pe_pictures or {}).get(name) or pe_picture(r.get("pe"))
        if picture:
            write_atomic(out / "figures" / f"{name}-pe.png", picture)
            pictures[name] = base64.b64encode(picture).decode()
    picture = verdict_picture(results)
    if picture:
        write_atomic(out / "figures" / "verdicts.png", picture)
        pictures["verdicts"] = base64.b64encode(picture).decode()
    write_atomic(out / "junit.xml", junit(results))
    write_atomic(out / "index.html", page(results, pictures, elapsed))
