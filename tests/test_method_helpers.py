"""Roles written otherwise (reading 2026-11-26b, R4, R6, R8): the masks as methods of the model (the subsequent
mask under a name of its own, ``create_autoregressive_mask``, beside a padding-mask method whose name is a near miss
of the subsequent mask's, ``make_pad_mask``, never taken for it), both masks made by one helper, and a multi-head
block under a name the checker does not know, found by what it does."""
from tests import mutants
from tests.suite import run_on_source, run_suite

MASK_METHODS = '''    def make_pad_mask(self, tokens, pad=0):
        """(batch, 1, L): True where the key is a real token (§3.2.3)."""
        return (tokens != pad)[..., None, :]

    def create_autoregressive_mask(self, tokens):
        """(1, L, L): True where the key is not later than the query (§3.2.3)."""
        positions = torch.arange(tokens.size(1), device=tokens.device)
        return (positions[None, :] <= positions[:, None])[None]

'''


def methods_model(masks=MASK_METHODS):
    """The reference as an author writes it: no role table, no mask functions, the masks methods of its model."""
    source = mutants.reference_source().split("\nCONFORMANCE_ROLES = {")[0]
    start, end = source.index("# == Masks"), source.index("# == Parameter counts")
    source = source[:start] + source[end:]
    encode = source.index("    def encode(self")
    return source[:encode] + masks + source[encode:]


def test_mask_methods_are_bound_by_what_their_names_say_and_a_wrong_triangle_is_named(tmp_path):
    correct = tmp_path / "methods.py"
    correct.write_text(methods_model())
    code, output, report = run_suite(f"--impl={correct}", "-m", "subsequent_mask or padding_mask", tmp_path=tmp_path)
    masks = [c for c in report["checks"] if c["component"] in ("subsequent_mask", "padding_mask")]
    assert {c["component"] for c in masks if c["verdict"] == "pass"} == {"subsequent_mask", "padding_mask"}, output
    assert not [c for c in masks if c["verdict"] in ("fail", "error")], output
    assert "subsequent_mask: Transformer.create_autoregressive_mask" in output or any(
        "create_autoregressive_mask" in note for note in report.get("notes", [])), output
    buggy = tmp_path / "methods_buggy.py"
    buggy.write_text(methods_model(MASK_METHODS.replace("<= positions[:, None]", "<= positions[:, None] + 1")))
    code, output, report = run_suite(f"--impl={buggy}", "-m", "subsequent_mask", tmp_path=tmp_path)
    assert "subsequent_mask.includes_next_position" in {c["cause"] for c in report["checks"]
                                                         if c["verdict"] == "fail"}, output


PAIR_HELPER = '''

def create_masks(src_batch, tgt_batch, padding_idx):
    """Both masks at once (§3.2.3): the source's padding (batch, 1, Ls) and the target's padding combined with its
    lower triangle (batch, Lt, Lt); True where a key may be attended."""
    src_mask = (src_batch != padding_idx)[:, None, :]
    lower = torch.tril(torch.ones(tgt_batch.size(1), tgt_batch.size(1), dtype=torch.bool, device=tgt_batch.device))
    return src_mask, (tgt_batch != padding_idx)[:, None, :] & lower
'''


def test_one_helper_making_both_masks_plays_both_mask_roles_and_a_wrong_triangle_is_named(tmp_path):
    correct = tmp_path / "pair.py"
    correct.write_text(methods_model(masks="") + PAIR_HELPER)
    code, output, report = run_suite(f"--impl={correct}", "-m", "subsequent_mask or padding_mask", tmp_path=tmp_path)
    masks = [c for c in report["checks"] if c["component"] in ("subsequent_mask", "padding_mask")]
    assert {c["component"] for c in masks if c["verdict"] == "pass"} == {"subsequent_mask", "padding_mask"}, output
    assert not [c for c in masks if c["verdict"] in ("fail", "error")], output
    buggy = tmp_path / "pair_buggy.py"
    buggy.write_text(methods_model(masks="") + PAIR_HELPER.replace("torch.tril(", "torch.triu("))
    code, output, report = run_suite(f"--impl={buggy}", "-m", "subsequent_mask", tmp_path=tmp_path)
    assert "subsequent_mask.triu" in {c["cause"] for c in report["checks"] if c["verdict"] == "fail"}, output


def unnamed_attention(source):
    """``source`` as an author writes it whose multi-head block is called ``MultiHead`` and held as ``multiHead``
    and ``maskedMultiHead``: neither name is one the checker knows for the role."""
    source = source.split("\nCONFORMANCE_ROLES = {")[0]
    for old, new in (("MultiHeadAttention", "MultiHead"), ("self.self_attention", "self.maskedMultiHead"),
                     ("self.cross_attention", "self.multiHead")):
        source = source.replace(old, new)
    return source


def test_a_multi_head_block_named_otherwise_is_found_by_what_it_does_and_its_bug_named(tmp_path):
    correct = tmp_path / "unnamed.py"
    correct.write_text(unnamed_attention(mutants.reference_source()))
    code, output, report = run_suite(f"--impl={correct}", "-m", "multi_head_attention", tmp_path=tmp_path)
    mha = [c for c in report["checks"] if c["component"] == "multi_head_attention"]
    assert sum(c["verdict"] == "pass" for c in mha) >= 5 and not [
        c for c in mha if c["verdict"] in ("fail", "error")], output
    planted = mutants.BY_NAME["mha_mask_not_passed"]
    buggy = tmp_path / "unnamed_buggy.py"
    buggy.write_text(unnamed_attention(mutants.apply(planted)))
    code, output, report = run_suite(f"--impl={buggy}", "-m", "multi_head_attention", tmp_path=tmp_path)
    assert planted.cause in {c["cause"] for c in report["checks"] if c["verdict"] == "fail"}, output


TARGET_PADDING_METHOD = '''    def make_tgt_pad_mask(self, tokens, pad=0):
        """(batch, 1, L): True where the target key is a real token; the model's causal part is made elsewhere."""
        return (tokens != pad)[..., None, :]

'''


def test_a_target_padding_method_is_never_taken_for_the_subsequent_mask(tmp_path):
    """``make_tgt_pad_mask`` is a near miss of ``make_tgt_mask`` (a subsequent-mask name), but says padding and
    nothing of the future (§3.2.3): it does not play the subsequent mask, so no triangle is demanded of it."""
    path = tmp_path / "pad_method.py"
    path.write_text(methods_model(TARGET_PADDING_METHOD))
    code, output, report = run_suite(f"--impl={path}", "-m", "subsequent_mask", tmp_path=tmp_path)
    assert not any("make_tgt_pad_mask" in note for note in report.get("notes", [])
                   if note.startswith("subsequent_mask")), output
    assert not [c for c in report["checks"] if c["verdict"] in ("fail", "error")], output


SWITCHED_ATTENTION = '''import math
import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    """Multi-head attention over one sequence (self-attention), or the encoder output when given; its causal mask
    switched on by its constructor (the decoder's)."""

    def __init__(self, d_model, n_head, p=0.1, masking=False):
        super().__init__()
        self.d_model, self.n_head, self.masking = d_model, n_head, masking
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(p)

    def scaled_dot_product_attention(self, Q, K, V):
        scores = Q @ K.transpose(-1, -2) / math.sqrt(K.size(-1))
        if self.masking:
            later = torch.ones(scores.size(-2), scores.size(-1), device=scores.device).triu(1).bool()
            scores = scores.masked_fill(later, float("-inf"))
        return self.dropout(F.softmax(scores, dim=-1)) @ V

    def forward(self, x, memory=None):
        memory = x if memory is None else memory
        b, d_k = x.size(0), self.d_model // self.n_head
        q, k, v = (w(t).view(b, -1, self.n_head, d_k).transpose(1, 2)
                   for w, t in ((self.wq, x), (self.wk, memory), (self.wv, memory)))
        heads = self.scaled_dot_product_attention(q, k, v)
        return self.wo(heads.transpose(1, 2).reshape(b, -1, self.d_model))


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, p=0.1):
        super().__init__()
        self.w1, self.w2, self.dropout = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.Dropout(p)

    def forward(self, x):
        return self.w2(self.dropout(torch.relu(self.w1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_head, d_ff, p=0.1):
        super().__init__()
        self.attention, self.ffn = MultiHeadAttention(d_model, n_head, p), FeedForward(d_model, d_ff, p)
        self.norm1, self.norm2, self.dropout = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.Dropout(p)

    def forward(self, x):
        x = self.norm1(x + self.dropout(self.attention(x)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_head, d_ff, p=0.1):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, n_head, p, masking=True)
        self.cross_attention = MultiHeadAttention(d_model, n_head, p)
        self.ffn = FeedForward(d_model, d_ff, p)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(p)

    def forward(self, x, enc_out):
        x = self.norm1(x + self.dropout(self.self_attention(x)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, enc_out)))
        return self.norm3(x + self.dropout(self.ffn(x)))
'''


def without_the_switch(source):
    """``source`` whose attention method never hides the future: its block has no causal switch, and the decoder
    attends over every target position."""
    for old, new in (("p=0.1, masking=False):", "p=0.1):"),
                     ("self.d_model, self.n_head, self.masking = d_model, n_head, masking",
                      "self.d_model, self.n_head = d_model, n_head"),
                     ('''        if self.masking:
            later = torch.ones(scores.size(-2), scores.size(-1), device=scores.device).triu(1).bool()
            scores = scores.masked_fill(later, float("-inf"))
''', ""), ("MultiHeadAttention(d_model, n_head, p, masking=True)", "MultiHeadAttention(d_model, n_head, p)")):
        assert old in source
        source = source.replace(old, new)
    return source


def test_an_attention_method_is_checked_on_its_block_built_with_the_causal_switch_its_decoder_sets(tmp_path):
    """Scaled dot-product attention as a method of the multi-head block, ``scaled_dot_product_attention(Q, K, V)``,
    which takes no mask: the block hides the future when its constructor's ``masking=True`` says so, as the decoder
    builds it (§3.2.3). The future check builds the block so and passes; the padding the method has no parameter for
    is named as such (``mask_not_accepted``: the canonical mask has nowhere to go), never ``mask_ignored``."""
    code, output, report, records = run_on_source(
        tmp_path, "switched.py", SWITCHED_ATTENTION, "-k", "attention and (future_positions or masked_keys)")
    assert records[("attention", "future_positions_do_not_change_earlier_outputs")]["verdict"] == "pass", output
    padding = records[("attention", "masked_keys_do_not_change_outputs")]
    assert (padding["verdict"], padding["cause"]) == ("fail", "attention.mask_not_accepted"), output
    assert "scaled_dot_product_attention(Q, K, V)" in padding["message"], output


def test_an_attention_method_whose_block_has_no_causal_switch_still_fails_on_the_future(tmp_path):
    code, output, report, records = run_on_source(
        tmp_path, "unswitched.py", without_the_switch(SWITCHED_ATTENTION), "-k", "attention and future_positions")
    future = records[("attention", "future_positions_do_not_change_earlier_outputs")]
    assert (future["verdict"], future["cause"]) == ("fail", "attention.mask_not_accepted"), output
