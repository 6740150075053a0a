"""Attention blocks without weights of their own, whose layer projects around them.

Some code keeps W^Q, W^K, W^V and W^O in the encoder or decoder layer and hands an attention block the
already-projected queries, keys and values (``self.w_o(self.attn(self.w_q(x), self.w_k(x), self.w_v(x), mask))``);
the block splits and merges the heads itself and holds no parameter. Checked alone, such a block is not the
multi-head attention of §3.2.2: it lacks the four projections, which are written one level up. It is therefore
bound as its layer calls it: the layer's own projection modules around the block (:class:`ProjectedAttention`),
read from the layer's ``forward`` (:func:`projections_around`), so that the weights the paper counts are the
ones the author wrote, at the place the author wrote them.
"""
import ast
import inspect
import textwrap

import torch.nn as nn


def _self_attribute(node):
    """``name`` for an expression ``self.name``, else None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _projection(node):
    """``name`` for an argument ``self.name(expr)`` (a projection applied to one input), else None."""
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        return _self_attribute(node.func)
    return None


def projections_around(owner, attribute):
    """``(q, k, v, o)``: the attributes of ``owner`` (a class) whose modules its ``forward`` applies to the three
    first arguments of ``self.<attribute>(...)`` and to its result (``o`` None where the result is not projected),
    from the first such call; None where ``forward`` calls the block otherwise."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(owner.forward)))
    except (TypeError, OSError, SyntaxError, AttributeError):
        return None
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _self_attribute(node.func) == attribute and len(node.args) >= 3):
            continue
        names = [_projection(argument) for argument in node.args[:3]]
        if None in names:
            continue
        outer = parents.get(node)
        if isinstance(outer, ast.Subscript) and outer.value is node:  # self.w_o(self.attn(...)[0])
            node, outer = outer, parents.get(outer)
        o = _projection(outer) if isinstance(outer, ast.Call) and outer.args and outer.args[0] is node else None
        return (*names, o)
    return None


def has_no_parameters(module):
    return next(module.parameters(), None) is None


class ProjectedAttention(nn.Module):
    """An attention block with the projections its layer applies around it: ``o(block(q(query), k(key),
    v(value), ...))``, called with the block's own arguments (its first three are projected)."""

    def __init__(self, q, k, v, block, o=None):
        super().__init__()
        self.w_q, self.w_k, self.w_v = q, k, v
        self.block = block
        self.w_o = o if o is not None else nn.Identity()
        self.signature = inspect.signature(block.forward)

        def forward(*args, **kwargs):
            return self.projected(*args, **kwargs)
        forward.__signature__ = self.signature  # called (and planned) with the block's own arguments
        object.__setattr__(self, "forward", forward)

    def projected(self, *args, **kwargs):
        bound = self.signature.bind(*args, **kwargs)
        names = list(self.signature.parameters)[:3]
        for name, projection in zip(names, (self.w_q, self.w_k, self.w_v)):
            bound.arguments[name] = projection(bound.arguments[name])
        out = self.block(*bound.args, **bound.kwargs)
        if isinstance(out, tuple):
            return (self.w_o(out[0]), *out[1:])
        return self.w_o(out)


def with_projections(layer, path):
    """The sub-block of ``layer`` at ``path``, with the projections ``layer`` applies around it where it holds no
    parameter and the layer's forward projects its inputs (:func:`projections_around`); else the sub-block itself."""
    block = layer.get_submodule(path)
    if "." in path or not has_no_parameters(block):
        return block
    names = projections_around(type(layer), path)
    if names is None:
        return block
    modules = [getattr(layer, name, None) if name else None for name in names]
    if not all(isinstance(m, nn.Module) for m in modules[:3]) or (names[3] and not isinstance(modules[3], nn.Module)):
        return block
    return ProjectedAttention(*modules[:3], block, modules[3])


def describe(owner, path):
    """A mapping note saying which projections of ``owner`` are bound around its block at ``path``, or ''."""
    names = projections_around(owner, path) if "." not in path else None
    if names is None:
        return ""
    q, k, v, o = names
    around = f"{q}, {k}, {v} before it" + (f" and {o} after it" if o else "")
    return f"(with {owner.__name__}'s projections {around}, as {owner.__name__}.forward calls it)"
