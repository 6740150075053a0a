"""The catalogue of causes: every identifier a verdict may carry, the paper section it is about, and what it means.

A cause is written ``<component>.<what>`` (``multi_head_attention.scale.sqrt_d_model``), ``error.<what>`` for a
crash of the implementation's code, ``adapter.<what>`` where the checker could not call the code as the check needs,
``grading.<what>`` for what grading itself saw. Where a check builds the id per component, the catalogue writes a
placeholder in braces (:data:`PLACEHOLDERS`): ``{component}.disagrees_in_{role}``.

:func:`describe` gives the entry of a concrete id and :func:`require` refuses an id that is not listed: the plugin
calls it where a check's outcome becomes a verdict record, so an id missing here is the checker's own error (one
naming the id), never a verdict on the author. ``python -m conformance causes --markdown`` prints the catalogue
(``docs/causes.md``). This module sits at the bottom of the layout: it imports nothing of the project's."""
import functools
import re
from dataclasses import dataclass

ROLE_NAMES = ("embedding", "positional_encoding", "attention", "multi_head_attention", "feed_forward", "layer_norm",
              "sublayer_connection", "encoder_layer", "decoder_layer", "encoder", "decoder", "generator", "model",
              "padding_mask", "subsequent_mask")
"""The roles of ``conformance.contract.interface.ROLES`` (written again here: the contract sits above this module;
``tests/test_causes.py`` holds the two equal)."""
PARAMETER_VARIANTS = ("projections_without_bias", "final_norm_missing", "extra_final_norm", "untied_embeddings",
                      "embeddings_outside_model", "generator_outside_model", "generator_without_bias",
                      "scalar_layer_norm_gain", "learned_positional_embedding")
"""The readings of a parameter-count difference of ``conformance.checks.test_parameters.known_variants``."""
MISPLACEMENTS = ("norm_missing", "norm_on_sublayer_output", "residual_missing", "norm_on_residual_branch",
                 "norm_twice", "sublayer_output_unused")
"""The broken placements of the residual connection and its norm of ``conformance.checks.test_norm_order.PLACEMENTS``."""
KNOWN_DEVIATIONS = ("pre_norm", "extra_final_norm", "gelu", "unbiased_std", "unbiased_std_eps_outside_root",
                    "input_scaled_by_sqrt_d_model", "timing_signal", "generator_logits", "generator_softmax")
KNOWN_BUGS = ("norm_on_sublayer_output", "residual_missing", "norm_missing", "relu_missing", "relu_on_output",
              "divides_by_variance", "eps_outside_root", "scaled_by_sqrt_d_model", "scaled_by_d_k", "unscaled",
              "heads_merged_without_transpose")
"""The variants of the reference in ``conformance.diagnosis.variants.VARIANTS`` that an output can be recognised as: the
deviations (named variants of the paper) and the bugs."""


def one_or_more(names):
    """(pattern, words) of a placeholder for one or more of ``names`` joined by ``+`` (a reading of several parts)."""
    one = "|".join(map(re.escape, names))
    return rf"(?:{one})(?:\+(?:{one}))*", "one or more of " + ", ".join(f"`{n}`" for n in names) + ", joined by `+`"


PLACEHOLDERS = {
    "component": ("|".join(ROLE_NAMES), "the role checked (`multi_head_attention`, `encoder`, ...)"),
    "role": ("|".join(ROLE_NAMES), "a sub-block of that role, where the difference from the reference lies"),
    "exception": (r"[A-Za-z_]\w*", "the class name of the exception the code raised"),
    "deviations": one_or_more(KNOWN_DEVIATIONS),
    "bugs": one_or_more(KNOWN_BUGS),
    "variants": one_or_more(PARAMETER_VARIANTS),
    "misplacements": one_or_more(MISPLACEMENTS),
}
"""``{name: (regular expression, what it stands for)}`` of the placeholders of an id pattern."""


@dataclass(frozen=True)
class Cause:
    pattern: str
    """The id, or the id with placeholders (:data:`PLACEHOLDERS`) where it is built per component."""
    section: str
    """The paper's section the cause is about ("§3.2.1"); "" when it is about the checker or the code, not the
    paper."""
    meaning: str

    @functools.cached_property
    def regex(self):
        parts = re.split(r"\{(\w+)\}", self.pattern)
        return re.compile("".join(f"(?:{PLACEHOLDERS[p][0]})" if i % 2 else re.escape(p) for i, p in enumerate(parts)))

    @property
    def placeholders(self):
        return len(re.findall(r"\{\w+\}", self.pattern))

    def matches(self, cause_id):
        return self.regex.fullmatch(cause_id) is not None


class UnlistedCause(LookupError):
    """A check gave a cause id the catalogue does not list: the checker's own mistake."""


E = Cause  # (short, so that each entry fits its lines)
CATALOGUE = (
    # -- crashes of the implementation's code (conformance.diagnosis.crashes) ----------------------------------------------
    E("error.super_init_missing", "", "a module assigns sub-modules or parameters before calling "
      "super().__init__()"),
    E("error.super_names_wrong_class", "", "super(Name, self) names a class that does not exist (renamed)"),
    E("error.attribute_never_assigned", "", "a method reads an attribute of self that the class's __init__ never "
      "assigns"),
    E("error.none_used_as_tensor", "", "the code used None where a tensor is expected (a function without a "
      "return)"),
    E("error.undefined_name", "", "the code uses a name that is defined nowhere it can see"),
    E("error.forward_nested_in_init", "", "forward is indented into __init__, so the class has no forward method"),
    E("error.forward_missing", "", "a module is called but its class defines no forward method"),
    E("error.arguments_in_wrong_order", "", "a crash from arguments passed in the wrong order (a rate where a "
      "module goes)"),
    E("error.call_signature_mismatch", "", "a call passes arguments the called function's signature does not take"),
    E("error.unpacking_mismatch", "", "a call returns a different number of values than its caller unpacks"),
    E("error.view_of_non_contiguous", "", "view() of a transposed tensor that is not contiguous"),
    E("error.shape_mismatch", "", "tensors of incompatible shapes meet (a dimension mixed up)"),
    E("error.cell_does_not_compile", "", "the role is defined in a notebook cell Python rejects, so it does not "
      "exist"),
    E("error.{exception}", "", "the code raised this exception for a reason none of the other error causes names"),
    # -- where the checker could not call the code as a check needs --------------------------------------------
    E("role.missing", "", "the implementation has nothing playing this role, so its checks do not run"),
    E("skipped", "", "the check was skipped (pytest.skip) and gives no verdict"),
    E("adapter.dropout_rate_not_taken", "§5.4", "the block's constructor takes no dropout rate, so its dropout "
      "cannot be judged here"),
    E("adapter.head_count_not_taken", "§3.2.2", "the block's constructor takes no head count, so the drawn "
      "configuration cannot be given to it"),
    E("adapter.import_failed", "", "a name the code uses was to come from an import that failed here (a package "
      "not installed)"),
    E("adapter.scaling_caller_not_run", "§3.4", "the embedding block returns unscaled rows and code the checker "
      "could not run multiplies a lookup by a square root: where the sqrt(d_model) of §3.4 is applied is not "
      "established"),
    E("adapter.takes_token_ids", "§3.4", "the block embeds token ids itself, where the canonical call gives it "
      "vectors"),
    E("adapter.check_crashed", "", "the checker's own code failed, running none of the author's (its internal "
      "error, or an output of a form it did not expect)"),
    E("adapter.vocabulary_not_taken", "§3.4", "token ids of the vocabularies the checker configured overflow an "
      "embedding table the code sizes otherwise (a configuration of its own, or one vocabulary for both sides)"),
    E("adapter.sizes_fixed_by_the_code", "§6.2", "the block crashed at the checker's small sizes but runs at the "
      "paper's base widths, or builds at widths of its own whatever it is given: its code fixes a size of its own (a "
      "literal 512, a table as long as d_model, a configuration the checker cannot reach)"),
    E("adapter.needs_setup_call", "", "the code expects a setup method of its own called first, which the checker "
      "does not know"),
    E("adapter.configuration_not_supported", "", "the block builds on the configuration discovery tried but not on "
      "the drawn one"),
    E("adapter.config_field_not_planned", "", "the code used a field of its configuration object that the checker "
      "cannot set from the sizes it checks (a scale or a flag of the author's configuration), left None"),
    E("adapter.precondition_not_met", "", "the checker's call broke a precondition the author's code states (an "
      "assert on its arguments, or a raise under an if testing only them) or a torch operation sets (the rank of "
      "the arguments as given, in the function the checker called)"),
    E("adapter.sequence_given_a_number", "", "the code indexes or iterates an argument (a list of layer widths) to "
      "which the checker gave one number: it is not built or called as its author does"),
    E("adapter.call_not_as_author", "", "the block crashed or failed under the checker's call while the author's "
      "own enclosing block, built of the author's sub-blocks, calls it without a crash, or only with arguments of "
      "other forms (a mask of another layout, a function for a tensor), or its code takes a tensor where the "
      "checker's call gives it a function, an argument it never calls nor names for one (a two-tensor Add & Norm "
      "given the sub-layer): the checker does not call it as its author does"),
    E("adapter.mask_not_expressible_as_lengths", "§3.2.3", "an attention takes its mask as sequence lengths, and the "
      "check's mask hides keys from some queries only (a causal triangle): the code takes that part otherwise"),
    E("adapter.not_read_in_place", "", "the sub-block's calls recorded inside the author's forward pass fit no form "
      "the check in place reads (projections packed otherwise, no softmax seen, no single sub-layer), so it gives no "
      "verdict there"),
    E("adapter.model_prepends_start_token", "§3.1", "the model puts a start token before the target itself, so it "
      "reads one token more than the reference and is not compared with the reference's numbers"),
    E("adapter.global_set_by_main", "", "the code reads a global that the author's main block assigns, and running "
      "that block did not get so far: the checker cannot set it"),
    E("adapter.pad_idx_not_taken", "§3.2.3", "the padding-mask helper takes no pad index, so the checker's pad index "
      "has no effect on it"),
    E("adapter.mask_not_expressible_as_key_vectors", "§3.2.3", "an attention takes its mask as (batch, Lk) "
      "key-padding vectors and has no causal switch, and the check's mask hides keys from some queries only (a causal "
      "triangle): the code hides those otherwise, where the checker cannot see"),
    E("adapter.padding_not_expressible_as_lengths", "§3.2.3", "the model takes padding as sequence lengths, which "
      "cannot express the padding this check needs (padding inside a sequence)"),
    E("adapter.mask_parameter_not_fed", "§3.2.3", "the block leaks, and has mask parameters to which the checker "
      "could not tell how to give its masks: not a block without a mask"),
    E("adapter.graft_does_not_fit", "", "a reference block put in place of a broken one is called by the author's "
      "code in another way"),
    E("adapter.needs_accelerator", "", "the code puts its tensors on an accelerator itself (.cuda(), "
      "device='cuda'), which this run does not use or this machine lacks: run the checks with --device=cuda on a "
      "machine with one"),
    E("device.tensor_on_wrong_device", "", "a tensor is left on another device than the module's inputs"),
    E("grading.check_did_not_report", "", "a check left no verdict in the graded run (cut short or tampered with)"),
    E("grading.submission_process_ended", "", "the submission's process stopped answering the checks"),
    E("grading.unreadable_answer", "", "the submission's process answered with something that is not a valid "
      "message"),
    # -- what a role is and returns (harness, shapes) ----------------------------------------------------------
    E("{component}.not_a_module", "§3", "the builder of a module role returned something that is not a torch "
      "module"),
    E("{component}.forward_returns_none", "§3.1", "forward returns None instead of the block's output"),
    E("{component}.forward_returns_tuple", "§3.1", "forward returns a tuple where the block's output tensor is "
      "expected"),
    E("{component}.output_not_tensor", "§3.1", "the block's output is not a tensor"),
    E("{component}.shape", "§3", "the output's shape is not the one the paper's dimensions give"),
    E("{component}.dtype", "§3", "the output's dtype is not the inputs' floating type"),
    # -- reading the code (conformance.checks.test_construction) ------------------------------------------------------
    E("{component}.arguments_in_wrong_order", "§3", "a call in the code passes an argument to a parameter meant "
      "for another (read from the source)"),
    E("{component}.forward_returns_nothing", "§3.1", "the source's forward has no return statement"),
    E("{component}.attribute_never_assigned", "§3", "the source reads an attribute nothing assigns"),
    E("{component}.sub_block_call_misfits", "§3.2.2", "a sub-block is built or called with arguments its __init__ "
      "or forward cannot take"),
    E("{component}.name_never_defined", "§3", "the source reads a name nothing defines"),
    # -- behaviour against the reference (conformance.checks.test_behaviour) ------------------------------------------
    E("{component}.eval_not_deterministic", "§5.4", "in eval mode the output still changes between calls (dropout "
      "left on)"),
    E("{component}.dropout_missing", "§5.4", "training mode gives the same output as eval mode: no dropout where "
      "the paper has it"),
    E("{component}.attention_dropout", "§5.4", "dropout on the attention weights, a common variant the paper does "
      "not describe"),
    E("{component}.batch_dependence", "§3", "a sample's output depends on the other samples of its batch"),
    E("{component}.{deviations}", "§3", "the outputs are the reference's changed by named variants of the paper "
      "(pre-norm, GELU, ...)"),
    E("{component}.{bugs}", "§3", "the outputs are the reference's changed by known mistakes (no residual, no "
      "ReLU, a wrong scale, ...)"),
    E("{component}.disagrees_with_reference", "§3", "the outputs differ from the reference given the same weights"),
    E("{component}.disagrees_in_{role}", "§3", "the outputs differ from the reference, and the difference lies in "
      "this sub-block"),
    E("{component}.reference_mapping_unconfirmed", "§3", "a sub-block swap reproduces the candidate's outputs, "
      "but the weight mapping it rests on cannot be confirmed"),
    E("{component}.reference_weights_unmappable", "§3", "the candidate's weights cannot be mapped onto the "
      "reference, so outputs are not compared"),
    E("{component}.in_place_disagrees", "§3.2.2", "inside the author's own forward pass, the heads' outputs the "
      "output projection receives differ from softmax(Q K^T / sqrt(d_k)) V of the block's own projections"),
    E("{component}.heads_merged_without_transpose", "§3.2.2", "the heads are concatenated by a view without "
      "moving the head axis back first"),
    E("{component}.dropout_rate_ignored", "§5.4", "the given dropout rate does not set how much is dropped"),
    E("{component}.sublayer_dropout_missing", "§5.4", "a sub-layer's output reaches the residual sum without "
      "dropout"),
    E("{component}.dropout_on_residual_sum", "§5.4", "dropout on the residual sum instead of on the sub-layer "
      "output before it"),
    E("{component}.inputs_modified_in_place", "§3", "the block changes its input tensors in place"),
    # -- embeddings and generator (conformance.checks.test_embeddings) ------------------------------------------------
    E("{component}.table_transposed", "§3.4", "the embedding matrix is held as (d_model, vocab) and read across"),
    E("{component}.table_unrecognised", "§3.4", "no single (vocab, d_model) embedding matrix is found to check "
      "against"),
    E("{component}.not_a_scaled_lookup", "§3.4", "the output is no constant multiple of the looked-up rows"),
    E("{component}.not_scaled", "§3.4", "the embeddings are not multiplied by sqrt(d_model)"),
    E("{component}.scaled_by_its_caller", "§3.4", "the block returns unscaled rows and the model multiplies them by "
      "sqrt(d_model) after it, on their way to the stacks: §3.4 held by the model, the scaling placed outside the "
      "embedding block"),
    E("{component}.divided_by_sqrt_d_model", "§3.4", "the embeddings are divided by sqrt(d_model) instead of "
      "multiplied"),
    E("{component}.scaled_by_d_model", "§3.4", "the embeddings are multiplied by d_model instead of sqrt(d_model)"),
    E("{component}.scale_wrong", "§3.4", "the embeddings are multiplied by a constant other than sqrt(d_model)"),
    E("{component}.softmax_wrong_axis", "§3.2.1", "the softmax normalizes over an axis other than the last (keys, "
      "or the vocabulary)"),
    E("{component}.softmax_output", "§3.4", "the generator returns probabilities, leaving the log to the loss"),
    E("{component}.logits_output", "§3.4", "the generator returns logits, leaving the (log-)softmax to the loss"),
    E("{component}.not_log_probabilities", "§3.4", "the generator's output is neither log-probabilities nor a known "
      "form of them"),
    E("{component}.shared_matrix_not_found", "§3.4", "no embedding and pre-softmax map of the target vocabulary "
      "are found to check sharing"),
    E("{component}.untied_embeddings", "§3.4", "the embeddings and the pre-softmax map do not share one matrix"),
    # -- information flow through the model (conformance.checks.test_information_flow) --------------------------------
    E("{component}.source_embeddings_unused", "§3.4", "the source embedding table has no effect on the output"),
    E("{component}.source_ignored", "§3.1", "the output does not depend on the source tokens"),
    E("{component}.target_embeddings_unused", "§3.4", "the target embedding table has no effect on the output"),
    E("{component}.target_tokens_ignored", "§3.1", "the output does not depend on the target tokens"),
    E("{component}.target_positions_missing", "§3.5", "the decoder's inputs carry no positional encoding"),
    E("{component}.source_positions_missing", "§3.5", "the encoder's inputs carry no positional encoding"),
    E("{component}.embedding_lookup_not_seen", "§3.4", "no nn.Embedding lookup of the tokens is seen, so the "
      "scale cannot be measured"),
    E("{component}.embedding_scale_on_shared_projection", "§3.4", "the shared matrix is scaled at the "
      "pre-softmax map rather than at the embeddings, an equivalent variant"),
    E("{component}.embedding_not_scaled", "§3.4", "the model's embeddings are not multiplied by sqrt(d_model)"),
    E("{component}.embedding_scale_wrong", "§3.4", "the model multiplies its embeddings by a wrong constant"),
    E("{component}.cross_attention_over_own_input", "§3.2.3", "the encoder-decoder attention attends over the "
      "decoder's own states instead of the encoder output"),
    E("{component}.memory_ignored", "§3.2.3", "the decoder's output does not depend on the encoder output"),
    E("{component}.future_visible_in_eval_too", "§3.2.3", "a target position sees later positions in eval mode "
      "as well as in training"),
    E("{component}.future_visible_in_training", "§3.2.3", "a target position sees later positions in training"),
    # -- layer normalization (conformance.checks.test_layer_norm) -----------------------------------------------------
    E("layer_norm.normalizes_over_wrong_axis", "§3.1", "the statistics are taken over an axis other than the "
      "features"),
    E("layer_norm.mean_not_subtracted", "§3.1", "the output is scaled by the spread but the mean is not "
      "subtracted"),
    E("layer_norm.not_normalized", "§3.1", "the output fits no (x - mean) / f(var) form"),
    E("layer_norm.divides_by_variance", "§3.1", "divides by the variance instead of its square root"),
    E("layer_norm.eps_is_d_model", "§3.1", "eps equals d_model: the d_model argument was bound to eps"),
    E("layer_norm.eps_too_large", "§3.1", "eps is far larger than a small stabilizer"),
    E("layer_norm.small_variance_not_normalized", "§3.1", "inputs of tiny variance are not normalized like (x - "
      "mean) / f(var)"),
    E("layer_norm.unbiased_std_plus_eps", "§3.1", "(x - mean) / (unbiased std + eps), the Annotated Transformer's "
      "form"),
    E("layer_norm.eps_outside_sqrt", "§3.1", "eps is added to the standard deviation instead of inside the root"),
    E("layer_norm.eps_wrong", "§3.1", "the small-variance outputs fit no single eps in either place"),
    E("layer_norm.unbiased_variance", "§3.1", "the variance is divided by d_model - 1 instead of d_model"),
    E("layer_norm.not_shift_invariant", "§3.1", "adding a constant to a position's features changes the output"),
    E("layer_norm.not_scale_invariant", "§3.1", "scaling a position's features changes the output"),
    E("layer_norm.scalar_gain", "§3.1", "one scalar gain and bias instead of one per feature"),
    E("layer_norm.no_gain_or_bias", "§3.1", "no learned gain or bias at all"),
    E("layer_norm.gain_and_bias_not_found", "§3.1", "no feature-sized vectors to serve as gain and bias"),
    E("layer_norm.no_bias", "§3.1", "a learned gain but no learned bias"),
    E("layer_norm.gain_and_bias_not_applied", "§3.1", "changing the gain and bias does not change the output"),
    E("layer_norm.gain_and_bias_swapped", "§3.1", "the gain is added and the bias multiplied"),
    E("layer_norm.disagrees_with_functional", "§3.1", "the outputs differ from torch's layer_norm with the same gain "
      "and bias"),
    # -- masks (conformance.checks.test_masks) ------------------------------------------------------------------------
    E("{component}.mask_inverted", "§3.2.3", "the mask is applied with True meaning blocked instead of may attend"),
    E("{component}.mask_applied_after_softmax", "§3.2.3", "masked positions are removed after the softmax, so the "
      "weights no longer sum to 1"),
    E("{component}.mask_ignored", "§3.2.3", "the mask given has no effect on the output"),
    E("{component}.masked_keys_visible", "§3.2.3", "keys the mask hides still affect the output"),
    E("{component}.future_visible", "§3.2.3", "a position attends to later positions despite the subsequent mask"),
    E("{component}.mask_not_accepted", "§3.2.3", "the block takes no mask argument, so nothing can hide positions"),
    E("{component}.softmax_not_observed", "§3.2.1", "no softmax over the scores is seen, so the weights cannot be "
      "read"),
    E("{component}.weights_layout_unrecognised", "§3.2.1", "the softmax output has a shape the check cannot read "
      "as (batch, heads, queries, keys)"),
    E("{component}.masked_scores_set_to_zero", "§3.2.3", "masked scores are set to 0 instead of -inf, so masked "
      "keys keep weight"),
    E("{component}.masked_weights_nonzero", "§3.2.3", "masked keys get nonzero attention weights"),
    E("{component}.nan_on_fully_masked_row", "§3.2.3", "a query whose keys are all masked yields NaN"),
    E("{component}.masks_swapped", "§3.2.3", "the source mask goes to the self-attention and the subsequent mask to "
      "the cross-attention"),
    E("{component}.masks_not_told_apart", "§3.2.3", "a leak is seen but the check cannot tell which mask went "
      "where"),
    E("{component}.not_a_tensor", "§3.2.3", "the mask function returns something that is not a tensor"),
    E("{component}.additive_not_boolean", "§3.2.3", "the mask is additive (0 / -inf) where the contract asks for "
      "a boolean"),
    E("{component}.not_boolean", "§3.2.3", "the mask holds values other than true and false"),
    E("padding_mask.inverted", "§3.2.3", "the padding mask is True at the padded keys instead of the real ones"),
    E("padding_mask.masks_queries", "§3.2.3", "the padding mask hides padded queries instead of padded keys"),
    E("padding_mask.pad_idx_ignored", "§3.2.3", "the padding mask ignores the given padding index"),
    E("padding_mask.wrong", "§3.2.3", "the padding mask is wrong in a way none of the named mistakes describes"),
    E("subsequent_mask.inverted", "§3.2.3", "the subsequent mask is True at the future positions only (blocked "
      "instead of allowed)"),
    E("subsequent_mask.triu", "§3.2.3", "the subsequent mask is upper-triangular: each position sees itself and "
      "the future"),
    E("subsequent_mask.excludes_diagonal", "§3.2.3", "the subsequent mask keeps a position from attending to "
      "itself"),
    E("subsequent_mask.includes_next_position", "§3.2.3", "the subsequent mask lets each position see the next "
      "one too"),
    E("subsequent_mask.wrong", "§3.2.3", "the subsequent mask differs from the lower triangle in no named way"),
    E("subsequent_mask.padding_masks_queries", "§3.2.3", "the target mask hides padded queries instead of padded "
      "keys"),
    E("subsequent_mask.target_mask_wrong", "§3.2.3", "the target mask is not the padding mask combined with the "
      "lower triangle"),
    # -- the order of norm and residual (conformance.checks.test_norm_order) ------------------------------------------
    E("{component}.norm_order.post_norm", "§3.1", "post-norm LayerNorm(x + Sublayer(x)), a deviation under the "
      "'practice' contract"),
    E("{component}.norm_order.pre_norm", "§3.1", "pre-norm x + Sublayer(LayerNorm(x)) instead of the paper's "
      "post-norm"),
    E("{component}.norm_order.{misplacements}", "§3.1", "the residual connection or its norm is placed wrongly "
      "(missing, doubled, on the wrong branch)"),
    E("{component}.norm_order.mixed_placements", "§3.1", "the sub-layers of one layer place their norms "
      "differently"),
    E("{component}.norm_order.unrecognised", "§3.1", "the output matches none of the placements probed"),
    E("{component}.norm_order.undecided", "§3.1", "the probe cannot tell the accepted placement from another"),
    E("{component}.norm_order.sub_layer_output_not_seen", "§3.1", "every sub-layer runs, but its output reaches "
      "the layer in a way the probe does not model"),
    E("{component}.norm_order.no_norm_module", "§3.1", "no LayerNorm module is found in the layer to probe with"),
    E("{component}.norm_order.layers_not_found", "§3.1", "the stack's layers are not found, so its final operation "
      "cannot be probed"),
    E("{component}.norm_order.layers_not_called", "§3.1", "no layer of the stack is called as a module"),
    E("{component}.norm_order.final_operation_unknown", "§3.1", "the stack's output is neither its last layer's "
      "output nor a norm of it"),
    E("{component}.norm_order.post_norm_without_final_norm", "§3.1", "a post-norm stack with no extra norm at "
      "its end, as the paper has it (under 'practice')"),
    E("{component}.norm_order.final_norm_missing", "§3.1", "a pre-norm stack without the final LayerNorm it "
      "needs"),
    E("{component}.norm_order.extra_final_norm", "§3.1", "a post-norm stack with an extra LayerNorm at its end"),
    E("{component}.layer_norm_eps_wrong", "§3.1", "a LayerNorm inside the block uses an eps that is not small"),
    E("{component}.layer_norm_axis_wrong", "§3.1", "a LayerNorm inside the block normalizes over the wrong axis"),
    # -- parameters and stacking (conformance.checks.test_parameters) -------------------------------------------------
    E("{component}.parameters.count", "§3", "the parameter count fits no known reading of the paper's sizes"),
    E("{component}.parameters.{variants}", "§3", "the parameter count is read as one or more known variants "
      "(untied embeddings, an extra final norm, ...)"),
    E("{component}.parameters.no_gradient", "§3", "a registered parameter gets no gradient: the forward pass "
      "skips it"),
    E("{component}.parameters.zero_gradient", "§3", "a weight matrix's gradient is all zero"),
    E("{component}.parameters.nonfinite_gradient", "§3", "a parameter's gradient is NaN or infinite"),
    E("{component}.layers_share_weights", "§3.1", "the N layers of a stack are one module or share weights"),
    E("{component}.layers_not_found", "§3.1", "the stack's N layers are not found"),
    E("{component}.tuple_passed_on", "§3.1", "a layer returns a tuple and the stack hands the whole tuple to the "
      "next"),
    E("{component}.layer_outputs_discarded", "§3.1", "the stack feeds every layer the stack's input, discarding "
      "the previous layer's output"),
    E("{component}.layers_not_chained", "§3.1", "the layers are not applied one after another"),
    E("{component}.layer_inputs_transformed", "§3.1", "what passes between two layers is changed on the way"),
    # -- positional encoding (conformance.checks.test_positional_encoding) --------------------------------------------
    E("positional_encoding.shape", "§3.5", "the output's shape is not the input's"),
    E("positional_encoding.sin_cos_swapped", "§3.5", "cos in the even columns and sin in the odd ones"),
    E("positional_encoding.multiplies_by_frequency", "§3.5", "pos times 10000^(2i/d_model) instead of divided by it"),
    E("positional_encoding.exponent_uses_i_not_2i", "§3.5", "the pair index i instead of 2i in the exponent"),
    E("positional_encoding.exponent_uses_column_index", "§3.5", "the column index 2i doubled again in the "
      "exponent"),
    E("positional_encoding.cos_overwrites_sin", "§3.5", "cos written over the sines, the odd columns left zero"),
    E("positional_encoding.all_columns_cos", "§3.5", "cos in every column"),
    E("positional_encoding.all_columns_sin", "§3.5", "sin in every column"),
    E("positional_encoding.positions_start_at_1", "§3.5", "positions counted from 1 instead of 0"),
    E("positional_encoding.concatenated_sin_cos", "§3.5", "all sines followed by all cosines instead of "
      "interleaved, tensor2tensor's layout"),
    E("positional_encoding.timing_signal", "§3.5", "tensor2tensor's timing signal: concatenated, with slightly "
      "different frequencies"),
    E("positional_encoding.zero_on_zero_input", "§3.5", "a zero input gives a zero output: no encoding is added"),
    E("positional_encoding.table_scaled", "§3.5", "the sinusoid table multiplied by a constant"),
    E("positional_encoding.wrong_base", "§3.5", "the frequencies use a base other than 10000"),
    E("positional_encoding.values", "§3.5", "the table's values are not the paper's sinusoids in no named way"),
    E("positional_encoding.depends_on_batch_index", "§3.5", "sequences of one batch get different encodings"),
    E("positional_encoding.sliced_by_batch", "§3.5", "the table is sliced by the batch size instead of the "
      "sequence length"),
    E("positional_encoding.not_sliced", "§3.5", "the whole max_len table is added whatever the input's length"),
    E("positional_encoding.wrong_rows", "§3.5", "a shorter input does not get the first rows of the table"),
    E("positional_encoding.table_is_trainable", "§3.5", "the sinusoid table is a trainable parameter"),
    E("positional_encoding.table_not_a_buffer", "§3.5", "the table is a plain tensor attribute, not a registered "
      "buffer"),
    E("positional_encoding.multiplied_with_input", "§3.5", "the encoding multiplies the input instead of being "
      "added"),
    E("positional_encoding.input_scaled_by_sqrt_d_model", "§3.5", "the block multiplies its input by "
      "sqrt(d_model), which belongs to the embedding"),
    E("positional_encoding.input_scaled", "§3.5", "the block multiplies its input by a constant before adding"),
    E("positional_encoding.input_dropped", "§3.5", "the output is the encoding alone, without the input"),
    E("positional_encoding.not_added", "§3.5", "the output is not input plus encoding in any named way"),
    E("positional_encoding.dropout_missing", "§5.4", "no dropout on the sum of input and encoding"),
    E("positional_encoding.dropout_before_adding", "§5.4", "dropout on the input before the encoding is added"),
    E("positional_encoding.dropout_on_table_only", "§5.4", "dropout on the encoding table alone, not on the sum"),
    E("positional_encoding.dropout_rate_ignored", "§5.4", "the given dropout rate does not set how much is "
      "dropped"),
    E("positional_encoding.dropout_wrong", "§5.4", "dropped entries are neither 0 nor the rescaled sum"),
    E("{component}.positions_not_dropped_out", "§5.4", "the model applies no dropout to the sums of embeddings "
      "and positional encodings"),
    # -- attention scores and softmax (conformance.checks.test_softmax) -----------------------------------------------
    E("{component}.self_attention_only", "§3.2.2", "the block takes no separate keys and values, and no decoder "
      "of the submission does the encoder-decoder attention another way, so it can only attend to its own input"),
    E("{component}.projections_unrecognised", "§3.2.2", "the projections' layout is not recognised, so scores "
      "cannot be recomputed"),
    E("{component}.scores_wrong_shape", "§3.2.1", "the scores are not (batch, heads, queries, keys)"),
    E("{component}.query_key_swapped", "§3.2.1", "the scores are K Q^T: keys and queries exchanged"),
    E("{component}.weights_not_normalized", "§3.2.1", "the attention weights do not sum to 1 over the keys"),
    E("{component}.heads_split_without_transpose", "§3.2.2", "the heads are split by a view without moving the "
      "head axis"),
    E("{component}.scores_not_proportional_to_qk", "§3.2.1", "the scores are no constant multiple of Q K^T"),
    E("{component}.scale.sqrt_d_model", "§3.2.1", "the scores are divided by sqrt(d_model) instead of sqrt(d_k)"),
    E("{component}.scale.d_k", "§3.2.1", "the scores are divided by d_k instead of sqrt(d_k)"),
    E("{component}.scale.d_model", "§3.2.1", "the scores are divided by d_model instead of sqrt(d_k)"),
    E("{component}.scale.unscaled", "§3.2.1", "the scores are not scaled at all"),
    E("{component}.scale.multiplied_by_sqrt_d_k", "§3.2.1", "the scores are multiplied by sqrt(d_k) instead of "
      "divided"),
    E("{component}.scale.scaled_twice", "§3.2.1", "the scores are divided by sqrt(d_k) and again by "
      "sqrt(d_model)"),
    E("{component}.scale.sqrt_key_length", "§3.2.1", "the scores are divided by the square root of the number of "
      "keys"),
    E("{component}.scale.wrong", "§3.2.1", "the scores are scaled by a factor none of the named mistakes gives"),
    E("{component}.attention_scale_wrong", "§3.2.1", "attention inside the block scales its scores wrongly"),
)
del E


def describe(cause_id):
    """The :class:`Cause` whose pattern ``cause_id`` matches, the most specific one (fewest placeholders) first;
    None when no entry matches."""
    found = [entry for entry in CATALOGUE if entry.matches(cause_id)]
    return min(found, key=lambda entry: entry.placeholders, default=None)


def is_listed(cause_id):
    return describe(cause_id) is not None


def require(cause_id):
    """``cause_id``'s entry; :class:`UnlistedCause` naming it when the catalogue does not list it."""
    entry = describe(cause_id)
    if entry is None:
        raise UnlistedCause(f"the checker gave the cause {cause_id!r}, which conformance/diagnosis/causes.py does not list: "
                            "add it to the catalogue (a mistake of the checker, not of the implementation)")
    return entry


def markdown_text(text):
    """``text`` with the characters markdown would read as markup escaped."""
    return re.sub(r"([_*<|])", r"\\\1", text)


def markdown():
    """The catalogue as a markdown table: id, section, meaning."""
    rows = ["| Cause | Section | Meaning |", "|---|---|---|"]
    rows += [f"| `{entry.pattern}` | {entry.section or '—'} | {markdown_text(entry.meaning)} |"
             for entry in CATALOGUE]
    placeholders = [f"- `{{{name}}}`: {words}" for name, (_, words) in PLACEHOLDERS.items()]
    return "\n".join(["# Causes", "", "Every cause id a verdict may carry (`conformance/diagnosis/causes.py`; regenerate with "
                      "`python -m conformance causes --markdown > docs/causes.md`). A part in braces stands for:",
                      "", *placeholders, "", *rows]) + "\n"
