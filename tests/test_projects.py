"""Code as people publish it: a project loaded the way its author runs it (sibling, root and relative imports), its
constructor arguments learned by building when their names say nothing, and the checker's own failures never
reported as the author's."""
import textwrap

from adapters.binding import discover
from adapters.building import PROBE
from adapters.construction import constructor_plan, learn_arguments
from adapters.loading import load_code
from adapters.submission import load_implementation
from tests import mutants
from tests.suite import run_suite

FFN = '''
import torch
import torch.nn as nn


class PositionwiseFeedforwardLayer(nn.Module):
    """A feed-forward block with argument names that say nothing of the paper (hid_dim for d_model, pf_dim for
    d_ff): the checker has to learn them from the weights they shape."""

    def __init__(self, hid_dim, pf_dim, dropout):
        super().__init__()
        self.expand = nn.Linear(hid_dim, pf_dim)
        self.drop = nn.Dropout(dropout)
        self.project = nn.Linear(pf_dim, hid_dim)

    def forward(self, x):
        inner = self.drop(self.expand(x).clamp(min=0))
        return self.project(inner)
'''


def write(folder, files):
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return folder


def namespace_of(source):
    namespace = {}
    exec(compile(source, "<test>", "exec"), namespace)
    return namespace


def test_arguments_named_otherwise_are_learned_from_the_weights_they_shape():
    ffn = namespace_of(FFN)["PositionwiseFeedforwardLayer"]
    assert constructor_plan(ffn, "feed_forward", {}) == {"hid_dim": "d_model", "pf_dim": "d_ff", "dropout": "dropout"}


def test_arguments_the_math_does_not_use_get_harmless_values():
    source = FFN + textwrap.dedent('''
        class Encoder(nn.Module):
            def __init__(self, input_dim, hid_dim, n_layers, pf_dim, dropout, device, src_pad_idx, max_length=100):
                super().__init__()
                self.device = device
                self.tok_embedding = nn.Embedding(input_dim, hid_dim)
                self.layers = nn.ModuleList([PositionwiseFeedforwardLayer(hid_dim, pf_dim, dropout)
                                             for _ in range(n_layers)])
        ''')
    encoder = namespace_of(source)["Encoder"]
    learned = learn_arguments(encoder, "encoder", {"input_dim": None, "hid_dim": None, "n_layers": None,
                                                   "pf_dim": None, "dropout": "dropout", "device": None,
                                                   "src_pad_idx": None}, ["input_dim", "hid_dim", "n_layers",
                                                                          "pf_dim", "device", "src_pad_idx"], {})
    assert learned == {"input_dim": "vocab_size", "hid_dim": "d_model", "n_layers": "N", "pf_dim": "d_ff",
                       "device": "value:'cpu'", "src_pad_idx": "pad_idx"}
    assert PROBE.N not in (30, 42) and PROBE.d_model not in (30, 42)  # the probe values are told apart


def test_input_dim_read_as_a_width_by_its_name_is_learned_as_a_vocabulary():
    source = FFN + textwrap.dedent('''
        class Encoder(nn.Module):
            def __init__(self, input_dim, hid_dim, pf_dim, dropout):
                super().__init__()
                self.tok_embedding = nn.Embedding(input_dim, hid_dim)
                self.ff = PositionwiseFeedforwardLayer(hid_dim, pf_dim, dropout)
        ''')
    plan = constructor_plan(namespace_of(source)["Encoder"], "encoder", {})
    assert plan == {"input_dim": "vocab_size", "hid_dim": "d_model", "pf_dim": "d_ff", "dropout": "dropout"}


def test_a_file_of_a_package_is_loaded_with_its_relative_and_root_imports(tmp_path):
    project = write(tmp_path / "project", {
        "LICENSE": "MIT",
        "utils/helpers.py": "def width(d):\n    return d\n",
        "utils/__init__.py": "",
        "modules/__init__.py": "",
        "modules/feed_forward.py": FFN,
        "modules/model.py": "from .feed_forward import PositionwiseFeedforwardLayer\nfrom utils.helpers import width\n",
    })
    loaded = load_code(project / "modules" / "model.py")
    assert loaded.problems == [], [p.message for p in loaded.problems]
    assert "modules.feed_forward" in loaded.project_modules()
    impl = load_implementation(str(project / "modules" / "model.py"))
    assert "feed_forward" in impl.roles, impl.notes


def test_a_name_whose_import_failed_for_lack_of_a_package_is_no_finding(tmp_path):
    source = FFN + textwrap.dedent('''
        try:
            import pandas_is_not_installed_here as pd
        except ImportError:
            pass
        import altair_is_not_installed_either as alt


        class Generator(nn.Module):
            def __init__(self, d_model, vocab_size):
                super().__init__()
                self.proj = nn.Linear(d_model, vocab_size)

            def forward(self, x):
                alt.Chart(x)
                return torch.log_softmax(self.proj(x), dim=-1)
        ''')
    path = write(tmp_path, {"model.py": source}) / "model.py"
    code, output, report = run_suite(f"--impl={path}", "-m", "generator", tmp_path=tmp_path)
    generator = [c for c in report["checks"] if c["component"] == "generator" and c["verdict"] != "pass"]
    assert generator and all(c["verdict"] == "missing" for c in generator), output
    assert {c["cause"] for c in generator} >= {"adapter.import_failed"}
    assert "altair_is_not_installed_either" in next(c["message"] for c in generator
                                                    if c["cause"] == "adapter.import_failed")


def test_a_stack_that_embeds_token_ids_itself_is_not_blamed_for_the_vectors_the_checker_gives_it(tmp_path):
    source = FFN + textwrap.dedent('''
        class Encoder(nn.Module):
            def __init__(self, input_dim, hid_dim, n_layers, pf_dim, dropout):
                super().__init__()
                self.tok_embedding = nn.Embedding(input_dim, hid_dim)
                self.layers = nn.ModuleList([PositionwiseFeedforwardLayer(hid_dim, pf_dim, dropout)
                                             for _ in range(n_layers)])

            def forward(self, src, src_mask):
                x = self.tok_embedding(src)
                for layer in self.layers:
                    x = layer(x)
                return x
        ''')
    path = write(tmp_path, {"model.py": source}) / "model.py"
    code, output, report = run_suite(f"--impl={path}", "-m", "encoder", tmp_path=tmp_path)
    encoder = [c for c in report["checks"] if c["component"] == "encoder"]
    assert not [c for c in encoder if c["verdict"] == "error"], output  # (its count fails: it has no attention)
    called = [c for c in encoder if c["check"] in ("output_shape", "eval_mode_is_deterministic")]
    assert called and {c["cause"] for c in called} == {"adapter.takes_token_ids"}, output


def test_a_stack_that_unpacks_its_token_ids_shape_is_built_into_the_model_as_it_is(tmp_path):
    """``batch_size, src_len = src.shape`` fails on the canonical vectors before any embedding does: the stack still
    works given token ids, so the blocks that build it are built with it, not with the reference's in its place."""
    source = FFN + textwrap.dedent('''
        class Encoder(nn.Module):
            def __init__(self, input_dim, hid_dim, n_layers, pf_dim, dropout, max_length=100):
                super().__init__()
                self.tok_embedding = nn.Embedding(input_dim, hid_dim)
                self.pos_embedding = nn.Embedding(max_length, hid_dim)
                self.layers = nn.ModuleList([PositionwiseFeedforwardLayer(hid_dim, pf_dim, dropout)
                                             for _ in range(n_layers)])

            def forward(self, src, src_mask):
                batch_size, src_len = src.shape
                pos = torch.arange(src_len, device=src.device).unsqueeze(0).repeat(batch_size, 1)
                x = self.tok_embedding(src) + self.pos_embedding(pos)
                for layer in self.layers:
                    x = layer(x)
                return x
        ''')
    loaded = load_code(str(write(tmp_path, {"model.py": source}) / "model.py"))
    modules = loaded.project_modules()
    found = discover(loaded.namespace(modules), loaded.module.__name__, {}, modules)
    assert found.bindings["encoder"].takes_token_ids and found.bindings["encoder"].composes, found.notes


def test_a_key_padding_helper_of_sequence_first_code_is_called_with_length_by_batch_tokens(tmp_path):
    """Code in torch's (length, batch) layout builds its key_padding_mask (batch, length), True at the padding, from
    (length, batch) token ids: called so, the helper is right; called with (batch, length) tokens it was not."""
    source = textwrap.dedent('''
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        def generate_square_subsequent_mask(sz):
            return torch.triu(torch.full((sz, sz), float("-inf")), diagonal=1)


        def make_key_padding_mask(tokens, pad_idx):
            return (tokens == pad_idx).transpose(0, 1)


        class EncoderLayer(nn.Module):
            def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1):
                super().__init__()
                self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
                self.linear1, self.linear2 = nn.Linear(d_model, dim_feedforward), nn.Linear(dim_feedforward, d_model)
                self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
                self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

            def forward(self, src, src_mask=None, src_key_padding_mask=None):
                attended = self.self_attn(src, src, src, attn_mask=src_mask, key_padding_mask=src_key_padding_mask)[0]
                src = self.norm1(src + self.dropout1(attended))
                return self.norm2(src + self.dropout2(self.linear2(F.relu(self.linear1(src)))))
        ''')
    path = write(tmp_path, {"layers.py": source}) / "layers.py"
    impl = load_implementation(str(path))
    assert any(n.startswith("padding_mask: make_key_padding_mask (called with (length, batch)") for n in impl.notes), \
        impl.notes
    code, output, report = run_suite(f"--impl={path}", "-k", "padding_mask_helper", tmp_path=tmp_path)
    checked = [c for c in report["checks"] if c["component"] == "padding_mask"]
    assert checked and {c["verdict"] for c in checked} == {"pass"}, output


def test_a_block_that_builds_only_on_some_sizes_says_the_checker_chose_them(tmp_path):
    source = textwrap.dedent('''
        import torch.nn as nn


        class PositionwiseFeedForward(nn.Module):
            def __init__(self, d_model, d_ff, dropout):
                super().__init__()
                assert d_model % 4 == 0, "this code supports widths divisible by 4 only"
                self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
                self.dropout = nn.Dropout(dropout)

            def forward(self, x):
                return self.w_2(self.dropout(self.w_1(x).relu()))
        ''')
    path = write(tmp_path, {"ffn.py": source}) / "ffn.py"
    code, output, report = run_suite(f"--impl={path}", "-m", "feed_forward", tmp_path=tmp_path)
    ffn = [c for c in report["checks"] if c["component"] == "feed_forward"]
    assert not [c for c in ffn if c["verdict"] in ("fail", "error")], output
    assert "adapter.configuration_not_supported" in {c["cause"] for c in ffn}, output
    assert {c["verdict"] for c in ffn} >= {"pass"}  # the sizes it supports are checked


def test_call_arguments_the_math_does_not_use_get_harmless_values(tmp_path):
    source = textwrap.dedent('''
        import math
        import torch


        def attention(query, key, value, mask, dropout):
            scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
            if mask is not None:
                scores = scores.masked_fill(mask == 0, -1e9)
            weights = scores.softmax(-1)
            if dropout is not None:
                weights = dropout(weights)
            return weights @ value, weights


        def subsequent_mask(size, device):
            return torch.tril(torch.ones(1, size, size, device=device)).bool()
        ''')
    path = write(tmp_path, {"attention.py": source}) / "attention.py"
    impl = load_implementation(str(path))
    assert {"attention", "subsequent_mask"} <= set(impl.roles), impl.notes
    code, output, report = run_suite(f"--impl={path}", "-m", "attention or subsequent_mask", tmp_path=tmp_path)
    checked = [c for c in report["checks"] if c["component"] in ("attention", "subsequent_mask")]
    assert checked and {c["verdict"] for c in checked} <= {"pass", "missing"}, output
    assert {c["component"] for c in checked if c["verdict"] == "pass"} == {"attention", "subsequent_mask"}


def test_a_mask_helper_named_otherwise_is_found_by_what_it_makes_and_sets_the_convention(tmp_path):
    source = textwrap.dedent('''
        import torch


        def create_mask(seq_len, device):
            """1 where the connection is blocked."""
            return torch.triu(torch.ones(seq_len, seq_len), diagonal=1).bool().to(device)


        def train(epochs):
            raise AssertionError("discovery must not call this")
        ''')
    impl = load_implementation(str(write(tmp_path, {"masks.py": source}) / "masks.py"))
    assert "subsequent_mask: create_mask" in impl.notes, impl.notes
    assert any(n.startswith("masks: boolean, True = blocked") for n in impl.notes), impl.notes


def test_an_importable_module_name_is_discovered_like_its_file(tmp_path, monkeypatch):
    write(tmp_path, {"theirpkg/__init__.py": "", "theirpkg/layers.py": FFN,
                     "theirpkg/models.py": "from .layers import PositionwiseFeedforwardLayer\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    impl = load_implementation("theirpkg.models")
    assert "feed_forward" in impl.roles, impl.notes
    assert any(n.startswith("feed_forward: PositionwiseFeedforwardLayer") for n in impl.notes), impl.notes


def test_a_project_folder_is_read_whole_and_its_scripts_are_not_run(tmp_path):
    ran = tmp_path / "trained"
    project = write(tmp_path / "repo", {
        "README.md": "a project",
        "models/definitions/layers.py": FFN,
        "utils/constants.py": "WIDTH = 512\n",
        "train.py": "from models.definitions.layers import PositionwiseFeedforwardLayer\n"
                    f"open({str(ran)!r}, 'w').write('the script ran')\n",
    })
    impl = load_implementation(str(project))
    assert "loaded as project: 1 code cell(s)" in impl.notes
    assert "feed_forward" in impl.roles, impl.notes
    assert not ran.exists()


def test_a_plain_folder_named_as_a_standard_module_is_imported_as_its_scripts_run(tmp_path):
    """``code/model.py`` with no ``__init__.py``: ``code`` is the standard library's module, so ``code.model`` is no
    import of its author's, who runs the scripts from inside ``code/``: its modules are read as top-level ones (a
    name no other test's project uses: the tests load many projects in one process)."""
    project = write(tmp_path / "repo", {"README.md": "a project", "code/plain_folder_layers.py": FFN})
    impl = load_implementation(str(project))
    assert "feed_forward" in impl.roles, impl.notes


def test_a_folder_whose_modules_import_its_folders_by_name_is_a_project_though_it_has_an_init(tmp_path):
    """An empty ``__init__.py`` at the root, the modules importing ``from models.layers import ...``: the code runs
    from the folder itself, so it is read as a project root, not imported as a package from the folder above."""
    project = write(tmp_path / "repo", {
        "__init__.py": "",
        "models/layers.py": FFN,
        "models/block.py": "from models.layers import PositionwiseFeedforwardLayer\n",
    })
    impl = load_implementation(str(project))
    assert "loaded as project: 1 code cell(s)" in impl.notes
    assert "feed_forward" in impl.roles, impl.notes


def test_a_name_two_subpackages_define_is_bound_to_the_class_the_model_builds(tmp_path):
    """Two sub-packages each define the reference's class names (an older copy with a GELU network sorts first):
    the roles are the classes the package's model builds, kept apart under their qualified names."""
    older = mutants.apply(mutants.BY_NAME["ffn_gelu"])
    package = write(tmp_path / "project", {
        "twins/__init__.py": "from twins.current.model import Transformer\n",
        "twins/a_older/__init__.py": "", "twins/a_older/model.py": older,
        "twins/current/__init__.py": "", "twins/current/model.py": mutants.reference_source()}) / "twins"
    impl = load_implementation(str(package))
    bound = {n.split(":")[0]: n.split(":")[1].split()[0] for n in impl.notes if ": " in n and not n.startswith("loaded")}
    assert bound["model"] == "Transformer", impl.notes
    network = "twins.current.model.FeedForwardNetwork"
    assert bound["feed_forward"] == network, impl.notes
    assert bound["encoder_layer"] == "twins.current.model.EncoderLayer", impl.notes


TARGET_MASK = '''
import torch


def make_trg_mask(trg, pad_idx=0):
    """Padding and subsequent positions in one mask, True = may attend."""
    pad = (trg != pad_idx).unsqueeze({axis})
    return pad & torch.tril(torch.ones(trg.size(1), trg.size(1))).bool()
'''


def test_a_target_mask_helper_taking_tokens_is_checked_on_a_padded_target(tmp_path):
    verdicts = {}
    for name, axis in (("keys", -2), ("queries", -1)):
        path = write(tmp_path / name, {"masks.py": TARGET_MASK.format(axis=axis)}) / "masks.py"
        assert "subsequent_mask: make_trg_mask" in load_implementation(str(path)).notes
        _, output, report = run_suite(f"--impl={path}", "-k", "target_mask_helper", tmp_path=tmp_path / name)
        verdicts[name] = {(c["verdict"], c.get("cause")) for c in report["checks"]}
    assert verdicts["keys"] == {("pass", "")}, verdicts
    assert verdicts["queries"] == {("fail", "subsequent_mask.padding_masks_queries")}, verdicts


SEQUENCE_FIRST_MODEL = '''
import torch
import torch.nn as nn


def square_subsequent_mask(size):
    """True above the diagonal: the later positions are blocked."""
    return torch.ones(size, size, dtype=torch.bool).triu(1)


def create_padding_mask(tokens, pad_idx):
    """(batch, seq_len) from (seq_len, batch) tokens, as nn.Transformer takes it: True at {where}."""
    return (tokens {op} pad_idx).transpose(0, 1)


class Translator(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, nhead, num_layers, dim_feedforward, dropout):
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab_size, d_model)
        self.tgt_emb = nn.Embedding(tgt_vocab_size, d_model)
        self.transformer = nn.Transformer(d_model, nhead, num_layers, num_layers, dim_feedforward, dropout)
        self.out = nn.Linear(d_model, tgt_vocab_size)

    def forward(self, src, tgt, tgt_mask=None, src_padding_mask=None):
        return self.out(self.transformer(self.src_emb(src), self.tgt_emb(tgt), tgt_mask=tgt_mask,
                                         src_key_padding_mask=src_padding_mask,
                                         memory_key_padding_mask=src_padding_mask))
'''


def test_a_padding_helper_of_sequence_first_code_is_given_sequence_first_tokens(tmp_path):
    """Code written for torch's (seq_len, batch) tokens makes its (batch, seq_len) key-padding masks from them: the
    helper is called in that layout, so only a real mistake in it is reported."""
    verdicts = {}
    for name, where, op in (("right", "the padding", "=="), ("inverted", "the real tokens", "!=")):
        path = write(tmp_path / name, {"translator.py": SEQUENCE_FIRST_MODEL.format(where=where, op=op)})
        impl = load_implementation(str(path / "translator.py"))
        assert "padding_mask: create_padding_mask ((sequence, batch) tokens, as the rest of the code)" in impl.notes, \
            impl.notes
        _, output, report = run_suite(f"--impl={path / 'translator.py'}", "-k", "padding_mask_helper",
                                      tmp_path=tmp_path / name)
        verdicts[name] = {(c["verdict"], c.get("cause")) for c in report["checks"]}
    assert verdicts["right"] == {("pass", "")}, verdicts
    assert verdicts["inverted"] == {("fail", "padding_mask.inverted")}, verdicts


SRC_BLOCKS = '''
import torch.nn as nn

from tinypkg.activations import rectify


class PositionwiseFeedforwardLayer(nn.Module):
    """The position-wise network (§3.3), its activation imported from the package by its installed name."""

    def __init__(self, hid_dim, pf_dim, dropout):
        super().__init__()
        self.expand = nn.Linear(hid_dim, pf_dim)
        self.drop = nn.Dropout(dropout)
        self.project = nn.Linear(pf_dim, hid_dim)

    def forward(self, x):
        return self.project(self.drop(rectify(self.expand(x))))
'''
SRC_LAYOUT = {
    "pyproject.toml": '[project]\nname = "tinypkg"\n\n[tool.setuptools.packages.find]\nwhere = ["src"]\n',
    "src/tinypkg/__init__.py": "from tinypkg.blocks import PositionwiseFeedforwardLayer\n",
    "src/tinypkg/activations.py": "import torch\n\n\ndef rectify(x):\n    return torch.clamp(x, min=0)\n",
    "src/tinypkg/blocks.py": SRC_BLOCKS,
}


def test_a_src_layout_package_importing_itself_absolutely_is_imported_as_installed(tmp_path):
    """src/tinypkg imports itself as ``tinypkg`` (the author installs the project): the folder its packaging names
    is put on the import path, and its modules take the names installing gives them; a bug planted in the module
    the others import absolutely is still named."""
    correct = write(tmp_path / "correct", SRC_LAYOUT)
    loaded = load_code(correct)
    assert loaded.problems == [], [p.message for p in loaded.problems]
    assert {"tinypkg.blocks", "tinypkg.activations"} <= loaded.project_modules()
    code, output, report = run_suite(f"--impl={correct}", "-m", "feed_forward", tmp_path=tmp_path)
    ffn = [c for c in report["checks"] if c["component"] == "feed_forward"]
    assert ffn and {c["verdict"] for c in ffn} <= {"pass", "deviation"}, output
    buggy = write(tmp_path / "buggy", {**SRC_LAYOUT, "src/tinypkg/activations.py": "def rectify(x):\n    return x\n"})
    code, output, report = run_suite(f"--impl={buggy}", "-m", "feed_forward", tmp_path=tmp_path)
    assert ("feed_forward", "relu_missing") in {(c["component"], c["cause"].split(".")[-1])
                                                for c in report["checks"] if c["verdict"] == "fail"}, output


SRC_PACKAGE = {
    "README.md": "a project whose scripts import `src.blocks`\n",
    "src/__init__.py": "",
    "src/activations.py": "import torch\n\n\ndef rectify(x):\n    return torch.clamp(x, min=0)\n",
    "src/blocks.py": SRC_BLOCKS.replace("from tinypkg.activations import rectify", "from .activations import rectify"),
    "scripts/train.py": "from src.blocks import PositionwiseFeedforwardLayer\n",
}


def test_a_src_folder_that_is_a_package_is_imported_as_one_its_relative_imports_resolved(tmp_path):
    """``src/__init__.py``: the author's scripts import ``src.blocks``, whose ``from .activations import rectify``
    resolves only inside the package ``src`` (not a src layout's folder of packages)."""
    assert "from tinypkg.activations import rectify" in SRC_BLOCKS
    project = write(tmp_path / "project", SRC_PACKAGE)
    loaded = load_code(project)
    assert loaded.problems == [], [p.message for p in loaded.problems]
    assert {"src.blocks", "src.activations"} <= loaded.project_modules()
    assert "feed_forward" in load_implementation(str(project)).roles
