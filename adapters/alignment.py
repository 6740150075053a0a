"""Models whose ``forward`` shifts the target itself (teacher forcing inside the model).

Some code takes the whole target sentence in ``forward(src, tgt)`` and makes the decoder's input itself: a start
token in front and the last token dropped (``cat([BOS, tgt[:, :-1]])``), or the last token dropped alone
(``tgt[:, :-1]``, the sentence already starting with BOS). Its output at position i is the prediction of
``tgt[:, i]`` (or of ``tgt[:, i + 1]``), made from the tokens before it. Called as the canonical model is, with the
decoder's own input, such a model never lets the last target token reach the decoder: a check would read that as
a dropped position.

What the model does with the target is observed, not guessed: the token ids its lookups (``nn.Embedding``) are
fed when it is called (:func:`target_shift`). The checker then calls it with one more target position (a pad
token, which the shift drops) so that the decoder reads every canonical target token, and reads its outputs at
the positions that read them (:func:`extended`, :func:`aligned`): position for position, as the author's code
aligns them. A model that puts a start token of its own in front has its decoder read one token more than the
reference's: what it computes is compared position by position, never with the reference's numbers
(:data:`PREPENDS`).
"""
import torch
import torch.nn as nn

PREPENDS = "prepends a start token and drops the last target token"
DROPS_LAST = "drops the last target token"


def lookups_fed(model, call):
    """The token-id tensors the ``nn.Embedding`` modules of ``model`` are fed while ``call()`` runs (those fed
    before it fails, where it does: a model whose output is one position short fails the canonical call)."""
    fed = []

    def record(module, args):
        if args and isinstance(args[0], torch.Tensor) and not args[0].is_floating_point():
            fed.append(args[0].detach().clone())
    hooks = [m.register_forward_pre_hook(record) for m in model.modules() if isinstance(m, nn.Embedding)]
    try:
        call()
    except Exception:  # the candidate's own code, or the canonical call's reading of its output
        pass
    finally:
        for hook in hooks:
            hook.remove()
    return fed


def shift_of(fed, tgt):
    """How the target ``tgt`` (batch, length) reaches the lookups that were ``fed``: None when one is fed ``tgt``
    itself (or none is fed a shifted one), else :data:`PREPENDS` or :data:`DROPS_LAST`."""
    if any(t.shape == tgt.shape and torch.equal(t, tgt) for t in fed):
        return None
    for t in fed:
        if t.shape == tgt.shape and tgt.size(1) > 1 and torch.equal(t[:, 1:], tgt[:, :-1]) \
                and bool((t[:, 0] == t[0, 0]).all()) and not torch.equal(t[:, 0], tgt[:, 0]):
            return PREPENDS
        if t.dim() == 2 and t.shape == (tgt.size(0), tgt.size(1) - 1) and torch.equal(t, tgt[:, :-1]):
            return DROPS_LAST
    return None


def probe_target(batch, length, vocab, avoid=0):
    """A target of distinct neighbouring tokens (none ``avoid``, the pad token), each row starting with another
    token, so that a shifted copy is told from the target itself."""
    tokens = [t for t in range(vocab) if t != avoid]
    rows = [[tokens[(b + 2 * i) % len(tokens)] for i in range(length)] for b in range(batch)]
    return torch.tensor(rows, dtype=torch.long)


def target_shift(model, call, tgt):
    """:func:`shift_of` the target ``tgt`` as ``model`` treats it when ``call()`` (a call of it with ``tgt``)
    runs."""
    with torch.no_grad():
        return shift_of(lookups_fed(model, call), tgt)


def extended(tgt, tgt_mask, shift, pad):
    """The target and target mask to give a model that shifts its target (``shift``), so that its decoder reads
    every token of ``tgt``: one more position, a pad token the shift drops; the mask over what the decoder reads
    (its start token visible to every position, where it puts one in front)."""
    tgt = torch.cat([tgt, torch.full_like(tgt[:, :1], pad)], dim=1)
    if shift != PREPENDS or tgt_mask is None:
        return tgt, tgt_mask
    batch, length = tgt_mask.size(0), tgt_mask.size(-1)
    mask = torch.zeros(batch, length + 1, length + 1, dtype=tgt_mask.dtype, device=tgt_mask.device)
    mask[:, :, 0] = True
    mask[:, 1:, 1:] = tgt_mask.expand(batch, length, length)
    return tgt, mask


def decoder_length(length, shift):
    """How many positions the decoder of a model that shifts its target reads for a canonical target of
    ``length`` (given :func:`extended`)."""
    return length + 1 if shift == PREPENDS else length


def aligned(out, shift):
    """The outputs of a model that shifts its target at the positions that read the canonical target's tokens."""
    if shift == PREPENDS and isinstance(out, torch.Tensor) and out.dim() >= 2:
        return out[:, 1:]
    return out
