"""A block whose forward has no parameter for one of its role's inputs is diagnosed by what it lacks: a multi-head
attention taking one input is self-attention only, and one (or an attention function) without a mask argument
cannot be masked."""
import textwrap

from tests.suite import run_suite, verdicts

SELF_ATTENTION_ONLY = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.h, self.d_k = num_heads, d_model // num_heads
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.out = nn.Linear(d_model, d_model)

        def forward(self, hidden_state):
            b, n, d = hidden_state.shape
            q, k, v = (t.view(b, n, self.h, self.d_k).transpose(1, 2) for t in self.qkv(hidden_state).chunk(3, -1))
            weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.d_k), dim=-1)
            return self.out((weights @ v).transpose(1, 2).reshape(b, n, d))


    def attention(query, key, value):
        return torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1) @ value
''')


def test_missing_key_value_and_mask_parameters_are_named(tmp_path):
    path = tmp_path / "self_attention.py"
    path.write_text(SELF_ATTENTION_ONLY)
    code, output, report = run_suite(f"--impl={path}", "-k", "attention", tmp_path=tmp_path)
    assert code == 1, output
    failed = verdicts(report, "fail")
    assert ("multi_head_attention", "scores_scaled_by_inverse_sqrt_d_k",
            "multi_head_attention.self_attention_only") in failed, failed
    assert ("multi_head_attention", "future_positions_do_not_change_earlier_outputs",
            "multi_head_attention.mask_not_accepted") in failed, failed
    assert {("attention", check, "attention.mask_not_accepted") for check in (
        "masked_keys_do_not_change_outputs", "future_positions_do_not_change_earlier_outputs",
        "masked_attention_weights_are_zero")} <= failed, failed
    messages = " ".join(c["message"] for c in report["checks"] if c["verdict"] == "fail")
    assert "MultiHeadAttention.forward(hidden_state)" in messages and "attention(query, key, value)" in messages
    assert verdicts(report, "error") == set(), output
