"""The pytest plugin as users drive it: --impl forms, missing roles, errors, --strict, expected results,
--pyargs from another directory, pytest-xdist, the JSON report."""
import textwrap

from tests.suite import ROOT, run_suite, verdicts

SCALE_BUG = ("/ math.sqrt(d_k)", "/ math.sqrt(d_k * 4)")  # scores scaled by 1 / (2 sqrt(d_k))


def write_mutant(tmp_path, old, new, name="mutant.py"):
    source = (ROOT / "reference" / "transformer.py").read_text()
    assert source.count(old) == 1
    path = tmp_path / name
    path.write_text(source.replace(old, new))
    return path


def test_reference_passes_every_check(tmp_path):
    code, output, report = run_suite("--impl=reference", tmp_path=tmp_path)
    assert code == 0, output
    assert {c["verdict"] for c in report["checks"]} == {"pass"}, output
    assert "| component" in output and "multi_head_attention" in output  # the verdict table


def test_torch_passes_with_its_differences_from_the_paper_named_as_deviations(tmp_path):
    code, output, report = run_suite("--impl=torch", "-n", "2", tmp_path=tmp_path)
    assert code == 0, output
    assert verdicts(report, "fail") == verdicts(report, "error") == set()
    causes = {cause for _, _, cause in verdicts(report, "deviation")}
    assert causes == {"encoder.extra_final_norm", "decoder.extra_final_norm", "encoder.parameters.extra_final_norm",
                      "decoder.parameters.extra_final_norm", "encoder.norm_order.extra_final_norm",
                      "decoder.norm_order.extra_final_norm", "multi_head_attention.attention_dropout"}, output
    assert {c for c, _, _ in verdicts(report, "pass")} >= {"attention", "multi_head_attention", "layer_norm",
                                                            "encoder_layer", "decoder_layer", "subsequent_mask"}
    strict_code, strict_output, _ = run_suite("--impl=torch", "--strict", "-k", "stack_final_norm",
                                              tmp_path=tmp_path)
    assert strict_code == 1, strict_output


def test_a_module_with_a_subset_of_roles_reports_the_rest_missing(tmp_path):
    (tmp_path / "only_norm.py").write_text("import torch.nn as nn\nCONFORMANCE_ROLES = "
                                           "{'layer_norm': lambda d_model: nn.LayerNorm(d_model)}\n")
    code, output, report = run_suite(f"--impl={tmp_path / 'only_norm.py'}", tmp_path=tmp_path)
    assert code == 0, output
    checks = report["checks"]
    in_place = [c for c in checks if c["family"] == "in_place"]  # (read inside a model's forward pass: none here)
    assert in_place and all((c["verdict"], c["cause"]) == ("missing", "role.missing") for c in in_place)
    assert all(c["verdict"] == "pass" for c in checks if c["component"] == "layer_norm" and c not in in_place)
    assert all(c["verdict"] == "missing" for c in checks if c["component"] != "layer_norm")


def test_a_crash_in_the_implementation_is_an_error_with_file_and_line(tmp_path):
    path = write_mutant(tmp_path, "        self.w_2 = nn.Linear(d_ff, d_model)\n",
                        "        self.w_2 = nn.Linear(d_ff, d_model)\n        raise RuntimeError('boom')\n")
    code, output, report = run_suite(f"--impl={path}", "-k", "output_shape", tmp_path=tmp_path)
    assert code == 1
    errors = [c for c in report["checks"] if c["verdict"] == "error"]
    assert {c["component"] for c in errors} >= {"feed_forward", "encoder_layer", "model"}
    assert all("RuntimeError: boom" in c["message"] and f"{path}:" in c["message"] for c in errors)


def test_a_failure_prints_a_reproduction(tmp_path):
    path = write_mutant(tmp_path, *SCALE_BUG)
    code, output, report = run_suite(f"--impl={path}", "-k", "scores_scaled", tmp_path=tmp_path)
    assert code == 1
    failing = verdicts(report, "fail")
    assert {c for c, _, _ in failing} == {"attention", "multi_head_attention"}
    assert "Reproduce:" in output and "case.build('multi_head_attention')" in output


def test_expected_results_accept_listed_findings_and_warn_on_stale_entries(tmp_path):
    path = write_mutant(tmp_path, *SCALE_BUG)
    expected = tmp_path / "expected.toml"
    expected.write_text(textwrap.dedent("""
        [[expected]]
        component = "attention"
        check = "scores_scaled_by_inverse_sqrt_d_k"
        verdict = "fail"
        reason = "known: scaled by 2 sqrt(d_k)"

        [[expected]]
        component = "multi_head_attention"
        check = "scores_scaled_by_inverse_sqrt_d_k"
        verdict = "fail"

        [[expected]]
        component = "layer_norm"
        check = "output_shape"
        verdict = "fail"
    """))
    code, output, _ = run_suite(f"--impl={path}", "-k", "scores_scaled or shape", f"--expected={expected}",
                                tmp_path=tmp_path)
    assert code == 0, output
    assert "layer_norm/output_shape" in output and "matches no finding" in output
    code, output, _ = run_suite(f"--impl={path}", "-k", "scores_scaled", tmp_path=tmp_path)
    assert code == 1


def test_environment_variable_selects_the_implementation(tmp_path):
    code, output, report = run_suite("-k", "output_shape", env={"CONFORMANCE_IMPL": "torch"}, tmp_path=tmp_path)
    assert report["implementation"] == "torch"
    assert ("embedding", "output_shape", "role.missing") in verdicts(report, "missing")


def test_pyargs_from_another_directory_with_xdist(tmp_path):
    code, output, report = run_suite("--pyargs", "conformance", "--impl=reference", "-n", "2", "-k", "shape",
                                     cwd=tmp_path, tmp_path=tmp_path)
    assert code == 0, output
    assert len(report["checks"]) >= 13 and {c["verdict"] for c in report["checks"]} == {"pass"}


def test_components_are_markers(tmp_path):
    code, output, report = run_suite("-m", "layer_norm", tmp_path=tmp_path)
    assert code == 0, output
    assert {c["component"] for c in report["checks"]} == {"layer_norm"}


def test_each_checks_digest_is_hypothesis_own():
    """The seed of a check's examples is hypothesis's digest of it, which the plugin computes once a check and an
    item and reads each check's source once for: the same digest hypothesis computes itself, for every check and
    item key, so the examples drawn are hypothesis's own."""
    import importlib
    import pkgutil

    from hypothesis.internal.reflection import function_digest as hypothesis_digest

    import conformance.checks
    from conformance.hypothesis_setup import function_digest
    checks = [check for info in pkgutil.iter_modules(conformance.checks.__path__)
              for name, check in vars(importlib.import_module(f"conformance.checks.{info.name}")).items()
              if name.startswith("test_") and callable(check)]
    assert len(checks) > 50
    for check in checks:
        for key in (b"[model]", b"[attention]"):
            check._hypothesis_internal_add_digest = key
            assert function_digest(check) == hypothesis_digest(check), check.__name__
        del check._hypothesis_internal_add_digest
