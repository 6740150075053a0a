"""Similarity between submissions: evidence for the teacher, never a score change (``docs/grading.md``).

Every pair of submissions is compared, and each with the teacher's sources (``--similar-to``), on copydetect's
fingerprints (MOSS's winnowing over its tokens: names one letter, no comments, no spaces) of code read, never run,
with docstrings dropped and methods and definitions sorted by their normalised text; per role (the grader's notes,
or the code's ``CONFORMANCE_ROLES``) and over the whole code.

    found = compare_paths(["a.py", "b.ipynb"], references=["solution.py"])
    found.data["pairs"][0]     # {"a", "b", "score", "flagged", "overall": {...}, "components": {...}}
"""
import ast
import bisect
import functools
import html
import io
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy

from adapters.cells import LoadError, extract_cells, project_files
from conformance.contract.interface import ROLES

THRESHOLD = 0.8
"""Share of one side's normalised code found in the other above which a pair (or a component) is flagged."""
LONG_MATCH = 300
"""Characters of normalised code (a name is one character, no spaces: about 20 lines) a flagged match needs."""
K, WINDOW = 25, 1
"""copydetect's k-gram length (its default noise threshold) and winnowing window (every k-gram kept)."""
REGIONS_FROM = 0.5
"""A match's regions are written (``similarity.json``, the page) from this score up; below, its scores only."""
REFERENCE = "similar-to:"
"""The prefix of the names of the teacher's sources."""
NOTE = re.compile(r"^([a-z_]+): ([A-Za-z_][\w.]*)")


def roles_from_notes(notes):
    """``{role: "Name" or "Class.method"}`` from the grader's notes on how the code was read (``role: Name ...``)."""
    found = {}
    for matched in filter(None, (NOTE.match(str(note)) for note in notes or ())):
        if matched[1] in ROLES:
            found.setdefault(matched[1], matched[2])
    return found


# -- reading code without running it ----------------------------------------------------------------------------
@dataclass
class Unit:
    """One stretch of code: a module of a folder, or a code cell (``first``: its first line in the file, 0 if
    unknown)."""
    where: str
    first: int
    lines: list
    tree: object = None

    def origin(self, number):
        return (self.where, self.first + number - 1) if self.first else (self.where, number)


def read_units(path):
    """The code of a submission, as :class:`Unit` s, in order (a folder's modules; a file's code cells)."""
    path = Path(path)
    if path.is_dir():
        files = [(str(f.relative_to(path)), f.read_text(errors="replace"), 1) for f in project_files(path)]
    else:
        kind, cells = extract_cells(path)
        files = [(path.name if kind not in ("notebook", "notebook-text", "markdown") or cell.first_line
                  else f"{path.name} {cell.label}", cell.source, cell.first_line) for cell in cells]
    return [Unit(where, first, source.splitlines(), parsed(source)) for where, source, first in files]


def parsed(source):
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def docstring_lines(tree):
    """The lines holding only a docstring (of the module, a class or a function)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str) and (isinstance(node, ast.Module) or first.lineno > node.lineno):
                lines |= set(range(first.lineno, first.end_lineno + 1))
    return lines


@functools.lru_cache(maxsize=1 << 14)
def normalised(text):
    """copydetect's normalised text of ``text`` (names one letter, no comments, no spaces)."""
    from copydetect.utils import filter_code
    return filter_code(text, "code.py", "python")[0]


def span(node):  # (its decorators included)
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]), node.end_lineno


def definition_lines(node, unit):
    """``[(where, line, text)]`` of a class or function, without docstrings, a class's methods sorted by their
    normalised text (its other statements first, in order)."""
    skip = docstring_lines(node)

    def lines(first, last):
        return [(*unit.origin(n), unit.lines[n - 1]) for n in range(first, last + 1)
                if n not in skip and n <= len(unit.lines)]

    if not isinstance(node, ast.ClassDef):
        return lines(*span(node))
    is_method = [isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) for s in node.body]
    members = sorted(zip(is_method, (lines(*span(s)) for s in node.body)),
                     key=lambda m: (m[0], normalised(joined(m[1])) if m[0] else ""))  # (a stable sort)
    return lines(span(node)[0], node.body[0].lineno - 1) + [line for _, member in members for line in member]


def joined(lines):
    return "\n".join(t for *_, t in lines)


def definitions(units):
    """``{name: (node, unit)}`` of the top-level classes and functions (a later definition wins)."""
    found = {}
    for unit in units:
        for node in unit.tree.body if unit.tree else ():
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                found[node.name] = (node, unit)
    return found


def declared_roles(units):
    """``{role: "Name"}`` of a ``CONFORMANCE_ROLES = {"role": Name, ...}`` written in the code (read, not run)."""
    found = {}
    for unit in units:
        for node in unit.tree.body if unit.tree else ():
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
                    isinstance(t, ast.Name) and t.id == "CONFORMANCE_ROLES" for t in node.targets):
                found = {k.value: ast.unparse(v) for k, v in zip(node.value.keys, node.value.values)
                         if isinstance(k, ast.Constant) and k.value in ROLES and isinstance(v, (ast.Name, ast.Attribute))}
    return found


def resolve(defined, target):
    """The node of ``Name`` or ``Class.method`` among ``defined``, with its unit, or None."""
    head, _, rest = target.partition(".")
    if head not in defined:
        return None
    node, unit = defined[head]
    if not rest:
        return node, unit
    for member in node.body if isinstance(node, ast.ClassDef) else ():
        if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and member.name == rest:
            return member, unit
    return None


# -- fingerprints -----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=512)
def fingerprint(code):
    """copydetect's fingerprint of ``code``, and each of its k-grams' hash and position side by side (for
    :func:`overlap`); made once for a text that several submissions share (a course's template, a role written
    alike), lexing being the most of reading a source."""
    from copydetect import CodeFingerprint
    found = CodeFingerprint("code.py", K, WINDOW, fp=io.StringIO(code), language="python")
    pairs = [(h, i) for h, positions in found.hash_idx.items() for i in positions]
    return (found, numpy.array([h for h, _ in pairs], dtype=numpy.int64),
            numpy.array([i for _, i in pairs], dtype=numpy.int64))


class Text:
    """Code made comparable: its lines in normalised order, where each came from, and copydetect's fingerprint."""

    def __init__(self, lines):
        self.lines = lines
        self.starts = list(itertools.accumulate((len(t) + 1 for *_, t in lines[:-1]), initial=0))
        self.print, self.hashes, self.positions = fingerprint(joined(lines))
        self.usable = len(self.print.filtered_code) >= K and bool(self.print.hashes)

    def regions(self, slices):
        """Raw character slices as ``[{"where", "lines": [first, last]}]``, consecutive lines merged."""
        numbers = sorted({i for start, end in zip(*slices)
                          for i in range(bisect.bisect_right(self.starts, start) - 1,
                                         bisect.bisect_right(self.starts, max(start, end - 1)))})
        regions = []
        for i in numbers:
            where, line, text = self.lines[i]
            if not text.strip():
                continue
            if regions and regions[-1]["where"] == where and regions[-1]["lines"][1] in (line - 1, line - 2):
                regions[-1]["lines"][1] = line
            else:
                regions.append({"where": where, "lines": [line, line]})
        return regions


def raw(slices, fp):
    """Slices of the normalised code as slices of the code itself (as copydetect's ``compare_files`` does)."""
    if len(fp.offsets) and len(slices[0]):
        slices = slices + fp.offsets[:, 1][(fp.offsets[:, 0].searchsorted(slices)).clip(0, len(fp.offsets) - 1)]
    return slices


def overlap(a, b):
    """The positions in ``a`` and in ``b`` (:class:`Text`) of the k-grams whose hash the other holds too: the
    positions copydetect's ``find_fingerprint_overlap`` gives (in another order, which its slices do not see),
    found in arrays, at a class of 40's 780 pairs the most of the similarity's time when done hash by hash."""
    return a.positions[numpy.isin(a.hashes, b.hashes)], b.positions[numpy.isin(b.hashes, a.hashes)]


def match(a, b, side=None):
    """How much of ``a`` and ``b`` (:class:`Text`) the other holds: ``{"score", "a", "b", "longest", "matched",
    "regions": {"a": [...], "b": [...]}}``; ``score`` is the larger share (that of ``side``, "a" or "b", if given)."""
    from copydetect.utils import get_copied_slices
    empty = dict(score=0.0, a=0.0, b=0.0, longest=0, matched=0, regions={"a": [], "b": []})
    if not (a.usable and b.usable):
        return empty
    idx_a, idx_b = overlap(a, b)
    sa, sb = get_copied_slices(idx_a, K), get_copied_slices(idx_b, K)
    if not len(sa[0]):
        return empty
    share_a = float((sa[1] - sa[0]).sum() / a.print.token_coverage)
    share_b = float((sb[1] - sb[0]).sum() / b.print.token_coverage)
    return dict(score=round({"a": share_a, "b": share_b}.get(side, max(share_a, share_b)), 4), a=round(share_a, 4),
                b=round(share_b, 4), longest=int(max((sa[1] - sa[0]).max(), (sb[1] - sb[0]).max())),
                matched=int(min((sa[1] - sa[0]).sum(), (sb[1] - sb[0]).sum())),
                regions={"a": a.regions(raw(sa, a.print)), "b": b.regions(raw(sb, b.print))} if max(
                    share_a, share_b) >= REGIONS_FROM else {"a": [], "b": []})


# -- sources and pairs ------------------------------------------------------------------------------------------
@dataclass
class Source:
    name: str
    reference: bool
    whole: Text = None
    components: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


def read_source(name, path, roles=None, reference=False):
    """A submission (or a teacher's source) made comparable: its whole code and, with ``roles``
    (``{role: "Name"}``), each role's own code; what could not be read is in its notes."""
    source = Source(name, reference)
    try:
        units = read_units(path)
    except (LoadError, OSError, UnicodeDecodeError) as exc:
        source.notes.append(f"not compared: its code cannot be read ({exc})")
        return source
    defined = definitions(units)
    roles = roles or declared_roles(units)
    if defined:
        parts = [definition_lines(node, unit) for node, unit in defined.values()]
        parts.sort(key=lambda lines: normalised(joined(lines)))
        source.whole = Text([line for part in parts for line in part])
    else:
        source.whole = Text([(*u.origin(n), t) for u in units for n, t in enumerate(u.lines, 1)])
        source.notes.append("no class or function could be parsed: its code compared as written")
    for role, target in (roles or {}).items():
        found = resolve(defined, target)
        if found is not None:
            source.components[role] = Text(definition_lines(*found))
    if not reference and not source.components:
        source.notes.append("the code of its roles was not found (" + (", ".join(
            f"{r}: {t}" for r, t in roles.items()) if roles else "not graded") + "): compared as whole code only")
    return source


def compare(a, b):
    """The pair ``a``, ``b`` (:class:`Source`): the whole code, and each component (a role with the same role
    of the other, or with the other's whole code when only one side's roles are known)."""
    pair = dict(a=a.name, b=b.name, overall=match(a.whole, b.whole), components={})
    both = a.components and b.components
    for role in (r for r in ROLES if ((r in a.components and r in b.components) if both else
                                      (r in a.components or r in b.components))):
        found = match(a.components.get(role, a.whole), b.components.get(role, b.whole),
                      None if both else "a" if a.components else "b")
        found["flagged"] = found["score"] >= THRESHOLD and found["longest"] >= LONG_MATCH
        pair["components"][role] = found
    overall = pair["overall"]
    overall["flagged"] = overall["score"] >= THRESHOLD and overall["matched"] >= LONG_MATCH
    pair.update(score=overall["score"], flagged=overall["flagged"] or any(
        c["flagged"] for c in pair["components"].values()))
    return pair


def clusters(names, pairs):
    """Groups of two or more names linked by flagged pairs (union-find), the largest first."""
    parent = {n: n for n in names}

    def root(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for p in pairs:
        if p["flagged"]:
            parent[root(p["a"])] = root(p["b"])
    groups = {}
    for n in names:
        groups.setdefault(root(n), []).append(n)
    return sorted((g for g in groups.values() if len(g) > 1), key=lambda g: (-len(g), g))


def alike(pair):
    """The flagged components of ``pair`` and their scores, in a line."""
    return ", ".join(f"{role} {found['score']:.0%}" for role, found in pair["components"].items() if found["flagged"])


class Similarity:
    """The class's similarity: ``data`` (what ``similarity.json`` holds) and the sources, for the page."""

    def __init__(self, submissions, roles=None, references=None, skipped=None):
        """``submissions``, ``references``: ``{name: path}``; ``roles``: ``{name: {role: "Name"}}``; ``skipped``:
        why it is not computed (nothing is then)."""
        if skipped:
            self.sources, self.data = {}, dict(skipped=skipped, pairs=[], clusters=[], submissions={})
            return
        roles = roles or {}
        self.sources = {name: read_source(name, path, roles.get(name)) for name, path in submissions.items()}
        self.sources.update({REFERENCE + name: read_source(REFERENCE + name, path, reference=True)
                             for name, path in (references or {}).items()})
        mine = [s for s in self.sources.values() if not s.reference and s.whole]
        theirs = [s for s in self.sources.values() if s.reference and s.whole]
        pairs = [compare(a, b) for a, b in itertools.combinations(mine, 2)]
        pairs += [compare(a, b) for a in mine for b in theirs]
        pairs.sort(key=lambda p: (not p["flagged"], -p["score"], p["a"], p["b"]))
        best = {}
        for p in pairs:
            for me, other in ((p["a"], p["b"]), (p["b"], p["a"])):
                if me in submissions and p["score"] > best.get(me, (-1, ""))[0]:
                    best[me] = (p["score"], other)
        self.data = dict(
            threshold=THRESHOLD, long_match=LONG_MATCH, k=K, window=WINDOW,
            submissions={n: dict(similarity=best.get(n, (None, ""))[0], most_similar_to=best.get(n, (None, ""))[1],
                                 components=sorted(s.components, key=ROLES.index), notes=s.notes,
                                 reference=s.reference) for n, s in self.sources.items()},
            pairs=pairs, clusters=clusters(list(self.sources), pairs))

    def best(self, name):
        """``(highest similarity, the name of that pair's other side)`` of submission ``name``, or ``(None, "")``."""
        entry = self.data["submissions"].get(name, {})
        return entry.get("similarity"), entry.get("most_similar_to", "")

    def json(self):
        return json.dumps(self.data, separators=(",", ":"))  # (compact: a large class has many pairs)

    # -- the page's section -------------------------------------------------------------------------------------
    def side(self, name, text, regions, context=2):
        """One side of a match: the code in normalised order, the matched lines highlighted, the rest elided."""
        e = html.escape
        hit = [any(r["where"] == w and r["lines"][0] <= n <= r["lines"][1] for r in regions) for w, n, _ in text.lines]
        out, gap = [], False
        for i, (where, number, line) in enumerate(text.lines):
            if not any(hit[max(0, i - context):i + context + 1]):
                gap = True
                continue
            out += ["<span class='gap'>\u22ee</span>"] if gap and out else []
            gap = False
            out.append(f"<span class='{'hit' if hit[i] else 'line'}'><span class='ln'>{e(where)}:{number}</span> "
                       f"{e(line)}</span>")
        return f"<div><b>{e(name)}</b><pre class='code'>" + "".join(out) + "</pre></div>"

    def pair_html(self, p, components=3):
        """A flagged pair: its most alike flagged components (else the whole code), side by side."""
        e, a, b = html.escape, self.sources[p["a"]], self.sources[p["b"]]
        shown = sorted(((r, c) for r, c in p["components"].items() if c["flagged"]),
                       key=lambda rc: -rc[1]["longest"])[:components] or [("whole code", p["overall"])]
        return (f"<details class='pair'><summary>{e(p['a'])} and {e(p['b'])}: {p['score']:.0%} of the whole code; "
                + e(", ".join(r for r, _ in shown)) + "</summary>" + "".join(
                    f"<h4>{e(role)}: {found['score']:.0%} alike, longest match {found['longest']} characters of "
                    "normalised code</h4><div class='sides'>"
                    + self.side(p["a"], a.components.get(role, a.whole), found["regions"]["a"])
                    + self.side(p["b"], b.components.get(role, b.whole), found["regions"]["b"]) + "</div>"
                    for role, found in shown) + "</details>")

    def html(self, link=html.escape, limit=20):
        """The page's section: the clusters, the flagged pairs (a table), and up to ``limit`` of them side by side."""
        e, flagged, groups = html.escape, [p for p in self.data["pairs"] if p["flagged"]], self.data["clusters"]
        if self.data.get("skipped"):
            return f"<section id='similarity'><h2>Similarity</h2><p>Not computed: {e(self.data['skipped'])}</p></section>"
        parts = ["<section id='similarity'><h2>Similarity between submissions</h2><p>Evidence for the teacher to read: "
                 f"no score depends on it. A pair is listed when at least {THRESHOLD:.0%} of one side's normalised code "
                 "(names, comments, spacing and the order of methods do not count) is found in the other, over the whole "
                 f"code or one component with an unbroken match of {LONG_MATCH} characters; {len(self.data['pairs'])} "
                 f"pairs compared, {len(flagged)} listed. Every pair is in similarity.json.</p><h3>Clusters</h3>",
                 "<ul id='clusters'>" + "".join(f"<li class='cluster'>{len(g)} sources: " + ", ".join(map(link, g))
                                                + "</li>" for g in groups) + "</ul>" if groups else
                 "<p>No group of submissions is alike above the threshold.</p>"]
        if flagged:
            parts.append("<h3>Most similar pairs</h3><div class='scroll'><table class='sortable' id='similar-pairs'>"
                         "<thead><tr><th>submission</th><th>similar to</th><th>whole code</th><th>characters in common"
                         "</th><th>components alike</th></tr></thead><tbody>" + "".join(
                             f"<tr class='similar'><td>{link(p['a'])}</td><td>{link(p['b'])}</td><td data-sort="
                             f"'{p['score']}'>{p['score']:.0%}</td><td>{p['overall']['matched']}</td><td>"
                             + e(alike(p)) + "</td></tr>" for p in flagged) + "</tbody></table></div>")
            parts += [self.pair_html(p) for p in flagged[:limit]]
        return "".join(parts) + "</section>"


STYLE = (".sides{display:grid;grid-template-columns:1fr 1fr;gap:8px}.sides>div{min-width:0}"
         "pre.code span.hit{background:#ffe08a;display:block}pre.code span.line{display:block}"
         "pre.code .ln{color:#888;user-select:none}pre.code .gap{color:#888;display:block}")
"""The section's CSS (the page's ``<style>`` takes it)."""


def compare_paths(paths, roles=None, references=()):
    """:class:`Similarity` of the submissions at ``paths`` (named by their stems, as the grader names them),
    without grading; ``roles``: ``{name: {role: "Name"}}``; ``references``: paths of the teacher's sources."""
    return Similarity({Path(p).stem: Path(p) for p in paths}, roles,
                      {Path(p).stem: Path(p) for p in references})


def for_class(results, entries, references=()):
    """The class's :class:`Similarity` (``skipped`` without copydetect): ``results`` by name (the roles come
    from their notes), ``entries`` ``[(name, path)]`` as the grader found them, ``references`` ``[(name, path)]``
    the teacher's sources to compare them with. Each result gets ``similarity`` and ``most_similar_to``, and
    nothing else: no score reads them."""
    try:
        import copydetect  # noqa: F401
    except ImportError as exc:
        found = Similarity({}, skipped=f"copydetect is not installed (pip install -e '.[grading]'): {exc}")
    else:
        found = Similarity(dict(entries), {name: roles_from_notes(r.get("notes")) for name, r in results.items()},
                           dict(references))
    for name, result in results.items():
        result["similarity"], result["most_similar_to"] = found.best(name)
    return found
