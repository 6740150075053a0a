# base: attention_unscaled
# expect: tampering detected (os._exit refused while the checks run)
import os as _os
_forward = MultiHeadAttention.forward


def _exit_forward(self, *args, **kwargs):
    _os._exit(0)


MultiHeadAttention.forward = _exit_forward
