"""A model's own mask conventions, read from the code and its behaviour rather than assumed (§3.2.3): a forward
that names padding masks yet takes whole masks True = may attend, as the code's helpers make them; a model taking
(batch, L) key-padding vectors of its own polarity while its blocks take True = blocked; and what else such models
show: a sub-block's dropout left at rate 0 while its caller drops its output at the rate (§5.4), and a forward that
returns probabilities rather than logits (§3.4). Each is blamed for nothing, and a bug planted in it is named."""
import types

import pytest
import torch

from conformance.checks.test_information_flow import order_ignored, own_output

from tests.suite import run_on_source

BLOCKS = '''
import math
import torch
from torch import nn


class Lookup(nn.Module):
    def __init__(self, vocab, d_model):
        super().__init__()
        self.table, self.d_model = nn.Embedding(vocab, d_model), d_model

    def forward(self, ids):
        return self.table(ids) * math.sqrt(self.d_model)


class Sinusoids(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float).unsqueeze(1)
        rate = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float) * (-math.log(10000.0) / d_model))
        table = torch.zeros(max_len, d_model)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
        self.register_buffer("table", table)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(x + self.table[: x.size(1)])


class Heads(nn.Module):
    """Multi-head attention; MASK_RULE says which mask entries hide a key."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads, self.width = heads, d_model // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, q, k, v, mask=None):
        b = q.size(0)
        q, k, v = (w(t).view(b, -1, self.heads, self.width).transpose(1, 2)
                   for w, t in ((self.wq, q), (self.wk, k), (self.wv, v)))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.width)
        if mask is not None:
            scores = scores.masked_fill(MASK_RULE(mask), FILL)
        out = scores.softmax(-1) @ v
        return self.wo(out.transpose(1, 2).reshape(b, -1, self.heads * self.width))


class Widen(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.up, self.down, self.drop = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.down(self.drop(torch.relu(self.up(x)))))


class EncoderBlock(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1):
        super().__init__()
        self.attend, self.widen = Heads(d_model, heads), Widen(d_model, d_ff)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(2))
        self.drops = nn.ModuleList(nn.Dropout(dropout) for _ in range(2))

    def forward(self, x, mask):
        x = self.norms[0](x + self.drops[0](self.attend(x, x, x, mask)))
        return self.norms[1](x + self.drops[1](self.widen(x)))


class DecoderBlock(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1):
        super().__init__()
        self.attend, self.consult, self.widen = Heads(d_model, heads), Heads(d_model, heads), Widen(d_model, d_ff)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.drops = nn.ModuleList(nn.Dropout(dropout) for _ in range(3))

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.norms[0](x + self.drops[0](self.attend(x, x, x, tgt_mask)))
        x = self.norms[1](x + self.drops[1](self.consult(x, memory, memory, src_mask)))
        return self.norms[2](x + self.drops[2](self.widen(x)))


class Translator(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=32, heads=4, d_ff=64, layers=2, dropout=0.1):
        super().__init__()
        self.src_lookup, self.tgt_lookup = Lookup(src_vocab, d_model), Lookup(tgt_vocab, d_model)
        self.positions = Sinusoids(d_model, dropout)
        self.encoders = nn.ModuleList(EncoderBlock(d_model, heads, d_ff, dropout) for _ in range(layers))
        self.decoders = nn.ModuleList(DecoderBlock(d_model, heads, d_ff, dropout) for _ in range(layers))
        self.project = nn.Linear(d_model, tgt_vocab)

    def encode(self, src, src_mask):
        x = self.positions(self.src_lookup(src))
        for block in self.encoders:
            x = block(x, src_mask)
        return x

    def decode(self, memory, src_mask, tgt, tgt_mask):
        x = self.positions(self.tgt_lookup(tgt))
        for block in self.decoders:
            x = block(x, memory, src_mask, tgt_mask)
        return x
'''

WHOLE_KEEP_MASKS = BLOCKS + '''

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, src_padding_mask=None, tgt_padding_mask=None):
        memory = self.encode(src, src_mask)
        return self.project(self.decode(memory, src_mask, tgt, tgt_mask))


MASK_RULE, FILL = (lambda mask: mask == 0), float("-inf")


def keep_tokens(ids, pad=0):
    return (ids != pad).unsqueeze(1).unsqueeze(2)


def keep_earlier(length):
    return torch.ones(length, length, dtype=torch.bool).tril().unsqueeze(0).unsqueeze(0)


if __name__ == "__main__":
    model = Translator(11, 13)
    src, tgt = torch.tensor([[3, 4, 5, 0]]), torch.tensor([[2, 6, 7]])
    model(src, tgt, keep_tokens(src), keep_tokens(tgt) & keep_earlier(3))
'''

KEY_VECTORS_OF_ITS_OWN = BLOCKS + '''

    def hidden(self, keep, length=None):
        """(batch, L) vectors, 1 = a real token, as a data pipeline makes them with (ids != pad).float()."""
        mask = (keep == 0).unsqueeze(1).unsqueeze(2)
        return mask | hide_later(length) if length else mask

    def forward(self, src, tgt, src_keep, tgt_keep):
        memory = self.encode(src, self.hidden(src_keep))
        return self.project(self.decode(memory, self.hidden(src_keep), tgt, self.hidden(tgt_keep, tgt.size(1))))


MASK_RULE, FILL = (lambda mask: mask), -1e9


def hide_padding(ids, pad=0):
    return (ids == pad).unsqueeze(1).unsqueeze(2)


def hide_later(length):
    return torch.ones(length, length, dtype=torch.bool).triu(1).unsqueeze(0).unsqueeze(0)
'''

KEY_PADDING_VECTORS = BLOCKS + '''

    def forward(self, src, tgt, src_padding_mask, tgt_padding_mask):
        """The padding as (batch, L) vectors, True = a real token (a tokenizer's attention mask)."""
        return self.project(self.decode(self.encode(src, src_padding_mask), src_padding_mask, tgt, tgt_padding_mask))


class Heads(nn.Module):
    """Multi-head attention taking (batch, Lk) key vectors, True = a real token; causal when built so."""

    def __init__(self, d_model, heads, causal=False):
        super().__init__()
        self.heads, self.width, self.causal = heads, d_model // heads, causal
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, q, k, v, key_padding_mask=None):
        b, lq, lk = q.size(0), q.size(1), k.size(1)
        q, k, v = (w(t).view(b, -1, self.heads, self.width).transpose(1, 2)
                   for w, t in ((self.wq, q), (self.wk, k), (self.wv, v)))
        allowed = torch.ones(lq, lk, dtype=torch.bool, device=q.device)
        allowed = allowed.tril() if self.causal else allowed
        if key_padding_mask is not None:
            allowed = allowed & key_padding_mask[:, None, None, :]
        scores = (q @ k.transpose(-1, -2) / math.sqrt(self.width)).masked_fill(~allowed, -1e9)
        return self.wo((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, lq, -1))


class DecoderBlock(DecoderBlock):
    def __init__(self, d_model, heads, d_ff, dropout=0.1):
        super().__init__(d_model, heads, d_ff, dropout)
        self.attend = Heads(d_model, heads, causal=True)
'''


TORCH_POLARITY_VECTORS = '''
import math
import torch
from torch import nn


class Heads(nn.Module):
    """Multi-head attention taking a (batch, Lk) vector named for padding, True = padded; causal when built so."""

    def __init__(self, d_model, heads, causal=False):
        super().__init__()
        self.heads, self.width, self.causal = heads, d_model // heads, causal
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, q, k, v, padding_mask=None):
        b, lq, lk = q.size(0), q.size(1), k.size(1)
        q, k, v = (w(t).view(b, -1, self.heads, self.width).transpose(1, 2)
                   for w, t in ((self.wq, q), (self.wk, k), (self.wv, v)))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.width)
        if self.causal:
            scores = scores.masked_fill(torch.ones(lq, lk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        if padding_mask is not None:
            scores = scores.masked_fill(padding_mask[:, None, None, :], float("-inf"))
        return self.wo((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, lq, -1))


class Widen(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.up, self.down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class EncoderBlock(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1):
        super().__init__()
        self.attend, self.widen = Heads(d_model, heads), Widen(d_model, d_ff)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(2))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, padding_mask=None):
        x = self.norms[0](x + self.drop(self.attend(x, x, x, padding_mask)))
        return self.norms[1](x + self.drop(self.widen(x)))


class DecoderBlock(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1):
        super().__init__()
        self.attend, self.consult = Heads(d_model, heads, causal=True), Heads(d_model, heads)
        self.widen = Widen(d_model, d_ff)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, tgt_padding_mask=None, src_padding_mask=None):
        x = self.norms[0](x + self.drop(self.attend(x, x, x, tgt_padding_mask)))
        x = self.norms[1](x + self.drop(self.consult(x, memory, memory, src_padding_mask)))
        return self.norms[2](x + self.drop(self.widen(x)))


class Translator(nn.Module):
    """One vocabulary for both sides, its embeddings and pre-softmax map tied (§3.4): it refuses two. Its masks
    it makes from pad 0 as (batch, L) vectors, True = padded (torch's key_padding_mask polarity)."""

    def __init__(self, src_vocab, tgt_vocab, d_model=32, heads=4, d_ff=64, layers=2, dropout=0.1):
        super().__init__()
        if src_vocab != tgt_vocab:
            raise ValueError("the embeddings are tied: one vocabulary for both sides")
        self.d_model, self.lookup = d_model, nn.Embedding(src_vocab, d_model)
        position = torch.arange(64, dtype=torch.float).unsqueeze(1)
        rate = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float) * (-math.log(10000.0) / d_model))
        table = torch.zeros(64, d_model)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
        self.register_buffer("table", table)
        self.drop = nn.Dropout(dropout)
        self.encoders = nn.ModuleList(EncoderBlock(d_model, heads, d_ff, dropout) for _ in range(layers))
        self.decoders = nn.ModuleList(DecoderBlock(d_model, heads, d_ff, dropout) for _ in range(layers))
        self.project = nn.Linear(d_model, tgt_vocab, bias=False)
        self.project.weight = self.lookup.weight

    def embed(self, ids):
        return self.drop(self.lookup(ids) * math.sqrt(self.d_model) + self.table[: ids.size(1)])

    def forward(self, src, tgt):
        src_pad, tgt_pad = src == 0, tgt == 0
        x = self.embed(src)
        for block in self.encoders:
            x = block(x, src_pad)
        y = self.embed(tgt)
        for block in self.decoders:
            y = block(y, x, tgt_pad, src_pad)
        return self.project(y)
'''

QUERY_ROW_TARGET_MASK = BLOCKS + '''

    def forward(self, src, tgt):
        """Masks made here from pad 0, the target's padding on the query rows, and-ed with the lower triangle (its
        data padded at the end, so that no real position sees a padded one)."""
        src_mask = (src != 0)[:, None, None, :]
        rows = (tgt != 0)[:, None, :, None]
        tgt_mask = rows & torch.tril(torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device))
        return self.project(self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask))


MASK_RULE, FILL = (lambda mask: mask == 0), -1e9
'''

def blamed(records):
    return {key: (r["cause"], r["message"][:200]) for key, r in records.items() if r["verdict"] in ("fail", "error")}


def named(records):
    return {r["cause"] for r in records.values() if r["verdict"] in ("fail", "error")}


MODEL_CHECKS = "model and (masked or future or padding or positions or gradient or deterministic or batch)"


@pytest.mark.parametrize("source", [WHOLE_KEEP_MASKS, KEY_VECTORS_OF_ITS_OWN, KEY_PADDING_VECTORS,
                                    TORCH_POLARITY_VECTORS, QUERY_ROW_TARGET_MASK],
                         ids=["padding_named", "key_vectors", "key_padding_vectors", "torch_polarity_vectors",
                              "query_row_target_mask"])
def test_a_models_own_mask_convention_is_read_and_blamed_for_nothing(tmp_path, source):
    """Called with masks as its code makes them, each model hides padded keys and later target tokens."""
    code, output, report, records = run_on_source(tmp_path, "translator.py", source, "-k", MODEL_CHECKS)
    assert report is not None, output
    assert not blamed(records), blamed(records)
    assert records[("model", "masked_keys_do_not_change_outputs")]["verdict"] == "pass"
    assert records[("model", "future_positions_do_not_change_earlier_outputs")]["verdict"] == "pass"
    model = next(note for note in report["notes"] if note.startswith("model: Translator"))
    said = {KEY_VECTORS_OF_ITS_OWN: "attention masks from them itself", TORCH_POLARITY_VECTORS: "(src_vocab=src_vocab,",
            QUERY_ROW_TARGET_MASK: "the checks pad at the end of each sequence, as its data is padded"}
    # (one vocabulary: built with one though it refuses two; padded at the end: masks made from the pad tokens)
    where = model if source is not QUERY_ROW_TARGET_MASK else " ".join(report["notes"])
    assert said.get(source, "its masks whole") in where


@pytest.mark.parametrize("source", [KEY_PADDING_VECTORS, TORCH_POLARITY_VECTORS],
                         ids=["key_padding_vectors", "torch_polarity_vectors"])
def test_an_attention_taking_key_vectors_is_not_blamed_for_a_triangle_they_cannot_say(tmp_path, source):
    """Its decoder builds it causal; the checker, given no switch to build it so, cannot hide the future through
    (batch, Lk) vectors, whether given them in the code's polarity or as torch's key-padding part of its masks:
    missing, not a fail. Padded keys it hides, read in the polarity its name says."""
    code, output, report, records = run_on_source(tmp_path, "translator.py", source, "-k",
                                                  "multi_head_attention and (future_positions or masked_keys)")
    record = records[("multi_head_attention", "future_positions_do_not_change_earlier_outputs")]
    assert (record["verdict"], record["cause"]) == ("missing", "adapter.mask_not_expressible_as_key_vectors"), record
    assert records[("multi_head_attention", "masked_keys_do_not_change_outputs")]["verdict"] == "pass"


@pytest.mark.parametrize("source, planted, cause", [
    (WHOLE_KEEP_MASKS, ("x, memory, memory, src_mask)))", "x, memory, memory, None)))"), "model.masked_keys_visible"),
    (KEY_VECTORS_OF_ITS_OWN, ("self.hidden(tgt_keep, tgt.size(1))", "self.hidden(tgt_keep)"), "model.future_visible"),
    (TORCH_POLARITY_VECTORS, ("self.consult(x, memory, memory, src_padding_mask)", "self.consult(x, memory, memory)"),
     "model.masked_keys_visible"),
    (QUERY_ROW_TARGET_MASK, ("rows & torch.tril(torch.ones(", "rows & (torch.ones("), "model.future_visible"),
], ids=["padding_named_cross_unmasked", "key_vectors_no_look_ahead", "torch_polarity_cross_unmasked",
        "query_rows_no_look_ahead"])
def test_a_bug_in_a_model_of_its_own_conventions_is_still_named(tmp_path, source, planted, cause):
    assert planted[0] in source
    code, output, report, records = run_on_source(tmp_path, "translator.py", source.replace(*planted),
                                                  "-k", MODEL_CHECKS)
    assert cause in named(records), blamed(records)


ZERO_RATE_INSIDE = "self.widen = Heads(d_model, heads), Widen(d_model, d_ff)"


@pytest.mark.parametrize("planted, expected", [
    ((), None),
    (((ZERO_RATE_INSIDE, ZERO_RATE_INSIDE.replace("Widen(d_model, d_ff)", "Widen(d_model, d_ff, 0.1)")),),
     "encoder_layer.dropout_rate_ignored"),
    ((("nn.Dropout(dropout) for _ in range(2)", "nn.Dropout(0.0) for _ in range(2)"),),
     "encoder_layer.dropout_rate_ignored"),
], ids=["zero_inside", "fixed_rate_inside", "rate_reaches_none"])
def test_a_dropout_switched_off_is_no_rate_ignored_but_a_fixed_rate_is(tmp_path, planted, expected):
    """§5.4: the feed-forward block's own dropouts left at 0 while the layer drops its output at the rate drop
    nothing; one fixed at 0.1, or a layer whose dropouts never get the rate, ignores the configured rate."""
    source = WHOLE_KEEP_MASKS
    for old, new in planted:
        assert old in source
        source = source.replace(old, new)
    code, output, report, records = run_on_source(tmp_path, "translator.py", source,
                                                  "-k", "encoder_layer and dropout_rate")
    record = records[("encoder_layer", "dropout_rate_reaches_every_dropout")]
    assert (record["cause"] if record["verdict"] == "fail" else None) == expected, record


LOGITS = "return self.project(self.decode(memory, src_mask, tgt, tgt_mask))"


@pytest.mark.parametrize("planted, expected", [
    ((), None),
    ((("x = self.positions(self.src_lookup(src))", "x = self.src_lookup(src)"),), "model.source_positions_missing"),
], ids=["correct", "no_source_positions"])
def test_a_forward_returning_probabilities_is_compared_as_log_probabilities(tmp_path, planted, expected):
    """§3.4: a forward ending in softmax returns next-token probabilities, compared as their logarithms: the order
    of the source tokens shows, and its absence too."""
    source = WHOLE_KEEP_MASKS.replace(LOGITS, "return torch.softmax(self.project(self.decode(memory, src_mask, tgt, "
                                              "tgt_mask)), -1)")
    for old, new in planted:
        assert old in source
        source = source.replace(old, new)
    code, output, report, records = run_on_source(tmp_path, "translator.py", source, "-k",
                                                  "positions_reach_the_encoder")
    record = records[("model", "positions_reach_the_encoder")]
    assert (record["cause"] if record["verdict"] == "fail" else None) == expected, record


class Returns(torch.nn.Module):
    """A model stand-in whose own forward returned ``raw`` (the adapter keeps it as ``raw_output``)."""

    def __init__(self, raw):
        super().__init__()
        self.raw_output = raw

    def forward(self, src, tgt, *masks):
        return torch.zeros(*tgt.shape, 4)


def test_probabilities_near_one_over_v_differ_as_their_logarithms_do():
    """Two distributions over 19 tokens, one logit apart by 0.001: within float32's tolerance (1e-4) as
    probabilities, apart as log-probabilities; logits and log-probabilities are compared as given."""
    logits = torch.randn(1, 3, 19, generator=torch.Generator().manual_seed(0)) * 0.1
    moved = logits.clone()
    moved[..., 0] += 0.001
    probabilities = [torch.softmax(z, -1) for z in (logits, moved)]
    assert (probabilities[0] - probabilities[1]).abs().max() < 1e-4
    tgt = torch.zeros(1, 3, dtype=torch.long)
    near = [own_output(None, Returns(p), (None, tgt)) for p in probabilities]
    assert (near[0] - near[1]).abs().max() > 5e-4
    assert torch.allclose(near[0], torch.log_softmax(logits, -1), atol=1e-5)
    for given in (logits, torch.log_softmax(logits, -1)):
        assert own_output(None, Returns(given), (None, tgt)) is given


def test_a_swap_smaller_than_a_token_change_is_not_order_ignored():
    """§3.5: at a small initial scale the swap of two source tokens changes the outputs by less than the tolerance
    yet by a sixth of what a token changes: order reaches the encoder. Without positions a swap changes them by
    rounding alone."""
    case = types.SimpleNamespace(dtype=torch.float32)  # (the tolerance is all a comparison reads of a case)
    before = torch.zeros(3, 7)
    assert not order_ignored(before, before + 5e-5, before + 3e-4, case)
    assert order_ignored(before, before + 1e-8, before + 3e-4, case)
    assert not order_ignored(before, before, before + 1e-6, case)  # (a token change that shows nothing: no reading)
