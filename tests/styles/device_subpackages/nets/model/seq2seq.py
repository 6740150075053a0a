import torch
from torch import nn

from nets.model.decoder import Decoder
from nets.model.encoder import Encoder


class TranslationModel(nn.Module):
    """Encoder, decoder and a projection to the target vocabulary; the masks are built from the token ids."""

    def __init__(self, src_pad_idx, trg_pad_idx, trg_sos_idx, enc_voc_size, dec_voc_size, d_model, n_head,
                 max_len, ffn_hidden, n_layers, drop_prob, device):
        super().__init__()
        self.src_pad_idx = src_pad_idx
        self.trg_pad_idx = trg_pad_idx
        self.trg_sos_idx = trg_sos_idx
        self.device = device
        sizes = dict(max_len=max_len, d_model=d_model, ffn_hidden=ffn_hidden, n_head=n_head,
                     n_layers=n_layers, drop_prob=drop_prob, device=device)
        self.encoder = Encoder(enc_voc_size=enc_voc_size, **sizes)
        self.decoder = Decoder(dec_voc_size=dec_voc_size, **sizes)
        self.generator = nn.Linear(d_model, dec_voc_size)

    def source_mask(self, src):
        keep = src != self.src_pad_idx
        return keep[:, None, None, :]

    def lookahead_mask(self, trg):
        length = trg.size(1)
        keep = (trg != self.trg_pad_idx)[:, None, None, :]
        causal = torch.ones(length, length, dtype=torch.bool, device=trg.device).tril()
        return keep & causal

    def forward(self, src, trg):
        src_mask = self.source_mask(src)
        memory = self.encoder(src, src_mask)
        out = self.decoder(trg, memory, self.lookahead_mask(trg), src_mask)
        return torch.log_softmax(self.generator(out), dim=-1)
