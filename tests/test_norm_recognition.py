"""Norm modules found by what they do (``conformance.contract.weights.is_norm_module``): the checks that zero sub-layers,
reset gains or perturb norms (dropout placement, norm order, parameter readings) must tell a LayerNorm from a
sub-layer whatever its class is called."""
import torch
import torch.nn as nn

from conformance.contract.weights import is_norm_module, norm_modules, sub_layer_modules


class LN(nn.Module):
    """§3.1's LayerNorm under a name that says nothing."""

    def __init__(self, d, scalar=False):
        super().__init__()
        self.g = nn.Parameter(torch.ones(1 if scalar else d))
        self.b = nn.Parameter(torch.zeros(1 if scalar else d))

    def forward(self, x):
        return self.g * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-6) + self.b


class Shift(nn.Module):
    """A learned offset: vector parameters only, but nothing normalized."""

    def __init__(self, d):
        super().__init__()
        self.b = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return x + self.b


class Mix(nn.Module):
    """A vector parameter whose forward needs two inputs: not a norm the checks could call on one tensor."""

    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))

    def forward(self, x, y):
        return self.w * (x - x.mean(-1, keepdim=True)) + y


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ff, self.ln, self.shift = nn.Linear(d, d), LN(d), Shift(d)


def test_a_norm_is_recognised_by_behaviour_whatever_its_name():
    assert is_norm_module(LN(8)) and is_norm_module(LN(8, scalar=True))
    assert is_norm_module(nn.LayerNorm(8))
    assert not is_norm_module(Shift(8)) and not is_norm_module(Mix(8)) and not is_norm_module(nn.Linear(8, 8))


def test_probing_a_module_leaves_its_mode_as_it_was():
    ln = LN(8).train()
    assert is_norm_module(ln) and ln.training


def test_a_layer_without_norm_in_its_names_has_its_norm_apart_from_its_sub_layers():
    block = Block(8)
    assert [name for name, _ in norm_modules(block)] == ["ln"]
    assert [name for name, _ in sub_layer_modules(block)] == ["ff", "shift"]
