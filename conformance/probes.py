"""Watching an implementation from the inside without its cooperation.

:class:`AttentionRecorder` is a ``torch.overrides.TorchFunctionMode`` that records every softmax (its input
scores, axis and output weights) and every call to ``scaled_dot_product_attention`` made while it is active,
so the checks see the attention weights even when an implementation does not return them.
:func:`set_identity_projections` turns a multi-head attention's projections into identities so that the
per-head queries and keys are known slices of the inputs.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

SOFTMAX_FUNCTIONS = {torch.softmax, F.softmax, torch.Tensor.softmax, torch.special.softmax}
SDPA = F.scaled_dot_product_attention


@dataclass
class SoftmaxCall:
    scores: torch.Tensor
    dim: int
    weights: torch.Tensor


@dataclass
class SdpaCall:
    query: torch.Tensor
    key: torch.Tensor
    kwargs: dict


class AttentionRecorder(TorchFunctionMode):
    """Records softmax and scaled_dot_product_attention calls (detached copies)."""

    def __init__(self):
        super().__init__()
        self.softmaxes, self.sdpa_calls = [], []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in SOFTMAX_FUNCTIONS:
            scores = args[0]
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            dim = -1 if dim is None else dim % scores.dim()
            self.softmaxes.append(SoftmaxCall(scores.detach().clone(), dim, out.detach().clone()))
        elif func is SDPA:
            self.sdpa_calls.append(SdpaCall(args[0].detach(), (args[1] if len(args) > 1 else kwargs["key"]).detach(),
                                            {k: v for k, v in kwargs.items() if k not in ("query", "key", "value")}))
        return out

    def attention_softmaxes(self, lq, lk):
        """Softmax calls whose scores end in (Lq, Lk) or, with query and key swapped, (Lk, Lq)."""
        return [c for c in self.softmaxes if c.scores.dim() >= 2 and tuple(c.scores.shape[-2:]) in ((lq, lk), (lk, lq))]


def sdpa_scale(call):
    """The scale a recorded scaled_dot_product_attention call applies: its ``scale`` or 1/sqrt(E)."""
    scale = call.kwargs.get("scale")
    return scale if scale is not None else 1 / math.sqrt(call.query.size(-1))


def constant_ratio(numerator, denominator, where, rtol=1e-3):
    """The constant c with numerator = c * denominator on ``where`` (and |denominator| not tiny), else None."""
    where = where & (denominator.abs() > 1e-3)
    if not where.any():
        return None
    ratios = (numerator[where] / denominator[where]).to(torch.float64)
    c = ratios.median().item()
    return c if torch.allclose(ratios, torch.full_like(ratios, c), rtol=rtol, atol=1e-6) else None


def identity_weight(shape, d_model, d_k, index):
    """An identity-like value for a projection weight of ``shape``; None if the shape is not a projection.

    (d, d): identity; (k d, d): k stacked identities (packed q/k/v); (d_k, d): the rows of head ``index``.
    """
    if len(shape) != 2 or shape[1] != d_model:
        return None
    rows = shape[0]
    if rows % d_model == 0:
        return torch.eye(d_model).repeat(rows // d_model, 1)
    if rows == d_k:
        return torch.eye(d_model)[index * d_k:(index + 1) * d_k]
    return None


@torch.no_grad()
def set_identity_projections(module, d_model, d_k):
    """Set every projection of an attention module to an identity (per-head slices in registration order,
    three per head for q, k, v) and every bias to zero; returns False when some parameter does not fit."""
    per_head = 0
    for name, p in module.named_parameters():
        if p.dim() == 1:
            p.zero_()
            continue
        value = identity_weight(tuple(p.shape), d_model, d_k, per_head // 3)
        if value is None:
            return False
        per_head += p.shape[0] == d_k != d_model
        p.copy_(value)
    return True


def split_heads(x, h):
    """(batch, length, d_model) -> (batch, h, length, d_k), the paper's head layout."""
    b, n, d = x.shape
    return x.view(b, n, h, d // h).transpose(1, 2)
