from torch import nn


class FeedForward(nn.Module):
    """Two linear maps around a ReLU, applied at every position alike."""

    def __init__(self, d_model, hidden, drop_prob=0.1):
        super().__init__()
        self.expand = nn.Linear(d_model, hidden)
        self.contract = nn.Linear(hidden, d_model)
        self.drop = nn.Dropout(p=drop_prob)

    def forward(self, x):
        inner = self.expand(x).relu()
        return self.contract(self.drop(inner))
