"""Code that fixes float32 for itself (a softmax given ``dtype=torch.float``, as code written for float32 training
does): discovery finds each role that computes in float32 only (``adapters.behaviour.float32_only``), and its checks
run in float32 with float32's tolerances, blaming only what fails there."""
import pytest
import torch

from adapters.behaviour import float32_only
from conformance.contract import harness
from conformance.diagnosis.evidence import CheckCalls
from conformance.contract.harness import Case
from conformance.contract.interface import Config, Implementation
from reference import transformer as ref
from tests.suite import run_on_source

FLOAT32_SOFTMAX = '''
import math
import torch
import torch.nn as nn


class SelfAndCrossAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q_proj, self.k_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.v_proj, self.o_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def heads(self, t):
        return t.reshape(t.size(0), t.size(1), self.n_heads, self.d_head).permute(0, 2, 1, 3)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.heads(self.q_proj(query)), self.heads(self.k_proj(key)), self.heads(self.v_proj(value))
        logits = torch.matmul(q, k.transpose(2, 3)) * SCALE
        if mask is not None:
            logits = logits.masked_fill(mask.unsqueeze(1) == 0, -1e9)
        weights = torch.softmax(logits, dim=-1, dtype=torch.float)
        joined = torch.matmul(weights, v).permute(0, 2, 1, 3)
        return self.o_proj(joined.reshape(query.size(0), query.size(1), -1))


class PositionWise(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.widen, self.narrow = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.narrow(torch.relu(self.widen(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout_rate=0.1):
        super().__init__()
        self.attention, self.ffn = SelfAndCrossAttention(d_model, n_heads), PositionWise(d_model, d_ff)
        self.norm_a, self.norm_b = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x, mask):
        x = self.norm_a(x + self.dropout(self.attention(x, x, x, mask)))
        return self.norm_b(x + self.dropout(self.ffn(x)))
'''
CORRECT = FLOAT32_SOFTMAX.replace("SCALE", "(1 / math.sqrt(self.d_head))")
SCALED_BY_D_MODEL = FLOAT32_SOFTMAX.replace("SCALE", "(1 / math.sqrt(self.n_heads * self.d_head))")
"""Planted: the scores multiplied by 1/sqrt(d_model), not 1/sqrt(d_k) (§3.2.1)."""


def blamed(records):
    return {(key, r["cause"]) for key, r in records.items() if r["verdict"] in ("fail", "error")}


def test_code_fixing_float32_is_checked_in_float32_and_blamed_for_nothing(tmp_path):
    code, output, report, records = run_on_source(tmp_path, "float32.py", CORRECT)
    assert report is not None, output
    assert not blamed(records), blamed(records)
    assert records[("encoder_layer", "masked_keys_do_not_change_outputs")]["verdict"] == "pass"
    assert any(note.startswith("multi_head_attention: computes in float32 only") for note in report["notes"])


def test_a_bug_in_code_fixing_float32_is_still_named(tmp_path):
    code, output, report, records = run_on_source(tmp_path, "float32.py", SCALED_BY_D_MODEL, "-k",
                                                  "scores_scaled_by_inverse_sqrt_d_k")
    record = records[("multi_head_attention", "scores_scaled_by_inverse_sqrt_d_k")]
    assert (record["verdict"], record["cause"]) == ("fail", "multi_head_attention.scale.sqrt_d_model"), record
    assert "dtype=torch.float32" in record["message"], record["message"]  # (its reproduction, in float32 too)


class Float32Table(torch.nn.Module):
    """Multiplies its input by a float32 table: any precision but float32 meets float32 there."""

    def __init__(self, d_model):
        super().__init__()
        self.table = torch.ones(d_model, d_model)

    def forward(self, x):
        return x @ self.table


def fixed_implementation(role, fixed):
    build = lambda **cfg: Float32Table(cfg["d_model"])  # noqa: E731
    build.fixed_dtype = fixed
    return Implementation("test", {role: build})


def test_a_role_that_fails_in_float64_only_where_precisions_meet_is_float32_only():
    problem = float32_only(fixed_implementation("feed_forward", None), "feed_forward")
    assert problem is not None and problem.startswith("RuntimeError"), problem
    assert float32_only(Implementation("reference", ref.CONFORMANCE_ROLES), "feed_forward") is None


@pytest.mark.parametrize("watched, dtype", [("feed_forward", torch.float32), ("layer_norm", torch.float64),
                                            (None, torch.float64)])
def test_a_case_runs_in_the_precision_its_checks_role_fixes(watched, dtype):
    impl = fixed_implementation("feed_forward", torch.float32)
    cfg = Config(d_model=4, h=2, d_ff=8, dropout=0.0, N=1, vocab_size=7, src_vocab=7, tgt_vocab=7, max_len=12)
    harness.WATCH = CheckCalls(watched) if watched else None
    try:
        case = Case(impl, cfg, batch=1, src_len=2, tgt_len=3, dtype=torch.float64, seed=0)
    finally:
        harness.WATCH = None
    assert case.dtype == dtype and case.atol == harness.tolerance(dtype)[0]


class MovesAPlainTensor(torch.nn.Linear):
    """Keeps a tensor that is no buffer, and moves it itself when the block is moved."""

    def __init__(self, d_model):
        super().__init__(d_model, d_model)
        self.table = torch.zeros(3)

    def _apply(self, fn, *args, **kwargs):
        self.table = fn(self.table)
        return super()._apply(fn, *args, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_built_block_is_moved_only_when_moving_it_changes_something(dtype):
    impl = Implementation("moves", {"feed_forward": lambda d_model, d_ff, dropout: MovesAPlainTensor(d_model)})
    cfg = Config(d_model=4, h=2, d_ff=8, N=1)
    built = Case(impl, cfg, batch=1, src_len=2, tgt_len=3, dtype=dtype, seed=0).build("feed_forward")
    assert built.weight.dtype == dtype and built.table.dtype == dtype  # (its own _apply ran: never skipped)
    plain = ref.FeedForwardNetwork(4, 8)
    assert harness.in_place_already(plain, "cpu", torch.float32)
    assert not harness.in_place_already(plain, "cpu", torch.float64)
    assert not harness.in_place_already(MovesAPlainTensor(4), "cpu", torch.float32)


class KeepsItsNormInTraining(torch.nn.Module):
    """A block with a ``train`` of its own (its LayerNorm stays in training mode) beside a shared sub-block and a
    tied weight."""

    def __init__(self, d_model):
        super().__init__()
        self.first = torch.nn.Linear(d_model, d_model)
        self.again = self.first  # (the same block twice)
        self.tied = torch.nn.Linear(d_model, d_model)
        self.tied.weight = self.first.weight
        self.norm = torch.nn.LayerNorm(d_model)
        self.register_buffer("table", torch.zeros(3, d_model))

    def train(self, mode=True):
        super().train(mode)
        self.norm.training = True
        return self

    def forward(self, x):
        return self.norm(self.tied(self.first(x)))


def test_one_walk_of_a_new_build_reads_what_torchs_walks_read():
    """A build is walked once for its readings (widths, device and dtype, size, mode): the blocks, parameters and
    buffers torch's own walks give, each once, and a block's own ``train`` still runs."""
    block = KeepsItsNormInTraining(4)
    walked = harness.Walked.of(block)
    assert walked.blocks == list(block.modules())
    assert [id(p) for p in walked.parameters] == [id(p) for p in block.parameters()]
    assert [id(b) for b in walked.buffers] == [id(b) for b in block.buffers()]
    impl = Implementation("own_train", {"feed_forward": lambda d_model, d_ff, dropout: KeepsItsNormInTraining(d_model)})
    built = Case(impl, Config(d_model=4, h=2, d_ff=8, N=1), batch=1, src_len=2, tgt_len=3, dtype=torch.float64,
                 seed=0).build("feed_forward")
    assert not built.training and built.norm.training and not built.first.training
    plain = Case(Implementation("plain", {"feed_forward": ref.FeedForwardNetwork}), Config(d_model=4, h=2, d_ff=8, N=1),
                 batch=1, src_len=2, tgt_len=3, dtype=torch.float32, seed=0).build("feed_forward", train=True)
    assert all(m.training for m in plain.modules())
