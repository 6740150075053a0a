"""Large blocks built once and shared among the examples and checks that build them again.

A block of a million parameters or more is code at its author's own sizes (d_model = 512, six layers, §3 and Table 3:
44 million parameters), and building it draws every weight at random, a second or more a build, where a check's
forward pass at small batches costs a fraction of that. Such a build is kept, per configuration its builder
receives, device and dtype (another dtype converted from it), and each later build of it is a copy of its structure
whose weight matrices view the kept ones: new ``Parameter`` objects (their gradients, flags and replacements the
copy's own) over the same storage and version counters. The checker's own writes to weights go through
:func:`write`, which gives such a weight storage of its own instead of changing the kept one; any other change in
place (the code's own) bumps a version: the kept build is then dropped, built again and kept apart, each later copy
copying its weights. A copy leaves the random state its own build left (dropout draws the same masks after it), and
the case records the seed that drew its weights, for the reproduction. The checker's own drawn sizes stay far below
the threshold: every block is built from each example's seed there, and no key is made for it.
"""
import collections
import copy
import resource
import weakref
from dataclasses import dataclass

import torch
import torch.nn as nn

LARGE = 1 << 20
"""Parameters from which a build is shared (the checker's drawn sizes build a few thousand)."""


def budget():
    """Bytes of kept weights: a quarter of the address space a process may still take where it is limited (grading
    limits each run's), else 2 GiB."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return 2 << 30
    try:
        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        mapped = 0
    return max(0, limit - mapped) // 4


@dataclass
class Kept:
    """A build kept: the block, the seed that drew its weights, the random state its build left, the versions of the
    tensors its copies view when kept (None: its copies view none), and their bytes."""
    module: nn.Module
    seed: int
    random_state: torch.Tensor
    versions: list | None
    nbytes: int
    storages: frozenset = frozenset()
    """The data pointers of the storages its copies view."""


KEPT = weakref.WeakKeyDictionary()
"""Implementation -> OrderedDict((key, dtype) -> :class:`Kept`), the least recently used first."""
CHANGED_IN_PLACE = weakref.WeakKeyDictionary()
"""Implementation -> the keys of builds a check changed in place (zeroing a sub-layer's weights): kept again apart,
each later build a full copy (a copy of the weights still costs a fraction of drawing them)."""
SHARED_FROM = 1 << 12
"""Elements from which a tensor is viewed rather than copied: the weight matrices and tables; a LayerNorm's gain or a
bias, which checks set in place, is each copy's own."""


def tensors(module, every_tensor=None):
    """The parameters and buffers of ``module`` (``every_tensor`` where given) its copies view (:data:`SHARED_FROM`)."""
    return [t for t in every_tensor or (*module.parameters(), *module.buffers()) if t.numel() >= SHARED_FROM]


def structure_copy(module, viewing=True):
    """A deep copy of ``module`` whose large parameters and buffers view the original's storage (and version
    counters), or copy it (``viewing`` false); None when the module cannot be copied (an attribute deepcopy refuses)
    or holds a tensor kind that is not plain."""
    memo = {}
    for p in module.parameters():
        if type(p) is not nn.Parameter:  # (lazy or custom parameters: built each time)
            return None
        if viewing and p.numel() >= SHARED_FROM:
            memo[id(p)] = nn.Parameter(p.detach(), requires_grad=p.requires_grad)
    for b in module.buffers():
        if type(b) is not torch.Tensor:
            return None
        if viewing and b.numel() >= SHARED_FROM:
            memo[id(b)] = b.detach()
    try:
        return copy.deepcopy(module, memo)
    except Exception:  # (a lock or a file held by the block: it is built each time)
        return None


def take(impl, key_of, dtype):
    """``(a copy of the build kept under the key ``key_of()`` makes, in dtype, its seed)`` with the random state its
    build left restored; one kept in another dtype is converted (its weights not drawn again: a build converts its
    own); None when none is kept, or a check changed the weights its copies view since (it is dropped, and kept apart
    from then on: :data:`CHANGED_IN_PLACE`). The key is made only where this implementation has builds kept."""
    kept_here = KEPT.get(impl)
    key = key_of() if kept_here else None
    for (other_key, other_dtype), kept in list(kept_here.items()) if key is not None else ():
        if other_key != key or (other_dtype != dtype and (key, dtype) in kept_here):
            continue
        copied = None
        if kept.versions is not None and [t._version for t in tensors(kept.module)] != kept.versions:
            CHANGED_IN_PLACE.setdefault(impl, set()).add(key)
        elif other_dtype == dtype:
            copied = structure_copy(kept.module, viewing=kept.versions is not None)
        else:
            converted = structure_copy(kept.module, viewing=False)
            return None if converted is None else (
                stored(impl, key, dtype, converted.to(dtype=dtype), kept.seed, kept.random_state), kept.seed)
        if copied is None:
            del kept_here[(other_key, other_dtype)]
            return None
        kept_here.move_to_end((key, dtype))
        torch.default_generator.set_state(kept.random_state)
        return copied, kept.seed
    return None


def keep(impl, key_of, dtype, module, seed, every_tensor=None):
    """``module``, just built from ``seed`` and moved to its device and ``dtype``, kept under the key ``key_of()``
    makes (None: not to be kept) and its dtype when large and on the CPU, with the random state its build left;
    returns what the check is to use: a copy of it, or the module itself where it is not kept. The key is made only
    for a large block; ``every_tensor``: its parameters and buffers where the caller has them."""
    weights = tensors(module, every_tensor)
    if sum(t.numel() for t in weights) < LARGE or any(t.device.type != "cpu" for t in weights):
        return module
    key = key_of()
    return module if key is None else stored(impl, key, dtype, module, seed, torch.default_generator.get_state())


def stored(impl, key, dtype, module, seed, random_state):
    """:func:`keep`'s work once the block is known large: the copy the check uses, the block kept within
    :func:`budget`, the least recently used dropped first."""
    viewing = key not in CHANGED_IN_PLACE.get(impl, ())
    used = structure_copy(module, viewing)
    if used is None:
        return module
    weights = tensors(module)
    kept_here = KEPT.setdefault(impl, collections.OrderedDict())
    nbytes, room = sum(t.numel() * t.element_size() for t in weights), budget()
    while kept_here and sum(k.nbytes for k in kept_here.values()) + nbytes > room:
        kept_here.popitem(last=False)
    if nbytes <= room:
        versions = [t._version for t in weights] if viewing else None
        storages = frozenset(t.untyped_storage().data_ptr() for t in weights) if viewing else frozenset()
        kept_here[(key, dtype)] = Kept(module, seed, random_state, versions, nbytes, storages)
    torch.default_generator.set_state(random_state)
    return used


GIVEN_OWN_STORAGE = weakref.WeakValueDictionary()
"""id -> a copy's tensor :func:`write` gave storage of its own: it still shares its kept build's version counter."""


def write(target, value):
    """Set ``target``, a parameter or buffer of a build, to ``value`` (``copy_`` under ``no_grad``, as a check sets
    weights); where it views a kept build's weights, by giving it storage of its own instead, so that the kept build
    and its other copies keep the weights their code drew (and the version counter it shares with them says no
    change that is not there)."""
    with torch.no_grad():
        if target.is_leaf and target._base is None and (
                GIVEN_OWN_STORAGE.get(id(target)) is target or views_a_kept_build(target)):
            target.data = torch.empty_like(target).copy_(value)
            GIVEN_OWN_STORAGE[id(target)] = target
        else:
            target.copy_(value)


def views_a_kept_build(tensor):
    """Whether ``tensor``'s storage is that of a kept build's weight."""
    storage = tensor.untyped_storage().data_ptr()
    return any(storage in kept.storages for kept_here in list(KEPT.values()) for kept in kept_here.values())
