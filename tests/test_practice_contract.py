"""The practice form of the Annotated Transformer (style study ``annotated_practice``: pre-norm with a final norm per
stack) under the practice contract (``--contract=practice``): its norm placements are then no deviation. What it is
under the paper's contract is held to its answer key by ``tests/test_answer_keys.py``."""
from tests import studies
from tests.suite import run_suite


def test_practice_form_under_the_practice_contract_has_no_norm_order_deviation(tmp_path):
    impl = studies.materialise("annotated_practice", tmp_path)
    code, output, report = run_suite(f"--impl={impl}", "--contract=practice", "-m", "norm_order", tmp_path=tmp_path)
    assert code == 0, output
    assert not [c for c in report["checks"] if c["verdict"] in ("fail", "error", "deviation")], output
    assert {c["component"] for c in report["checks"] if c["verdict"] == "pass"} >= {
        "sublayer_connection", "encoder_layer", "decoder_layer", "encoder", "decoder"}, output
