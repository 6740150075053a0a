"""Blocks that read everything from one configuration object, and a positional table looked up by the tokens' count
(round 11 of public code, 2026-11-28): a field the checker cannot set is its doing, not the author's fault, and a
table its caller looks up with the token ids is checked as that caller uses it."""
from tests.suite import run_on_source

CONFIG_BLOCKS = '''
import math
import torch
import torch.nn as nn


class ScaledAttention(nn.Module):
    """Eq. (1), its scale read from the configuration: a value set for the author's own sizes."""

    def __init__(self, config):
        super().__init__()
        self.scale = config.scale

    def forward(self, q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / self.scale
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)
        return torch.softmax(scores, dim=-1) @ v


class SinusoidalEncoding(nn.Module):
    """The sinusoid table of section 3.5, looked up for as many positions as the token ids it is given."""

    def __init__(self, config):
        super().__init__()
        position = torch.arange(config.max_positions).unsqueeze(1).float()
        pair = torch.arange(0, config.width, 2).float()
        table = torch.zeros(config.max_positions, config.width)
        table[:, 0::2] = torch.sin(position / 10000 ** (pair / config.width))
        table[:, 1::2] = torch.cos(position / 10000 ** (pair / config.width))
        self.register_buffer("table", table)

    def forward(self, ids):
        return self.table[torch.arange(ids.size(-1), device=ids.device)]


class TokensAndPositions(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.lookup = nn.Embedding(config.vocab, config.width)
        self.positions = SinusoidalEncoding(config)
        self.width = config.width
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids):
        return self.dropout(self.lookup(ids) * math.sqrt(self.width) + self.positions(ids))
'''


def records(report, component):
    return [c for c in report["checks"] if c["component"] == component]


def test_a_field_the_checker_cannot_set_is_missing_and_a_table_looked_up_by_token_count_is_read(tmp_path):
    code, output, report, _ = run_on_source(tmp_path, "config_blocks.py", CONFIG_BLOCKS,
                                            "-k", "attention or positional_encoding", "-p", "no:xdist")
    attention = records(report, "attention")
    assert attention and all(c["verdict"] != "error" for c in attention), output
    left_none = [c for c in attention if "'scale'" in c["message"]]
    assert left_none and {(c["verdict"], c["cause"]) for c in left_none} == {
        ("missing", "adapter.config_field_not_planned")}, output
    positions = records(report, "positional_encoding")
    assert not [c for c in positions if c["verdict"] in ("fail", "error")], output
    assert sum(c["verdict"] == "pass" for c in positions) >= 10, output
    assert any("called with token ids" in note for note in report["notes"]), report["notes"]


def test_the_table_looked_up_with_the_wrong_exponent_still_fails(tmp_path):
    every_column = CONFIG_BLOCKS.replace("pair = torch.arange(0, config.width, 2).float()",
                                         "pair = 2 * torch.arange(0, config.width, 2).float()")
    code, output, report, _ = run_on_source(tmp_path, "config_blocks_wrong.py", every_column,
                                            "-k", "positional_encoding", "-p", "no:xdist")
    failed = {c["cause"] for c in records(report, "positional_encoding") if c["verdict"] == "fail"}
    assert "positional_encoding.exponent_uses_column_index" in failed, output
