"""What a person reads at the end of a run (``conformance.console``): the verdict table within 120 columns, each
finding once with the checks it came from, and ``file:line`` of the role on a failure of its behaviour."""
import re

import pytest

from conformance import console
from conformance.contract.interface import ROLES
from conformance.options import FAMILIES
from conformance.contract.verdicts import DEVIATION, ERROR, FAIL, MISSING, PASS
from tests.suite import run_suite, seed
from tests.test_plugin import SCALE_BUG, write_mutant

VERDICTS = (PASS, FAIL, ERROR, DEVIATION, MISSING)


def record(component, check, verdict, cause="", message="", **extra):
    return dict(component=component, family="behaviour", check=check, verdict=verdict, cause=cause,
                message=message, nodeid=f"conformance/checks/test_behaviour.py::test_{check}[{component}]", **extra)


def test_the_verdict_table_fits_120_columns_and_keeps_every_verdict_in_its_cell():
    table = {role: {family: VERDICTS[(i + j) % len(VERDICTS)] for j, family in enumerate(FAMILIES)}
             for i, role in enumerate(ROLES)}
    tables = console.verdict_tables(table)
    assert len(tables) > 1  # every family with a 'deviation' somewhere is wider than 120 columns in one table
    read = {}
    for lines in tables:
        assert all(len(line) <= console.WIDTH for line in lines), lines
        header = [cell.strip() for cell in lines[0].strip("|").split("|")]
        assert header[0] == "component" and set(lines[1]) == {"|", "-"}
        for line in lines[2:]:
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            read.setdefault(cells[0], {}).update(zip(header[1:], cells[1:]))
    assert read == table
    assert [row[0] for row in (line.split("|")[1].strip() for line in tables[0][2:])] == [r[0] for r in ROLES]


def test_a_narrow_table_stays_one_table_without_empty_columns():
    tables = console.verdict_tables({"layer_norm": {"shapes": PASS, "layer_norm": FAIL}})
    assert tables == [["| component  | shapes | layer_norm |", "|------------|--------|------------|",
                       "| layer_norm | pass   | fail       |"]]


CRASH = "`super().__init__()` missing in Block.__init__ (at model.py:{} in Block.__init__)"


def test_one_crash_reached_from_many_checks_and_components_is_one_finding_listing_them():
    records = [record(c, k, ERROR, "error.super_init_missing", CRASH.format(12))
               for c in ("encoder", "encoder_layer") for k in ("output_shape", "parameter_count")]
    records.append(record("model", "output_shape", ERROR, "error.super_init_missing", CRASH.format(40)))
    found = console.distinct_findings(records)
    assert [sorted({r["component"] for r in group}) for _, group in found] == [["encoder", "encoder_layer"],
                                                                               ["model"]]
    lines = console.finding_lines(records)
    assert lines[0] == "ERROR     encoder_layer, encoder: output_shape, parameter_count"
    flat = " ".join(" ".join(lines).split())
    assert flat.count(CRASH.format(12)) == 1 and flat.count(CRASH.format(40)) == 1


def test_one_cause_at_one_place_is_one_finding_whatever_each_check_says_other_causes_or_places_are_not():
    scaled = "multi_head_attention.scale.sqrt_d_model: the paper requires 1/sqrt(d_k) = {}; observed {}"
    records = [record("multi_head_attention", "scores_scaled", FAIL, "multi_head_attention.scale.sqrt_d_model",
                      scaled.format(0.5, 0.25), where="m.py:40 in class MultiHeadAttention"),
               record("multi_head_attention", "agrees_with_reference", FAIL,
                      "multi_head_attention.scale.sqrt_d_model", scaled.format(0.35, 0.17),
                      where="m.py:40 in class MultiHeadAttention"),
               record("multi_head_attention", "softmax_rows", FAIL, "multi_head_attention.softmax_axis",
                      "multi_head_attention.softmax_axis: the paper requires rows; observed columns",
                      where="m.py:40 in class MultiHeadAttention"),
               record("attention", "scores_scaled", FAIL, "multi_head_attention.scale.sqrt_d_model",
                      scaled.format(0.5, 0.25), where="m.py:25 in scaled_dot_product_attention")]
    records.append(record("multi_head_attention", "weights_sum_to_one", FAIL, "multi_head_attention.scale.sqrt_d_model",
                          "multi_head_attention.scale.sqrt_d_model: the paper requires rows summing to 1; observed "
                          "a temperature of 2", where="m.py:40 in class MultiHeadAttention"))
    found = console.distinct_findings(records)
    assert sorted(sorted(r["check"] for r in group) for _, group in found) == [
        ["agrees_with_reference", "scores_scaled", "weights_sum_to_one"], ["scores_scaled"], ["softmax_rows"]]
    text = "\n".join(console.finding_lines(records))
    assert "at m.py:40 in class MultiHeadAttention" in text and "at m.py:25 in scaled_dot_product_attention" in text


def test_every_line_of_a_finding_fits_120_columns_but_a_word_longer_than_that():
    path = "/very/long/" + "folder/" * 20 + "model.py:12"
    checks = [f"check_number_{i}_with_a_long_name" for i in range(12)]
    records = [record("encoder", k, FAIL, "encoder.output_shape",
                      "encoder.output_shape: the paper requires " + "a long requirement " * 30 + f"(at {path})",
                      where=f"{path} in class Encoder") for k in checks]
    lines = console.finding_lines(records)
    assert all(len(line) <= console.WIDTH for line in lines if path not in line), lines
    assert sum(line.startswith("FAIL") for line in lines) == 1
    assert all(k in " ".join(lines) for k in checks)


def finding_text(output):
    """The conformance summary of a run's output, with its reproductions left out (code, printed as it runs)."""
    summary = output.split(" conformance of ", 1)[1].split("short test summary info", 1)[0]
    lines, in_reproduction = [], False
    for line in summary.splitlines():
        in_reproduction = in_reproduction and line.startswith(console.INDENT + "  ") or line.endswith("Reproduce:")
        lines += [] if in_reproduction else [line]
    return lines


def test_a_seed_prints_a_table_within_120_columns_and_each_finding_once(tmp_path):
    code, output, report = run_suite(f"--impl={seed('000_4d4ba667854a40e3')}", "-n", "0", tmp_path=tmp_path)
    assert report is not None, output[-3000:]
    lines = finding_text(output)
    table = [line for line in lines if line.startswith("|")]
    assert len(table) >= 2 * (len(ROLES) + 2) and all(len(line) <= console.WIDTH for line in table)
    assert all(len(line) <= console.WIDTH for line in lines if not re.search(r"\S{40}", line))
    assert "= FAILURES =" not in output  # pytest's section gives each finding again for each check
    flat = " ".join(" ".join(lines).split())
    failing = [r for r in report["checks"] if r["verdict"] != PASS]
    printed = {r["message"].splitlines()[0] for r in failing if " ".join(r["message"].split("\n")[0].split()) in flat}
    assert all(flat.count(" ".join(message.split())) == 1 for message in printed)
    assert len(printed) >= len(console.distinct_findings(failing)) > 10


def test_a_behaviour_failure_names_the_file_and_line_of_the_class_playing_the_role(tmp_path):
    path = write_mutant(tmp_path, *SCALE_BUG)
    code, output, report = run_suite(f"--impl={path}", "-k", "agrees_with_reference and attention", "-n", "0",
                                     tmp_path=tmp_path)
    assert code == 1, output[-3000:]
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.startswith("class MultiHeadAttention("))
    failed = {r["component"]: r for r in report["checks"] if r["verdict"] == FAIL}
    assert failed["multi_head_attention"]["family"] == "behaviour"
    assert failed["multi_head_attention"]["where"] == f"{path}:{line} in class MultiHeadAttention"
    assert f"at {path}:{line} in class MultiHeadAttention" in " ".join(output.split())  # (wrapped where it is long)


@pytest.mark.parametrize("content", ["[[expected]]\ncomponent = 'attention'\n", "not toml at all ["])
def test_an_expected_file_that_cannot_be_read_is_a_usage_error(tmp_path, content):
    expected = tmp_path / "expected.toml"
    expected.write_text(content)
    code, output, _ = run_suite("--impl=reference", f"--expected={expected}", "-k", "output_shape", "-n", "0",
                                tmp_path=tmp_path)
    assert code == 4 and f"--expected={expected}" in output, output[-2000:]
