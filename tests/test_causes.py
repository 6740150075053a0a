"""The catalogue of causes (``conformance/diagnosis/causes.py``) against the code and the tests: every cause id the checker's
code writes is listed, an unlisted one at run time is the checker's internal error, every listed one is reached by
a mutant, an answer key or a test, and ``docs/causes.md`` is the catalogue as ``python -m conformance causes
--markdown`` prints it."""
import ast
import itertools
import re
import subprocess
import sys

import pytest

from conformance.diagnosis import causes, variants
from conformance.diagnosis import classify as diagnosis
from conformance.grading.judge import Raised
from conformance.contract.interface import ROLES, Config
from conformance.checks.test_embeddings import SCALES
from conformance.checks.test_norm_order import ACCEPTED, PLACEMENTS
from conformance.checks.test_parameters import known_variants
from conformance.checks.test_positional_encoding import known_tables
from conformance.checks.test_softmax import SCALE_MISTAKES
from conformance.contract.verdicts import Failure
from tests.answer_keys import read_key
from tests.mutants import MUTANTS, ROOT

NAMESPACES = {"error", "adapter", "grading", "role", "device", *ROLES}
"""The first part of a cause id: a role, or what kind of trouble it is."""
PER_COMPONENT = {"component", "role"}
"""The placeholders a check writes in front of an id built per component (``f"{component}.shape"``)."""
SEGMENT = r"(?:\{[^}]+\}|[A-Za-z_0-9+]+)"
CAUSE_SHAPE = re.compile(rf"{SEGMENT}(?:\.{SEGMENT})+")


def template(node, constants):
    """The text ``node`` builds, its formatted parts as ``{name}`` (a module constant given by its value; a choice
    between two literals, both), as a list of alternatives; [] when it builds no string."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else []
    if isinstance(node, ast.Name) and node.id in constants:
        return [constants[node.id]]
    if isinstance(node, ast.IfExp):
        return template(node.body, constants) + template(node.orelse, constants)
    if isinstance(node, ast.JoinedStr):
        parts = [template(v.value, constants) or [f"{{{ast.unparse(v.value)}}}"] if isinstance(v, ast.FormattedValue)
                 else [v.value] for v in node.values]
        return ["".join(choice) for choice in itertools.product(*parts)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = template(node.left, constants), template(node.right, constants)
        if not left and not right:
            return []
        return [a + b for a in left or ["{*}"] for b in right or ["{*}"]]
    return []


def written_ids(path):
    """``[(line, id template)]`` of the cause ids ``path`` writes: the strings shaped like ``namespace.what`` whose
    first part is a role, a kind of trouble or a component placeholder."""
    tree = ast.parse(path.read_text())
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)
                 and isinstance(n.value.value, str)}
    inner = {id(part) for n in ast.walk(tree) if isinstance(n, (ast.BinOp, ast.JoinedStr, ast.IfExp))
             for part in ast.walk(n) if part is not n}
    found = []
    for node in ast.walk(tree):
        for text in ([] if id(node) in inner else template(node, constants)):
            head = text.split(".", 1)[0]
            if CAUSE_SHAPE.fullmatch(text) and (head in NAMESPACES or head.strip("{}") in PER_COMPONENT):
                found.append((node.lineno, text))
    return found


def code_files():
    return sorted([*ROOT.glob("conformance/**/*.py"), *ROOT.glob("adapters/*.py")])


def sample_ids(entry):
    """Ids ``entry`` lists, one for each value its placeholders' simplest forms take (``{component}`` as every
    role)."""
    values = {"component": ROLES, "role": ROLES, "exception": ["RuntimeError"],
              "variants": causes.PARAMETER_VARIANTS, "misplacements": causes.MISPLACEMENTS,
              "deviations": causes.KNOWN_DEVIATIONS, "bugs": causes.KNOWN_BUGS}
    parts = re.split(r"\{(\w+)\}", entry.pattern)
    return ["".join(choice) for choice in itertools.product(*(values[p] if i % 2 else [p]
                                                              for i, p in enumerate(parts)))]


def listed(text):
    """Whether the template ``text`` (placeholders of its own in braces) can be an id the catalogue lists: its
    component placeholder stands for any role, any other for any part of an id."""
    pattern = re.compile("".join(
        f"(?:{'|'.join(ROLES)})" if i % 2 and part in PER_COMPONENT else r"[\w+]+" if i % 2 else re.escape(part)
        for i, part in enumerate(re.split(r"\{([^}]*)\}", text))))
    return any(pattern.fullmatch(sample) for entry in causes.CATALOGUE for sample in sample_ids(entry))


# -- every id written is listed ---------------------------------------------------------------------------------
def test_every_cause_the_code_writes_is_listed():
    written = [(path.relative_to(ROOT), line, text) for path in code_files() for line, text in written_ids(path)]
    assert len(written) > 150, "the scan for cause ids found too few: is it still reading the raise sites?"
    unlisted = [f"{path}:{line}: {text}" for path, line, text in written if not listed(text)]
    assert unlisted == [], "cause ids written but not in conformance/diagnosis/causes.py:\n" + "\n".join(unlisted)


def test_the_scan_reads_each_form_a_cause_is_written_in(tmp_path):
    source = tmp_path / "check.py"
    source.write_text('ROLE = "layer_norm"\n'
                      'def check(component, cause, ok, bugs):\n'
                      '    raise Failure(f"{ROLE}.eps_wrong", "", "")\n'
                      '    raise Failure(f"{component}.{\'mask_ignored\' if ok else \'future_visible\'}", "", "")\n'
                      '    raise Failure(f"{component}." + "+".join(bugs), "", "")\n'
                      '    raise Failure("subsequent_mask.triu" if ok else f"{component}.parameters.{cause}", "", "")\n'
                      '    return f"{name}.weight", "self.training", "conformance.toml"\n')
    assert sorted(text for _, text in written_ids(source)) == [
        "layer_norm.eps_wrong", "subsequent_mask.triu", "{component}.future_visible", "{component}.mask_ignored",
        "{component}.parameters.{cause}", "{component}.{*}"]
    assert not listed("layer_norm.eps_written_nowhere") and not listed("{component}.made_up")
    assert listed("{component}.scale.{mistake}") and listed("{component}.{*}")


@pytest.mark.parametrize("names, listed_as", [
    (list(SCALES), "{component}.%s"),
    (list(SCALE_MISTAKES) + ["sqrt_key_length", "wrong"], "{component}.scale.%s"),
    (list(known_tables(8, 4)), "positional_encoding.%s"),
    (["eps_is_d_model", "eps_too_large"], "layer_norm.%s"),
    (["inverted", "triu", "excludes_diagonal", "includes_next_position"], "subsequent_mask.%s"),
    (["no_gradient", "zero_gradient", "nonfinite_gradient"], "{component}.parameters.%s"),
    (["arguments_in_wrong_order", "forward_returns_nothing", "attribute_never_assigned", "sub_block_call_misfits",
      "name_never_defined"], "{component}.%s"),
], ids=["embedding scales", "attention scales", "positional tables", "layer norm eps", "subsequent masks",
        "gradients", "readings"])
def test_the_names_a_check_picks_an_id_from_are_listed(names, listed_as):
    """Where a check builds an id from a table of names (the scan sees ``{component}.scale.{mistake}``), each name
    has its entry."""
    entries = {n: causes.describe((listed_as % n).replace("{component}", "model")) for n in names}
    assert [n for n, entry in entries.items() if entry is None or entry.pattern != listed_as % n] == []


def test_the_catalogues_names_are_the_checks_names():
    assert causes.ROLE_NAMES == ROLES
    cfg = Config(d_model=8, h=2, d_ff=16, N=2, src_vocab=11, tgt_vocab=13)
    read = {v[0] for role, contract in itertools.product(ROLES, ("paper", "practice"))
            for v in known_variants(role, cfg, contract)} | {v[0] for v in known_variants("model", Config(
                d_model=8, h=2, d_ff=16, N=2, src_vocab=11, tgt_vocab=11), "paper")}
    assert set(causes.PARAMETER_VARIANTS) == read
    assert set(causes.MISPLACEMENTS) == {p[0] for p in PLACEMENTS} - set(ACCEPTED.values())
    assert causes.KNOWN_DEVIATIONS == tuple(v.name for v in variants.VARIANTS if v.deviation)
    assert causes.KNOWN_BUGS == tuple(v.name for v in variants.VARIANTS if not v.deviation)


def test_each_entry_says_its_section_and_meaning():
    patterns = [entry.pattern for entry in causes.CATALOGUE]
    assert len(patterns) == len(set(patterns))
    for entry in causes.CATALOGUE:
        assert re.fullmatch(r"(§\d+(\.\d+)*)?", entry.section), entry
        assert entry.meaning and not entry.meaning[0].isupper() and not entry.meaning.endswith("."), entry


def test_describe_gives_the_most_specific_entry():
    assert causes.describe("multi_head_attention.scale.sqrt_d_model").pattern == "{component}.scale.sqrt_d_model"
    assert causes.describe("error.shape_mismatch").pattern == "error.shape_mismatch"
    assert causes.describe("error.KeyError").pattern == "error.{exception}"
    assert causes.describe("decoder.disagrees_in_multi_head_attention").pattern == "{component}.disagrees_in_{role}"
    assert causes.describe("model.parameters.untied_embeddings+extra_final_norm").pattern == \
        "{component}.parameters.{variants}"
    assert causes.describe("positional_encoding.dropout_missing").pattern == "positional_encoding.dropout_missing"
    assert causes.describe("decoder.heads_merged_without_transpose").pattern == \
        "{component}.heads_merged_without_transpose"
    assert causes.describe("attention.made_up") is None and not causes.is_listed("no_such_role.shape")
    assert causes.is_listed("encoder_layer.norm_order.norm_missing+residual_missing")


# -- an unlisted id at run time ---------------------------------------------------------------------------------
def raised(exception):
    try:
        raise exception
    except Exception as exc:  # noqa: BLE001
        return pytest.ExceptionInfo.from_exception(exc)


def test_an_unlisted_cause_is_the_checkers_error_naming_it():
    with pytest.raises(causes.UnlistedCause, match="'attention.made_up_cause'.*conformance/diagnosis/causes.py"):
        diagnosis.classify(raised(Failure("attention.made_up_cause", "one thing", "another")), "attention")
    listed = raised(Failure("attention.mask_ignored", "one thing", "another"))
    assert diagnosis.classify(listed, "attention")[:2] == ("fail", "attention.mask_ignored")


def test_a_submissions_process_cannot_report_a_cause_the_checker_does_not_give():
    reported = Raised("fail", "attention.mask_ignored", "seen")
    assert (reported.verdict, reported.cause) == ("fail", "attention.mask_ignored")
    forged = Raised("fail", "attention.all_is_well", "trust me")
    assert (forged.verdict, forged.cause) == ("error", "grading.unreadable_answer")
    assert "attention.all_is_well" in forged.message


# -- every listed id is reached ---------------------------------------------------------------------------------
def keyed_ids(enclosing=True):
    """The causes the answer keys name: findings' causes and accepted causes, known false findings; with
    ``enclosing``, the same causes as the enclosing roles a finding names (``also``) would report them."""
    for path in sorted([*ROOT.glob("tests/seed_keys/*.toml"), *ROOT.glob("tests/styles/*.toml")]):
        key = read_key(path)
        yield from (cause for finding in key.findings
                    for cause in (finding.causes if enclosing else (finding.cause, *finding.accepts)))
        yield from (cause for _, cause, _ in key.false_findings)


def asserted_ids():
    """The strings of ``tests/test_*.py`` that are cause ids the catalogue lists, written in an ``assert`` or in
    the parameters of a test (its decorators, and the module's tables they name); not this file's, whose ids test
    the catalogue, not the checks."""
    for path in sorted(set(ROOT.glob("tests/test_*.py")) - {ROOT / "tests" / "test_causes.py"}):
        tree = ast.parse(path.read_text())
        decorators = [d for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for d in n.decorator_list]
        named = {n.id for d in decorators for n in ast.walk(d) if isinstance(n, ast.Name)}
        tables = [n.value for n in tree.body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id in named for t in n.targets)]
        places = [n for n in ast.walk(tree) if isinstance(n, ast.Assert)] + decorators + tables
        yield from (n.value for place in places for n in ast.walk(place)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str) and causes.is_listed(n.value))


def test_every_cause_a_mutant_or_key_names_is_listed():
    named = {m.cause for m in MUTANTS if m.cause} | set(keyed_ids(enclosing=False))
    assert sorted(cause for cause in named if not causes.is_listed(cause)) == []


def test_every_listed_cause_is_reached_by_a_mutant_key_or_test():
    reached = {m.cause for m in MUTANTS if m.cause} | set(keyed_ids()) | set(asserted_ids())
    entries = {causes.describe(cause).pattern for cause in reached if causes.is_listed(cause)}
    unreached = [entry.pattern for entry in causes.CATALOGUE if entry.pattern not in entries]
    assert unreached == [], f"{len(unreached)} listed causes no mutant, answer key or test reaches"


# -- docs/causes.md ---------------------------------------------------------------------------------------------
def test_docs_causes_md_is_the_catalogue_as_printed():
    printed = subprocess.run([sys.executable, "-m", "conformance", "causes", "--markdown"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    assert printed == causes.markdown()
    assert (ROOT / "docs" / "causes.md").read_text() == printed, \
        "docs/causes.md is stale: python -m conformance causes --markdown > docs/causes.md"
    assert all(f"`{entry.pattern}`" in printed for entry in causes.CATALOGUE)
