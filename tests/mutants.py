"""Buggy variants ("mutants") of ``reference/transformer.py``: each one realistic mistake, written as exact text
substitutions applied to the reference's source.

A mutant names the property *family* whose checks must notice it and the *component* (role) whose check must
report it. ``deviation=True`` marks a named variant of practice (pre-norm, GELU, ...): the suite must report it as
a *deviation*, not a failure, and it is kept out of the bug count.

``apply`` raises :class:`StaleMutant` when an edit's text does not occur exactly once, so a mutant never silently
turns into the reference (or into something else) when the reference changes.

    from tests import mutants
    path = mutants.write(mutants.BY_NAME["attention_unscaled"], tmp_dir)
    # pytest conformance --impl=<path>
"""
import ast
from dataclasses import dataclass
from pathlib import Path

import nbformat

from conformance.contract.interface import ROLES
from conformance.options import FAMILIES
from reference.transformer import CONFORMANCE_ROLES as ROLE_OBJECTS

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reference" / "transformer.py"


class StaleMutant(ValueError):
    """An edit of a mutant no longer matches the reference's source exactly once."""


@dataclass(frozen=True)
class Mutant:
    """``cause``: the cause id that names the mistake (the truth, written with the mutant; for a deviation, the
    variant's); ``crash_at``: for a mutant that crashes, the text of the line in the mutant's file where it does
    (an error's message must cite that line)."""
    name: str
    family: str
    component: str
    description: str
    edits: tuple
    deviation: bool = False
    cause: str = ""
    crash_at: str = ""

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"mutant name {self.name!r} is not an identifier (it becomes a module name)")
        if self.family not in FAMILIES:
            raise ValueError(f"{self.name}: unknown family {self.family!r}")
        if self.component not in ROLES:
            raise ValueError(f"{self.name}: unknown component {self.component!r}")
        if not self.edits or not all(isinstance(e, tuple) and len(e) == 2 and e[0] != e[1] for e in self.edits):
            raise ValueError(f"{self.name}: edits must be a non-empty sequence of (old, new) pairs that differ")
        if not self.cause.startswith((f"{self.component}.", "error.")):
            raise ValueError(f"{self.name}: cause {self.cause!r} names neither its component nor a crash")


def M(name, family, component, description, *edits, deviation=False, cause="", crash_at=""):
    return Mutant(name, family, component, description, tuple(edits), deviation, cause, crash_at)


def crash_line(mutant):
    """The line of the written mutant (its header included) where it crashes, or None."""
    if not mutant.crash_at:
        return None
    text = header(mutant) + apply(mutant)
    return text[:text.index(mutant.crash_at)].count("\n") + 1


SCORES = "scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)"
SOFTMAX = "weights = scores.softmax(dim=-1)"
MASK_FILL = "scores = scores.masked_fill(mask.logical_not(), MASKED_SCORE)"
SPLIT = "return w(x).reshape(batch, length, self.h, self.d_k).transpose(1, 2)"
CONCAT = "return heads.transpose(1, 2).reshape(batch, length, self.h * self.d_k)"
CALL_ATTENTION = "heads, _ = scaled_dot_product_attention(q, k, v, mask)"
GENERATOR = "return self.logits(x).log_softmax(dim=-1)"
PE_ADD = "return self.dropout(x + self.encodings[:, : x.size(1)])"
PE_BUFFER = 'self.register_buffer("encodings", encodings[None])'
SIN = "table[:, 0::2] = angles.sin()"
COS = "table[:, 1::2] = angles[:, : d_model // 2].cos()"
LN_OUT = "return self.gain * self.normalize(x) + self.bias"
MEAN = "mean = x.mean(dim=-1, keepdim=True)"
VARIANCE = "variance = x.var(dim=-1, keepdim=True, correction=0)"
SUBLAYER_SUM = "residual_sum = x + self.dropout(sublayer(x))"
SUBLAYER = SUBLAYER_SUM + "\n        return self.layer_norm(residual_sum)"
HIDDEN = "return torch.relu(self.w_1(x))"
FFN = "return self.w_2(self.hidden(x))"
EMBED = "return self.lookup(tokens) * self.scale"
ENCODER_LAYERS = "self.layers = nn.ModuleList([EncoderLayer(d_model, h, d_ff, dropout) for _ in range(N)])"
DECODER_LAYERS = "self.layers = nn.ModuleList([DecoderLayer(d_model, h, d_ff, dropout) for _ in range(N)])"
ENCODER_CONNECTIONS = ("self.after_self_attention = AddAndNorm(d_model, dropout)\n"
                       "        self.after_feed_forward = AddAndNorm(d_model, dropout)")
ENCODER_FFN_STEP = "y, y, src_mask))\n        return self.after_feed_forward(x, self.feed_forward)"
DECODER_FFN_STEP = "memory, src_mask))\n        return self.after_feed_forward(x, self.feed_forward)"
CROSS_ATTENTION = "self.cross_attention(y, memory, memory, src_mask)"
ENCODE = "embedded = self.positional_encoding(self.src_embedding(src))"
DECODE = "embedded = self.positional_encoding(self.tgt_embedding(tgt))"
MEMORY = "memory = self.encode(src, src_mask)\n"

MUTANTS = [
    # -- softmax: eq. (1), softmax(Q K^T / sqrt(d_k)) over the keys; the generator's log-softmax (3.4) ----------
    M("attention_scale_sqrt_d_model", "softmax", "attention",
      "scores divided by sqrt(d_model) = sqrt(h * d_k) instead of sqrt(d_k)",
      (SCORES, "scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(1) * d_k)  # d_model"),
      cause="attention.scale.sqrt_d_model"),
    M("attention_scale_d_k", "softmax", "attention", "scores divided by d_k instead of sqrt(d_k)",
      ("/ math.sqrt(d_k)", "/ d_k"), cause="attention.scale.d_k"),
    M("attention_unscaled", "softmax", "attention", "scores not scaled at all (plain dot-product attention)",
      (" / math.sqrt(d_k)", ""), cause="attention.scale.unscaled"),
    M("attention_scale_multiplied", "softmax", "attention", "scores multiplied by sqrt(d_k) instead of divided",
      ("/ math.sqrt(d_k)", "* math.sqrt(d_k)"), cause="attention.scale.multiplied_by_sqrt_d_k"),
    M("attention_softmax_over_queries", "softmax", "attention", "softmax over the query axis (dim=-2)",
      (SOFTMAX, "weights = scores.softmax(dim=-2)"), cause="attention.softmax_wrong_axis"),
    M("attention_query_key_swapped", "softmax", "attention",
      "scores computed as K Q^T (query and key swapped); crashes when Lq != Lk",
      ("query @ key.transpose(-2, -1)", "key @ query.transpose(-2, -1)"),
      cause="attention.query_key_swapped", crash_at=MASK_FILL),
    M("mha_double_scaling", "softmax", "multi_head_attention",
      "queries pre-scaled by 1/sqrt(d_model) (fairseq style) although the attention function already divides by "
      "sqrt(d_k)",
      (CALL_ATTENTION, "heads, _ = scaled_dot_product_attention(q / math.sqrt(self.h * self.d_k), k, v, mask)"),
      cause="multi_head_attention.scale.scaled_twice"),
    M("mha_heads_split_without_transpose", "softmax", "multi_head_attention",
      "heads split with reshape(batch, h, length, d_k) instead of reshape(batch, length, h, d_k).transpose(1, 2)",
      (SPLIT, "return w(x).reshape(batch, self.h, length, self.d_k)"),
      cause="multi_head_attention.heads_split_without_transpose"),
    M("generator_log_softmax_wrong_axis", "embeddings", "generator",
      "log-softmax over the length axis (dim=1) instead of the vocabulary",
      (GENERATOR, "return self.logits(x).log_softmax(dim=1)"), cause="generator.softmax_wrong_axis"),
    M("generator_plain_softmax", "embeddings", "generator",
      "probabilities (softmax, as the paper's words say) returned instead of log-probabilities (a named deviation)",
      (GENERATOR, "return self.logits(x).softmax(dim=-1)"), deviation=True, cause="generator.softmax_output"),
    M("generator_returns_logits", "embeddings", "generator",
      "logits returned, the log-softmax left to the loss (a named deviation)",
      (GENERATOR, "return self.logits(x)"), deviation=True, cause="generator.logits_output"),

    # -- masks: True = may attend; padding keys and future positions get no weight (3.1, 3.2.3) --------------
    M("attention_mask_inverted", "masks", "attention", "scores filled where the mask is True instead of False",
      (MASK_FILL, "scores = scores.masked_fill(mask, MASKED_SCORE)"), cause="attention.mask_inverted"),
    M("attention_mask_filled_with_zero", "masks", "attention", "masked scores set to 0 instead of -inf (-1e9)",
      (MASK_FILL, "scores = scores.masked_fill(mask.logical_not(), 0.0)"), cause="attention.masked_scores_set_to_zero"),
    M("attention_mask_after_softmax", "masks", "attention",
      "mask applied to the weights after the softmax: rows no longer sum to 1",
      ("    if mask is not None:\n        " + MASK_FILL + "\n    " + SOFTMAX,
       "    " + SOFTMAX + "\n    if mask is not None:\n        weights = weights.masked_fill(mask.logical_not(), 0.0)"),
      cause="attention.mask_applied_after_softmax"),
    M("mha_mask_not_passed", "masks", "multi_head_attention", "multi-head attention never passes the mask on",
      (CALL_ATTENTION, "heads, _ = scaled_dot_product_attention(q, k, v)"), cause="multi_head_attention.mask_ignored"),
    M("subsequent_mask_triu", "masks", "subsequent_mask",
      "key j allowed when j >= i instead of j <= i (triu for tril): the future is visible, the past not",
      ("positions[None, :] <= positions[:, None]", "positions[None, :] >= positions[:, None]"),
      cause="subsequent_mask.triu"),
    M("subsequent_mask_excludes_diagonal", "masks", "subsequent_mask",
      "off by one: position i may not attend to itself (j < i instead of j <= i)",
      ("<= positions[:, None]", "< positions[:, None]"), cause="subsequent_mask.excludes_diagonal"),
    M("padding_mask_inverted", "masks", "padding_mask", "True where the token is padding",
      ("(tokens != pad_idx)", "(tokens == pad_idx)"), cause="padding_mask.inverted"),
    M("padding_mask_masks_queries", "masks", "padding_mask",
      "mask shaped (batch, length, 1): hides padded queries instead of padded keys",
      ("(tokens != pad_idx)[..., None, :]", "(tokens != pad_idx)[..., :, None]"), cause="padding_mask.masks_queries"),
    M("decoder_self_attention_unmasked", "masks", "decoder_layer",
      "decoder self-attention called without the target mask: positions see the future",
      ("self.self_attention(y, y, y, tgt_mask)", "self.self_attention(y, y, y)"), cause="decoder_layer.mask_ignored"),
    M("encoder_self_attention_unmasked", "masks", "encoder_layer",
      "encoder self-attention called without the source padding mask",
      ("self.self_attention(y, y, y, src_mask)", "self.self_attention(y, y, y)"), cause="encoder_layer.mask_ignored"),
    M("cross_attention_with_target_mask", "masks", "decoder_layer",
      "encoder-decoder attention given the target mask instead of the source mask (crashes when Ls != Lt)",
      (CROSS_ATTENTION, "self.cross_attention(y, memory, memory, tgt_mask)"),
      cause="decoder_layer.mask_ignored", crash_at=MASK_FILL),

    # -- positional encoding (3.5) and the dropout on the sums (5.4) ------------------------------------------
    M("pe_multiplies_by_frequency", "positional_encoding", "positional_encoding",
      "angle = pos * 10000^(2i/d_model) instead of pos / 10000^(2i/d_model)",
      ("angles = pos / 10000.0", "angles = pos * 10000.0"), cause="positional_encoding.multiplies_by_frequency"),
    M("pe_sin_cos_swapped", "positional_encoding", "positional_encoding",
      "cos in the even columns and sin in the odd ones",
      (SIN, "table[:, 0::2] = angles.cos()"), (COS, "table[:, 1::2] = angles[:, : d_model // 2].sin()"),
      cause="positional_encoding.sin_cos_swapped"),
    M("pe_cos_overwrites_sin", "positional_encoding", "positional_encoding",
      "cos written to the even columns (0::2) over the sines; the odd columns stay 0",
      (COS, "table[:, 0::2] = angles[:, : d_model // 2].cos()"), cause="positional_encoding.cos_overwrites_sin"),
    M("pe_exponent_uses_i_not_2i", "positional_encoding", "positional_encoding",
      "frequencies 1/10000^(i/d_model) with i the column pair index instead of 2i",
      ("two_i = torch.arange(0, d_model, 2, dtype=torch.float64)",
       "two_i = torch.arange(0, (d_model + 1) // 2, dtype=torch.float64)"),
      cause="positional_encoding.exponent_uses_i_not_2i"),
    M("pe_not_sliced", "positional_encoding", "positional_encoding",
      "the whole max_len table added, not sliced to the input length (crashes)",
      ("self.encodings[:, : x.size(1)]", "self.encodings"),
      cause="positional_encoding.not_sliced", crash_at="return self.dropout(x + self.encodings)"),
    M("pe_sliced_by_batch", "positional_encoding", "positional_encoding",
      "table sliced with x.size(0) (the batch size; a sequence-first habit) instead of the length",
      ("self.encodings[:, : x.size(1)]", "self.encodings[:, : x.size(0)]"),
      cause="positional_encoding.sliced_by_batch"),
    M("pe_dropout_missing", "positional_encoding", "positional_encoding",
      "no dropout on the sums of embeddings and positional encodings (5.4)",
      (PE_ADD, "return x + self.encodings[:, : x.size(1)]"), cause="positional_encoding.dropout_missing"),
    M("pe_dropout_before_adding", "positional_encoding", "positional_encoding",
      "dropout applied to the embeddings before the encoding is added (the encoding is never dropped)",
      (PE_ADD, "return self.dropout(x) + self.encodings[:, : x.size(1)]"),
      cause="positional_encoding.dropout_before_adding"),

    # -- layer normalization: (x - mean) / sqrt(var + eps), biased variance, over the features -----------------
    M("ln_divides_by_variance", "layer_norm", "layer_norm", "divides by the variance, not its square root",
      ("/ torch.sqrt(variance + self.eps)", "/ (variance + self.eps)"), cause="layer_norm.divides_by_variance"),
    M("ln_eps_outside_sqrt", "layer_norm", "layer_norm", "eps added outside the square root: sqrt(var) + eps",
      ("/ torch.sqrt(variance + self.eps)", "/ (torch.sqrt(variance) + self.eps)"),
      cause="layer_norm.eps_outside_sqrt"),
    M("ln_eps_is_d_model", "layer_norm", "layer_norm", "eps bound to d_model (arguments mixed up)",
      ("self.eps = eps", "self.eps = d_model"), cause="layer_norm.eps_is_d_model"),
    M("ln_over_batch_axis", "layer_norm", "layer_norm", "mean and variance taken over the batch axis",
      (MEAN, MEAN.replace("dim=-1", "dim=0")), (VARIANCE, VARIANCE.replace("dim=-1", "dim=0")),
      cause="layer_norm.normalizes_over_wrong_axis"),
    M("ln_unbiased_variance", "layer_norm", "layer_norm",
      "unbiased variance (torch.var's default; a named deviation)",
      (VARIANCE, "variance = x.var(dim=-1, keepdim=True)"), deviation=True, cause="layer_norm.unbiased_variance"),

    # -- norm order: LayerNorm(x + Sublayer(x)) (3.1) --------------------------------------------------------
    M("pre_norm", "norm_order", "sublayer_connection", "pre-norm x + Sublayer(LayerNorm(x)) (a named deviation)",
      (SUBLAYER, "return x + self.dropout(sublayer(self.layer_norm(x)))"), deviation=True,
      cause="sublayer_connection.norm_order.pre_norm"),
    M("residual_missing", "norm_order", "sublayer_connection", "no residual connection: LayerNorm(Sublayer(x))",
      (SUBLAYER_SUM, "residual_sum = self.dropout(sublayer(x))"),
      cause="sublayer_connection.norm_order.residual_missing"),
    M("norm_on_sublayer_output", "norm_order", "sublayer_connection", "x + LayerNorm(Sublayer(x))",
      (SUBLAYER, "return x + self.layer_norm(self.dropout(sublayer(x)))"),
      cause="sublayer_connection.norm_order.norm_on_sublayer_output"),
    M("encoder_layer_ffn_without_residual", "norm_order", "encoder_layer",
      "the encoder layer's feed-forward sub-layer has no residual: LayerNorm(FFN(x))",
      (ENCODER_FFN_STEP, "y, y, src_mask))\n        return self.after_feed_forward.layer_norm(self.feed_forward(x))"),
      cause="encoder_layer.norm_order.residual_missing"),
    M("decoder_layer_ffn_without_norm", "norm_order", "decoder_layer",
      "the decoder layer's feed-forward sub-layer is x + FFN(x), with no LayerNorm, its attentions post-norm",
      (DECODER_FFN_STEP, "memory, src_mask))\n        return x + self.feed_forward(x)"),
      cause="decoder_layer.norm_order.norm_missing"),
    M("encoder_extra_final_norm", "norm_order", "encoder",
      "a final LayerNorm after the post-norm encoder stack (a named deviation)",
      (ENCODER_LAYERS, ENCODER_LAYERS + "\n        self.layer_norm = LayerNorm(d_model)"),
      ("            x = layer(x, src_mask)\n        return x\n", "            x = layer(x, src_mask)\n"
       "        return self.layer_norm(x)\n"), deviation=True, cause="encoder.norm_order.extra_final_norm"),

    # -- parameters: counts, independent layers, every parameter used ----------------------------------------
    M("clones_repeat_one_layer", "parameters", "encoder",
      "the encoder builds one layer and lists that object N times (a copy forgotten): the N layers share their "
      "weights",
      (ENCODER_LAYERS, "layer = EncoderLayer(d_model, h, d_ff, dropout)\n"
                       "        self.layers = nn.ModuleList([layer for _ in range(N)])"),
      cause="encoder.layers_share_weights"),
    M("decoder_layer_list_multiplied", "parameters", "decoder",
      "nn.ModuleList([DecoderLayer(...)] * N): one layer object N times",
      (DECODER_LAYERS, "self.layers = nn.ModuleList([DecoderLayer(d_model, h, d_ff, dropout)] * N)"),
      cause="decoder.layers_share_weights"),
    M("encoder_reuses_first_layer", "parameters", "encoder", "the encoder applies layers[0] N times",
      ("for layer in self.layers:\n            x = layer(x, src_mask)",
       "for _ in self.layers:\n            x = self.layers[0](x, src_mask)"), cause="encoder.layers_share_weights"),
    M("decoder_loop_result_discarded", "parameters", "decoder",
      "the assignment of the decoder's loop dropped (layer(x, ...) instead of x = layer(x, ...)): every layer reads "
      "the stack's input and the stack returns that input",
      ("            x = layer(x, memory, src_mask, tgt_mask)\n        return x\n",
       "            layer(x, memory, src_mask, tgt_mask)\n        return x\n"),
      cause="decoder.layer_outputs_discarded"),
    M("decoder_layers_not_chained", "parameters", "decoder",
      "every decoder layer reads the stack's input; only the last one's output is returned",
      ("            x = layer(x, memory, src_mask, tgt_mask)\n        return x\n",
       "            out = layer(x, memory, src_mask, tgt_mask)\n        return out\n"),
      cause="decoder.layers_not_chained"),
    M("mha_projections_shared_by_heads", "parameters", "multi_head_attention",
      "one d_k x d_k projection for Q, K and V applied to every head's slice, shared by the heads",
      ("self.w_q = nn.Linear(d_model, d_model)\n        self.w_k = nn.Linear(d_model, d_model)\n"
       "        self.w_v = nn.Linear(d_model, d_model)",
       "self.w_q = nn.Linear(d_model // h, d_model // h)\n        self.w_k = nn.Linear(d_model // h, d_model // h)\n"
       "        self.w_v = nn.Linear(d_model // h, d_model // h)"),
      (SPLIT, "return w(x.reshape(batch, length, self.h, self.d_k)).transpose(1, 2)"),
      cause="multi_head_attention.parameters.count"),
    M("mha_one_projection_for_qkv", "parameters", "multi_head_attention",
      "W^Q used for queries, keys and values; W^K and W^V registered but unused",
      ("k = self.project(key, self.w_k)\n        v = self.project(value, self.w_v)",
       "k = self.project(key, self.w_q)\n        v = self.project(value, self.w_q)"),
      cause="multi_head_attention.parameters.no_gradient"),
    M("mha_output_projection_unused", "parameters", "multi_head_attention",
      "the concatenated heads returned without W^O",
      ("return self.w_o(self.concat(heads))", "return self.concat(heads)"),
      cause="multi_head_attention.parameters.no_gradient"),
    M("layer_norm_affine_unused", "parameters", "layer_norm", "gain and bias registered but not applied",
      (LN_OUT, "return self.normalize(x)"), cause="layer_norm.gain_and_bias_not_applied"),
    M("decoder_layer_missing_ffn", "parameters", "decoder_layer",
      "the decoder layer returns after cross-attention: no feed-forward sub-layer",
      (DECODER_FFN_STEP, "memory, src_mask))\n        return x"),
      cause="decoder_layer.norm_order.sublayer_output_unused"),
    M("ffn_inner_dim_d_model", "parameters", "feed_forward", "inner dimension d_model instead of d_ff",
      ("self.w_1 = nn.Linear(d_model, d_ff)\n        self.w_2 = nn.Linear(d_ff, d_model)",
       "self.w_1 = nn.Linear(d_model, d_model)\n        self.w_2 = nn.Linear(d_model, d_model)"),
      cause="feed_forward.parameters.count"),
    M("model_memory_detached", "parameters", "model",
      "encoder output detached before decoding: no gradient reaches the encoder",
      (MEMORY, "memory = self.encode(src, src_mask).detach()\n"), cause="model.parameters.no_gradient"),
    M("attention_weights_detached", "parameters", "multi_head_attention",
      "attention weights detached: no gradient reaches W^Q and W^K",
      (SOFTMAX, SOFTMAX + ".detach()"), cause="multi_head_attention.parameters.no_gradient"),
    M("pe_learned_parameter", "parameters", "positional_encoding",
      "the sinusoid table registered as a trainable nn.Parameter: learned positional embeddings (Table 3, row E;"
      " a named deviation)",
      (PE_BUFFER, "self.encodings = nn.Parameter(encodings[None])"), deviation=True,
      cause="positional_encoding.table_is_trainable"),

    # -- shapes: wrong sizes, and crashes --------------------------------------------------------------------
    M("embedding_table_transposed", "shapes", "embedding", "nn.Embedding(d_model, vocab_size)",
      ("nn.Embedding(vocab_size, d_model)", "nn.Embedding(d_model, vocab_size)"), cause="embedding.table_transposed"),
    M("ffn_w2_dims_swapped", "shapes", "feed_forward", "W_2 = nn.Linear(d_model, d_ff): d_ff and d_model swapped",
      ("self.w_2 = nn.Linear(d_ff, d_model)", "self.w_2 = nn.Linear(d_model, d_ff)"),
      cause="error.shape_mismatch", crash_at=FFN),
    M("mha_concat_view_after_transpose", "shapes", "multi_head_attention",
      "view() on the transposed heads (not contiguous): crashes",
      (CONCAT, CONCAT.replace(".reshape(", ".view(")),
      cause="error.view_of_non_contiguous", crash_at=CONCAT.replace(".reshape(", ".view(")),
    M("cross_attention_over_own_input", "information_flow", "decoder_layer",
      "encoder-decoder attention attends over the decoder's own input instead of memory",
      (CROSS_ATTENTION, "self.cross_attention(y, y, y, src_mask)"),
      cause="decoder_layer.cross_attention_over_own_input"),

    # -- behaviour: what the components compute ---------------------------------------------------------------
    M("embedding_not_scaled", "embeddings", "embedding", "embeddings not multiplied by sqrt(d_model) (3.4)",
      (EMBED, "return self.lookup(tokens)"), cause="embedding.not_scaled"),
    M("embedding_divided_by_sqrt_d_model", "embeddings", "embedding", "embeddings divided by sqrt(d_model)",
      (EMBED, "return self.lookup(tokens) / self.scale"), cause="embedding.divided_by_sqrt_d_model"),
    M("ffn_missing_relu", "behaviour", "feed_forward", "no ReLU: the FFN is affine",
      (HIDDEN, "return self.w_1(x)"), cause="feed_forward.relu_missing"),
    M("ffn_relu_on_output", "behaviour", "feed_forward", "an extra ReLU on the FFN output",
      (FFN, "return torch.relu(self.w_2(self.hidden(x)))"), cause="feed_forward.relu_on_output"),
    M("ffn_gelu", "behaviour", "feed_forward", "GELU instead of ReLU (a named deviation)",
      (HIDDEN, "return nn.functional.gelu(self.w_1(x))"), deviation=True, cause="feed_forward.gelu"),
    M("mha_concat_without_transpose", "behaviour", "multi_head_attention",
      "heads concatenated by reshape without transposing back: positions and heads mixed",
      (CONCAT, "return heads.reshape(batch, length, self.h * self.d_k)"),
      cause="multi_head_attention.heads_merged_without_transpose"),
    M("dropout_active_in_eval", "behaviour", "sublayer_connection",
      "F.dropout(x, p) (training=True by default): dropout still active in eval mode",
      (SUBLAYER_SUM, "residual_sum = x + nn.functional.dropout(sublayer(x), self.dropout.p)"),
      cause="sublayer_connection.eval_not_deterministic"),
    M("model_target_without_positional_encoding", "information_flow", "model",
      "positional encodings added to the source embeddings only",
      (DECODE, "embedded = self.tgt_embedding(tgt)"), cause="model.target_positions_missing"),
    M("model_source_without_positional_encoding", "information_flow", "model",
      "positional encodings added to the target embeddings only",
      (ENCODE, "embedded = self.src_embedding(src)"), cause="model.source_positions_missing"),
    M("attention_scales_the_callers_query", "behaviour", "attention",
      "the query divided by sqrt(d_k) in place (query.div_), changing the caller's tensor",
      (SCORES, "scores = query.div_(math.sqrt(d_k)) @ key.transpose(-2, -1)"),
      cause="attention.inputs_modified_in_place"),
    M("dropout_on_residual_sum", "behaviour", "sublayer_connection",
      "dropout on the residual sum, LayerNorm(Dropout(x + Sublayer(x))), not on the sub-layer's output",
      (SUBLAYER, "return self.layer_norm(self.dropout(x + sublayer(x)))"),
      cause="sublayer_connection.dropout_on_residual_sum"),
    M("decoder_layer_cross_attention_without_dropout", "behaviour", "decoder_layer",
      "the decoder layer's encoder-decoder attention sub-layer written out as LayerNorm(x + Sublayer(x)), bypassing "
      "the connection's dropout",
      ("x = self.after_cross_attention(x, lambda y: " + CROSS_ATTENTION + ")",
       "x = self.after_cross_attention.layer_norm(x + self.cross_attention(x, memory, memory, src_mask))"),
      cause="decoder_layer.sublayer_dropout_missing"),
    M("encoder_layer_fixed_dropout_rate", "behaviour", "encoder_layer",
      "the encoder layer's sub-layer connections built with dropout 0.1 whatever rate is configured",
      (ENCODER_CONNECTIONS, ENCODER_CONNECTIONS.replace("(d_model, dropout)", "(d_model, 0.1)")),
      cause="encoder_layer.dropout_rate_ignored"),
    M("decoder_layer_one_norm_eps_d_model", "norm_order", "decoder_layer",
      "one LayerNorm of the decoder layer rebuilt as LayerNorm(d_model, d_model): eps = d_model in that norm only",
      ("self.after_cross_attention = AddAndNorm(d_model, dropout)",
       "self.after_cross_attention = AddAndNorm(d_model, dropout)\n"
       "        self.after_cross_attention.layer_norm = LayerNorm(d_model, d_model)"),
      cause="decoder_layer.layer_norm_eps_wrong"),
    M("decoder_layer_cross_attention_temperature_d_model", "softmax", "decoder_layer",
      "multi-head attention built with a temperature (sqrt(d_k) by default); the decoder layer's encoder-decoder "
      "attention given sqrt(d_model) instead: that one attention is scaled wrong, the role built alone is right",
      ("def __init__(self, h, d_model):", "def __init__(self, h, d_model, temperature=None):"),
      ('self.d_k = d_model // h  # "d_k = d_v = d_model / h"',
       'self.d_k = d_model // h  # "d_k = d_v = d_model / h"\n'
       "        self.temperature = temperature or math.sqrt(self.d_k)"),
      (CALL_ATTENTION, "scores = q @ k.transpose(-2, -1) / self.temperature\n"
       "        if mask is not None:\n"
       "            scores = scores.masked_fill(mask.logical_not(), MASKED_SCORE)\n"
       "        heads = scores.softmax(dim=-1) @ v"),
      ("self.cross_attention = MultiHeadAttention(h, d_model)",
       "self.cross_attention = MultiHeadAttention(h, d_model, temperature=d_model ** 0.5)"),
      cause="decoder_layer.attention_scale_wrong"),
    M("encoder_last_layer_norm_over_sequence", "norm_order", "encoder",
      "LayerNorm given the axis it normalizes over (the features by default); the last encoder layer's feed-forward "
      "LayerNorm rebuilt over the sequence axis (axis 1): that one norm mixes positions, the role built alone is right",
      ("def __init__(self, d_model, eps=1e-5):", "def __init__(self, d_model, eps=1e-5, axis=-1):"),
      ("self.eps = eps", "self.eps, self.axis = eps, axis"),
      (MEAN, MEAN.replace("dim=-1", "dim=self.axis")), (VARIANCE, VARIANCE.replace("dim=-1", "dim=self.axis")),
      (ENCODER_LAYERS, ENCODER_LAYERS + "\n        self.layers[-1].after_feed_forward.layer_norm = LayerNorm(d_model, "
                                        "axis=1)"),
      cause="encoder.layer_norm_axis_wrong"),
    M("model_memory_zeroed", "information_flow", "model",
      "the decoder is handed the encoder's output multiplied by zero (a debugging line left in)",
      (MEMORY, "memory = self.encode(src, src_mask) * 0\n"), cause="model.source_ignored"),
    M("decoder_masks_swapped", "masks", "decoder",
      "the decoder hands its layers the target mask where they take the source mask, and the other way round",
      ("            x = layer(x, memory, src_mask, tgt_mask)", "            x = layer(x, memory, tgt_mask, src_mask)"),
      cause="decoder.masks_swapped"),
    M("encoder_layer_tuple_passed_on", "parameters", "encoder",
      "the encoder layer returns (output, None) and the stack hands the whole tuple to the next layer",
      (ENCODER_FFN_STEP, ENCODER_FFN_STEP + ", None"),
      cause="encoder.tuple_passed_on"),
    M("decoder_mask_dropped_in_training", "information_flow", "model",
      "the decoder layer's training path forgets the target mask (only the eval path, used to decode, keeps it)",
      ("self.self_attention(y, y, y, tgt_mask)", "self.self_attention(y, y, y, None if self.training else tgt_mask)"),
      cause="model.future_visible_in_training"),
]

MUTANTS += [
    # -- construction: arguments passed in the order of the called constructor's signature -----------------
    M("model_encoder_arguments_swapped", "construction", "model", "EncoderStack(N, d_model, d_ff, h, dropout): h and "
      "d_ff swapped in the model's call", ("self.encoder = EncoderStack(N, d_model, h, d_ff, dropout)",
                                           "self.encoder = EncoderStack(N, d_model, d_ff, h, dropout)"),
      cause="model.arguments_in_wrong_order"),
    M("encoder_layer_sublayer_arguments_swapped", "construction", "encoder_layer",
      "AddAndNorm(dropout, d_model) in the encoder layer",
      (ENCODER_CONNECTIONS, ENCODER_CONNECTIONS.replace("(d_model, dropout)", "(dropout, d_model)")),
      cause="encoder_layer.arguments_in_wrong_order"),
]
MUTANTS += [
    # -- §3.4: one matrix for the two embeddings and the pre-softmax linear map ------------------------------
    M("model_embeddings_untied", "embeddings", "model",
      "the embeddings and the pre-softmax linear map each with a matrix of their own (a named deviation)",
      ("max_len=5000,\n                 share_embeddings=True)",
       "max_len=5000,\n                 share_embeddings=False)"),
      deviation=True, cause="model.untied_embeddings"),
    # -- masks: a query whose keys are all masked ---------------------------------------------------------------
    M("attention_mask_filled_with_minus_inf", "masks", "attention",
      "masked scores set to float('-inf'), §3.2.3's own word: a query whose keys are all masked gets softmax 0/0 = "
      "NaN, a note on robustness (such a row is a sequence of padding alone)",
      (MASK_FILL, "scores = scores.masked_fill(mask.logical_not(), float('-inf'))"), deviation=True,
      cause="attention.nan_on_fully_masked_row"),
]
MUTANTS += [
    # -- §3.4, §3.5: the model applies its embeddings and positional encodings to the tokens ------------------
    M("model_embeddings_unused", "information_flow", "model",
      "the stacks get the positional encodings of a zero tensor (a debugging stub left in): the tokens' embeddings "
      "are looked up and thrown away",
      (ENCODE, "embedded = self.positional_encoding(torch.zeros_like(self.src_embedding(src)))"),
      (DECODE, "embedded = self.positional_encoding(torch.zeros_like(self.tgt_embedding(tgt)))"),
      cause="model.source_embeddings_unused"),
    M("model_positional_encoding_unused", "information_flow", "model",
      "the model's positional encoding is built and never applied: both stacks get the bare embeddings",
      (ENCODE, "embedded = self.src_embedding(src)"), (DECODE, "embedded = self.tgt_embedding(tgt)"),
      cause="model.source_positions_missing"),
]
MUTANTS += [
    # -- in place: the blocks as the author's model calls them in its own forward pass ---------------------------
    M("ln_over_sequence_axis", "in_place", "layer_norm",
      "mean and variance taken over the sequence axis: each position is normalized with its sequence's statistics",
      (MEAN, MEAN.replace("dim=-1", "dim=1")), (VARIANCE, VARIANCE.replace("dim=-1", "dim=1")),
      cause="layer_norm.normalizes_over_wrong_axis"),
]
BY_NAME = {m.name: m for m in MUTANTS}
if len(BY_NAME) != len(MUTANTS):
    raise ValueError("mutant names must be unique")
BUGS = [m for m in MUTANTS if not m.deviation]
DEVIATIONS = [m for m in MUTANTS if m.deviation]


def reference_source():
    return REFERENCE.read_text()


def without_roles(source):
    """``source`` without its ``CONFORMANCE_ROLES = {...}`` and what follows: code as a student writes it, whose roles
    the checker finds for itself."""
    return source.split("\nCONFORMANCE_ROLES = {")[0]


def apply(mutant, source=None):
    """The reference's source (or ``source``) with the mutant's edits applied in order.

    Raises :class:`StaleMutant` when the ``old`` text of an edit does not occur exactly once."""
    source = reference_source() if source is None else source
    for i, (old, new) in enumerate(mutant.edits):
        count = source.count(old)
        if count != 1:
            raise StaleMutant(f"mutant {mutant.name!r}, edit {i}: the text {old!r} occurs {count} times "
                              f"(exactly once required) in {REFERENCE.relative_to(ROOT)}")
        source = source.replace(old, new)
    return source


def touched_components(mutant):
    """The roles whose code runs an edit of ``mutant``, read from the reference's own code: the top-level classes
    and functions that hold an edit, then every one that names them, transitively (an edit of ``AddAndNorm``
    reaches both layers, both stacks and the model; one of ``scaled_dot_product_attention`` reaches every block
    built on multi-head attention). A fail or an error on any other role is a false finding."""
    source, edited = reference_source(), set()
    for old, new in mutant.edits:
        line = source[:source.index(old)].count("\n") + 1
        edited |= {d.name for d in top_level_definitions(source) if d.lineno <= line <= d.end_lineno}
        source = source.replace(old, new)
    definitions = top_level_definitions(source)
    touched, grew = set(edited), True
    while grew:
        users = {d.name for d in definitions if names_read(d) & touched}
        grew, touched = not users <= touched, touched | users
    return {role for role, obj in ROLE_OBJECTS.items() if obj.__name__ in touched}


def top_level_definitions(source):
    return [n for n in ast.parse(source).body if isinstance(n, (ast.ClassDef, ast.FunctionDef))]


def names_read(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def header(mutant):
    kind = "deviation" if mutant.deviation else "bug"
    # the coding line stops Python from reading a description ("... decoding: no ...") as an encoding declaration
    return (f"# -*- coding: utf-8 -*-\n# Mutant {mutant.name!r} of reference/transformer.py ({kind}; "
            f"family {mutant.family}, component {mutant.component}):\n# {mutant.description}\n")


def write(mutant, directory):
    """Write the mutated reference as ``<directory>/<name>.py`` (stand-alone, defines CONFORMANCE_ROLES)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{mutant.name}.py"
    path.write_text(header(mutant) + apply(mutant))
    return path


def notebook(source):
    """The source as a notebook, one cell per top-level block."""
    cells = [nbformat.v4.new_code_cell(block.strip()) for block in source.split("\n\n\n") if block.strip()]
    return nbformat.writes(nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}))


def write_class(folder, count):
    """A class of ``count`` submissions in ``folder``: the reference then every mutant in turn, every other one a
    notebook (``s07_<name>.ipynb``); returns the notebooks' paths."""
    folder.mkdir(parents=True)
    sources = [("reference", reference_source())] + [(m.name, header(m) + apply(m)) for m in MUTANTS]
    notebooks = []
    for i in range(count):
        name, source = sources[i % len(sources)]
        if i % 2:
            path = folder / f"s{i:02d}_{name}.ipynb"
            path.write_text(notebook(source))
            notebooks.append(path)
        else:
            (folder / f"s{i:02d}_{name}.py").write_text(source)
    return notebooks
