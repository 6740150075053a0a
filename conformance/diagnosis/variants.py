"""Known variants of the reference: the named deviations of common practice and the common mistakes, each applied
to a built reference module in place. A candidate whose outputs match the reference with some variants applied
(same weights, same inputs) is diagnosed with their names: deviations, or a failure whose cause is the mistake.

A variant rebinds ``forward`` on the instances of one reference class (nothing global is patched). Each fills a
*slot* (the sub-layer connection, the LayerNorm, ...); a diagnosis picks at most one variant per slot.
"""
import math
import types
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from reference import transformer as ref


@dataclass(frozen=True)
class Variant:
    name: str
    deviation: bool
    description: str
    slot: str
    cls: object
    forward: object
    prepare: object = None
    """Called on each instance before ``forward`` is rebound (to add a sub-module)."""

    def apply(self, module):
        """Rebind ``forward`` on every instance of ``cls`` inside ``module``."""
        for m in list(module.modules()):
            if isinstance(m, self.cls):
                if self.prepare is not None:
                    self.prepare(m)
                m.forward = types.MethodType(self.forward, m)

    def applies_to(self, module):
        return any(isinstance(m, self.cls) for m in module.modules())


def reset(module):
    """Undo every variant applied to ``module``: each instance computes its class's ``forward`` again (a final norm
    added by ``extra_final_norm`` is left unused, and replaced when that variant is applied again)."""
    for m in module.modules():
        m.__dict__.pop("forward", None)


def layer_norm(denominator):
    def forward(self, x):
        return self.gain * (x - x.mean(-1, keepdim=True)) / denominator(self, x) + self.bias
    return forward


def biased_variance(x):
    return x.var(-1, keepdim=True, unbiased=False)


def multi_head_attention(scale=lambda d_k, h: 1 / math.sqrt(d_k), transpose_back=True):
    """Multi-head attention whose scores are multiplied by ``scale(d_k, h)`` (1/sqrt(d_k) in the paper) and whose
    heads (batch, h, length, d_k) are merged by ``reshape(batch, length, h * d_k)`` after transposing them back to
    (batch, length, h, d_k), or without (``transpose_back=False``: positions and heads mixed)."""
    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)
        q, k, v = self.project(query, self.w_q), self.project(key, self.w_k), self.project(value, self.w_v)
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale(self.d_k, self.h)
        if mask is not None:
            scores = scores.masked_fill(~mask, ref.MASKED_SCORE)
        heads = torch.matmul(torch.softmax(scores, dim=-1), v)
        if transpose_back:
            heads = heads.transpose(1, 2)
        return self.w_o(heads.reshape(query.size(0), -1, self.h * self.d_k))
    return forward


def timing_signal(length, d):
    """tensor2tensor's positional encodings: the sines of d/2 frequencies 10000^(-i/(d/2 - 1)), then the cosines."""
    pairs = d // 2
    angle = torch.arange(length, dtype=torch.float64)[:, None] * torch.pow(
        10000.0, -torch.arange(pairs, dtype=torch.float64) / max(pairs - 1, 1))[None, :]
    return torch.nn.functional.pad(torch.cat([torch.sin(angle), torch.cos(angle)], 1), (0, d % 2))


def add_final_norm(stack):
    """A fresh reference LayerNorm (unit gain, zero bias) after the stack: the LayerNorm variants apply to it too."""
    gain = stack.layers[0].after_self_attention.layer_norm.gain
    stack.final_norm = ref.LayerNorm(gain.numel()).to(gain)


def with_final_norm(self, *args):
    return self.final_norm(type(self).forward(self, *args))


SUBLAYER, FFN, LN, MHA = ref.AddAndNorm, ref.FeedForwardNetwork, ref.LayerNorm, ref.MultiHeadAttention
VARIANTS = [
    # -- deviations: named variants of practice --
    Variant("pre_norm", True, "pre-norm sub-layer connections x + Dropout(Sublayer(LayerNorm(x)))", "sublayer",
            SUBLAYER, lambda self, x, sublayer: x + self.dropout(sublayer(self.layer_norm(x)))),
    Variant("extra_final_norm", True, "a final LayerNorm after each stack", "stack",
            (ref.EncoderStack, ref.DecoderStack), with_final_norm, add_final_norm),
    Variant("gelu", True, "GELU instead of ReLU in the feed-forward network", "feed_forward", FFN,
            lambda self, x: self.w_2(F.gelu(self.w_1(x)))),
    Variant("unbiased_std", True, "LayerNorm with the unbiased (n - 1) variance", "layer_norm", LN,
            layer_norm(lambda self, x: torch.sqrt(x.var(-1, keepdim=True) + self.eps))),
    Variant("unbiased_std_eps_outside_root", True, "LayerNorm (x - mean) / (std + eps) with the unbiased std, as in "
            "the Annotated Transformer", "layer_norm", LN, layer_norm(lambda self, x: x.std(-1, keepdim=True) + self.eps)),
    Variant("input_scaled_by_sqrt_d_model", True, "the positional encoding multiplies its input by sqrt(d_model) "
            "before adding the table (the embeddings' scaling of §3.4 done there)", "positional_encoding",
            ref.SinusoidalPositionalEncoding,
            lambda self, x: self.dropout(x * math.sqrt(self.encodings.size(-1)) + self.encodings[:, :x.size(1)])),
    Variant("timing_signal", True, "tensor2tensor's timing signal: sines then cosines, frequencies "
            "10000^(-i/(d_model/2 - 1))", "positional_encoding", ref.SinusoidalPositionalEncoding,
            lambda self, x: self.dropout(x + timing_signal(x.size(1), x.size(-1)).to(x))),
    Variant("generator_logits", True, "the generator returns logits (the softmax left to the loss)", "generator",
            ref.OutputLayer, lambda self, x: self.linear(x)),
    Variant("generator_softmax", True, "the generator returns probabilities (softmax), not log-probabilities",
            "generator", ref.OutputLayer, lambda self, x: torch.softmax(self.linear(x), dim=-1)),
    # -- mistakes --
    Variant("norm_on_sublayer_output", False, "x + LayerNorm(Sublayer(x)): the norm on the sub-layer output only",
            "sublayer", SUBLAYER, lambda self, x, sublayer: x + self.layer_norm(self.dropout(sublayer(x)))),
    Variant("residual_missing", False, "LayerNorm(Sublayer(x)): no residual connection", "sublayer", SUBLAYER,
            lambda self, x, sublayer: self.layer_norm(self.dropout(sublayer(x)))),
    Variant("norm_missing", False, "x + Sublayer(x): no LayerNorm", "sublayer", SUBLAYER,
            lambda self, x, sublayer: x + self.dropout(sublayer(x))),
    Variant("relu_missing", False, "no ReLU between the two linear maps of the feed-forward network",
            "feed_forward", FFN, lambda self, x: self.w_2(self.w_1(x))),
    Variant("relu_on_output", False, "a ReLU on the output of the feed-forward network too, max(0, max(0, x W_1 + "
            "b_1) W_2 + b_2): no negative output", "feed_forward", FFN,
            lambda self, x: torch.relu(self.w_2(torch.relu(self.w_1(x))))),
    Variant("divides_by_variance", False, "LayerNorm divides by the variance (plus eps), not its square root",
            "layer_norm", LN, layer_norm(lambda self, x: biased_variance(x) + self.eps)),
    Variant("eps_outside_root", False, "LayerNorm divides by sqrt(variance) + eps", "layer_norm", LN,
            layer_norm(lambda self, x: torch.sqrt(biased_variance(x)) + self.eps)),
    Variant("scaled_by_sqrt_d_model", False, "attention scores divided by sqrt(d_model) instead of sqrt(d_k)",
            "attention", MHA, multi_head_attention(lambda d_k, h: 1 / math.sqrt(d_k * h))),
    Variant("scaled_by_d_k", False, "attention scores divided by d_k instead of sqrt(d_k)", "attention", MHA,
            multi_head_attention(lambda d_k, h: 1 / d_k)),
    Variant("unscaled", False, "attention scores not divided by sqrt(d_k)", "attention", MHA,
            multi_head_attention(lambda d_k, h: 1.0)),
    Variant("heads_merged_without_transpose", False, "the heads (batch, h, length, d_k) merged by reshape(batch, "
            "length, h * d_k) without transposing back: positions and heads mixed", "attention", MHA,
            multi_head_attention(transpose_back=False)),
]
BY_NAME = {v.name: v for v in VARIANTS}
SLOTS = {}
for _variant in VARIANTS:
    SLOTS.setdefault(_variant.slot, []).append(_variant)
PRACTICE = (BY_NAME["pre_norm"], BY_NAME["extra_final_norm"])
"""The contract 'practice': pre-norm with a final LayerNorm after each stack (tensor2tensor, Annotated Transformer)."""
