"""``python -m conformance check FILE``: a student's self-check. The submission is checked as the grader checks each
of a class (``conformance.grading.runner.check_one``: its own process, beside a judge that never loads its code),
scored with the assignment's rubric, and the feedback the student will get is printed and written to
``OUT/feedback/NAME.md``, the results of the checks the rubric hides left out."""
import os
import sys
from pathlib import Path

from conformance.grading import assignment, checking, reports, reproductions, runner
from conformance.grading.analytics import digest
from conformance.grading.files import write_atomic

DESCRIPTION = ("Check your submission the way it will be graded: the same checks, the same rubric, the same feedback "
               "(without the checks the rubric hides until the grades are released). Exit status 0 when nothing "
               "shown failed, 1 when something did, 2 when the submission or the rubric cannot be read.")


def add_arguments(parser):
    parser.add_argument("submission", metavar="FILE",
                        help="your submission: a .py file, a notebook (.ipynb) or its text export, a markdown post, a "
                             "folder or an importable module")
    parser.add_argument("--rubric", help="the assignment's rubric, as your teacher hands it out (the rubric.toml that "
                                         "grade writes; default: conformance/grading/rubric.toml)")
    parser.add_argument("--solution", metavar="PATH", default=None,
                        help="a solution whose roles are those the assignment asks for, as grade --solution takes it")
    parser.add_argument("--out", default=os.path.join("reports", "check"),
                        help="folder the feedback goes to, as OUT/feedback/NAME.md (default: reports/check/)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed to the submission (default 300)")
    parser.add_argument("--memory", type=runner.size, default="2G",
                        help="memory the submission may take beyond the checker's own (default 2G)")


def run(args, pytest_args):
    pytest_args = runner.grading_args(pytest_args)
    limits = dict(timeout=args.timeout, memory=args.memory, output_limit=64 << 20)
    try:
        path = runner.resolve(args.submission)
        rubric = assignment.load_rubric(args.rubric)
        if args.solution is not None:
            solution = runner.check_one("solution", runner.resolve(args.solution), limits, pytest_args)
            rubric = assignment.for_solution(rubric, solution, args.solution)
        name = runner.entry_name(path)
        result = assignment.score(runner.check_one(name, path, limits, pytest_args), rubric)
    except (checking.SetupError, assignment.RubricError) as exc:
        print(f"conformance check: {exc}", file=sys.stderr)
        return 2
    shown = assignment.student_view(result, rubric)
    out = Path(args.out)
    text = reports.feedback(shown, reproductions.write_scripts(out, shown, digest(shown)["mistakes"]))
    write_atomic(out / "feedback" / f"{name}.md", text)
    picture = reports.pe_picture(result.get("pe"))
    if picture:
        write_atomic(out / "figures" / f"{name}-pe.png", picture)
    print(text)
    print(f"conformance check: the feedback is in {out / 'feedback' / f'{name}.md'}", file=sys.stderr)
    return 0 if shown["status"] == "graded" and not shown["counts"]["fail"] + shown["counts"]["error"] else 1
