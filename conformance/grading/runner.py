"""Grading a class: ``python -m conformance grade SUBMISSIONS_DIR [--out OUT_DIR]`` (or ``conformance-grade``).

Every entry of SUBMISSIONS_DIR (a file: .py, notebook, text export, markdown; or a folder: a small package) is
checked in its own process, forked from a worker that has already imported torch and the checker
(``conformance.grading.zygote``), with a wall-clock limit, an address-space limit and an output limit, in a fresh folder
of its own that is nowhere near the output folder, beside a judge that never loads its code and runs the checks
that only call it (``conformance.grading.judge``). The verdicts come from the reports that the two write; the grader
never imports student code and judges them from outside (the judge's verdicts win, and the cross-checked ones
must agree): it must come with the integrity record of
``conformance.grading.integrity`` (nonce, no patching, no refused operations), list every collected check and agree with
the exit status. Whatever goes wrong becomes the submission's row; every file under OUT_DIR is written whole
(temporary file, then ``os.replace``). Unchanged submissions are not checked again (``--force`` does).
"""
import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from conformance.grading import assignment
from conformance.grading.assignment import load_rubric, score
from conformance.grading.checking import UNCHECKED, Local, SetupError, unchecked
from conformance.grading.files import read_json, write_atomic

ROOT = Path(__file__).resolve().parents[2]


def checker_version():
    """A hash of the checker's own code: a cached grade is reused only when it is unchanged."""
    digest = hashlib.sha256()
    for folder in ("conformance", "adapters", "reference"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def discover(folder):
    """``[(name, path)]``: every file and folder of ``folder`` not starting with '.' or '_', by name."""
    entries = []
    for path in sorted(Path(folder).iterdir()):
        if path.name.startswith((".", "_")) or not (path.is_file() or path.is_dir()):
            continue
        name = entry_name(path)
        while name in {n for n, _ in entries}:
            name += "_"
        entries.append((name, path))
    return entries


def entry_name(path):
    """A submission's name: its file's stem or its folder's name, each character not safe in a file name a '_'."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in (path.stem if path.is_file() else path.name))


def fingerprint(path):
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for p in files:
        digest.update(str(p.relative_to(path.parent)).encode() + b"\0" + p.read_bytes())
    return digest.hexdigest()


def resolve(spec):
    """The path of a submission given as --impl takes it: a file, a folder, or an importable module's file or
    package folder (found without running it); ``SetupError`` if there is none."""
    from adapters.submission import ImplementationNotFound, module_path
    if os.path.exists(spec):
        return Path(spec)
    try:
        return Path(module_path(spec))
    except ImplementationNotFound as exc:
        raise SetupError(str(exc)) from None


def check_one(name, path, limits, pytest_args, cluster=None):
    """One submission (the teacher's solution, a student's self-check) checked as each of a class is; its result,
    not scored."""
    where = placement(cluster, 1, pytest_args)
    try:
        future = where.submit(name, path, limits, [])
        try:
            return future.result()
        except Exception as exc:
            return unchecked(name, path, *where.failure(exc))
    finally:
        where.close()


def placement(cluster, jobs, pytest_args):
    """``Local``, or with ``cluster`` Dask distributed (``conformance.grading.cluster``, imported only then)."""
    if cluster is None:
        return Local(pytest_args, jobs)
    try:
        from conformance.grading import cluster as dask_grading
    except ImportError as exc:
        raise SetupError(f"--cluster needs Dask distributed: pip install -e '.[cluster]' ({exc})") from None
    return dask_grading.Dask(cluster, pytest_args)


# -- the class --------------------------------------------------------------------------------------------------
class Progress:
    """A progress bar with the running count of passes and failures (tqdm when installed)."""

    def __init__(self, total, enabled=True):
        self.total, self.done, self.passed, self.failed, self.enabled = total, 0, 0, 0, enabled
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="submission", file=sys.stderr)
            except ImportError:
                pass

    def update(self, result):
        self.done += 1
        clean = result["status"] == "graded" and not (result["counts"]["fail"] or result["counts"]["error"])
        self.passed += clean
        self.failed += not clean
        if not self.enabled:
            return
        text = f"passed {self.passed}, failed {self.failed}"
        if self.bar is not None:
            self.bar.set_postfix_str(f"{text}, last: {result['name']}")
            self.bar.update(1)
        else:
            sys.stderr.write(f"\r[{self.done}/{self.total}] {text}, last: {result['name'][:30]:30}")
            sys.stderr.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            sys.stderr.write("\n")


GRADING_PROFILE = "grade"
"""The hypothesis profile of grading unless the pytest arguments name one: two examples per check (the strategies
draw sizes that tell the common mistakes apart, so the class's throughput is bought with few examples)."""


def grading_args(pytest_args):
    """The pytest arguments of grading: the :data:`GRADING_PROFILE` unless they name a profile."""
    if any(a.startswith("--hypothesis-profile") for a in pytest_args):
        return list(pytest_args)
    return [f"--hypothesis-profile={GRADING_PROFILE}", *pytest_args]


def solution_result(spec, out, version, limits, pytest_args, cluster=None, force=False):
    """The teacher's solution (``--solution``) checked as a submission is; ``OUT/solution.json`` keeps it while its
    bytes, the checker and the pytest arguments are unchanged."""
    path = resolve(spec)
    key = fingerprint(path) + version
    stored = read_json(out / "solution.json")
    if not force and isinstance(stored, dict) and stored.get("key") == key and isinstance(stored.get("result"), dict):
        return stored["result"]
    result = check_one("solution", path, limits, pytest_args, cluster)
    if result["status"] not in UNCHECKED:
        write_atomic(out / "solution.json", json.dumps(dict(key=key, result=result), indent=1))
    return result


def grade(folder, out=None, jobs=None, timeout=300.0, memory=2 << 30, output_limit=64 << 20, force=False,
          rubric=None, pytest_args=(), progress=True, cluster=None, similar_to=None, solution=None, release=False,
          only=None, roster=None):
    """Grade every submission of ``folder`` and write the reports under ``out``; returns the results by name.
    ``cluster``: None (this machine, ``jobs`` at a time), ``local:N`` or a Dask scheduler's address.
    ``similar_to``: a folder of sources (or one file: the teacher's solution) every submission is compared with,
    besides the other submissions (``conformance.grading.similarity``: evidence in the reports, not in the score).
    ``solution``: the teacher's own (``conformance.grading.assignment.for_solution``: the roles it contains are
    those required; it must earn full marks, else ``RubricError``). ``release``: students see the hidden checks.
    ``only``: the names of the submissions to check again; the others keep their stored results. ``roster``: the
    CSV file of the students (``conformance.grading.course``). Bad ``only`` names or roster: SetupError."""
    from conformance.grading import course
    from conformance.grading import reports as grade_reports
    from conformance.grading import similarity
    folder = Path(folder)
    submissions = discover(folder)
    try:
        named = None if only is None else course.selected(submissions, only)
        students = None if roster is None else course.read_roster(roster)
    except course.CourseError as exc:
        raise SetupError(str(exc)) from None
    out = Path(out or Path("reports") / folder.resolve().name)
    out.mkdir(parents=True, exist_ok=True)
    rubric_data = load_rubric(rubric)
    pytest_args = grading_args(pytest_args)
    version = hashlib.sha256((checker_version() + json.dumps(list(pytest_args))).encode()).hexdigest()[:16]
    limits = dict(timeout=float(timeout), memory=int(memory), output_limit=int(output_limit))
    if solution is not None:
        rubric_data = assignment.for_solution(
            rubric_data, solution_result(solution, out, version, limits, pytest_args, cluster, force), solution)
    write_atomic(out / "rubric.toml", assignment.toml_text(rubric_data))
    cache = read_json(out / ".cache.json") or {}
    results, todo = {}, []
    for name, path in submissions:
        key = fingerprint(path) + version
        stored = read_json(out / "results" / f"{name}.json")
        stored = stored if isinstance(stored, dict) and stored.get("name") == name else None
        if named is not None and name not in named:
            results[name] = stored or unchecked(name, path, "not graded", "not named by --only, and no stored result")
        elif not force and named is None and cache.get(name) == key and stored:
            results[name] = stored
        else:
            todo.append((name, path, key))
    bar = Progress(len(submissions), progress)
    for name in results:
        bar.update(score(results[name], rubric_data))
    started, pictures = time.perf_counter(), {}
    if todo:
        where = placement(cluster, jobs, pytest_args)
        try:
            private = [str(out.resolve())]
            futures = {where.submit(name, path, limits, private): (name, path, key) for name, path, key in todo}
            for future in where.as_completed(futures):
                name, path, key = futures.pop(future)
                try:
                    result = future.result()
                except Exception as exc:  # the grader's own trouble, a lost worker: still the submission's row
                    result = unchecked(name, path, *where.failure(exc))
                score(result, rubric_data)
                pictures[name] = grade_reports.pe_picture(result.get("pe"))  # drawn while the others run
                write_atomic(out / "results" / f"{name}.json", json.dumps(result, indent=1))
                cache[name] = key if result["status"] not in UNCHECKED else None
                write_atomic(out / ".cache.json", json.dumps(cache, indent=1))
                results[name] = result
                bar.update(result)
        finally:
            where.close()
    bar.close()
    ordered = {name: results[name] for name, _ in submissions}
    references = [] if similar_to is None else discover(Path(similar_to)) if Path(similar_to).is_dir() else [
        (Path(similar_to).stem, Path(similar_to))]
    references += [] if solution is None else [("solution", resolve(solution))]
    alike = similarity.for_class(ordered, submissions, references)  # after the scores, which it never changes
    absent = course.attach_roster(ordered, students)
    grade_reports.write_all(ordered, out, rubric_data, elapsed=time.perf_counter() - started, pe_pictures=pictures,
                            similarity=alike, release=release, absent=absent)
    return ordered


def size(text):
    """'4G', '512M', '100k' or bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = str(text).strip().lower().removesuffix("b").removesuffix("i")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


GRADE_DESCRIPTION = ("Grade a folder of submissions: each file or folder in it (a notebook, a .py, a markdown post, a "
                     "project) is checked in its own process, and the reports go to the output folder.")
PYTEST_EPILOG = ("Options not listed here go to pytest, for every submission: -m multi_head_attention or -k layer_norm "
                 "select checks, --hypothesis-profile=ci draws the suite's own examples.")


def add_arguments(parser):
    parser.add_argument("submissions", metavar="SUBMISSIONS_DIR", help="a folder of submissions (files or folders)")
    parser.add_argument("--out", help="output folder (default: reports/<name of SUBMISSIONS_DIR>/)")
    parser.add_argument("--jobs", "-j", type=int, default=None,
                        help="submissions checked at once without --cluster (default: cores)")
    parser.add_argument("--cluster", metavar="ADDRESS", default=None,
                        help="check on Dask distributed: local:N (N worker processes here) or a scheduler's address "
                             "(tcp://host:8786); needs the 'cluster' extra")
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed to a submission (default 300)")
    parser.add_argument("--memory", type=size, default="2G",
                        help="memory a submission may take beyond the checker's own (default 2G)")
    parser.add_argument("--output-limit", type=size, default="64M", help="what a submission may print (default 64M)")
    parser.add_argument("--rubric", help="rubric TOML (default: conformance/grading/rubric.toml)")
    parser.add_argument("--force", action="store_true", help="check unchanged submissions again")
    parser.add_argument("--similar-to", metavar="PATH", default=None,
                        help="a folder of sources (public implementations the course knows) or one file (the "
                             "teacher's solution) to compare every submission with, besides the other submissions; "
                             "similarity is shown to the teacher, never scored")
    parser.add_argument("--solution", metavar="PATH", default=None,
                        help="the teacher's own solution (a file, notebook, folder or module, as --impl takes): the "
                             "roles it contains are those the assignment asks for; it must grade full marks")
    parser.add_argument("--release", action="store_true",
                        help="show students the results of the checks the rubric marks hidden = true")
    parser.add_argument("--only", nargs="+", metavar="NAME", default=None,
                        help="check only these submissions again (by name or file name, after SUBMISSIONS_DIR); the "
                             "others keep their stored results, and every class report is written again")
    parser.add_argument("--roster", metavar="CSV", default=None,
                        help="the students: a CSV file with the columns file, student_id and name (the ids and names "
                             "go into the summary and gradebook.csv)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args, pytest_args):
    folder = Path(args.submissions)
    if not folder.is_dir():
        print(f"conformance-grade: {args.submissions}: " + ("not a folder (give the folder that holds the "
              "submissions)" if folder.exists() else "no such folder"), file=sys.stderr)
        return 2
    if args.similar_to is not None and not Path(args.similar_to).exists():
        print(f"conformance-grade: --similar-to {args.similar_to}: no such file or folder", file=sys.stderr)
        return 2
    submissions = discover(folder)
    if not submissions:
        print(f"conformance-grade: {args.submissions} holds no submission (a file or a folder whose name does not "
              "start with '.' or '_'): nothing graded", file=sys.stderr)
        return 2
    from conformance.grading import course
    for problem in filter(None, [*map(course.unreadable, (p for _, p in submissions)),
                                 course.rubric_problem(args.rubric)]):
        print(f"conformance-grade: {problem}", file=sys.stderr)
        return 2
    try:
        results = grade(args.submissions, args.out, jobs=args.jobs, timeout=args.timeout, memory=args.memory,
                        output_limit=args.output_limit, force=args.force, rubric=args.rubric, pytest_args=pytest_args,
                        progress=not args.quiet, cluster=args.cluster, similar_to=args.similar_to,
                        solution=args.solution, release=args.release, only=args.only, roster=args.roster)
    except (SetupError, assignment.RubricError) as exc:
        print(f"conformance-grade: {exc}", file=sys.stderr)
        return 2
    out = args.out or os.path.join("reports", Path(args.submissions).resolve().name)
    print(f"{len(results)} submissions graded; reports in {out}/ (summary.md, index.html, feedback/, ...)")
    return 0


def main(argv=None):
    """The ``conformance-grade`` console script; unknown options go to pytest (``-m layer_norm``, ``-k ...``)."""
    parser = argparse.ArgumentParser(prog="conformance-grade", description=GRADE_DESCRIPTION, epilog=PYTEST_EPILOG)
    add_arguments(parser)
    args, pytest_args = parser.parse_known_args(argv)
    return run(args, pytest_args)


if __name__ == "__main__":
    sys.exit(main())
