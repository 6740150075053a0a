# base: none
# expect: graded, the checks fail: hard-coded outputs and a tensor subclass that claims to equal anything
import torch
import torch.nn as nn


class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal):
            return True
        return super().__torch_function__(func, types, args, kwargs)

    def __eq__(self, other):
        return True


class MultiHeadAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        return torch.zeros_like(query).as_subclass(Liar)


class LayerNorm(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.d_model = d_model

    def forward(self, x):
        return torch.full(x.shape, 0.5)


CONFORMANCE_ROLES = {"multi_head_attention": MultiHeadAttention, "layer_norm": LayerNorm}
