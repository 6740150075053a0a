from torch import nn

from nets.blocks.decoder_block import DecoderBlock
from nets.embedding.inputs import EmbedWithPositions


class Decoder(nn.Module):
    def __init__(self, dec_voc_size, max_len, d_model, ffn_hidden, n_head, n_layers, drop_prob, device):
        super().__init__()
        self.embed = EmbedWithPositions(vocab_size=dec_voc_size, d_model=d_model, max_len=max_len,
                                    drop_prob=drop_prob, device=device)
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model=d_model, ffn_hidden=ffn_hidden, n_head=n_head, drop_prob=drop_prob)
            for _ in range(n_layers))

    def forward(self, trg, enc_src, trg_mask, src_mask):
        hidden = self.embed(trg)
        for block in self.blocks:
            hidden = block(hidden, enc_src, trg_mask, src_mask)
        return hidden
