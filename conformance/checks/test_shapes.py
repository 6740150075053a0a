"""Shapes (3.1-3.4): every component maps the canonical inputs to outputs of the paper's shapes."""
import pytest
from hypothesis import given

from conformance.contract import strategies
from conformance.contract.harness import MODULE_ROLES, Case, expected_shape, run
from conformance.contract.verdicts import Failure


@pytest.mark.parametrize("component", MODULE_ROLES + ("attention",))
@given(drawn=strategies.settings())
def test_output_shape(impl, device, component, drawn):
    """Output shapes: (batch, length, d_model) for the layers and stacks, (batch, Lq, d_v) per head for
    attention with Lq != Lk, (batch, length, vocab) for the generator."""
    case = Case(impl, device=device, **drawn)
    out, _ = run(case, component)
    expected = expected_shape(case, component)
    if tuple(out.shape) != expected:
        raise Failure(f"{component}.shape", f"output shape {expected} (§3; {case.cfg})", f"{tuple(out.shape)}")
    if out.dtype != case.dtype:
        raise Failure(f"{component}.dtype", f"the input dtype {case.dtype} to be kept", f"{out.dtype}")
