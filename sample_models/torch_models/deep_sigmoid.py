# The PyTorch twin of sample_models/deep_sigmoid.py: the same model and data, written with torch.
# A deep MLP with sigmoid activations (12 layers): the classic vanishing-gradient model.
# Each sigmoid scales the gradient by at most 0.25, so the first layers get gradients
# thousands of times smaller than the last ones.
# What you should see: `inspect` shows the log10 bars shrinking towards the input and reports
# "vanishing" for the early layers; `check` fails no_vanishing_gradients.
import torch
from torch import nn

torch.manual_seed(0)

layers = []
for _ in range(12):
    layers += [nn.Linear(16, 16), nn.Sigmoid()]
model = nn.Sequential(*layers, nn.Linear(16, 1))
loss_fn = nn.MSELoss()


def batch(step):
    generator = torch.Generator().manual_seed(3000 + step)
    inputs = torch.randn(32, 16, generator=generator)
    targets = inputs[:, :1] * 2.0
    return inputs, targets
