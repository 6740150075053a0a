"""A course's side of grading (``conformance.grading.runner``): the roster that maps submissions to students
(``--roster CSV``), the gradebook a course system imports (``gradebook.csv``), the submissions ``--only`` names,
and the checks of the command line's input before anything is graded.

The roster is a CSV file with a header: ``file`` (the submission's file or folder name, ``alice.ipynb``, or the
name the grader gives it, ``alice``), ``student_id`` and, optionally, ``name``. Column names are read without regard
to case, spaces or hyphens (``Student ID`` is ``student_id``); other columns are ignored; a byte-order mark is
allowed. The gradebook has the columns ``student_id, name, score, out_of, comments``: the layout that course systems
(Canvas, Moodle, Blackboard) import, one row per submission, then one per roster line with no submission.
"""
import csv
import io
import tomllib
from dataclasses import dataclass

NOT_ON_ROSTER = "(not on the roster)"
NO_SUBMISSION = "no submission"
GRADEBOOK_FIELDS = ["student_id", "name", "score", "out_of", "comments"]


class CourseError(Exception):
    """Input that keeps the grading from starting (a roster that cannot be read, an unknown ``--only`` name)."""


@dataclass
class Student:
    file: str
    student_id: str
    name: str


def column(header):
    return header.strip().lower().replace(" ", "_").replace("-", "_")


def read_roster(path):
    """The roster's students, in its order; CourseError names what is wrong with the file."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            text = f.read()
    except OSError as exc:
        raise CourseError(f"--roster {path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise CourseError(f"--roster {path}: not UTF-8 text (save the roster as a UTF-8 CSV file)") from None
    reader = csv.reader(io.StringIO(text))
    header = [column(h) for h in next(reader, [])]
    if "file" not in header or "student_id" not in header:
        raise CourseError(f"--roster {path}: the header must name the columns file and student_id (and, if you "
                          f"like, name); it names {', '.join(header) or 'nothing'}")
    students, seen = [], set()
    for line, values in enumerate(reader, 2):
        row = dict(zip(header, (v.strip() for v in values)))
        if not any(row.values()):
            continue
        if not row.get("file"):
            raise CourseError(f"--roster {path}, line {line}: no file named")
        if row["file"] in seen:
            raise CourseError(f"--roster {path}, line {line}: {row['file']} is on the roster twice")
        seen.add(row["file"])
        students.append(Student(row["file"], row.get("student_id", ""), row.get("name", "")))
    return students


def attach_roster(results, students):
    """Give each result its ``student_id`` and ``student_name`` (blank without a roster, NOT_ON_ROSTER for a
    submission that is not on it); the roster's students with no submission."""
    by_file = {s.file: s for s in students or []}
    for result in results.values():
        student = by_file.pop(result.get("submission", ""), None) or by_file.pop(result["name"], None)
        result["student_id"] = student.student_id if student else ""
        result["student_name"] = student.name if student else NOT_ON_ROSTER if students else ""
    return list(by_file.values())


def absent_rows(absent, fields):
    """Rows of the summary (``fields``) for the roster's students with no submission."""
    return [{**{f: "" for f in fields}, "submission": s.file, "student_id": s.student_id, "student_name": s.name,
             "status": NO_SUBMISSION} for s in absent]


def comments(result):
    """A gradebook comment: the status and reason, the findings counted, where the feedback is."""
    counts = result.get("counts", {})
    found = [f"{counts[v]} {v}{'s' if counts[v] > 1 else ''}" for v in ("fail", "error", "deviation")
             if counts.get(v)]
    return "; ".join(filter(None, [result["status"] + (f": {result['reason']}" if result.get("reason") else ""),
                                   ", ".join(found), f"feedback: feedback/{result['name']}.md"]))


def gradebook(results, absent, maximum, shown=None):
    """gradebook.csv: one row per submission (the grader's name for it where the roster has no id), then one per
    roster line with no submission (no score, 'no submission'). The score is the whole grade; the comments, which a
    course system shows students, are those of ``shown`` (what students may see, by name) where given."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=GRADEBOOK_FIELDS)
    writer.writeheader()
    for r in results.values():
        writer.writerow(dict(student_id=r.get("student_id") or r["name"], name=r.get("student_name", ""),
                             score=f"{r.get('score', 0):g}", out_of=f"{r.get('max_score', maximum):g}",
                             comments=comments((shown or {}).get(r["name"], r))))
    for s in absent:
        writer.writerow(dict(student_id=s.student_id, name=s.name, score="", out_of=f"{maximum:g}",
                             comments=NO_SUBMISSION))
    return buffer.getvalue()


def selected(submissions, only):
    """The names of the submissions ``only`` names (by the grader's name or by file name); CourseError for a name
    that is none of them."""
    names = {}
    for name, path in submissions:
        names[name] = names[path.name] = name
    unknown = [n for n in only if n not in names]
    if unknown:
        raise CourseError(f"--only {unknown[0]}: no submission of that name (the submissions: "
                          f"{', '.join(n for n, _ in submissions[:8])}{', ...' if len(submissions) > 8 else ''})")
    return {names[n] for n in only}


def unreadable(path):
    """What keeps the submission ``path`` (a file, or a folder and every file in it) from being read, or None."""
    for file in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
        try:
            with open(file, "rb") as f:
                f.read(1)
        except OSError as exc:
            return f"{file}: cannot be read ({exc.strerror or exc})"
    return None


def rubric_problem(path):
    """What keeps the rubric at ``path`` from being read as TOML, or None (no path: the default rubric)."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            tomllib.load(f)
    except OSError as exc:
        return f"--rubric {path}: cannot be read ({exc.strerror or exc})"
    except tomllib.TOMLDecodeError as exc:
        return f"--rubric {path}: not valid TOML ({exc})"
    return None
