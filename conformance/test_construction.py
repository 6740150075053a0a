"""Construction: the calls a submission makes to its own classes pass each argument to the parameter it is meant
for (read statically by ``adapters.calls``: a swap such as ``DecoderBlock(d_model, attn, cross, ff, dropout)``
against ``(features, self_attn, cross_attn, dropout, feed_forward)``, or ``LayerNorm(features)`` into ``eps``)."""
import pytest

from conformance.harness import MODULE_ROLES
from conformance.interface import MissingRole
from conformance.verdicts import Failure


@pytest.mark.parametrize("component", MODULE_ROLES)
def test_constructor_calls_pass_arguments_in_order(impl, component):
    """Every argument of the calls made in the component's own code lands in the parameter its name stands for."""
    found = impl.misplaced.get(component, [])
    if found:
        raise Failure(f"{component}.arguments_in_wrong_order", "each argument passed to the parameter it is meant "
                      "for (the called constructor's signature)", "; ".join(found))
    if not impl.has(component):
        raise MissingRole(f"{impl.spec} has no {component!r}")
