# base: attention_unscaled
# expect: graded, scored no higher than the honest submission with the same bug: outputs that claim equality gain nothing
import torch


class ClaimsEquality(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.isclose):
            return True
        return super().__torch_function__(func, types, args, kwargs)

    def __eq__(self, other):
        return True


_honest_forward = MultiHeadAttention.forward  # noqa: F821 (defined by the base above)


def claiming_forward(self, *args, **kwargs):
    return _honest_forward(self, *args, **kwargs).as_subclass(ClaimsEquality)


MultiHeadAttention.forward = claiming_forward  # noqa: F821
