"""Crashes in the implementation's code are diagnosed with their likely cause (``conformance/diagnosis/crashes.py``), each
mistake planted in one component of a small stand-alone module."""
import textwrap

from tests.suite import run_on_source, run_suite

BROKEN = textwrap.dedent('''
    import torch
    import torch.nn as nn
    from reference.transformer import AddAndNorm, FeedForwardNetwork, MultiHeadAttention


    class NoSuperInit(nn.Module):                     # feed_forward
        def __init__(self, d_model, d_ff):
            self.w_1 = nn.Linear(d_model, d_ff)
            self.w_2 = nn.Linear(d_ff, d_model)

        def forward(self, x):
            return self.w_2(torch.relu(self.w_1(x)))


    class NestedForward(nn.Module):                   # layer_norm
        def __init__(self, d_model):
            super().__init__()
            self.norm = nn.LayerNorm(d_model)

            def forward(self, x):
                return self.norm(x)


    class ReturnsNothing(nn.Module):                  # sublayer_connection
        def __init__(self, d_model, dropout):
            super().__init__()
            self.norm = nn.LayerNorm(d_model)

        def forward(self, x, sublayer):
            x = self.norm(x + sublayer(x))


    class RenamedSuper(nn.Module):                    # multi_head_attention
        def __init__(self, h, d_model):
            super(MultiHeadAttentionOld, self).__init__()
            self.inner = MultiHeadAttention(h, d_model)

        def forward(self, query, key, value, mask=None):
            return self.inner(query, key, value, mask)


    class SwappedArguments(nn.Module):                # encoder_layer
        def __init__(self, d_model, h, d_ff, dropout):
            super().__init__()
            self.attn = MultiHeadAttention(h, d_model)
            self.ffn = FeedForwardNetwork(d_model, d_ff)
            self.sublayer = nn.ModuleList([AddAndNorm(d_model, dropout) for _ in range(2)])
            self.dropout, self.ffn = self.ffn, dropout      # the two mixed up

        def forward(self, x, src_mask):
            x = self.sublayer[0](x, lambda x: self.attn(x, x, x, src_mask))
            return self.sublayer[1](x, self.ffn)


    class AttributeNeverAssigned(nn.Module):          # generator
        def __init__(self, d_model, vocab_size):
            super().__init__()
            self.proj = nn.Linear(d_model, vocab_size)

        def forward(self, x):
            return torch.log_softmax(self.projection(x), dim=-1)


    def attention_returning_one(query, key, value, mask=None):   # attention
        out, weights = torch.softmax(query @ key.transpose(-2, -1), dim=-1) @ value
        return out


    CONFORMANCE_ROLES = {"feed_forward": NoSuperInit, "layer_norm": NestedForward,
                         "sublayer_connection": ReturnsNothing, "multi_head_attention": RenamedSuper,
                         "encoder_layer": SwappedArguments, "attention": attention_returning_one,
                         "generator": AttributeNeverAssigned}
''')

EXPECTED = {
    "feed_forward": ("error.super_init_missing", "NoSuperInit"),
    "layer_norm": ("error.forward_nested_in_init", "NestedForward.forward is defined inside __init__"),
    "sublayer_connection": ("sublayer_connection.forward_returns_none", "no return statement"),
    "multi_head_attention": ("error.super_names_wrong_class", "super(MultiHeadAttentionOld, self)"),
    "encoder_layer": ("error.arguments_in_wrong_order", "wrong order"),
    "attention": ("error.unpacking_mismatch", "unpack"),
    "generator": ("error.attribute_never_assigned", "self.projection"),
}


def test_each_crash_is_named_with_its_cause_and_line(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text(BROKEN)
    code, output, report = run_suite(f"--impl={path}", "-k", "output_shape", tmp_path=tmp_path)
    assert code == 1, output
    by_component = {c["component"]: c for c in report["checks"]}
    for component, (cause, words) in EXPECTED.items():
        check = by_component[component]
        assert check["cause"] == cause, (component, check)
        assert words in check["message"], (component, check["message"])
        if check["verdict"] == "error":
            assert f"{path}:" in check["message"], check["message"]


BUILT_BY_NAME = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class MultiHeadAttention(nn.Module):
        def __init__(self, n_head, d_model):
            super().__init__()
            self.w_q = nn.Linear(d_model, d_model)

        def forward(self, q, k, v, mask=None):
            return self.w_q(q) * self.scale, None        # crashes: never assigned


    class FeedForward(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

        def forward(self, x):
            return self.w_2(torch.relu(self.w_1(x)))


    class EncoderLayer(nn.Module):
        def __init__(self, d_model, n_head, d_ff):
            super().__init__()
            self.attn = MultiHeadAttention(n_head, d_model)   # built here, by name
            self.ffn = FeedForward(d_model, d_ff)
            self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

        def forward(self, x, mask):
            out, _ = self.attn(x, x, x, mask)
            x = x + self.norm1(out)                            # its own bug: x + LayerNorm(Sublayer(x))
            return x + self.norm2(self.ffn(x))
''')


def test_a_block_is_checked_with_a_stand_in_for_a_broken_block_it_builds_itself(tmp_path):
    code, output, report, by_check = run_on_source(tmp_path, "built_by_name.py", BUILT_BY_NAME,
                                                   "-m", "encoder_layer or multi_head_attention")
    assert code == 1, output
    assert by_check["multi_head_attention", "output_shape"]["cause"] == "error.attribute_never_assigned"
    placement = by_check["encoder_layer", "layer_placement"]
    assert placement["cause"] == "encoder_layer.norm_order.norm_on_sublayer_output", placement
    assert by_check["encoder_layer", "output_shape"]["verdict"] == "pass"
    assert any("standing in for MultiHeadAttention" in note for note in report["notes"]), report["notes"]
