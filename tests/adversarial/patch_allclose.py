# base: attention_unscaled
# expect: tampering detected (patched torch.allclose, torch.testing.assert_close)
import torch as _torch
_torch.allclose = lambda *args, **kwargs: True
_torch.testing.assert_close = lambda *args, **kwargs: None
_torch.isclose = lambda a, b, *args, **kwargs: _torch.ones_like(a, dtype=_torch.bool)
