"""A residual wrapper that owns its sub-layer (``SubLayer(layer, d_model, dropout)``, its forward taking no
callable) is checked as §3.1's Add & Norm: the sub-layer the canonical call gives takes the owned one's place
(``adapters/wrapping.py``, :class:`GivenSubLayer`), so its count is one LayerNorm's and the dropout checks see the
given sub-layer's output. The correct wrapper passes; dropout planted on the residual sum is still named."""
from tests.test_calls_as_written import written
from tests.suite import run_suite

OWNING_WRAPPER = [
    ("    def __init__(self, d_model, dropout):\n        super().__init__()\n        self.layer_norm",
     "    def __init__(self, layer, d_model, dropout):\n        super().__init__()\n        self.layer = layer\n"
     "        self.layer_norm"),
    ("    def forward(self, x, sublayer):\n        residual_sum = x + self.dropout(sublayer(x))",
     "    def forward(self, x, *inputs):\n        residual_sum = x + self.dropout(self.layer(x, *inputs))"),
    ("""        self.self_attention = MultiHeadAttention(h, d_model)
        self.feed_forward = FeedForwardNetwork(d_model, d_ff)
        self.after_self_attention = AddAndNorm(d_model, dropout)
        self.after_feed_forward = AddAndNorm(d_model, dropout)

    def forward(self, x, src_mask):
        x = self.after_self_attention(x, lambda y: self.self_attention(y, y, y, src_mask))
        return self.after_feed_forward(x, self.feed_forward)""",
     """        self.after_self_attention = AddAndNorm(MultiHeadAttention(h, d_model), d_model, dropout)
        self.after_feed_forward = AddAndNorm(FeedForwardNetwork(d_model, d_ff), d_model, dropout)

    def forward(self, x, src_mask):
        return self.after_feed_forward(self.after_self_attention(x, x, x, src_mask))"""),
    ("""        self.self_attention = MultiHeadAttention(h, d_model)
        self.cross_attention = MultiHeadAttention(h, d_model)
        self.feed_forward = FeedForwardNetwork(d_model, d_ff)
        self.after_self_attention = AddAndNorm(d_model, dropout)
        self.after_cross_attention = AddAndNorm(d_model, dropout)
        self.after_feed_forward = AddAndNorm(d_model, dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.after_self_attention(x, lambda y: self.self_attention(y, y, y, tgt_mask))
        x = self.after_cross_attention(x, lambda y: self.cross_attention(y, memory, memory, src_mask))
        return self.after_feed_forward(x, self.feed_forward)""",
     """        self.after_self_attention = AddAndNorm(MultiHeadAttention(h, d_model), d_model, dropout)
        self.after_cross_attention = AddAndNorm(MultiHeadAttention(h, d_model), d_model, dropout)
        self.after_feed_forward = AddAndNorm(FeedForwardNetwork(d_model, d_ff), d_model, dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.after_self_attention(x, x, x, tgt_mask)
        x = self.after_cross_attention(x, memory, memory, src_mask)
        return self.after_feed_forward(x)"""),
]
"""Each Add & Norm built around the sub-layer it owns and passed that sub-layer's other inputs (§3.1, §5.4)."""

DROPOUT_ON_THE_SUM = ("residual_sum = x + self.dropout(self.layer(x, *inputs))",
                      "residual_sum = self.dropout(x + self.layer(x, *inputs))")


def test_a_wrapper_owning_its_sub_layer_is_checked_as_add_and_norm(tmp_path):
    checks = {}
    for name, planted in (("correct", None), ("planted", DROPOUT_ON_THE_SUM)):
        path = tmp_path / f"{name}.py"
        path.write_text(written(OWNING_WRAPPER, planted))
        _, output, report = run_suite(f"--impl={path}", "-m", "sublayer_connection", "-p", "no:cacheprovider",
                                      tmp_path=tmp_path)
        assert report is not None, output[-3000:]
        checks[name] = [c for c in report["checks"] if c["component"] == "sublayer_connection"]
        assert checks[name], output[-3000:]
    bad = [(c["check"], c["verdict"], c["cause"]) for c in checks["correct"] if c["verdict"] in ("fail", "error")]
    assert bad == [], bad
    passed = {c["check"] for c in checks["correct"] if c["verdict"] == "pass"}
    assert {"parameter_count", "dropout_on_sub_layer_outputs"} <= passed, passed
    named = {c["cause"] for c in checks["planted"] if c["verdict"] == "fail"}
    assert "sublayer_connection.dropout_on_residual_sum" in named, named
