"""``python -m conformance report IMPL... [--out DIR]``: check each implementation in its own process and write
its JSON and markdown reports under DIR (``reports/`` by default).
``python -m conformance grade SUBMISSIONS_DIR [--out DIR]``: grade a class (``conformance.grading.runner``).
``python -m conformance check FILE``: a student's self-check, the feedback the grade will give
(``conformance.grading.selfcheck``).
``python -m conformance causes --markdown``: print the catalogue of causes (``conformance.diagnosis.causes``) as a markdown
table, as ``docs/causes.md`` holds it."""
import argparse
import sys

from conformance.diagnosis import causes
from conformance.grading import runner as grading
from conformance.grading import selfcheck
from conformance.reports import report


def command_line():
    """The parser of ``python -m conformance``: one sub-command a job; what it does not know goes to pytest."""
    parser = argparse.ArgumentParser(prog="python -m conformance", description="Check Transformer implementations "
                                     "against 'Attention Is All You Need' and grade classes of them.")
    commands = parser.add_subparsers(dest="command", required=True)
    report_command = commands.add_parser("report", help="check implementations and write their reports")
    report_command.add_argument("impls", nargs="+", metavar="IMPL", help="file, notebook, package, module name")
    report_command.add_argument("--out", default="reports", help="output folder (default: reports/)")
    report_command.add_argument("--timeout", type=float, default=600, help="seconds allowed to one implementation")
    grading.add_arguments(commands.add_parser("grade", help="grade a folder of submissions",
                                              description=grading.GRADE_DESCRIPTION, epilog=grading.PYTEST_EPILOG))
    selfcheck.add_arguments(commands.add_parser("check", help="check one submission as it will be graded",
                                                description=selfcheck.DESCRIPTION, epilog=grading.PYTEST_EPILOG))
    causes_command = commands.add_parser("causes", help="print the catalogue of cause ids")
    causes_command.add_argument("--markdown", action="store_true", required=True,
                                help="as a markdown table: id, paper section, meaning")
    return parser


def main(argv=None):
    args, pytest_args = command_line().parse_known_args(argv)
    if args.command == "causes":
        print(causes.markdown(), end="")
        return 0
    if args.command == "grade":
        return grading.run(args, pytest_args)
    if args.command == "check":
        return selfcheck.run(args, pytest_args)
    failed = 0
    for impl in args.impls:
        written = report(impl, args.out, *pytest_args, timeout=args.timeout)
        print(f"{impl}: {written or 'no report (see the .md file)'}")
        failed += written is None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
