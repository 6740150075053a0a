"""How a role was built and called, as plain Python that needs only torch and the author's own code: the body of a
standalone reproduction script (``conformance.contract.harness.Case.reproduction``).

The recipe constructs the author's class with the literal hyperparameters the checker gave it (its sub-blocks
built the same way), and calls it as the checker calls it (the canonical inputs by the forward's own argument
names, masks in the code's convention). What the checker does that plain code cannot say in a line (a reference
block grafted in place of a broken one, a configuration object, code read in another layout, a whole model read
through hooks) makes the recipe :class:`NotExpressible`, with the reason.
"""
import dataclasses
import inspect

from adapters.building import PROBE, canonical_value, constructed_by_name, stack_layer_role
from adapters.call_plans import constant
from adapters.construction import causal_by_default, causal_flag
from adapters.masks import HEAD_AXIS, KEY_VECTORS, NO_HEAD_AXIS, base_convention

DEPTH = 4


class NotExpressible(Exception):
    """The role's construction or call cannot be written as a few lines of plain code (the reason)."""


def construction(binding, bindings, depth=0):
    """``{"name", "arguments": [[argument, source]]}``: the author's class and what feeds each constructor argument
    (a canonical source such as ``d_model``, ``value:...``, or the construction of a sub-block, ``layers`` with
    that of a layer)."""
    if depth > DEPTH:
        raise NotExpressible("its sub-blocks nest too deeply")
    if binding.part_of is not None or not inspect.isclass(binding.target):
        raise NotExpressible(f"{binding.name} is built inside another block, not on its own")
    name = binding.target.__name__
    if binding.name.rsplit(".", 1)[-1] != name or not name.isidentifier():
        raise NotExpressible(f"{binding.name} is not a name the code defines at its top level")
    if not binding.composes and depth:
        raise NotExpressible(f"the checker put the reference's {binding.role} in place of the broken {binding.name}")
    if constructed_by_name(binding, bindings):
        raise NotExpressible(f"{binding.name} builds a broken class that the checker stood in for")
    arguments = []
    for argument, source in binding.constructor.items():
        if argument == "**" or "." in argument or source == "config":
            raise NotExpressible(f"{binding.name} takes a configuration object")
        if source.startswith("class:"):
            raise NotExpressible(f"{binding.name} takes the class of a block it builds itself")
        if source.startswith("role:"):
            source = construction(bindings[source[5:]], bindings, depth + 1)
        elif source == "layers":
            source = {"layers": construction(bindings[stack_layer_role(binding.role) or "encoder_layer"], bindings,
                                             depth + 1)}
        arguments.append([argument, source])
    flag = causal_flag(binding.target)
    if flag and causal_by_default(binding.target, flag) and flag not in binding.constructor:
        arguments.append([flag, "value:False"])  # (built with its causal default off, as the checker builds it)
    return {"name": name, "role": binding.role, "arguments": arguments}


def call(adapted):
    """``[[argument, canonical input]]``: how the checker's adapter ``adapted`` (``adapters.wrapping.Adapted``)
    passes the canonical inputs to the author's forward (``value:...``: a constant)."""
    if getattr(adapted, "layout", None) is not None:
        raise NotExpressible("the code takes its tensors sequence first; the checker transposes them")
    if getattr(adapted, "setup", None) or getattr(adapted, "tokens_for_positions", False) \
            or getattr(adapted, "adds_table", False):
        raise NotExpressible("the checker calls the block through a second method of its own")
    if any(source in ("length", "device") for _, source in adapted.arguments):
        raise NotExpressible("the checker gives the block its input's length and device, read off the input")
    if any(":" in source and not source.startswith("value:") for _, source in adapted.arguments):
        raise NotExpressible("the code takes its masks as lengths or in two parts")
    return [[name, source] for name, source in adapted.arguments]


def template(binding, bindings, builder):
    """The recipe of the role ``binding`` plays, for any configuration: ``{"build": construction, "call": call,
    "masks": convention}``, or ``{"not_expressible": reason}``; ``builder``: the role's canonical builder
    (``adapters.wrapping.module_builder``), which builds it once on the probe configuration to read its call."""
    try:
        if binding.role == "model":
            raise NotExpressible("the whole model's output is its decoder's, which the checker reads through hooks")
        adapted = builder(**dataclasses.asdict(PROBE))
        return {"build": construction(binding, bindings), "call": call(adapted), "masks": adapted.convention}
    except NotExpressible as exc:
        return {"not_expressible": str(exc)}
    except Exception:  # the author's code fails to build: the script shows that, if it can be written
        try:
            return {"build": construction(binding, bindings), "call": None, "masks": None}
        except NotExpressible as exc:
            return {"not_expressible": str(exc)}


def expression(build, cfg):
    """The Python expression of a :func:`construction` on the configuration ``cfg``."""
    values = []
    for argument, source in build["arguments"]:
        if isinstance(source, dict) and "layers" in source:
            value = f"torch.nn.ModuleList([{expression(source['layers'], cfg)} for _ in range({cfg.N})])"
        elif isinstance(source, dict):
            value = expression(source, cfg)
        else:
            value = repr(canonical_value(source, cfg, build["role"]))
        values.append(f"{argument}={value}")
    return f"code.{build['name']}({', '.join(values)})"


def mask_conversion(convention):
    """Lines of ``def in_convention(mask)``: a canonical mask (bool, True = may attend) in the code's convention."""
    lines = ["def in_convention(mask):", '    """A mask of the checker\'s (True = may attend) as your code takes it."""']
    if convention.endswith(HEAD_AXIS):
        lines.append("    mask = mask.unsqueeze(1) if mask.dim() == 3 else mask")
        convention = convention.removesuffix(HEAD_AXIS)
    if convention.endswith(KEY_VECTORS):
        lines.append("    mask = mask.any(-2) if mask.dim() == 3 else mask")
        convention = convention.removesuffix(KEY_VECTORS)
    if convention.endswith(NO_HEAD_AXIS):
        lines.append("    mask = mask.squeeze(1) if mask.dim() == 4 and mask.size(1) == 1 else mask")
        convention = convention.removesuffix(NO_HEAD_AXIS)
    lines.append({"blocked": "    return ~mask",
                  "additive": "    return torch.zeros(mask.shape).masked_fill(~mask, float('-inf'))"}.get(
        base_convention(convention), "    return mask"))
    return lines


def call_expression(arguments):
    """The call of the author's block (``self.block``) on the canonical inputs ``named`` by :func:`call`."""
    pieces = []
    for name, source in arguments:
        if source.startswith("value:"):
            pieces.append(f"{name}={constant(source)!r}")
        elif source == "d_k":
            pieces.append(f'{name}=named["query"].size(-1)')
        else:
            value = f'named["{source}"]'
            pieces.append(f"{name}=in_convention({value})" if source.endswith("mask") else f"{name}={value}")
    return f"self.block({', '.join(pieces)})"
