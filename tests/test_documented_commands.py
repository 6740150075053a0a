"""Every command the README and ``docs/`` show runs as written (issue 26): the module, script or folder it names
exists, its sub-command is one ``python -m conformance`` has, and every option it passes is one its program takes.
Each program is asked once: ``python -m conformance`` through its own parser, the scripts and pytest (with the
checker's plugin) through ``--help``. The two commands of the README's first screen also run in ``.ci/run``."""
import functools
import re
import shlex
import subprocess
import sys

import pytest

from conformance.__main__ import command_line
from tests.mutants import ROOT

PAGES = ["README.md", "benchmarks/README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
STARTS = re.compile(r"^(python3? -m conformance|python3? [\w/]+\.py|pytest)\b")


def code_lines(text):
    """The lines of the page's fenced shell blocks and of its inline code spans."""
    lines, fence, prose = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
        elif fence in ("bash", "sh", "console", ""):
            lines.append(line)
        elif fence is None:
            prose.append(line)
    return lines + re.findall(r"`([^`\n]+)`", "\n".join(prose))


def documented_commands():
    """``[(page, command)]``: each command of the pages, one a ``&&`` link, without comments or redirections."""
    found = []
    for page in PAGES:
        for line in code_lines((ROOT / page).read_text()):
            for part in re.split(r"\s*&&\s*", line.split(" #")[0].split(" > ")[0].strip()):
                if STARTS.match(part) and (page, part) not in found:
                    found.append((page, part))
    return found


def options(command):
    """The options a command passes (``--name`` of ``--name=value`` too, and the short ones such as ``-n``)."""
    return [word.split("=")[0] for word in shlex.split(command.replace("[", " ").replace("]", " "))
            if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", word)]


@functools.cache
def help_of(*program):
    done = subprocess.run([sys.executable, *program, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{' '.join(program)} --help failed:\n{done.stderr[-2000:]}"
    return done.stdout


def test_the_pages_show_the_commands_a_user_needs():
    commands = [c for _, c in documented_commands()]
    assert any(c.startswith("pytest conformance --impl=") for c in commands)
    assert any(c.startswith("pytest tests") for c in commands)
    assert any(c.startswith("python -m conformance grade ") for c in commands)
    assert any(c.startswith("python -m conformance check ") for c in commands)


@pytest.mark.parametrize("page,command", documented_commands(), ids=lambda value: value[:60])
def test_a_documented_command_names_what_exists_and_options_it_takes(page, command):
    words = shlex.split(command.replace("[", " ").replace("]", " "))
    if words[0] == "pytest":
        targets = [w for w in words[1:] if not w.startswith("-") and "/" not in w and "=" not in w]
        folders = [w for w in targets if w in ("tests", "conformance")]
        assert folders, f"{page}: `{command}` names neither the checks (conformance) nor the tests"
        known = help_of("-m", "pytest")
    elif words[:3] in (["python", "-m", "conformance"], ["python3", "-m", "conformance"]):
        parser = command_line()
        subcommand = next((w for w in words[3:] if not w.startswith("-")), None)  # None: the program named alone
        choices = parser._subparsers._group_actions[0].choices
        assert subcommand in (None, *choices), f"{page}: `{command}`: no sub-command {subcommand!r} ({sorted(choices)})"
        known = (choices[subcommand] if subcommand else parser).format_help() + help_of("-m", "pytest")
    else:
        script = ROOT / words[1]
        assert script.is_file(), f"{page}: `{command}` runs {words[1]}, which does not exist"
        known = help_of(words[1])
    unknown = [o for o in options(command) if not re.search(rf"(^|[\s,\[]){re.escape(o)}\b", known, flags=re.M)]
    assert unknown == [], f"{page}: `{command}` passes {unknown}, which its program does not take"
