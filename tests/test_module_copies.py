"""Deep copies of modules (``adapters.module_copies``): the same objects ``copy.deepcopy``'s generic path makes."""
import copy

import pytest
import torch
import torch.nn as nn

from adapters import module_copies
from reference import transformer as ref


def generic_deepcopy(module):
    """``copy.deepcopy`` as it is without the installed ``__deepcopy__``."""
    saved = nn.Module.__dict__.get("__deepcopy__")
    if saved is not None:
        del nn.Module.__deepcopy__
    try:
        return copy.deepcopy(module)
    finally:
        if saved is not None:
            nn.Module.__deepcopy__ = saved


def fingerprint(module):
    """What a copy must keep: the classes and names of its blocks, every attribute that is no tensor or block,
    its parameters' and buffers' values, which of them are one tensor, and its hooks."""
    blocks = [(name, type(m).__name__, m.training, sorted((k, repr(v)) for k, v in vars(m).items()
                                                         if not k.startswith("_") and not isinstance(v, nn.Module)),
               [len(m._forward_hooks), len(m._forward_pre_hooks)]) for name, m in module.named_modules()]
    tensors = list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers())
    owners = {}
    shared = sorted((name, owners.setdefault(id(t), name)) for name, t in tensors)
    return blocks, [(name, t.tolist()) for name, t in tensors], shared


def tied_model():
    torch.manual_seed(0)
    model = ref.Transformer(11, 11, N=2, d_model=8, d_ff=16, h=2).eval()
    model.decoder.layers[0].register_forward_hook(lambda m, i, o: o)
    return model


@pytest.fixture
def installed():
    saved = nn.Module.__dict__.get("__deepcopy__")
    module_copies.install()
    yield
    if saved is None:
        del nn.Module.__deepcopy__


def test_a_copy_is_the_generic_copy_with_ties_hooks_and_modes_kept(installed):
    model = tied_model()
    fast, slow = copy.deepcopy(model), generic_deepcopy(model)
    assert fingerprint(fast) == fingerprint(slow) == fingerprint(model)
    assert fast.output_layer.linear.weight is fast.tgt_embedding.lookup.weight  # (§3.4's one matrix stays one)
    assert all(p is not q for p, q in zip(fast.parameters(), model.parameters()))
    x, y = torch.randint(1, 11, (2, 5)), torch.randint(1, 11, (2, 4))
    masks = torch.ones(2, 1, 5, dtype=torch.bool), torch.tril(torch.ones(4, 4, dtype=torch.bool)).expand(2, 4, 4)
    assert torch.equal(fast(x, y, *masks), model(x, y, *masks))
    with torch.no_grad():
        next(fast.parameters()).add_(1)
    assert not torch.equal(next(fast.parameters()), next(model.parameters()))


class RestoresItself(nn.Linear):
    """Restores its state its own way: copied by the generic path."""

    def __setstate__(self, state):
        super().__setstate__(state)
        self.restored = True


def test_a_module_restoring_itself_its_own_way_is_copied_the_generic_way(installed):
    block = nn.Sequential(RestoresItself(3, 3), nn.MultiheadAttention(4, 2))
    copied = copy.deepcopy(block)
    assert copied[0].restored and not hasattr(block[0], "restored")
    assert fingerprint(copied) == fingerprint(generic_deepcopy(block))
    assert not module_copies.plain(RestoresItself) and not module_copies.plain(nn.MultiheadAttention)
