"""Deep copies of ``torch.nn.Module`` objects made as ``copy.deepcopy`` makes them, faster.

Code in the style of the Annotated Transformer builds its stacks by deep-copying a prototype layer
(``clones(layer, N)``), at every build: for a module, ``copy.deepcopy`` goes through its ``__reduce_ex__`` and
deep-copies its whole ``__dict__``, among it some twenty hook dictionaries, nearly always empty, each through the
generic reduction. That was 40 % of a run's time on such code. :func:`install` gives ``nn.Module`` a
``__deepcopy__`` that makes the same object (the class's ``__new__``, a deep copy of ``Module.__getstate__`` with the
same memo, ``Module.__setstate__``), taking an empty dictionary as a new empty one and an immutable scalar as itself, and
defers to the generic path for any class that reduces, pickles or restores itself its own way.
"""
import collections
import copy
import copyreg

import torch.nn as nn

IMMUTABLE = (type(None), bool, int, float, str, bytes)
EMPTY_CONTAINERS = (dict, collections.OrderedDict)


def plain(cls):
    """Whether ``copy.deepcopy`` of a ``cls`` object takes the generic path through ``Module.__getstate__`` (its
    ``__dict__``) and ``Module.__setstate__``: no reduction, state or slots of its own."""
    return (cls.__reduce_ex__ is object.__reduce_ex__ and cls.__reduce__ is object.__reduce__
            and cls.__getstate__ is nn.Module.__getstate__ and cls.__setstate__ is nn.Module.__setstate__
            and cls not in copyreg.dispatch_table and not copyreg._slotnames(cls))


PLAIN = {}
"""class -> :func:`plain` of it (read once a class)."""


def module_deepcopy(module, memo):
    """``copy.deepcopy(module, memo)``'s result, made directly for a :func:`plain` class."""
    cls = type(module)
    if cls not in PLAIN:
        PLAIN[cls] = plain(cls)
    if not PLAIN[cls]:  # (copy.deepcopy's own generic path)
        reductor = copyreg.dispatch_table.get(cls)
        return copy._reconstruct(module, memo, *(reductor(module) if reductor else module.__reduce_ex__(4)))
    made = cls.__new__(cls)
    memo[id(module)] = made
    state = {}
    for key, value in module.__getstate__().items():
        kind = type(value)
        if kind in EMPTY_CONTAINERS and not value:
            state[key] = kind()
        elif kind in IMMUTABLE:
            state[key] = value
        else:
            state[key] = copy.deepcopy(value, memo)
    made.__setstate__(state)
    return made  # (copy.deepcopy records it in the memo and keeps the original alive, as for any __deepcopy__)


def install():
    """Make deep copies of modules through :func:`module_deepcopy` in this process (a class defining its own
    ``__deepcopy__`` keeps it)."""
    if getattr(nn.Module, "__deepcopy__", None) is not module_deepcopy:
        nn.Module.__deepcopy__ = module_deepcopy
