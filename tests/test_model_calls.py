"""The whole model under the canonical call (``adapters.wrapping.AdaptedModel``): every call of one built model
takes the same path, so that the checks that compare two calls (eval mode, the batch, hidden positions) compare the
model with itself, not two ways of calling it."""
import torch
import torch.nn as nn

from adapters.wrapping import AdaptedModel

PAD = 0


class EncodeDecodeModel(nn.Module):
    """A model fixed at its own width (8, where the checker asks for 6, as a factory reading its author's
    configuration builds it): its forward, which makes its masks from the pad token, gives no output of the width
    asked for, so it is called through ``encode`` and ``decode``, which take masks."""

    def __init__(self, vocab=11, d_model=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.mix = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(0.5)

    def encode(self, src, src_mask):
        return self.dropout(self.embed(src))

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.mix(self.dropout(self.embed(tgt)) + memory.sum(1, keepdim=True))

    def forward(self, src, tgt):
        return self.decode(self.encode(src, src != PAD), None, tgt, None)


def canonical_inputs():
    generator = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(1, 11, (2, 5), generator=generator), torch.randint(1, 11, (2, 4), generator=generator)
    src_mask = torch.ones(2, 1, 5, dtype=torch.bool)
    src_mask[0, :, -2:] = False
    tgt_mask = torch.tril(torch.ones(1, 4, 4, dtype=torch.bool)).expand(2, 4, 4).clone()
    tgt_mask[1, :, -1] = False  # the last target position is padding: no query reads it
    return src, tgt, src_mask, tgt_mask


def test_the_first_call_takes_the_path_of_every_later_one():
    """The first call finds that the forward does not fit and turns to encode and decode: it is made again that
    way, with the tokens as given (not replaced by the pad token, which only a maskless forward needs)."""
    model = AdaptedModel(EncodeDecodeModel().eval(), convention="keep", d_model=6)
    inputs = canonical_inputs()
    first, second = model(*inputs), model(*inputs)
    assert model.forward_arguments is None
    assert torch.equal(first, second)


def test_the_first_call_made_again_draws_the_same_dropout():
    """In training, the call made again starts from the random state the first one was given: two calls seeded
    alike drop the same units, as they would on any later pair of calls."""
    model = AdaptedModel(EncodeDecodeModel().train(), convention="keep", d_model=6)
    inputs = canonical_inputs()
    torch.manual_seed(3)
    first = model(*inputs)
    torch.manual_seed(3)
    assert torch.equal(first, model(*inputs))
