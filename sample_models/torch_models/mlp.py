# The PyTorch twin of sample_models/mlp.py: the same model and data, written with torch.
# A healthy MLP classifier (3 Gaussian blobs in 8 dimensions, 2 hidden ReLU layers).
# What you should see: gradients of similar magnitude in every layer, no findings;
# `gradscope check` passes and `gradscope watch --nan` trains without stopping.
import torch
from torch import nn

torch.manual_seed(0)
CENTERS = torch.randn(3, 8) * 2.0

model = nn.Sequential(
    nn.Linear(8, 32),
    nn.ReLU(),
    nn.Linear(32, 32),
    nn.ReLU(),
    nn.Linear(32, 3),
)
loss_fn = nn.CrossEntropyLoss()


def batch(step):
    generator = torch.Generator().manual_seed(1000 + step)
    labels = torch.randint(0, 3, (32,), generator=generator)
    inputs = CENTERS[labels] + torch.randn(32, 8, generator=generator)
    return inputs, labels
