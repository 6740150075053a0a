"""A block at its author's own sizes (a million parameters or more) is built once per configuration and shared: each
later build is a copy of its structure over the same weights, its seed recorded for the reproduction and the random
state its build left restored; the checker's own writes give a copy's weight storage of its own, while a weight its
code changes in place sends the next build back to the code, and each later one copies the weights; the checker's
small sizes are built from each example's seed as before."""
import dataclasses
import resource
import threading

import torch
import torch.nn as nn

from conformance.contract import shared_builds
from conformance.contract.harness import Case
from conformance.contract.interface import Config, Implementation

LARGE = Config(d_model=512, h=8, d_ff=2048, dropout=0.0, N=1)  # two linear maps: 2.1 million parameters
SMALL = dataclasses.replace(LARGE, d_model=12, h=3, d_ff=24)


def feed_forward(d_model, d_ff):
    return nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))


def case(impl, cfg, seed, dtype=torch.float32):
    return Case(impl, cfg, batch=3, src_len=4, tgt_len=5, dtype=dtype, seed=seed)


def first_weight(module):
    return next(module.parameters())


def test_a_large_block_is_built_once_and_its_weights_shared():
    impl = Implementation("shared", {"feed_forward": feed_forward})
    first, later = case(impl, LARGE, seed=1), case(impl, LARGE, seed=2)
    a, b = first.build("feed_forward"), later.build("feed_forward")
    assert first_weight(a).data_ptr() == first_weight(b).data_ptr()  # the same storage, not drawn again
    assert first_weight(a) is not first_weight(b)  # each build's own Parameter objects
    assert later.build_seeds == {"feed_forward": 1} and first.build_seeds == {}
    assert "case.replace(seed=1).build('feed_forward')" in later.reproduction("feed_forward")
    assert "case.build('feed_forward')" in first.reproduction("feed_forward")


def test_a_shared_build_leaves_the_random_state_its_own_build_left():
    fresh = Implementation("fresh", {"feed_forward": feed_forward})
    case(fresh, LARGE, seed=1).build("feed_forward")
    after_its_build = torch.rand(3)
    impl = Implementation("shared", {"feed_forward": feed_forward})
    case(impl, LARGE, seed=1).build("feed_forward")
    case(impl, LARGE, seed=2).build("feed_forward")  # shared: the state of seed 1's build, not of seed 2's seeding
    assert torch.equal(torch.rand(3), after_its_build)


def test_what_a_check_does_to_its_copy_stays_there():
    impl = Implementation("shared", {"feed_forward": feed_forward})
    used = case(impl, LARGE, seed=1).build("feed_forward")
    used(torch.randn(2, 512)).sum().backward()
    used[0].weight.requires_grad_(False)
    again = case(impl, LARGE, seed=2).build("feed_forward")
    assert all(p.grad is None for p in again.parameters()) and again[0].weight.requires_grad


def test_a_weight_its_code_changes_in_place_sends_the_next_build_back_to_the_code():
    impl = Implementation("shared", {"feed_forward": feed_forward})
    used = case(impl, LARGE, seed=1).build("feed_forward")
    with torch.no_grad():
        used[0].weight.zero_()
    later = case(impl, LARGE, seed=2)
    rebuilt = later.build("feed_forward")
    assert rebuilt[0].weight.abs().sum() > 0 and later.build_seeds == {}
    with torch.no_grad():  # (from then on each build copies the weights kept: changing them leaves the next as built)
        rebuilt[0].weight.zero_()
    copied = case(impl, LARGE, seed=3).build("feed_forward")
    assert copied[0].weight.abs().sum() > 0 and first_weight(copied).data_ptr() != first_weight(rebuilt).data_ptr()


def test_the_checkers_own_writes_leave_the_kept_weights_and_their_sharing_as_they_were():
    impl = Implementation("shared", {"feed_forward": feed_forward})
    used = case(impl, LARGE, seed=1).build("feed_forward")
    drawn = first_weight(used).clone()
    shared_builds.write(first_weight(used), torch.zeros(2048, 512))  # (as a check maps or zeroes weights)
    shared_builds.write(first_weight(used), torch.ones(2048, 512))  # (and writes the same weight again)
    assert torch.equal(first_weight(used), torch.ones(2048, 512))
    later = case(impl, LARGE, seed=2)
    again = later.build("feed_forward")
    assert torch.equal(first_weight(again), drawn) and later.build_seeds == {"feed_forward": 1}  # still shared
    small = case(impl, SMALL, seed=1).build("feed_forward")  # (a build not kept: written in place, as before)
    weight = first_weight(small)
    shared_builds.write(weight, torch.zeros_like(weight))
    assert first_weight(small) is weight and not weight.any() and weight._version > 0


def test_shared_per_dtype_and_per_configuration_received():
    impl = Implementation("shared", {"feed_forward": feed_forward})
    a = case(impl, LARGE, seed=1).build("feed_forward")
    in_float64 = case(impl, LARGE, seed=5, dtype=torch.float64).build("feed_forward")
    other_vocabulary = case(impl, dataclasses.replace(LARGE, src_vocab=99), seed=2).build("feed_forward")
    wider = case(impl, dataclasses.replace(LARGE, d_ff=4096), seed=3).build("feed_forward")
    assert first_weight(in_float64).dtype == torch.float64  # converted from the one kept, not drawn again
    assert torch.equal(first_weight(in_float64), first_weight(a).double())
    assert first_weight(other_vocabulary).data_ptr() == first_weight(a).data_ptr()  # no argument of its builder
    assert first_weight(wider).shape == (4096, 512)


def test_the_checkers_small_sizes_are_built_from_each_seed():
    impl = Implementation("small", {"feed_forward": feed_forward})
    a, b = case(impl, SMALL, seed=1).build("feed_forward"), case(impl, SMALL, seed=2).build("feed_forward")
    assert not torch.equal(first_weight(a), first_weight(b))
    assert shared_builds.KEPT.get(impl) is None


def test_a_block_that_cannot_be_copied_is_built_each_time():
    class HoldsALock(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.ff = feed_forward(d_model, d_ff)
            self.lock = threading.Lock()  # (deepcopy refuses it)

        def forward(self, x):
            return self.ff(x)

    impl = Implementation("uncopyable", {"feed_forward": HoldsALock})
    a, b = case(impl, LARGE, seed=1).build("feed_forward"), case(impl, LARGE, seed=2).build("feed_forward")
    assert not torch.equal(first_weight(a), first_weight(b))


def kept_under_a_limit(left):
    """``(budget, whether a build of 8.4 MB of weights was kept)`` with ``left`` bytes of address space left."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        mapped = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (mapped + left, hard))
    try:
        room, impl = shared_builds.budget(), Implementation("limited", {"feed_forward": feed_forward})
        case(impl, LARGE, seed=1).build("feed_forward")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    return room, bool(shared_builds.KEPT.get(impl))


def test_under_a_memory_limit_only_a_quarter_of_what_is_left_is_kept():
    room, kept = kept_under_a_limit(400 << 20)
    assert 64 << 20 <= room <= 100 << 20 and kept  # (a thread's first allocation may map an arena of 64 MiB)
    room, kept = kept_under_a_limit(28 << 20)
    assert room <= 7 << 20 and not kept
