# base: attention_unscaled
# expect: output limit
_forward = MultiHeadAttention.forward


def _loud_forward(self, *args, **kwargs):
    print("x" * (1 << 20), flush=True)
    return _forward(self, *args, **kwargs)


MultiHeadAttention.forward = _loud_forward
