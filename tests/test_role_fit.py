"""A role is bound only to a class whose structure fits it: a generator maps d_model to a vocabulary (§3.4), so an
attention head whose name is near one of the generator's (``Head``, ``LMHead``) is never bound to it, while a real
generator is bound and its bugs named."""
import textwrap

import pytest

from adapters.candidates import maps_to_a_vocabulary
from adapters.loading import load_code
from adapters.submission import load_implementation
from tests.suite import run_suite

HEADS = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class Head(nn.Module):
        """One attention head: its own query, key and value maps, d_model -> d_k."""
        def __init__(self, d_model, d_k):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(d_model, d_k), nn.Linear(d_model, d_k), nn.Linear(d_model, d_k)

        def forward(self, x, context=None):
            source = x if context is None else context
            scores = self.q(x) @ self.k(source).transpose(-2, -1) / math.sqrt(self.q.out_features)
            return scores.softmax(-1) @ self.v(source)


    class OutputLayer(nn.Module):
        """The decoder's output to log-probabilities over the target vocabulary."""
        def __init__(self, d_model, vocab_size):
            super().__init__()
            self.logits = nn.Linear(d_model, vocab_size)

        def forward(self, x):
            return self.logits(x).log_softmax(dim=-1)
''')


def test_an_attention_head_is_no_generator_and_a_vocabulary_map_is(tmp_path):
    path = tmp_path / "heads.py"
    path.write_text(HEADS)
    module = vars(load_code(path).module)
    assert not maps_to_a_vocabulary(module["Head"])
    assert maps_to_a_vocabulary(module["OutputLayer"])


def test_code_without_a_generator_class_leaves_the_role_unbound(tmp_path):
    path = tmp_path / "heads.py"
    path.write_text(HEADS.split("class OutputLayer")[0])
    impl = load_implementation(str(path))
    assert not impl.has("generator"), impl.notes


@pytest.mark.parametrize("planted, expected", [(None, None), ("dim=1", "generator.softmax_wrong_axis")])
def test_a_generator_beside_heads_is_bound_and_its_bug_named(tmp_path, planted, expected):
    path = tmp_path / "heads.py"
    path.write_text(HEADS.replace("dim=-1", planted) if planted else HEADS)
    code, output, report = run_suite(f"--impl={path}", "-k", "generator", tmp_path=tmp_path)
    checks = [c for c in report["checks"] if c["component"] == "generator"]
    assert any(c["verdict"] == "pass" for c in checks), output
    flagged = {c["cause"] for c in checks if c["verdict"] in ("fail", "error")}
    assert expected in flagged if expected else flagged == set(), output


XY_MODEL = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class Transformer_Encoder_Decoder(nn.Module):
        """A model called as forward(x, y): it makes its masks from the pad index its constructor takes; its
        sinusoid table is as long as the longer of its two length bounds (§3.5)."""
        def __init__(self, vocab_size, num_layers, num_heads, embed_dim, max_input_length, max_target_length,
                     pad_idx, dropout=0.1):
            super().__init__()
            self.pad_idx, self.embed_dim = pad_idx, embed_dim
            self.embed = nn.Embedding(vocab_size, embed_dim)
            position = torch.arange(max(max_input_length, max_target_length)).unsqueeze(1).float()
            rates = torch.exp(torch.arange(0, embed_dim, 2).float() * (-math.log(10000.0) / embed_dim))
            table = torch.zeros(position.size(0), embed_dim)
            table[:, 0::2], table[:, 1::2] = torch.sin(position * rates), torch.cos(position * rates)
            self.register_buffer("table", table)
            self.drop = nn.Dropout(dropout)
            sizes = dict(d_model=embed_dim, nhead=num_heads, dim_feedforward=4 * embed_dim, dropout=dropout,
                         batch_first=True)
            self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**sizes), num_layers,
                                                 enable_nested_tensor=False)
            self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**sizes), num_layers)
            self.out = nn.Linear(embed_dim, vocab_size)

        def inputs(self, tokens):
            return self.drop(self.embed(tokens) * math.sqrt(self.embed_dim) + self.table[: tokens.size(1)])

        def encode(self, src, src_mask):
            return self.encoder(self.inputs(src), src_key_padding_mask=src_mask)

        def decode(self, memory, src_mask, tgt, tgt_mask):
            states = self.decoder(self.inputs(tgt), memory, tgt_mask=tgt_mask, memory_key_padding_mask=src_mask)
            return self.out(states)

        def forward(self, x, y):
            future = torch.triu(torch.ones(y.size(1), y.size(1), dtype=torch.bool), diagonal=1)
            return self.decode(self.encode(x, x == self.pad_idx), x == self.pad_idx, y, tgt_mask=future)


    if __name__ == "__main__":
        model = Transformer_Encoder_Decoder(11, 2, 2, 8, 20, 20, 0)
        print(model(torch.tensor([[3, 4, 5, 0]]), torch.tensor([[1, 6, 7]])).shape)
''')


def test_the_model_the_authors_run_completes_is_bound_whatever_its_name(tmp_path):
    """``Transformer_Encoder_Decoder``'s longest run of words names an encoder; its forward pass, completed in the
    author's own run, says it is the model; its length bounds, sizing one table together, are length bounds. Its
    ``encode`` and ``decode`` take masks in a shape only its own ``forward`` shows: they are not called with the
    checker's."""
    path = tmp_path / "xy.py"
    path.write_text(XY_MODEL)
    impl = load_implementation(str(path))
    assert impl.has("model"), impl.notes
    assert "max_input_length=max_len" in next(n for n in impl.notes if n.startswith("model: "))


@pytest.mark.parametrize("planted, expected", [(None, None), ("tgt_mask=future", "model.future_visible")])
def test_a_model_making_its_own_masks_passes_and_a_planted_bug_is_named(tmp_path, planted, expected):
    path = tmp_path / "xy.py"
    path.write_text(XY_MODEL.replace(planted, "tgt_mask=None") if planted else XY_MODEL)
    code, output, report = run_suite(f"--impl={path}", "-k", "model and (future or masked_keys or padded_source)",
                                     tmp_path=tmp_path)
    checks = [c for c in report["checks"] if c["component"] == "model"]
    assert any(c["verdict"] == "pass" for c in checks), output
    flagged = {c["cause"] for c in checks if c["verdict"] in ("fail", "error")}
    assert expected in flagged if expected else flagged == set(), output


COMBINED_EMBEDDING = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class Input_Stage(nn.Module):
        """Token vectors scaled by sqrt(d_model) plus sinusoids (§3.4, §3.5), in one block named for neither."""
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.lookup, self.d_model = nn.Embedding(vocab_size, d_model), d_model

        def forward(self, tokens):
            position = torch.arange(tokens.size(1)).unsqueeze(1).float()
            rates = torch.exp(torch.arange(0, self.d_model, 2).float() * (-math.log(10000.0) / self.d_model))
            table = torch.zeros(tokens.size(1), self.d_model)
            table[:, 0::2], table[:, 1::2] = torch.sin(position * rates), torch.cos(position * rates)
            return self.lookup(tokens) * math.sqrt(self.d_model) + table
''')


@pytest.mark.parametrize("scale, verdict", [("math.sqrt(self.d_model)", "pass"), ("1.0", "fail")])
def test_a_combined_embedding_block_is_found_by_what_it_does(tmp_path, scale, verdict):
    """A block named for no role that looks tokens up and adds their positions is the embedding (no model shows
    it): bound, a right scale passes and a missing one is named."""
    path = tmp_path / "stage.py"
    path.write_text(COMBINED_EMBEDDING.replace("math.sqrt(self.d_model) + table", f"{scale} + table"))
    code, output, report = run_suite(f"--impl={path}", "-k", "embedding_scaled", tmp_path=tmp_path)
    assert [c["verdict"] for c in report["checks"] if c["component"] == "embedding"] == [verdict], output
