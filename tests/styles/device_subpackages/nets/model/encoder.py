from torch import nn

from nets.blocks.encoder_block import EncoderBlock
from nets.embedding.inputs import EmbedWithPositions


class Encoder(nn.Module):
    def __init__(self, enc_voc_size, max_len, d_model, ffn_hidden, n_head, n_layers, drop_prob, device):
        super().__init__()
        self.embed = EmbedWithPositions(vocab_size=enc_voc_size, d_model=d_model, max_len=max_len,
                                    drop_prob=drop_prob, device=device)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model=d_model, ffn_hidden=ffn_hidden, n_head=n_head, drop_prob=drop_prob)
            for _ in range(n_layers))

    def forward(self, src, src_mask):
        hidden = self.embed(src)
        for block in self.blocks:
            hidden = block(hidden, src_mask)
        return hidden
