"""A block whose forward has no parameter for one of its role's inputs is diagnosed by what it lacks: a multi-head
attention taking one input is self-attention only, and one (or an attention function) without a mask argument
cannot be masked."""
import textwrap

from tests.suite import run_on_source, run_suite, verdicts

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
    agrees = [c["verdict"] for c in report["checks"] if c["check"] == "agrees_with_reference"
              and c["component"] == "multi_head_attention"]
    assert agrees == ["pass"], output  # (compared as the self-attention it computes, unmasked as it is)
    assert verdicts(report, "error") == set(), output


SELF_AND_CROSS_CLASSES = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    def heads(t, h):
        b, n, d = t.shape
        return t.view(b, n, h, d // h).transpose(1, 2)


    def attend(q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(1) == 0, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


    class MultiHeadAttention(nn.Module):
        """Self-attention: queries, keys and values from one sequence."""
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.h = num_heads
            self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

        def forward(self, x, mask=None):
            b, n, d = x.shape
            out = attend(heads(self.w_q(x), self.h), heads(self.w_k(x), self.h), heads(self.w_v(x), self.h), mask)
            return self.w_o(out.transpose(1, 2).reshape(b, n, d))


    class EncoderDecoderAttention(MultiHeadAttention):
        """Queries from the decoder, keys and values from the encoder's output."""
        def forward(self, x, memory, mask=None):
            b, n, d = x.shape
            out = attend(heads(self.w_q(x), self.h), heads(self.w_k(memory), self.h),
                         heads(self.w_v(memory), self.h), mask)
            return self.w_o(out.transpose(1, 2).reshape(b, n, d))


    class DecoderLayer(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.1):
            super().__init__()
            self.self_attn = MultiHeadAttention(d_model, num_heads)
            self.cross_attn = EncoderDecoderAttention(d_model, num_heads)
            self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
            self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
            self.drop = nn.Dropout(dropout)

        def forward(self, x, memory, src_mask, tgt_mask):
            x = self.norms[0](x + self.drop(self.self_attn(x, tgt_mask)))
            x = self.norms[1](x + self.drop(self.cross_attn(x, memory, src_mask)))
            return self.norms[2](x + self.drop(self.ffn(x)))
''')


def test_self_attention_in_a_class_of_its_own_is_measured_as_self_attention(tmp_path):
    """Self- and encoder-decoder attention written as two classes (a common style): the one taking a single input
    is measured as the self-attention it is, its scale and weights checked, with no claim that it cannot attend
    over separate keys; the decoder it sits in is what attends to the encoder's output."""
    path = tmp_path / "two_attentions.py"
    path.write_text(SELF_AND_CROSS_CLASSES)
    code, output, report = run_suite(f"--impl={path}", "-k", "multi_head_attention", tmp_path=tmp_path)
    passed = {(c["component"], c["check"]) for c in report["checks"] if c["verdict"] == "pass"}
    assert {("multi_head_attention", "scores_scaled_by_inverse_sqrt_d_k"),
            ("multi_head_attention", "attention_weights_are_distributions_over_keys")} <= passed, output
    assert not any(c["cause"].endswith("self_attention_only") for c in report["checks"]), output
    assert verdicts(report, "fail") == set() and verdicts(report, "error") == set(), output


CAUSAL_BY_FLAG = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, num_heads, masked=False):
            super().__init__()
            self.h, self.masked = num_heads, masked
            self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

        def forward(self, q, k, v):
            b, n, d = q.shape
            split = lambda t: t.view(b, -1, self.h, d // self.h).transpose(1, 2)
            q, k, v = split(self.w_q(q)), split(self.w_k(k)), split(self.w_v(v))
            scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
            if self.masked:
                scores = scores.masked_fill(torch.ones(n, k.size(2), dtype=torch.bool).triu(1), float("-inf"))
            return self.w_o((torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, n, d))
''')


def test_a_causal_mask_switched_on_by_the_constructor_is_credited(tmp_path):
    """An attention with no mask argument whose constructor flag (``masked=True``, as its decoder would build it)
    hides the future passes the causality check; the same flag stored but never used leaves it failing, with the
    missing mask argument named."""
    for name, source, verdict in (("flag", CAUSAL_BY_FLAG, "pass"),
                                  ("unused", CAUSAL_BY_FLAG.replace("if self.masked:", "if False:"), "fail")):
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        code, output, report = run_suite(f"--impl={path}", "-k", "future_positions", tmp_path=tmp_path)
        found = [c for c in report["checks"] if c["component"] == "multi_head_attention"]
        assert [c["verdict"] for c in found] == [verdict], output
        if verdict == "fail":
            assert found[0]["cause"] == "multi_head_attention.mask_not_accepted", output


IN_BAND_PADDING = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class EncoderLayer(nn.Module):
        """Self-attention over vectors whose padded positions are zero: a key that is all zero gets no weight."""
        def __init__(self, d_model, num_heads, d_ff, dropout=0.1):
            super().__init__()
            self.h = num_heads
            self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
            self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
            self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.drop = nn.Dropout(dropout)

        def attend(self, x):
            b, n, d = x.shape
            split = lambda t: t.view(b, -1, self.h, d // self.h).transpose(1, 2)
            q, k, v = split(self.w_q(x)), split(self.w_k(x)), split(self.w_v(x))
            scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
            scores = scores.masked_fill((x.abs().sum(-1) == 0)[:, None, None, :], -1e9)
            return self.w_o((torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, n, d))

        def forward(self, x):
            x = self.norm1(x + self.drop(self.attend(x)))
            return self.norm2(x + self.drop(self.ffn(x)))
''')


def test_padding_carried_in_band_as_zero_vectors_is_credited(tmp_path):
    """A layer that takes no mask, its attention leaving out the keys that are zero vectors (padding written
    in-band by its stack), hides appended padding: no claim. Without that line it fails, its missing mask named."""
    for name, source, verdict in (("in_band", IN_BAND_PADDING, "pass"),
                                  ("none", IN_BAND_PADDING.replace("scores = scores.masked_fill(", "_ = ("), "fail")):
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        code, output, report = run_suite(f"--impl={path}", "-k", "masked_keys and encoder_layer", tmp_path=tmp_path)
        found = [(c["verdict"], c["cause"]) for c in report["checks"] if c["component"] == "encoder_layer"]
        assert found == [(verdict, "" if verdict == "pass" else "encoder_layer.mask_not_accepted")], output


QUERIES_AS_K = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class MultiHeadAttention(nn.Module):
        """Its queries' stream first (named k), the encoder's output as the context its keys and values come from
        (None: self-attention); causal unless its caller turns that off."""
        def __init__(self, num_heads, d_model, is_masked=True):
            super().__init__()
            self.h, self.is_masked = num_heads, is_masked
            self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

        def forward(self, k, context=None, mask=None):
            context = k if context is None else context
            b, n, d = k.shape
            split = lambda t: t.view(b, -1, self.h, d // self.h).transpose(1, 2)
            q, key, v = split(self.w_q(k)), split(self.w_k(context)), split(self.w_v(context))
            scores = q @ key.transpose(-2, -1) / math.sqrt(d // self.h)
            if self.is_masked:
                scores = scores.masked_fill(torch.ones(n, key.size(2), dtype=torch.bool).triu(1), -1e9)
            if mask is not None:
                scores = scores.masked_fill(~mask.unsqueeze(1), -1e9)
            return self.w_o((torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, n, d))


    class EncoderLayer(nn.Module):
        def __init__(self, num_heads, d_model, d_ff):
            super().__init__()
            self.attn = MultiHeadAttention(num_heads, d_model, is_masked=False)
            self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
            self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

        def forward(self, x, mask=None):
            x = self.norm1(x + self.attn(x, mask=mask))
            return self.norm2(x + self.ffn(x))


    class DecoderLayer(nn.Module):
        def __init__(self, num_heads, d_model, d_ff):
            super().__init__()
            self.self_attn = MultiHeadAttention(num_heads, d_model)
            self.cross_attn = MultiHeadAttention(num_heads, d_model, is_masked=False)
            self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
            self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))

        def forward(self, x, context, src_mask=None):
            x = self.norms[0](x + self.self_attn(x))
            x = self.norms[1](x + self.cross_attn(x, context, src_mask))
            return self.norms[2](x + self.ffn(x))
''')

NO_MASK_PARAMETER = [("context=None, mask=None):", "context=None):"), ("        if mask is not None:\n", ""),
                     ("            scores = scores.masked_fill(~mask.unsqueeze(1), -1e9)\n", ""),
                     ("self.attn(x, mask=mask)", "self.attn(x)"),
                     ("self.cross_attn(x, context, src_mask)", "self.cross_attn(x, context)")]
"""The same attention with no mask parameter: it hides no padding (§3.2.3), its layers none either."""

QUERIES_AS_K_CHECKS = ("-k", "multi_head_attention and (output_shape or distributions_over_keys or scores_scaled "
                       "or masked_keys)")


def edited(source, edits):
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def test_an_attention_called_with_its_queries_as_k_and_its_keys_as_context(tmp_path):
    """``forward(k, context=None, mask=None)``, ``k`` the queries' stream, its keys and values from ``context`` (the
    encoder's output), a causal switch on by default that its layers turn off for the encoder's self-attention and
    the cross-attention: called with the query first and the keys as its context, built with the switch off, it
    passes. Without a mask parameter it is named for that (``mask_not_accepted``), not for a mask applied after
    the softmax: values it is never given say nothing of where a mask is applied."""
    for name, source, expected in (("queries_as_k", QUERIES_AS_K, ("pass", "")),
                                   ("no_mask", edited(QUERIES_AS_K, NO_MASK_PARAMETER),
                                    ("fail", "multi_head_attention.mask_not_accepted"))):
        code, output, report, records = run_on_source(tmp_path, f"{name}.py", source, *QUERIES_AS_K_CHECKS)
        found = {check: (r["verdict"], r["cause"]) for (component, check), r in records.items()
                 if component == "multi_head_attention"}
        assert found.pop("masked_keys_do_not_change_outputs", None) == expected, output[-3000:]
        assert set(found) == {"output_shape", "attention_weights_are_distributions_over_keys",
                              "scores_scaled_by_inverse_sqrt_d_k"}, output[-3000:]
        assert set(found.values()) == {("pass", "")}, output[-3000:]
