"""Hypothesis strategies: configurations drawn so that the common mistakes are distinguishable.

* at least two heads, so d_k differs from d_model, and d_k != h, so sqrt(d_model) differs from d_k;
* d_k even, so d_model is even as the sinusoid pairs of §3.5 assume (d_model = 512 in the paper);
* d_ff a multiple (>= 2) of d_model, so swapping the two dimensions shows;
* query and key lengths that differ (cross-attention), lengths of 1 included;
* batches of 1 or 3, never 2: a tensor unpacked into two names by mistake (``out, weights = attention(...)`` with
  an attention returning one tensor) would split a batch of 2 silently and crash later for another reason;
* float32 and float64.
"""
import functools
import operator

import torch
from hypothesis import strategies as st

from conformance.contract.interface import Config

DTYPES = (torch.float32, torch.float64)
MAX_LEN = 12


HEADS, D_FF_MULTIPLE, LAYERS, VOCAB, LENGTH = (st.integers(2, 4), st.integers(2, 4), st.integers(1, 2),
                                              st.integers(7, 19), st.integers(1, 6))
D_K_GIVEN_HEADS = {h: st.sampled_from((2, 4, 6)).filter(functools.partial(operator.ne, h)) for h in range(2, 5)}
"""d_k for each head count, never equal to it. The strategies are made once, filtered by a function rather than a
lambda: hypothesis reads a lambda's source at each use (to find bounds it could draw within; an inequality has
none), a millisecond an example. The values drawn are the same."""
OTHER_LENGTH = {n: LENGTH.filter(functools.partial(operator.ne, n)) for n in range(1, 7)}
BATCH, SEED = st.sampled_from((1, 3)), st.integers(0, 2**16)


@st.composite
def settings(draw, dtypes=DTYPES):
    """Everything a check needs besides the implementation and the device (see ``harness.Case``)."""
    h = draw(HEADS)
    d_k = draw(D_K_GIVEN_HEADS[h])
    d_model = h * d_k
    cfg = Config(
        d_model=d_model, h=h, d_ff=d_model * draw(D_FF_MULTIPLE), dropout=0.0, N=draw(LAYERS),
        vocab_size=draw(VOCAB), src_vocab=draw(VOCAB), tgt_vocab=draw(VOCAB), max_len=MAX_LEN,
    )
    src_len = draw(LENGTH)
    tgt_len = draw(OTHER_LENGTH[src_len])
    return dict(cfg=cfg, batch=draw(BATCH), src_len=src_len, tgt_len=tgt_len, dtype=draw(st.sampled_from(dtypes)),
                seed=draw(SEED))
