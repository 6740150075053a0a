"""Boolean attention masks; True marks a key position that may be attended to."""
import torch


def key_padding_mask(tokens, pad_idx):
    """(batch, len) token ids -> (batch, 1, len): which keys are real tokens."""
    real = tokens.ne(pad_idx)
    return real[:, None, :]


def no_peek_mask(tokens):
    """(batch, len) token ids -> (1, len, len): query t sees keys 0..t."""
    length = tokens.size(1)
    grid = torch.ones(length, length, dtype=torch.bool, device=tokens.device)
    return grid.tril().unsqueeze(0)
