"""A mask helper whose convention is not the attention's (round 12 of public code, 2026-11-27): a torch-style helper
(True = blocked, or an additive float mask) left beside an attention that fills where ``mask == 0``. The blocks are
checked with masks as the attention reads them, the helper in its own convention, where no file of the project
calls the helper (a single file of definitions says nothing either way: its helper's word holds, and an attention
inverted against it is named, as ``tests/test_students.py`` has it); an attention that hides nothing under any
convention still fails."""
import pytest

from tests import mutants
from tests.suite import run_suite

STUDENT = mutants.without_roles(mutants.reference_source())
KEEP_HELPER = STUDENT[STUDENT.index("def subsequent_mask(size):"):STUDENT.index("# == Parameter counts")]
HELPERS = {
    "blocked": '''def subsequent_mask(size):
    """Torch's convention: True where a query may not look."""
    return torch.triu(torch.ones(size, size), diagonal=1).bool()


''',
    "additive": '''def subsequent_mask(size):
    """An additive float mask: 0 where a query may look, -inf where it may not."""
    allowed = torch.tril(torch.ones(size, size)) == 1
    return torch.zeros(size, size).masked_fill(~allowed, float("-inf"))


'''}
MASK_CHECKS = "masks or information_flow"


def masked_records(report):
    return [c for c in report["checks"] if c["component"] in (
        "multi_head_attention", "encoder_layer", "decoder_layer", "encoder", "decoder", "model")]


TRAIN = '''import torch

from model import Transformer

if __name__ == "__main__":
    model = Transformer(11, 11, N=2, d_model=16, d_ff=32, h=2)
    src, tgt = torch.randint(1, 11, (2, 5)), torch.randint(1, 11, (2, 4))
    causal = torch.tril(torch.ones(1, 4, 4, dtype=torch.bool))  # (its own masks: the helper is never called)
    print(model(src, tgt, (src != 0)[:, None, :], causal).shape)
'''


def project(tmp_path, model):
    folder = tmp_path / "translation"
    folder.mkdir()
    (folder / "model.py").write_text(model)
    (folder / "train.py").write_text(TRAIN)
    return folder


@pytest.mark.parametrize("helper", sorted(HELPERS))
def test_blocks_take_masks_as_their_attention_reads_them(tmp_path, helper):
    folder = project(tmp_path, STUDENT.replace(KEEP_HELPER, HELPERS[helper]))
    code, output, report = run_suite(f"--impl={folder}", "-k", MASK_CHECKS, "-p", "no:xdist", tmp_path=tmp_path)
    checked = masked_records(report)
    assert sum(c["verdict"] == "pass" for c in checked) >= 20, output
    assert not [c for c in checked if c["verdict"] in ("fail", "error")], output
    assert any("the way the attention hides a padded key" in n and "subsequent_mask helper" in n
               for n in report["notes"]), report["notes"]
    helper_records = [c for c in report["checks"] if c["component"] == "subsequent_mask"]
    assert helper_records and not [c for c in helper_records if c["verdict"] in ("fail", "error")], output


def test_an_attention_ignoring_its_mask_still_fails_beside_such_a_helper(tmp_path):
    ignored = STUDENT.replace(KEEP_HELPER, HELPERS["blocked"]).replace(
        "scores = scores.masked_fill(mask.logical_not(), MASKED_SCORE)",
        "scores.masked_fill(mask.logical_not(), MASKED_SCORE)")
    code, output, report = run_suite(f"--impl={project(tmp_path, ignored)}", "-k", MASK_CHECKS, "-p", "no:xdist",
                                     tmp_path=tmp_path)
    failed = {(c["component"], c["cause"]) for c in masked_records(report) if c["verdict"] == "fail"}
    assert ("multi_head_attention", "multi_head_attention.mask_ignored") in failed, output
