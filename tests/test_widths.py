"""Sizes read from how the code builds its weights, where names alone mislead: two width arguments the paper holds
equal (a residual width and a projection width h x d_k), a defaulted width no name list knows (``emb_dims=512``),
and a count of layers named like a list of them (``layers=6``). Each is fed the configuration under check, so the
author is never blamed for a width the checker did not give, while the paper's bugs in the same code stay named."""
import inspect
import textwrap

import pytest
import torch

from adapters.construction import constructor_plan, is_a_count
from adapters.loading import load_code
from adapters.submission import load_implementation
from conformance.contract.interface import Config
from conformance.checks.test_embeddings import test_embedding_scaled_by_sqrt_d_model
from conformance.contract.verdicts import Failure
from tests.suite import run_suite

WIDTHS = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class MultiHeadedAttention(nn.Module):
        """Projects the residual stream (d_embed wide) into h heads of d_model // h, and back."""
        def __init__(self, d_embed, d_model, n_heads):
            super().__init__()
            self.n_heads, self.d_head = n_heads, d_model // n_heads
            self.to_q, self.to_k = nn.Linear(d_embed, d_model), nn.Linear(d_embed, d_model)
            self.to_v, self.back = nn.Linear(d_embed, d_model), nn.Linear(d_model, d_embed)

        def heads(self, t):
            return t.reshape(t.size(0), t.size(1), self.n_heads, self.d_head).permute(0, 2, 1, 3)

        def forward(self, q_in, k_in, v_in, mask=None):
            q, k, v = self.heads(self.to_q(q_in)), self.heads(self.to_k(k_in)), self.heads(self.to_v(v_in))
            logits = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d_head)
            if mask is not None:
                logits = logits.masked_fill(mask == 0, -1e9)
            mixed = torch.matmul(logits.softmax(dim=-1), v).permute(0, 2, 1, 3)
            return self.back(mixed.reshape(q_in.size(0), q_in.size(1), -1))


    class PositionWiseNet(nn.Module):
        def __init__(self, d_embed, d_ff):
            super().__init__()
            self.widen, self.narrow = nn.Linear(d_embed, d_ff), nn.Linear(d_ff, d_embed)

        def forward(self, x):
            return self.narrow(torch.relu(self.widen(x)))


    class EncoderUnit(nn.Module):
        def __init__(self, d_embed, d_model, d_ff, n_heads, drop=0.1):
            super().__init__()
            self.attend, self.net = MultiHeadedAttention(d_embed, d_model, n_heads), PositionWiseNet(d_embed, d_ff)
            self.ln_a, self.ln_b, self.drop = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.Dropout(drop)

        def forward(self, x, mask):
            x = self.ln_a(x + self.drop(self.attend(x, x, x, mask)))
            return self.ln_b(x + self.drop(self.net(x)))


    class DecoderUnit(nn.Module):
        def __init__(self, d_embed, d_model, d_ff, n_heads, drop=0.1):
            super().__init__()
            self.own, self.other = MultiHeadedAttention(d_embed, d_model, n_heads), MultiHeadedAttention(d_embed, d_model, n_heads)
            self.net = PositionWiseNet(d_embed, d_ff)
            self.ln_a, self.ln_b, self.ln_c = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.drop = nn.Dropout(drop)

        def forward(self, y, y_mask, memory, memory_mask):
            y = self.ln_a(y + self.drop(self.own(y, y, y, y_mask)))
            y = self.ln_b(y + self.drop(self.other(y, memory, memory, memory_mask)))
            return self.ln_c(y + self.drop(self.net(y)))


    class Embeddings(nn.Module):
        def __init__(self, vocab_size, emb_dims=512):
            super().__init__()
            self.lookup, self.emb_dims = nn.Embedding(vocab_size, emb_dims), emb_dims
            self.factor = torch.tensor([math.sqrt(emb_dims)], dtype=torch.float32)  # rounded to float32

        def forward(self, ids):
            return self.lookup(ids) * self.factor.to(ids.device)


    class SinusoidTable(nn.Module):
        def __init__(self, d_embed, longest=80, drop=0.1):
            super().__init__()
            where = torch.arange(longest, dtype=torch.float).unsqueeze(1)
            rate = torch.pow(10000.0, -torch.arange(0, d_embed, 2, dtype=torch.float) / d_embed)
            table = torch.zeros(longest, d_embed)
            table[:, 0::2], table[:, 1::2] = torch.sin(where * rate), torch.cos(where * rate)
            self.register_buffer("table", table)
            self.drop = nn.Dropout(drop)

        def forward(self, x):
            return self.drop(x + self.table[: x.size(1)])


    class Translator(nn.Module):
        def __init__(self, src_vocab, tgt_vocab, width=512, heads=8, inner=2048, layers=6, drop=0.1):
            super().__init__()
            self.src_words, self.tgt_words = Embeddings(src_vocab, width), Embeddings(tgt_vocab, width)
            self.where = SinusoidTable(width, drop=drop)
            self.encoding = nn.ModuleList([EncoderUnit(width, width, inner, heads, drop) for _ in range(layers)])
            self.decoding = nn.ModuleList([DecoderUnit(width, width, inner, heads, drop) for _ in range(layers)])
            self.logits = nn.Linear(width, tgt_vocab)

        def forward(self, src, tgt, src_mask, tgt_mask):
            memory = self.where(self.src_words(src))
            for unit in self.encoding:
                memory = unit(memory, src_mask)
            y = self.where(self.tgt_words(tgt))
            for unit in self.decoding:
                y = unit(y, tgt_mask, memory, src_mask)
            return self.logits(y)


    def no_peeking(n):
        return torch.tril(torch.ones(n, n, dtype=torch.bool)).unsqueeze(0).unsqueeze(0)
''')
SCALED_BY_SQRT_D_MODEL = ("/ math.sqrt(self.d_head)", "/ math.sqrt(self.n_heads * self.d_head)")
NOT_SCALED = ("return self.lookup(ids) * self.factor.to(ids.device)", "return self.lookup(ids)")


@pytest.fixture(scope="module")
def widths(tmp_path_factory):
    path = tmp_path_factory.mktemp("widths") / "widths.py"
    path.write_text(WIDTHS)
    return vars(load_code(path).module)


def test_two_widths_named_for_d_model_are_both_fed_it(widths):
    """d_embed (the residual stream) and d_model (h x d_k) are one width in the paper (§3.2.2): neither is d_ff,
    whether the block holds no inner width (the attention) or another argument feeds it (the layers)."""
    assert constructor_plan(widths["MultiHeadedAttention"], "multi_head_attention", {}) == {
        "d_embed": "d_model", "d_model": "d_model", "n_heads": "h"}
    for layer, role in (("EncoderUnit", "encoder_layer"), ("DecoderUnit", "decoder_layer")):
        plan = constructor_plan(widths[layer], role, {})
        assert (plan["d_embed"], plan["d_model"], plan["d_ff"]) == ("d_model", "d_model", "d_ff"), plan


def test_a_hidden_width_beside_d_model_is_still_the_inner_one(tmp_path):
    """Two names for d_model where no other argument feeds d_ff (``(d_model, hidden)`` of a feed-forward block):
    the one the first projection maps into is d_ff, as before."""
    path = tmp_path / "ffn.py"
    path.write_text(textwrap.dedent('''
        import torch.nn as nn

        class FeedForward(nn.Module):
            def __init__(self, d_model, hidden):
                super().__init__()
                self.up, self.down = nn.Linear(d_model, hidden), nn.Linear(hidden, d_model)
    '''))
    plan = constructor_plan(vars(load_code(path).module)["FeedForward"], "feed_forward", {})
    assert plan == {"d_model": "d_model", "hidden": "d_ff"}


def test_a_defaulted_width_no_name_reads_is_learned(widths):
    """``emb_dims=512`` sets the lookup's width: it is fed d_model. A default that shapes no weight (the length of
    the sinusoid table) keeps its value."""
    assert constructor_plan(widths["Embeddings"], "embedding", {}) == {"vocab_size": "vocab_size",
                                                                       "emb_dims": "d_model"}
    assert "longest" not in constructor_plan(widths["SinusoidTable"], "positional_encoding", {})


def test_a_vocabulary_named_as_a_length_is_a_vocabulary(tmp_path):
    """``vocab_len``, ``src_vocab_len``: the rows of an embedding sized by an argument that names a vocabulary are
    tokens, however the name ends; one named only for positions (``max_seq_len``) stays max_len."""
    path = tmp_path / "lookups.py"
    path.write_text(textwrap.dedent('''
        import torch.nn as nn

        class Embedding(nn.Module):
            def __init__(self, width, vocab_len, max_seq_len):
                super().__init__()
                self.tokens, self.positions = nn.Embedding(vocab_len, width), nn.Embedding(max_seq_len, width)

        class Translator(nn.Module):
            def __init__(self, width, src_vocab_len, trg_vocab_len):
                super().__init__()
                self.source, self.target = nn.Embedding(src_vocab_len, width), nn.Embedding(trg_vocab_len, width)
                self.out = nn.Linear(width, trg_vocab_len)
    '''))
    module = vars(load_code(path).module)
    assert constructor_plan(module["Embedding"], "embedding", {}) == {
        "width": "d_model", "vocab_len": "vocab_size", "max_seq_len": "max_len"}
    plan = constructor_plan(module["Translator"], "model", {})
    assert (plan["src_vocab_len"], plan["trg_vocab_len"]) == ("src_vocab", "tgt_vocab"), plan


def test_a_defaulted_inner_width_beside_a_fed_width_is_d_ff(tmp_path):
    """``filter_size=2048`` beside a width its name feeds: the projection pair between them makes it the inner
    width, never a second d_model."""
    path = tmp_path / "ffn.py"
    path.write_text(textwrap.dedent('''
        import torch.nn as nn

        class FeedForward(nn.Module):
            def __init__(self, hidden_size, filter_size=2048):
                super().__init__()
                self.up, self.down = nn.Linear(hidden_size, filter_size), nn.Linear(filter_size, hidden_size)
    '''))
    plan = constructor_plan(vars(load_code(path).module)["FeedForward"], "feed_forward", {})
    assert plan == {"hidden_size": "d_model", "filter_size": "d_ff"}


CONVOLUTIONS = '''
import torch.nn as nn
import torch.nn.functional as F


class PositionwiseFeedForward(nn.Module):
    """Eq. (2) as "two convolutions with kernel size 1" (section 3.3), over (batch, channels, length)."""

    def __init__(self, hid, inner, dropout):
        super().__init__()
        self.widen, self.narrow = nn.Conv1d(hid, inner, 1), nn.Conv1d(inner, hid, 1)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.narrow(self.drop(F.relu(self.widen(x.transpose(1, 2))))).transpose(1, 2)
'''


def test_a_feed_forward_of_kernel_one_convolutions_reads_its_widths_and_is_checked(tmp_path):
    """Widths named for nothing (``hid``, ``inner``) read from kernel-1 convolutions as from linear maps: the network
    is checked, and an activation left out is still named."""
    path = tmp_path / "conv_ffn.py"
    path.write_text(CONVOLUTIONS)
    plan = constructor_plan(vars(load_code(path).module)["PositionwiseFeedForward"], "feed_forward", {})
    assert (plan["hid"], plan["inner"]) == ("d_model", "d_ff"), plan
    code, output, report = run_suite(f"--impl={path}", "-m", "feed_forward", tmp_path=tmp_path)
    ffn = [c for c in report["checks"] if c["component"] == "feed_forward"]
    assert sum(c["verdict"] == "pass" for c in ffn) >= 8 and not [c for c in ffn if c["verdict"] in ("fail", "error")], \
        output
    linear = tmp_path / "conv_ffn_linear.py"
    linear.write_text(CONVOLUTIONS.replace("F.relu(self.widen(", "(self.widen("))
    code, output, report = run_suite(f"--impl={linear}", "-m", "feed_forward", tmp_path=tmp_path)
    assert "feed_forward.relu_missing" in {c["cause"] for c in report["checks"] if c["verdict"] == "fail"}, output


def test_a_count_of_layers_is_n_not_a_list_of_them(widths):
    plan = constructor_plan(widths["Translator"], "model", {})
    assert (plan["layers"], plan["width"], plan["inner"], plan["heads"]) == ("N", "d_model", "d_ff", "h"), plan
    parameters = inspect.signature(widths["Translator"]).parameters
    assert is_a_count(widths["Translator"], parameters["layers"])
    assert not is_a_count(widths["Translator"], parameters["drop"])


def test_a_count_without_a_default_is_read_from_range(tmp_path):
    path = tmp_path / "stack.py"
    path.write_text(textwrap.dedent('''
        import torch.nn as nn

        class Stack(nn.Module):
            def __init__(self, block, layers):
                super().__init__()
                self.blocks = nn.ModuleList([block for _ in range(layers)])

        class Chain(nn.Module):
            def __init__(self, layers):
                super().__init__()
                self.blocks = nn.ModuleList(layers)
    '''))
    namespace = vars(load_code(path).module)
    assert is_a_count(namespace["Stack"], inspect.signature(namespace["Stack"]).parameters["layers"])
    assert not is_a_count(namespace["Chain"], inspect.signature(namespace["Chain"]).parameters["layers"])


@pytest.mark.parametrize("bugs", [(), (NOT_SCALED,)], ids=["correct", "not scaled"])
def test_sqrt_d_model_held_as_a_float32_constant_is_the_papers_scale(tmp_path, bugs):
    """``Tensor([sqrt(d)])`` rounds sqrt(6) to float32, off by 4e-8 in a float64 run: the right scale, not
    ``scale_wrong``; leaving the scale out is still named."""
    source = WIDTHS
    for old, new in bugs:
        source = source.replace(old, new)
    path = tmp_path / "translator.py"
    path.write_text(source)
    impl = load_implementation(str(path))
    cfg = Config(d_model=6, h=3, d_ff=12, dropout=0.0, N=1, vocab_size=11, src_vocab=11, tgt_vocab=11, max_len=12)
    drawn = dict(cfg=cfg, batch=3, src_len=3, tgt_len=4, dtype=torch.float64, seed=0)
    check = test_embedding_scaled_by_sqrt_d_model.hypothesis.inner_test
    if not bugs:
        check(impl, "cpu", "embedding", drawn)
        return
    with pytest.raises(Failure) as failure:
        check(impl, "cpu", "embedding", drawn)
    assert failure.value.cause == "embedding.not_scaled"


@pytest.mark.parametrize("bugs", [(), (SCALED_BY_SQRT_D_MODEL, NOT_SCALED)], ids=["correct", "two bugs"])
def test_widths_read_from_the_weights_leave_no_false_alarm_and_the_bugs_named(tmp_path, bugs):
    source = WIDTHS
    for old, new in bugs:
        source = source.replace(old, new)
    path = tmp_path / "translator.py"
    path.write_text(source)
    code, output, report = run_suite(f"--impl={path}", tmp_path=tmp_path)
    claims = {(c["component"], c["cause"]) for c in report["checks"] if c["verdict"] in ("fail", "error")}
    built = [n for n in report["notes"] if n.startswith("model: Translator (")]
    assert built and "layers=N" in built[0] and "width=d_model" in built[0], report["notes"]
    if not bugs:
        assert claims == set(), output
        return
    causes = {cause for _, cause in claims}
    assert "multi_head_attention.scale.sqrt_d_model" in causes and "embedding.not_scaled" in causes, claims
    assert not [c for c in causes if c.startswith("error.") or ".parameters." in c or c.endswith(".shape")], claims
