"""A model whose ``forward`` adds the head axis to masks of three dimensions, its ``encode`` and ``decode`` taking
them with it, as its author's own decoding gives them (round 12 of public code, 2026-11-27): the path through
``encode`` and ``decode`` is called with masks of that shape, and a path that drops the source mask still fails."""
from tests import mutants
from tests.suite import run_on_source

STUDENT = mutants.without_roles(mutants.reference_source())
HEAD_AXIS_REQUIRED = STUDENT.replace(
    "            mask = mask.unsqueeze(1)  # [B, 1, Lq or 1, Lk]: every head obeys the same mask",
    "            mask = mask.expand(-1, self.h, -1, -1)  # [B, 1, Lq or 1, Lk] -> one copy for each head").replace(
    "    def forward(self, src, tgt, src_mask, tgt_mask):\n        memory = self.encode(src, src_mask)",
    "    def forward(self, src, tgt, src_mask, tgt_mask):\n"
    "        src_mask, tgt_mask = (m.unsqueeze(1) if m.dim() == 3 else m for m in (src_mask, tgt_mask))\n"
    "        memory = self.encode(src, src_mask)")
CHECK = "encode_and_decode_hide_padded_source"


def test_encode_and_decode_are_given_masks_with_their_head_axis(tmp_path):
    assert HEAD_AXIS_REQUIRED.count("m.unsqueeze(1) if m.dim() == 3") == 1
    assert "mask.expand(-1, self.h" in HEAD_AXIS_REQUIRED
    code, output, report, records = run_on_source(tmp_path, "head_axis_in_forward.py", HEAD_AXIS_REQUIRED, "-k", CHECK,
                                                  "-p", "no:xdist")
    assert records[("model", CHECK)]["verdict"] == "pass", output


def test_a_decode_that_drops_the_source_mask_still_fails(tmp_path):
    dropped = HEAD_AXIS_REQUIRED.replace("        return self.decoder(embedded, memory, src_mask, tgt_mask)",
                                         "        return self.decoder(embedded, memory, None, tgt_mask)")
    code, output, report, records = run_on_source(tmp_path, "decode_drops_mask.py", dropped, "-k", CHECK,
                                                  "-p", "no:xdist")
    assert (records[("model", CHECK)]["verdict"], records[("model", CHECK)]["cause"]) == (
        "fail", "model.masked_keys_visible"), output
