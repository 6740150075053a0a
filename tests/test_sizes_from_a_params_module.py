"""A model whose sizes are globals of a ``params`` module, with a global computed from them at import time, and a
hub mixin from a package not installed here among its bases (round 12 of public code, 2026-11-27): the model is
built (the mixin a placeholder, the model an ordinary class), ``num_model_dims`` is its width, and the scale the
module computes from it follows the checker's width, as it followed the author's. Its ``nn.Transformer`` is called
with key-padding masks in eval mode, where torch packs the batch into a nested tensor the checker's hooks cannot
read: the checker's stacks run on the padded batch."""
import textwrap

from adapters.names import argument_role
from tests.suite import run_suite

PARAMS = textwrap.dedent('''
    vocab_size = 1000
    max_seq_len = 64
    num_model_dims = 512
    num_heads = 8
    num_layers = 6
    pad = 0
''')

MODEL = textwrap.dedent('''
    import math

    import torch
    from torch import nn
    from model_hub_not_installed_here import HubMixin

    from params import max_seq_len, num_heads, num_layers, num_model_dims, pad, vocab_size

    embedding_multiplier = math.sqrt(num_model_dims)


    def sinusoids(length, width):
        position = torch.arange(length).unsqueeze(1).float()
        rate = torch.exp(torch.arange(0, width, 2).float() * (-math.log(10000.0) / width))
        table = torch.zeros(length, width)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
        return table


    class Transformer(nn.Module, HubMixin):
        def __init__(self):
            super().__init__()
            self.src_embedding = nn.Embedding(vocab_size, num_model_dims)
            self.tgt_embedding = nn.Embedding(vocab_size, num_model_dims)
            self.register_buffer("table", sinusoids(max_seq_len, num_model_dims))
            self.dropout = nn.Dropout(0.1)
            self.core = nn.Transformer(num_model_dims, num_heads, num_layers, num_layers, 4 * num_model_dims,
                                       batch_first=True)
            self.to_tokens = nn.Linear(num_model_dims, vocab_size)

        def embed(self, lookup, tokens):
            return self.dropout(lookup(tokens) * embedding_multiplier + self.table[:tokens.size(1)])

        def forward(self, src, tgt):
            causal = torch.triu(torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device), 1)
            out = self.core(self.embed(self.src_embedding, src), self.embed(self.tgt_embedding, tgt), tgt_mask=causal,
                            src_key_padding_mask=src == pad, memory_key_padding_mask=src == pad,
                            tgt_key_padding_mask=tgt == pad)
            return self.to_tokens(out)
''')

TRAIN = textwrap.dedent('''
    from model import Transformer

    if __name__ == "__main__":
        model = Transformer()
''')


def test_a_width_spelled_as_a_count_of_model_dims_is_d_model():
    assert [argument_role(n) for n in ("num_model_dims", "n_layers", "num_tokens")] == ["d_model", "N", "vocab_size"]


def test_a_model_mixing_in_a_missing_package_is_built_and_its_derived_scale_follows_the_width(tmp_path):
    folder = tmp_path / "hub_model"
    folder.mkdir()
    for name, text in (("params.py", PARAMS), ("model.py", MODEL), ("train.py", TRAIN)):
        (folder / name).write_text(text)
    code, output, report = run_suite(f"--impl={folder}", "-k", "model and (stacks_scaled or output_shape)", "-p",
                                     "no:xdist", tmp_path=tmp_path)
    assert any(n.startswith("model: Transformer") for n in report["notes"]), report["notes"]
    verdicts = {c["check"]: (c["verdict"], c["cause"]) for c in report["checks"] if c["component"] == "model"}
    assert verdicts["output_shape"][0] == "pass", output
    assert verdicts["embeddings_reach_the_stacks_scaled"][0] == "pass", output
