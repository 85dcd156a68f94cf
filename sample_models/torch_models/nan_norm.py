# The PyTorch twin of sample_models/nan_norm.py: the same model and data, written with torch.
# A hand-written normalisation layer with its epsilon outside the square root:
# x / (sqrt(var) + eps). The forward pass is finite even for a constant row (0 / eps = 0), but the
# derivative of sqrt at 0 is infinite, so backward produces NaN. Batch 3 holds a padded sample
# (all zeros): the bias-free first layer maps it to a constant row.
# What you should see: `watch --steps 5 --nan` trains steps 0-2, stops at step 3 in phase
# "backward" with node SqrtBackward0, module "norm" and the line with `.sqrt()` in this file;
# `inspect --step 3` shows NaN gradients in `embed.weight`.
import torch
from torch import nn

torch.manual_seed(0)


class Standardize(nn.Module):
    def forward(self, x):
        centered = x - x.mean(dim=1, keepdim=True)
        std = (centered * centered).mean(dim=1, keepdim=True).sqrt()
        return centered / (std + 1e-5)


model = nn.Sequential()
model.add_module("embed", nn.Linear(6, 16, bias=False))
model.add_module("norm", Standardize())
model.add_module("act", nn.Tanh())
model.add_module("out", nn.Linear(16, 1))
loss_fn = nn.MSELoss()


def batch(step):
    generator = torch.Generator().manual_seed(10000 + step)
    inputs = torch.randn(16, 6, generator=generator)
    if step == 3:
        inputs[5] = 0.0
    return inputs, inputs.sum(dim=1, keepdim=True)
