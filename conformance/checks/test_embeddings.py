"""Embeddings and softmax (§3.4): learned embeddings multiplied by sqrt(d_model); the generator's linear map and
softmax turn decoder outputs into next-token (log-)probabilities over the vocabulary."""
import ast
import inspect
import math

import pytest
import torch
from hypothesis import given

from conformance.contract import strategies
from conformance.contract.harness import Case, difference, run
from conformance.contract.probes import constant_ratio
from conformance.checks.test_information_flow import lookup_scales
from conformance.checks.test_parameters import output_projections, vocabulary_matrices
from conformance.contract.verdicts import Deviation, Failure, Missing

SCALES = {
    "not_scaled": (lambda d: 1.0, "not multiplied by sqrt(d_model)"),
    "divided_by_sqrt_d_model": (lambda d: 1 / math.sqrt(d), "divided by sqrt(d_model) instead of multiplied"),
    "scaled_by_d_model": (lambda d: float(d), "multiplied by d_model instead of sqrt(d_model)"),
}

FLOAT32_ROUNDING = 1e-6
"""The relative error of a number rounded to float32 (eps/2 = 6e-8), with margin: a scale that far from
sqrt(d_model) is sqrt(d_model) computed in float32."""


@pytest.mark.parametrize("component", ["embedding"])
@given(drawn=strategies.settings())
def test_embedding_scaled_by_sqrt_d_model(impl, device, component, drawn):
    """§3.4: "In the embedding layers, we multiply those weights by sqrt(d_model)": the output for token t is row t
    of the (vocab, d_model) embedding matrix times sqrt(d_model)."""
    case = Case(impl, device=device, **drawn)
    if case.cfg.max_len == case.cfg.vocab_size:  # (a block's learned positions would look like a second vocabulary)
        case = case.with_config(max_len=case.cfg.max_len + 1)
    module = case.build(component)
    cfg = case.cfg
    tables = [(n, p) for n, p in module.named_parameters() if tuple(p.shape) == (cfg.vocab_size, cfg.d_model)]
    transposed = [n for n, p in module.named_parameters() if tuple(p.shape) == (cfg.d_model, cfg.vocab_size)]
    if not tables and len(transposed) == 1 and cfg.d_model != cfg.vocab_size:
        raise Failure(f"{component}.table_transposed", f"a (vocab={cfg.vocab_size}, d_model={cfg.d_model}) embedding "
                      "matrix (§3.4)", f"{transposed[0]!r} of shape ({cfg.d_model}, {cfg.vocab_size}): "
                      "nn.Embedding(d_model, vocab_size)")
    if len(tables) != 1:
        raise Missing(f"{component}.table_unrecognised", f"one ({cfg.vocab_size}, {cfg.d_model}) embedding matrix "
                      "(§3.4)", f"parameters {[(n, tuple(p.shape)) for n, p in module.named_parameters()][:6]}")
    name, weight = tables[0]
    out, (tokens,) = run(case, component)
    rows = weight.detach()[tokens].to(torch.float64).cpu()
    out = out.to(torch.float64).cpu()
    expected = math.sqrt(cfg.d_model)
    if difference(out, rows * expected, case) is None:
        return
    requirement = f"output = {name}[tokens] * sqrt(d_model) = rows * {expected:.6g} (§3.4; d_model={cfg.d_model})"
    scale = constant_ratio(out, rows, torch.ones_like(rows, dtype=torch.bool))
    if scale is not None and math.isclose(scale, expected, rel_tol=FLOAT32_ROUNDING) \
            and difference(out, rows * scale, case) is None:
        return  # sqrt(d_model) held as a float32 constant (torch.Tensor([np.sqrt(d)])): the same scale, rounded
    if scale is None:  # (positions added by the same block: their table is the positional encoding's to check, §3.5)
        scale = scale_beside_positions(case, component, module, tokens, out, weight)
        if scale is not None and math.isclose(scale, expected, rel_tol=1e-3):
            return
    if scale is None:
        raise Failure(f"{component}.not_a_scaled_lookup", requirement,
                      "outputs that are no constant multiple of the rows of " + repr(name) + ": "
                      + difference(out, rows * expected, case))
    if math.isclose(scale, 1.0, rel_tol=1e-3) and scaled_after(case, component, module, requirement):
        return  # (the positional encoding multiplies its input: its own check names that placement)
    for cause, (value, words) in SCALES.items():
        if math.isclose(scale, value(cfg.d_model), rel_tol=1e-3):
            raise Failure(f"{component}.{cause}", requirement, f"rows multiplied by {scale:.6g}: {words}")
    raise Failure(f"{component}.scale_wrong", requirement, f"rows multiplied by {scale:.6g}")


def scaled_after(case, component, module, requirement):
    """§3.4 held by the model rather than the block: when the model that builds this embedding block multiplies its
    rows by sqrt(d_model) on their way to the stacks (the model's own forward, or the next block), True where the
    positional encoding does it (its own check names that placement), else the deviation naming where the scaled
    rows are seen; False when no working model holds the block or the model does not scale them, and no block
    builds it beside a positional encoding that multiplies its input by sqrt(d_model) (the block is then blamed)."""
    block_class = type(getattr(module, "inner", module))
    ran, seen = scaled_on_the_model_path(case, block_class)
    if positions_scale_their_input(case) and (seen is not None or built_beside_the_positions(case, block_class)):
        return True
    if seen is None and not ran and (written := scaled_in_the_source(block_class)):
        raise Missing("adapter.scaling_caller_not_run", requirement, f"rows returned unscaled; {written[0]} "
                      f"multiplies the output of a lookup by a square root ({written[1]}) in code the checker "
                      "could not run (no working model holds the block), so whether §3.4 holds is not established")
    if seen is None:
        return False
    raise Deviation(f"{component}.scaled_by_its_caller", requirement,
                    f"rows returned unscaled; the model multiplies them by sqrt(d_model) after the block: they reach "
                    f"{seen!r} scaled, as §3.4 asks of the model")


def scaled_on_the_model_path(case, block_class):
    """``(ran, path)``: whether a working model holding a ``block_class`` block was run, and the path where the
    lookups of its ``block_class`` blocks are last seen, all multiplied by sqrt(d_model), on its way to the stacks
    (None when one of them is not so multiplied, or none was run)."""
    if not case.impl.has("model"):
        return False, None
    try:
        scales, _, _, inner = lookup_scales(case.with_lengths_at_least(3, 3))
    except Exception:  # the author's model fails: its own checks report it, and the block is judged alone
        return False, None
    blocks = [name for name, m in inner.named_modules() if type(m) is block_class]
    mine = [(path, c, seen) for path, c, seen in scales if any(path == b or path.startswith(b + ".") for b in blocks)]
    expected = math.sqrt(case.cfg.d_model)
    if mine and all(math.isclose(c, expected, rel_tol=1e-3) for _, c, _ in mine):
        return True, mine[0][2]
    return bool(mine), None


def scaled_in_the_source(block_class):
    """``(where, expression)`` of a product, in the source of ``block_class``'s module outside the class itself, of
    a call of an attribute named for an embedding (``self.src_embed(src)``) and a square root (``math.sqrt(d)``,
    ``d ** 0.5``): a caller that scales the lookup (§3.4); None when there is none or the source cannot be read."""
    try:
        module = inspect.getmodule(block_class)
        tree = ast.parse(inspect.getsource(module))
        path = inspect.getsourcefile(module)
    except (TypeError, OSError, SyntaxError):
        return None
    own = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == block_class.__name__
           for n in ast.walk(c)}
    for node in ast.walk(tree):
        if id(node) in own or not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Mult):
            continue
        sides = (node.left, node.right)
        lookup = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and "emb" in n.func.attr.lower()
                     for n in sides)
        if lookup and any(is_square_root(n) for n in sides):
            return f"{path}:{node.lineno}", ast.unparse(node)
    return None


def is_square_root(node):
    """Whether ``node`` is ``sqrt(...)`` (of any module) or ``... ** 0.5``."""
    if isinstance(node, ast.Call):
        func = node.func
        return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) == "sqrt"
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) \
        and node.right.value == 0.5


def built_beside_the_positions(case, block_class):
    """Whether a block of the author's (the model, else a stack that embeds the tokens itself) builds an instance of
    ``block_class`` beside one of the positional encoding's class, which it then applies to the looked-up rows."""
    try:
        positions = type(getattr(case.build("positional_encoding"), "inner", None))
    except Exception:  # the author's block fails to build: its own checks report it
        return False
    for owner in ("model", "encoder", "decoder"):
        try:
            built = case.build(owner) if case.impl.has(owner) else None
        except Exception:  # (idem)
            continue
        kinds = {type(m) for m in getattr(built, "modules", lambda: ())()}
        if block_class in kinds and positions in kinds:
            return True
    return False


def positions_scale_their_input(case):
    """Whether the bound positional encoding multiplies its input by sqrt(d_model) before adding its table."""
    if not case.impl.has("positional_encoding"):
        return False
    x = case.randn(1, 3, case.cfg.d_model)
    try:
        out, _ = run(case, "positional_encoding", inputs=(x,))
        base, _ = run(case, "positional_encoding", inputs=(torch.zeros_like(x),))
    except Exception:  # the author's block fails: its own checks report it
        return False
    scale = constant_ratio((out - base).to(torch.float64).cpu(), x.to(torch.float64).cpu(),
                           torch.ones_like(x, dtype=torch.bool).cpu())
    return scale is not None and math.isclose(scale, math.sqrt(case.cfg.d_model), rel_tol=1e-3)


def scale_beside_positions(case, component, module, tokens, out, weight):
    """The constant by which ``out`` multiplies the looked-up rows when it is that scaled lookup plus a term that
    depends on the position only (an embedding block that adds its positions itself): for other tokens at the same
    positions the outputs differ by that multiple of the difference of the rows; else None."""
    if case.cfg.vocab_size <= 2:
        return None
    others = case.other_tokens(tokens, case.cfg.vocab_size)
    again, _ = run(case, component, module=module, inputs=(others,))
    rows = weight.detach()[tokens].to(torch.float64).cpu() - weight.detach()[others].to(torch.float64).cpu()
    change = out - again.to(torch.float64).cpu()
    scale = constant_ratio(change, rows, torch.ones_like(rows, dtype=torch.bool))
    return scale if scale is not None and difference(change, rows * scale, case) is None else None


@pytest.mark.parametrize("component", ["generator"])
@given(drawn=strategies.settings())
def test_generator_outputs_log_probabilities(impl, device, component, drawn):
    """§3.4: "the usual learned linear transformation and softmax function to convert the decoder output to
    predicted next-token probabilities": log-softmax over the vocabulary (the last axis), exp summing to 1."""
    case = Case(impl, device=device, **drawn)
    if case.tgt_len < 2:
        case = case.replace(tgt_len=2 if case.src_len != 2 else 3)
    module = case.build(component)
    out, (x,) = run(case, component)
    out = out.to(torch.float64).cpu()
    v = case.cfg.vocab_size
    requirement = f"log-probabilities over the vocabulary: exp(output) summing to 1 over the last axis (V={v}) (§3.4)"
    if out.dim() != 3 or out.size(-1) != v:
        raise Failure(f"{component}.shape", requirement, f"output of shape {tuple(out.shape)}")
    sums = out.exp().sum(-1)
    if (out <= 1e-9).all() and difference(sums, torch.ones_like(sums), case) is None:
        return

    def normalized(values, axis):
        s = values.sum(axis)
        return (values >= 0).all() and difference(s, torch.ones_like(s), case) is None

    for axis in range(out.dim() - 1):
        if normalized(out.exp(), axis) or normalized(out, axis):
            raise Failure(f"{component}.softmax_wrong_axis", requirement,
                          f"outputs normalized over axis {axis} of {tuple(out.shape)}, not over the vocabulary")
    if normalized(out, -1):
        raise Deviation(f"{component}.softmax_output", requirement,
                        "probabilities (softmax), not log-probabilities: the log is left to the loss")
    twice, _ = run(case, component, module=module, inputs=(2 * x,))
    zero, _ = run(case, component, module=module, inputs=(torch.zeros_like(x),))
    if difference(twice.to(torch.float64).cpu() - zero.to(torch.float64).cpu(),
                  2 * (out - zero.to(torch.float64).cpu()), case, atol=10 * case.atol) is None:
        raise Deviation(f"{component}.logits_output", requirement,
                        "unnormalized logits (an affine map of the input): the log-softmax is left to the loss")
    raise Failure(f"{component}.not_log_probabilities", requirement,
                  f"exp(output) sums over the vocabulary between {sums.min().item():.4g} and {sums.max().item():.4g}")


@pytest.mark.parametrize("component", ["model"])
@given(drawn=strategies.settings())
def test_embeddings_and_pre_softmax_map_share_one_matrix(impl, device, component, drawn):
    """§3.4: "we share the same weight matrix between the two embedding layers and the pre-softmax linear
    transformation": the target embedding table and the weight of the model's Linear(d_model, V_tgt) are one tensor
    (one storage), and so is the source table when both vocabularies have one size. Read on the CPU in float32, where
    building moves no weight to a storage of its own."""
    case = Case(impl, device=device, **drawn).replace(device="cpu", dtype=torch.float32)
    m, cfg = case.build(component), case.cfg
    matrices = vocabulary_matrices(m, cfg)
    projections = {id(l.weight) for l in output_projections(m, cfg.d_model, {cfg.tgt_vocab})}
    shared = [(n, w) for n, w in matrices if cfg.src_vocab == cfg.tgt_vocab or tuple(w.shape)[0] == cfg.tgt_vocab]
    if not projections or len(shared) == len([w for w in shared if id(w) in projections]):
        raise Missing(f"{component}.shared_matrix_not_found", "the embeddings and the pre-softmax linear map to share "
                      "one matrix (§3.4)", "no nn.Embedding and Linear(d_model, V_tgt) pair inside the model "
                      f"(tables and maps of the vocabulary: {[n for n, _ in matrices] or 'none'})",
                      case.reproduction(component, "print(m)"))
    storages = {w.data_ptr() for _, w in shared}
    if len(storages) > 1:
        sides = "the two embeddings and " if cfg.src_vocab == cfg.tgt_vocab else "the target embedding and "
        raise Deviation(f"{component}.untied_embeddings", f"one weight matrix for {sides}the pre-softmax linear map "
                        f"(§3.4; V_src={cfg.src_vocab}, V_tgt={cfg.tgt_vocab})",
                        f"{len(storages)} separate matrices: " + ", ".join(n for n, _ in shared),
                        case.reproduction(component, "print([(n, p.data_ptr()) for n, p in "
                                                     "m.named_parameters(remove_duplicate=False) if p.dim() == 2])"))
