"""A developer's tool: plant one known bug at a time in the public checkouts of the ignored scratch folder and see
whether the checker names it. The mutants of ``tests/mutants.py`` are edits of the reference; these are the same
kinds of mistakes made in other people's styles, where discovery and the author's own calls decide what is seen.

    python benchmarks/mutate_public.py [--scratch scratch] [--only NAME ...] [--sites 1] [--out DIR]

Each operator rewrites one line (a regular expression over the line, at most ``--sites`` lines per checkout and
operator, in ``.py`` files and notebooks' code cells). Each mutant is a copy of the checkout with that one line
changed, checked as a whole folder, and compared with the checkout as it is: ``named`` when a fail or error the
checkout did not have carries a cause the operator expects (``EXPECTED``), ``other`` when only other new fail or
error records came, ``unseen`` when nothing new did (the line may be dead code: read it). Nothing in CI or the
tests needs it.
"""
import argparse
import collections
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.score_public import flagged, subjects  # noqa: E402
from conformance.reports import report  # noqa: E402


def sqrt_of(name):
    """A pattern for ``math.sqrt(name)`` (``np``, ``torch``, a ``float(...)`` inside)."""
    return r"(?:math|np|numpy|torch)\.sqrt\(\s*(?:float\()?\s*" + name + r"\s*\)?\s*\)"


HEAD_WIDTH = r"[\w.]*(?:d_k|dk|d_head|head_dim|d_key|key_dim|depth|k_dim|dim_k)[\w.]*"
MODEL_WIDTH = r"[\w.]*(?:d_model|model_dim|d_embed|emb\w*|hidden\w*)"
OPERATORS = {
    "attention_unscaled": (
        r"\s*/\s*(?:" + sqrt_of(HEAD_WIDTH) + r"|\(?\s*" + HEAD_WIDTH + r"\s*\*\*\s*0?\.5\s*\)?"
        r"|self\.(?:scale|scaling|temperature|sqrt_\w+)\b)", "", r"attention\.|scale|temperature"),
    "softmax_over_queries": (r"(softmax\([^()]*(?:\([^()]*\))?[^()]*dim\s*=\s*)-1\b", r"\g<1>-2",
                             r"attention\.|softmax"),
    "embedding_unscaled": (r"\s*\*\s*" + sqrt_of(MODEL_WIDTH), "", r"embedding\.|scal"),
    "sin_cos_swapped": (r"(\[\s*:\s*,\s*0\s*::\s*2\s*\]\s*=\s*torch\.)sin\b", r"\g<1>cos", r"positional_encoding\."),
    "wrong_base": (r"\b10000(\.0)?\b", "1000", r"positional_encoding\."),
    "mask_fill_inverted": (r"(masked_fill\(\s*[\w.]+\s*==\s*)0\b", r"\g<1>1", r"mask|attention\."),
    "causal_includes_next": (r"(triu\([^()]*(?:\([^()]*\))*[^()]*diagonal\s*=\s*)1\b", r"\g<1>2",
                             r"subsequent_mask|future|mask"),
}
"""name -> (pattern, replacement, regular expression a named cause matches)."""


def sites(folder, pattern):
    """``[(file, line index, new line)]`` where ``pattern`` rewrites a line of code (not a comment)."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.suffix not in (".py", ".ipynb") or not path.is_file():
            continue
        lines = path.read_text(errors="replace").splitlines(keepends=True)
        for i, line in enumerate(lines):
            code = line.split("#", 1)[0] if path.suffix == ".py" else line
            new = re.sub(pattern[0], pattern[1], code, count=1)
            if new != code:
                found.append((path, i, new + line[len(code):]))
    return found


def checked(folder, out):
    """The fail/error records of the checker's report on ``folder``, or None when no report came out."""
    written = report(folder, out)
    return None if written is None else {r[:3]: r[3] for r in flagged(json.loads(Path(written).read_text()))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scratch", default=str(ROOT / "scratch"))
    parser.add_argument("--only", nargs="*", default=())
    parser.add_argument("--operators", nargs="*", default=list(OPERATORS))
    parser.add_argument("--sites", type=int, default=1, help="lines rewritten per checkout and operator")
    parser.add_argument("--out", default=None, help="keep the reports here")
    args = parser.parse_args(argv)
    totals = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="mutate-") as tmp:
        out = Path(args.out or tmp)
        for label, path, _ in subjects(args.scratch, set(args.only), ()):
            if not path.is_dir():
                continue
            base = checked(path, out / label / "as_is")
            if base is None:
                print(f"{label}: no report as it is")
                continue
            for name in args.operators:
                for file, index, new in sites(path, OPERATORS[name])[:args.sites]:
                    copy = Path(tmp) / "copy" / label
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.copytree(path, copy)
                    target = copy / file.relative_to(path)
                    lines = target.read_text(errors="replace").splitlines(keepends=True)
                    lines[index] = new
                    target.write_text("".join(lines))
                    found = checked(copy, out / label / f"{name}-{index}")
                    new_records = {k: v for k, v in (found or {}).items() if k not in base}
                    named = [k for k in new_records if re.search(OPERATORS[name][2], k[2])]
                    outcome = "no report" if found is None else "named" if named else "other" if new_records \
                        else "unseen"
                    totals[outcome] += 1
                    print(f"{label}: {name} at {file.relative_to(path)}:{index + 1}: {outcome}"
                          + "".join(f"\n    {c}/{k}: {cause}: {new_records[(c, k, cause)][:160]}"
                                    for c, k, cause in (named or new_records)))
    print(", ".join(f"{k} {v}" for k, v in totals.items()))


if __name__ == "__main__":
    main()
