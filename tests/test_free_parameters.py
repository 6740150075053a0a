"""What the paper leaves free is no disagreement (issue 23): a LayerNorm's eps below the limit the eps check accepts
(``conformance.contract.weights.EPS_LIMIT``) is given to the reference before the two are compared, so a LayerNorm built
with eps = 1e-6 agrees with the reference, while one whose eps the eps check rejects still disagrees."""
import pytest

from tests.suite import run_on_source

SOURCE = '''
import torch.nn as nn

CONFORMANCE_ROLES = {{"layer_norm": lambda d_model: nn.LayerNorm(d_model, eps={eps})}}
'''


@pytest.mark.parametrize("eps, agrees", [(1e-6, True), (5e-2, False)])
def test_layer_norm_eps_left_free_by_the_paper_agrees_with_the_reference(tmp_path, eps, agrees):
    code, output, report, records = run_on_source(tmp_path, "norm.py", SOURCE.format(eps=eps), "-k",
                                                  "agrees_with_reference")
    verdict = records[("layer_norm", "agrees_with_reference")]["verdict"]
    assert (verdict == "pass") == agrees, output
