"""Construction: what reading a submission's own code shows, whether or not the code runs (``impl.read``, from
``adapters.calls`` and ``adapters.lint``). A crash in one block hides everything behind it from the checks that
run code; these still see it: calls passing arguments in the wrong order (``DecoderBlock(d_model, attn, cross, ff,
dropout)`` against ``(features, self_attn, cross_attn, dropout, feed_forward)``, ``attention(query, key, value)``
against ``(key, query, value)``, ``LayerNorm(features)`` into ``eps``), a ``forward`` that returns nothing, an
attribute read that nothing assigns, a sub-block built or called with arguments its ``__init__`` or ``forward``
cannot take, a name that nothing defines."""
import pytest

from conformance.contract.harness import MODULE_ROLES
from conformance.contract.interface import MissingRole
from conformance.contract.verdicts import Failure


def check_reading(impl, component, cause, requirement):
    builder = impl.roles.get(component)
    if getattr(builder, "never_compiled", False):
        builder()  # the code of a class whose cell does not compile cannot be read: its error, as every check says
    found = impl.read.get(component, {}).get(cause, [])
    if found:
        raise Failure(f"{component}.{cause}", requirement, "; ".join(found))
    if not impl.has(component):
        raise MissingRole(f"{impl.spec} has no {component!r}")


@pytest.mark.parametrize("component", MODULE_ROLES)
def test_calls_pass_arguments_in_order(impl, component):
    """Every argument of the calls made in the component's own code lands in the parameter its name stands for."""
    check_reading(impl, component, "arguments_in_wrong_order",
                  "each argument passed to the parameter it is meant for (the called signature)")


@pytest.mark.parametrize("component", MODULE_ROLES)
def test_forward_returns_its_output(impl, component):
    """The component's ``forward`` returns a value (a block's output is what the next one receives, §3.1)."""
    check_reading(impl, component, "forward_returns_nothing",
                  "forward returns the block's output (§3.1: each layer's output feeds the next)")


@pytest.mark.parametrize("component", MODULE_ROLES)
def test_attributes_read_are_assigned(impl, component):
    """Every ``self.name`` the component's methods read is assigned somewhere (in ``__init__``, as a buffer, ...)."""
    check_reading(impl, component, "attribute_never_assigned",
                  "every attribute a method reads assigned first (usually in __init__)")


@pytest.mark.parametrize("component", MODULE_ROLES)
def test_sub_block_calls_fit_their_signatures(impl, component):
    """Each sub-block the component builds, ``Block(...)``, binds to that block's ``__init__``, and each call
    ``self.block(...)`` binds to its ``forward``."""
    check_reading(impl, component, "sub_block_call_misfits",
                  "each sub-block built with the arguments its __init__ takes and called with the inputs its forward "
                  "takes (§3.2.2: attention of queries over keys and values)")


@pytest.mark.parametrize("component", MODULE_ROLES)
def test_names_read_are_defined(impl, component):
    """Every name the component's methods read (and, for the model, the functions building it) is defined."""
    check_reading(impl, component, "name_never_defined",
                  "every name a method or factory reads defined: a parameter, a local, or a name of the module")
