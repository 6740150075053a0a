"""Models built from a configuration object (reading 2026-11-26b, R1): ``Transformer(cfg)`` whose constructor reads
``cfg.d_model``, ``cfg.src_vocab``, ... is built with those fields set to the checker's sizes, and checked."""
from adapters.building import fields_read
from adapters.loading import load_code
from adapters.submission import load_implementation
from tests import mutants
from tests.suite import run_suite

SIGNATURE = '''    def __init__(self, src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, max_len=5000,
                 share_embeddings=True):
        super().__init__()
'''
READS_A_CONFIG = '''    def __init__(self, cfg):
        super().__init__()
        src_vocab, tgt_vocab, N, d_model = cfg.src_vocab_size, cfg.tgt_vocab_size, cfg.num_layers, cfg.width
        d_ff, h, dropout, max_len, share_embeddings = cfg.d_ff, cfg.n_heads, cfg.dropout, cfg.max_positions, True
        self.joint = cfg.tokenizer_kind == "joint"  # a field no weight depends on
'''


def config_model(source=None):
    """The reference (or ``source``, a mutant of it) as an author writes it: no role table, and its model reading
    its sizes from a configuration object."""
    source = source or mutants.reference_source()
    assert source.count(SIGNATURE) == 1
    return source.replace(SIGNATURE, READS_A_CONFIG).split("\nCONFORMANCE_ROLES = {")[0]


def test_the_fields_a_constructor_reads_are_its_configuration(tmp_path):
    (tmp_path / "config_model.py").write_text(config_model())
    namespace = vars(load_code(tmp_path / "config_model.py").module)
    assert fields_read(namespace["Transformer"], "cfg") == [
        "src_vocab_size", "tgt_vocab_size", "num_layers", "width", "d_ff", "n_heads", "dropout", "max_positions",
        "tokenizer_kind"]
    assert fields_read(namespace["EncoderStack"], "N") == []  # a size used as itself, not a configuration


def test_a_model_built_from_a_configuration_object_is_checked_and_its_bug_named(tmp_path):
    correct = tmp_path / "config_model.py"
    correct.write_text(config_model())
    impl = load_implementation(str(correct))
    assert "model" in impl.roles, impl.notes
    code, output, report = run_suite(f"--impl={correct}", "-m", "model", tmp_path=tmp_path)
    model = [c for c in report["checks"] if c["component"] == "model"]
    assert model and not [c for c in model if c["verdict"] in ("fail", "error")], output
    assert sum(c["verdict"] == "pass" for c in model) >= 10, output
    planted = mutants.BY_NAME["model_target_without_positional_encoding"]
    buggy = tmp_path / "config_model_buggy.py"
    buggy.write_text(mutants.apply(planted, config_model()))
    code, output, report = run_suite(f"--impl={buggy}", "-m", "model", tmp_path=tmp_path)
    assert planted.cause in {c["cause"] for c in report["checks"] if c["verdict"] == "fail"}, output


READY_BLOCKS = '''    def __init__(self, src_embedding, tgt_embedding, positional_encoding, encoder, decoder, output_layer):
        super().__init__()
        self.src_embedding, self.tgt_embedding, self.output_layer = src_embedding, tgt_embedding, output_layer
        self.positional_encoding, self.encoder, self.decoder = positional_encoding, encoder, decoder

'''
FACTORY = '''

def build_transformer(config):
    """The model of the configuration's sizes, assembled from ready blocks, the target table tied (§3.4)."""
    d_model, dropout = config.width, config.dropout
    tgt_embedding = TokenEmbedding(config.tgt_vocab_size, d_model)
    src_embedding = TokenEmbedding(config.src_vocab_size, d_model)
    output_layer = OutputLayer(d_model, config.tgt_vocab_size)
    encoder = EncoderStack(config.num_layers, d_model, config.n_heads, config.d_ff, dropout)
    decoder = DecoderStack(config.num_layers, d_model, config.n_heads, config.d_ff, dropout)
    model = Transformer(src_embedding, tgt_embedding, SinusoidalPositionalEncoding(d_model, dropout, 5000),
                        encoder, decoder, output_layer)
    for matrix in [p for p in model.parameters() if p.dim() >= 2]:
        nn.init.xavier_uniform_(matrix)
    output_layer.linear.weight = tgt_embedding.lookup.weight
    if config.src_vocab_size == config.tgt_vocab_size:
        src_embedding.lookup.weight = tgt_embedding.lookup.weight
    return model
'''


def factory_model(source=None):
    """The reference (or a mutant of it) whose model takes ready blocks, built by a factory from a configuration."""
    source = (source or mutants.reference_source()).split("\nCONFORMANCE_ROLES = {")[0]
    start, end = source.index(SIGNATURE), source.index("    def encode(self")
    return source[:start] + READY_BLOCKS + source[end:] + FACTORY


def test_a_factory_function_taking_a_configuration_object_is_the_model(tmp_path):
    """``build_transformer(config)`` assembles the model, whose own constructor takes ready blocks and no size:
    the factory, reading the configuration's fields, is what builds it; a planted bug is still named."""
    planted = mutants.BY_NAME["model_source_without_positional_encoding"]
    for source, cause in ((factory_model(), None), (factory_model(mutants.apply(planted)), planted.cause)):
        path = tmp_path / ("factory_buggy.py" if cause else "factory.py")
        path.write_text(source)
        code, output, report = run_suite(f"--impl={path}", "-m", "model", tmp_path=tmp_path)
        model = [c for c in report["checks"] if c["component"] == "model"]
        assert sum(c["verdict"] == "pass" for c in model) >= 10, output
        failed = {c["cause"] for c in model if c["verdict"] in ("fail", "error")}
        assert failed == set() if cause is None else cause in failed, output


OWN_MASKS = '''    def forward(self, src, tgt):
        """The masks made here from the pad token 0, with a head axis, as the stacks take them (§3.2.3)."""
        src_mask = (src != 0)[:, None, None, :]
        causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device).tril()
        tgt_mask = (tgt != 0)[:, None, None, :] & causal
        return self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask)
'''


def own_masks_model(source=None):
    """The reference (or a mutant) whose model makes its masks itself in forward(src, tgt), with the head axis its
    attention takes; its encode and decode still take masks."""
    source = (source or mutants.reference_source()).split("\nCONFORMANCE_ROLES = {")[0]
    forward = source.index("    def forward(self, src, tgt, src_mask, tgt_mask):")
    end = source.index("\n\n\n", forward)
    source = source[:forward] + OWN_MASKS + source[end + 1:]
    return source.replace("            mask = mask.unsqueeze(1)  # [B, 1, Lq or 1, Lk]: every head obeys the same mask\n",
                          "            pass  # the mask comes with its head axis\n")


def test_a_model_making_its_masks_has_its_encode_and_decode_given_masks_as_its_stacks_take_them(tmp_path):
    """Its encode and decode take the masks with the head axis its stacks take (no shape error blamed on it); a
    decode that drops the source mask is still named."""
    unmasked = own_masks_model().replace("return self.decoder(embedded, memory, src_mask, tgt_mask)",
                                         "return self.decoder(embedded, memory, None, tgt_mask)")
    for source, cause in ((own_masks_model(), None), (unmasked, "model.masked_keys_visible")):
        path = tmp_path / ("own_masks_buggy.py" if cause else "own_masks.py")
        path.write_text(source)
        code, output, report = run_suite(f"--impl={path}", "-m", "model and masks", tmp_path=tmp_path)
        model = [c for c in report["checks"] if c["component"] == "model"]
        assert sum(c["verdict"] == "pass" for c in model) >= 3, output
        failed = {c["cause"] for c in model if c["verdict"] in ("fail", "error")}
        assert failed == set() if cause is None else cause in failed, output
