"""The §5.4 dropout-placement check (``conformance.checks.test_behaviour.check_dropout_placement``) on variants of the
reference: a slip in one layer of the assembled model is named by its module path; dropout written with
``F.dropout(x, p, self.training)``, with attention-weight dropout (``scaled_dot_product_attention(dropout_p=...)``) and
a dropout inside the feed-forward network gets no finding, while the same code dropping the residual sum does; the
probe leaves no hook and no torch function mode behind, whatever happens in the block."""
import pytest
import torch

from adapters.submission import load_implementation
from conformance.contract.harness import Case
from conformance.contract.interface import Config
from conformance.contract.probes import dropout_control
from conformance.checks.test_behaviour import PLACEMENT_ROLES, check_dropout_placement
from conformance.contract.verdicts import Failure
from tests import mutants as catalogue

LAYERS = catalogue.DECODER_LAYERS
FUNCTIONAL = (
    (catalogue.SUBLAYER, "return self.layer_norm(x + nn.functional.dropout(sublayer(x), self.dropout.p, "
                         "self.training))"),
    (catalogue.CALL_ATTENTION, "heads = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, "
                               "dropout_p=0.5 if self.training else 0.0)"),
    (catalogue.FFN, "return self.w_2(nn.functional.dropout(self.hidden(x), 0.5, self.training))"),
)


def variant(tmp_path, name, *edits):
    """The reference with ``edits``, written as ``<tmp_path>/<name>.py`` and loaded."""
    mutant = catalogue.Mutant(name, "behaviour", "model", name, edits, cause="model.variant")
    return load_implementation(str(catalogue.write(mutant, tmp_path)))


def case(impl, dtype=torch.float64):
    return Case(impl, Config(d_model=8, h=2, d_ff=24, dropout=0.5, N=2, src_vocab=11, tgt_vocab=13, max_len=12),
                batch=3, src_len=5, tgt_len=3, dtype=dtype, seed=7)


@pytest.mark.parametrize("component, path", [("model", "decoder.layers.1.cross_attention"),
                                             ("decoder", "layers.1.cross_attention")])
def test_a_slip_in_one_layer_is_named_by_its_path(tmp_path, component, path):
    """(The attention weights dropped too: the control makes that dropout drop nothing, so what the undropped
    sub-layer adds is not random.)"""
    impl = variant(tmp_path, "last_layer_cross_attention_undropped", *FUNCTIONAL[1:],
                   (LAYERS, LAYERS + "\n        self.layers[-1].after_cross_attention.dropout = nn.Identity()"))
    with pytest.raises(Failure) as failure:
        check_dropout_placement(case(impl), component)
    assert failure.value.cause == f"{component}.sublayer_dropout_missing"
    assert f"zeroing the parameters of {path!r} still changes the output of the layer " \
           f"{path.rsplit('.', 1)[0]!r}" in failure.value.observed
    check_dropout_placement(case(impl), "decoder_layer")  # a layer built alone has its dropout


@pytest.mark.parametrize("component", PLACEMENT_ROLES)
def test_functional_and_attention_weight_dropout_get_no_finding(tmp_path, component):
    check_dropout_placement(case(variant(tmp_path, "functional_dropout", *FUNCTIONAL), torch.float32), component)


def test_functional_dropout_on_the_residual_sum_is_named(tmp_path):
    edits = ((catalogue.SUBLAYER, "return self.layer_norm(nn.functional.dropout(x + sublayer(x), self.dropout.p, "
                                  "self.training))"),) + FUNCTIONAL[1:]
    impl = variant(tmp_path, "functional_dropout_on_the_sum", *edits)
    for component in ("sublayer_connection", "encoder_layer", "model"):
        with pytest.raises(Failure, match="drops the residual x as well") as failure:
            check_dropout_placement(case(impl), component)
        assert failure.value.cause == f"{component}.dropout_on_residual_sum"


class Failing(torch.nn.Module):
    def forward(self, x):
        torch.nn.functional.dropout(x, 0.5, True)
        raise RuntimeError("the block fails")


def test_the_control_leaves_nothing_behind():
    layer, x = Failing(), torch.randn(2, 3, 4)
    with pytest.raises(RuntimeError, match="the block fails"):
        with dropout_control([("", layer)], 4, drop=True):
            layer(x)
    assert not layer._forward_pre_hooks and not layer._forward_hooks
    assert torch._C._len_torch_function_stack() == 0
    assert not torch.equal(torch.nn.functional.dropout(x, 0.5, True), x)  # dropout is random again
    with dropout_control([("", torch.nn.Identity())], 4, drop=True) as control:
        kept = torch.nn.functional.dropout(x, 0.5, True)  # called outside the watched layers: drops nothing
    assert torch.equal(kept, x) and control.dropped == 0
