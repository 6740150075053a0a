"""Answer keys: what a piece of someone else's code really contains, written by reading it (``tests/seed_keys/``
for the seeds, ``tests/styles/<name>.toml`` for the style studies; the format is in ``tests/seed_keys/README.md``),
and the judgement of a suite report against one. Every function returns the problems it sees as sentences, empty
when the report agrees with the key."""
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

FLAGGED = ("fail", "error")


@dataclass(frozen=True)
class Finding:
    """A real mistake or a named variant, at the role where it is written (``also``: enclosing roles that may
    report it too; ``accepts``: other causes the same mistake may produce)."""
    component: str
    kind: str
    cause: str
    what: str
    line: tuple = ()
    also: tuple = ()
    accepts: tuple = ()
    behind: bool = False
    file: str = ""
    known_gap: str = ""

    @property
    def components(self):
        return {self.component, *self.also}

    @property
    def causes(self):
        """The cause, the same cause reported by an enclosing ``also`` role (``decoder.layer_norm_eps_wrong`` for
        ``encoder_layer.layer_norm_eps_wrong``), and the accepted others."""
        suffix = self.cause.split(".", 1)[1] if self.cause.startswith(f"{self.component}.") else None
        return {self.cause, *self.accepts, *(f"{role}.{suffix}" for role in self.also if suffix)}

    @property
    def label(self):
        return f"{self.component}:{self.cause}"


@dataclass(frozen=True)
class Clean:
    """A component, or one property family or check of it, written right: no fail or error may be reported
    there."""
    component: str
    what: str
    family: str = ""
    check: str = ""
    known_gap: str = ""

    @property
    def label(self):
        return "/".join(filter(None, (self.component, self.family, self.check)))


@dataclass(frozen=True)
class Key:
    path: Path
    roles: dict
    role_gaps: dict  # role -> why the checker does not bind it as the key says (a known gap)
    findings: tuple
    clean: tuple
    false_findings: tuple = field(default=())  # (component, cause, why): the checker's known false claims


def read_key(path):
    data = tomllib.loads(Path(path).read_text())

    def lines(entry):
        line = entry.get("line", ())
        return tuple(line) if isinstance(line, list) else (line,)

    findings = tuple(Finding(e["component"], e["kind"], e["cause"], e["what"], lines(e), tuple(e.get("also", ())),
                             tuple(e.get("accepts", ())), e.get("behind", False), e.get("file", ""),
                             e.get("known_gap", "")) for e in data.get("finding", ()))
    for f in findings:
        if f.kind not in FLAGGED + ("deviation",):
            raise ValueError(f"{path}: finding {f.label} has kind {f.kind!r} (error, fail or deviation)")
    clean = tuple(Clean(e["component"], e["what"], e.get("family", ""), e.get("check", ""), e.get("known_gap", ""))
                  for e in data.get("clean", ()))
    false = tuple((e["component"], e["cause"], e["why"]) for e in data.get("false_finding", ()))
    return Key(Path(path), dict(data.get("roles", {})), dict(data.get("role_gaps", {})), findings, clean, false)


def outcomes(report):
    """Every verdict of a report and every verdict behind an error: ``(component, verdict, cause, message)``."""
    for c in report["checks"]:
        yield c["component"], c["verdict"], c["cause"], c["message"].split("\nbehind this error")[0]
        if c.get("behind") and c["behind"].get("cause"):
            yield c["component"], c["behind"]["verdict"], c["behind"]["cause"], c["behind"]["message"]


def bound_names(notes):
    """``{role: name}`` from the mapping lines of a report's notes (``multi_head_attention: MultiHeadedAttention
    (heads=h, ...)``, ``padding_mask: get_pad_mask is defined in a cell that does not compile ...``)."""
    found = {}
    for note in notes:
        m = re.match(r"(\w+): ([\w.]+)(?: \(| called as \(|$| is defined in a cell that does not compile)", note)
        if m and m[1] not in found:
            found[m[1]] = m[2]
    return found


def cited_lines(message, filename):
    """The lines of ``filename`` a message cites (``... (at path/filename:245 (cell 9, line 4) ...)``)."""
    return {int(n) for n in re.findall(rf"{re.escape(filename)}:(\d+)", message)}


def role_problems(role, name, report):
    """Is ``role`` bound to ``name`` in the mapping notes, and checked (a verdict other than missing)?"""
    bound = bound_names(report.get("notes", ())).get(role)
    if bound != name:
        return [f"{role}: bound to {bound!r}, the key says {name!r}"]
    if role not in checked_roles(report):
        return [f"{role}: bound to {name!r} but never checked (every check of it is missing)"]
    return []


def checked_roles(report):
    return {c["component"] for c in report["checks"] if c["verdict"] != "missing"}


def unknown_roles(key, report):
    """Roles the report checks that the key says the code does not have."""
    return sorted(checked_roles(report) - set(key.roles))


def finding_problems(finding, report, filename):
    """Is ``finding`` reported at its component (or an ``also`` role) with its cause, as a verdict or behind an
    error, and does a message that cites a line of ``filename`` cite the finding's line?"""
    wanted = ("deviation",) if finding.kind == "deviation" else FLAGGED
    hits = [(component, verdict, cause, message) for component, verdict, cause, message in outcomes(report)
            if component in finding.components and cause == finding.cause and verdict in wanted]
    if not hits:
        seen = sorted({f"{v} {c}" for comp, v, c, _ in outcomes(report) if comp in finding.components and v != "pass"})
        return [f"{finding.label} ({finding.kind}: {finding.what}) is not reported; at "
                f"{sorted(finding.components)} the report has: {seen}"]
    cited = set().union(*(cited_lines(message, filename) for *_, message in hits))
    if cited and finding.line and not cited & set(finding.line):
        return [f"{finding.label}: the messages cite line(s) {sorted(cited)} of {filename}, the mistake is written "
                f"at {list(finding.line)}"]
    return []


def unexplained(key, report):
    """Every fail or error (verdict, or behind an error) that no finding of the key explains."""
    explained = [(f.components, f.causes) for f in key.findings if f.kind in FLAGGED]
    known = {(component, cause) for component, cause, _ in key.false_findings}
    return sorted({f"{component}: {verdict} {cause}: {message[:300]}"
                   for component, verdict, cause, message in outcomes(report)
                   if verdict in FLAGGED and (component, cause) not in known
                   and not any(component in comps and cause in causes for comps, causes in explained)})


def clean_problems(clean, report):
    return [f"{c['component']}/{c['check']}: {c['verdict']} {c['cause']}: {c['message'][:300]}"
            for c in report["checks"] if c["component"] == clean.component and c["verdict"] in FLAGGED
            and clean.family in ("", c["family"]) and clean.check in ("", c["check"])]


def false_finding_problems(false_finding, report):
    component, cause, why = false_finding
    return [f"{component}: {verdict} {cause} still reported ({why})" for comp, verdict, c, _ in outcomes(report)
            if comp == component and c == cause and verdict in FLAGGED]
