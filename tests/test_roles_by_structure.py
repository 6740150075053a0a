"""Roles found where names and loading mislead: classes named ``Encoder``/``Decoder`` that are single layers the
model stacks (decided by what builds what N times, §3.1), a class whose method annotation names a package not
installed here, sizes given once per stack (``enc_num_heads``, ``dec_d_ff``), a sinusoid table held as a frozen
parameter whose length argument (``max_tokens``) no name list knows, a module that first puts its folder on
``sys.path``, and a self-attention class beside a separate encoder-decoder attention class in a decoder the
checker cannot build. Each correct version is blamed for nothing; a bug planted in each is still named."""
import textwrap

import pytest

from adapters.candidates import single_layers
from adapters.cells import project_files
from adapters.loading import load_code
from adapters.names import argument_role
from adapters.submission import load_implementation
from tests.suite import run_on_source, run_suite

LAYERS_NAMED_AS_STACKS = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn
    import vocabulary_toolkit_not_installed_here as vt


    class Embeddings(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.lut, self.d_model = nn.Embedding(vocab_size, d_model), d_model

        def forward(self, tokens):
            return self.lut(tokens) * math.sqrt(self.d_model)


    class PositionalEncoding(nn.Module):
        """The sinusoids of §3.5, kept as a parameter that does not learn."""
        def __init__(self, d_model, max_tokens, p=0.1):
            super().__init__()
            position = torch.arange(max_tokens).unsqueeze(1)
            rate = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            self.table = nn.Parameter(torch.zeros(max_tokens, d_model), requires_grad=False)
            self.table.data[:, 0::2] = torch.sin(position * rate)
            self.table.data[:, 1::2] = torch.cos(position * rate)
            self.drop = nn.Dropout(p)

        def forward(self, x):
            return self.drop(x + self.table[: x.size(1)])


    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, n_heads, p=0.1):
            super().__init__()
            self.n_heads, self.d_k = n_heads, d_model // n_heads
            self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
            self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
            self.drop = nn.Dropout(p)

        def split(self, t):
            return t.view(t.size(0), -1, self.n_heads, self.d_k).transpose(1, 2)

        def forward(self, query, key, value, mask=None):
            q, k, v = self.split(self.w_q(query)), self.split(self.w_k(key)), self.split(self.w_v(value))
            scores = q @ k.transpose(-2, -1) / math.sqrt(SCALE)
            if mask is not None:
                scores = scores.masked_fill(mask == 0, -1e9)
            mixed = self.drop(scores.softmax(dim=-1)) @ v
            return self.w_o(mixed.transpose(1, 2).reshape(query.size(0), -1, self.n_heads * self.d_k))


    class PositionwiseFeedForward(nn.Module):
        def __init__(self, d_model, d_ff, p=0.1):
            super().__init__()
            self.up, self.down, self.drop = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.Dropout(p)

        def forward(self, x):
            return self.down(self.drop(torch.relu(self.up(x))))


    class Encoder(nn.Module):
        """One encoder layer: the model stacks them."""
        def __init__(self, d_model, n_heads, d_ff, p=0.1):
            super().__init__()
            self.attn, self.ff = MultiHeadAttention(d_model, n_heads, p), PositionwiseFeedForward(d_model, d_ff, p)
            self.norm1, self.norm2, self.drop = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.Dropout(p)

        def forward(self, x, mask):
            x = self.norm1(x + self.drop(self.attn(x, x, x, mask)))
            return self.norm2(x + self.drop(self.ff(x)))


    class Decoder(nn.Module):
        """One decoder layer: the model stacks them."""
        def __init__(self, d_model, n_heads, d_ff, p=0.1):
            super().__init__()
            self.self_attn, self.cross_attn = MultiHeadAttention(d_model, n_heads, p), MultiHeadAttention(d_model, n_heads, p)
            self.ff = PositionwiseFeedForward(d_model, d_ff, p)
            self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
            self.drop = nn.Dropout(p)

        def forward(self, x, memory, src_mask, tgt_mask):
            x = self.norms[0](x + self.drop(self.self_attn(x, x, x, tgt_mask)))
            x = self.norms[1](x + self.drop(self.cross_attn(x, memory, memory, src_mask)))
            return self.norms[2](x + self.drop(self.ff(x)))


    def padding_mask(tokens, pad=0):
        return (tokens != pad).unsqueeze(1).unsqueeze(2)


    def causal_mask(size):
        return torch.tril(torch.ones(size, size, dtype=torch.bool)).unsqueeze(0).unsqueeze(0)


    class Seq2Seq(nn.Module):
        def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, enc_num_heads=8, dec_num_heads=8,
                     enc_d_ff=2048, dec_d_ff=2048, enc_num_layers=6, dec_num_layers=6, max_tokens=256, p=0.1):
            super().__init__()
            self.src_embed, self.tgt_embed = Embeddings(src_vocab_size, d_model), Embeddings(tgt_vocab_size, d_model)
            self.positions = PositionalEncoding(d_model, max_tokens, p)
            self.encoders = nn.ModuleList([Encoder(d_model, enc_num_heads, enc_d_ff, p) for _ in range(enc_num_layers)])
            self.decoders = nn.ModuleList([Decoder(d_model, dec_num_heads, dec_d_ff, p) for _ in range(dec_num_layers)])
            self.out = nn.Linear(d_model, tgt_vocab_size)

        def forward(self, src, tgt, src_mask, tgt_mask):
            memory = self.positions(self.src_embed(src))
            for layer in self.encoders:
                memory = layer(memory, src_mask)
            x = self.positions(self.tgt_embed(tgt))
            for layer in self.decoders:
                x = layer(x, memory, src_mask, tgt_mask)
            return torch.log_softmax(self.out(x), dim=-1)

        def translate(self, sentence: str, vocabulary: vt.Vocab) -> list:
            return vocabulary.lookup_indices(sentence.split())
''')
CORRECT = LAYERS_NAMED_AS_STACKS.replace("SCALE", "self.d_k")
SCALED_BY_D_MODEL = LAYERS_NAMED_AS_STACKS.replace("SCALE", "self.n_heads * self.d_k")
"""Planted: the scores divided by sqrt(d_model), not sqrt(d_k) (§3.2.1)."""


def blamed(records):
    return {(key, r["cause"]) for key, r in records.items() if r["verdict"] in ("fail", "error")}


def bound_names(tmp_path, source):
    path = tmp_path / "layers_named_as_stacks.py"
    path.write_text(source)
    impl = load_implementation(str(path))
    return {note.split(": ")[0]: note.split(": ")[1].split(" ")[0] for note in impl.notes
            if ": " in note and note.split(": ")[0] in impl.roles}, impl


def test_layers_named_as_stacks_are_layers_and_the_rest_is_found(tmp_path):
    bound, impl = bound_names(tmp_path, CORRECT)
    assert bound["encoder_layer"] == "Encoder" and bound["decoder_layer"] == "Decoder", bound
    assert "encoder" not in impl.roles and "decoder" not in impl.roles, bound
    assert bound["model"] == "Seq2Seq", impl.notes  # (its class loads: an annotation does not stop it)
    assert bound["positional_encoding"] == "PositionalEncoding", impl.notes
    plans = {note.split(": ")[0]: note for note in impl.notes if ": " in note}
    assert "max_tokens=max_len" in plans["positional_encoding"], plans["positional_encoding"]
    assert "enc_num_heads=h" in plans["model"] and "dec_d_ff=d_ff" in plans["model"], plans["model"]


def test_layers_named_as_stacks_are_blamed_for_nothing(tmp_path):
    code, output, report, records = run_on_source(tmp_path, "layers_named_as_stacks.py", CORRECT)
    assert report is not None, output
    assert not blamed(records), blamed(records)
    assert records[("model", "output_shape")]["verdict"] == "pass", records[("model", "output_shape")]


def test_a_bug_in_layers_named_as_stacks_is_still_named(tmp_path):
    code, output, report, records = run_on_source(tmp_path, "layers_named_as_stacks.py", SCALED_BY_D_MODEL, "-k",
                                                  "scaled_by_inverse_sqrt_d_k")
    record = records[("multi_head_attention", "scores_scaled_by_inverse_sqrt_d_k")]
    assert (record["verdict"], record["cause"]) == ("fail", "multi_head_attention.scale.sqrt_d_model"), record
    assert records[("decoder_layer", "every_attention_is_scaled_by_inverse_sqrt_d_k")]["verdict"] == "fail"


STRUCTURE = textwrap.dedent('''
    import torch.nn as nn


    class Block(nn.Module):
        pass


    class Encoder(nn.Module):  # a stack: it repeats Block
        def __init__(self, n):
            super().__init__()
            self.layers = nn.ModuleList([Block() for _ in range(n)])


    class Decoder(nn.Module):  # a layer: the model repeats it
        pass


    class Model(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.encoder = Encoder(n)
            self.decoders = nn.ModuleList()
            for _ in range(n):
                self.decoders.append(Decoder())
''')


def test_a_stack_is_what_repeats_a_block_whatever_the_names(tmp_path):
    (tmp_path / "structure.py").write_text(STRUCTURE)
    loaded = load_code(tmp_path / "structure.py")
    found = {name: obj for name, obj in vars(loaded.module).items() if isinstance(obj, type)}
    assert single_layers(found) == {"Block", "Decoder"}


def test_a_size_given_once_per_stack_is_the_papers_one_size():
    assert [argument_role(n) for n in ("enc_num_heads", "d_ff_decoder", "dec_num_layers", "enc_dropout")] == \
        ["h", "d_ff", "N", "dropout"]


def test_head_widths_spelled_dim_k_and_dim_v_are_the_heads_widths():
    assert [argument_role(n) for n in ("dim_k", "dim_q", "dim_v", "dim_value")] == ["d_k", "d_k", "d_v", "d_v"]


SINGLE_AND_MULTI = textwrap.dedent('''
    import torch.nn as nn


    class EncoderMultiLayer(nn.Module):  # named as a layer too, and first in the alphabet: it stacks the other
        def __init__(self, n_layers, dim_model, dim_ff):
            super().__init__()
            self.layers = nn.ModuleList([EncoderSingleLayer(dim_model, dim_ff) for _ in range(n_layers)])

        def forward(self, x, mask=None):
            for layer in self.layers:
                x = layer(x, mask)
            return x


    class EncoderSingleLayer(nn.Module):
        def __init__(self, dim_model, dim_ff):
            super().__init__()
            self.ff = nn.Sequential(nn.Linear(dim_model, dim_ff), nn.ReLU(), nn.Linear(dim_ff, dim_model))
            self.norm = nn.LayerNorm(dim_model)

        def forward(self, x, mask=None):
            return self.norm(x + self.ff(x))
''')


def test_a_class_stacking_another_layer_candidate_is_the_stack_not_the_layer(tmp_path):
    (tmp_path / "single_and_multi.py").write_text(SINGLE_AND_MULTI)
    impl = load_implementation(str(tmp_path / "single_and_multi.py"))
    assert any(note.startswith("encoder_layer: EncoderSingleLayer") for note in impl.notes), impl.notes
    assert any(note.startswith("encoder: EncoderMultiLayer") for note in impl.notes), impl.notes
    assert argument_role("enc_vocab_size") == "src_vocab" and argument_role("dec_pad_token") is None
    assert argument_role("pos_dropout") == "dropout" and argument_role("pos_max_len") is None  # (§5.4's P_drop)


def test_an_annotation_naming_a_missing_package_does_not_stop_the_class(tmp_path):
    path = tmp_path / "annotated.py"
    path.write_text("import torch.nn as nn\nimport absent_package_xyz\n\n\nclass Reader(nn.Module):\n"
                    "    def read(self, vocab: absent_package_xyz.Vocab) -> int:\n        return 1\n\n\n"
                    "class Broken(nn.Module):\n    size = absent_package_xyz.SIZE\n")
    loaded = load_code(path)
    assert hasattr(loaded.module, "Reader"), [p.message for p in loaded.problems]
    assert "annotations read as text" in loaded.problems[1].message
    assert not hasattr(loaded.module, "Broken")  # (a use that is no annotation still fails, and is reported)
    assert "absent_package_xyz" in loaded.problems[-1].message and len(loaded.problems) == 3


SELF_AND_CROSS = {
    "attention.py": textwrap.dedent('''
        import sys
        sys.path.insert(1, ".")

        import math
        import torch
        import torch.nn as nn


        class SelfAttention(nn.Module):
            """Multi-head self-attention over one unpadded sequence: queries, keys and values from it."""
            def __init__(self, d_model, n_heads, causal=False):
                super().__init__()
                self.n_heads, self.d_k, self.causal = n_heads, d_model // n_heads, causal
                self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)

            def forward(self, x):
                q, k, v = (t.view(x.size(0), -1, self.n_heads, self.d_k).transpose(1, 2)
                           for t in self.qkv(x).chunk(3, dim=-1))
                scores = q @ k.transpose(-2, -1) / math.sqrt(SCALE)
                if self.causal:
                    future = torch.ones(x.size(1), x.size(1), dtype=torch.bool, device=x.device).triu(1)
                    scores = scores.masked_fill(future, -1e9)
                mixed = (scores.softmax(dim=-1) @ v).transpose(1, 2)
                return self.out(mixed.reshape(x.size(0), -1, self.n_heads * self.d_k))


        class CrossAttention(nn.Module):
            """Multi-head encoder-decoder attention: queries from the decoder, keys and values from the memory."""
            def __init__(self, d_model, n_heads):
                super().__init__()
                self.n_heads, self.d_k = n_heads, d_model // n_heads
                self.q, self.kv, self.out = nn.Linear(d_model, d_model), nn.Linear(d_model, 2 * d_model), nn.Linear(d_model, d_model)

            def forward(self, x, memory, mask=None):
                split = lambda t: t.view(t.size(0), -1, self.n_heads, self.d_k).transpose(1, 2)
                q, (k, v) = split(self.q(x)), (split(t) for t in self.kv(memory).chunk(2, dim=-1))
                scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
                if mask is not None:
                    scores = scores.masked_fill(mask == 0, -1e9)
                mixed = (scores.softmax(dim=-1) @ v).transpose(1, 2)
                return self.out(mixed.reshape(x.size(0), -1, self.n_heads * self.d_k))
    '''),
    "layers.py": textwrap.dedent('''
        import sys
        sys.path.insert(1, ".")

        import torch
        import torch.nn as nn

        from attention import CrossAttention, SelfAttention


        class FeedForward(nn.Module):
            def __init__(self, d_model, d_ff):
                super().__init__()
                self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))

            def forward(self, x):
                return self.net(x)


        class DecoderLayer(nn.Module):
            """Its ``scheme`` names a training recipe the checker cannot read: it stays unbuilt."""
            def __init__(self, d_model, n_heads, d_ff, scheme):
                super().__init__()
                self.scheme = scheme
                self.attn, self.cross = SelfAttention(d_model, n_heads, causal=True), CrossAttention(d_model, n_heads)
                self.ff = FeedForward(d_model, d_ff)
                self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])

            def forward(self, x, memory, src_mask=None):
                x = self.norms[0](x + self.attn(x))
                x = self.norms[1](x + self.cross(x, memory, src_mask))
                return self.norms[2](x + self.ff(x))
    '''),
}


def write_project(tmp_path, scale):
    folder = tmp_path / "project"
    folder.mkdir()
    for name, source in SELF_AND_CROSS.items():
        (folder / name).write_text(source.replace("SCALE", scale))
    return folder


def test_modules_setting_up_their_path_are_modules_of_definitions(tmp_path):
    folder = write_project(tmp_path, "self.d_k")
    assert [f.name for f in project_files(folder)] == ["attention.py", "layers.py"]


def test_a_self_attention_class_beside_a_cross_attention_class_is_blamed_for_nothing(tmp_path):
    folder = write_project(tmp_path, "self.d_k")
    code, output, report = run_suite(f"--impl={folder}", tmp_path=tmp_path)
    assert report is not None, output
    records = {(c["component"], c["check"]): c for c in report["checks"]}
    assert not blamed(records), blamed(records)
    assert records[("multi_head_attention", "scores_scaled_by_inverse_sqrt_d_k")]["verdict"] == "pass"
    assert any(n.startswith("decoder_layer: DecoderLayer does not work") for n in report["notes"]), report["notes"]


def test_a_bug_in_the_self_attention_class_is_still_named(tmp_path):
    folder = write_project(tmp_path, "self.n_heads * self.d_k")
    code, output, report = run_suite(f"--impl={folder}", "-k", "scaled_by_inverse_sqrt_d_k", tmp_path=tmp_path)
    records = {(c["component"], c["check"]): c for c in report["checks"]}
    record = records[("multi_head_attention", "scores_scaled_by_inverse_sqrt_d_k")]
    assert (record["verdict"], record["cause"]) == ("fail", "multi_head_attention.scale.sqrt_d_model"), record


CORE_INSIDE_THE_MODEL = '''
import math
import torch
from torch import nn


class Transformer(nn.Module):
    """The core alone, as torch.nn.Transformer: embedded vectors in, vectors out; it refuses token ids."""

    def __init__(self, d_model, heads, d_ff, layers, dropout=0.1):
        super().__init__()
        self.body = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout, batch_first=True)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        if not src.is_floating_point():
            raise TypeError("the core takes embedded vectors")
        return self.body(src, tgt)


class Seq2SeqModel(nn.Module):
    """The author's whole model: embeddings, the core, the pre-softmax map."""

    def __init__(self, src_vocab, tgt_vocab, d_model=16, heads=2, d_ff=32, layers=1, dropout=0.1):
        super().__init__()
        self.d_model = d_model
        self.src_lookup, self.tgt_lookup = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
        self.core = Transformer(d_model, heads, d_ff, layers, dropout)
        self.generator = nn.Linear(d_model, tgt_vocab)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        scale = math.sqrt(self.d_model)
        return self.generator(self.core(self.src_lookup(src) * scale, self.tgt_lookup(tgt) * scale))
'''


def test_a_core_named_transformer_inside_the_authors_model_is_not_the_model(tmp_path):
    """``Transformer`` is the better name, but it takes embedded vectors and fails the model's call: the class that
    builds it (with the embeddings and the pre-softmax map) is the model, not a class named less like one."""
    path = tmp_path / "seq2seq.py"
    path.write_text(CORE_INSIDE_THE_MODEL)
    notes = load_implementation(str(path)).notes
    assert any(note.startswith("model: Seq2SeqModel") for note in notes), notes


LAYERS_REPEATING_THEIR_RESIDUALS = textwrap.dedent('''
    import torch.nn as nn


    class ResidualConnection(nn.Module):
        pass


    class EncoderStack(nn.Module):  # one layer, named a stack: two residual connections, built in a comprehension
        def __init__(self):
            super().__init__()
            self.residuals = nn.ModuleList([ResidualConnection() for _ in range(2)])


    class DecoderStack(nn.Module):  # one layer: three residual connections
        def __init__(self):
            super().__init__()
            self.residuals = nn.ModuleList([ResidualConnection()] * 3)


    class Encoder(nn.Module):  # the stack: N layers
        def __init__(self, num_stacks):
            super().__init__()
            blocks = []
            for _ in range(num_stacks):
                blocks.append(EncoderStack())
            self.blocks = nn.ModuleList(blocks)


    class Decoder(nn.Module):
        def __init__(self, num_stacks):
            super().__init__()
            self.blocks = nn.ModuleList(DecoderStack() for _ in range(num_stacks))
''')


def test_a_layer_repeating_its_two_or_three_residual_connections_is_still_one_layer(tmp_path):
    """§3.1: each layer has two (encoder) or three (decoder) sub-layers, each in a residual connection; a block
    built a literal two or three times is a layer's sub-layer, not the N layers of a stack."""
    (tmp_path / "residuals.py").write_text(LAYERS_REPEATING_THEIR_RESIDUALS)
    loaded = load_code(tmp_path / "residuals.py")
    found = {name: obj for name, obj in vars(loaded.module).items() if isinstance(obj, type)}
    assert single_layers(found) == {"EncoderStack", "DecoderStack"}
