"""Feed-forward widths given as a multiple of the model width.

Much code sizes the inner layer of the feed-forward network as ``ffn_mult * d_model`` (``mlp_ratio=4``,
``expansion=4``, ``ff_mult=4``) rather than taking d_ff itself. Such an argument is a size no name list can read:
it is learned, as discovery learns other sizes, from the weights it shapes (:func:`d_ff_multipliers`): built with
two probe multiples, the block holds a Linear between d_model and that multiple of d_model each time. It is then
fed ``d_ff // d_model`` (:func:`multiple`), so that the code builds the d_ff of the configuration under check.
"""
import torch.nn as nn

D_FF_PER_D_MODEL = "d_ff/d_model"
"""The source of a constructor argument that is d_ff as a multiple of d_model (a plan's entry)."""

FEED_FORWARD_HOLDERS = ("feed_forward", "encoder_layer", "decoder_layer", "encoder", "decoder", "model")
PROBE_MULTIPLES = (3, 5)
"""Multiples no canonical probe width takes (the probe's d_ff is twice its d_model)."""


def multiple(cfg):
    """The multiplier that gives ``cfg``'s d_ff from its d_model; ValueError where d_ff is no multiple of it."""
    if cfg.d_ff % cfg.d_model:
        raise ValueError(f"the code takes d_ff as a multiple of d_model, and d_ff={cfg.d_ff} is no multiple of "
                         f"d_model={cfg.d_model}")
    return cfg.d_ff // cfg.d_model


def widens(module, d_model, factor):
    """Whether ``module`` holds a Linear between ``d_model`` and ``factor * d_model`` features."""
    return any(isinstance(m, nn.Linear) and {m.in_features, m.out_features} == {d_model, factor * d_model}
               for m in module.modules())


def d_ff_multipliers(role, plan, parameters, build, d_model):
    """``{argument: D_FF_PER_D_MODEL}`` for a defaulted integer argument, left out of ``plan``, that sets the inner
    width of the feed-forward network as a multiple of the width: ``build(plan)`` (the block built on the probe
    configuration, whose width is ``d_model``, or None when it fails) holds a Linear between d_model and each of
    :data:`PROBE_MULTIPLES` times d_model when the argument is given that multiple. Nothing where d_ff is fed
    already or d_model is not."""
    if role not in FEED_FORWARD_HOLDERS or "d_ff" in plan.values() or "d_model" not in plan.values():
        return {}
    for p in parameters:
        if p.name in plan or type(p.default) is not int or isinstance(p.default, bool) or p.default < 1:
            continue
        built = [build({**plan, p.name: f"value:{factor}"}) for factor in PROBE_MULTIPLES]
        if all(module is not None and widens(module, d_model, factor)
               for module, factor in zip(built, PROBE_MULTIPLES)):
            return {p.name: D_FF_PER_D_MODEL}
    return {}
