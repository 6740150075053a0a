"""An old copy of the model kept in a folder that nothing imports, beside the module the author's scripts import
(round 12 of public code, 2026-11-27): the checker reads the live module and leaves the dead copy aside, whatever its
faults; a fault of the live module is still found."""
from tests import mutants
from tests.suite import run_suite

STUDENT = mutants.without_roles(mutants.reference_source())
SCALED = "scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)"
UNSCALED = STUDENT.replace(SCALED, "scores = query @ key.transpose(-2, -1)")
TRAIN = '''import torch

from model import Transformer, padding_mask, subsequent_mask

if __name__ == "__main__":
    model = Transformer(11, 11, N=2, d_model=16, d_ff=32, h=2)
    src, tgt = torch.randint(1, 11, (2, 5)), torch.randint(1, 11, (2, 4))
    print(model(src, tgt, padding_mask(src, 0), subsequent_mask(4)).shape)
'''


def project(tmp_path, live, dead):
    folder = tmp_path / "translation"
    (folder / "old").mkdir(parents=True)
    (folder / "model.py").write_text(live)
    (folder / "old" / "model_v0.py").write_text(dead)
    (folder / "train.py").write_text(TRAIN)
    return folder


def scaling(report):
    return {(c["component"], c["verdict"], c["cause"]) for c in report["checks"]
            if c["check"] in ("scores_scaled_by_inverse_sqrt_d_k", "every_attention_is_scaled_by_inverse_sqrt_d_k")}


def test_an_old_copy_nothing_imports_is_left_aside(tmp_path):
    assert UNSCALED != STUDENT
    code, output, report = run_suite(f"--impl={project(tmp_path, STUDENT, UNSCALED)}", "-k", "scaled", "-p",
                                     "no:xdist", tmp_path=tmp_path)
    assert not [c for c in report["checks"] if c["verdict"] in ("fail", "error")], output
    assert {v for _, v, _ in scaling(report)} == {"pass"}, output
    assert any(n.startswith("model: left aside") for n in report["notes"]), report["notes"]


def test_the_fault_of_the_module_the_scripts_import_is_found(tmp_path):
    code, output, report = run_suite(f"--impl={project(tmp_path, UNSCALED, STUDENT)}", "-k", "scaled", "-p",
                                     "no:xdist", tmp_path=tmp_path)
    assert ("attention", "fail", "attention.scale.unscaled") in scaling(report), output


WORD_EMBEDDING = '''import torch.nn as nn


class WordEmbedding(nn.Module):
    """Token ids to vectors, unscaled: an early version nothing imports any more."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.table = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens):
        return self.table(tokens)
'''


def test_a_class_of_a_dead_module_named_better_than_the_one_in_use_is_left_aside(tmp_path):
    """The embedding the model builds is named less like one than an unscaled class of a module nothing imports:
    the one in use is checked, and §3.4's scale found where the model applies it."""
    live = STUDENT.replace("TokenEmbedding", "TokenLookup")
    assert live != STUDENT
    folder = project(tmp_path, live, WORD_EMBEDDING)
    code, output, report = run_suite(f"--impl={folder}", "-k", "embedding", "-p", "no:xdist", tmp_path=tmp_path)
    assert any(n.startswith("embedding: left aside WordEmbedding") for n in report["notes"]), report["notes"]
    assert not [c for c in report["checks"] if c["verdict"] in ("fail", "error")], output
