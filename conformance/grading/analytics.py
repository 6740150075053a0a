"""What the grading reports say, as data (``conformance.grading.reports`` renders it): one submission's findings in
the order its student reads them (:func:`digest`), and the class's analytics: the scores' histogram, who got each
cause and each check wrong, and the pass rate of each component."""
import collections
import re
import statistics

from conformance.diagnosis import causes as catalogue
from conformance.contract.interface import ROLES
from conformance.reporting import findings, first_line
from conformance.contract.verdicts import parse_message

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
MISTAKES = ("fail", "error")
ORDER = {role: i for i, role in enumerate(ROLES)}
LOCATION = re.compile(r" ?\(at ([^()]+?:\d+)(?: \(([^()]*)\))?[^()]*\)")
"""Where a message says the code is: ``(at FILE:LINE (cell C, line L) in NAME)``, the parenthesis and the name
optional."""


# -- one submission ---------------------------------------------------------------------------------------------
def meaning(cause):
    """What ``cause`` means, with its paper section, from the catalogue (``conformance.diagnosis.causes``)."""
    entry = catalogue.require(cause)
    return f"{entry.section}: {entry.meaning}" if entry.section else entry.meaning


def finding(key, records):
    """One cause found in one component: its checks, what it means (:func:`meaning`), what the paper requires
    (the first message's own words, with its numbers), what was observed (the first message, then each other
    distinct first line), where in the file (the places those first lines name) and how to reproduce the first
    (``check``: the check it came from; ``by_check``: a reproduction of each check)."""
    verdict, component, cause = key
    parsed = [parse_message(r["message"], cause) for r in records]
    lines = list(dict.fromkeys(first_line(text.strip()) for _, text, _ in parsed))
    where = [m[1] + (f" ({m[2]})" if m[2] else "") for line in lines for m in LOCATION.finditer(line)]
    return dict(verdict=verdict, component=component, cause=cause, checks=sorted({r["check"] for r in records}),
                check=records[0]["check"], by_check={r["check"]: p[2].strip() for r, p in zip(records[::-1],
                                                                                               parsed[::-1])},
                meaning=meaning(cause), requirement=parsed[0][0] or PAPER.get(component, ""),
                observed=[parsed[0][1].strip(), *lines[1:]],
                where=list(dict.fromkeys(where)), reproduction=parsed[0][2].strip())


def mistake(cause, component):
    """A cause without its component or crash prefix (``feed_forward.attribute_never_assigned`` and
    ``error.attribute_never_assigned`` are one mistake, ``attribute_never_assigned``)."""
    for prefix in (f"{component}.", "error."):
        cause = cause.removeprefix(prefix)
    return cause


def one_item_per_mistake(found):
    """The findings with those of one mistake merged into the first of them: the same cause (:func:`mistake`) in
    one component or at one cited line, or one cited line in one component (a crash and the code's reading naming
    the same line, ``error.undefined_name`` and ``name_never_defined``). The merged item lists every check it came
    from; its verdict is the worst. Deviations are never merged with mistakes."""
    merged = []
    for f in found:
        same = next((m for m in merged if (m["verdict"] == "deviation") == (f["verdict"] == "deviation") and (
            mistake(m["cause"], m["component"]) == mistake(f["cause"], f["component"])
            and (m["component"] == f["component"] or set(m["where"]) & set(f["where"]))
            or m["component"] == f["component"] and set(m["where"]) & set(f["where"]))), None)
        if same is None:
            merged.append(dict(f))
            continue
        if f["cause"] != same["cause"] and f["cause"] not in same.setdefault("also", []):
            same["also"].append(f["cause"])
        same["checks"] = sorted(set(same["checks"]) | set(f["checks"]))
        same["where"] = list(dict.fromkeys(same["where"] + f["where"]))
        same["observed"] += [o for o in f["observed"] if o not in same["observed"]]
        if same["verdict"] != "error" and f["verdict"] == "error":
            same["verdict"] = "error"
    return merged


def components(result):
    """One line per component checked: its verdicts counted, its score share (None when not scored), the checks not
    checked ``(check, cause)``, ``absent`` when every check is missing, and ``text`` saying so (and what the
    assignment makes of it: a required role lacking, graded inline, or not asked for); those with a fail or
    error first, then those with a deviation, those that passed, those absent; each by score share, then role."""
    lines = {}
    for c in result["checks"]:
        line = lines.setdefault(c["component"], dict(component=c["component"], unchecked=[],
                                                     counts=collections.Counter()))
        line["counts"][c["verdict"]] += 1
        if c["verdict"] == "missing":
            line["unchecked"].append((c["check"], c["cause"]))
    asked = result.get("assignment", {})
    for line in lines.values():
        n, total = line["counts"], line["counts"].total()
        line["absent"] = n["missing"] == total
        line["share"] = result.get("components", {}).get(line["component"], [None])[0]
        if line["absent"]:
            causes = sorted({cause for _, cause in line["unchecked"]})
            found = "none found" if line["component"] in asked.get("lacking", ()) else "not found in the submission"
            line["text"] = (f"{found}: none of its {total} checks ran" if causes == ["role.missing"]
                            else f"none of its {total} checks could run ({', '.join(causes)})")
            if line["component"] in asked.get("lacking", ()):
                line["text"] = f"the assignment asks for {line['component']}; {line['text']}"
            elif line["component"] in asked.get("inline", {}):
                line["text"] += f"; graded through {asked['inline'][line['component']]}, where it is written"
            continue
        parts = [f"{n['pass']} of {total} checks passed"]
        parts += [f"{n['deviation']} deviation(s)"] if n["deviation"] else []
        parts += [f"{n['fail'] + n['error']} fail or error"] if n["fail"] + n["error"] else []
        parts += ["not checked: " + ", ".join(f"{check} ({cause})" for check, cause in line["unchecked"])
                  ] if line["unchecked"] else []
        parts += ["not asked for by the assignment"] if line["component"] in asked.get("not_asked", ()) else []
        line["text"] = "; ".join(parts)
    return sorted(lines.values(), key=lambda line: (
        0 if line["counts"]["fail"] + line["counts"]["error"] else 1 if line["counts"]["deviation"] else
        3 if line["absent"] else 2, 1 if line["share"] is None else line["share"],
        ORDER.get(line["component"], len(ORDER)), line["component"]))


def digest(result):
    """A submission's report in reading order: ``mistakes`` (the fail and error findings, by cause, errors first),
    ``deviations``, then ``components`` (one line each, :func:`components`)."""
    found = one_item_per_mistake([finding(key, records) for key, records in findings(result["checks"])])
    return dict(mistakes=[f for f in found if f["verdict"] in MISTAKES],
                deviations=[f for f in found if f["verdict"] == "deviation"], components=components(result))


# -- the class --------------------------------------------------------------------------------------------------
def graded(results):
    """The submissions whose verdicts count (status ``graded``)."""
    return {name: r for name, r in results.items() if r["status"] == "graded"}


def histogram(results, bins=10):
    """``[(low, high, count)]``: every submission's score in ``bins`` equal buckets of the maximum score (a bucket
    holds its low end; the last one also the maximum)."""
    maximum = max((r.get("max_score") or 0 for r in results.values()), default=0) or 100
    counts = [0] * bins
    for r in results.values():
        counts[min(max(int(r.get("score", 0) * bins // maximum), 0), bins - 1)] += 1
    return [(maximum * i / bins, maximum * (i + 1) / bins, n) for i, n in enumerate(counts)]


def score_line(results):
    scores = [r.get("score", 0) for r in results.values()]
    if not scores:
        return "No submissions."
    return (f"{len(scores)} submissions, {len(graded(results))} graded: mean score {statistics.mean(scores):.1f}, "
            f"median {statistics.median(scores):g}.")


def tally(results, key, mistakes_together=False):
    """``[{"key", "verdict", "names", "records"}]``: which graded submissions got each fail, error and deviation, by
    ``key(check record)`` (``mistakes_together``: a fail and an error of one key in one row, the error's);
    fails and errors first, then the most common first."""
    rows = {}
    for name, r in graded(results).items():
        for c in r["checks"]:
            if c["verdict"] in (*MISTAKES, "deviation"):
                kind = c["verdict"] == "deviation" if mistakes_together else c["verdict"]
                row = rows.setdefault((key(c), kind), dict(key=key(c), verdict=c["verdict"], names=[], records=[]))
                row["verdict"] = "error" if "error" in (row["verdict"], c["verdict"]) else row["verdict"]
                row["names"] += [] if name in row["names"] else [name]
                row["records"].append((name, c))
    return sorted(rows.values(), key=lambda row: (row["verdict"] == "deviation", -len(row["names"]), row["key"]))


def by_cause(results):
    """:func:`tally` by mistake (a cause without its component, :func:`mistake`: the unscaled scores of an attention
    and of a multi-head attention are one row), with ``detail``: what it means (:func:`meaning`) and the checks it
    was found in."""
    rows = tally(results, lambda c: mistake(c["cause"], c["component"]), mistakes_together=True)
    for row in rows:
        checks = sorted({f"{c['component']}/{c['check']}" for _, c in row["records"]})
        row["detail"] = (f"{meaning(row['records'][0][1]['cause'])} (in {len(checks)} check(s): "
                         f"{', '.join(checks[:4])}{', ...' if len(checks) > 4 else ''})")
    return rows


def by_check(results):
    """:func:`tally` by component/check, with ``detail``: the causes found, each with its number of submissions."""
    rows = tally(results, lambda c: f"{c['component']}/{c['check']}")
    for row in rows:
        causes = collections.Counter(cause for _, cause in {(name, c["cause"]) for name, c in row["records"]})
        row["detail"] = ", ".join(f"{cause} ({n})" for cause, n in sorted(causes.items(), key=lambda i: (-i[1], i[0])))
    return rows


def component_rates(results):
    """Per component of the graded submissions, in the order of the roles: ``have`` (the submissions with a verdict
    other than missing in it), ``failed`` (a fail or error), ``deviating`` (no fail or error, some deviation),
    ``absent`` (the others) and ``rate``: the share of ``have`` with no fail or error."""
    class_ = graded(results)
    rows = {}
    for name, r in class_.items():
        for line in components(r):
            row = rows.setdefault(line["component"], dict(component=line["component"], have=[], failed=[],
                                                          deviating=[]))
            n = line["counts"]
            row["have"] += [] if line["absent"] else [name]
            row["failed"] += [name] if n["fail"] + n["error"] else []
            row["deviating"] += [name] if n["deviation"] and not n["fail"] + n["error"] else []
    for row in rows.values():
        row["absent"] = [name for name in class_ if name not in row["have"]]
        row["rate"] = (len(row["have"]) - len(row["failed"])) / len(row["have"]) if row["have"] else None
    return sorted(rows.values(), key=lambda row: (ORDER.get(row["component"], len(ORDER)), row["component"]))
