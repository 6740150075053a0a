"""A pytest plugin for the benchmarks: every check's drawn configuration at the paper's base sizes (d_model = 512,
h = 8, d_ff = 2048, N = 6, §3 and Table 3), as the checker sees code that fixes its own sizes; the batch, the
lengths, the vocabularies, the dtype and the seed are drawn as usual.

    python -m pytest conformance -p benchmarks.paper_sizes ...   (with the project's root on PYTHONPATH)
"""
import dataclasses

from hypothesis import strategies as st

PAPER_BASE = dict(d_model=512, h=8, d_ff=2048, N=6)


def pytest_configure(config):
    from conformance.contract import strategies
    drawn_small = strategies.settings

    @st.composite
    def at_the_papers_sizes(draw, dtypes=strategies.DTYPES):
        drawn = draw(drawn_small(dtypes))
        return {**drawn, "cfg": dataclasses.replace(drawn["cfg"], **PAPER_BASE)}
    strategies.settings = at_the_papers_sizes  # (before the checks' modules are collected: they draw from it)
