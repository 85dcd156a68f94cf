# The PyTorch twin of sample_models/rnn_exploding.py: the same model and data, written with torch.
# An unrolled recurrent network (30 time steps) whose recurrent weight is 1.5 x identity, with a
# linear activation: the hidden state and the gradient both grow like 1.5 ** 30.
# What you should see: `inspect` reports "exploding" gradients (norms far above 1000) for the
# recurrent and input weights; `clip --max 1` shows how much clipping would cut them;
# `watch --nan` stops after a few steps, when the huge updates overflow to Inf/NaN.
import torch
from torch import nn

torch.manual_seed(0)
STEPS = 30


class UnrolledRNN(nn.Module):
    def __init__(self, hidden=8):
        super().__init__()
        self.input = nn.Linear(4, hidden)
        self.recurrent = nn.Linear(hidden, hidden, bias=False)
        self.readout = nn.Linear(hidden, 1)
        with torch.no_grad():
            self.recurrent.weight.copy_(torch.eye(hidden) * 1.5)

    def forward(self, sequence):
        state = torch.zeros(sequence.shape[0], self.recurrent.weight.shape[0], dtype=sequence.dtype)
        for t in range(sequence.shape[1]):
            state = self.recurrent(state) + self.input(sequence[:, t])
        return self.readout(state)


model = UnrolledRNN()
loss_fn = nn.MSELoss()


def batch(step):
    generator = torch.Generator().manual_seed(4000 + step)
    sequence = torch.randn(8, STEPS, 4, generator=generator) * 0.1
    return sequence, sequence[:, -1, :1]
