"""Every fail and error record carries its evidence kind (issue 23, section 3; ``conformance/diagnosis/evidence.py``), and a
failure under a call the author's own code never makes is no verdict on the author.

The attention below takes its padding as (batch, 1, 1, Lk) key vectors, which its author's layers pass, and its
causality as a constructor flag. Under the checker's (batch, Lq, Lk) target mask it does not crash: it reads the
mask's last row as the key vectors, and so lets every query see the future. The author's own layers never call it
that way: that failure is the checker's call, not the author's bug. The feed-forward network forgets its ReLU, a
real bug on a call the author's layers make exactly so."""
import json

import torch

from conformance.diagnosis import evidence
from conformance.diagnosis.evidence import AUTHORS_CALL, calling_pattern, describe_pattern, pattern_fits
from tests.suite import run_on_source, run_suite
from tests.test_evidence import ATTENTION, LAYERS_AND_MODEL

SOURCE = ATTENTION.replace(  # the key vectors read from the mask's last row, whatever its shape
    "allowed = key_padding.reshape(b, 1, 1, lk)", "allowed = key_padding.flatten(1)[:, -lk:].reshape(b, 1, 1, lk)"
) + LAYERS_AND_MODEL.replace("torch.relu(self.w_1(x))", "self.w_1(x)").replace(  # the feed-forward's ReLU dropped
    "src != self.pad, tgt != self.pad", "(src != self.pad)[:, None, None, :], (tgt != self.pad)[:, None, None, :]")

SELECTION = ("-k", "(multi_head_attention and future_positions_do_not_change_earlier_outputs) or "
                   "(feed_forward and agrees_with_reference)")


def test_a_failure_under_a_mask_layout_the_author_never_passes_is_missing_and_a_real_bug_stays(tmp_path):
    code, output, report, records = run_on_source(tmp_path, "model.py", SOURCE, *SELECTION)
    layout = records[("multi_head_attention", "future_positions_do_not_change_earlier_outputs")]
    assert (layout["verdict"], layout["cause"]) == ("missing", "adapter.call_not_as_author"), output
    assert "the author's model calls it as (" in layout["message"], layout["message"]
    assert "a bool 4-d tensor (size 1 on axis 1, 2)" in layout["message"], layout["message"]
    assert "the check called it as (" in layout["message"] and "a bool 3-d tensor" in layout["message"]
    assert "evidence" not in layout
    bug = records[("feed_forward", "agrees_with_reference")]
    assert (bug["verdict"], bug["cause"], bug["evidence"]) == ("fail", "feed_forward.relu_missing", AUTHORS_CALL), \
        output
    assert "[author's call]" in output  # the verdict line on the console


def test_without_the_authors_layers_the_same_failure_is_the_checkers_call(tmp_path):
    """The attention alone: nothing of the author's calls it, so nothing says the call is not the author's; the
    failure stays, labelled as made on the checker's call."""
    attention = SOURCE[:SOURCE.index("class FeedForward")]
    code, output, report, records = run_on_source(tmp_path, "attention.py", attention, *SELECTION)
    record = records[("multi_head_attention", "future_positions_do_not_change_earlier_outputs")]
    assert (record["verdict"], record["evidence"]) == ("fail", evidence.CHECKERS_CALL), output
    assert "[checker's call]" in output


def test_every_fail_and_error_record_of_the_json_report_names_its_evidence(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(SOURCE)
    code, output, report = run_suite(f"--impl={path}", "-k", "feed_forward or names_read", tmp_path=tmp_path)
    flagged = [r for r in report["checks"] if r["verdict"] in ("fail", "error")]
    assert flagged, output
    assert all(r["evidence"] in evidence.KINDS for r in flagged), json.dumps(flagged, indent=1)
    assert all("evidence" not in r for r in report["checks"] if r["verdict"] not in ("fail", "error"))


def test_a_call_by_position_and_one_by_keyword_have_one_pattern():
    def forward(self, query, key, value, mask=None):
        return query

    x, mask = torch.zeros(2, 5, 4), torch.ones(2, 1, 1, 5, dtype=torch.bool)
    by_position = calling_pattern(forward, (x, x, x, mask), {}, method=True)
    by_keyword = calling_pattern(forward, (), dict(query=x, key=x, value=x, mask=mask), method=True)
    assert by_position == by_keyword
    assert not pattern_fits(by_position, calling_pattern(forward, (x, x, x, mask[:, 0]), {}, method=True))
    assert not pattern_fits(by_position, calling_pattern(forward, (x, x, x, mask.float()), {}, method=True))
    assert not pattern_fits(calling_pattern(forward, (x, x, x), {}, method=True), by_position)  # a mask more
    assert pattern_fits(by_position, calling_pattern(forward, (x, x, x), {}, method=True))  # left to its default
    # a batch of one, or a length of one the check drew, is no other layout
    assert pattern_fits(by_position, calling_pattern(forward, (x[:1], x[:1], x[:1], mask[:1, ..., :1]), {},
                                                     method=True))
    # the author's (Lq, Lk) mask broadcasts over what a (batch, 1, Lq, Lk) one spells out; a (batch, 1, Lk) one, laid
    # where the author lays (batch, 1, 1, Lk), puts the batch on the heads
    square = calling_pattern(forward, (x, x, x, torch.ones(5, 5, dtype=torch.bool)), {}, method=True)
    assert pattern_fits(square, calling_pattern(forward, (x, x, x, torch.ones(3, 1, 5, 5, dtype=torch.bool)), {},
                                                method=True))
    assert not pattern_fits(by_position, calling_pattern(forward, (x, x, x, torch.ones(3, 1, 5, dtype=torch.bool)),
                                                         {}, method=True))
    assert "mask: a bool 4-d tensor (size 1 on axis 1, 2)" in describe_pattern(by_position)


def test_a_parameter_count_is_read_from_the_block_as_built_whatever_call_the_check_made(tmp_path):
    """A count is no claim about a call: the attention's extra d_model x d_model map stays a fail, made without a
    call, though the author's layers call the block with masks of another layout than the check's calls."""
    source = SOURCE.replace("self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)",
                            "self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)\n"
                            "        self.w_extra = nn.Linear(d_model, d_model)")
    assert source != SOURCE
    code, output, report, records = run_on_source(tmp_path, "model.py", source, "-k",
                                                  "multi_head_attention and parameter_count")
    record = records[("multi_head_attention", "parameter_count")]
    assert (record["verdict"], record["cause"], record["evidence"]) == (
        "fail", "multi_head_attention.parameters.count", evidence.WITHOUT_A_CALL), output
