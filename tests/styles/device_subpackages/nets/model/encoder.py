from torch import nn

from nets.blocks.encoder_layer import EncoderLayer
from nets.embedding.transformer_embedding import TransformerEmbedding


class Encoder(nn.Module):
    def __init__(self, enc_voc_size, max_len, d_model, ffn_hidden, n_head, n_layers, drop_prob, pad_idx, device):
        super().__init__()
        self.emb = TransformerEmbedding(enc_voc_size, d_model, max_len, drop_prob, pad_idx, device)
        self.layers = nn.ModuleList([EncoderLayer(d_model=d_model, ffn_hidden=ffn_hidden, n_head=n_head,
                                                  drop_prob=drop_prob) for _ in range(n_layers)])

    def forward(self, x, src_mask):
        x = self.emb(x)
        for layer in self.layers:
            x = layer(x, src_mask)
        return x
