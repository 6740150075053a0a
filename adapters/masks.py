"""Mask conventions: the canonical mask (boolean, True = may attend) and the shapes and values code takes instead.

A convention is ``keep``, ``blocked`` (torch's) or ``additive``, with a suffix when the code wants a head axis
(:data:`HEAD_AXIS`) or key-padding vectors (:data:`KEY_VECTORS`); masks are converted both ways, split into torch's
two parts, turned into sequence lengths, and the convention of the code's own mask helpers is read from their output.
"""
import torch

from conformance.contract.verdicts import Missing

LENGTHS = "lengths"
"""The part of a canonical mask given to a parameter that takes padding as sequence lengths (``src_lengths``)."""


def mask_lengths(mask, padding_alone=False):
    """The sequence lengths (batch,) a canonical mask gives its keys: the keys some query may see, which must be a
    prefix of each sequence, and, when ``padding_alone``, all the mask hides (else a ``missing`` verdict: the check
    cannot be made as the code takes its inputs)."""
    seen = mask.any(-2)
    if padding_alone and not torch.equal(mask, seen.unsqueeze(-2).expand_as(mask)):
        raise Missing("adapter.mask_not_expressible_as_lengths", "a mask of padding alone, which lengths can express",
                      "the code takes its mask as sequence lengths, and this check's mask also hides keys from some "
                      "queries only (a causal triangle), which lengths cannot express")
    seen = seen.reshape(mask.shape[0], -1)
    lengths = seen.sum(-1)
    if not torch.equal(seen, torch.arange(seen.shape[-1], device=seen.device) < lengths.unsqueeze(-1)):
        raise Missing("adapter.padding_not_expressible_as_lengths", "a padding mask its sequence lengths can express",
                      "the code takes padding as sequence lengths, and this check's mask pads positions that are not "
                      "at the end of a sequence, which lengths cannot express")
    return lengths


def torch_mask(mask, part):
    """A canonical mask (True = may attend) as one of torch's two parts, True = blocked: ``padding`` (batch, key),
    the keys no query may see; ``attention`` (query, key), what every sample blocks besides them (None if nothing,
    torch's own default; a tensor blocking nothing for the part :data:`REQUIRED` marks)."""
    if not isinstance(mask, torch.Tensor):
        return None
    seen = mask.any(-2)
    if part == "padding":
        return ~seen.reshape(seen.shape[0], -1) if mask.dim() > 2 else ~seen
    blocked = ~(mask | ~seen.unsqueeze(-2))
    blocked = blocked.reshape(-1, *blocked.shape[-2:]).any(0)
    return blocked if blocked.any() or part.endswith(REQUIRED) else None


REQUIRED = "!"
"""Suffix of a torch part planned for a parameter with no default (``forward(src, tgt, src_padding_mask, tgt_mask)``):
its author's callers always pass a tensor, so it is given one even where it blocks nothing (a target of one token),
never torch's None."""


def torch_part(planned):
    """``(canonical mask, part)`` of a call plan's entry for one of torch's two parts (``tgt_mask:attention``,
    ``src_mask:padding``), the part without its :data:`REQUIRED` mark; None for any other entry."""
    mask, _, part = planned.partition(":")
    part = part.removesuffix(REQUIRED)
    return (mask, part) if part in ("padding", "attention") else None


MASK_CONVENTIONS = {
    "keep": "boolean, True = may attend",
    "blocked": "boolean, True = blocked (torch's convention)",
    "additive": "additive float, 0 = may attend, -inf = blocked",
}


HEAD_AXIS = "+heads"
"""Suffix of a convention whose masks carry a head axis: (batch, 1, Lq|1, Lk), for code that applies the mask to
the (batch, h, Lq, Lk) scores without adding the axis itself."""


KEY_VECTORS = "+keys"
"""Suffix of a convention whose masks are (batch, Lk) vectors, the keys some query may see (a key-padding mask, as
code that views it as (batch, 1, 1, Lk) takes it): what else the canonical mask blocks is not given."""


NO_HEAD_AXIS = "-heads"
"""Suffix of a convention whose masks for the attention function come without the head axis the canonical call
gives them, (batch, 1|Lq, Lk): an attention that adds the axis itself, as its multi-head block calls it."""


FULL_SHAPE = "+full"
"""Suffix of a convention whose masks are whole, one (batch, Lq, Lk) mask each (:func:`full_masks`), for code that
states that shape (``assert mask.shape == (batch, len_q, len_k)``) or indexes it."""


def base_convention(convention):
    """A convention without its shape suffix."""
    return (convention.removesuffix(HEAD_AXIS).removesuffix(KEY_VECTORS).removesuffix(NO_HEAD_AXIS)
            .removesuffix(FULL_SHAPE))


def full_masks(named):
    """The canonical inputs ``named`` (batch first) with each 3-D mask expanded to one whole (batch, Lq, Lk) mask:
    its rows are the positions of the sequence that queries (the queries of an attention block, the input ``x`` of
    a layer or stack: the target for a decoder's source mask, the source itself for an encoder's)."""
    queries = named.get("query", named.get("x"))
    if not isinstance(queries, torch.Tensor) or queries.dim() < 3:
        return named
    batch, length = queries.shape[0], queries.shape[-2]
    return {name: value.expand(batch, length, value.size(-1)).clone()
            if name.endswith("mask") and isinstance(value, torch.Tensor) and value.dim() == 3 else value
            for name, value in named.items()}


def describe_convention(convention):
    shape = ("; masks given a head axis (batch, 1, Lq, Lk)" if convention.endswith(HEAD_AXIS) else
             "; masks given as (batch, Lk) key-padding vectors, which cannot say what else a query may not see"
             if convention.endswith(KEY_VECTORS) else
             "; masks given without a head axis (batch, 1|Lq, Lk)" if convention.endswith(NO_HEAD_AXIS) else
             "; masks given whole, one (batch, Lq, Lk) mask each" if convention.endswith(FULL_SHAPE) else "")
    return MASK_CONVENTIONS[base_convention(convention)] + shape


def to_convention(mask, convention):
    """Convert a canonical mask (bool, True = may attend) into the implementation's convention."""
    if mask is None or not isinstance(mask, torch.Tensor):
        return mask
    if convention.endswith(HEAD_AXIS):
        mask = mask.unsqueeze(1) if mask.dim() == 3 else mask
        convention = convention.removesuffix(HEAD_AXIS)
    if convention.endswith(KEY_VECTORS):
        mask = mask.any(-2) if mask.dim() == 3 else mask
        convention = convention.removesuffix(KEY_VECTORS)
    if convention.endswith(NO_HEAD_AXIS):
        mask = mask.squeeze(1) if mask.dim() == 4 and mask.size(1) == 1 else mask
        convention = convention.removesuffix(NO_HEAD_AXIS)
    convention = convention.removesuffix(FULL_SHAPE)  # (expanded with the queries' length: :func:`full_masks`)
    if convention == "blocked":
        return ~mask
    if convention == "additive":
        return torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, float("-inf"))
    return mask


def convention_of_mask(mask):
    """The convention a subsequent-position mask helper uses, from its output for size 3; None if unclear."""
    if not isinstance(mask, torch.Tensor) or mask.numel() < 9:
        return None
    m = mask.reshape(-1, 3, 3)[0]
    if m.is_floating_point() and torch.isinf(m).any():
        return "additive"
    m = m != 0
    lower = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    if torch.equal(m, lower):
        return "keep"
    if torch.equal(m, ~lower):
        return "blocked"
    return None


def from_convention(mask, convention):
    """An implementation's mask (any convention) as a canonical boolean mask, True = may attend (without the head
    axis of a convention that has one)."""
    if not isinstance(mask, torch.Tensor):
        return mask
    if (convention or "").endswith(HEAD_AXIS) and mask.dim() == 4 and mask.size(1) == 1:
        mask = mask.squeeze(1)
    if (convention or "").endswith(KEY_VECTORS) and mask.dim() == 2:
        mask = mask.unsqueeze(-2)
    convention = base_convention(convention or "keep")
    if convention == "additive":
        return mask == 0
    return (mask == 0) if convention == "blocked" else (mask != 0)


def infer_convention(helper, role="subsequent_mask"):
    """The mask convention of the code's own mask helper: a subsequent-mask helper's output for size 3, or a
    padding-mask helper's for tokens whose last one is padding (``[[5, 6, pad]]``, with pad 0 and then 1)."""
    if role == "padding_mask":
        for pad in (0, 1):
            tokens = torch.tensor([[5, 6, pad]])
            for arguments in ((tokens, pad), (tokens, tokens, pad), (tokens,)):
                try:
                    return convention_of_padding(helper(*arguments))
                except Exception:  # the helper's own code, or another signature; its checks report a failure
                    continue
        return None
    for arguments in ((3,), (torch.ones(1, 3, dtype=torch.long),), (3, "cpu")):  # (size, device) helpers too
        try:
            return convention_of_mask(helper(*arguments))
        except Exception:  # the helper's own code; a failure is reported by its checks
            continue
    return None


def convention_of_padding(mask):
    """The convention of a padding mask made for tokens ``[[5, 6, pad]]``; raises ValueError if unclear."""
    row = mask.reshape(-1)[-3:]
    if row.is_floating_point() and torch.isinf(row).any():
        return "additive"
    kept = (row != 0).tolist()
    conventions = {(True, True, False): "keep", (False, False, True): "blocked"}
    if tuple(kept) not in conventions:
        raise ValueError(f"a padding mask {kept} of unclear convention")
    return conventions[tuple(kept)]


def probe_masks(device="cpu"):
    """The canonical masks of a probe call of 2 samples, 5 source and 4 target positions: the last source position
    padded, the target's subsequent mask."""
    src_mask = torch.ones(2, 1, 5, dtype=torch.bool, device=device)
    src_mask[:, :, -1] = False
    return src_mask, torch.tril(torch.ones(1, 4, 4, dtype=torch.bool, device=device)).expand(2, -1, -1)
