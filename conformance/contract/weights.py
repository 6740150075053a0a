"""A candidate's parameters, found without knowing its attribute names, and the reference's weights mapped onto it.

Candidates are arbitrary modules, so structure is discovered generically:

* a *norm-like* module is a ``torch.nn.LayerNorm`` / ``RMSNorm``, or a module whose class name contains "norm" and
  whose own parameters are all vectors (no parameterised children);
* the *layers* of a stack are the items of the outermost ``ModuleList`` / ``Sequential`` holding ``N`` modules of one
  class (``torch.nn.TransformerEncoder.layers``, the reference's ``Encoder.layers``, ...);
* :func:`map_reference_weights` copies the reference's parameters onto a candidate by name, or by registration order
  allowing a packed parameter (``torch.nn.MultiheadAttention.in_proj_weight = cat(W_q, W_k, W_v)``).
"""
import math
import re

import torch
import torch.nn as nn

from conformance.contract.probes import ignores_input_scale, is_kernel_one_convolution
from conformance.contract.shared_builds import write


NORM_TYPES = tuple(t for t in (nn.LayerNorm, getattr(nn, "RMSNorm", None)) if t is not None)
BIAS_NAME = re.compile(r"(bias|beta|shift|offset)|(^|_)b(_?\d*)$")


# -- norm-like modules -----------------------------------------------------------------------------
def is_norm_module(module):
    """Whether ``module`` normalizes (§3.1's LayerNorm, or one like it): a torch norm, or a module of vector
    parameters only (a gain, a bias) with no parameterised children, named a norm or found to behave as one
    (:func:`ignores_input_scale`), whatever its class is called (``LN``, ``Standardize``)."""
    if isinstance(module, NORM_TYPES):
        return True
    own = list(module.parameters(recurse=False))
    if any(p.dim() != 1 for p in own) or any(any(True for _ in child.parameters()) for child in module.children()):
        return False
    if "norm" in type(module).__name__.lower():
        return True
    return bool(own) and len({p.numel() for p in own}) == 1 and ignores_input_scale(module, probe_input(own[0]))


def probe_input(parameter):
    """A random input with features of ``parameter``'s size (6 for a scalar), in its dtype and on its device."""
    features = parameter.numel() if parameter.numel() > 1 else 6
    x = torch.randn(2, 3, features, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return x.to(device=parameter.device, dtype=parameter.dtype)


def norm_modules(module):
    """``[(qualified name, module)]`` of the norm-like modules, in registration order."""
    return [(name, m) for name, m in module.named_modules() if is_norm_module(m)]


EPS_LIMIT = 1e-3
"""The largest eps a LayerNorm of the model may add to the variance: activations of unit variance are then
normalized to within 0.05 % (the common values are 1e-5 and 1e-6). The paper leaves eps free below it."""


def norm_eps(module):
    """``[(path, eps)]`` of every norm-like module inside ``module`` whose eps can be read."""
    found = [(path or "(itself)", m.eps if isinstance(m, NORM_TYPES) else module_eps(m))
             for path, m in norm_modules(module)]
    return [(path, eps) for path, eps in found if eps is not None]


def norm_parameter_ids(module):
    return {id(p) for _, m in norm_modules(module) for p in m.parameters()}


def is_bias_name(name):
    return bool(BIAS_NAME.search(name.rsplit(".", 1)[-1].lower()))


def reset_norms(module):
    """Give every norm-like module unit gain and zero bias (by parameter name: bias/beta/b_2 -> 0, else 1)."""
    with torch.no_grad():
        for _, m in norm_modules(module):
            for name, p in m.named_parameters():
                p.fill_(0.0 if is_bias_name(name) else 1.0)


def zero_non_norm_parameters(module, bias_value=None, d_model=None):
    """Zero every parameter outside the norm-like modules, so every sub-layer outputs 0. With ``bias_value`` (a
    ``d_model`` vector), the vector parameters of size ``d_model`` are set to it instead: every projection's input
    is then multiplied by a zero matrix, so each sub-layer outputs its last bias, ``bias_value``.
    Returns the number of parameters set to ``bias_value``."""
    norm_ids, set_to_value = norm_parameter_ids(module), 0
    with torch.no_grad():
        for p in module.parameters():
            if id(p) in norm_ids:
                continue
            if bias_value is not None and p.dim() == 1 and p.numel() == d_model:
                write(p, bias_value.to(p.dtype))
                set_to_value += 1
            else:
                write(p, torch.zeros_like(p))
    return set_to_value


def sub_layer_modules(layer):
    """``[(name, module)]``: the layer's children with parameters outside its norm modules (its attentions and
    feed-forward network), in registration order; through wrappers holding all of them in one child."""
    norm_ids = norm_parameter_ids(layer)
    while True:
        children = [(name, child) for name, child in layer.named_children()
                    if any(id(p) not in norm_ids for p in child.parameters())]
        if len(children) != 1:
            return children
        layer = children[0][1]


def perturb_norms(module, amount=0.5):
    with torch.no_grad():
        for _, m in norm_modules(module):
            for p in m.parameters():
                p.add_(amount)


# -- stacks ----------------------------------------------------------------------------------------
def items(container):
    """The items of a ModuleList / Sequential, repeated objects included (``[layer] * N``)."""
    return [m for m in container._modules.values() if m is not None]


def layer_lists(module, n):
    """``[(name, [layer, ...])]``: the outermost ModuleList / Sequential containers holding ``n`` parameterised
    modules of one class (the layers of a stack; two of them in a whole model)."""
    found = []
    for name, m in module.named_modules():
        if not isinstance(m, (nn.ModuleList, nn.Sequential)):
            continue
        layers = items(m)
        if len(layers) != n or len({type(x) for x in layers}) != 1 or not any(True for _ in layers[0].parameters()):
            continue
        if any(name == outer or name.startswith(outer + ".") for outer, _ in found if outer):
            continue
        found.append((name, layers))
    return found


def inside(name, prefix):
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


# -- reference weights -----------------------------------------------------------------------------
def served(module):
    """Whether ``module`` is a role served from another process (grading's judge, which this module does not
    import): its parameters live there, and the reference's weights are mapped there too."""
    return callable(getattr(type(module), "take_reference_weights", None))


def parameter_shapes(module, count=6):
    """The shapes of the module's first ``count`` parameters (all of them for None; for a module judged apart, as the
    submission's side reported them when the reference's weights were mapped)."""
    if served(module):
        return module.parameter_shapes[:count]
    return [tuple(p.shape) for p in module.parameters()][:count]


def map_reference_weights(candidate, reference):
    """Copy the parameters of ``reference`` (a module of the reference implementation) onto ``candidate``.

    * ``"exact"``: same parameter names and shapes; copied by name.
    * ``"by_order"``: candidate parameters taken in registration order, each filled from the next reference
      parameters of its kind (norm or not) and rank, with its trailing shape; one candidate parameter may be the
      concatenation along dim 0 of several of them (a packed ``in_proj_weight``; parameters of another rank in
      between are left for later). Candidate norm parameters left without a counterpart (a final LayerNorm the
      reference lacks) keep their values.
    * ``None``: no such mapping (nothing is copied).
    """
    if served(candidate):  # judged apart: the copy is made on the submission's side
        return candidate.take_reference_weights(reference)
    matrices = kernel_one_matrices(candidate)
    cand = [(n, matrices.get(id(p), p)) for n, p in candidate.named_parameters()]
    ref = list(reference.named_parameters())
    if [(n, p.shape) for n, p in cand] == [(n, p.shape) for n, p in ref]:
        _copy([(c, [r]) for (_, c), (_, r) in zip(cand, ref)])
        return "exact"
    cand_norms, ref_norms = norm_parameter_ids(candidate), norm_parameter_ids(reference)
    plan = _plan_by_order([(p, id(p) in cand_norms) for _, p in cand], [(p, id(p) in ref_norms) for _, p in ref])
    if plan is None:
        return None
    _copy(plan)
    return "by_order"


def kernel_one_matrices(module):
    """``{id(weight): its (out, in) view}`` for each ungrouped convolution of kernel size 1 in ``module``, filled as
    the reference's matrix is."""
    return {id(m.weight): m.weight.view(m.out_channels, m.in_channels) for m in module.modules()
            if is_kernel_one_convolution(m) and m.groups == 1}


def pinned_by_shapes(candidate, reference):
    """Whether a by-order mapping of ``reference``'s parameters onto ``candidate`` can only have copied each to its
    counterpart: every candidate weight filled (none kept fresh), and among the reference's parameters of one kind
    (norm or not) no two of the same shape and no square matrix, so none could be taken for another or read
    transposed (a feed-forward network, d_ff != d_model; not attention's four d_model x d_model projections, nor a
    LayerNorm's gain and bias)."""
    if sum(math.prod(shape) for shape in parameter_shapes(candidate, count=None)) != \
            sum(p.numel() for p in reference.parameters()):
        return False
    norms, seen = norm_parameter_ids(reference), set()
    for p in reference.parameters():
        kind = (id(p) in norms, tuple(p.shape))
        if kind in seen or (p.dim() == 2 and p.shape[0] == p.shape[1]):
            return False
        seen.add(kind)
    return True


def _plan_by_order(cand, ref):
    pending, plan = list(ref), []
    for c, is_norm in cand:
        take = _gather(c, is_norm, pending)
        if not take:
            if is_norm and not any(n for _, n in pending):
                continue  # an extra norm: keeps its (fresh) values
            return None
        plan.append((c, [pending[i][0] for i in take]))
        pending = [r for i, r in enumerate(pending) if i not in take]
    return None if pending else plan


def _gather(c, is_norm, pending):
    """Indices of the next pending tensors of ``c``'s kind and rank (others skipped) whose dim-0 sizes add up to
    ``c.shape[0]``, all with ``c``'s trailing shape; [] if they do not."""
    take, total, size = [], 0, (c.shape[0] if c.dim() else 1)
    for i, (r, r_is_norm) in enumerate(pending):
        if r.dim() != c.dim() or r_is_norm != is_norm:
            continue
        if r.shape[1:] != c.shape[1:]:
            return []
        take.append(i)
        total += r.shape[0] if r.dim() else 1
        if total >= size:
            break
    return take if total == size else []


def _copy(plan):
    for c, sources in plan:
        write(c, torch.cat([s.detach().to(device=c.device, dtype=c.dtype) for s in sources], dim=0)
              if c.dim() else sources[0].detach().to(device=c.device, dtype=c.dtype))


EPS_NAMES = ("eps", "epsilon", "variance_epsilon", "variance_eps", "var_eps", "layer_norm_eps", "norm_eps")


def module_eps(module):
    """eps read from an attribute with a usual name (the module or a child), else None."""
    for m in module.modules():
        for name in EPS_NAMES:
            value = getattr(m, name, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
    return None


def adopt_eps(reference, eps):
    """Give the norms of ``reference`` (a reference block) an ``eps`` the candidate computes with, so
    that a comparison of outputs is not a comparison of a value the paper leaves open; nothing for None."""
    if eps is not None:
        for _, m in norm_modules(reference):
            if isinstance(getattr(m, "eps", None), float):
                m.eps = eps
    return reference
