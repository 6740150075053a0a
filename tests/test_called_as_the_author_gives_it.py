"""A block is called as its author's own code calls it, or not blamed: a model whose forward takes torch's two mask
parts, every one required, and hands its ``encode`` and ``decode`` masks of its own making (the padding with a head
axis, True = blocked) is given a tensor for each part and its methods those masks; a positional encoding adding the
table to its input in place (``x += table``) is called on a tensor of its own, as its model's embeddings are; an
attention module its multi-head block calls with the heads in the batch axis and key-padding vectors is missing under
the checker's call, not broken; a sum its positional encoding drops out at a low rate of its own is no evidence that
positions are never dropped out. The same model dropping the memory's mask in ``decode`` is still named."""
import textwrap

import torch

from conformance.checks.test_positional_encoding import kept_by_chance
from tests.suite import run_on_source

TORCH_PARTS = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class HeadsAttention(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.heads, self.size = heads, width // heads
            self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))

        def forward(self, query, key, value, blocked=None):
            b = query.size(0)
            split = lambda t: t.view(b, -1, self.heads, self.size).transpose(1, 2)
            q, k, v = split(self.q(query)), split(self.k(key)), split(self.v(value))
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.size)
            if blocked is not None:
                scores = scores.masked_fill(blocked, float("-inf"))
            out = scores.softmax(-1) @ v
            return self.o(out.transpose(1, 2).reshape(b, -1, self.heads * self.size))


    class Block(nn.Module):
        def __init__(self, width, heads, hidden, dropout, crossing=False):
            super().__init__()
            self.own = HeadsAttention(width, heads)
            self.other = HeadsAttention(width, heads) if crossing else None
            self.ff = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width))
            self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(3 if crossing else 2))
            self.drop = nn.Dropout(dropout)

        def forward(self, x, blocked, memory=None, memory_blocked=None):
            x = self.norms[0](x + self.drop(self.own(x, x, x, blocked)))
            if self.other is not None:
                x = self.norms[1](x + self.drop(self.other(x, memory, memory, memory_blocked)))
            return self.norms[-1](x + self.drop(self.ff(x)))


    class Translator(nn.Module):
        def __init__(self, src_vocab_size, tgt_vocab_size, d_model=32, nhead=4, num_layers=2, dim_feedforward=64,
                     dropout=0.1, max_len=64):
            super().__init__()
            self.width = d_model
            self.src_words = nn.Embedding(src_vocab_size, d_model)
            self.tgt_words = nn.Embedding(tgt_vocab_size, d_model)
            position = torch.arange(max_len).unsqueeze(1)
            rate = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            table = torch.zeros(max_len, d_model)
            table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
            self.register_buffer("table", table)
            self.drop = nn.Dropout(dropout)
            self.encoders = nn.ModuleList(Block(d_model, nhead, dim_feedforward, dropout) for _ in range(num_layers))
            self.decoders = nn.ModuleList(Block(d_model, nhead, dim_feedforward, dropout, crossing=True)
                                          for _ in range(num_layers))

        def embedded(self, words, tokens):
            return self.drop(words(tokens) * math.sqrt(self.width) + self.table[:tokens.size(1)])

        def forward(self, src, tgt, src_padding_mask, tgt_padding_mask, tgt_mask):
            source_blocked = src_padding_mask.unsqueeze(1).unsqueeze(2)
            target_blocked = tgt_mask.unsqueeze(0) | tgt_padding_mask.unsqueeze(1).unsqueeze(2)
            memory = self.encode(src, source_blocked)
            return self.decode(tgt, memory, target_blocked, source_blocked)

        def encode(self, src, mask=None):
            x = self.embedded(self.src_words, src)
            for block in self.encoders:
                x = block(x, mask)
            return x

        def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
            x = self.embedded(self.tgt_words, tgt)
            for block in self.decoders:
                x = block(x, tgt_mask, memory, memory_mask)
            return x


    def square_subsequent_mask(size):
        return torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=1)
''')

MODEL_CHECKS = ("model and (output_shape or masked_keys_do_not_change_outputs or encode_and_decode_hide_padded_source "
                "or future_positions_do_not_change_earlier_outputs or eval_mode_is_deterministic)")


def test_a_model_taking_torchs_parts_and_handing_its_methods_masks_of_its_own_is_blamed_for_nothing(tmp_path):
    _, output, report, records = run_on_source(tmp_path, "torch_parts_handed_whole.py", TORCH_PARTS, "-k",
                                               MODEL_CHECKS)
    assert report is not None, output
    assert any("its encode and decode given their masks whole" in note for note in report["notes"]), report["notes"]
    for check in ("output_shape", "masked_keys_do_not_change_outputs", "encode_and_decode_hide_padded_source",
                  "future_positions_do_not_change_earlier_outputs", "eval_mode_is_deterministic"):
        assert records[("model", check)]["verdict"] == "pass", records[("model", check)]


def test_a_decode_dropping_the_memorys_mask_is_still_named(tmp_path):
    leaking = TORCH_PARTS.replace("x = block(x, tgt_mask, memory, memory_mask)", "x = block(x, tgt_mask, memory)")
    assert leaking != TORCH_PARTS
    _, output, report, records = run_on_source(tmp_path, "torch_parts_leaking.py", leaking, "-k",
                                               "model and encode_and_decode_hide_padded_source")
    record = records[("model", "encode_and_decode_hide_padded_source")]
    assert record["verdict"] == "fail", record


IN_PLACE_POSITIONS = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, max_len, dropout):
            super().__init__()
            position = torch.arange(max_len).unsqueeze(1)
            rate = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            table = torch.zeros(1, max_len, d_model)
            table[0, :, 0::2], table[0, :, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
            self.register_buffer("table", table)
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            x += self.table[:, :x.size(1)]
            return self.drop(x)
''')


def test_positions_added_to_their_input_in_place_are_checked_on_a_tensor_of_their_own(tmp_path):
    _, output, report, records = run_on_source(tmp_path, "positions_added_in_place.py", IN_PLACE_POSITIONS, "-k",
                                               "positional_encoding and (added_to_input or agrees_with_reference "
                                               "or dropout_on_the_sums)")
    assert report is not None, output
    for check in ("added_to_input", "agrees_with_reference", "dropout_on_the_sums"):
        assert records[("positional_encoding", check)]["verdict"] == "pass", records[("positional_encoding", check)]


HEADS_IN_THE_BATCH = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class Attention(nn.Module):
        def forward(self, query, key, value, keep=None):
            scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
            if keep is not None:   # (batch * heads, Lk): the keys each row may see
                rows = keep.unsqueeze(1).expand(query.size(0), query.size(1), key.size(1))
                scores = scores.masked_fill(rows == 0, -1e9)
            return scores.softmax(-1) @ value


    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.heads, self.size = num_heads, d_model // num_heads
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model) for _ in range(4))
            self.attention = Attention()

        def forward(self, query, key, value, mask=None):
            b, lq, lk = query.size(0), query.size(1), key.size(1)
            merge = lambda t, n: t.view(b, n, self.heads, self.size).transpose(1, 2).reshape(b * self.heads, n,
                                                                                             self.size)
            q, k, v = merge(self.wq(query), lq), merge(self.wk(key), lk), merge(self.wv(value), lk)
            if mask is not None:
                mask = mask.unsqueeze(1).expand(b, self.heads, lk).reshape(b * self.heads, lk)
            out = self.attention(q, k, v, mask).view(b, self.heads, lq, self.size).transpose(1, 2)
            return self.wo(out.reshape(b, lq, self.heads * self.size))
''')


def test_an_attention_its_block_calls_with_the_heads_in_the_batch_is_missing_not_broken(tmp_path):
    """Given (batch, h, L, d_k) queries, it spreads its mask over the wrong axis (a fail under the checker's call
    only) or, multiplying them with ``torch.bmm``, crashes: neither is the author's, whose block runs it."""
    crashing = HEADS_IN_THE_BATCH.replace("scores = query @ key.transpose(-2, -1)",
                                          "scores = torch.bmm(query, key.transpose(1, 2))")
    assert crashing != HEADS_IN_THE_BATCH
    runs = {"heads_in_the_batch_axis.py": (HEADS_IN_THE_BATCH, "masked_keys_do_not_change_outputs"),
            "heads_in_the_batch_crashing.py": (crashing, "output_shape")}
    for filename, (source, check) in runs.items():
        _, output, report, records = run_on_source(tmp_path, filename, source, "-k",
                                                   "attention and (output_shape or masked_keys_do_not_change_outputs)")
        assert report is not None, output
        assert not [r for (component, _), r in records.items() if component == "attention"
                    and r["verdict"] in ("fail", "error")], output
        record = records[("attention", check)]
        assert (record["verdict"], record["cause"]) == ("missing", "adapter.call_not_as_author"), record
        if source is HEADS_IN_THE_BATCH:  # (the crashing one has the reference's attention built in its place)
            record = records[("multi_head_attention", "masked_keys_do_not_change_outputs")]
            assert record["verdict"] == "pass", record


def test_a_sum_its_positional_encoding_drops_out_at_a_low_rate_of_its_own_is_no_evidence_of_no_dropout():
    """A positional encoding dropping its sums out at a fixed 0.1 the configured rate never reaches keeps all 40
    entries of one once in 67 draws: no entry dropped then says nothing (the rate is named by another check); at
    the configured 0.5, or with no dropout of its own at all (or a rate of 0), it does say no dropout."""
    sums = torch.ones(5, 8)
    assert kept_by_chance([0.1], sums) is not None
    assert kept_by_chance([0.5], sums) is None
    assert kept_by_chance([], sums) is None and kept_by_chance([0.0], sums) is None
