# The PyTorch twin of sample_models/dead_relu.py: the same model and data, written with torch.
# A dead-ReLU model: the first layer's bias was initialised to -20, so every ReLU output is 0
# for every input and no gradient reaches the first layer (or the second layer's weight).
# What you should see: `inspect` and `check` report "dead" for hidden.weight, hidden.bias and
# out.weight (gradients identically zero); only out.bias learns.
import torch
from torch import nn

torch.manual_seed(0)

model = nn.Sequential()
model.add_module("hidden", nn.Linear(8, 32))
model.add_module("relu", nn.ReLU())
model.add_module("out", nn.Linear(32, 3))
nn.init.constant_(model.hidden.bias, -20.0)
loss_fn = nn.CrossEntropyLoss()


def batch(step):
    generator = torch.Generator().manual_seed(7000 + step)
    inputs = torch.randn(32, 8, generator=generator)
    return inputs, torch.randint(0, 3, (32,), generator=generator)
