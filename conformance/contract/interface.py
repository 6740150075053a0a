"""The implementation interface: every implementation under test is reduced to a set of *roles*.

An implementation is a mapping ``CONFORMANCE_ROLES = {role name: builder}``. A builder is a class or function
called with the keyword arguments its signature names among the canonical hyperparameters of
:class:`Config` (``d_model``, ``h``, ``d_ff``, ``dropout``, ``N``, ``vocab_size``, ``src_vocab``, ``tgt_vocab``,
``max_len``). Function roles (``attention``, ``padding_mask``, ``subsequent_mask``) are the functions themselves.

Canonical calls (batch first; a mask is boolean, broadcastable to ``(batch, query_len, key_len)``,
``True`` = may attend):

==================== ================================================== ===========================================
role                 built from                                         called as
==================== ================================================== ===========================================
embedding            vocab_size, d_model                                ``m(tokens[B, L])`` -> ``[B, L, d_model]``
positional_encoding  d_model, dropout, max_len                          ``m(x[B, L, d_model])`` -> same shape
attention            (function)                                         ``f(q[..., Lq, d_k], k[..., Lk, d_k],
                                                                        v[..., Lk, d_v], mask)`` -> output or
                                                                        (output, weights)
multi_head_attention h, d_model, dropout                                ``m(query, key, value, mask)``
feed_forward         d_model, d_ff, dropout                             ``m(x)``
layer_norm           d_model                                            ``m(x)``
sublayer_connection  d_model, dropout                                   ``m(x, sublayer)`` (sublayer: a callable)
encoder_layer        d_model, h, d_ff, dropout                          ``m(x, src_mask)``
decoder_layer        d_model, h, d_ff, dropout                          ``m(x, memory, src_mask, tgt_mask)``
encoder              N, d_model, h, d_ff, dropout                       ``m(x, src_mask)``
decoder              N, d_model, h, d_ff, dropout                       ``m(x, memory, src_mask, tgt_mask)``
generator            d_model, vocab_size                                ``m(x)`` -> log-probabilities
model                src_vocab, tgt_vocab, N, d_model, d_ff, h,         ``m(src[B, Ls], tgt[B, Lt], src_mask,
                     dropout, max_len                                   tgt_mask)`` -> ``[B, Lt, d_model]``
padding_mask         (function)                                         ``f(tokens[B, L], pad_idx)`` -> ``[B, 1, L]``
subsequent_mask      (function)                                         ``f(size)`` -> ``[1, size, size]``
==================== ================================================== ===========================================

``src_mask`` is a padding mask ``[B, 1, Ls]``; ``tgt_mask`` is ``[B, Lt, Lt]`` (padding and subsequent positions).
"""
import dataclasses
import functools
import inspect
from dataclasses import dataclass


ROLES = (
    "embedding", "positional_encoding", "attention", "multi_head_attention", "feed_forward", "layer_norm",
    "sublayer_connection", "encoder_layer", "decoder_layer", "encoder", "decoder", "generator", "model",
    "padding_mask", "subsequent_mask",
)
FUNCTION_ROLES = ("attention", "padding_mask", "subsequent_mask")
IMPL_ENV_VAR = "CONFORMANCE_IMPL"


class MissingRole(LookupError):
    """The implementation has nothing that plays a role a check needs."""


@dataclass(frozen=True)
class Config:
    """Canonical hyperparameters (Table 3 names)."""
    d_model: int = 512
    h: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    N: int = 6
    vocab_size: int = 11
    src_vocab: int = 11
    tgt_vocab: int = 13
    max_len: int = 5000

    @property
    def d_k(self):
        return self.d_model // self.h


DERIVED_GLOBALS = {}
"""id(module dict) -> (that dict, [code of a top-level assignment computed from its size globals]): run again after
they are set (``embedding_multiplier = torch.sqrt(torch.tensor(num_model_dims))``,
``adapters.observe.derived_globals``); the dict is held, so that its id stays its own."""


def set_size_globals(knobs, cfg):
    """Set the globals through which code takes its sizes, ``knobs`` = [(module dict, global name, Config field)]
    (``adapters.observe.size_knobs``), to the sizes of ``cfg``, as the author's own main block sets them before
    building: a single vocabulary takes the source's; then the globals its module computes from them
    (:data:`DERIVED_GLOBALS`). A pad index is no field of the configuration: the padding helper's call sets it."""
    for values, name, field in knobs:
        if field != "pad_idx":
            values[name] = getattr(cfg, "src_vocab" if field == "vocab_size" else field)
    for values in {id(values): values for values, _, _ in knobs}.values():
        held, codes = DERIVED_GLOBALS.get(id(values), (None, ()))
        for code in codes if held is values else ():
            try:
                exec(code, values)
            except Exception:  # (computed for the author's sizes only: the global keeps its value)
                continue


SIGNATURES = {}
"""id(builder) -> (builder, the names of its parameters; None where it takes ``**kwargs`` or shows no signature): read
once a builder (``inspect.signature`` of a class costs as much as building a small block); the builder is held, so
that its id stays its own."""


def canonical_arguments(builder, cfg):
    """The canonical hyperparameters ``builder``'s signature names (all of them for ``**kwargs``)."""
    values = {field.name: getattr(cfg, field.name) for field in dataclasses.fields(cfg)}
    held, names = SIGNATURES.get(id(builder), (None, None))
    if held is not builder:
        names = parameter_names(builder)
        SIGNATURES[id(builder)] = (builder, names)
    return values if names is None else {name: values[name] for name in names if name in values}


def parameter_names(builder):
    """The names of ``builder``'s parameters, None where it takes ``**kwargs`` or shows no signature."""
    try:
        parameters = inspect.signature(builder).parameters
    except (TypeError, ValueError):
        return None
    return None if any(p.kind is p.VAR_KEYWORD for p in parameters.values()) else tuple(parameters)


def call_with_canonical_arguments(builder, cfg):
    """Call ``builder`` with the canonical hyperparameters its signature names (all of them for ``**kwargs``)."""
    return builder(**canonical_arguments(builder, cfg))


@dataclass(frozen=True)
class Supports:
    """What the code of one role supports, declared when the code is read and before any check runs (as
    scikit-learn's estimator tags say what an estimator handles). The checks ask it, in this process or across
    grading's judge, instead of a failure being read afterwards as the checker's limitation."""
    built: bool = False
    """A builder the checks can build and call."""
    written: bool = False
    """A class of the code plays the role, built or not (its constructor beyond the checker's reading)."""
    hyperparameters: frozenset | None = None
    """The canonical sizes the builder feeds the code (a dropout rate the constructor does not take cannot be
    set); None: every one the builder names (``CONFORMANCE_ROLES``)."""
    dtype: str | None = None
    """The precision the code fixes for itself (``"float32"``: discovery saw it compute in float32 only), in which
    its checks run; None: any."""

    def takes(self, hyperparameter):
        """Whether the checker can set ``hyperparameter`` for this role's code (unknown counts as yes)."""
        return self.hyperparameters is None or hyperparameter in self.hyperparameters

    def as_message(self):
        """As plain data, for grading's judge (:meth:`from_message` reads it back)."""
        return {**dataclasses.asdict(self), "hyperparameters": None if self.hyperparameters is None
                else sorted(self.hyperparameters)}

    @classmethod
    def from_message(cls, data):
        """:meth:`as_message`'s data read back, whatever of it is malformed left at its default."""
        if type(data) is not dict:
            return cls()
        fed = data.get("hyperparameters")
        return cls(built=data.get("built") is True, written=data.get("written") is True,
                   hyperparameters=frozenset(n for n in fed if type(n) is str) if type(fed) is list else None,
                   dtype=data.get("dtype") if data.get("dtype") in ("float32", "float16", "bfloat16") else None)


class Implementation:
    """An implementation under test: a name and its role builders."""

    def __init__(self, spec, roles, origin=None, notes=(), locate=None, read=None, repair=None, grafts=None,
                 unbound=None, broken=None, size_knobs=None, observed=None, padding=None, unbuilt=None):
        self.spec = spec
        self.size_knobs = list(size_knobs or ())  # (module dict, global name, Config field): sizes read from globals
        self.observed = observed  # what running the author's own entry points showed (``adapters.observe``)
        self.padding = padding  # "lengths": the model takes its padding as sequence lengths (padded at the end)
        self.broken = broken  # discovered code: the roles failing under the canonical call on its probe configuration
        self.unbuilt = dict(unbuilt or {})  # role -> the class found for it that could not be built: no builder
        self.grafts = dict(grafts or {})  # role -> the reference's blocks built into it in place of broken ones
        self.unbound = dict(unbound or {})  # name -> the failed import that was to bind it, while loading
        self.read = dict(read or {})  # role -> {cause: [message, ...]} found by reading the code (``read_code``)
        self.roles = dict(roles)
        self.origin = origin or spec
        self.notes = list(notes)  # how the code was loaded and mapped, for the report
        self.locate = locate  # (filename, line) -> "path:57 (cell 3, line 5)" for code that ran from cells
        self.repair = repair  # () -> the implementation with its crashes repaired (``adapters.repairs``), or None
        unknown = set(self.roles) - set(ROLES)
        if unknown:
            raise ValueError(f"{spec}: unknown roles {sorted(unknown)}; known roles are {list(ROLES)}")

    def __repr__(self):
        return f"Implementation({self.spec!r}, roles={sorted(self.roles)})"

    @functools.cached_property
    def repaired(self):
        """The implementation made again from the submission's code with its crashes repaired, or None (nothing to
        repair, or no code to repair: ``repair`` is None)."""
        return self.repair() if self.repair is not None else None

    def has(self, role):
        return role in self.roles

    def supports(self, role):
        """The :class:`Supports` of ``role``, from what discovery declared on its builder."""
        builder = self.roles.get(role)
        fed, fixed = getattr(builder, "hyperparameters", None), getattr(builder, "fixed_dtype", None)
        return Supports(built=builder is not None, written=builder is not None or role in self.unbuilt,
                        hyperparameters=frozenset(fed) if fed is not None else None,
                        dtype=str(fixed).removeprefix("torch.") if fixed is not None else None)

    def function(self, role):
        """The function playing a function role."""
        if role not in self.roles:
            raise MissingRole(f"{self.spec} has no {role!r}")
        return self.roles[role]

    def build(self, role, cfg, causal=False):
        """Build the module playing ``role`` from canonical hyperparameters (set first through the globals of code
        that reads its sizes there, in whichever process builds it). With ``causal``, the block with its own causal
        switch on, as a decoder builds its self-attention (``MultiHeadAttention(..., masked=True)``, §3.2.3): None
        when its constructor has no such switch."""
        set_size_globals(self.size_knobs, cfg)
        builder = self.function(role)
        if causal:
            builder = getattr(builder, "causal", None)
            if builder is None:
                return None
        return call_with_canonical_arguments(builder, cfg)

    def sizes_received(self, role, cfg, causal=False):
        """What a build of ``role`` takes from ``cfg``, as a key: the hyperparameters its builder names and the
        fields of the size globals its code reads (two configurations alike there build alike); None where the role
        has no builder of that kind."""
        builder = self.roles.get(role)
        builder = getattr(builder, "causal", None) if causal else builder
        if builder is None:
            return None
        knobs = {field: getattr(cfg, field, None) for _, _, field in self.size_knobs}
        return tuple(sorted({**canonical_arguments(builder, cfg), **knobs}.items()))
