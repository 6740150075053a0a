"""Discovery: which class or function of someone's code plays each role of ``conformance.interface``.

Three kinds of evidence, in order:

1. **names**: class and function names against families of synonyms (``MultiHeadAttentionBlock``,
   ``MultiHeadedAttention``, ``MaskedMultiHeadSelfAttentionBlock``, ... for ``multi_head_attention``), fuzzily, so
   that ``EndoderBlock`` is still an encoder layer;
2. **signatures**: constructor arguments mapped onto the canonical hyperparameters by their names (``embed_dim``,
   ``features``, ``hidden`` -> ``d_model``; ``n_head``, ``num_heads`` -> ``h``; ...), sub-blocks built from the roles
   they stand for (``EncoderBlock(features, attn_block, ff_block, dropout)``), forward arguments by name and
   position (``forward(decoder_input, encoder_output, self_attn_mask, dec_enc_attn_mask)``);
3. **behaviour**: a candidate must construct and accept the canonical call on a small configuration; the first
   one that does wins. A class whose name says nothing is still found by what its block does (:data:`SIGNATURES`:
   a LayerNorm, an embedding, a positional encoding), or by where the code uses it: the function a bound multi-head
   block calls, the class a bound block builds at an attribute named for the role (:func:`parts_in_built_blocks`).

The result is an :class:`conformance.interface.Implementation` whose ``mapping`` says what was found and how,
and which an adapter file (``conformance.toml`` next to the code, see :func:`read_overrides`) can override.
"""
import ast
import contextlib
import contextvars
import copy
import dataclasses
import difflib
import functools
import inspect
import io
import re
import textwrap
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn

from adapters import alignment, multipliers, projections
from adapters.lint import self_attributes
from conformance.harness import PAD, Case, canonical_inputs, run
from conformance.interface import FUNCTION_ROLES, Config, Implementation, call_with_canonical_arguments
from conformance.probes import ignores_input_scale
from conformance.verdicts import Missing

ROLE_NAMES = {
    "embedding": ["embedding", "embeddings", "inputembedding", "inputembeddings", "tokenembedding", "wordembedding",
                  "ioembeddingblock", "embeddingblock", "embeddinglayer"],
    "positional_encoding": ["positionalencoding", "positionalencodingblock", "positionencoding", "sinusoidalencoding",
                            "sinusoidalpositionalencoding", "posencoding", "positionalembedding"],
    "attention": ["attention", "scaleddotproductattention", "scaleddotproduct", "dotproductattention",
                  "scaledattention", "selfattentionfunction"],
    "multi_head_attention": ["multiheadattention", "multiheadedattention", "multiheadattentionblock",
                             "maskedmultiheadselfattentionblock", "multiheadselfattention", "mha",
                             "multiheadattentionlayer", "attentionblock", "selfattention"],
    "feed_forward": ["feedforward", "positionwisefeedforward", "feedforwardblock", "positionwiseffn", "ffn",
                     "feedforwardnetwork", "mlp", "feedforwardlayer", "pointwisefeedforward"],
    "layer_norm": ["layernorm", "layernormalization", "layernormalizationblock", "norm", "normalization"],
    "sublayer_connection": ["sublayerconnection", "residualconnection", "skipconnectionblock", "skipconnection",
                            "addnorm", "addandnorm", "residualblock", "residual"],
    "encoder_layer": ["encoderlayer", "encoderblock", "transformerencoderlayer", "transformerencoderblock",
                      "encoderunit"],
    "decoder_layer": ["decoderlayer", "decoderblock", "transformerdecoderlayer", "transformerdecoderblock",
                      "decoderunit"],
    "encoder": ["encoder", "encoderstack", "encodersequenceblock", "transformerencoder", "encoders"],
    "decoder": ["decoder", "decoderstack", "decodersequenceblock", "transformerdecoder", "decoders"],
    "generator": ["generator", "projectionlayer", "linearsoftmaxblock", "outputlayer", "projection", "outputprojection",
                  "classifier", "lmhead"],
    "model": ["transformer", "encoderdecoder", "transformermodel", "seq2seq", "model", "buildtransformer",
              "makemodel", "buildmodel", "createmodel", "transformerseq2seq"],
    "padding_mask": ["paddingmask", "padmask", "getpadmask", "makesrcmask", "createpaddingmask", "makepadmask",
                     "srcmask", "sourcemask", "makepaddingmask", "getpaddingmask"],
    "subsequent_mask": ["subsequentmask", "getsubsequentmask", "causalmask", "lookaheadmask", "createlookaheadmask",
                        "makecausalmask", "generatesquaresubsequentmask", "futuremask", "nopeakmask", "makestdmask",
                        "triumask", "createcausalmask", "maketrgmask", "maketgtmask"],
}

ARGUMENT_NAMES = {
    "d_model": ["d_model", "dmodel", "embed_dim", "input_dim", "features", "hidden", "hidden_size", "hidden_dim",
                "dim", "d_embed", "emb_dim", "embedding_dim", "model_dim", "n_embd", "size", "embed_size",
                "d_emb", "num_hiddens", "in_features", "embedding_size", "dim_model", "normalized_shape"],
    "h": ["h", "heads", "head", "num_heads", "n_head", "n_heads", "nhead", "num_head", "nheads", "attention_heads",
          "n_attention_heads", "head_num", "num_attention_heads"],
    "d_ff": ["d_ff", "dff", "d_hid", "d_inner", "ff_dim", "dim_feedforward", "d_hidden", "ffn_dim", "hidden_ff",
             "feedforward_dim", "ff_hidden", "d_ffn", "ffn_hidden", "inner_dim", "middle_dim", "ff_size", "ffn_num_hiddens",
             "mlp_dim", "dim_ff", "ffn_hidden_dim", "d_inner_hid"],
    "dropout": ["dropout", "drop", "dropout_rate", "drop_prob", "p_drop", "dropout_prob", "p", "dropout_p",
                "drop_rate", "pdrop"],
    "N": ["N", "n", "nx", "n_layers", "num_layers", "layers_count", "num_blocks", "n_blocks", "depth", "n_layer",
          "num_encoder_layers", "num_decoder_layers", "nlayers", "layer_num", "number_of_layers"],
    "vocab_size": ["vocab_size", "vocabulary_size", "vocab", "n_vocab", "ntoken", "num_embeddings", "vocab_len",
                   "n_tokens", "num_tokens", "output_dim", "vocabsize"],
    "src_vocab": ["src_vocab", "src_vocab_size", "input_vocab_size", "source_vocab", "source_vocab_size", "n_src_vocab",
                  "src_vocab_len", "input_vocab", "enc_vocab_size", "encoder_vocab_size"],
    "tgt_vocab": ["tgt_vocab", "tgt_vocab_size", "target_vocab_size", "trg_vocab", "trg_vocab_size", "target_vocab",
                  "output_vocab_size", "n_trg_vocab", "n_tgt_vocab", "dec_vocab_size", "decoder_vocab_size", "output_vocab"],
    "max_len": ["max_len", "seq_len", "max_seq_len", "n_position", "max_length", "maxlen", "src_seq_len", "tgt_seq_len",
                "context_length", "block_size", "max_positions", "max_seq_length", "max_position_embeddings",
                "seq_length", "n_positions", "max_sequence_length", "maximum_position_encoding", "length"],
    "d_k": ["d_k", "dk", "head_dim", "d_head", "head_size", "dim_head", "d_q", "key_dim", "d_key"],
    "d_v": ["d_v", "dv", "value_dim", "d_value"],
    "pad_idx": ["pad_idx", "src_pad_idx", "trg_pad_idx", "tgt_pad_idx", "padding_idx", "pad_token_id", "pad_id"],
}

SUBMODULE_NAMES = {
    "multi_head_attention": ["attn", "attention", "self_attn", "selfattn", "self_attention", "cross_attn", "src_attn",
                             "multi_headed_attention", "multi_head_attention", "mha_block",
                             "crossattn", "cross_attention", "enc_dec_attn", "mha", "attention_block",
                             "selfattn_block", "crossattn_block", "self_attention_block", "cross_attention_block",
                             "attn_block", "masked_attn", "enc_attn"],
    "feed_forward": ["feed_forward", "ff", "ffn", "feedforward", "feed_forward_block", "ff_block", "feedforward_block",
                     "pos_ffn", "mlp", "positionwise_feed_forward", "ffn_block", "pointwise_net",
                     "positionwise_ffn", "feed_forward_net"],
    "encoder_layer": ["layer", "encoder_layer", "block", "encoder_block"],
    "decoder_layer": ["layer", "decoder_layer", "block", "decoder_block"],
    "encoder": ["encoder", "encoder_seq_block", "enc", "encoder_stack"],
    "decoder": ["decoder", "decoder_seq_block", "dec", "decoder_stack"],
    "embedding": ["embed", "embedding", "src_embed", "tgt_embed", "input_embed_block", "output_embed_block",
                  "src_embedding", "tgt_embedding", "input_embedding", "output_embedding", "trg_embed"],
    "positional_encoding": ["pos", "src_pos", "tgt_pos", "positional_encoding", "pos_encoding", "input_pos_block",
                            "output_pos_block", "position", "pe", "pos_enc"],
    "generator": ["generator", "proj_layer", "projection_layer", "linear_softmax_block", "proj", "output_layer",
                  "projection"],
    "layer_norm": ["norm", "layer_norm", "layernorm", "ln"],
}

CALL_NAMES = {
    "query": ["query", "q", "queries", "x", "input", "inputs", "hidden_state", "src", "tgt", "trg"],
    "key": ["key", "k", "keys"],  # (and the memory of a layer's init_keys(states))
    "value": ["value", "v", "values"],
    "x": ["x", "input", "inputs", "src", "tgt", "trg", "hidden_state", "hidden_states", "encoder_input",
          "decoder_input", "dec_input", "enc_input", "seq", "embeddings", "tokens", "h"],
    "memory": ["memory", "enc_output", "encoder_output", "enc_out", "m", "context", "last_encoder_block_output",
               "encoder_outputs", "enc_outputs", "mem", "e_outputs", "encoded", "states", "encoder_states"],
    "src_mask": ["src_mask", "source_mask", "memory_mask", "enc_mask", "padding_mask", "src_padding_mask",
                 "memory_key_padding_mask", "dec_enc_attn_mask", "enc_dec_mask", "cross_mask", "src_key_padding_mask",
                 "mask", "attn_mask", "attention_mask", "e_mask", "pad_mask", "input_mask"],
    "tgt_mask": ["tgt_mask", "trg_mask", "target_mask", "look_ahead_mask", "causal_mask", "self_mask", "dec_mask",
                 "tgt_attn_mask", "self_attn_mask", "d_mask", "subsequent_mask", "future_mask", "dec_self_attn_mask"],
    "sublayer": ["sublayer", "prev_layer", "layer", "fn", "func", "module", "sub_layer", "f"],
    "src": ["src", "source", "src_seq", "x", "src_tokens", "input_ids", "enc_input", "inputs"],
    "tgt": ["tgt", "target", "trg", "trg_seq", "tgt_seq", "y", "tgt_tokens", "dec_input", "decoder_input", "outputs"],
    "tokens": ["seq", "tokens", "x", "src", "input", "inputs", "input_ids", "sequence"],
    "pad_idx": ["pad_idx", "pad", "pad_token", "pad_id", "padding_idx", "pad_token_id", "src_pad_idx"],
    "size": ["size", "sz", "seq_len", "length", "n", "seq", "tgt", "trg", "x", "tokens", "dim", "max_len"],
}

CANONICAL_CALLS = {
    "embedding": ["tokens"], "positional_encoding": ["x"], "feed_forward": ["x"], "layer_norm": ["x"],
    "generator": ["x"], "sublayer_connection": ["x", "sublayer"],
    "multi_head_attention": ["query", "key", "value", "src_mask"],
    "attention": ["query", "key", "value", "src_mask"],
    "encoder_layer": ["x", "src_mask"], "encoder": ["x", "src_mask"],
    "decoder_layer": ["x", "memory", "src_mask", "tgt_mask"], "decoder": ["x", "memory", "src_mask", "tgt_mask"],
    "model": ["src", "tgt", "src_mask", "tgt_mask"],
    "padding_mask": ["tokens", "pad_idx"], "subsequent_mask": ["size"],
}
PROBE = Config(d_model=12, h=3, d_ff=24, dropout=0.0, N=2, vocab_size=11, src_vocab=11, tgt_vocab=13, max_len=16)


def normalize(name):
    return re.sub(r"[^a-z0-9]", "", name.lower())


def name_score(name, synonyms):
    """How well ``name`` matches a family of synonyms: 1 exact, else difflib's ratio (0.8 or more counts)."""
    n = normalize(name)
    best = max(difflib.SequenceMatcher(None, n, normalize(s)).ratio() for s in synonyms)
    return best if best >= 0.8 else 0.0


def argument_role(name):
    """The canonical hyperparameter a constructor argument name stands for, or None."""
    n = normalize(name)
    for canonical, names in ARGUMENT_NAMES.items():
        if n in {normalize(s) for s in names}:
            return canonical
    return None


def submodule_role(parameter, bindings, role):
    """The role of a constructor argument that receives an already-built block: by annotation, then by name
    (a generic ``layer`` or ``block`` of a stack is that stack's layer)."""
    annotation = parameter.annotation
    if isinstance(annotation, str):
        annotation_name = annotation
    else:
        annotation_name = getattr(annotation, "__name__", "")
    for bound_role, binding in bindings.items():
        if annotation_name and binding.name == annotation_name:
            return bound_role
    if annotation_name in ("ModuleList", "list", "List"):
        return "layers"
    n = normalize(parameter.name)
    if n in ("layer", "block") and stack_layer_role(role):
        return stack_layer_role(role)
    if n in ("layers", "encoderblocks", "decoderblocks", "blocks", "encoderlayers", "decoderlayers", "layerlist"):
        return "layers"
    for sub_role, names in SUBMODULE_NAMES.items():
        if n in {normalize(s) for s in names}:
            return sub_role
    return None


@dataclass
class Binding:
    """How one role is played: the class or function, how its constructor is fed, how it is called."""
    role: str
    name: str
    target: object
    constructor: dict = field(default_factory=dict)   # argument -> what feeds it
    call: list = field(default_factory=list)           # forward argument -> canonical input
    notes: list = field(default_factory=list)
    works: bool = True
    """False when bound although it fails under the canonical call (the best candidate there was)."""
    layout: str = None
    """``SEQUENCE_FIRST`` for code written for (sequence, batch, d_model) tensors, found by behaviour."""
    part_of: tuple = None
    """``(enclosing binding, path, bindings)`` for a block found inside a bound block (:func:`parts_in_built_blocks`)
    and built as that block builds it; the path is None for a method of the enclosing block."""
    masks: str = None
    """The mask convention of this role where its masks have another shape than the others' (found by behaviour:
    a layer taking key-padding vectors, its attention block taking masks with a head axis)."""
    found_in: str = None
    """The role of the bound block this one was found in (:func:`parts_in_built_blocks`)."""
    adds_table: bool = False
    """A positional encoding that returns its table, which its caller adds to the embeddings."""
    takes_token_ids: bool = False
    """A stack or layer that embeds token ids itself: its canonical call (vectors) fails, yet the blocks that build
    it call it with tokens, so they are built with it and not with a stand-in."""
    target_shift: str = None
    """A model whose forward shifts the target itself (:mod:`adapters.alignment`), observed by calling it."""

    @property
    def composes(self):
        """Whether the blocks that build this one are built with it (else with the reference's in its place)."""
        return self.works or self.takes_token_ids

    def describe(self):
        parts = [f"{self.role}: {self.name}"]
        if self.constructor:
            parts.append("(" + ", ".join(f"{k}={v}" for k, v in self.constructor.items()) + ")")
        if self.call:
            parts.append("called as (" + ", ".join(f"{k}<-{v}" for k, v in self.call) + ")")
        return " ".join(parts + self.notes)


def constant(source):
    """The value of a ``value:...`` entry of a constructor or call plan (a harmless constant, or a probe value of
    :func:`learn_arguments`)."""
    return ast.literal_eval(source.removeprefix("value:"))


def canonical_value(canonical, cfg, role):
    if canonical.startswith("value:"):
        return constant(canonical)
    values = dataclasses.asdict(cfg)
    if canonical in ("d_k", "d_v"):
        return cfg.d_model // cfg.h
    if canonical == "pad_idx":
        return PAD
    if canonical == multipliers.D_FF_PER_D_MODEL:
        return multipliers.multiple(cfg)
    if canonical == "vocab_size" and role == "model":
        return cfg.src_vocab
    return values[canonical]


def constructor_plan(target, role, bindings):
    """Map each constructor argument of ``target`` to a canonical value, a built sub-role, or its default.

    Returns ``{argument: source}``; raises LookupError naming an argument nothing can feed.
    """
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return {}
    plan, counts, optional = {}, [], []
    for p in parameters:
        if p.kind is p.VAR_POSITIONAL:
            continue
        if p.kind is p.VAR_KEYWORD:
            inner = bindings.get({"encoder": "encoder_layer", "decoder": "decoder_layer"}.get(role, ""), None)
            plan["**"] = f"kwargs of {inner.name}" if inner else "nothing"
            continue
        fields = config_fields(target, p)
        if fields is not None:  # a configuration object: its fields are planned like arguments
            plan[p.name] = "config"
            for field_name, default in fields.items():
                source = config_field_source(field_name, default, role)
                if source is None and type(default) is int:
                    optional.append(f"{p.name}.{field_name}")
                if source is not None or type(default) is int:
                    plan[f"{p.name}.{field_name}"] = source
            continue
        canonical = argument_role(p.name)
        sub = submodule_role(p, bindings, role) if canonical is None else None
        if canonical == "N" and role not in ("encoder", "decoder", "model") or canonical in UNUSED_SIZES.get(role, ()):
            canonical = None  # a size the role does not take (``d_hid`` of a positional encoding): learned
        if canonical == "vocab_size" and role == "model":
            canonical = "src_vocab"
        if canonical:
            plan[p.name] = canonical
        elif sub == "layers":
            plan[p.name] = "layers"
        elif sub and sub in bindings and sub != role:
            plan[p.name] = f"role:{sub}"
        elif p.default is not p.empty:
            if role in ("encoder", "decoder", "model") and type(p.default) is int:
                counts.append(p.name)
            continue
        else:
            plan[p.name] = None  # learned below, by building
    sizes = [name for name, source in plan.items() if source in SIZES]
    unknown = [name for name, source in plan.items() if source is None]
    if unknown or len({plan[n] for n in sizes}) < len(sizes):  # a name that says nothing, or one size said twice:
        unknown += sizes                                         # every size is learned by building
    if unknown:
        plan.update(learn_arguments(target, role, plan, unknown, bindings, optional))
    plan = {name: source for name, source in plan.items() if source is not None}  # unlearned fields: defaults
    plan.update(tied_to_the_width(parameters, plan))
    plan.update(multipliers.d_ff_multipliers(role, plan, parameters, lambda trial: probe_build(
        Binding(role, getattr(target, "__name__", str(target)), target, trial), bindings), PROBE.d_model))
    plan.update(layer_counts(target, role, plan, [n for n in counts if n not in plan], bindings))
    return plan


def probe_build(binding, bindings, convention="keep"):
    """``binding`` built on the probe configuration (its prints swallowed), or None when its own code fails there
    (its checks say what is wrong with it)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return build_from_plan(binding, PROBE, bindings, convention=convention)
    except Exception:  # the candidate's own code
        return None


def layer_counts(target, role, plan, names, bindings):
    """The defaulted arguments of a stack or model, named otherwise (``n_e=6, n_d=6``), that set how many layers it
    builds: each built with its own probe value, those that come out as the length of a list of layers mean N."""
    probes = dict(zip(names, PROBE_SIZES))
    trial = Binding(role, getattr(target, "__name__", target), target,
                    {**plan, **{n: f"value:{v}" for n, v in probes.items()}})
    module = probe_build(trial, bindings)
    if module is None:  # the candidate's own code under probe values: its defaults stand
        return {}
    lengths = {len(m) for m in module.modules() if isinstance(m, (nn.ModuleList, nn.Sequential))}
    return {name: "N" for name, value in probes.items() if value in lengths}


def config_fields(target, parameter):
    """``{field: default}`` when ``parameter`` of ``target``'s constructor takes a configuration object: its
    annotation (or the global its name or annotation names) is a plain class of the submission's own that builds
    with no arguments (``config: VanillaTransformerConfig``); else None. The class is remembered for building."""
    annotation = parameter.annotation
    namespace = getattr(getattr(target, "__init__", None), "__globals__", {})
    if isinstance(annotation, str):
        annotation = namespace.get(annotation)
    if not inspect.isclass(annotation) or issubclass(annotation, (nn.Module, torch.Tensor)) \
            or annotation.__module__ in ("builtins", "typing") or annotation.__module__.startswith("torch"):
        return None
    try:
        fields = {p.name: p.default for p in inspect.signature(annotation).parameters.values()}
        annotation()
    except Exception:  # not a configuration that builds on its defaults
        return None
    if not fields or any(default is inspect.Parameter.empty for default in fields.values()):
        return None
    config_fields.classes[(target, parameter.name)] = annotation
    return fields


config_fields.classes = {}


def config_field_source(name, default, role):
    """What feeds a field of a configuration object: the hyperparameter its name says, a dropout for any
    ``*_dropout`` probability, else None (an integer is learned by building; anything else keeps its default)."""
    canonical = argument_role(name)
    if canonical == "N" and role not in ("encoder", "decoder", "model") or canonical in UNUSED_SIZES.get(role, ()):
        return None
    if canonical == "vocab_size" and role == "model":
        return "src_vocab"
    if canonical is None and type(default) is float and "drop" in normalize(name):
        return "dropout"
    return canonical


def tied_to_the_width(parameters, plan):
    """Defaulted arguments left out of ``plan`` whose default is the default of the argument mapped to d_model
    (``d_word_vec=512, d_model=512``): widths the code asserts equal, given d_model too."""
    defaults = {p.name: p.default for p in parameters if type(p.default) is int}
    widths = {default for name, default in defaults.items() if plan.get(name) == "d_model"}
    return {name: "d_model" for name, default in defaults.items() if name not in plan and default in widths}


TAKES_TOKEN_IDS = "Expected tensor for argument #1 'indices'"
"""What torch says when an embedding is given vectors: the block given them embeds token ids itself."""
SIZES = ("d_model", "d_ff", "vocab_size", "src_vocab", "tgt_vocab", "max_len", "N")
UNUSED_SIZES = {"positional_encoding": ("d_ff", "vocab_size"), "layer_norm": ("d_ff", "vocab_size", "max_len"),
                "multi_head_attention": ("d_ff", "vocab_size", "max_len"), "feed_forward": ("vocab_size", "max_len")}
"""Sizes a role's contract does not give it (``conformance.interface``): an argument named for one is learned."""
PROBE_SIZES = (30, 42, 54, 66, 78, 90, 102, 114)
"""Values no canonical size of :data:`PROBE` takes, each even and a multiple of its head count (a width is split
into heads, a sinusoid table into pairs): a constructor argument built with one is found by it."""


def learn_arguments(target, role, plan, unknown, bindings, optional=()):
    """What constructor arguments whose names say nothing mean (``hid_dim``, ``pf_dim``, ``filter_size``,
    ``d_word_vec``, ``enc_voc_size``, an argument the math does not use such as ``device`` or ``trg_sos_idx``), or
    whose names say the same size twice (``d_model`` and ``hidden``), learned from what gets built: each is given
    its own probe value, and the weights that come out say which size it is (the width of a LayerNorm or of a
    square projection: d_model; a projection between d_model and it: d_ff; the rows of an embedding: a vocabulary
    or, named for positions, max_len; the length of a list of layers: N). Arguments that shape no weight get a
    harmless value (``device`` -> "cpu", an index -> 0). Raises LookupError when building fails or says nothing."""
    name_of = getattr(target, "__name__", target)
    probes, learned = dict(zip(unknown, PROBE_SIZES)), {}
    for name in unknown:
        n = normalize(name)
        if "device" in n:
            learned[name] = "value:'cpu'"
        elif re.split(r"_|(?<=[a-z])(?=[A-Z])", name)[-1].lower() in ("idx", "index", "id", "token"):
            learned[name] = "pad_idx"
        elif "drop" in n:
            learned[name] = "dropout"
        elif n.startswith(("log", "use", "return", "output", "verbose", "debug")) \
                and not n.endswith(("dim", "size", "vocab", "len", "length", "features")):  # a switch, not a size
            learned[name] = "value:False"
        elif "head" in n and plan.get(name) is None:  # a count of heads shapes no weight: the name is all there is
            learned[name] = "h"
    probes = {name: value for name, value in probes.items() if name not in learned}
    if not probes:
        return learned
    trial = Binding(role, name_of, target, {**plan, **learned, **{n: f"value:{v}" for n, v in probes.items()}})
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            module = build_from_plan(trial, PROBE, bindings)
    except Exception as exc:  # the candidate's own code under probe values
        raise LookupError(f"cannot tell what constructor arguments {', '.join(probes)} of {name_of} are (built "
                          f"with probe values: {type(exc).__name__}: {exc})") from None
    d_model = next((n for n, v in probes.items() if any(
        isinstance(m, nn.LayerNorm) and tuple(m.normalized_shape) == (v,)
        or isinstance(m, nn.Linear) and m.in_features == m.out_features == v
        or isinstance(m, nn.Embedding) and m.embedding_dim == v for m in module.modules())), None)
    if d_model is None and role == "generator":  # Linear(d_model, V): the width it takes in
        d_model = next((n for n, v in probes.items() if any(
            isinstance(m, nn.Linear) and m.in_features == v for m in module.modules())), None)
    if d_model is None:  # no weight: a table (a buffer or a tensor attribute, a sinusoid's) as wide as d_model
        d_model = next((n for n, v in probes.items() if any(t.dim() >= 2 and t.shape[-1] == v
                                                            for t in tables(module))), None)
    if d_model is None:  # Linear(a, b) then Linear(b, a): the width the first one takes in is d_model
        linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
        first = next((m for m in linears if m.in_features in probes.values() and any(
            o.in_features == m.out_features and o.out_features == m.in_features for o in linears)), None)
        d_model = next((n for n, v in probes.items() if first is not None and v == first.in_features), None)
    model_width = probes.get(d_model, PROBE.d_model)
    for name, value in probes.items():
        lists = [m for m in module.modules() if isinstance(m, nn.ModuleList) and len(m) == value]
        rows = [m for m in module.modules() if isinstance(m, nn.Embedding) and m.num_embeddings == value]
        positions = [t for t in tables(module) if t.dim() >= 2 and t.shape[-2] == value]
        inner = [m for m in module.modules() if isinstance(m, nn.Linear)
                 and {m.in_features, m.out_features} == {model_width, value}]
        n = normalize(name)
        if name == d_model:
            learned[name] = "d_model"
        elif lists:
            learned[name] = "N"
        elif rows:
            learned[name] = ("max_len" if any(w in n for w in ("pos", "len", "max", "seq")) else
                             "vocab_size" if role != "model" else
                             "tgt_vocab" if any(w in n for w in ("tgt", "trg", "dec", "out", "target")) else "src_vocab")
        elif inner:  # a map out of d_model: into a vocabulary for the generator, else the inner width
            learned[name] = "vocab_size" if role == "generator" else "d_ff"
        elif role in multipliers.FEED_FORWARD_HOLDERS and multipliers.widens(module, model_width, value):
            learned[name] = multipliers.D_FF_PER_D_MODEL  # the inner width as a multiple of d_model
        elif positions:  # the rows of a table kept beside the weights (a sinusoid's): one per position
            learned[name] = "max_len"
        elif plan.get(name) is not None:  # a size its name says, that no weight shows: the name's reading stands
            learned[name] = plan[name]
        elif "vocab" in n and role == "model":  # a vocabulary no table takes: the other side's table is shared
            learned[name] = "src_vocab"
        elif name in optional:  # a field of a configuration object: its default stands
            learned[name] = None
        else:
            raise LookupError(f"cannot tell what constructor argument {name!r} of {name_of} is (built with "
                              f"{name}={value}, no weight took that size)")
    return learned


def tables(module):
    """The tensors a module keeps besides its parameters: buffers, and tensors set as plain attributes."""
    for m in module.modules():
        yield from m.buffers(recurse=False)
        yield from (v for v in vars(m).values() if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter))


def stack_layer_role(role):
    return {"encoder": "encoder_layer", "decoder": "decoder_layer"}.get(role)


def build_from_plan(binding, cfg, bindings, depth=0, convention="keep"):
    """Instantiate ``binding.target`` with canonical arguments and freshly built sub-blocks (``convention``: the
    code's mask convention, for the stand-ins of :func:`standing_in`)."""
    if depth > 4:
        raise RecursionError("sub-blocks nest too deeply")
    if binding.part_of is not None:
        owner, path, within = binding.part_of
        block = build_from_plan(owner, cfg, within, depth + 1, convention)
        if path is None:
            return MethodModule(block, binding.target.__name__)
        return (projections.with_projections(block, path) if binding.role == "multi_head_attention"
                else block.get_submodule(path))
    kwargs = {}
    vocabularies = sub_block_vocabularies(binding.constructor, cfg) if binding.role == "model" else {}
    for argument, source in binding.constructor.items():
        if argument == "**":
            inner = bindings.get(stack_layer_role(binding.role))
            if inner is not None:
                for name, inner_source in inner.constructor.items():
                    if not inner_source.startswith("role:") and inner_source != "layers" and name != "**":
                        kwargs[name] = canonical_value(inner_source, cfg, inner.role)
        elif source.startswith("role:"):
            sub_cfg = dataclasses.replace(cfg, vocab_size=vocabularies[argument]) if argument in vocabularies else cfg
            kwargs[argument] = build_sub_block(bindings[source[5:]], sub_cfg, bindings, depth + 1, convention)
        elif source == "config":
            kwargs[argument] = config_fields.classes[(binding.target, argument)]()
        elif "." in argument:
            continue  # a field of a configuration object, set below
        elif source == "layers":
            layer = bindings[stack_layer_role(binding.role) or "encoder_layer"]
            kwargs[argument] = nn.ModuleList(build_from_plan(layer, cfg, bindings, depth + 1, convention)
                                             for _ in range(cfg.N))
        else:
            kwargs[argument] = canonical_value(source, cfg, binding.role)
    for argument, source in binding.constructor.items():
        if "." in argument:
            holder, field_name = argument.split(".", 1)
            setattr(kwargs[holder], field_name, canonical_value(source, cfg, binding.role))
    with standing_in(binding, cfg, bindings, convention):
        built = binding.target(**kwargs)
    if not isinstance(built, nn.Module):  # a function that builds no module: not the builder of a role
        raise TypeError(f"{binding.name} returned {type(built).__name__}, not a torch.nn.Module")
    return built


def constructed_by_name(binding, bindings):
    """The broken bindings (they fail under their canonical call) whose class ``binding``'s ``__init__`` builds
    itself, by its global name (``self.attn = MultiHeadAttention(n_head, d_model, ...)``); not a class without a
    forward of its own (nothing tells how the block calls it: the crash it causes is the finding)."""
    init = getattr(binding.target, "__init__", None)
    code, namespace = getattr(init, "__code__", None), getattr(init, "__globals__", {})
    if code is None or not inspect.isclass(binding.target):
        return []
    return [b for b in bindings.values() if not b.composes and b is not binding and inspect.isclass(b.target)
            and b.target.forward is not nn.Module.forward and b.name in code.co_names
            and namespace.get(b.name) is b.target]


AUTHORS_OWN = contextvars.ContextVar("authors_own", default=None)
"""While :func:`authors_own_blocks` lasts: the list of the roles whose reference graft could not be avoided."""


@contextlib.contextmanager
def authors_own_blocks():
    """Build blocks from the author's own sub-blocks only, broken or not: no stand-in, and a reference graft only
    where the author's sub-block cannot even be built (its role is then added to the list this yields), so that a
    block runs as its author wrote it."""
    grafted = []
    token = AUTHORS_OWN.set(grafted)
    try:
        yield grafted
    finally:
        AUTHORS_OWN.reset(token)


@contextlib.contextmanager
def standing_in(binding, cfg, bindings, convention):
    """While ``binding``'s class is built, the broken classes it builds by name are replaced in its module by
    stand-ins (:func:`stand_in`), so that its own code is still checked (the grafting of :func:`build_sub_block`
    for blocks a class makes itself)."""
    broken = constructed_by_name(binding, bindings) if AUTHORS_OWN.get() is None else []
    namespace = binding.target.__init__.__globals__ if broken else {}
    for b in broken:
        namespace[b.name] = stand_in(b, cfg, convention)
    try:
        yield
    finally:
        for b in broken:
            namespace[b.name] = b.target


def returns_tuple(cls):
    """Whether the class's forward returns a tuple (``return out, weights``), read from its source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    except (OSError, TypeError, SyntaxError):
        return False
    return any(isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) for node in ast.walk(tree))


def stand_in(broken, cfg, convention):
    """A class taking the broken class's constructor and forward arguments that computes the reference's role: the
    hyperparameters read from the constructor's arguments (by the binding's plan), the inputs from the forward's
    (masks in the code's ``convention``), a tuple returned if the broken forward returns one."""
    signature = inspect.signature(broken.target)
    parameters = list(inspect.signature(broken.target.forward).parameters.values())[1:]
    plan = call_plan(parameters, CANONICAL_CALLS[broken.role])
    pair = returns_tuple(broken.target)
    fields = {f.name for f in dataclasses.fields(Config)}

    class StandIn(nn.Module):
        grafted_by_checker = True

        def __init__(self, *args, **kwargs):
            super().__init__()
            arguments = signature.bind(*args, **kwargs).arguments
            values = {broken.constructor[n]: v for n, v in arguments.items()
                      if broken.constructor.get(n) in fields and isinstance(v, (int, float))}
            self.reference = grafted_reference(broken.role, dataclasses.replace(cfg, **values))

        def forward(self, *args, **kwargs):
            given = inspect.Signature(parameters).bind(*args, **kwargs).arguments
            named = {c: given.get(p.name) for p, c in zip(parameters, plan) if c}
            inputs = []
            for canonical in CANONICAL_CALLS[broken.role]:
                value = named.get(canonical)
                if canonical in ("key", "value") and value is None:
                    value = named.get("query")  # a self-attention forward(x, mask)
                if canonical.endswith("mask") and isinstance(value, torch.Tensor):
                    value = from_convention(value, convention)
                    value = value[:, 0] if value.dim() == 4 else value  # a head axis the reference adds itself
                inputs.append(value)
            out = self.reference(*inputs)
            return (out, None) if pair else out

    StandIn.__name__ = StandIn.__qualname__ = f"{broken.name}StandIn"
    return StandIn


SOURCE_WORDS, TARGET_WORDS = ("src", "source", "input", "enc"), ("tgt", "trg", "target", "output", "dec")


def sub_block_vocabularies(constructor, cfg):
    """``{argument: vocabulary size}`` for the embeddings, stacks and generator a model receives built: the source
    side (and an encoder that embeds) gets src_vocab, the target side, a decoder and the generator tgt_vocab (an
    embedding's side by the argument's name, else by order)."""
    sizes, embeddings = {}, [a for a, s in constructor.items() if s == "role:embedding"]
    for i, argument in enumerate(embeddings):
        name = argument.lower()
        target = any(w in name for w in TARGET_WORDS) or (i > 0 and not any(w in name for w in SOURCE_WORDS))
        sizes[argument] = cfg.tgt_vocab if target else cfg.src_vocab
    sizes.update({a: cfg.tgt_vocab for a, s in constructor.items() if s in ("role:generator", "role:decoder")})
    sizes.update({a: cfg.src_vocab for a, s in constructor.items() if s == "role:encoder"})  # (stacks that embed)
    return sizes


def grafted_reference(role, cfg):
    """The reference's block of ``role``, built in place of a candidate's broken one and marked so
    (``grafted_by_checker``: its code is not the candidate's, so what it does is no finding of the candidate's)."""
    from reference.transformer import CONFORMANCE_ROLES as REFERENCE
    block = call_with_canonical_arguments(REFERENCE[role], cfg)
    block.grafted_by_checker = True
    return block


def is_graft(module):
    """Whether ``module`` is a block of the reference's built in place of the candidate's (or a stand-in for one)."""
    return getattr(module, "grafted_by_checker", False) is True


def build_sub_block(binding, cfg, bindings, depth, convention="keep"):
    """A sub-block handed to a constructor (``EncoderBlock(features, attention_block, ...)``): the candidate's own,
    or, when the candidate's cannot even be built (its own checks report why), the reference's, so that the
    enclosing block's own code is still checked (the mapping notes say so)."""
    own = AUTHORS_OWN.get()
    if not binding.composes and own is None:
        return grafted_reference(binding.role, cfg)
    try:
        return build_from_plan(binding, cfg, bindings, depth, convention)
    except Exception:  # the candidate's own code; its role's checks report the error
        if own is not None:
            own.append(binding.role)
        return grafted_reference(binding.role, cfg)


def builds(binding, bindings):
    """None when ``binding`` builds on the probe configuration, else the error."""
    try:
        build_from_plan(binding, PROBE, bindings)
    except Exception as exc:  # the candidate's own code
        return f"{type(exc).__name__}: {exc}"
    return None


def forward_parameters(target):
    """The parameter names of the forward (or of the function) after ``self``."""
    function = (getattr(target.block, target.method) if isinstance(target, MethodModule) else
                target.forward if isinstance(target, nn.Module) else target)
    try:
        return [p for p in inspect.signature(function).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def call_plan(parameters, wanted, torch_style=False):
    """Which canonical input (of ``wanted``) feeds each forward parameter: by name first, then by position;
    parameters with defaults that match nothing keep their defaults. Masks come in torch's two parts when a
    parameter is named for padding, or when the code's other calls take them so (``torch_style``)."""
    plan = [None] * len(parameters)
    for i, p in enumerate(parameters):
        n = normalize(p.name)
        plan[i] = lengths_of(p.name, wanted, plan)
        for canonical in wanted if plan[i] is None else ():
            if n in {normalize(s) for s in CALL_NAMES[canonical]} and canonical not in plan:
                if canonical in ("src_mask",) and "tgt_mask" in wanted and n in ("mask", "attnmask", "attentionmask"):
                    continue
                plan[i] = canonical
                break
    if torch_style or any("paddingmask" in normalize(p.name) for p in parameters):
        return torch_style_plan(parameters, plan, wanted)
    for i, p in enumerate(parameters):
        if plan[i] is None:
            guess = by_words(p.name, [c for c in wanted if c not in plan])
            plan[i] = guess
    for i, p in enumerate(parameters):
        if plan[i] is None:
            remaining = [c for c in wanted if c not in plan]
            if normalize(p.name) in ("dk", "dkey", "headdim"):
                plan[i] = "d_k"
            elif remaining and p.default is p.empty:
                plan[i] = remaining[0]
            elif p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                plan[i] = harmless_argument(p.name)
    return plan


LENGTHS = "lengths"
"""The part of a canonical mask given to a parameter that takes padding as sequence lengths (``src_lengths``)."""


def lengths_of(name, wanted, plan):
    """``"src_mask:lengths"`` (or the target's) for a forward parameter named for sequence lengths (``src_lengths``,
    ``tgt_lens``, ``lengths``): padding given as the length of each sequence, the masks built from it by the code
    itself; else None."""
    words = set(re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()))
    if not words & {"lengths", "lens", "seqlens"}:
        return None
    target = bool(words & WORDS["target"] - {"output", "out"})
    mask = "tgt_mask" if target else "src_mask"
    taken = {c for c in plan if c}
    if mask not in wanted or f"{mask}:{LENGTHS}" in taken:
        return None
    return f"{mask}:{LENGTHS}"


def mask_lengths(mask):
    """The sequence lengths (batch,) a canonical mask gives its keys: the keys some query may see, which must be a
    prefix of each sequence (else a ``missing`` verdict: the check cannot be made as the code takes its inputs)."""
    seen = mask.any(-2).reshape(mask.shape[0], -1)
    lengths = seen.sum(-1)
    if not torch.equal(seen, torch.arange(seen.shape[-1], device=seen.device) < lengths.unsqueeze(-1)):
        raise Missing("adapter.padding_not_expressible_as_lengths", "a padding mask its sequence lengths can express",
                      "the code takes padding as sequence lengths, and this check's mask pads positions that are not "
                      "at the end of a sequence, which lengths cannot express")
    return lengths


def torch_style_plan(parameters, plan, wanted):
    """The plan of a call in torch's convention, whose masks come in two parts (``src_key_padding_mask`` (batch,
    key) and ``src_mask`` (query, key), True = blocked, as ``nn.TransformerEncoderLayer`` takes them): each mask
    parameter gets the ``padding`` or the ``attention`` part of the canonical mask its name names (the target's,
    else the source's), the other inputs as planned, and what is left its default (None when it has none)."""
    masks = [c for c in wanted if c.endswith("mask")]
    for i, p in enumerate(parameters):
        n = normalize(p.name)
        if "mask" not in n:
            if plan[i] is None:
                plan[i] = by_words(p.name, [c for c in wanted if c not in plan and not c.endswith("mask")])
            continue
        words = set(re.findall(r"[a-z]+", p.name.lower()))
        base = "tgt_mask" if words & {"tgt", "trg", "target"} and "tgt_mask" in masks else masks[0] if masks else None
        plan[i] = f"{base}:{'padding' if 'paddingmask' in n else 'attention'}" if base else "value:None"
    for i, p in enumerate(parameters):
        if plan[i] is None:
            remaining = [c for c in wanted if not c.endswith("mask") and c not in plan]
            plan[i] = remaining[0] if remaining and p.default is p.empty else (
                "value:None" if p.default is p.empty else None)
    return plan


def torch_mask(mask, part):
    """A canonical mask (True = may attend) as one of torch's two parts, True = blocked: ``padding`` (batch, key),
    the keys no query may see; ``attention`` (query, key), what every sample blocks besides them (None if nothing)."""
    if not isinstance(mask, torch.Tensor):
        return None
    seen = mask.any(-2)
    if part == "padding":
        return ~seen.reshape(seen.shape[0], -1) if mask.dim() > 2 else ~seen
    blocked = ~(mask | ~seen.unsqueeze(-2))
    blocked = blocked.reshape(-1, *blocked.shape[-2:]).any(0)
    return blocked if blocked.any() else None


WORDS = {
    "source": {"src", "source", "enc", "encoder", "input", "inp"},
    "target": {"trg", "tgt", "target", "dec", "decoder", "output", "out"},
    "encoded": {"representations", "representation", "repr", "reps", "memory", "hidden", "states", "encoded",
                "outputs", "output", "out", "enc"},
}
"""The words long argument names are made of (``trg_token_ids_batch``, ``src_representations_batch``)."""


def by_words(name, remaining):
    """The canonical input of ``remaining`` a long argument name spells out in words, or None: a mask of the
    target or the source (or the only mask left), the encoder's output (``src_representations_batch``: source
    words and an encoded one), the source or the target tokens."""
    words = set(re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()))
    source, target = bool(words & WORDS["source"]), bool(words & WORDS["target"] - {"output", "out"})
    masks = [c for c in remaining if c.endswith("mask")]
    if "mask" in words or "masks" in words:  # (the one mask left, when the name says neither side)
        wanted = "tgt_mask" if target else "src_mask" if source else masks[0] if len(masks) == 1 else None
    elif "memory" in remaining and source and words & WORDS["encoded"] - {"enc"}:
        wanted = "memory"
    else:
        wanted = "tgt" if target else "src" if source else None
    return wanted if wanted in remaining else None


def harmless_argument(name):
    """What a required call argument the math does not use is given (``device`` -> "cpu"; a dropout module, a
    decoding cache or state -> None), as a ``value:`` entry of a call plan; None when its name says nothing."""
    n = normalize(name)
    if "device" in n:
        return "value:'cpu'"
    if any(word in n for word in ("dropout", "cache", "state", "past", "incremental")):
        return "value:None"
    return None


# -- masks ---------------------------------------------------------------------------------------
MASK_CONVENTIONS = {
    "keep": "boolean, True = may attend",
    "blocked": "boolean, True = blocked (torch's convention)",
    "additive": "additive float, 0 = may attend, -inf = blocked",
}


HEAD_AXIS = "+heads"
"""Suffix of a convention whose masks carry a head axis: (batch, 1, Lq|1, Lk), for code that applies the mask to
the (batch, h, Lq, Lk) scores without adding the axis itself."""


KEY_VECTORS = "+keys"
"""Suffix of a convention whose masks are (batch, Lk) vectors, the keys some query may see (a key-padding mask, as
code that views it as (batch, 1, 1, Lk) takes it): what else the canonical mask blocks is not given."""


def describe_convention(convention):
    base = convention.removesuffix(HEAD_AXIS).removesuffix(KEY_VECTORS)
    shape = ("; masks given a head axis (batch, 1, Lq, Lk)" if convention.endswith(HEAD_AXIS) else
             "; masks given as (batch, Lk) key-padding vectors, which cannot say what else a query may not see"
             if convention.endswith(KEY_VECTORS) else "")
    return MASK_CONVENTIONS[base] + shape


def to_convention(mask, convention):
    """Convert a canonical mask (bool, True = may attend) into the implementation's convention."""
    if mask is None or not isinstance(mask, torch.Tensor):
        return mask
    if convention.endswith(HEAD_AXIS):
        mask = mask.unsqueeze(1) if mask.dim() == 3 else mask
        convention = convention.removesuffix(HEAD_AXIS)
    if convention.endswith(KEY_VECTORS):
        mask = mask.any(-2) if mask.dim() == 3 else mask
        convention = convention.removesuffix(KEY_VECTORS)
    if convention == "blocked":
        return ~mask
    if convention == "additive":
        return torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, float("-inf"))
    return mask


def convention_of_mask(mask):
    """The convention a subsequent-position mask helper uses, from its output for size 3; None if unclear."""
    if not isinstance(mask, torch.Tensor) or mask.numel() < 9:
        return None
    m = mask.reshape(-1, 3, 3)[0]
    if m.is_floating_point() and torch.isinf(m).any():
        return "additive"
    m = m != 0
    lower = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    if torch.equal(m, lower):
        return "keep"
    if torch.equal(m, ~lower):
        return "blocked"
    return None


def first_tensor(result):
    """Blocks that return tuples (output, weights) or lists: the first tensor is the output."""
    while isinstance(result, (tuple, list)) and result:
        result = result[0]
    return result


class Transparent(nn.Module):
    """A wrapper whose parameters are named as in the wrapped module (``w_q.weight``, not ``inner.w_q.weight``), so
    that checks matching parameter names (the reference's weights copied by name) see the candidate's own."""

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self.inner.named_parameters(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)


SEQUENCE_FIRST = "sequence first"
"""The layout of code written for torch's default (sequence, batch, d_model) tensors (``batch_first=False``)."""
SEQUENCES = ("x", "query", "key", "value", "memory", "tokens", "src", "tgt")


def in_layout(named, layout):
    """The canonical (batch-first) inputs ``named`` in the code's ``layout``."""
    if layout != SEQUENCE_FIRST:
        return named
    return {k: v.transpose(0, 1) if k in SEQUENCES and isinstance(v, torch.Tensor) and v.dim() >= 2 else v
            for k, v in named.items()}


def from_layout(out, layout):
    """An output in the code's ``layout`` as a batch-first one."""
    if layout == SEQUENCE_FIRST and isinstance(out, torch.Tensor) and out.dim() >= 2:
        return out.transpose(0, 1)
    return out


class Adapted(Transparent):
    """A candidate module under the canonical call of its role (inputs by name, masks converted, tensors in the
    code's layout)."""

    def __init__(self, inner, role, convention, layout=None, arguments=None, tokens_for_positions=False,
                 adds_table=False):
        super().__init__()
        self.inner, self.role, self.convention, self.layout = inner, role, convention, layout
        self.arguments = arguments or plan_arguments(inner, CANONICAL_CALLS[role])
        self.tokens_for_positions, self.adds_table = tokens_for_positions, adds_table
        """A positional encoding called with token ids (only their shape counts) instead of the embeddings."""
        self.setup, self.setup_arguments = setup_call(inner, role, {c for _, c in self.arguments})

    def forward(self, *args):
        named = in_layout(dict(zip(CANONICAL_CALLS[self.role], args)), self.layout)
        if self.setup:  # state the forward reads, set first as the author's own code does (init_keys(key))
            getattr(self.inner, self.setup)(**argument_values(self.setup_arguments, named, self.convention))
        given = dict(named, x=positions_of(named["x"])) if self.tokens_for_positions else named
        out = first_tensor(self.inner(**adapt_arguments(self.arguments, given, self.convention)))
        if self.role == "positional_encoding" and returns_table(out, named["x"], self.adds_table):
            out = named["x"] + out  # the (length, d_model) table alone: its caller adds it, as the author's does
        if self.role in ("encoder", "decoder") and isinstance(out, torch.Tensor) and out.dim() == 4 \
                and out.shape[1:3] == named["x"].shape[:2]:
            out = out[-1]  # every layer's output stacked on a new first axis (DETR's decoder): the last layer's
        return from_layout(out, self.layout)

    def around(self, inner):
        """This adapter (its call plan, masks and layout) around ``inner``, another instance of its module's class
        (one built inside a block), sharing nothing else with it."""
        other = copy.copy(self)
        other._modules = dict(self._modules, inner=inner)
        return other

    def inputs_not_accepted(self):
        """See :func:`inputs_not_accepted`; nothing for a forward not defined at all (its own error says why)."""
        forward = type(self.inner).forward
        if forward is nn.Module.forward:
            return [], None
        missing, signature = inputs_not_accepted(forward, self.arguments, CANONICAL_CALLS[self.role],
                                                 f"{type(self.inner).__name__}.forward", skip=1)
        return [c for c in missing if c not in {c for _, c in self.setup_arguments}], signature


class MethodModule(nn.Module):
    """A method of a built block as a module of its own (``Transformer.get_position_encoding(x)``): the block moves
    with it, but its parameters are not this module's."""

    def __init__(self, block, method):
        super().__init__()
        object.__setattr__(self, "block", block)  # (not registered: its parameters belong to the block's role)
        self.method = method

    def forward(self, *args, **kwargs):
        return getattr(self.block, self.method)(*args, **kwargs)

    def _apply(self, fn, *args, **kwargs):
        self.block._apply(fn, *args, **kwargs)
        return super()._apply(fn, *args, **kwargs)

    def train(self, mode=True):
        self.block.train(mode)
        return super().train(mode)


def positions_of(x):
    """Token ids (ones) of the shape of the embeddings ``x`` without their feature axis: what a positional encoding
    that its caller calls with the tokens is given."""
    return torch.ones(x.shape[:-1], dtype=torch.long, device=x.device)


def returns_table(out, x, known=False):
    """Whether a positional encoding returned its (length, d_model) table for ``x`` (or (1, length, d_model))
    rather than ``x`` plus it; ``known``: discovery found that it does, so a batch of one says nothing else."""
    return isinstance(out, torch.Tensor) and x.dim() == 3 and out.shape[-2:] == x.shape[1:] and (
        out.dim() == 2 or out.dim() == 3 and out.size(0) == 1 and (x.size(0) > 1 or known))


def setup_call(inner, role, taken):
    """``(name, plan)`` of the set-up method of ``inner`` (:func:`setup_method`) when each of its parameters gets a
    canonical input its forward does not take (``init_keys(key)``), else ``(None, [])``."""
    name = setup_method(type(inner))
    if name is None:
        return None, []
    try:
        required = [p for p in inspect.signature(getattr(inner, name)).parameters.values() if p.default is p.empty]
    except (TypeError, ValueError):
        return None, []
    plan = plan_arguments(getattr(inner, name), [c for c in CANONICAL_CALLS[role] if c not in taken])
    fed = {n for n, c in plan if not c.startswith("value:")}
    return (name, plan) if required and all(p.name in fed for p in required) else (None, [])


def setup_method(cls):
    """The method other than ``__init__`` and ``forward`` that sets state ``forward`` reads and ``__init__`` does
    not set (``init_keys(self, key): self.proj_key = ...``), or is named to (``init_keys(self, states)`` passing
    them on to its sub-layers), or None."""
    made, read = self_attributes(cls.__init__), self_attributes(cls.forward, ast.Load)
    if made is None or read is None:
        return None
    for name, method in vars(cls).items():
        if name in ("__init__", "forward") or name.startswith("_") or not inspect.isfunction(method) \
                or any(word in name for word in ("weight", "param", "reset")):
            continue
        sets = self_attributes(method)
        if sets is not None and (sets - made & read or name.startswith(("init_", "set_", "prepare"))):
            return name
    return None


def inputs_not_accepted(function, arguments, wanted, shown, skip=0):
    """``(the inputs wanted (a role's canonical call) that no parameter of function receives, its signature as
    shown)``, from the call plan ``arguments``; nothing for a function taking ``*args`` or ``**kwargs``."""
    try:
        parameters = list(inspect.signature(function).parameters.values())[skip:]
    except (TypeError, ValueError):
        return [], None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return [], None
    taken = {c.split(":")[0] for _, c in arguments}
    return [c for c in wanted if c not in taken], f"{shown}({', '.join(p.name for p in parameters)})"


def adapt_arguments(arguments, named, convention):
    """Keyword arguments for the candidate from the canonical inputs ``named``."""
    named = dict(named)
    if "query" in named:
        named["d_k"] = named["query"].size(-1)
    return argument_values(arguments, named, convention)


def argument_values(arguments, named, convention):
    """Keyword arguments from the canonical inputs ``named`` by the call plan ``arguments``: masks in the code's
    ``convention``, and the harmless constants the plan gives what the math does not use (``value:...``)."""
    values = {}
    for name, c in arguments:
        if c.startswith("value:"):
            values[name] = constant(c)
        elif c.endswith(":" + LENGTHS) and c.split(":")[0] in named:
            values[name] = mask_lengths(named[c.split(":")[0]])
        elif ":" in c and c.split(":")[0] in named:
            values[name] = torch_mask(named[c.split(":")[0]], c.split(":")[1])
        elif c in named:
            values[name] = to_convention(named[c], convention) if c.endswith("mask") else named[c]
    return values


class AdaptedModel(Transparent):
    """A whole model under the canonical call: through its own ``forward`` when that takes the source and the
    target, else through its ``encode`` and ``decode`` methods. Its output is the decoder output (``d_model``
    features): the call's own result when it has that shape, else, for a call ending in log-probabilities or
    logits, the last output of that shape one of the model's sub-modules made (the decoder's, or its final norm's),
    read with forward hooks. What the author's own call returned is kept as :attr:`raw_output`."""

    def __init__(self, inner, convention, d_model=None, layout=None, target_shift=None):
        super().__init__()
        self.inner, self.convention, self.d_model, self.layout = inner, convention, d_model, layout
        self.target_shift = target_shift
        """How its forward shifts the target (:mod:`adapters.alignment`): it is then called with one more target
        position, and its outputs read at the positions that read the canonical target's tokens."""
        methods = callable(getattr(inner, "encode", None)) and callable(getattr(inner, "decode", None))
        own_forward = type(inner).forward is not nn.Module.forward
        forward_plan = plan_arguments(inner, CANONICAL_CALLS["model"]) if own_forward else []
        self.forward_arguments = (forward_plan if {c for _, c in forward_plan} >= {"src", "tgt"} or not methods
                                  else None)
        torch_style = in_torch_style(forward_plan)  # encode and decode take their masks as forward does
        self.encode_arguments = plan_arguments(inner.encode, ["src", "src_mask"], torch_style) if methods else None
        self.decode_arguments = (plan_arguments(inner.decode, ["memory", "src_mask", "tgt", "tgt_mask"], torch_style)
                                 if methods else None)

    @property
    def masks_from_tokens(self):
        """A model that takes no mask builds its own from the pad index: the positions the canonical masks pad are
        given the pad token, so that its masks are the canonical ones."""
        return "src_mask" not in {c.split(":")[0] for _, c in (self.forward_arguments or self.encode_arguments or [])}

    @property
    def reads_a_start_token(self):
        """Its decoder reads a start token of the model's own before the target's (:data:`alignment.PREPENDS`)."""
        return self.target_shift == alignment.PREPENDS and self.forward_arguments is not None

    def by_encode_and_decode(self):
        """The same model called through its ``encode`` and ``decode`` methods (the path its author's own decoding
        takes) when the canonical call goes through its ``forward``; else None."""
        if self.forward_arguments is None or self.encode_arguments is None:
            return None
        other = copy.copy(self)
        other.forward_arguments = None
        return other

    def forward(self, src, tgt, src_mask, tgt_mask):
        if self.masks_from_tokens:
            src = src.masked_fill(~src_mask.any(-2).expand_as(src), PAD)  # (the keys no query may see)
            tgt = tgt.masked_fill(~tgt_mask.any(-2).expand_as(tgt), PAD)
        if self.target_shift is None or self.layout is not None or self.forward_arguments is None:
            return self.called(src, tgt, src_mask, tgt_mask)  # (encode and decode are given the target as it is)
        length = alignment.decoder_length(tgt.size(1), self.target_shift)
        tgt, tgt_mask = alignment.extended(tgt, tgt_mask, self.target_shift, PAD)
        out = self.called(src, tgt, src_mask, tgt_mask, length=length)
        self.raw_output = alignment.aligned(self.raw_output, self.target_shift)
        return alignment.aligned(out, self.target_shift)

    def called(self, src, tgt, src_mask, tgt_mask, length=None):
        """The decoder output of the author's call (``length``: how many target positions its decoder reads,
        where that is not ``tgt``'s)."""
        named = in_layout({"src": src, "tgt": tgt, "src_mask": src_mask, "tgt_mask": tgt_mask}, self.layout)
        wanted = (*named["tgt"].shape[:2], self.d_model)
        if length is not None:
            wanted = (wanted[0], length, self.d_model)
        if self.forward_arguments is not None:
            call = lambda: self.inner(**argument_values(self.forward_arguments, named, self.convention))  # noqa: E731
            if self.encode_arguments is None:  # nothing else to call: its output, whatever it is, is checked
                out, raw = decoder_output(self.inner, wanted, call)
                self.raw_output = from_layout(raw, self.layout)
                return from_layout(raw if out is None else out, self.layout)
            try:
                out, raw = decoder_output(self.inner, wanted, call)
            except TypeError:  # a forward that does not fit the canonical call: encode and decode are used
                out = None
            if out is not None:
                self.raw_output = from_layout(raw, self.layout)
                return from_layout(out, self.layout)
            self.forward_arguments = None
        named["memory"] = first_tensor(self.inner.encode(**argument_values(self.encode_arguments, named,
                                                                           self.convention)))
        decode = lambda: self.inner.decode(**argument_values(self.decode_arguments, named, self.convention))  # noqa: E731
        out, raw = decoder_output(self.inner, wanted, decode)
        self.raw_output = from_layout(raw, self.layout)
        return from_layout(raw if out is None else out, self.layout)

    def inputs_not_accepted(self):
        """The canonical inputs a model called through its own forward only takes no parameter for (not its masks
        when it makes them from the pad tokens it is given)."""
        if self.forward_arguments is None:
            return self.encode_and_decode_inputs_not_accepted()
        if self.encode_arguments is not None:
            return [], None
        missing, signature = inputs_not_accepted(type(self.inner).forward, self.forward_arguments,
                                                 CANONICAL_CALLS["model"], f"{type(self.inner).__name__}.forward", skip=1)
        return [c for c in missing if not (self.masks_from_tokens and c.endswith("mask"))], signature

    def encode_and_decode_inputs_not_accepted(self):
        """The masks that ``encode`` or ``decode`` take no parameter for, and the signatures of those that drop one
        (joined by "and"): a source padding mask dropped by either leaves the padded source visible."""
        missing, shown = [], []
        for method, arguments, wanted in (("encode", self.encode_arguments, ["src_mask"]),
                                          ("decode", self.decode_arguments, ["src_mask", "tgt_mask"])):
            planned = {c for _, c in arguments}  # (a mask given as torch's attention part alone drops its padding)
            kept = [(n, c) for n, c in arguments
                    if not c.endswith(":attention") or c.replace(":attention", ":padding") in planned]
            dropped, signature = inputs_not_accepted(getattr(type(self.inner), method), kept, wanted,
                                                     f"{type(self.inner).__name__}.{method}", skip=1)
            missing += [c for c in dropped if c not in missing]
            halved = {c.split(":")[0] for _, c in arguments} - {c.split(":")[0] for _, c in kept}
            if dropped:
                shown.append(signature + (" (its mask taken as torch's attention part, without the padding)"
                                          if set(dropped) <= halved else ""))
        return ([], None) if self.masks_from_tokens else (missing, " and ".join(shown) or None)


def decoder_output(model, shape, call):
    """``(the decoder output, the call's result)`` of ``call`` (a call of ``model``): the result when it has
    ``shape`` (batch, target length, d_model), else the last output of that shape a sub-module of ``model``
    returned during the call, else None."""
    made = []

    def record(module, args, output):
        output = first_tensor(output)
        if isinstance(output, torch.Tensor) and tuple(output.shape) == shape:
            made.append(output)
    hooks = [m.register_forward_hook(record) for m in model.modules() if m is not model]
    try:
        out = first_tensor(call())
    finally:
        for hook in hooks:
            hook.remove()
    if isinstance(out, torch.Tensor) and tuple(out.shape) == shape:
        return out, out
    return (made[-1] if made else None), out


def plan_arguments(function, wanted, torch_style=False):
    """(parameter name, canonical input) pairs for a forward or method, by name and then by position."""
    parameters = forward_parameters(function)
    return [(p.name, c) for p, c in zip(parameters, call_plan(parameters, wanted, torch_style)) if c]


def in_torch_style(arguments):
    """Whether a call plan gives masks in torch's two parts."""
    return any(c.endswith((":padding", ":attention")) for _, c in arguments)


def from_convention(mask, convention):
    """An implementation's mask (any convention) as a canonical boolean mask, True = may attend (without the head
    axis of a convention that has one)."""
    if not isinstance(mask, torch.Tensor):
        return mask
    if (convention or "").endswith(HEAD_AXIS) and mask.dim() == 4 and mask.size(1) == 1:
        mask = mask.squeeze(1)
    if (convention or "").endswith(KEY_VECTORS) and mask.dim() == 2:
        mask = mask.unsqueeze(-2)
    convention = (convention or "keep").removesuffix(HEAD_AXIS).removesuffix(KEY_VECTORS)
    if convention == "additive":
        return mask == 0
    return (mask == 0) if convention == "blocked" else (mask != 0)


TENSOR_SIZE_NAMES = {"seq", "tgt", "trg", "x", "tokens", "sequence", "target"}


def function_role(binding, convention):
    """The canonical callable for a function role (attention, the mask helpers)."""
    convention = binding.masks or convention
    target, role = binding.target, binding.role
    if role == "subsequent_mask":
        arguments = plan_arguments(target, CANONICAL_CALLS[role])

        name, _ = next(((n, c) for n, c in arguments if c == "size"), ("size", "size"))
        takes_tokens = normalize(name) in TENSOR_SIZE_NAMES

        def called_with(value):
            return from_convention(target(**argument_values(arguments, {"size": value}, "keep")), convention)

        def subsequent_mask(size):
            return called_with(torch.ones(1, size, dtype=torch.long) if takes_tokens else size)
        if takes_tokens:  # a target-mask helper (``make_trg_mask(trg)``, pad index PAD): its padding is checked too
            subsequent_mask.of_tokens = called_with
        return subsequent_mask
    if role == "padding_mask":
        arguments = plan_arguments(target, CANONICAL_CALLS[role])

        def padding_mask(tokens, pad_idx):
            named = in_layout(dict(zip(CANONICAL_CALLS[role], (tokens, pad_idx))), binding.layout)
            mask = from_convention(target(**adapt_arguments(arguments, named, None)), convention)
            if binding.layout == SEQUENCE_FIRST and isinstance(mask, torch.Tensor) and mask.shape == tokens.shape:
                mask = mask.unsqueeze(-2)  # torch's key-padding mask, (batch, length) in either layout
            return mask
        padding_mask.hyperparameters = {"pad_idx"} & {c for _, c in arguments}  # (a pad index its code may fix)
        return padding_mask
    return attention_function(binding, convention)


def attention_function(binding, convention):
    """The canonical attention callable of ``binding``: a function, an attention module such as
    ``ScaledDotProductAttention(d_k, dropout)`` or a method of a multi-head block, each built for the width of the
    queries."""
    target = binding.target

    def callee(query):
        if binding.part_of is None and not inspect.isclass(target):
            return target
        cfg = dataclasses.replace(PROBE, d_model=query.size(-1) * PROBE.h)
        if binding.part_of is not None and binding.part_of[1] is None:  # a method of a block
            owner, _, within = binding.part_of
            block = build_from_plan(owner, cfg, within, convention=convention).to(query.device, query.dtype).eval()
            return getattr(block, target.__name__)
        return build_from_plan(binding, cfg, {}, convention=convention).to(query.device, query.dtype).eval()

    def attention(query, key, value, mask=None):
        function = callee(query)
        return function(**adapt_arguments(plan_arguments(function, CANONICAL_CALLS["attention"]),
                                          dict(zip(CANONICAL_CALLS["attention"], (query, key, value, mask))),
                                          convention))
    if binding.part_of is None and not inspect.isclass(target):
        attention.inputs_not_accepted = lambda: inputs_not_accepted(
            target, plan_arguments(target, CANONICAL_CALLS["attention"]), CANONICAL_CALLS["attention"], binding.name)
    return attention


def role_builder(binding, bindings, convention):
    """The canonical callable of a function role, or the builder of a module role."""
    return (function_role(binding, convention) if binding.role in FUNCTION_ROLES
            else module_builder(binding, bindings, convention))


def module_builder(binding, bindings, convention):
    """The canonical builder of a module role: construct from the plan, wrap under the canonical call."""
    convention = binding.masks or convention
    def build(**cfg_values):
        cfg = Config(**cfg_values)
        inner = build_from_plan(binding, cfg, bindings, convention=convention)
        if binding.role == "model":
            return AdaptedModel(inner, convention, cfg.d_model, binding.layout, binding.target_shift)
        return Adapted(inner, binding.role, convention, binding.layout, binding.call,
                       binding.role == "positional_encoding" and binding.takes_token_ids, binding.adds_table)
    build.__name__ = f"build_{binding.role}"
    build.target = binding.target  # the author's class, for the checks that watch its instances inside other blocks
    build.hyperparameters = hyperparameters_fed(binding, bindings)
    if binding.role == "model" and one_lookup_for_both_sides(binding, bindings, convention):
        build.hyperparameters.discard("tgt_vocab")  # (a Case then draws one vocabulary for both sides)
    return build


def one_lookup_for_both_sides(binding, bindings, convention):
    """Whether the model, built on the probe configuration, embeds the source and the target with one table
    (``encoder.src_word_emb.weight = decoder.trg_word_emb.weight``): it has one vocabulary, whatever it is given."""
    model = probe_build(binding, bindings, convention)
    tables = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)] if model is not None else []
    return len(tables) >= 2 and len({id(t) for t in tables}) == 1


def hyperparameters_fed(binding, bindings, depth=0):
    """The canonical hyperparameters (sizes, h, dropout) that reach ``binding``'s constructor, its own and its
    sub-blocks' (a feed-forward network whose width is fixed in its code, ``4 * d_model``, is not fed d_ff)."""
    if binding.part_of is not None:  # what its block is fed; a method of a block takes no constructor argument
        return hyperparameters_fed(binding.part_of[0], bindings, depth + 1) if binding.part_of[1] else set()
    fed = set()
    for source in binding.constructor.values():
        inner = (bindings.get(source[5:]) if source.startswith("role:")
                 else bindings.get(stack_layer_role(binding.role) or "") if source in ("layers",) or "kwargs of" in source
                 else None)
        if inner is not None and inner is not binding and depth < 4:
            fed |= hyperparameters_fed(inner, bindings, depth + 1)
        elif source in SIZES + ("h", "dropout"):
            fed.add(source)
        elif source == multipliers.D_FF_PER_D_MODEL:
            fed.add("d_ff")
    return fed


def candidates(namespace, modules):
    """Classes (nn.Module subclasses) and functions defined by the code itself (in one of ``modules``, the names of
    the submission's own modules), and static methods of its classes."""
    found = {}
    for name, obj in list(namespace.items()):
        if name.startswith("_") or getattr(obj, "__module__", None) not in modules:
            continue
        if inspect.isclass(obj) and issubclass(obj, nn.Module):
            found[name] = obj
            for attribute, value in vars(obj).items():
                if isinstance(value, staticmethod):
                    found[f"{name}.{attribute}"] = value.__func__
        elif inspect.isfunction(obj):
            found[name] = obj
    return found


FALLBACK_SCORE = 0.9
"""A candidate that does not work under the canonical call is still bound (so its crash is reported and
diagnosed) when its name is this close to the role's."""

MASKED = ("attention", "multi_head_attention", "encoder_layer", "decoder_layer", "encoder", "decoder", "model")
"""The roles called with masks."""


def masks_of_another_shape(binding, module_name, roles, bindings, convention):
    """Whether ``binding`` works under the canonical call with its masks in another shape (:data:`HEAD_AXIS`,
    :data:`KEY_VECTORS`), which it then keeps (``roles`` updated, a note added)."""
    base = convention.removesuffix(HEAD_AXIS).removesuffix(KEY_VECTORS)
    for shape in (HEAD_AXIS, KEY_VECTORS):
        if convention.endswith(shape):
            continue
        binding.masks = base + shape
        roles[binding.role] = role_builder(binding, bindings, convention)
        if behaves(Implementation(module_name, roles), binding.role) is None:
            binding.notes.append(f"(masks: {describe_convention(binding.masks)})")
            return True
    binding.masks = None
    roles[binding.role] = role_builder(binding, bindings, convention)
    return False


LAID_OUT = ("multi_head_attention", "encoder_layer", "decoder_layer", "encoder", "decoder", "model")
"""The roles whose layout is told by behaviour: they mix positions, so a call in the wrong one fails or mixes
samples."""
ROLE_ORDER = ("layer_norm", "feed_forward", "attention", "multi_head_attention", "embedding", "positional_encoding",
              "sublayer_connection", "encoder_layer", "decoder_layer", "encoder", "decoder", "generator",
              "padding_mask", "subsequent_mask", "model")


def accepts(role, obj):
    if role in ("padding_mask", "subsequent_mask"):
        return inspect.isfunction(obj)
    if role == "attention":
        return True
    if role == "model":
        return True
    return inspect.isclass(obj)


def ranked(role, found, taken, prefer=frozenset()):
    """Candidates for ``role``, those named in ``prefer`` first, then (for the model) the functions that build it
    as its author does (``make_model``, rather than a class built of the checker's guesses), then best name first;
    an object already bound to another role is not a candidate. A function whose name says nothing is still a
    subsequent-mask helper when it makes one (:func:`makes_causal_mask`), ranked after the names."""
    scored = []
    for name, obj in found.items():
        if name in taken or not accepts(role, obj):
            continue
        short = name.rsplit(".", 1)[-1]
        score = name_score(short, ROLE_NAMES[role])
        if score < 1 and names_another_role_exactly(short, role):
            continue
        if not score and (any(word in normalize(short) for word in ROLE_WORDS.get(role, ()))
                          or names_the_role(short, role)):
            score = WORD_SCORE
        if not score and role == "subsequent_mask" and makes_causal_mask(obj):
            score = BEHAVIOUR_SCORE
        if not score and role == "model" and takes_two_vocabularies(obj):
            score = BEHAVIOUR_SCORE
        if not score and role in SIGNATURES and inspect.isclass(obj) and acts_as(role, obj):
            score = BEHAVIOUR_SCORE
        if score:
            scored.append((score, name, obj))
    return sorted(scored, key=lambda t: (t[1] not in prefer, not (role == "model" and inspect.isfunction(t[2])),
                                         -t[0]))


def names_another_role_exactly(name, role):
    """Whether ``name`` is, exactly, a synonym of a role other than ``role`` (``make_trg_mask`` names the target
    mask: it is no near miss of ``make_src_mask``)."""
    n = normalize(name)
    return any(n in synonyms for other, synonyms in NORMALIZED.items() if other != role)


ROLE_WORDS = {"sublayer_connection": ("sublayer", "residual"), "generator": ("generator",)}
"""Words that name a role inside a longer name (``SublayerLogic``, ``DecoderGenerator``)."""


NORMALIZED = {role: {normalize(s) for s in synonyms} for role, synonyms in ROLE_NAMES.items()}


def names_the_role(name, role):
    """Whether a run of the words of ``name`` (split at capitals, digits and underscores) is a name of ``role``, and
    no longer run names another role: ``EncoderTransf`` names the encoder and ``VanillaTransformer`` the model, but
    ``EncoderLayer`` names the encoder layer, not the encoder."""
    words = [w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)]
    runs = {"".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)}
    longest = {r: max((len(run) for run in runs if run in synonyms), default=0) for r, synonyms in NORMALIZED.items()}
    return longest[role] > 0 and longest[role] == max(longest.values())
WORD_SCORE = 0.8
BEHAVIOUR_SCORE = 0.5
"""The rank of a candidate found by what it does, not by its name (below every name that counts)."""


def normalizes(module, x):
    """§3.1 LayerNorm: vector parameters of its own only (a gain, a bias; no parameterised children), and the same
    output for ``x`` and ``4 x``."""
    return all(p.dim() <= 1 for p in module.parameters(recurse=False)) \
        and not any(True for child in module.children() for _ in child.parameters()) \
        and ignores_input_scale(module, x)


def looks_up_tokens(module, x):
    """§3.4 embeddings: token ids to d_model vectors, one vector per token wherever it stands."""
    tokens = torch.randint(0, PROBE.vocab_size, x.shape[:2], generator=torch.Generator().manual_seed(1))
    tokens[1, 3] = tokens[0, 0]
    out = module(tokens)
    return isinstance(out, torch.Tensor) and out.is_floating_point() and out.shape == x.shape \
        and torch.allclose(out[0, 0], out[1, 3])


def adds_positions(module, x):
    """§3.5 positional encodings: what the block adds to its input (or returns, its table) depends on the position
    only: the same for another input, and not the same at every position."""
    other = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    first, second = module(x), module(other)
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
        return False
    if first.shape == x.shape and torch.allclose(first - x, second - other, atol=1e-5):
        added = first - x
    elif returns_table(first, x, known=True) and torch.equal(first, second):
        added = first.reshape(x.shape[1:])
    else:
        return False
    rows = added.reshape(-1, added.shape[-1])  # one row of d_model features per position (and sample)
    return not torch.allclose(rows, rows[:1].expand_as(rows))


SIGNATURES = {"layer_norm": normalizes, "embedding": looks_up_tokens, "positional_encoding": adds_positions}
"""What the blocks of the roles found by behaviour do, called in eval mode on the probe configuration."""


@functools.lru_cache(maxsize=512)
def acts_as(role, cls):
    """Whether module class ``cls``, built on the probe configuration from the hyperparameters its constructor names,
    does what ``role``'s block does (:data:`SIGNATURES`), whatever it is called (``LN``, ``Tok``, ``Pos``)."""
    module = probe_build(Binding(role, cls.__name__, cls, constructor_plan_or_none(cls, role, {})), {})
    if not isinstance(module, nn.Module):
        return False
    x = torch.randn(2, 5, PROBE.d_model, generator=torch.Generator().manual_seed(0))
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            return bool(SIGNATURES[role](module.eval(), x))
    except Exception:  # the candidate's own code: it does not act as the role
        return False


METHOD_ROLES = {"padding_mask": "model", "subsequent_mask": "model"}
"""Function roles that code often writes as a method of the block that uses them, and that do not depend on the
sizes the block was built with (an attention method reads its head width from the instance: not one of them)."""


def method_role(role, owner, bindings, convention, module_name, roles):
    """``(binding, function)`` for a function role written as a method of the ``owner`` binding's class
    (``Seq2Seq.make_src_mask(src)`` reading the pad index from the instance): the method of an instance built on
    the probe configuration, when its name says the role and it works under the role's canonical call; else None."""
    methods = [name for name, value in vars(owner.target).items() if inspect.isfunction(value)
               and name_score(name, ROLE_NAMES[role])] if inspect.isclass(owner.target) else []
    if not methods:
        return None
    instance = probe_build(owner, bindings, convention)
    if instance is None:
        return None
    for name in methods:
        binding = Binding(role, f"{owner.name}.{name}", getattr(instance, name),
                          masks=helper_masks(role, bindings, convention))
        function = function_role(binding, convention)
        if role == "padding_mask":
            function = with_instance_pad(function)
        if behaves(Implementation(module_name, {**roles, role: function}), role) is None:
            return binding, function
    return None


def helper_masks(role, bindings, convention):
    """The convention of a mask helper's masks where the blocks it makes masks for take them with a head axis
    (found by behaviour, :func:`masks_of_another_shape`): with the head axis too; else None (the code's)."""
    if role in MASK_CALLS and any((b.masks or "").endswith(HEAD_AXIS) for b in bindings.values()):
        return convention.removesuffix(KEY_VECTORS) + HEAD_AXIS
    return None


def with_instance_pad(padding_mask):
    """A padding-mask method reads the pad index its instance was built with (PAD): the canonical call's pad_idx
    is honoured by swapping the two token values before the call."""
    def padding_mask_of_instance(tokens, pad_idx):
        swapped = torch.where(tokens == pad_idx, PAD, torch.where(tokens == PAD, pad_idx, tokens))
        return padding_mask(swapped, PAD)
    return padding_mask_of_instance


def learns_weights(binding, bindings):
    """Whether ``binding``'s class, built on the probe configuration, has parameters of its own."""
    module = probe_build(binding, bindings) if inspect.isclass(binding.target) else None
    return module is not None and any(True for _ in module.parameters())


def takes_two_vocabularies(cls):
    """A module class whose constructor takes a source and a target vocabulary size, itself or in its configuration
    object: a whole model, whatever its name (``Translator(..., src_vocab_size, tgt_vocab_size, ...)``)."""
    try:
        parameters = list(inspect.signature(cls).parameters.values()) if inspect.isclass(cls) else []
    except (TypeError, ValueError):
        return False
    names = {argument_role(p.name) for p in parameters}
    for p in parameters:  # or fields of its configuration object its own code reads (config.input_vocab_size, ...)
        fields = config_fields(cls, p) or ()
        source = inspect.getsource(cls) if fields else ""
        names |= {argument_role(f) for f in fields if f".{f}" in source}
    return {"src_vocab", "tgt_vocab"} <= names


def padding_by_lengths(bindings):
    """``"lengths"`` when the bound model's forward takes its padding as sequence lengths (:func:`lengths_of`),
    else None: the checks then pad at the end of each sequence, as lengths can say."""
    model = bindings.get("model")
    if model is None or not inspect.isclass(model.target):
        return None
    try:
        parameters = [p for p in list(inspect.signature(model.target.forward).parameters.values())[1:]
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None
    plan = call_plan(parameters, CANONICAL_CALLS["model"])
    return LENGTHS if any(c and c.endswith(":" + LENGTHS) for c in plan) else None


def makes_causal_mask(function):
    """True when ``function`` takes a size (and maybe a device) and returns a 3 x 3 mask of the subsequent
    positions in some convention (``create_mask(seq_len, device)`` -> triu(ones, 1).bool()). Only a function whose
    code builds a triangle (``triu``/``tril``) is called: the others might train a model."""
    try:
        parameters = [p for p in inspect.signature(function).parameters.values() if p.default is p.empty]
        source = inspect.getsource(function)
    except (TypeError, ValueError, OSError):
        return False
    if not re.search(r"\b(triu|tril)\b", source):
        return False
    if not 1 <= len(parameters) <= 2:
        return False
    return infer_convention(function) is not None


MASK_CALLS = {
    "padding_mask": lambda case: (case.tokens(5, PROBE.vocab_size).index_fill(1, torch.tensor([4]), PAD), PAD),
    "subsequent_mask": lambda case: (3,),
}
"""The canonical calls of the mask helpers on the probe configuration (tokens with padding; size 3)."""


def works_sequence_first(binding, module_name, roles, bindings, convention, problem, note):
    """Try ``binding`` laid out sequence first (torch's default): None, with ``note`` added, when it then works
    under the canonical call; else its layout and builder as before and ``problem`` unchanged."""
    binding.layout = SEQUENCE_FIRST
    roles[binding.role] = role_builder(binding, bindings, convention)
    if behaves(Implementation(module_name, roles), binding.role) is None:
        binding.notes.append(note)
        return None
    binding.layout = None
    roles[binding.role] = role_builder(binding, bindings, convention)
    return problem


def behaves(implementation, role):
    """Build the role on a small configuration and make the canonical call; None if it works, else the error."""
    case = Case(implementation, PROBE, batch=2, src_len=5, tgt_len=7, dtype=torch.float32, seed=0)
    try:
        if role in MASK_CALLS:  # the harness has no canonical call of the mask helpers: theirs is made here
            arguments = MASK_CALLS[role](case)
            out = implementation.function(role)(*arguments)
            if not isinstance(out, torch.Tensor):
                return f"returned {type(out).__name__}, not a tensor"
            tokens = arguments[0]
            if role == "padding_mask" and (out.dim() < 2 or out.shape[0] != tokens.shape[0]
                                           or out.shape[-1] != tokens.shape[-1]):
                return f"returned shape {tuple(out.shape)} for tokens {tuple(tokens.shape)}: not a mask over the keys"
            return None
        out, _ = run(case, role)
    except Missing as exc:  # a model taking lengths: probed again with its padding at the end of each sequence
        if exc.cause == "adapter.padding_not_expressible_as_lengths" and implementation.padding is None:
            implementation.padding = LENGTHS
            return behaves(implementation, role)
        return f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # the candidate's own code: any exception means "does not fit"
        return f"{type(exc).__name__}: {exc}"
    return None


def embeds_token_ids(implementation, role):
    """Whether a stack that fails under its canonical call (vectors) works when given token ids in their place: it
    embeds them itself, however it fails on vectors (torch's embedding error, or ``batch, length = src.shape``)."""
    if role not in ("encoder", "decoder"):
        return False
    case = Case(implementation, PROBE, batch=2, src_len=5, tgt_len=7, dtype=torch.float32, seed=0)
    try:
        first, *rest = canonical_inputs(case, role)
        tokens = case.tokens(first.shape[1], PROBE.vocab_size)
        out, _ = run(case, role, inputs=(tokens, *rest))
    except Exception:  # the candidate's own code: any exception means it does not take token ids either
        return False
    return isinstance(out, torch.Tensor) and tuple(out.shape[:2]) == tuple(tokens.shape)


@dataclass
class Discovery:
    """What discovery found: role builders, the bindings behind them, and notes for the report."""
    roles: dict
    bindings: dict
    convention: str
    notes: list
    grafts: dict = field(default_factory=dict)
    """role -> the reference's blocks built into it in place of the submission's own, which do not work"""
    broken: set = field(default_factory=set)
    """The roles bound although they fail under the canonical call on the probe configuration."""

    def describe(self):
        lines = [b.describe() for b in self.bindings.values()]
        return lines + [f"masks: {describe_convention(self.convention)}"] + self.notes

    @property
    def unusable(self):
        """How many roles were bound although they fail under the canonical call."""
        return sum("does not work under the canonical call" in note for note in self.notes)

    @property
    def working(self):
        """How many roles were bound and work under the canonical call."""
        return len(self.bindings) - len(self.broken)


def discover(namespace, module_name, overrides=None, modules=None):
    """Bind every role found in ``namespace`` (a submission's module dict); see the module docstring. Where several
    classes could play a role, the one the bound blocks assemble wins (:func:`assembled_together`)."""
    modules = modules or {module_name}
    found, tried = bind_roles(namespace, module_name, overrides, modules), [set()]
    for _ in range(ASSEMBLY_PASSES):
        prefer = assembled_together(found.bindings, candidates(namespace, modules))
        if prefer in tried:
            break
        tried.append(prefer)
        found = bind_roles(namespace, module_name, overrides, modules, frozenset(prefer))
    return found


ASSEMBLY_PASSES = 3
"""How many times discovery binds again with :func:`assembled_together`'s preferences (a stack found in one pass
tells which attention block its layers build in the next)."""


ENCLOSED = {"multi_head_attention": ("attention",),
            "encoder_layer": ("multi_head_attention", "feed_forward", "layer_norm", "sublayer_connection"),
            "decoder_layer": ("multi_head_attention", "feed_forward", "layer_norm", "sublayer_connection"),
            "encoder": ("encoder_layer", "layer_norm"), "decoder": ("decoder_layer", "layer_norm"),
            "model": ("encoder", "decoder", "embedding", "positional_encoding", "generator")}
"""The roles whose blocks an enclosing role's block is built of (§3.1)."""


def encloses(outer, role):
    """Whether ``outer``'s block is built of ``role``'s, directly or through its parts."""
    return any(part == role or encloses(part, role) for part in ENCLOSED.get(outer, ()))


LAYERED = ("encoder_layer", "decoder_layer", "encoder", "decoder")
"""The parts that tell their enclosing block (the stack of the bound layers, the model of the bound stacks): the
other parts (a LayerNorm, a feed-forward network) are in every layer."""


def assembled_together(bindings, found):
    """The names of the candidates to prefer where a role has rivals (``found``, the candidates), the whole
    assembly deciding: the classes the outermost bound enclosing block is built of (those of the model when it is
    bound; the ``MultiHeadedAttention`` the stack's layers build, not an older ``MultiHeadAttention`` of the same
    file), else the enclosing classes built of the bound parts (the stack of the bound layers)."""
    inside = {}
    for role, binding in bindings.items():
        module = probe_build(binding, bindings) if inspect.isclass(binding.target) and binding.works else None
        if module is not None:
            inside[role] = {type(m) for m in module.modules() if m is not module}
    prefer = set()
    for role in ROLE_ORDER:
        classes = {name: obj for _, name, obj in ranked(role, found, set()) if inspect.isclass(obj)}
        if len(classes) < 2:
            continue
        if role == "model" and role in bindings and bindings[role].works:
            continue  # a working model is the anchor of the assembly, not chosen again by the parts it builds
        outers = [outer for outer in inside if encloses(outer, role)]
        outermost = [outer for outer in outers if not any(encloses(o, outer) for o in outers)]
        chosen = {name for name, cls in classes.items() if any(cls in inside[outer] for outer in outermost)}
        parts = {bindings[p].target for p in ENCLOSED.get(role, ()) if p in bindings and p in LAYERED}
        for name, cls in classes.items() if not chosen and parts else ():  # the stacks of bound layers
            module = probe_build(Binding(role, name, cls, constructor_plan_or_none(cls, role, bindings)), bindings)
            if module is not None and any(type(m) in parts for m in module.modules() if m is not module):
                chosen.add(name)
        prefer |= chosen
    return prefer


def parts_in_built_blocks(bindings, found, taken):
    """``{role: binding}`` for roles no class or function was bound to on its own, found inside a bound block as
    that block builds them (:attr:`Binding.part_of`): a class of the role's name the block builds
    (``ScaledDotProductAttention(temperature=d_k ** 0.5)``), a method of the multi-head block computing attention
    (``MultiHeadedAttention.attention``) or of the model computing the positional encodings
    (``Transformer.get_position_encoding``), and the stacks (:func:`stacks_in_the_model`)."""
    parts = stacks_in_the_model(bindings, found)
    for role in ROLE_ORDER:
        if role in bindings or role in parts or role in METHOD_ROLES or role == "model":
            continue
        outers = [o for o in ROLE_ORDER if o in bindings and encloses(o, role)
                  and builds_a_module(o, bindings[o].target)]
        for outer in outers:  # the innermost first (ROLE_ORDER goes outwards)
            block = probe_build(bindings[outer], bindings)
            kinds = {obj: name for _, name, obj in ranked(role, found, taken) if inspect.isclass(obj)}
            path = next((p for p, m in block.named_modules() if p and type(m) in kinds), None) if block else None
            if path is None and block is not None:  # a class of the submission's at an attribute named for the role
                kinds = {obj: name for name, obj in found.items() if inspect.isclass(obj) and name not in taken}
                path = next((p for p, m in block.named_modules() if type(m) in kinds
                             and p.rsplit(".", 1)[-1].rstrip("_0123456789") in SUBMODULE_NAMES.get(role, ())), None)
            if path is not None:
                parts[role] = Binding(role, kinds[type(block.get_submodule(path))], type(block.get_submodule(path)),
                                      part_of=(bindings[outer], path, bindings), found_in=outer,
                                      notes=[f"(the {outer}'s {path}, as {bindings[outer].name} builds it)"])
                if role == "multi_head_attention" and projections.has_no_parameters(block.get_submodule(path)):
                    parts[role].notes.append(projections.describe(bindings[outer].target, path))
                break
            methods = [n for n, value in vars(bindings[outer].target).items()
                       if inspect.isclass(bindings[outer].target) and inspect.isfunction(value)
                       and n not in ("__init__", "forward")
                       and (name_score(n, ROLE_NAMES[role]) or normalize(n) in SHORT_NAMES.get(role, ()))]
            if block is not None and methods and role in FUNCTION_ROLES + ("positional_encoding",):
                parts[role] = Binding(role, f"{bindings[outer].name}.{methods[0]}", getattr(type(block), methods[0]),
                                      part_of=(bindings[outer], None, bindings), found_in=outer,
                                      notes=[f"(a method of the {outer}, called on it as {bindings[outer].name} "
                                             "builds it)"])
                break
            called = functions_called(bindings[outer].target, found, taken) if role == "attention" else []
            if called:
                parts[role] = Binding(role, called[0], found[called[0]], found_in=outer,
                                      notes=[f"(the function {bindings[outer].name}.forward calls)"])
                break
    return parts


def functions_called(cls, found, taken):
    """The submission's own functions of three or more parameters that ``cls.forward`` calls by name, outermost calls
    first, none already bound: the attention of eq. (1) that a multi-head block calls, whatever its name
    (``sdpa(q, k, v, mask)``)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    except (TypeError, OSError, SyntaxError, AttributeError):
        return []
    names = [node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    return [name for name in dict.fromkeys(names) if name in found and name not in taken
            and inspect.isfunction(found[name]) and len(inspect.signature(found[name]).parameters) >= 3]


SHORT_NAMES = {"attention": ("attn", "attend")}
"""Short method names of a role (a method ``attn`` of a multi-head block)."""


def stacks_in_the_model(bindings, found):
    """``{role: binding}`` for the encoder and decoder stacks that no class of their own was bound to, found in the
    built model instead: the outermost of its blocks of the submission's own classes (``found``) that holds the bound
    encoder (decoder) layers and not the others (``ModelBlock(config, EncoderLayer)``). Its inputs are those of its
    layers' forward under the same names (a stack passes ``y`` and ``mask`` on to its layers)."""
    model = bindings.get("model")
    built = probe_build(model, bindings) if model is not None and model.works else None
    if built is None:
        return {}
    names = {cls: name for name, cls in found.items() if inspect.isclass(cls)}
    stacks = {}
    for role, layer, other in (("encoder", "encoder_layer", "decoder_layer"),
                               ("decoder", "decoder_layer", "encoder_layer")):
        if role in bindings or layer not in bindings:
            continue
        for path, block in built.named_modules():
            kinds = {type(m) for m in block.modules() if m is not block}
            if path and type(block) in names and bindings[layer].target in kinds \
                    and (other not in bindings or bindings[other].target not in kinds):
                inner = next(m for m in block.modules() if type(m) is bindings[layer].target)
                passed_on = dict(plan_arguments(inner, CANONICAL_CALLS[layer]))  # its layers' inputs, same names
                own = dict(plan_arguments(block, CANONICAL_CALLS[role]))
                call = [(p.name, passed_on.get(p.name, own.get(p.name))) for p in forward_parameters(block)]
                stacks[role] = Binding(role, names[type(block)], type(block), part_of=(model, path, bindings),
                                       found_in="model", call=[(name, c) for name, c in call if c],
                                       notes=[f"(the model's {path}, as {model.name} builds it)"])
                break
    return stacks


def masks_as_the_model_passes_them(bindings, roles, module_name):
    """``{role: call plan}`` for the layers, stacks and attention blocks of a working model that have a parameter
    the canonical plan feeds nothing although the model's own call passes one of its masks there (a decoder
    layer's single ``mask``, given the model's target mask): the plan with that parameter fed that mask. The masks
    are told by value (the source and the target masks differ in shape)."""
    model = bindings.get("model")
    if model is None or not model.works:
        return {}
    implementation = Implementation(module_name, roles)
    try:
        adapted = implementation.build("model", PROBE)
    except Exception:  # the author's code: it is checked, not learned from
        return {}
    if not isinstance(adapted, AdaptedModel):
        return {}
    case = Case(implementation, PROBE, batch=2, src_len=5, tgt_len=7, dtype=torch.float32, seed=0)
    src, tgt, src_mask, tgt_mask = canonical_inputs(case, "model")
    convention = model.masks or adapted.convention
    given = {"src_mask": to_convention(src_mask, convention), "tgt_mask": to_convention(tgt_mask, convention)}
    plans, hooks = {}, []

    def watch(role):
        def pre_hook(module, args, kwargs):
            if role in plans:
                return
            planned = bindings[role].call or plan_arguments(module, CANONICAL_CALLS[role])
            try:
                passed = inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments
            except TypeError:
                return
            taken = {name for name, _ in planned} | {c for _, c in planned}
            added = [(name, mask) for name, value in passed.items() if name not in taken
                     for mask, expected in given.items()
                     if mask in CANONICAL_CALLS[role] and mask not in taken and isinstance(value, torch.Tensor)
                     and value.shape == expected.shape and torch.equal(value, expected)]
            plans[role] = list(planned) + added if added else None
        return pre_hook
    for role in ("multi_head_attention", "encoder_layer", "decoder_layer", "encoder", "decoder"):
        binding = bindings.get(role)
        if binding is None or not inspect.isclass(binding.target):
            continue
        part = binding.part_of  # (a block found in the model: that one, not every instance of its class)
        blocks = ([adapted.inner.get_submodule(part[1])] if part and part[0] is model and part[1] else
                  [m for m in adapted.inner.modules() if type(m) is binding.target])
        hooks += [m.register_forward_pre_hook(watch(role), with_kwargs=True) for m in blocks]
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            adapted(src, tgt, src_mask, tgt_mask)
    except Exception:  # the author's code
        return {}
    finally:
        for hook in hooks:
            hook.remove()
    return {role: plan for role, plan in plans.items() if plan}


def constructor_plan_or_none(cls, role, bindings):
    try:
        return constructor_plan(cls, role, bindings)
    except (LookupError, ValueError, TypeError):
        return {}


def builds_a_module(role, target):
    """Whether ``target`` is built from canonical hyperparameters: a module class, or a function building the
    model (``make_model(src_vocab, tgt_vocab, N, ...)``)."""
    return inspect.isclass(target) or (role == "model" and inspect.isfunction(target))


def best_failure(kept, failure, score):
    """The failing candidate to bind when none works: the best name (the first tried of equal names), a class
    before a function building the model (whose failure says less about which block is wrong)."""
    if failure[0].role == "model" and inspect.isfunction(failure[0].target):
        score -= 0.5
    return kept if kept is not None and kept[2] >= score else (*failure, score)


def bind_roles(namespace, module_name, overrides, modules, prefer=frozenset()):
    """One pass of :func:`discover`: each role in :data:`ROLE_ORDER` bound to its best working candidate, those
    named in ``prefer`` first."""
    found = candidates(namespace, modules)
    overrides = overrides or {}
    bindings, roles, notes, taken = {}, {}, [], set()
    masks = overrides.get("masks", {})
    convention = masks.get("convention", "keep") + (HEAD_AXIS if masks.get("head_axis") else
                                                     KEY_VECTORS if masks.get("key_vectors") else "")
    for role in ROLE_ORDER:
        forced = overrides.get("roles", {}).get(role)
        options = [(1.0, forced, namespace[forced])] if forced in namespace else ranked(role, found, taken, prefer)
        first_failure = partial = None
        for score, name, obj in options:
            binding = Binding(role, name, obj, masks=helper_masks(role, bindings, convention))
            try:
                if builds_a_module(role, obj):
                    binding.constructor = constructor_plan(obj, role, bindings)
                if role == "attention" and learns_weights(binding, bindings):
                    continue  # a block with projections of its own is not the attention function of eq. (1)
                roles[role] = role_builder(binding, bindings, convention)
            except (LookupError, ValueError, TypeError) as exc:
                if score >= FALLBACK_SCORE:
                    first_failure = best_failure(first_failure, (binding, str(exc)), score)
                roles.pop(role, None)
                continue
            problem = behaves(Implementation(module_name, roles), role)
            if problem is not None and role in LAID_OUT:  # written for (sequence, batch, d_model) tensors?
                problem = works_sequence_first(binding, module_name, roles, bindings, convention, problem,
                                               "(sequence, batch, d_model) tensors, as torch's default layout")
            if problem is not None and role == "padding_mask" \
                    and any(b.layout == SEQUENCE_FIRST for b in bindings.values()):  # (length, batch) tokens?
                problem = works_sequence_first(binding, module_name, roles, bindings, convention, problem,
                                               "(called with (length, batch) token ids, as the rest of the code)")
            if problem is not None and role in MASKED \
                    and masks_of_another_shape(binding, module_name, roles, bindings, convention):
                problem = None  # its masks of another shape
            if problem is not None and role == "positional_encoding":  # called with the tokens, as its caller does?
                binding.takes_token_ids = True
                roles[role] = module_builder(binding, bindings, convention)
                if behaves(Implementation(module_name, roles), role) is None:
                    problem = None
                    binding.notes.append("(called with token ids of the input's shape, as the code's embedding "
                                         "block calls it with the tokens)")
                else:
                    binding.takes_token_ids = False
                    roles[role] = module_builder(binding, bindings, convention)
            if problem is None and role == "multi_head_attention" and partial is None \
                    and "key" in Implementation(module_name, roles).build(role, PROBE).inputs_not_accepted()[0]:
                partial = (binding, roles.pop(role))  # self-attention only: kept unless another one takes keys
                continue
            if problem is None:
                bindings[role] = binding
                taken.add(name)
                first_failure = None
                break
            if score >= FALLBACK_SCORE:
                first_failure = best_failure(first_failure, (binding, problem), score)
            roles.pop(role)
        if partial is not None and role not in bindings:
            bindings[role], roles[role] = partial
            taken.add(partial[0].name)
            first_failure = None
        if first_failure and role not in bindings:
            binding, problem, _ = first_failure
            binding.works = False
            binding.takes_token_ids = TAKES_TOKEN_IDS in problem
            notes.append(f"{role}: {binding.name} does not work under the canonical call ({problem})")
            try:
                if builds_a_module(role, binding.target):
                    binding.constructor = constructor_plan(binding.target, role, bindings)
                if role == "model" and not {"vocab_size", "src_vocab", "tgt_vocab"} & hyperparameters_fed(binding,
                                                                                                          bindings):
                    notes[-1] += "; it takes no vocabulary, so it is no model of token sequences: not bound"
                    continue
                roles[role] = role_builder(binding, bindings, convention)
                if not binding.takes_token_ids:
                    binding.takes_token_ids = embeds_token_ids(Implementation(module_name, roles), role)
                bindings[role] = binding
                taken.add(binding.name)
            except (LookupError, ValueError, TypeError):
                pass
    for role, binding in parts_in_built_blocks(bindings, found, taken).items():
        roles[role] = role_builder(binding, bindings, convention)
        problem = behaves(Implementation(module_name, roles), role)
        if problem is None or masks_of_another_shape(binding, module_name, roles, bindings, convention):
            bindings[role] = binding
            notes[:] = [n for n in notes if not n.startswith(f"{role}: ") or "does not work" not in n]
        elif not bindings[binding.found_in].works:  # the block it is part of fails too: on the author's own path
            binding.works = False
            bindings[role] = binding
            notes.append(f"{role}: {binding.name} {binding.notes[0]} does not work under the canonical call "
                         f"({problem})")
        else:
            del roles[role]
    for role, plan in masks_as_the_model_passes_them(bindings, roles, module_name).items():
        binding, before = bindings[role], (bindings[role].call, bindings[role].masks)
        binding.call = plan
        roles[role] = module_builder(binding, bindings, convention)
        if behaves(Implementation(module_name, roles), role) is None \
                or masks_of_another_shape(binding, module_name, roles, bindings, convention):
            binding.notes.append("(its masks as the model passes them: " + ", ".join(
                f"{name}<-{c}" for name, c in plan if c.endswith("mask")) + ")")
        else:
            binding.call, binding.masks = before
            roles[role] = module_builder(binding, bindings, convention)
    for role, owner in METHOD_ROLES.items():
        if role not in bindings and owner in bindings:
            found_method = method_role(role, bindings[owner], bindings, convention, module_name, roles)
            if found_method is not None:
                bindings[role], roles[role] = found_method
    if "positional_encoding" in bindings and bindings["positional_encoding"].works:
        table = Implementation(module_name, roles).build("positional_encoding", PROBE).eval()
        x = torch.zeros(2, 5, PROBE.d_model)
        given = positions_of(x) if table.tokens_for_positions else x
        if returns_table(first_tensor(table.inner(**adapt_arguments(table.arguments, {"x": given}, convention))), x):
            bindings["positional_encoding"].adds_table = True
            bindings["positional_encoding"].notes.append("returns the (length, d_model) table, which its caller adds "
                                                         "to the embeddings: checked as x + table")
            roles["positional_encoding"] = module_builder(bindings["positional_encoding"], bindings, convention)
    shift = target_shift(bindings.get("model"), module_name, roles)
    if shift is not None:
        bindings["model"].target_shift = shift
        bindings["model"].notes.append(f"(its forward {shift} itself, as teacher forcing does: called with one more "
                                       "target position, its outputs read at the positions that read the target's "
                                       "tokens)")
        roles["model"] = module_builder(bindings["model"], bindings, convention)
    if any(b.layout == SEQUENCE_FIRST for b in bindings.values()):  # the lookups and positions the model feeds
        for role in ("embedding", "positional_encoding"):               # are called in the model's layout
            if role in bindings and bindings[role].layout is None:
                bindings[role].layout = SEQUENCE_FIRST
                bindings[role].notes.append("(sequence, batch, d_model) tensors, as the rest of the code")
                roles[role] = module_builder(bindings[role], bindings, convention)
        helper = bindings.get("padding_mask")
        if helper is not None and not helper.works:  # a helper for (sequence, batch) tokens, as the model takes?
            helper.layout = SEQUENCE_FIRST
            roles["padding_mask"] = role_builder(helper, bindings, convention)
            if behaves(Implementation(module_name, roles), "padding_mask") is None:
                helper.works = True
                helper.notes.append("((sequence, batch) tokens, as the rest of the code)")
                notes[:] = [n for n in notes if not n.startswith("padding_mask: ") or "does not work" not in n]
            else:
                helper.layout = None
                roles["padding_mask"] = role_builder(helper, bindings, convention)
    helper = next((r for r in ("subsequent_mask", "padding_mask") if r in bindings), None)
    if helper and "convention" not in masks:  # the subsequent-mask helper's word first, else the padding helper's
        inferred = infer_convention(bindings[helper].target, helper)
        if inferred and inferred != convention:
            return bind_roles(namespace, module_name, {**overrides, "masks": {**masks, "convention": inferred}},
                              modules, prefer)
    grafts = {}
    for binding in bindings.values():
        for source in binding.constructor.values():
            sub = bindings.get(source[5:]) if source.startswith("role:") else None
            problem = None if sub is None else builds(sub, bindings) if sub.composes else "it fails under the canonical call"
            if problem and not any(n.startswith(f"{binding.role}: built with the reference's {sub.role} ")
                                   for n in notes):
                notes.append(f"{binding.role}: built with the reference's {sub.role} in place of {sub.name}, which "
                             f"does not work ({problem[:120]})")
                grafts.setdefault(binding.role, []).append(f"the reference's {sub.role} in place of {sub.name}")
        for sub in constructed_by_name(binding, bindings):
            notes.append(f"{binding.role}: built with the reference's {sub.role} standing in for {sub.name}, which "
                         f"{binding.name} builds itself and which does not work")
            grafts.setdefault(binding.role, []).append(f"the reference's {sub.role} standing in for {sub.name}")
    found = Discovery(roles, bindings, convention, notes, grafts,
                      {role for role, binding in bindings.items() if not binding.works})
    if found.unusable and not {"head_axis", "key_vectors"} & set(masks):  # masks of another shape?
        base = convention.removesuffix(HEAD_AXIS).removesuffix(KEY_VECTORS)
        for shape in ("head_axis", "key_vectors"):
            other = bind_roles(namespace, module_name, {**overrides, "masks": {
                **masks, "convention": base, shape: True}}, modules, prefer)
            if other.working > found.working:
                found = other
    return found


def target_shift(binding, module_name, roles):
    """How the bound model's forward shifts the target (:func:`adapters.alignment.target_shift`), observed by
    calling it on the probe configuration with a target of distinct tokens; None when it does not."""
    if binding is None or not binding.works or binding.layout is not None:
        return None
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            model = Implementation(module_name, roles).build("model", PROBE).eval()
    except Exception:  # the candidate's own code
        return None
    if getattr(model, "forward_arguments", None) is None:
        return None  # called through encode and decode: the decoder is given the target as it is
    tgt = alignment.probe_target(2, 5, PROBE.tgt_vocab, PAD)
    src = alignment.probe_target(2, 7, PROBE.src_vocab, PAD)
    named = {"src": src, "tgt": tgt, "src_mask": torch.ones(2, 1, 7, dtype=torch.bool),
             "tgt_mask": torch.tril(torch.ones(5, 5, dtype=torch.bool)).expand(2, 5, 5)}
    return alignment.target_shift(  # the author's forward alone (not the canonical call's fallback to decode)
        model.inner, lambda: model.inner(**argument_values(model.forward_arguments, named, model.convention)), tgt)


DEFINITION = re.compile(r"^(class|def)\s+([A-Za-z_]\w*)", re.MULTILINE)


def roles_in_uncompiled_cells(problems, namespace, bound):
    """``{role: (name, problem)}`` for the roles left unbound whose best candidate is defined (``class X`` or
    ``def x`` at the top of a cell) in a cell that does not compile, so that the report says so instead of calling
    the role missing; ``problems`` are the loader's ``CellProblem``s."""
    found = {}
    for problem in problems:
        if problem.kind != "syntax":
            continue
        for keyword, name in DEFINITION.findall(problem.cell.source):
            if name in namespace:
                continue  # defined again elsewhere, and that definition is what discovery saw
            for role in ROLE_ORDER:
                kind_fits = role in ("attention", "model") or (keyword == "def") == (role in FUNCTION_ROLES)
                if role not in bound and role not in found and kind_fits and name_score(name, ROLE_NAMES[role]):
                    found[role] = (name, problem)
                    break
    return found


def infer_convention(helper, role="subsequent_mask"):
    """The mask convention of the code's own mask helper: a subsequent-mask helper's output for size 3, or a
    padding-mask helper's for tokens whose last one is padding (``[[5, 6, pad]]``, with pad 0 and then 1)."""
    if role == "padding_mask":
        for pad in (0, 1):
            tokens = torch.tensor([[5, 6, pad]])
            for arguments in ((tokens, pad), (tokens, tokens, pad), (tokens,)):
                try:
                    return convention_of_padding(helper(*arguments))
                except Exception:  # the helper's own code, or another signature; its checks report a failure
                    continue
        return None
    for arguments in ((3,), (torch.ones(1, 3, dtype=torch.long),), (3, "cpu")):  # (size, device) helpers too
        try:
            return convention_of_mask(helper(*arguments))
        except Exception:  # the helper's own code; a failure is reported by its checks
            continue
    return None


def convention_of_padding(mask):
    """The convention of a padding mask made for tokens ``[[5, 6, pad]]``; raises ValueError if unclear."""
    row = mask.reshape(-1)[-3:]
    if row.is_floating_point() and torch.isinf(row).any():
        return "additive"
    kept = (row != 0).tolist()
    conventions = {(True, True, False): "keep", (False, False, True): "blocked"}
    if tuple(kept) not in conventions:
        raise ValueError(f"a padding mask {kept} of unclear convention")
    return conventions[tuple(kept)]


def read_overrides(directory):
    """``conformance.toml`` next to the code: ``[roles] model = "make_model"``, ``[masks] convention = "blocked"``."""
    path = Path(directory) / "conformance.toml"
    if not path.is_file():
        return {}
    with open(path, "rb") as f:
        return tomllib.load(f)
