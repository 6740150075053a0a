from torch import nn

from nets.layers.dot_product import DotProductAttention


class HeadedAttention(nn.Module):
    """Projects queries, keys and values, attends in n_head sub-spaces and projects the joined heads back."""

    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.to_query = nn.Linear(d_model, d_model)
        self.to_key = nn.Linear(d_model, d_model)
        self.to_value = nn.Linear(d_model, d_model)
        self.to_output = nn.Linear(d_model, d_model)
        self.score = DotProductAttention()

    def _heads(self, x):
        batch, length, width = x.shape
        return x.reshape(batch, length, self.n_head, width // self.n_head).transpose(1, 2)

    def forward(self, q, k, v, mask=None):
        mixed, _ = self.score(self._heads(self.to_query(q)), self._heads(self.to_key(k)),
                              self._heads(self.to_value(v)), mask=mask)
        batch, _, length, _ = mixed.shape
        joined = mixed.transpose(1, 2).reshape(batch, length, -1)
        return self.to_output(joined)
