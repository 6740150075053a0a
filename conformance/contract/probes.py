"""Watching an implementation from the inside without its cooperation.

:class:`AttentionRecorder` records every softmax (its input scores, axis and output weights) and every
scaled-dot-product-attention kernel run while it is active, so the checks see the attention weights even when
an implementation does not return them. It is a ``TorchDispatchMode`` (the ATen level) rather than a
``torch.overrides.TorchFunctionMode``: a function mode sees a composite such as
``F.multi_head_attention_forward`` as one call and nothing of the softmax inside it. :class:`SoftmaxWatch` is that
function mode, for watching a whole model's forward pass cheaply.
:func:`set_identity_projections` turns a multi-head attention's projections into identities so that the
per-head queries and keys are known slices of the inputs.
:func:`dropout_control` puts every dropout under the checker's control: each one drops everything or nothing.
:func:`ignores_input_scale` tells a normalization by what it does, whatever its class is called, and
:func:`is_kernel_one_convolution` a convolution that is a position-wise linear map.
"""
import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from conformance.contract.shared_builds import write


@contextlib.contextmanager
def hooked(handles):
    """Hooks (``register_forward_hook`` and the like handles) removed when the block ends, whatever happens in it."""
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


DROPOUTS = {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, torch.dropout, torch.dropout_, torch.feature_dropout}
"""The dropout functions (``nn.Dropout`` calls ``F.dropout``): ``(input, p, training/train, inplace)``."""
ATTENTION_DROPOUT = {F.scaled_dot_product_attention: 4, F.multi_head_attention_forward: 10}
"""torch's attention functions that drop out the attention weights themselves: the position of ``dropout_p``."""


def argument(args, kwargs, index, names, default):
    """An argument given by position ``index`` or by one of ``names``."""
    if len(args) > index:
        return args[index]
    return next((kwargs[n] for n in names if n in kwargs), default)


class DropoutControl(TorchFunctionMode):
    """Every dropout under control (a ``TorchFunctionMode``, so ``nn.Dropout``, ``F.dropout`` and ``torch.dropout``
    alike). With ``drop``, a training-mode dropout of a tensor ``width`` wide run inside a watched layer (``depth``
    > 0) outputs zeros, whatever its rate: it drops everything (counted in ``dropped``; where a dropout acts is what
    is probed, its rate is checked apart). Every other dropout, and the attention-weight dropout torch's attention
    functions take as ``dropout_p``, is the identity: it drops nothing."""

    def __init__(self, width, drop):
        super().__init__()
        self.width, self.drop, self.depth, self.dropped, self.outputs = width, drop, 0, 0, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in DROPOUTS:
            return self.dropout(func, args, kwargs)
        index = ATTENTION_DROPOUT.get(func)
        if index is not None:
            if len(args) > index:
                args = args[:index] + (0.0,) + args[index + 1:]
            else:
                kwargs["dropout_p"] = 0.0
        return func(*args, **kwargs)

    def dropout(self, func, args, kwargs):
        x = argument(args, kwargs, 0, ("input",), None)
        training = argument(args, kwargs, 2, ("training", "train"), True)
        inplace = func is torch.dropout_ or argument(args, kwargs, 3, ("inplace",), False)
        if self.drop and self.depth and training and x.shape[-1:] == (self.width,):
            self.dropped += 1
            return x.zero_() if inplace else torch.zeros_like(x)
        return x if inplace else x.clone()

    def enter(self, module, args):
        self.depth += 1

    def leave(self, path, module, args, output):
        self.depth -= 1
        out = output[0] if isinstance(output, (tuple, list)) and output else output
        if isinstance(out, torch.Tensor):
            self.outputs.append((path, out.detach().clone()))


@contextlib.contextmanager
def dropout_control(layers, width, drop):
    """A :class:`DropoutControl` active for the block, watching ``layers`` (``[(path, module)]``): the outputs of
    each call of them are kept in ``outputs`` as ``(path, output)``, in call order."""
    control, handles = DropoutControl(width, drop), []
    with hooked(handles), control:
        for path, layer in layers:
            handles += [layer.register_forward_pre_hook(control.enter),
                        layer.register_forward_hook(lambda *call, path=path: control.leave(path, *call))]
        yield control


SOFTMAX_OPS = {torch.ops.aten._softmax.default, torch.ops.aten._safe_softmax.default, torch.ops.aten.softmax.int}


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


class AttentionRecorder(TorchDispatchMode):
    """Records softmax and scaled-dot-product-attention kernels (detached copies of their tensors)."""

    def __init__(self):
        super().__init__()
        self.softmaxes, self.sdpa_calls = [], []

    @classmethod
    def _should_skip_dynamo(cls):
        """False: torch would otherwise wrap ``__torch_dispatch__`` to keep its compiler out of it, importing the
        compiler (``torch._dynamo``, about 2 s) at the first call of every process; nothing compiles it here."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in SOFTMAX_OPS:
            scores = args[0]
            self.softmaxes.append(SoftmaxCall(scores.detach().clone(), args[1] % scores.dim(), out.detach().clone()))
        elif "scaled_dot_product" in func.name():
            self.sdpa_calls.append(SdpaCall(args[0].detach(), args[1].detach(), {"scale": kwargs.get("scale")}))
        return out

    def attention_softmaxes(self, lq, lk):
        """Softmax calls whose scores end in (Lq, Lk) or, with query and key swapped, (Lk, Lq)."""
        return [c for c in self.softmaxes if c.scores.dim() >= 2 and tuple(c.scores.shape[-2:]) in ((lq, lk), (lk, lq))]


class SoftmaxWatch(TorchFunctionMode):
    """The softmaxes (``torch.softmax``, ``F.softmax``, ``Tensor.softmax``) and ``F.scaled_dot_product_attention``
    calls made while it is active, recorded as :class:`AttentionRecorder` records them: a function mode, many times
    cheaper than a dispatch mode, for watching a whole model run (it does not see inside torch's own composites)."""
    SOFTMAXES = {torch.softmax, F.softmax, torch.Tensor.softmax}

    def __init__(self):
        super().__init__()
        self.softmaxes, self.sdpa_calls = [], []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in self.SOFTMAXES and isinstance(argument(args, kwargs, 1, ("dim",), None), int):
            scores = args[0]
            self.softmaxes.append(SoftmaxCall(scores.detach().clone(), argument(args, kwargs, 1, ("dim",), None)
                                              % scores.dim(), out.detach().clone()))
        elif func is F.scaled_dot_product_attention:
            self.sdpa_calls.append(SdpaCall(args[0].detach(), args[1].detach(),
                                            {"scale": argument(args, kwargs, 6, ("scale",), None)}))
        return out


def gathered(calls, batch, heads):
    """The last of the softmax ``calls``; where each is one head's (Lq, Lk) scores of one sample (code without a batch
    axis called one sample at a time, its heads in a loop), the last ``batch`` x ``heads`` of them gathered in that
    order as one call over (batch, heads, Lq, Lk) scores."""
    last = calls[-1]
    recent = calls[-batch * heads:]
    if last.scores.dim() != 2 or len(recent) < batch * heads or any(
            c.scores.shape != last.scores.shape or c.dim != last.dim for c in recent):
        return last
    shape = (batch, heads, *last.scores.shape)
    return SoftmaxCall(torch.stack([c.scores for c in recent]).reshape(shape), last.dim + 2,
                       torch.stack([c.weights for c in recent]).reshape(shape))


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


def identity_weight(shape, d_model, d_k, index, head_major=False):
    """An identity-like value for a projection weight of ``shape``; None if the shape is not a projection.

    (d, d): identity; (k d, d): k stacked identities (packed q/k/v), or with ``head_major`` the k parts packed
    head by head (each head's rows of every part together, the output reshaped to (h, k d_k) and then split);
    (d_k, d): the rows of head ``index``; (d_k, d_k): identity (one projection applied to every head's slice).
    """
    if shape == (d_k, d_k):
        return torch.eye(d_k)
    if len(shape) != 2 or shape[1] != d_model:
        return None
    rows = shape[0]
    if rows % d_model == 0 and head_major:
        eye = torch.eye(d_model)
        return torch.cat([eye[i:i + d_k].repeat(rows // d_model, 1) for i in range(0, d_model, d_k)])
    if rows % d_model == 0:
        return torch.eye(d_model).repeat(rows // d_model, 1)
    if rows == d_k:
        return torch.eye(d_model)[index * d_k:(index + 1) * d_k]
    return None


@torch.no_grad()
def set_identity_projections(module, d_model, d_k, head_major=False):
    """Set every projection of an attention module to an identity (per-head slices in registration order,
    three per head for q, k, v; packed ones as :func:`identity_weight` lays them out) and every bias to zero;
    returns False when some parameter does not fit."""
    per_head = 0
    for name, p in module.named_parameters():
        if p.dim() == 1:
            write(p, torch.zeros_like(p))
            continue
        value = identity_weight(tuple(p.shape), d_model, d_k, per_head // 3, head_major)
        if value is None:
            return False
        per_head += p.shape[0] == d_k != d_model
        write(p, value)
    return True


def split_heads(x, h):
    """(batch, length, d_model) -> (batch, h, length, d_k), the paper's head layout."""
    b, n, d = x.shape
    return x.view(b, n, h, d // h).transpose(1, 2)


def ignores_input_scale(module, x):
    """Whether ``module``, called in eval mode on ``x`` and on ``4 x``, gives the same output of ``x``'s shape for
    both (§3.1: normalizing divides the scale out; a bias or a gain does not). Its modes are left as they were; a
    module that cannot be called on one tensor like ``x`` does not."""
    modes = [(m, m.training) for m in module.modules()]
    try:
        module.eval()
        with torch.no_grad():
            one, four = module(x), module(4 * x)
        return isinstance(one, torch.Tensor) and isinstance(four, torch.Tensor) and one.shape == x.shape \
            and bool(torch.allclose(one, four, rtol=1e-3, atol=1e-4))
    except Exception:  # the module's own code, on an input it was not written for
        return False
    finally:
        for m, training in modes:
            m.training = training


def is_kernel_one_convolution(module):
    """Whether ``module`` is a convolution of kernel size 1 over a sequence: a linear map applied at each position
    alike (§3.3, "two convolutions with kernel size 1")."""
    return isinstance(module, torch.nn.Conv1d) and tuple(module.kernel_size) == (1,)
