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


SEQUENCE_FIRST_POSITIONS = [
    ('self.register_buffer("encodings", encodings[None])  # [1, max_len, d_model]',
     'self.register_buffer("encodings", encodings[:, None])  # [max_len, 1, d_model]'),
    ("return self.dropout(x + self.encodings[:, : x.size(1)])",
     "return self.dropout(x + self.encodings[: x.size(0)])  # x: [L, B, d_model]"),
    ("embedded = self.positional_encoding(self.src_embedding(src))",
     "embedded = self.positional_encoding(self.src_embedding(src).transpose(0, 1)).transpose(0, 1)"),
    ("embedded = self.positional_encoding(self.tgt_embedding(tgt))",
     "embedded = self.positional_encoding(self.tgt_embedding(tgt).transpose(0, 1)).transpose(0, 1)"),
]
"""A positional encoding written for (sequence, batch, d_model) tensors (its table sliced by ``x.size(0)`` and
broadcast over the batch on axis 1), which the batch-first model calls on its embeddings transposed and transposes
back. Called batch-first it raises nothing: it adds row b of the table to sample b."""

POSITIONS_SHIFTED = ("self.encodings[: x.size(0)]", "self.encodings[1 : x.size(0) + 1]")
"""A bug planted in it: the first position gets the encoding of position 1 (§3.5: PE(pos) from pos = 0)."""


@pytest.mark.parametrize("edits", [[], SEQUENCE_FIRST_POSITIONS], ids=["batch_first", "sequence_first"])
def test_a_positional_encoding_is_called_in_the_layout_the_model_gives_it(tmp_path, edits):
    """The layout of the positional encoding is read from the author's model's run (a length on axis 0, the batch
    on axis 1: sequence first), not guessed from behaviour a wrong layout does not show: the correct encoding passes
    its checks in either layout; with its positions shifted, its values are still named."""
    checks = {}
    for name, planted in (("correct", None), ("planted", POSITIONS_SHIFTED if edits else None)):
        if name == "planted" and planted is None:
            continue
        path = tmp_path / f"{name}.py"
        path.write_text(written(edits, planted))
        _, output, report = run_suite(f"--impl={path}", "-m", "positional_encoding", "-p", "no:cacheprovider",
                                      tmp_path=tmp_path)
        assert report is not None, output[-3000:]
        checks[name] = [c for c in report["checks"] if c["component"] == "positional_encoding"]
        assert checks[name], output[-3000:]
    bad = [(c["check"], c["verdict"], c["cause"]) for c in checks["correct"] if c["verdict"] in ("fail", "error")]
    assert bad == [], bad
    passed = {c["check"] for c in checks["correct"] if c["verdict"] == "pass"}
    assert {"agrees_with_reference", "samples_are_independent_of_batch", "every_length_up_to_max_len",
            "values_match_closed_form"} <= passed, passed
    if "planted" in checks:
        named = {c["cause"] for c in checks["planted"] if c["verdict"] == "fail"}
        assert any(cause.startswith("positional_encoding") for cause in named), named
