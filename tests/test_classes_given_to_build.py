"""Blocks given the classes of their sub-blocks, which they build themselves with sizes of their own choosing
(``EncoderLayer(hid_dim, n_heads, pf_dim, SelfAttention, PositionwiseFeedforward, dropout, device)``, a style of
public tutorial code, round 11 of 2026-11-28): the checker passes the classes it bound, and checks the layer."""
from tests.suite import run_on_source

CLASSES_GIVEN = '''
import math
import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    def __init__(self, hid_dim, n_heads, dropout, device):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, hid_dim // n_heads
        self.w_q, self.w_k, self.w_v, self.fc = (nn.Linear(hid_dim, hid_dim) for _ in range(4))
        self.do = nn.Dropout(dropout)

    def split(self, x):
        return x.view(x.size(0), -1, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split(self.w_q(query)), self.split(self.w_k(key)), self.split(self.w_v(value))
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask.unsqueeze(1) == 0, -1e10)
        x = self.do(torch.softmax(energy, dim=-1)) @ v
        return self.fc(x.transpose(1, 2).reshape(query.size(0), -1, self.n_heads * self.head_dim))


class PositionwiseFeedforward(nn.Module):
    def __init__(self, hid_dim, pf_dim, dropout):
        super().__init__()
        self.fc_1, self.fc_2, self.do = nn.Linear(hid_dim, pf_dim), nn.Linear(pf_dim, hid_dim), nn.Dropout(dropout)

    def forward(self, x):
        return self.fc_2(self.do(torch.relu(self.fc_1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, hid_dim, n_heads, pf_dim, self_attention, positionwise_feedforward, dropout, device):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(hid_dim), nn.LayerNorm(hid_dim)
        self.sa = self_attention(hid_dim, n_heads, dropout, device)
        self.pf = positionwise_feedforward(hid_dim, pf_dim, dropout)
        self.do = nn.Dropout(dropout)

    def forward(self, src, src_mask):
        src = self.ln_1(src + self.do(self.sa(src, src, src, src_mask)))
        return self.ln_2(src + self.do(self.pf(src)))
'''


def test_a_layer_given_the_classes_of_its_sub_blocks_is_built_with_them_and_checked(tmp_path):
    code, output, report, _ = run_on_source(tmp_path, "classes_given.py", CLASSES_GIVEN, "-m", "encoder_layer",
                                            "-p", "no:xdist")
    assert any(note.startswith("encoder_layer: EncoderLayer (") and "self_attention=class:multi_head_attention"
               in note and "positionwise_feedforward=class:feed_forward" in note for note in report["notes"]), \
        report["notes"]
    layer = [c for c in report["checks"] if c["component"] == "encoder_layer"]
    assert sum(c["verdict"] == "pass" for c in layer) >= 10 and not [
        c for c in layer if c["verdict"] in ("fail", "error")], output


def test_a_residual_left_out_of_such_a_layer_is_named(tmp_path):
    no_residual = CLASSES_GIVEN.replace("self.ln_2(src + self.do(self.pf(src)))", "self.ln_2(self.do(self.pf(src)))")
    code, output, report, _ = run_on_source(tmp_path, "classes_given_buggy.py", no_residual, "-m", "encoder_layer",
                                            "-p", "no:xdist")
    failed = {c["cause"] for c in report["checks"] if c["component"] == "encoder_layer" and c["verdict"] == "fail"}
    assert "encoder_layer.norm_order.residual_missing" in failed, output
