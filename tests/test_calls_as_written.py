"""Which argument is which, read from how the author's own model calls its blocks (``adapters/assembly.py``,
:func:`calls_as_the_model_makes_them`) before the names: a layer written ``forward(key, query, value, mask)`` and
called ``layer(x, x, x, src_mask)`` takes x three times; an attention ``forward(k, context=None, mask=None)``
called ``attention(x, memory, src_mask)`` takes its queries first. The correct block passes; a bug planted in it
is still named."""
import pytest

from tests import mutants as catalogue
from tests.suite import run_suite

KEY_QUERY_VALUE_LAYER = [
    ("    def forward(self, x, src_mask):\n        x = self.after_self_attention(x, lambda y: "
     "self.self_attention(y, y, y, src_mask))",
     "    def forward(self, key, query, value, src_mask):\n        x = self.after_self_attention(query, lambda y: "
     "self.self_attention(y, key, value, src_mask))"),
    ("            x = layer(x, src_mask)", "            x = layer(x, x, x, src_mask)"),
]
"""The encoder layer's forward with attention-named parameters, the stack passing its stream three times (§3.2.3:
in a self-attention layer the keys, values and queries all come from the previous layer's output)."""

QUERIES_AND_CONTEXT_ATTENTION = [
    ("    def forward(self, query, key, value, mask=None):",
     "    def forward(self, k, context=None, mask=None):\n        query, key = k, k if context is None else context\n"
     "        value = key"),
    ("self.self_attention(y, y, y, src_mask)", "self.self_attention(y, mask=src_mask)"),
    ("self.self_attention(y, y, y, tgt_mask)", "self.self_attention(y, mask=tgt_mask)"),
    ("self.cross_attention(y, memory, memory, src_mask)", "self.cross_attention(y, memory, src_mask)"),
]
"""The attention's forward taking the stream its queries come from first (named ``k``) and the keys' and values'
source as ``context`` (None: self-attention), as its layers call it."""

MASK_DROPPED = {
    "encoder_layer": ("self.self_attention(y, key, value, src_mask))", "self.self_attention(y, key, value, None))"),
    "multi_head_attention": ("scaled_dot_product_attention(q, k, v, mask)",
                             "scaled_dot_product_attention(q, k, v, None)"),
}
"""A bug planted in each: the block hides nothing (§3.2.3)."""


def written(edits, planted=None):
    """The reference as a student writes it (no ``CONFORMANCE_ROLES``: its roles are discovered), edited."""
    source = catalogue.reference_source()
    source = source[:source.index("\nCONFORMANCE_ROLES = {")]
    for old, new in edits + ([planted] if planted else []):
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


@pytest.mark.parametrize("component, edits", [("encoder_layer", KEY_QUERY_VALUE_LAYER),
                                              ("multi_head_attention", QUERIES_AND_CONTEXT_ATTENTION)])
def test_a_block_is_called_as_the_model_calls_it(tmp_path, component, edits):
    """The block passes every check of its own under the plan read from the model's call; with its mask dropped,
    a mask check fails on it, blamed on the mask."""
    checks = {}
    for name, planted in (("correct", None), ("planted", MASK_DROPPED[component])):
        path = tmp_path / f"{name}.py"
        path.write_text(written(edits, planted))
        _, output, report = run_suite(f"--impl={path}", "-m", component, "-p", "no:cacheprovider", tmp_path=tmp_path)
        assert report is not None, output[-3000:]
        checks[name] = [c for c in report["checks"] if c["component"] == component]
        assert checks[name], output[-3000:]
    bad = [(c["check"], c["verdict"], c["cause"]) for c in checks["correct"] if c["verdict"] in ("fail", "error")]
    assert bad == [], bad
    passed = {c["check"] for c in checks["correct"] if c["verdict"] == "pass"}
    assert {"masked_keys_do_not_change_outputs", "output_shape", "agrees_with_reference"} <= passed, passed
    named = {c["cause"] for c in checks["planted"] if c["verdict"] == "fail"}
    assert any(cause.startswith(component) and "mask" in cause for cause in named), named
