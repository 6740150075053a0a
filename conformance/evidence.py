"""Evidence before blame (issue 23): a crash of a block called the checker's way is the author's fault only where
the author's own code, calling it its own way, crashes too.

The author's enclosing blocks call a sub-block as the author meant it to be called (its mask layout, an argument
that is a function, sizes it takes from elsewhere): when the model, a stack or a layer runs on its canonical call
and every instance of the sub-block's class inside it returns, the sub-block works where its author uses it, and
its crash under the checker's own call says only that the checker does not know how to call it."""
import functools

from adapters.behaviour import behaves
from adapters.building import authors_own_blocks
from conformance import harness
from conformance.interface import ROLES, Config

ENCLOSING = {
    "positional_encoding": ("model", "encoder", "decoder"),
    "embedding": ("model", "encoder", "decoder"),
    "multi_head_attention": ("encoder_layer", "decoder_layer", "encoder", "decoder", "model"),
    "feed_forward": ("encoder_layer", "decoder_layer", "encoder", "decoder", "model"),
    "layer_norm": ("sublayer_connection", "encoder_layer", "decoder_layer", "encoder", "decoder", "model"),
    "sublayer_connection": ("encoder_layer", "decoder_layer", "encoder", "decoder", "model"),
    "encoder_layer": ("encoder", "model"),
    "decoder_layer": ("decoder", "model"),
    "encoder": ("model",),
    "decoder": ("model",),
    "generator": ("model",),
}
"""The roles whose blocks may hold each role's blocks, innermost first."""
assert set(ENCLOSING) <= set(ROLES) and all(set(outer) <= set(ROLES) for outer in ENCLOSING.values())


def author_runs_it(impl, role):
    """The enclosing role whose canonical call, built from the author's own sub-blocks only, ran every call of
    ``role``'s class inside it to its end, or None. None also when the role's class is unknown (declared roles,
    functions) or no enclosing block runs."""
    return _author_runs_it(impl, role)


@functools.lru_cache(maxsize=64)
def _author_runs_it(impl, role):
    cls = getattr(impl.roles.get(role), "target", None)
    if not isinstance(cls, type) or "forward" not in vars(cls):
        return None
    for outer in ENCLOSING.get(role, ()):
        if not impl.has(outer):
            continue
        calls = {"started": 0, "returned": 0}
        own = cls.forward

        def watched(self, *args, **kwargs):
            calls["started"] += 1
            out = own(self, *args, **kwargs)
            calls["returned"] += 1
            return out

        cls.forward = watched
        try:
            with authors_own_blocks() as grafted:  # the outer block as its author wrote it: no reference inside
                problem = behaves(impl, outer)
        finally:
            cls.forward = own
        if problem is None and not grafted and calls["started"] and calls["started"] == calls["returned"]:
            return outer
    return None


PAPER_BASE = Config(dropout=0.0)
"""The base model's sizes (Table 3: d_model = 512, h = 8, d_ff = 2048, N = 6), with small vocabularies."""


@functools.lru_cache(maxsize=64)
def runs_at_the_papers_sizes(impl, role):
    """Whether ``role``, built at the paper's base sizes (:data:`PAPER_BASE`) rather than the checker's small ones,
    makes its canonical call without a crash: code that fixes a size of its own somewhere (a literal 512, a table
    as long as d_model) runs as its author runs it, and its crash at the checker's sizes is no evidence."""
    saved = harness.LATEST_CASE
    try:
        with authors_own_blocks():
            return behaves(impl, role, PAPER_BASE) is None
    finally:
        harness.LATEST_CASE = saved
