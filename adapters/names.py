"""The words code uses for what it builds: the vocabulary every later stage reads names with.

Families of synonyms for each role of ``conformance.contract.interface`` (class and function names: ``MultiHeadAttentionBlock``,
``MultiHeadedAttention``, ... for ``multi_head_attention``), for the canonical hyperparameters a constructor argument
stands for (``embed_dim``, ``features``, ``hidden`` -> ``d_model``; ``n_head``, ``num_heads`` -> ``h``), for the
sub-blocks a constructor receives or builds at an attribute, and for the canonical inputs of each role's call; with
the fuzzy matching (:func:`name_score`) that lets ``EndoderBlock`` still name an encoder layer.
"""
import difflib
import functools
import re

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
    "max_len": ["max_len", "L", "seq_len", "max_seq_len", "n_position", "max_length", "maxlen", "src_seq_len", "tgt_seq_len",
                "context_length", "block_size", "max_positions", "max_seq_length", "max_position_embeddings",
                "seq_length", "n_positions", "max_sequence_length", "maximum_position_encoding", "length"],
    "d_k": ["d_k", "dk", "head_dim", "d_head", "head_size", "dim_head", "d_q", "key_dim", "d_key", "dim_k", "dim_q",
            "dim_key"],
    "d_v": ["d_v", "dv", "value_dim", "d_value", "dim_v", "dim_value"],
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


@functools.lru_cache(maxsize=4096)
def normalize(name):
    """``name`` lower-cased with everything but letters and digits dropped (remembered: the call plans of every
    build and call read the same few names again and again)."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def normalized(table):
    """A table of names (``ROLE_NAMES``, ``CALL_NAMES``, ...) with each key's names normalized, made once."""
    return {key: frozenset(normalize(s) for s in names) for key, names in table.items()}


NORMALIZED_CALL_NAMES = normalized(CALL_NAMES)
NORMALIZED_ARGUMENT_NAMES = normalized(ARGUMENT_NAMES)
NORMALIZED_SUBMODULE_NAMES = normalized(SUBMODULE_NAMES)


def names_a_padding_mask(name):
    """Whether a parameter's name says it takes a padding mask (``src_key_padding_mask``, ``tgt_padding_mask``): the
    part torch's convention keeps apart from the attention mask, True = blocked."""
    return "paddingmask" in normalize(name)


def name_score(name, synonyms):
    """How well ``name`` matches a family of synonyms: 1 exact, else difflib's ratio (0.8 or more counts)."""
    n = normalize(name)
    best = max(difflib.SequenceMatcher(None, n, normalize(s)).ratio() for s in synonyms)
    return best if best >= 0.8 else 0.0


def argument_role(name):
    """The canonical hyperparameter a constructor argument name stands for, or None; a size given once per side
    (``enc_num_heads``, ``d_ff_decoder``) is the paper's one size (§3.1: both stacks have the same shape)."""
    n = normalize(name)
    for canonical, names in NORMALIZED_ARGUMENT_NAMES.items():
        if n in names:
            return canonical
    counted = re.sub(r"^(num|n|number_of)_(.{3,}?)s?$", r"\2", name.lower())  # ``num_model_dims``: a model dim
    if counted != name.lower():
        return argument_role(counted)
    side, _, rest = name.lower().partition("_")
    if side not in SIDES + SUMS:  # or a suffix: ``d_model_encoder``
        rest, _, side = name.lower().rpartition("_")
    canonical = argument_role(rest) if side in SIDES + SUMS and rest else None
    if side in SUMS:
        return canonical if canonical == "dropout" else None
    return canonical if canonical not in ("vocab_size", "src_vocab", "tgt_vocab", "pad_idx") else None


SIDES = ("enc", "dec", "encoder", "decoder")
"""The prefixes that name the stack an argument sizes."""
SUMS = ("pos", "emb")
"""The prefixes of a dropout rate on the sums of embeddings and positions: the paper's one P_drop (§5.4)."""


def names_another_role_exactly(name, role):
    """Whether ``name`` is, exactly, a synonym of a role other than ``role`` (``make_trg_mask`` names the target
    mask: it is no near miss of ``make_src_mask``)."""
    n = normalize(name)
    return any(n in synonyms for other, synonyms in NORMALIZED.items() if other != role)


FUTURE_WORDS = {"causal", "look", "ahead", "lookahead", "future", "subsequent", "nopeak", "autoregressive",
                "triangular"}
"""Words that name the future positions a decoder hides (§3.2.3): in a mask argument's name (``look_ahead_mask``)
it is the target's; in a constructor flag's (``causal=False``) the switch of a block's own causal mask."""


def names_padding_only(name):
    """Whether a name says padding and nothing of the future positions (``_make_tgt_pad_mask``): a padding-mask
    helper, never the subsequent mask of §3.2.3, whatever else its name shares with one (``make_tgt_mask``)."""
    n = normalize(name)
    return "pad" in n and not any(word in n for word in FUTURE_WORDS | {"tril", "triu", "square"})


ROLE_WORDS = {"sublayer_connection": ("sublayer", "residual"), "generator": ("generator",)}
"""Words that name a role inside a longer name (``SublayerLogic``, ``DecoderGenerator``)."""


NORMALIZED = normalized(ROLE_NAMES)


def names_the_role(name, role):
    """Whether a run of the words of ``name`` (split at capitals, digits and underscores) is a name of ``role``, and
    no longer run names another role: ``EncoderTransf`` names the encoder and ``VanillaTransformer`` the model, but
    ``EncoderLayer`` names the encoder layer, not the encoder."""
    words = [w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)]
    runs = {"".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)}
    longest = {r: max((len(run) for run in runs if run in synonyms), default=0) for r, synonyms in NORMALIZED.items()}
    return longest[role] > 0 and longest[role] == max(longest.values())
