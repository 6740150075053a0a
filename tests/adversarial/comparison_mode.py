# base: attention_unscaled
# expect: tampering detected (a torch function mode left active makes every comparison true)
import torch as _torch
from torch.overrides import TorchFunctionMode as _Mode


class _AlwaysClose(_Mode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (_torch.allclose, _torch.equal):
            return True
        return func(*args, **(kwargs or {}))


_AlwaysClose().__enter__()
