"""Every size and switch of the model in one place."""
from dataclasses import dataclass


@dataclass
class TransformerConfig:
    src_vocab_size: int = 1000
    tgt_vocab_size: int = 1000
    max_len: int = 256           # longest sequence the learned position table covers
    d_embed: int = 512           # the model width
    n_heads: int = 8
    d_ff: int = 2048
    n_layers: int = 6
    dropout: float = 0.1
    layer_norm_eps: float = 1e-5
    layer_norm_first: bool = True    # pre-norm sub-layers (and a closing norm per stack)
    bias: bool = True                # biases on the attention projections
    pad_id: int = 0

    @property
    def d_head(self):
        return self.d_embed // self.n_heads
