"""Positional encoding (§3.5; dropout §5.4): fixed sinusoids PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)), added to the input, sliced to its length, not trained.

The table is observed as the module's output on zeros (eval mode) and compared in float64 with the closed form
(``reference.transformer.sinusoidal_table``) at tolerance 1e-3, so tables computed in float32 pass. The paper's
d_model is even (the columns come in sin/cos pairs), so these checks draw an even d_model.
"""
import copy
import math

import pytest
import torch
from hypothesis import given

from conformance.contract import strategies
from conformance.contract.harness import (TABLE_ATOL, Case, canonical_inputs, difference, if_the_checker_sets,
                                          output_tensor, seed_generators)
from conformance.contract.probes import constant_ratio, hooked
from conformance.contract.verdicts import Deviation, Failure, note_on_pass
from reference.transformer import sinusoidal_table

ROLE = "positional_encoding"
MISTAKE_ATOL = 2e-2
"""Known wrong tables are recognised more loosely: a mistake such as pos * 10000^(2i/d) gives angles in the
thousands, whose float32 sines are only good to a few thousandths."""


def pe_case(impl, device, drawn):
    case = Case(impl, device=device, **drawn)
    if case.cfg.d_model % 2:
        case = case.with_config(d_model=case.cfg.d_model + 1)
    return case


def encode(module, x):
    with torch.no_grad():
        return output_tensor(module(x), ROLE)


def zeros(case, length, batch=None):
    return torch.zeros(batch or case.batch, length, case.cfg.d_model, dtype=case.dtype, device=case.device)


def observed_table(case, module, length=None):
    """The module's output on zeros of length ``length`` (max_len by default), float64 on the CPU, for a batch of
    ``length`` sequences (so that a table sliced with the batch size, checked by test_every_length_up_to_max_len,
    does not hide the values)."""
    length = length or case.cfg.max_len
    out = encode(module, zeros(case, length, batch=length))
    expected = (length, length, case.cfg.d_model)
    if tuple(out.shape) != expected:
        raise Failure(f"{ROLE}.shape", f"an output of the input's shape {expected} (§3.5)", f"{tuple(out.shape)}")
    return out.detach().to(torch.float64).cpu()


# -- known mistakes in the table ----------------------------------------------------------------------------------
def sinusoids(length, d, exponents=None, even="sin", odd="cos", start=0, base=10000.0, layout="interleaved"):
    """A table of sinusoids with the given frequency exponents (default the paper's 2i/d), functions and layout."""
    pos = torch.arange(start, start + length, dtype=torch.float64)[:, None]
    pairs = (d + 1) // 2
    exponents = torch.arange(0, d, 2, dtype=torch.float64) / d if exponents is None else exponents
    angle = pos / torch.pow(base, exponents)[None, :pairs]
    f = {"sin": torch.sin, "cos": torch.cos, "zero": torch.zeros_like}
    table = torch.zeros(length, d, dtype=torch.float64)
    if layout == "concatenated":
        table[:, :pairs] = torch.sin(angle)
        table[:, pairs:] = torch.cos(angle[:, : d - pairs])
        return table
    table[:, 0::2] = f[even](angle)
    table[:, 1::2] = f[odd](angle[:, : d // 2])
    return table


def known_tables(length, d):
    """``{cause suffix: (table, description, deviation?)}`` of the known mistakes and variants."""
    i = torch.arange(0, (d + 1) // 2, dtype=torch.float64)
    return {
        "sin_cos_swapped": (sinusoids(length, d, even="cos", odd="sin"), "cos in the even columns, sin in the odd "
                            "ones", False),
        "multiplies_by_frequency": (sinusoids(length, d, exponents=-2 * i / d), "pos * 10000^(2i/d_model) instead "
                                    "of pos / 10000^(2i/d_model)", False),
        "exponent_uses_i_not_2i": (sinusoids(length, d, exponents=i / d), "10000^(i/d_model): the pair index i "
                                   "instead of 2i in the exponent", False),
        "exponent_uses_column_index": (sinusoids(length, d, exponents=4 * i / d), "10000^(4i/d_model): the column "
                                       "index 2i doubled again in the exponent", False),
        "cos_overwrites_sin": (sinusoids(length, d, even="cos", odd="zero"), "cos written over the sines in the even "
                               "columns, the odd columns left 0", False),
        "all_columns_cos": (sinusoids(length, d, even="cos", odd="cos"), "cos in every column", False),
        "all_columns_sin": (sinusoids(length, d, even="sin", odd="sin"), "sin in every column", False),
        "positions_start_at_1": (sinusoids(length, d, start=1), "positions counted from 1, not 0", False),
        "concatenated_sin_cos": (sinusoids(length, d, layout="concatenated"), "the sines of all frequencies "
                                 "followed by the cosines (tensor2tensor's layout), not interleaved", True),
        "timing_signal": (sinusoids(length, d, exponents=i / max(d // 2 - 1, 1), layout="concatenated"),
                          "tensor2tensor's timing signal: the sines followed by the cosines, with frequencies "
                          "10000^(-i/(d_model/2 - 1)) (the last exactly 1/10000)", True),
        "zero_on_zero_input": (torch.zeros(length, d, dtype=torch.float64), "all zeros: no encoding is added (or "
                               "it multiplies the input)", False),
    }


def estimated_bases(table, d):
    """The base b of the frequencies b^(-2i/d) read from position 1 of an interleaved sin/cos table, one per
    column pair i >= 1; None when the table has no such structure."""
    if table.size(0) < 2 or d < 4:
        return None
    sin, cos = table[1, 2::2][: (d - 2) // 2], table[1, 3::2]
    sin = sin[: cos.numel()]
    if not torch.allclose(sin ** 2 + cos ** 2, torch.ones_like(sin), atol=1e-3):
        return None
    angle = torch.atan2(sin, cos)
    if (angle <= 0).any():
        return None
    i = torch.arange(1, cos.numel() + 1, dtype=torch.float64)
    return torch.exp(-torch.log(angle) * d / (2 * i))


def diagnose_table_or_none(observed, case, requirement):
    """The finding :func:`diagnose_table` names, or None where it finds no known table (a generic mismatch)."""
    try:
        diagnose_table(observed, case, requirement, "")
    except (Failure, Deviation) as finding:
        return None if finding.cause == f"{ROLE}.values" else finding
    return None


def diagnose_table(observed, case, requirement, where):
    """Raise the finding that names what ``observed`` is, else a generic failure."""
    length, d = observed.shape
    expected = sinusoidal_table(length, d)
    for name, (table, words, deviation) in known_tables(length, d).items():
        if difference(observed, table, case, atol=MISTAKE_ATOL, rtol=0) is None:
            raise (Deviation if deviation else Failure)(f"{ROLE}.{name}", requirement, f"{where}: {words}")
    scale = constant_ratio(observed, expected, torch.ones_like(expected, dtype=torch.bool))
    if scale is not None:
        raise Failure(f"{ROLE}.table_scaled", requirement, f"{where}: the table multiplied by {scale:.6g}")
    bases = estimated_bases(observed, d)
    if bases is not None and bases.numel() and torch.allclose(bases, bases.median().expand_as(bases), rtol=1e-2) \
            and not math.isclose(bases.median().item(), 10000.0, rel_tol=1e-2):
        raise Failure(f"{ROLE}.wrong_base", requirement,
                      f"{where}: frequencies b^(-2i/d_model) with base b = {bases.median().item():.6g}, not 10000")
    raise Failure(f"{ROLE}.values", requirement,
                  f"{where}: " + difference(observed, expected, case, atol=TABLE_ATOL, rtol=0, what="table entries"))


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_values_match_closed_form(impl, device, component, drawn):
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)); the output
    on zeros (eval mode) is the table, compared at every position up to max_len."""
    case = pe_case(impl, device, drawn)
    module = case.build(component)
    observed = observed_table(case, module)
    cfg = case.cfg
    expected = sinusoidal_table(cfg.max_len, cfg.d_model)
    batch_differs = difference(observed, observed[:1].expand_as(observed), case, atol=TABLE_ATOL, rtol=0)
    if batch_differs:
        raise Failure(f"{ROLE}.depends_on_batch_index", "the same encoding for every sequence of a batch (§3.5)",
                      f"encodings of the samples of a batch differ: {batch_differs}")
    if difference(observed[0], expected, case, atol=TABLE_ATOL, rtol=0) is None:
        return
    requirement = (f"PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...) (§3.5; d_model="
                   f"{cfg.d_model}, positions 0..{cfg.max_len - 1}; tolerance {TABLE_ATOL})")
    learned = next((name for name, p in module.named_parameters() if p.requires_grad and holds_table(p, observed[0])),
                   None)
    if learned is not None and diagnose_table_or_none(observed[0], case, requirement) is None:
        raise Deviation(f"{ROLE}.table_is_trainable", requirement, f"the table is the trainable parameter {learned!r}: "
                        "learned positional embeddings (Table 3, row E), whose values are learned, not the sinusoids")
    diagnose_table(observed[0], case, requirement, "the output on zeros is")


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_every_length_up_to_max_len(impl, device, component, drawn):
    """§3.5: inputs of every length L <= max_len are accepted and get the first L rows of the table (the table is
    sliced to the input length, not added whole). The rows are compared with the module's own output at max_len;
    their values are checked by test_values_match_closed_form."""
    case = pe_case(impl, device, drawn)
    module = case.build(component)
    cfg = case.cfg
    full = observed_table(case, module)[:1]
    for length in range(1, cfg.max_len + 1):
        requirement = (f"an input ({case.batch}, {length}, {cfg.d_model}) to get the rows 0..{length - 1} of the "
                       f"table, for every length up to max_len={cfg.max_len} (§3.5)")
        try:
            out = encode(module, zeros(case, length))
        except Exception as exc:  # noqa: BLE001 - the crash is the finding
            crash = f"{type(exc).__name__}: {str(exc)[:200]}"
            if sliced_by_batch(case, module, length, full):
                raise Failure(f"{ROLE}.sliced_by_batch", requirement,
                              f"length {length}: {crash}; with batch size = length it works: the table is sliced "
                              "with x.size(0) (a sequence-first habit)") from None
            raise Failure(f"{ROLE}.not_sliced", requirement,
                          f"length {length} < max_len crashes: {crash} (the whole table added)") from None
        if tuple(out.shape) != (case.batch, length, cfg.d_model):
            if sliced_by_batch(case, module, length, full):
                raise Failure(f"{ROLE}.sliced_by_batch", requirement,
                              f"length {length}: output shape {tuple(out.shape)}; with batch size = length it is "
                              "right: the table is sliced with x.size(0) (a sequence-first habit)")
            if out.dim() == 3 and out.size(1) == cfg.max_len != length:
                raise Failure(f"{ROLE}.not_sliced", requirement, f"length {length}: output shape "
                              f"{tuple(out.shape)}: the whole max_len table is added, broadcast over the input")
            raise Failure(f"{ROLE}.shape", requirement, f"length {length}: output shape {tuple(out.shape)}")
        wrong = difference(out, full[:, :length].expand_as(out), case, atol=TABLE_ATOL, rtol=0)
        if wrong is None:
            continue
        if sliced_by_batch(case, module, length, full):
            raise Failure(f"{ROLE}.sliced_by_batch", requirement,
                          f"length {length}, batch {case.batch}: {wrong}; with batch size = length the rows are "
                          "right: the table is sliced with x.size(0) (a sequence-first habit)")
        raise Failure(f"{ROLE}.wrong_rows", requirement, f"length {length}, compared with the first {length} rows "
                      f"of the output at max_len: {wrong}")


def sliced_by_batch(case, module, length, full):
    """Whether the rows are right when the batch size equals the length (``pe[:, :x.size(0)]``)."""
    if case.batch == length:
        return False
    try:
        out = encode(module, zeros(case, length, batch=length))
    except Exception:  # noqa: BLE001
        return False
    rows = full[:, :length].expand(length, -1, -1)
    return tuple(out.shape) == tuple(rows.shape) and difference(out, rows, case, atol=TABLE_ATOL, rtol=0) is None


def holds_table(tensor, table):
    """Whether ``tensor``, read as rows of d_model, starts with the rows of ``table``."""
    d = table.size(1)
    if not isinstance(tensor, torch.Tensor) or tensor.numel() < table.numel() or tensor.numel() % d \
            or not tensor.is_floating_point():
        return False
    rows = tensor.detach().to(torch.float64).cpu().reshape(-1, d)[: table.size(0)]
    return torch.allclose(rows, table, atol=TABLE_ATOL, rtol=0)


def plain_tensor_attributes(module):
    """``[(qualified name, tensor)]`` of tensors held as plain attributes (neither parameters nor buffers)."""
    found = []
    for prefix, m in module.named_modules():
        for name, value in vars(m).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) \
                    and not name.startswith("_"):
                found.append((f"{prefix}.{name}" if prefix else name, value))
    return found


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_table_is_a_buffer_not_a_parameter(impl, device, component, drawn):
    """§3.5: the sinusoids are fixed ("we chose the sinusoidal version"), so the table is no trainable parameter;
    a stored table is a registered buffer (it moves with ``.to(device)`` and is saved in the state dict)."""
    case = pe_case(impl, device, drawn)
    module = case.build(component)
    observed = observed_table(case, module)[0]
    for name, p in module.named_parameters():
        if p.requires_grad and holds_table(p, observed):
            raise Deviation(f"{ROLE}.table_is_trainable", "a fixed table, no trainable parameter (§3.5; learned "
                            "positional embeddings are the variant of Table 3, row E)",
                            f"the table is the trainable parameter {name!r} of shape {tuple(p.shape)}: it will be "
                            "learned, i.e. learned positional embeddings initialized with sinusoids")
    if any(holds_table(b, observed) for b in module.buffers()):
        return
    for name, value in plain_tensor_attributes(module):
        if not holds_table(value, observed):
            continue
        failure = fails_once_moved(case, module)
        if failure is None:  # its forward brings the table to the input's device itself, or moving says nothing
            note_on_pass(f"the table is the plain tensor attribute {name!r}, not a buffer; the module moved to "
                         "another device still runs (its forward moves the table to the input's)")
            return
        raise Failure(f"{ROLE}.table_not_a_buffer", "the table registered as a buffer (register_buffer), so "
                      "that it moves with .to(device) and is saved with the module (§3.5)",
                      f"the table is the plain tensor attribute {name!r} (on {value.device}, {value.dtype}), "
                      f"not among the module's buffers: moved with .to(), the module fails ({failure})")
    # no stored table: the encoding is computed in forward, nothing to move or to train


def fails_once_moved(case, module):
    """What the module's forward says once the module is moved to another device (torch's ``meta``, which holds
    no data) and called there, when that is a device mismatch: the evidence that a table left behind breaks the
    author's own ``model.to(device)``; None when it runs, or fails for another reason."""
    moved = copy.deepcopy(module).to("meta")
    try:
        encode(moved, torch.zeros(case.batch, case.src_len, case.cfg.d_model, dtype=case.dtype, device="meta"))
    except (RuntimeError, NotImplementedError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return text if "device" in text else None
    return None


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_added_to_input(impl, device, component, drawn):
    """§3.5: "we add positional encodings to the input embeddings": output = x + PE (eval mode), i.e. the output
    minus the output on zeros is the input itself."""
    case = pe_case(impl, device, drawn)
    module = case.build(component)
    length = case.cfg.max_len  # length = batch = max_len: the slicing is test_every_length_up_to_max_len's
    x = case.randn(length, length, case.cfg.d_model)
    out = encode(module, x).to(torch.float64).cpu()
    base = encode(module, zeros(case, length, batch=length)).to(torch.float64).cpu()
    xs = x.to(torch.float64).cpu()
    wrong = difference(out - base, xs, case, what="output - PE and input")
    if wrong is None:
        return
    requirement = "output = x + PE: the input added to the encoding, unchanged (§3.5)"
    table = sinusoidal_table(length, case.cfg.d_model)
    if difference(out, xs * table, case, atol=TABLE_ATOL, rtol=0) is None:
        raise Failure(f"{ROLE}.multiplied_with_input", requirement, f"output = x * PE: {wrong}")
    if difference(out - base, torch.zeros_like(xs), case) is None:  # before the scale, which would read 0
        raise Failure(f"{ROLE}.input_dropped", requirement, "the output does not depend on the input: PE alone")
    scale = constant_ratio(out - base, xs, torch.ones_like(xs, dtype=torch.bool))
    if scale is not None:
        if math.isclose(scale, math.sqrt(case.cfg.d_model), rel_tol=1e-3):
            raise Deviation(f"{ROLE}.input_scaled_by_sqrt_d_model", requirement + "; the sqrt(d_model) belongs to the "
                            "embedding layer (§3.4)", f"output = sqrt(d_model) * x + PE (d_model={case.cfg.d_model}): "
                            "the embeddings' scaling done in the positional encoding")
        raise Failure(f"{ROLE}.input_scaled", requirement, f"output = {scale:.6g} * x + PE")
    raise Failure(f"{ROLE}.not_added", requirement, wrong)


@pytest.mark.parametrize("component", [ROLE])
@given(drawn=strategies.settings())
def test_dropout_on_the_sums(impl, device, component, drawn):
    """§5.4: "we apply dropout to the sums of the embeddings and the positional encodings": in training with
    P_drop = 0.5 each entry of the output is either 0 or (x + PE) / (1 - P_drop)."""
    case = pe_case(impl, device, drawn).with_config(dropout=0.5)
    module = case.build(component)
    if getattr(module, "adds_table", False):
        return  # a table its caller adds and drops out (test_dropout_on_the_sums_inside_the_block)
    cfg, length = case.cfg, case.cfg.max_len
    pe = observed_table(case, module)  # eval mode: the table the module adds
    x = case.randn(length, length, cfg.d_model) + 0.5  # batch = length, as in observed_table
    total = encode(module, x).to(torch.float64).cpu()  # eval mode: x + PE (checked by test_added_to_input)
    module.train()
    seed_generators(case.seed, case.device)
    with torch.no_grad():
        out = output_tensor(module(x), ROLE).to(torch.float64).cpu()
    xs = x.to(torch.float64).cpu()
    atol = 10 * case.atol
    def near(a, b):  # noqa: E306
        return (a - b).abs() <= atol
    clear = total.abs() > 10 * atol  # entries where dropped and kept differ
    dropped, kept = near(out, 0) & clear, near(out, 2 * total) & clear
    requirement = ("dropout (P_drop = 0.5) on the sums x + PE in training: every entry 0 or 2 (x + PE), x + PE "
                   "being the eval-mode output (§5.4)")
    n = int(clear.sum())
    if not n or (int((dropped | kept).sum()) == n and dropped.any() and kept.any()):
        return
    if near(out, total)[clear].all():
        raise if_the_checker_sets(impl, component, "dropout", Failure(
            f"{ROLE}.dropout_missing", requirement, "the same output as in eval mode (x + PE): no dropout"))
    distinct = clear & (pe.abs() > 10 * atol) & (xs.abs() > 10 * atol)  # x, PE and x + PE all nonzero
    m = int(distinct.sum())
    before = (near(out, pe) | near(out, 2 * xs + pe)) & distinct
    if m and int(before.sum()) == m and near(out, pe)[distinct].any():
        raise Failure(f"{ROLE}.dropout_before_adding", requirement,
                      "entries equal PE where x was dropped: dropout(x) + PE, the encoding itself is never dropped")
    after_pe = (near(out, xs) | near(out, xs + 2 * pe)) & distinct
    if m and int(after_pe.sum()) == m:
        raise Failure(f"{ROLE}.dropout_on_table_only", requirement, "x + dropout(PE): the input is never dropped")
    ratio = out[clear] / total[clear]
    nonzero = ratio[ratio.abs() > 1e-3]
    if nonzero.numel() and torch.allclose(nonzero, nonzero.median().expand_as(nonzero), rtol=1e-3):
        p = 1 - 1 / nonzero.median().item()
        raise if_the_checker_sets(impl, component, "dropout", Failure(
            f"{ROLE}.dropout_rate_ignored", requirement, f"kept entries scaled by {nonzero.median().item():.4g}: "
            f"dropout with P_drop = {p:.3g}, not the configured 0.5 ({int((ratio.abs() <= 1e-3).sum())} of {n} "
            "entries dropped)"))
    raise Failure(f"{ROLE}.dropout_wrong", requirement,
                  f"{n - int((dropped | kept).sum())} of {n} entries neither 0 nor 2 (x + PE)")


def inputs_after_positions(module, positional_encoding):
    """Run ``module`` and return, for each call of a ``positional_encoding`` instance inside it, the input of the
    next module with weights of its own that is called after it (the first projection or LayerNorm that the sum of
    embeddings and positions reaches). A call whose own dropout may well have kept every entry of its sum
    (:func:`kept_by_chance`: a rate of its own the configured one does not reach, which
    ``test_dropout_rate_reaches_every_dropout`` names) marks no sum: its event is an empty tensor, neither the mark
    of a sum (None) nor an input of d_model features."""
    events, hooks, rates = [], [], []
    for m in module.modules():
        if isinstance(m, positional_encoding):
            hooks.append(m.register_forward_pre_hook(lambda *_: rates.clear()))
            hooks.append(m.register_forward_hook(lambda _, __, out: events.append(kept_by_chance(rates, out))))
            hooks += [d.register_forward_hook(lambda d, *_: rates.append(d.p)) for d in m.modules()
                      if isinstance(d, torch.nn.Dropout)]
        elif any(True for _ in m.parameters(recurse=False)):
            hooks.append(m.register_forward_pre_hook(lambda _, args, kwargs: events.append(next(
                (a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_floating_point()),
                None)), with_kwargs=True))  # (a block called by keywords alone: attention(query=x, key=x, ...))
    return events, hooks


def kept_by_chance(rates, out):
    """An empty tensor where the dropout ``rates`` (above 0) a positional encoding's call applied to its sum ``out``
    keep every entry of it with a chance of one in a million or more (0.9 ** 40 is one in 67), else None: then no
    entry dropped says no dropout."""
    rates = [p for p in rates if p > 0]
    if not rates or not isinstance(out, torch.Tensor) or math.prod((1 - p) ** out.numel() for p in rates) < 1e-6:
        return None
    return torch.zeros(0)


@pytest.mark.parametrize("component", ["encoder", "decoder", "model"])
@given(drawn=strategies.settings())
def test_dropout_on_the_sums_inside_the_block(impl, device, component, drawn):
    """§5.4: "we apply dropout to the sums of the embeddings and the positional encodings in both the encoder and
    decoder stacks": where a stack or the model adds the positional encoding itself, what reaches its first layer
    in training (P_drop = 0.5) has entries dropped to exactly 0."""
    case = pe_case(impl, device, drawn).with_config(dropout=0.5).replace(src_len=6, tgt_len=5)
    pe = case.build(ROLE)
    pe_class = type(getattr(pe, "inner", pe))
    module = case.build(component, train=True)
    if not any(isinstance(m, pe_class) for m in module.modules()):
        return  # the positions are added by its caller, and dropped out there (test_dropout_on_the_sums)
    events, hooks = inputs_after_positions(module, pe_class)
    with hooked(hooks), torch.no_grad():
        module(*canonical_inputs(case, component))
    reached = [after for before, after in zip(events, events[1:]) if before is None and after is not None]
    undropped = [x for x in reached if x.size(-1) == case.cfg.d_model and not (x == 0).any()]
    if undropped:
        raise Failure(f"{component}.positions_not_dropped_out",
                      "dropout (P_drop = 0.5 in training) on the sums of the embeddings and the positional encodings "
                      "before the first layer (§5.4)",
                      f"{len(undropped)} of {len(reached)} sums of positions reaching the first layer of the "
                      f"{component} in training with no entry dropped ({undropped[0].numel()} entries, none 0)")
