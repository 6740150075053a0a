# base: attention_unscaled
# expect: crashed (SIGSEGV)
import ctypes as _ctypes
_forward = MultiHeadAttention.forward


def _crashing_forward(self, *args, **kwargs):
    _ctypes.string_at(0)


MultiHeadAttention.forward = _crashing_forward
