"""A decoder layer and stack that take the encoder's states first (``forward(enc_states, dec_states, enc_mask,
dec_mask)``), as the author's model calls them: read from the names' sides where they say one, else found by
calling the block the other way round when the first order fails. Either way no shape error is blamed on the author,
and a bug planted in the decoder is still named."""
import textwrap

import pytest

from adapters.binding import discover
from adapters.loading import load_code
from tests.suite import run_suite

MEMORY_FIRST = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.n_heads, self.d_head = n_heads, d_model // n_heads
            self.w = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))

        def forward(self, query, key, value, mask=None):
            b = query.size(0)
            q, k, v = (lin(t).unflatten(-1, (self.n_heads, self.d_head)).transpose(1, 2)
                       for lin, t in zip(self.w, (query, key, value)))
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, query.size(1), -1)
            return self.w[3](out)


    class FeedForward(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))

        def forward(self, x):
            return self.net(x)


    class DecoderLayer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
            super().__init__()
            self.masked, self.cross = MultiHeadAttention(d_model, n_heads), MultiHeadAttention(d_model, n_heads)
            self.ff = FeedForward(d_model, d_ff)
            self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
            self.dropout = nn.Dropout(dropout)

        def forward(self, FIRST, SECOND, FIRST_mask, SECOND_mask):
            kept, y = FIRST, SECOND
            y = self.norms[0](y + self.dropout(self.masked(y, y, y, SECOND_mask)))
            y = self.norms[1](y + self.dropout(self.cross(y, kept, kept, FIRST_mask)))
            return self.norms[2](y + self.dropout(self.ff(y)))


    class Decoder(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, n_layers, dropout=0.1):
            super().__init__()
            self.layers = nn.ModuleList(DecoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers))

        def forward(self, FIRST, SECOND, FIRST_mask, SECOND_mask):
            for layer in self.layers:
                SECOND = layer(FIRST, SECOND, FIRST_mask, SECOND_mask)
            return SECOND


    def subsequent_mask(size):
        return torch.tril(torch.ones(1, 1, size, size, dtype=torch.bool))
''')
NAMES = {"read from the names": ("enc_hidden", "dec_hidden"), "found by calling": ("a", "b")}
NO_CAUSAL_MASK = ("self.masked(y, y, y, SECOND_mask)", "self.masked(y, y, y, None)")


def source(names, bugs=()):
    text = MEMORY_FIRST.replace("FIRST", names[0]).replace("SECOND", names[1])
    for old, new in bugs:
        text = text.replace(old.replace("SECOND", names[1]), new)
    return text


@pytest.mark.parametrize("names", NAMES.values(), ids=NAMES.keys())
def test_the_encoders_states_first_are_the_memory(tmp_path, names):
    path = tmp_path / "memory_first.py"
    path.write_text(source(names))
    module = load_code(path).module
    found = discover(vars(module), module.__name__)
    for role in ("decoder_layer", "decoder"):
        binding = found.bindings[role]
        assert binding.works, found.describe()
        call = dict(binding.call) if binding.call else dict(found.roles[role](
            d_model=12, h=3, d_ff=24, dropout=0.0, N=1, vocab_size=11, src_vocab=11, tgt_vocab=13,
            max_len=16).arguments)
        assert (call[names[0]], call[names[1]]) == ("memory", "x"), found.describe()


@pytest.mark.parametrize("bugs", [(), (NO_CAUSAL_MASK,)], ids=["correct", "no causal mask"])
def test_a_memory_first_decoder_is_checked_as_its_author_calls_it(tmp_path, bugs):
    path = tmp_path / "memory_first.py"
    path.write_text(source(NAMES["found by calling"], bugs))
    code, output, report = run_suite(f"--impl={path}", "-k", "decoder", tmp_path=tmp_path)
    claims = {(c["component"], c["cause"]) for c in report["checks"] if c["verdict"] in ("fail", "error")}
    assert not [claim for claim in claims if claim[1].startswith("error.")], output
    if not bugs:
        assert claims == set(), output
    else:
        assert claims == {("decoder_layer", "decoder_layer.mask_ignored"), ("decoder", "decoder.mask_ignored")}, \
            output
