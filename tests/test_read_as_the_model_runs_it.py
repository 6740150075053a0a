"""What the author's own model run shows is how its blocks are read: a model that makes its padding masks from the
pad tokens, True where a token is padding, gives its layers masks read True = blocked; a layer that registers its
feed-forward network before the attention it runs first has its sub-layers placed in the order they run (§3.1).
The correct version is blamed for nothing; the same layer reading its masks the other way round is still named."""
import textwrap

from tests.suite import run_on_source

BLOCKED_MASKS = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn

    PAD = 0


    class ScaledDotProductAttention(nn.Module):
        def forward(self, q, k, v, mask=None):
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
            if mask is not None:
                scores = scores.masked_fill(mask == 1, -1e9)   # True where the key is padding
            return scores.softmax(-1) @ v


    class Attention(nn.Module):
        def __init__(self, heads, width):
            super().__init__()
            self.heads, self.width, self.attend = heads, width, ScaledDotProductAttention()
            self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
            self.out = nn.Linear(width, width, bias=False)

        def forward(self, q, k, v, causal=False, padding_mask=None):
            batch, size = q.size(0), self.width // self.heads
            split = lambda t: t.view(batch, -1, self.heads, size).transpose(1, 2)
            q, k, v = split(self.query(q)), split(self.key(k)), split(self.value(v))
            if causal:
                future = torch.triu(torch.ones(q.size(2), k.size(2), dtype=torch.bool), 1)
                padding_mask = future if padding_mask is None else padding_mask | future
            return self.out(self.attend(q, k, v, padding_mask).transpose(1, 2).reshape(batch, -1, self.width))


    class FeedForward(nn.Module):
        def __init__(self, width, hidden):
            super().__init__()
            self.inner, self.outer = nn.Linear(width, hidden), nn.Linear(hidden, width)

        def forward(self, x):
            return self.outer(torch.relu(self.inner(x)))


    class EncoderLayer(nn.Module):
        def __init__(self, width, heads, hidden, dropout):
            super().__init__()
            self.feed_forward = FeedForward(width, hidden)      # registered first, run second
            self.attention = Attention(heads, width)
            self.norm_after_attention, self.norm_after_feed_forward = nn.LayerNorm(width), nn.LayerNorm(width)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x, padding_mask):
            x = self.norm_after_attention(x + self.dropout(self.attention(x, x, x, padding_mask=padding_mask)))
            return self.norm_after_feed_forward(x + self.dropout(self.feed_forward(x)))


    class DecoderLayer(nn.Module):
        def __init__(self, width, heads, hidden, dropout):
            super().__init__()
            self.feed_forward = FeedForward(width, hidden)
            self.self_attention, self.cross_attention = Attention(heads, width), Attention(heads, width)
            self.norms = nn.ModuleList([nn.LayerNorm(width) for _ in range(3)])
            self.dropout = nn.Dropout(dropout)

        def forward(self, x, memory, padding_mask_enc, padding_mask_dec=None):
            x = self.norms[0](x + self.dropout(self.self_attention(x, x, x, True, padding_mask_dec)))
            x = self.norms[1](x + self.dropout(self.cross_attention(x, memory, memory, padding_mask=padding_mask_enc)))
            return self.norms[2](x + self.dropout(self.feed_forward(x)))


    class Positions(nn.Module):
        def __init__(self, width, max_len=64):
            super().__init__()
            position = torch.arange(max_len).unsqueeze(1)
            rates = torch.exp(torch.arange(0, width, 2) * (-math.log(10000.0) / width))
            table = torch.zeros(max_len, width)
            table[:, 0::2], table[:, 1::2] = torch.sin(position * rates), torch.cos(position * rates)
            self.register_buffer("table", table)

        def forward(self, x):
            return x + self.table[:x.size(1)]


    class Transformer(nn.Module):
        def __init__(self, src_vocab, tgt_vocab, width=512, heads=8, hidden=2048, layers=6, dropout=0.1):
            super().__init__()
            self.width = width
            self.source_embedding = nn.Embedding(src_vocab, width)
            self.target_embedding = nn.Embedding(tgt_vocab, width)
            self.positions, self.dropout = Positions(width), nn.Dropout(dropout)
            self.encoder = nn.ModuleList([EncoderLayer(width, heads, hidden, dropout) for _ in range(layers)])
            self.decoder = nn.ModuleList([DecoderLayer(width, heads, hidden, dropout) for _ in range(layers)])
            self.to_words = nn.Linear(width, tgt_vocab)

        def forward(self, source, target):
            source_padding = (source == PAD).unsqueeze(1).unsqueeze(2)
            target_padding = (target == PAD).unsqueeze(1).unsqueeze(2)
            memory = self.dropout(self.positions(self.source_embedding(source) * math.sqrt(self.width)))
            for layer in self.encoder:
                memory = layer(memory, source_padding)
            stream = self.dropout(self.positions(self.target_embedding(target) * math.sqrt(self.width)))
            for layer in self.decoder:
                stream = layer(stream, memory, source_padding, target_padding)
            return self.to_words(stream)
''')

CHECKS = ("(encoder_layer or decoder_layer) and (masked_keys_do_not_change_outputs or layer_placement or "
          "every_parameter_receives_gradient) or attention and masked")


def test_layers_given_masks_true_where_padding_and_run_out_of_registration_order_are_read_so(tmp_path):
    _, output, report, records = run_on_source(tmp_path, "blocked_masks.py", BLOCKED_MASKS, "-k", CHECKS)
    assert report is not None, output
    for component, check in [("attention", "masked_keys_do_not_change_outputs"),
                             ("attention", "masked_attention_weights_are_zero")]:
        assert records[(component, check)]["verdict"] == "pass", records[(component, check)]
    for component in ("encoder_layer", "decoder_layer"):
        for check in ("masked_keys_do_not_change_outputs", "every_parameter_receives_gradient"):
            record = records[(component, check)]
            assert record["verdict"] == "pass", record
        placement = records[(component, "layer_placement")]  # (an attention without a bias on its output map
        assert placement["verdict"] in ("pass", "missing"), placement  # outputs 0 under the probe: unseen, not blamed


def test_attention_reading_the_models_masks_the_other_way_round_is_still_named_on_the_model(tmp_path):
    """The attention reads True = may attend while the model marks the padding True: the model attends to nothing
    but padding, which its own outputs show."""
    inverted = BLOCKED_MASKS.replace("scores.masked_fill(mask == 1, -1e9)", "scores.masked_fill(mask == 0, -1e9)")
    assert inverted != BLOCKED_MASKS
    _, output, report, records = run_on_source(tmp_path, "inverted.py", inverted, "-k",
                                               "model and appended_padding_does_not_change_outputs")
    record = records[("model", "appended_padding_does_not_change_outputs")]
    assert record["verdict"] == "fail", record
