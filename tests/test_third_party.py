"""Correct third-party implementations, found by discovery (no CONFORMANCE_ROLES): nothing may be flagged as a
failure or an error; their known differences from the paper are named deviations."""
from tests.suite import ROOT, run_suite, verdicts

ANNOTATED = ROOT / "tests" / "third_party" / "annotated_transformer.py"


def test_annotated_transformer_is_not_flagged_and_its_practice_form_is_named(tmp_path):
    code, output, report = run_suite(f"--impl={ANNOTATED}", "-n", "2", tmp_path=tmp_path)
    assert verdicts(report, "fail") == verdicts(report, "error") == set(), output
    assert code == 0, output
    causes = {cause for _, _, cause in verdicts(report, "deviation")}
    assert {"sublayer_connection.norm_order.pre_norm", "encoder.norm_order.extra_final_norm",
            "multi_head_attention.attention_dropout", "layer_norm.unbiased_std_plus_eps"} <= causes, causes
    assert {c for c, _, _ in verdicts(report, "pass")} >= {"attention", "multi_head_attention", "feed_forward",
                                                            "embedding", "positional_encoding", "subsequent_mask"}


def test_annotated_transformer_under_the_practice_contract_has_no_norm_order_deviation(tmp_path):
    code, output, report = run_suite(f"--impl={ANNOTATED}", "--contract=practice", "-m", "norm_order",
                                     tmp_path=tmp_path)
    assert code == 0, output
    assert not [c for c in report["checks"] if c["verdict"] in ("fail", "error", "deviation")], output
