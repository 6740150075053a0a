"""A pytest plugin for the benchmarks: every check's drawn configuration at the paper's base sizes (d_model = 512,
h = 8, d_ff = 2048, N = 6, §3 and Table 3), as the checker sees code that fixes its own sizes, its vocabularies
fixed too (at the configuration's defaults: code at its own sizes has the one its tokenizer gives); the batch, the
lengths, the dtype and the seed are drawn as usual.

    python -m pytest conformance -p benchmarks.paper_sizes ...   (with the project's root on PYTHONPATH)
"""
import dataclasses

from hypothesis import strategies as st

from conformance.contract.interface import Config

PAPER_BASE = dict(d_model=512, h=8, d_ff=2048, N=6)
FIXED_VOCABULARIES = {field: getattr(Config(), field) for field in ("vocab_size", "src_vocab", "tgt_vocab")}


def pytest_configure(config):
    from conformance.contract import strategies
    drawn_small = strategies.settings

    @st.composite
    def at_the_papers_sizes(draw, dtypes=strategies.DTYPES):
        drawn = draw(drawn_small(dtypes))
        return {**drawn, "cfg": dataclasses.replace(drawn["cfg"], **PAPER_BASE, **FIXED_VOCABULARIES)}
    strategies.settings = at_the_papers_sizes  # (before the checks' modules are collected: they draw from it)
