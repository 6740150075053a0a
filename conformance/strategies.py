"""Hypothesis strategies: configurations drawn so that the common mistakes are distinguishable.

* at least two heads, so d_k differs from d_model, and d_k != h, so sqrt(d_model) differs from d_k;
* d_k even, so d_model is even as the sinusoid pairs of §3.5 assume (d_model = 512 in the paper);
* d_ff a multiple (>= 2) of d_model, so swapping the two dimensions shows;
* query and key lengths that differ (cross-attention), lengths of 1 included;
* batches of 1 or 3, never 2: a tensor unpacked into two names by mistake (``out, weights = attention(...)`` with
  an attention returning one tensor) would split a batch of 2 silently and crash later for another reason;
* float32 and float64.
"""
import torch
from hypothesis import strategies as st

from conformance.interface import Config

DTYPES = (torch.float32, torch.float64)
MAX_LEN = 12


@st.composite
def settings(draw, dtypes=DTYPES):
    """Everything a check needs besides the implementation and the device (see ``harness.Case``)."""
    h = draw(st.integers(2, 4))
    d_k = draw(st.sampled_from((2, 4, 6)).filter(lambda d: d != h))
    d_model = h * d_k
    cfg = Config(
        d_model=d_model, h=h, d_ff=d_model * draw(st.integers(2, 4)), dropout=0.0, N=draw(st.integers(1, 2)),
        vocab_size=draw(st.integers(7, 19)), src_vocab=draw(st.integers(7, 19)), tgt_vocab=draw(st.integers(7, 19)),
        max_len=MAX_LEN,
    )
    src_len = draw(st.integers(1, 6))
    tgt_len = draw(st.integers(1, 6).filter(lambda n: n != src_len))
    return dict(cfg=cfg, batch=draw(st.sampled_from((1, 3))), src_len=src_len, tgt_len=tgt_len,
                dtype=draw(st.sampled_from(dtypes)), seed=draw(st.integers(0, 2**16)))
