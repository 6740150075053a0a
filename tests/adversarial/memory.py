# base: attention_unscaled
# expect: out of memory
_forward = MultiHeadAttention.forward


def _greedy_forward(self, *args, **kwargs):
    hoard = []
    while True:
        hoard.append(bytearray(1 << 26))


MultiHeadAttention.forward = _greedy_forward
