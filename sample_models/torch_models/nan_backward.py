# The PyTorch twin of sample_models/nan_backward.py: the same model and data, written with torch.
# A model whose forward pass is finite but whose backward pass produces NaN: a "safe log" written
# as torch.where(h > 0, torch.log(h), 0). Where the hand-written ReLU outputs exactly 0, log(0) = -inf is
# computed anyway, its gradient 0 * (1 / 0) is NaN, and the ReLU's mask multiplication passes it on.
# What you should see: `watch --steps 3 --nan` stops at step 0 in phase "backward" with node
# LogBackward0, module "safe_log" and the line with `torch.log` in this file; `inspect` shows NaN
# gradients in every layer before it.
import torch
from torch import nn

torch.manual_seed(0)


class SafeLog(nn.Module):
    def forward(self, h):
        return torch.where(h > 0, torch.log(h), torch.zeros_like(h))


class MaskReLU(nn.Module):  # (h > 0) * h: unlike nn.ReLU, it multiplies NaN gradients by 0 (= NaN)
    def forward(self, h):
        return h * (h > 0).float()


model = nn.Sequential()
model.add_module("hidden", nn.Linear(4, 16))
model.add_module("relu", MaskReLU())
model.add_module("safe_log", SafeLog())
model.add_module("out", nn.Linear(16, 1))
loss_fn = nn.MSELoss()


def batch(step):
    generator = torch.Generator().manual_seed(6000 + step)
    inputs = torch.randn(16, 4, generator=generator)
    return inputs, inputs.sum(dim=1, keepdim=True)
