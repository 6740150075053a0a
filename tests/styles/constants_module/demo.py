"""Build the model and translate a random batch, then take a few optimisation steps."""
import torch

from transformer import constants as C
from transformer.model import Transformer, make_causal_mask, make_pad_mask

torch.manual_seed(0)
model = Transformer()
print(f"{sum(p.numel() for p in model.parameters()):,} parameters")

src = torch.randint(1, C.SRC_VOCAB_SIZE, (4, 12))
tgt = torch.randint(1, C.TGT_VOCAB_SIZE, (4, 9))
src[0, -3:] = C.PAD_ID
tgt_mask = make_pad_mask(tgt) & make_causal_mask(tgt.size(1))
logits = model(src, tgt, make_pad_mask(src), tgt_mask)
print("logits:", tuple(logits.shape))

optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
criterion = torch.nn.CrossEntropyLoss(ignore_index=C.PAD_ID, label_smoothing=0.1)
model.train()
for step in range(100):
    logits = model(src, tgt[:, :-1], make_pad_mask(src), make_pad_mask(tgt[:, :-1]) & make_causal_mask(8))
    loss = criterion(logits.reshape(-1, C.TGT_VOCAB_SIZE), tgt[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(step, loss.item())
