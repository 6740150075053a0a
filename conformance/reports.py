"""Reports of whole runs: the suite run on an implementation in its own process (with a time limit), and the JSON
it writes turned into a markdown page a person can read (the verdict table, how the code was mapped, and one line
per finding with its cause)."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

from conformance.contract.interface import ROLES
from conformance.options import FAMILIES
from conformance.reporting import evidence_tag, findings, findings_behind_errors, first_line


def run_checks(impl, report_json, *pytest_args, timeout=600):
    """Run the suite on ``impl`` in a fresh process writing ``report_json``; returns (exit code, output).
    The run happens in an empty directory, so nothing of the caller's (conftest, ini file) interferes."""
    command = [sys.executable, "-m", "pytest", "--pyargs", "conformance", f"--impl={os.path.abspath(impl)}",
               f"--report-json={os.path.abspath(report_json)}", "-q", "-p", "no:cacheprovider", *pytest_args]
    with tempfile.TemporaryDirectory() as empty:
        try:
            done = subprocess.run(command, cwd=empty, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as timeout_error:
            return None, f"the checks did not finish within {timeout_error.timeout:g} s"
    return done.returncode, done.stdout + done.stderr


def markdown(data, title=None):
    """The report of one run (the JSON of ``--report-json``) as markdown."""
    table = data["table"]
    families = [f for f in FAMILIES if any(f in row for row in table.values())]
    rows = [[c] + [table[c].get(f, "") for f in families] for c in ROLES if c in table]
    lines = [f"# {title or data['implementation']}", "",
             f"Contract: {data['contract']}; device: {data['device']}.", ""]
    if data.get("notes"):
        lines += ["## How the code was loaded and mapped", ""] + [f"- {n}" for n in data["notes"]] + [""]
    lines += ["## Verdicts", "", tabulate(rows, headers=["component"] + families, tablefmt="github"), "",
              "## Findings", ""]
    for (verdict, component, cause), group in findings(data["checks"]):
        checks = ", ".join(sorted({r["check"] for r in group}))
        message = group[0]["message"].splitlines()[0].removeprefix(f"{cause}: ")
        where = f"; the role: {group[0]['where']}" if group[0].get("where") else ""
        lines.append(f"- **{verdict}** `{component}` ({checks}){evidence_tag(group)}: `{cause}`: {message}{where}")
    noted = sorted({(r["component"], r["check"], r["message"]) for r in data["checks"]
                    if r["verdict"] == "pass" and r["message"]})
    if noted:
        lines += ["", "## Conforming forms found", ""] + [f"- `{component}` ({check}): {message}"
                                                          for component, check, message in noted]
    hidden = findings_behind_errors(data["checks"])
    if hidden:
        lines += ["", "## Behind the errors", "",
                  "What the checks that ended in an error find once the crash is repaired "
                  f"({'; '.join(sorted({r for _, g in hidden for r in g[0]['behind']['repairs']}))}):", ""]
    for (verdict, component, cause, crash), group in hidden:
        checks = ", ".join(sorted({r["check"] for r in group}))
        message = first_line(group[0]["behind"]["message"]).removeprefix(f"{cause}: ")
        lines.append(f"- **{verdict}** `{component}` ({checks}) behind `{crash}`"
                     + (f": `{cause}`: {message}" if cause else ": passes once repaired"))
    return "\n".join(lines) + "\n"


def report(impl, out_dir, *pytest_args, timeout=600):
    """Check ``impl`` and write ``<stem>.json`` and ``<stem>.md`` under ``out_dir``; returns the JSON path, or None
    with the reason written to ``<stem>.md`` when no report came out."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = Path(impl).stem
    final = out_dir / f"{stem}.json"
    partial = out_dir / f".{stem}.json.partial"
    partial.unlink(missing_ok=True)
    code, output = run_checks(impl, partial, *pytest_args, timeout=timeout)
    if not partial.exists():
        (out_dir / f"{stem}.md").write_text(f"# {impl}\n\nNo report: the checks ended with exit code {code}.\n\n"
                                            f"```\n{output[-3000:]}\n```\n")
        return None
    # the run saw the absolute path; the report names the implementation as the caller did
    data = json.loads(partial.read_text().replace(json.dumps(os.path.abspath(impl))[1:-1], json.dumps(str(impl))[1:-1]))
    final.write_text(json.dumps(data, indent=2) + "\n")
    partial.unlink()
    (out_dir / f"{stem}.md").write_text(markdown(data, title=str(impl)))
    return final
