"""Masks that only a retry with key-padding vectors fits (``forward(x, context=None, padding_mask=None)``, a (batch,
Lk) mask True at the pad, torch's word): the retry reads the masks' polarity again, from how the attention hides a
masked key, instead of keeping the first guess (True = may attend). Read with the wrong polarity, every real key is
hidden, every row is -inf, and the NaNs that follow were blamed on the author in a dozen checks (§3.2.3)."""
import textwrap

import pytest

from tests.suite import run_suite, verdicts

PAD_VECTORS = textwrap.dedent('''
    import math
    import torch
    import torch.nn as nn


    class MultiHeadAttention(nn.Module):
        """Queries from x, keys and values from context (x itself when None); padding_mask: (batch, Lk), True at
        the padded keys; masking: the decoder's own causal mask."""
        def __init__(self, d_model, n_heads, masking=False):
            super().__init__()
            self.n_heads, self.d_head, self.masking = n_heads, d_model // n_heads, masking
            self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

        def forward(self, x, context=None, padding_mask=None):
            context = x if context is None else context
            b = x.size(0)
            split = lambda t: t.view(b, -1, self.n_heads, self.d_head).transpose(1, 2)
            q, k, v = split(self.q(x)), split(self.k(context)), split(self.v(context))
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
            if padding_mask is not None:
                scores = scores.masked_fill(padding_mask[:, None, None, :], float("-inf"))
            if self.masking:  # the decoder's own: each position sees the ones before it
                later = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
                scores = scores.masked_fill(later, float("-inf"))
            out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, -1, self.n_heads * self.d_head)
            return self.o(out)


    class EncoderLayer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, dropout):
            super().__init__()
            self.attention = MultiHeadAttention(d_model, n_heads)
            self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
            self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.drop = nn.Dropout(dropout)

        def forward(self, x, padding_mask=None):
            x = self.norm1(x + self.drop(self.attention(x, None, padding_mask)))
            return self.norm2(x + self.drop(self.ff(x)))


    class DecoderLayer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, dropout):
            super().__init__()
            self.self_attention = MultiHeadAttention(d_model, n_heads, masking=True)
            self.cross_attention = MultiHeadAttention(d_model, n_heads)
            self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
            self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.drop = nn.Dropout(dropout)

        def forward(self, x, memory, memory_padding_mask=None, padding_mask=None):
            x = self.norm1(x + self.drop(self.self_attention(x, None, padding_mask)))
            x = self.norm2(x + self.drop(self.cross_attention(x, memory, memory_padding_mask)))
            return self.norm3(x + self.drop(self.ff(x)))


    class Transformer(nn.Module):
        """Makes its masks from the pad token 0: (batch, L) True at the pad."""
        def __init__(self, src_vocab, tgt_vocab, d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.1,
                     max_len=64):
            super().__init__()
            self.d_model = d_model
            self.src_embed, self.tgt_embed = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
            position = torch.arange(max_len).unsqueeze(1)
            rate = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            table = torch.zeros(max_len, d_model)
            table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
            self.register_buffer("table", table)
            self.encoder = nn.ModuleList(EncoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers))
            self.decoder = nn.ModuleList(DecoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers))
            self.drop = nn.Dropout(dropout)
            self.out = nn.Linear(d_model, tgt_vocab)

        def embed(self, embedding, tokens):
            return self.drop(embedding(tokens) * math.sqrt(self.d_model) + self.table[:tokens.size(1)])

        def forward(self, src, tgt):
            src_pad, tgt_pad = src == 0, tgt == 0
            memory = self.embed(self.src_embed, src)
            for layer in self.encoder:
                memory = layer(memory, src_pad)
            x = self.embed(self.tgt_embed, tgt)
            for layer in self.decoder:
                x = layer(x, memory, src_pad, tgt_pad)
            return self.out(x)


    if __name__ == "__main__":
        model = Transformer(11, 13)
        print(model(torch.tensor([[5, 3, 2, 0]]), torch.tensor([[1, 4, 6]])).shape)
''')


@pytest.mark.parametrize("planted", [False, True], ids=["correct", "padding_ignored"])
def test_key_padding_vectors_true_at_the_pad_are_read_so(tmp_path, planted):
    """No fail or error on the correct code (its decoder's self-attention causal by its own constructor switch);
    with the padding mask planted away (never applied), the padded keys the attention then sees are still named, on
    the attention and on both layers."""
    source = PAD_VECTORS.replace("if padding_mask is not None:", "if False:") if planted else PAD_VECTORS
    path = tmp_path / "pad_vectors.py"
    path.write_text(source)
    code, output, report = run_suite(f"--impl={path}", "-k", "multi_head_attention or encoder_layer or decoder_layer or model",
                                     tmp_path=tmp_path)
    assert report is not None, output[-3000:]
    flagged = verdicts(report, "fail") | verdicts(report, "error")
    if not planted:
        assert flagged == set(), flagged
    else:
        assert {"multi_head_attention", "encoder_layer", "decoder_layer"} <= {
            component for component, check, _ in flagged if check == "masked_keys_do_not_change_outputs"}, flagged
