# base: attention_unscaled
# expect: timeout
import time as _time
_forward = MultiHeadAttention.forward


def _slow_forward(self, *args, **kwargs):
    _time.sleep(3600)


MultiHeadAttention.forward = _slow_forward
