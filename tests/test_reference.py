"""The reference itself: closed-form parameter counts (Table 3) and agreement with torch.nn."""
import torch
import torch.nn as nn

import reference as ref

BASE = dict(N=6, d_model=512, d_ff=2048, h=8)  # Table 3, "base"


def count(module):
    return sum(p.numel() for p in module.parameters())


def test_base_model_parameter_count_follows_closed_form():
    """Table 3 base with a shared 37000-token vocabulary and tied embeddings: the closed form gives 63.1M
    (the paper reports 65M without stating its vocabulary size)."""
    with torch.device("meta"):
        model = ref.Transformer(37000, 37000, share_embeddings=True, **BASE)
    expected = ref.count_transformer(37000, 37000, BASE["N"], BASE["d_model"], BASE["d_ff"], share_embeddings=True)
    assert count(model) == expected
    assert 60e6 < expected < 66e6


def test_untied_model_parameter_count_follows_closed_form():
    with torch.device("meta"):
        model = ref.Transformer(1000, 1200, N=2, d_model=64, d_ff=256, h=4, share_embeddings=False)
    assert count(model) == ref.count_transformer(1000, 1200, 2, 64, 256)


def test_stacks_match_torch_transformer_with_its_final_norms():
    """nn.Transformer has the same layers plus one final LayerNorm per stack (2 d_model parameters each)."""
    with torch.device("meta"):
        model = ref.Transformer(10, 10, **BASE)
        torch_model = nn.Transformer(BASE["d_model"], BASE["h"], BASE["N"], BASE["N"], BASE["d_ff"])
    stacks = count(model.encoder) + count(model.decoder)
    assert stacks == BASE["N"] * (ref.count_encoder_layer(512, 2048) + ref.count_decoder_layer(512, 2048))
    assert count(torch_model) == stacks + 2 * ref.count_layer_norm(512)


def test_layer_norm_equals_torch_layer_norm():
    norm = ref.LayerNorm(6)
    with torch.no_grad():
        norm.gain.normal_()
        norm.bias.normal_()
    x = torch.randn(3, 4, 6, dtype=torch.float64)
    norm.double()
    torch.testing.assert_close(norm(x), nn.functional.layer_norm(x, (6,), norm.gain, norm.bias, norm.eps))


def test_encoder_layer_agrees_with_torch_encoder_layer_given_the_same_weights():
    """The reference's post-norm encoder layer computes what nn.TransformerEncoderLayer computes."""
    torch.manual_seed(0)
    layer, torch_layer = ref.EncoderLayer(8, 2, 32, 0.0).eval(), nn.TransformerEncoderLayer(8, 2, 32, 0.0,
                                                                                              batch_first=True).eval()
    a = layer.self_attention
    with torch.no_grad():
        torch_layer.self_attn.in_proj_weight.copy_(torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight]))
        torch_layer.self_attn.in_proj_bias.copy_(torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias]))
        torch_layer.self_attn.out_proj.load_state_dict(a.w_o.state_dict())
        torch_layer.linear1.load_state_dict(layer.feed_forward.w_1.state_dict())
        torch_layer.linear2.load_state_dict(layer.feed_forward.w_2.state_dict())
        for torch_norm, connection in zip((torch_layer.norm1, torch_layer.norm2),
                                          (layer.after_self_attention, layer.after_feed_forward)):
            torch_norm.weight.copy_(connection.layer_norm.gain)
            torch_norm.bias.copy_(connection.layer_norm.bias)
        x = torch.randn(2, 5, 8)
        mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2]).unsqueeze(1)
        expected = torch_layer(x, src_key_padding_mask=~mask[:, 0])
        torch.testing.assert_close(layer(x, mask)[1, :3], expected[1, :3], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(layer(x, mask)[0], expected[0], atol=1e-5, rtol=1e-5)


def test_positional_encoding_table_is_the_closed_form():
    table = ref.sinusoidal_table(50, 6)
    pos, i = 37, 2  # dimension 2i = 4 and 2i + 1 = 5
    assert table[pos, 2 * i].item() == torch.sin(torch.tensor(pos / 10000 ** (2 * i / 6), dtype=torch.float64)).item()
    assert table[pos, 2 * i + 1].item() == torch.cos(torch.tensor(pos / 10000 ** (2 * i / 6), dtype=torch.float64)).item()


def test_masks():
    tokens = torch.tensor([[5, 3, 0, 0]])
    assert ref.padding_mask(tokens, 0).tolist() == [[[True, True, False, False]]]
    assert ref.subsequent_mask(3).tolist() == [[[True, False, False], [True, True, False], [True, True, True]]]
