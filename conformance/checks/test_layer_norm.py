"""Layer normalization (Ba et al., 2016, cited in §3.1; ``torch.nn.LayerNorm`` semantics): over the features of each
position, LN(x) = gain * (x - mean) / sqrt(var + eps) + bias with the biased variance and eps inside the root.

The gain and bias are found without their names being known: the module's 1-D parameters of size d_model (a bias
by its name: bias, beta, b_2, ...; otherwise in registration order, gain first). eps is inferred from the outputs:
for each position the output is c * (x - mean), and each way of writing the denominator gives an implied eps
(1/c^2 - var inside the root, 1/c - std outside it, 1/c - var without the root) that is the same at every position
only for the formula the implementation uses.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given

from conformance.contract import strategies
from conformance.contract.harness import Case, difference, output_tensor
from conformance.contract.verdicts import Deviation, Failure
from conformance.contract.weights import is_bias_name, module_eps

ROLE = "layer_norm"
DEFAULT_EPS = 1e-5


def ln_case(impl, device, drawn):
    """At least two sequences of at least two positions, so the batch, sequence and feature axes differ."""
    case = Case(impl, device=device, **drawn)
    return case.replace(batch=max(2, case.batch), tgt_len=max(2, case.tgt_len))


def normalize(module, x):
    with torch.no_grad():
        return output_tensor(module(x), ROLE).to(torch.float64).cpu()


def affine_parameters(module, d):
    """``(gain, bias, scalars)``: the 1-D parameters of size d (either may be None) and the scalar parameters."""
    named = list(module.named_parameters())
    vectors = [(n, p) for n, p in named if p.dim() == 1 and p.numel() == d]
    scalars = [(n, p) for n, p in named if p.numel() == 1 and p.dim() <= 1]
    biases = [(n, p) for n, p in vectors if is_bias_name(n)]
    gains = [(n, p) for n, p in vectors if not is_bias_name(n)]
    if not biases and len(gains) == 2:  # no telling names: registration order, gain first
        gains, biases = gains[:1], gains[1:]
    gain = gains[0][1] if gains else None
    bias = biases[0][1] if biases else None
    return gain, bias, scalars


@torch.no_grad()
def reset_affine(module, d):
    """Unit gain and zero bias (vectors and scalars alike)."""
    gain, bias, scalars = affine_parameters(module, d)
    for p in (gain,):
        if p is not None:
            p.fill_(1.0)
    if bias is not None:
        bias.zero_()
    for name, p in scalars:
        p.fill_(0.0 if is_bias_name(name) else 1.0)


def inputs(case, scale, shift=0.0):
    """(batch, length, d_model) rows of standard deviation about ``scale`` (spread over [scale / 2, 3 scale / 2] so
    that the positions' variances differ), each position shifted by an offset in [-shift, shift]."""
    b, n, d = case.batch, case.tgt_len, case.cfg.d_model
    spread = torch.linspace(0.5, 1.5, b * n, dtype=torch.float64)[torch.randperm(b * n, generator=case.generator)]
    offsets = (torch.rand(b * n, generator=case.generator, dtype=torch.float64) * 2 - 1) * shift
    x = torch.randn(b * n, d, generator=case.generator, dtype=torch.float64) * (scale * spread)[:, None] \
        + offsets[:, None]
    return x.reshape(b, n, d).to(case.device, case.dtype)


def statistics(x, unbiased):
    centred = x - x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=unbiased)
    return centred, var, var.sqrt()


# the denominator forms: name -> implied eps from the per-position factor c and the variance / std
FORMS = {
    "inside": lambda c, var, std: 1 / c ** 2 - var,
    "outside": lambda c, var, std: 1 / c - std,
    "variance": lambda c, var, std: 1 / c - var,
}
FORM_SCALE = {"inside": lambda c: 1 / c ** 2, "outside": lambda c: 1 / c, "variance": lambda c: 1 / c}


def factors(x, y, case):
    """Per-position c with y = c * (x - mean), or None when the output is no such multiple."""
    centred = x - x.mean(-1, keepdim=True)
    c = (y * centred).sum(-1) / (centred * centred).sum(-1)
    if difference(y, c[..., None] * centred, case, atol=10 * case.atol, rtol=1e-4) is not None:
        return None
    return c


def fits(c, x, form, unbiased):
    """The eps implied by ``form`` when it is the same at every position (within 1e-4 of the denominator), else
    None."""
    if (c <= 0).any():
        return None
    _, var, std = statistics(x, unbiased)
    eps = FORMS[form](c, var, std)
    spread = (eps.max() - eps.min()).item()
    if spread > 1e-4 * FORM_SCALE[form](c).max().item():
        return None
    return eps.median().item()


def wrong_axis(x, y, case):
    """The axes a normalization over which gives ``y`` (e.g. the batch axis), else None."""
    for axes, words in (((0,), "the batch axis"), ((1,), "the sequence axis"), ((1, 2), "the sequence and "
                        "feature axes together"), ((0, 1, 2), "the whole tensor")):
        mean = x.mean(axes, keepdim=True)
        var = x.var(axes, keepdim=True, unbiased=False)
        for eps in (DEFAULT_EPS, 1e-6):
            if difference(y, (x - mean) / torch.sqrt(var + eps), case, atol=1e-3, rtol=1e-3) is None:
                return words
    return None


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_normalizes_each_position(impl, device, component, drawn):
    """Ba et al. (2016), §3.1: with unit gain and zero bias each position's features are normalized to mean 0 and
    (biased) variance 1: y = (x - mean) / sqrt(var + eps), eps inside the square root (torch.nn.LayerNorm)."""
    case = ln_case(impl, device, drawn)
    module = case.build(component)
    d = case.cfg.d_model
    reset_affine(module, d)
    requirement = ("y = (x - mean) / sqrt(var + eps) over the d_model features of each position, biased variance, "
                   f"eps small and inside the square root (Ba et al. 2016, §3.1; d_model={d})")
    # 1. rows of standard deviation ~ 3: eps is negligible; the axis, the centring and the power of the variance show
    x = inputs(case, 3.0, shift=3.0)
    y, xs = normalize(module, x), x.to(torch.float64).cpu()
    c = factors(xs, y, case)
    if c is None:
        axis = wrong_axis(xs, y, case)
        if axis:
            raise Failure(f"{ROLE}.normalizes_over_wrong_axis", requirement,
                          f"the output is normalized over {axis}, not over the features of each position")
        spread = torch.sqrt(xs.var(-1, keepdim=True, unbiased=False) + DEFAULT_EPS)
        if difference(y, xs / spread, case, atol=1e-3, rtol=1e-3) is None:
            raise Failure(f"{ROLE}.mean_not_subtracted", requirement, "y = x / std(x): the mean is not subtracted")
        means, variances = y.mean(-1), y.var(-1, unbiased=False)
        raise Failure(f"{ROLE}.not_normalized", requirement,
                      f"outputs that are no per-position multiple of x - mean: means in [{means.min().item():.3g}, "
                      f"{means.max().item():.3g}], variances in [{variances.min().item():.3g}, "
                      f"{variances.max().item():.3g}]")
    found = {(form, unbiased): fits(c, xs, form, unbiased) for form in FORMS for unbiased in (False, True)}
    found = {key: eps for key, eps in found.items() if eps is not None}
    var_min = xs.var(-1).min().item()
    small = {key: eps for key, eps in found.items() if abs(eps) <= 1e-2 * var_min and key[0] != "variance"}
    if any(not unbiased for _, unbiased in small):
        unbiased = False
    elif small:
        unbiased = True
    elif any(form == "variance" for form, _ in found):
        raise Failure(f"{ROLE}.divides_by_variance", requirement,
                      "y = (x - mean) / (var + eps): the output variance is 1 / var, not 1 (the square root is "
                      "missing)")
    elif found:
        (form, unbiased), eps = next(iter(found.items()))
        cause = "eps_is_d_model" if math.isclose(eps, d, rel_tol=1e-2) else "eps_too_large"
        raise Failure(f"{ROLE}.{cause}", requirement,
                      f"eps = {eps:.6g} (d_model = {d}), from the output variances var / (var + eps) on inputs of "
                      "variance 2 to 20" + (": the d_model argument bound to eps" if cause == "eps_is_d_model" else ""))
    else:
        variances = y.var(-1, unbiased=False)
        raise Failure(f"{ROLE}.not_normalized", requirement,
                      f"per-position output variances in [{variances.min().item():.4g}, {variances.max().item():.4g}] "
                      "that fit no (x - mean) / f(var) + eps form")
    # 2. rows of standard deviation ~ 1e-3: eps dominates the variance; where it is added shows
    x = inputs(case, 1e-3)
    y, xs = normalize(module, x), x.to(torch.float64).cpu()
    c = factors(xs, y, case)
    if c is None:
        raise Failure(f"{ROLE}.small_variance_not_normalized", requirement,
                      "outputs for inputs of standard deviation ~1e-3 that are no per-position multiple of x - mean")
    inside, outside = fits(c, xs, "inside", unbiased), fits(c, xs, "outside", unbiased)
    if inside is None and outside is not None and unbiased:
        raise Deviation(f"{ROLE}.unbiased_std_plus_eps", requirement,
                        f"y = (x - mean) / (std + eps) with the unbiased std and eps = {outside:.3g}: the Annotated "
                        "Transformer's LayerNorm (torch.std's default, eps outside the root)")
    if inside is None and outside is not None:
        raise Failure(f"{ROLE}.eps_outside_sqrt", requirement,
                      f"y = (x - mean) / (std + eps) with eps = {outside:.3g}: on inputs of standard deviation "
                      "~1e-3 the outputs follow std + eps, not sqrt(var + eps)")
    if inside is None:
        variances = y.var(-1, unbiased=False)
        raise Failure(f"{ROLE}.eps_wrong", requirement,
                      "on inputs of standard deviation ~1e-3 the output variances "
                      f"[{variances.min().item():.4g}, {variances.max().item():.4g}] fit neither sqrt(var + eps) nor "
                      "std + eps with one eps")
    if unbiased:
        raise Deviation(f"{ROLE}.unbiased_variance", requirement,
                        f"the unbiased variance (divided by d_model - 1 = {d - 1}): output variance (n-1)/n = "
                        f"{(d - 1) / d:.4g} (torch.var's default; Ba et al. and torch.nn.LayerNorm use the biased one)")


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_invariant_to_shift_and_scale(impl, device, component, drawn):
    """Ba et al. (2016): the normalization removes each position's mean and scale: LN(a x + b) = LN(x) for a > 0
    (a in [0.5, 4]) and b per position (inputs of standard deviation ~10, where eps is negligible)."""
    case = ln_case(impl, device, drawn)
    module = case.build(component)
    b, n = case.batch, case.tgt_len
    x = inputs(case, 10.0)
    a = (0.5 + 3.5 * torch.rand(b, n, 1, generator=case.generator, dtype=torch.float64)).to(case.device, case.dtype)
    shift = (10 * torch.rand(b, n, 1, generator=case.generator, dtype=torch.float64) - 5).to(case.device, case.dtype)
    y = normalize(module, x)
    atol = max(case.atol, 2e-5)
    shifted = difference(normalize(module, x + shift), y, case, atol=atol, rtol=1e-4)
    if shifted:
        raise Failure(f"{ROLE}.not_shift_invariant", "LN(x + b) = LN(x) for a shift b per position (the mean is "
                      "subtracted; Ba et al. 2016)", f"after adding b in [-5, 5] per position: {shifted}")
    ya = normalize(module, a * x)
    scaled = difference(ya, y, case, atol=atol, rtol=1e-4)
    if scaled:
        a64 = a.to(torch.float64).cpu()
        words = ""
        if difference(ya, y / a64, case, atol=1e-3, rtol=1e-3) is None:
            words = ": LN(a x) = LN(x) / a, the output scales like 1 / std (divided by the variance)"
        raise Failure(f"{ROLE}.not_scale_invariant", "LN(a x) = LN(x) for a > 0 per position (divided by the "
                      "standard deviation; Ba et al. 2016)", f"after scaling by a in [0.5, 4] per position: "
                      f"{scaled}{words}")


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_agrees_with_functional_layer_norm(impl, device, component, drawn):
    """Ba et al. (2016), §3.1: a per-feature gain and bias, y = gain * (x - mean) / sqrt(var + eps) + bias, as
    ``torch.nn.functional.layer_norm`` computes it (random gain and bias; inputs where eps is negligible)."""
    case = ln_case(impl, device, drawn)
    module = case.build(component)
    d = case.cfg.d_model
    gain, bias, scalars = affine_parameters(module, d)
    eps = module_eps(module) or DEFAULT_EPS
    g = 1 + torch.rand(d, generator=case.generator, dtype=torch.float64)
    beta = torch.randn(d, generator=case.generator, dtype=torch.float64)
    x = inputs(case, 10.0, shift=3.0)
    xs = x.to(torch.float64).cpu()
    atol = 1e-4  # eps and its placement (negligible here, ~1e-6) are test_normalizes_each_position's
    requirement = (f"gain * (x - mean) / sqrt(var + eps) + bias with a gain and a bias of d_model={d} features "
                   "(F.layer_norm; Ba et al. 2016, §3.1)")
    if gain is None and bias is None:
        if scalars:
            with torch.no_grad():
                for name, p in scalars:
                    p.fill_(-0.5 if is_bias_name(name) else 1.5)
            sg = {is_bias_name(n): 1.5 if not is_bias_name(n) else -0.5 for n, _ in scalars}
            expected = F.layer_norm(xs, (d,), eps=eps) * sg.get(False, 1.0) + sg.get(True, 0.0)
            differs = difference(normalize(module, x), expected, case, atol=atol, rtol=1e-4)
            raise Deviation(f"{ROLE}.scalar_gain", requirement,
                            f"scalar gain / bias parameters {[(n, tuple(p.shape)) for n, p in scalars]}: one value "
                            "for all features" + ("" if differs is None else " (the normalization itself differs "
                                                  "too: see normalizes_each_position)"))
        y = normalize(module, x)
        if difference(y, F.layer_norm(xs, (d,), eps=eps), case, atol=atol, rtol=1e-4) is None:
            raise Deviation(f"{ROLE}.no_gain_or_bias", requirement, "no learned gain or bias "
                            "(elementwise_affine=False)")
        raise Failure(f"{ROLE}.gain_and_bias_not_found", requirement,
                      f"no 1-D parameters of size {d}: {[(n, tuple(p.shape)) for n, p in module.named_parameters()]}")
    with torch.no_grad():
        if gain is not None:
            gain.copy_(g.to(gain))
        if bias is not None:
            bias.copy_(beta.to(bias))
    g = g if gain is not None else None
    beta = beta if bias is not None else None
    y = normalize(module, x)
    expected = F.layer_norm(xs, (d,), g, beta, eps)
    wrong = difference(y, expected, case, atol=atol, rtol=1e-4)
    if wrong is None:
        if bias is None:
            raise Deviation(f"{ROLE}.no_bias", requirement, "a gain but no bias (bias=False)")
        return
    normalized = F.layer_norm(xs, (d,), eps=eps)
    if difference(y, normalized, case, atol=atol, rtol=1e-4) is None:
        raise Failure(f"{ROLE}.gain_and_bias_not_applied", requirement,
                      f"{wrong}; the output is the plain normalization: the gain and bias are never applied")
    if g is not None and beta is not None and \
            difference(y, normalized * beta + g, case, atol=atol, rtol=1e-4) is None:
        raise Failure(f"{ROLE}.gain_and_bias_swapped", requirement,
                      f"{wrong}; y = bias * x_hat + gain: the gain and the bias are exchanged")
    centred, var, _ = statistics(xs, True)
    unbiased = centred / torch.sqrt(var[..., None] + eps) * (1 if g is None else g) + (0 if beta is None else beta)
    if difference(y, unbiased, case, atol=1e-3, rtol=1e-3) is None:
        raise Deviation(f"{ROLE}.unbiased_variance", requirement,
                        f"{wrong}; the output matches the unbiased variance (divided by d_model - 1)")
    raise Failure(f"{ROLE}.disagrees_with_functional", requirement, wrong)

