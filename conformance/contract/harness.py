"""What every check uses: a :class:`Case` (implementation, configuration, inputs) and the canonical calls."""
import contextlib
import dataclasses
import functools
import itertools
import weakref
from dataclasses import dataclass

import torch
import torch.nn as nn

from conformance.contract import shared_builds
from conformance.contract.interface import FUNCTION_ROLES, Config, Implementation, MissingRole, set_size_globals
from conformance.contract.verdicts import Failure, Missing

MODULE_ROLES = ("embedding", "positional_encoding", "multi_head_attention", "feed_forward", "layer_norm",
                "sublayer_connection", "encoder_layer", "decoder_layer", "encoder", "decoder", "generator", "model")
PAD = 0
LATEST_CASE = None
"""The case most recently drawn: the plugin adds its reproduction to a finding that has none."""
SIZES_OF_THEIR_OWN = weakref.WeakKeyDictionary()
"""Implementation -> {(role, d_model, causal): words}: the blocks found building at sizes of their own whatever
they are given (:func:`widths_not_taken`), not built again at that width: each such build is the author's model at
its full size (d_model = 512 and six layers, a second or more) and says the same each time."""
WATCH = None
"""While a check runs: what records the calls the check makes to the roles it builds (the plugin sets it, see
``conformance.diagnosis.evidence.CheckCalls``): ``WATCH.module(role, module)`` for each module :meth:`Case.build` returns, and
``WATCH.function(role, function)``, a context manager around each call of a function role; None otherwise."""


def seed_generators(seed, device):
    """``torch.manual_seed`` for the CPU and ``device`` only: ``torch.manual_seed`` also queues the seeding of every
    accelerator torch knows (CUDA, XPU, MTIA), each recording a stack trace, a few ms a call and seconds a run."""
    torch.default_generator.manual_seed(seed)
    if torch.device(device).type == "cuda":
        torch.cuda.manual_seed_all(seed)


@dataclass
class Walked:
    """A block's sub-blocks (itself first), parameters and buffers, each once and in the order ``modules()``,
    ``parameters()`` and ``buffers()`` give them: one walk for the several readings of a new build, each of which
    walked the whole block again (a third of what the checker adds to a small build)."""
    blocks: list
    parameters: list
    buffers: list

    @classmethod
    def of(cls, module):
        blocks = list(module.modules())
        return cls(blocks, unique(m._parameters.values() for m in blocks), unique(m._buffers.values() for m in blocks))


def unique(groups):
    """The tensors of ``groups``, each once, None left out, in order."""
    seen = {}
    for group in groups:
        for t in group:
            if t is not None:
                seen.setdefault(id(t), t)
    return list(seen.values())


def in_place_already(module, device, dtype, walked=None):
    """Whether ``module.to(device=device, dtype=dtype)`` would change nothing: every parameter and buffer on
    ``device``, every floating one in ``dtype``, and no block moving its tensors its own way (a ``to`` or ``_apply`` of
    its own). Looking costs a fraction of the walk ``to`` makes over every block (5 % of a run's checks)."""
    walked = walked or Walked.of(module)
    if any(type(m)._apply is not nn.Module._apply or type(m).to is not nn.Module.to for m in walked.blocks):
        return False
    device = torch.device(device)
    return all(t.device == device and (t.dtype == dtype or not t.is_floating_point())
               for t in itertools.chain(walked.parameters, walked.buffers))


def set_mode(module, train, walked):
    """``module.train(train)``; set on each block of ``walked`` where none has a ``train`` of its own."""
    if any(type(m).train is not nn.Module.train for m in walked.blocks):
        return module.train(train)
    for m in walked.blocks:
        m.training = train
    return module


TABLE_ATOL = 1e-3
"""How far a positional-encoding table may be from the closed form of §3.5 (float32 sines of angles near max_len)."""


def tolerance(dtype):
    """Absolute and relative tolerance for comparing results computed in ``dtype``."""
    return (1e-4, 1e-4) if dtype == torch.float32 else (1e-9, 1e-9)


@dataclass
class Case:
    """One drawn example: an implementation, canonical hyperparameters, input sizes, dtype, device and seed. The
    dtype is the precision the running check's role fixes for itself, where its code fixes one
    (``Implementation.fixed_dtype``): float32 code is checked in float32, not blamed for float64 meeting it."""
    impl: Implementation
    cfg: Config
    batch: int
    src_len: int
    tgt_len: int
    dtype: torch.dtype
    seed: int
    device: str = "cpu"
    build_seeds: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)
    """role -> the seed that drew the weights of a block shared from an earlier build (``shared_builds``)."""

    def __post_init__(self):
        global LATEST_CASE
        model = self.impl.supports("model")
        if model.takes("src_vocab") and not model.takes("tgt_vocab"):  # one vocabulary for both sides
            self.cfg = dataclasses.replace(self.cfg, tgt_vocab=self.cfg.src_vocab)
        set_size_globals(getattr(self.impl, "size_knobs", ()), self.cfg)  # code reading its sizes from globals
        fixed = self.impl.supports(getattr(WATCH, "role", None)).dtype
        if fixed is not None:  # the running check's role computes in one precision only, its code fixing it
            self.dtype = getattr(torch, fixed)
        self.generator = torch.Generator().manual_seed(self.seed)
        LATEST_CASE = self

    @property
    def atol(self):
        return tolerance(self.dtype)[0]

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def with_lengths_at_least(self, src_len, tgt_len=None):
        """This case with source and target at least this long (the target as long as the source unless told), and
        still of different lengths if they were: one key gives every query the weight 1 whatever its score, and
        hides the scale, the mask and the order; equal lengths hide a query read for a key."""
        src = max(src_len, self.src_len)
        tgt = max(src_len if tgt_len is None else tgt_len, self.tgt_len)
        return self.replace(src_len=src, tgt_len=tgt + (tgt == src and self.tgt_len != self.src_len))

    def with_config(self, **changes):
        return self.replace(cfg=dataclasses.replace(self.cfg, **changes))

    # -- building -----------------------------------------------------------------------------
    def build(self, role, train=False, causal=False):
        """Build ``role`` with the case's seed, on its device and dtype, in eval mode (train mode if asked); with
        ``causal``, its causal switch on (``Implementation.build``; a function role's ``causal`` variant, an
        attention method on its block built with the block's switch on), None when it has none."""
        if role in FUNCTION_ROLES:
            function = self.impl.function(role)
            if causal:
                function = getattr(function, "causal", None)
                if function is None:
                    return None
            return OnCopies(function, role)
        seed_generators(self.seed, self.device)
        own_sizes, width = SIZES_OF_THEIR_OWN.setdefault(self.impl, {}), (role, self.cfg.d_model, causal)
        ignored = own_sizes.get(width)
        key_of = functools.partial(self.shared_build_key, role, causal)
        reused, walked = shared_builds.take(self.impl, key_of, self.dtype) if ignored is None else None, None
        if reused is not None:
            module, self.build_seeds[role] = reused
        elif ignored is None:
            self.build_seeds.pop(role, None)
            module = self.impl.build(role, self.cfg, causal=True) if causal else self.impl.build(role, self.cfg)
            if causal and module is None:
                return None
            if not isinstance(module, nn.Module):
                raise Failure(f"{role}.not_a_module", f"the {role} role to build a torch.nn.Module",
                              f"{type(module).__name__}")
            walked = Walked.of(module)
            ignored = widths_not_taken(module, self.cfg, walked)
        if ignored:
            own_sizes[width] = ignored
            raise Missing("adapter.sizes_fixed_by_the_code", f"the {role} built at the configured sizes ({self.cfg})",
                          ignored)
        if reused is None:
            if not in_place_already(module, self.device, self.dtype, walked):
                module.to(device=self.device, dtype=self.dtype)
                walked = Walked.of(module)  # (a buffer converted is another tensor)
            kept = shared_builds.keep(self.impl, key_of, self.dtype, module, self.seed,
                                      walked.parameters + walked.buffers)
            module, walked = kept, walked if kept is module else None
        if WATCH is not None:
            WATCH.module(role, module)
        return set_mode(module, train, walked) if walked else module.train(train)

    def shared_build_key(self, role, causal):
        """What a build of ``role`` is kept under in ``shared_builds``: the role, its causal switch, the device and
        the sizes its code receives; None where the implementation builds on the other side of grading's judge."""
        received = getattr(self.impl, "sizes_received", None)
        return received and (role, causal, self.device, received(role, self.cfg, causal))

    # -- inputs -------------------------------------------------------------------------------
    def randn(self, *shape):
        return torch.randn(*shape, generator=self.generator, dtype=torch.float64).to(self.device, self.dtype)

    def tokens(self, length, vocab):
        """Token ids in [1, vocab): 0 is the padding id."""
        return torch.randint(1, vocab, (self.batch, length), generator=self.generator).to(self.device)

    def other_tokens(self, tokens, vocab):
        """``tokens`` with a different token in [1, vocab) at every position (vocab > 2)."""
        shift = torch.randint(1, vocab - 1, tokens.shape, generator=self.generator).to(tokens.device)
        return 1 + (tokens - 1 + shift) % (vocab - 1)

    def padding_mask(self, length):
        """A random padding mask ``(batch, 1, length)``: True = real token, at least one real token per row,
        and at least one padded position somewhere when length > 1."""
        if getattr(self.impl, "padding", None) == "lengths":  # code told the padding by lengths: at the end
            lengths = torch.randint(1, length + 1, (self.batch,), generator=self.generator)
            lengths[0] = max(length - 1, 1)
            return (torch.arange(length) < lengths.unsqueeze(-1)).unsqueeze(1).to(self.device)
        keep = torch.rand(self.batch, length, generator=self.generator) < 0.6
        keep[:, 0] = True
        if length > 1:
            keep[0, -1] = False
        return keep.unsqueeze(1).to(self.device)

    def subsequent_mask(self, length):
        return torch.tril(torch.ones(1, length, length, dtype=torch.bool, device=self.device))

    def target_mask(self, length):
        """Padding and subsequent positions together: ``(batch, length, length)``."""
        return self.padding_mask(length) & self.subsequent_mask(length)

    def reproduction(self, role, call=None):
        """A short, copy-paste script that rebuilds this case's component and repeats the call."""
        call = call or f"out = m(*canonical_inputs(case, {role!r}))"
        seed = self.build_seeds.get(role)
        build = (f"m = case.build({role!r})" if seed is None else
                 f"m = case.replace(seed={seed}).build({role!r})  # the weights the check drew, from that seed")
        return "\n".join([
            "import torch",
            "from conformance.contract.harness import Case, canonical_inputs",
            "from adapters.submission import load_implementation",
            "from conformance.contract.interface import Config",
            f"case = Case(load_implementation({self.impl.spec!r}), {self.cfg!r}, batch={self.batch}, "
            f"src_len={self.src_len}, tgt_len={self.tgt_len}, dtype={self.dtype}, seed={self.seed}, "
            f"device={self.device!r})",
            build,
            call,
        ])


class OnCopies:
    """A function role called with copies of its tensor arguments, as a block calls it with tensors of its own: a
    function changing its inputs in place (``K.transpose_(2, 3)``) does not change the checker's. ``modified`` lists
    the positions of the arguments the last call changed; any other attribute is the function's own."""

    def __init__(self, function, role=None):
        self.function, self.role, self.modified = function, role, []

    def __call__(self, *args, **kwargs):
        copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        with WATCH.function(self.role, self.function) if WATCH is not None else contextlib.nullcontext(
                self.function) as function:
            out = function(*copies, **kwargs)
        self.modified = [i for i, (a, c) in enumerate(zip(args, copies)) if isinstance(a, torch.Tensor)
                         and (c.shape != a.shape or not torch.equal(c, a))]
        return out

    def __getattr__(self, name):
        return getattr(self.function, name)


# -- canonical calls -----------------------------------------------------------------------------
def padded_target_positions(model, tgt_mask):
    """``(batch, Lt)``, True at the target positions a model that makes its masks from the tokens is given the pad
    token (the canonical mask's padded keys): positions whose outputs no loss reads, and whose queries its own mask may
    leave attending everywhere (a target mask over the query rows); None for any other model."""
    if not getattr(model, "masks_from_tokens", False) or not isinstance(tgt_mask, torch.Tensor) or tgt_mask.dim() != 3:
        return None
    return ~tgt_mask.any(-2)


def at_real_positions(out, padded, axis=1):
    """``out`` (positions on ``axis``, features last) with the rows at the ``padded`` positions set to 0, so that
    only the real positions are compared; ``out`` itself when there is nothing to set or the shapes do not fit."""
    if padded is None or out.dim() != 3:
        return out
    padded = padded if axis == 1 else padded.T
    return out.masked_fill(padded.unsqueeze(-1).to(out.device), 0) if out.shape[:2] == padded.shape else out


def widths_not_taken(module, cfg, walked=None):
    """Words for a block whose weights show none of the configured model width (a factory building at the sizes of
    its own configuration, d_model = 512 where 6 was asked): the checker's sizes never reached it; else None."""
    walked = walked or Walked.of(module)
    weights = [p for p in walked.parameters if not isinstance(p, nn.parameter.UninitializedParameter)]
    matrices = [p for p in weights if p.dim() >= 2] or [p for p in weights if p.dim() == 1 and p.numel() > 1]
    # (a LayerNorm's vectors where no matrix is; a scalar gain says no width)
    tables = {id(m.weight) for m in walked.blocks if isinstance(m, nn.Embedding)}
    sizes = {cfg.d_model, cfg.vocab_size, cfg.src_vocab, cfg.tgt_vocab, cfg.max_len}
    if not matrices or any(cfg.d_model in p.shape and (id(p) not in tables or p.shape[1] in sizes)
                           for p in matrices):  # (an embedding whose words are as many as d_model by chance, its
        return None                             # width a size of its own, took none)
    widths = sorted({size for p in matrices for size in p.shape}, reverse=True)[:4]
    return (f"none of its weights is {cfg.d_model} wide (the configured d_model); their sizes include "
            f"{', '.join(map(str, widths))}: its code builds at sizes of its own, whatever it is given")


def widths_of_its_own(module, cfg):
    """Words for a block some of whose weights show the configured d_model while others are of a width that is none
    of the configured sizes (nor twice to four times d_model, d_ff or d_k, nor a vocabulary or max_len with a row
    more): its code fixes those widths itself (``nn.LayerNorm(512)``, ``nn.Linear(512, 2048)`` beside attention
    projections d_model wide), and counts at the checker's sizes are of a block its author never builds; else None
    (a block showing no d_model at all is :func:`widths_not_taken`'s)."""
    weights = [p for p in module.parameters() if not isinstance(p, nn.parameter.UninitializedParameter)]
    if not any(cfg.d_model in p.shape for p in weights):
        return None
    rows = (cfg.vocab_size, cfg.src_vocab, cfg.tgt_vocab, cfg.max_len)
    sizes = ({1, cfg.d_model, cfg.h, cfg.d_k, cfg.d_ff, cfg.N} | set(rows) | {n + 1 for n in rows}
             | {k * s for s in (cfg.d_model, cfg.d_ff, cfg.d_k) for k in (2, 3, 4)})
    own = sorted({size for p in weights for size in p.shape if size not in sizes}, reverse=True)
    return (f"beside weights {cfg.d_model} wide (the configured d_model), some are {', '.join(map(str, own[:4]))} "
            "wide, none of the configured sizes: its code fixes those widths itself" if own else None)


def canonical_inputs(case, role):
    """Inputs of the canonical call of ``role`` (see ``conformance.contract.interface``), freshly drawn."""
    c, b, ls, lt = case.cfg, case.batch, case.src_len, case.tgt_len
    x, memory = case.randn(b, lt, c.d_model), case.randn(b, ls, c.d_model)
    return {
        "embedding": lambda: (case.tokens(lt, c.vocab_size),),
        "positional_encoding": lambda: (x,),
        "attention": lambda: (case.randn(b, c.h, lt, c.d_k), case.randn(b, c.h, ls, c.d_k),
                              case.randn(b, c.h, ls, c.d_k + 1), case.padding_mask(ls).unsqueeze(1)),
        "multi_head_attention": lambda: (x, memory, memory, case.padding_mask(ls)),
        "feed_forward": lambda: (x,),
        "layer_norm": lambda: (x,),
        "sublayer_connection": lambda: (x, torch.tanh),
        "encoder_layer": lambda: (memory, case.padding_mask(ls)),
        "encoder": lambda: (memory, case.padding_mask(ls)),
        "decoder_layer": lambda: (x, memory, case.padding_mask(ls), case.target_mask(lt)),
        "decoder": lambda: (x, memory, case.padding_mask(ls), case.target_mask(lt)),
        "generator": lambda: (x,),
        "model": lambda: (case.tokens(ls, c.src_vocab), case.tokens(lt, c.tgt_vocab), case.padding_mask(ls),
                          case.target_mask(lt)),
    }[role]()


def expected_shape(case, role):
    c, b, ls, lt = case.cfg, case.batch, case.src_len, case.tgt_len
    return {"attention": (b, c.h, lt, c.d_k + 1), "generator": (b, lt, c.vocab_size),
            "encoder_layer": (b, ls, c.d_model), "encoder": (b, ls, c.d_model)}.get(role, (b, lt, c.d_model))


def output_tensor(result, role):
    """The tensor a call returned; the attention function may return ``(output, weights)``."""
    if role == "attention" and isinstance(result, (tuple, list)) and result:
        result = result[0]
    if type(result) is torch.Tensor or type(result) is nn.Parameter:
        return result
    if result is None:
        raise Failure(f"{role}.forward_returns_none", "a torch.Tensor output (§3)",
                      "None: the forward method has no return statement (or returns nothing on some path)")
    if isinstance(result, (tuple, list)):
        raise Failure(f"{role}.forward_returns_tuple", "a torch.Tensor output (§3)",
                      f"a {type(result).__name__} of {len(result)} items where one tensor is expected")
    raise Failure(f"{role}.output_not_tensor", "a torch.Tensor output (§3)",
                  f"a {type(result).__name__} (only a real torch.Tensor is accepted): {str(result)[:80]}")


def run(case, role, module=None, inputs=None):
    """Build (unless given) and call ``role`` canonically; returns ``(output tensor, inputs)``."""
    module = module if module is not None else case.build(role)
    inputs = inputs if inputs is not None else canonical_inputs(case, role)
    with torch.no_grad():
        return output_tensor(module(*inputs), role), inputs


def require_role(impl, role):
    if not impl.has(role):
        raise MissingRole(f"{impl.spec} has no {role!r}")


def assert_close(actual, expected, case, cause, requirement, what="outputs"):
    """Fail with the largest difference when ``actual`` is not close to ``expected``."""
    observed = difference(actual, expected, case, what=what)
    if observed is not None:
        raise Failure(cause, requirement, observed)


def difference(actual, expected, case, atol=None, rtol=None, what="outputs"):
    """None when ``actual`` is close to ``expected`` (the case's tolerance unless ``atol`` / ``rtol`` are given),
    else the words :func:`assert_close` would use for the largest difference."""
    default_atol, default_rtol = tolerance(case.dtype)
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    actual, expected = actual.detach().to(torch.float64).cpu(), expected.detach().to(torch.float64).cpu()
    if actual.shape != expected.shape:
        return f"{what} of shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if torch.allclose(actual, expected, atol=atol, rtol=rtol):
        return None
    diff = (actual - expected).abs()
    if not diff.numel():
        return None
    diff = torch.nan_to_num(diff, nan=float("inf"))
    where = tuple(int(i) for i in torch.nonzero(diff == diff.max())[0])
    return (f"{what} differ by up to {diff.max().item():.3g} at index {where} ({actual[where].item():.6g} vs "
            f"{expected[where].item():.6g}; tolerance {atol:g})")


def role_instances(case, block, role):
    """``[(path, instance, call)]``: the instances of the class that plays ``role`` (a module role) inside the built
    ``block``, in registration order; ``call`` is the instance called as the role is (the role's adapter around it,
    when it has one). ``[]`` when the implementation has no such role or the block is not built in this process."""
    if not case.impl.has(role):
        return []
    try:
        built = case.build(role)
    except Exception:  # (the role's own checks report why it cannot be built)
        return []
    inner = getattr(block, "inner", block)
    cls = type(getattr(built, "inner", built))
    wrap = getattr(built, "around", lambda m: m)
    return [(path, m, wrap(m)) for path, m in inner.named_modules() if path and type(m) is cls]


NOT_SETTABLE = {
    "dropout": ("adapter.dropout_rate_not_taken", "{role}'s constructor takes no dropout rate, so the checker cannot "
                "set one: where the code applies dropout, if anywhere, is judged with the block that does"),
    "h": ("adapter.head_count_not_taken", "{role}'s constructor takes no head count, so the checker cannot set the "
          "one the count was drawn for: a width its code splits into a head count of its own may not divide"),
    "pad_idx": ("adapter.pad_idx_not_taken", "the padding-mask helper takes no pad index, so the checker cannot set "
                "one: its code fixes its own (a global or a constant), which a mask equal to (tokens != 0) may well "
                "be"),
}
"""For a hyperparameter a check sets: the cause and the words of a finding the checker cannot blame on code that
declares it takes no such argument."""


def if_the_checker_sets(impl, role, hyperparameter, failure):
    """``failure``, a property found broken on ``role`` with ``hyperparameter`` set by the checker, to be raised; or,
    where the role's code declared, before the check ran, that it takes no such argument
    (:meth:`Implementation.supports`), the Missing saying the checker could not set it."""
    if impl.supports(role).takes(hyperparameter):
        return failure
    cause, words = NOT_SETTABLE[hyperparameter]
    return Missing(cause, failure.requirement, f"{words.format(role=role)} ({failure.cause}: {failure.observed})",
                   failure.reproduction)


def inputs_not_accepted(module):
    """``(canonical inputs the module's forward takes no parameter for, its signature)``, as the adapter of
    another's code reports them (``inputs_not_accepted()``); ``([], None)`` for modules that take the canonical call."""
    report = getattr(module, "inputs_not_accepted", None)
    return report() if callable(report) else ([], None)


def unfed_mask_parameters(module):
    """The parameters of the module's forward named for a mask that the adapter of another's code gives nothing
    (``unfed_mask_parameters()``); ``[]`` for modules that take the canonical call."""
    report = getattr(module, "unfed_mask_parameters", None)
    return report() if callable(report) else []
