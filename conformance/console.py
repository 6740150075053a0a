"""What a person reads at the end of a run: how the code was read (the notes), the verdict table (the worst verdict
of each component in each property family), then each finding once, with the components and checks it came from,
where it is in the author's code, and its reproduction. Every line fits :data:`WIDTH` columns, but for a word
longer than that (a path) and the lines of a reproduction (code, printed as it runs)."""
import re
import textwrap

from conformance.contract.interface import ROLES
from conformance.options import FAMILIES, NOTES, RESULTS
from conformance.reporting import (evidence_tag, first_line, grouped, nothing_checked, role_order,
                                   unmatched_expectations)
from conformance.contract.verdicts import MISSING, PASS, parse_message, summary_table

WIDTH = 120
INDENT = " " * 10
"""Where a finding's text starts, under the verdict (``DEVIATION`` and a space)."""


def pytest_terminal_summary(terminalreporter, config):
    records = config.stash.get(RESULTS, [])
    if not records or hasattr(config, "workerinput"):
        return
    notes = config.stash.get(NOTES, [])
    lines = [*(line for note in notes for line in wrapped(note, "note: ", " " * 6)), *([""] if notes else [])]
    for table in verdict_tables(summary_table(records)):
        lines += [*table, ""]
    lines += finding_lines(records)
    lines += [f"WARNING expected-results entry {key!r} matches no finding of this run"
              for key in unmatched_expectations(config, records)]
    tr = terminalreporter
    tr.write_sep("=", f"conformance of {config.getoption('impl')} (contract: {config.getoption('contract')})")
    for line in lines:
        tr.write_line(line)
    if nothing_checked(config, records):
        tr.write_sep("=", "NOTHING CHECKED", red=True)
        tr.write_line(nothing_checked_help(config.getoption("impl"), notes))


def wrapped(text, first, rest=INDENT):
    """``text`` in lines of at most :data:`WIDTH` columns, the first starting with ``first``, the others with
    ``rest``; a word longer than a line (a path) is kept whole."""
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                         break_on_hyphens=False) or [first.rstrip()]


def verdict_tables(table, width=WIDTH):
    """The verdict table (``{component: {family: verdict}}``) as the lines of markdown tables, one row per
    component in the order of ROLES and one column per family that has a verdict, the families cut into as few
    tables as fit ``width`` columns side by side (each table repeats the component column)."""
    families = [f for f in FAMILIES if any(f in row for row in table.values())]
    components = [c for c in ROLES if c in table] + sorted(set(table) - set(ROLES))
    tables, columns = [], []
    for family in families:
        if columns and len(table_lines(table, components, columns + [family])[0]) > width:
            tables.append(table_lines(table, components, columns))
            columns = []
        columns.append(family)
    return tables + ([table_lines(table, components, columns)] if columns else [])


def table_lines(table, components, families):
    """A markdown table (GitHub's form): the component column, then one column per family."""
    header = ["component", *families]
    rows = [[c, *(table[c].get(f, "") for f in families)] for c in components]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(cell.ljust(w) for cell, w in zip(cells, widths)) + " |"
    return [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(row) for row in rows)]


def finding_lines(records):
    """Each finding once (:func:`distinct_findings`): its verdict, the components and checks it came from (the
    checks on a line of their own below when they do not fit beside) and the kind of its evidence; its message;
    where the role is in the author's code; its reproduction (but for what the checker could not check). Then what
    the checks that ended in an error find once the crash is repaired."""
    lines = []
    for (verdict, cause, _), group in distinct_findings(records):
        where = group[0].get("where")
        tag = " (expected)" if all(r.get("expected") for r in group) else ""
        heading = f"{verdict.upper():9} {components_of(group)}: {checks_of(group)}{tag}{evidence_tag(group)}"
        short = len(heading) <= WIDTH
        lines += [heading] if short else [f"{verdict.upper():9} {components_of(group)}{tag}{evidence_tag(group)}"]
        lines += wrapped(first_line(group[0]["message"]), INDENT)
        lines += wrapped(f"at {where}", INDENT) if where else []
        lines += [] if short else wrapped(f"checks: {checks_of(group)}", INDENT)
        reproduction = parse_message(group[0]["message"], cause)[2].partition("\nbehind this error")[0]
        lines += [INDENT + "Reproduce:", *(INDENT + "  " + line for line in reproduction.splitlines())] \
            if reproduction and verdict != MISSING else []
    for (verdict, cause, _, crash), group in distinct_findings_behind_errors(records):
        lines += wrapped(f"{components_of(group)} behind {crash}", f"{verdict.upper():9} ")
        lines += wrapped(first_line(group[0]["behind"]["message"]) if cause else "passes once repaired", INDENT)
        lines += wrapped(f"checks: {checks_of(group)}", INDENT)
    return lines


def components_of(group):
    return ", ".join(sorted({r["component"] for r in group}, key=role_order))


def checks_of(group):
    return ", ".join(sorted({r["check"] for r in group}))


def distinct_findings(records):
    """``[((verdict, cause, place), [record, ...])]``: the non-passing checks, one group per finding, whichever
    components and checks it came from: the same verdict and cause, and the same place, which is the role's
    location in the author's code (``where``) when the record has one, else its message but for its numbers (the
    sizes each check drew; a crash's message names the line that raised). A crash in one class of the author's,
    reached by the checks of every block built with it, is one finding."""
    return grouped(((r["verdict"], r["cause"], r.get("where") or without_numbers(first_line(r["message"]))), r)
                   for r in records if r["verdict"] != PASS)


def distinct_findings_behind_errors(records):
    """``[((verdict, cause, message's first line without numbers, crash cause), [record, ...])]``: what the checks
    that ended in an error find once the crash is repaired, grouped like :func:`distinct_findings`."""
    return grouped(((r["behind"]["verdict"], r["behind"]["cause"], without_numbers(first_line(r["behind"]["message"])),
                     r["cause"]), r) for r in records if "behind" in r)


def without_numbers(text):
    """``text`` with each number as ``#`` but a line's after a file name (``model.py:12``): what two messages of one
    finding drawn at other sizes share."""
    return re.sub(r"(?<![:\d.])\d+(\.\d+)?(e-?\d+)?", "#", text)


def nothing_checked_help(spec, notes):
    """What a user reads when nothing was checked: what was seen, and a conformance.toml to fill in."""
    template = "\n".join(f'# {role} = "..."' for role in ROLES)
    return (f"No role of the paper's Transformer was found in {spec}, so nothing was checked: this run fails.\n"
            + "".join(f"  {n}\n" for n in notes)
            + "Name the classes and functions that play each role in a conformance.toml beside the code "
              "(a class or function name, Class.method for a method):\n[roles]\n" + template)
