# The PyTorch twin of sample_models/nan_backward.py: the same model and data, written with torch.
# A "safe log" written as torch.where(h > 0, torch.log(h), 0): where ReLU outputs exactly 0, log(0)
# = -inf is computed anyway and LogBackward0 turns the zero gradient there into 0 * (1 / 0) = NaN.
# What you should see differs from gradscope's engine: PyTorch's ReLU backward *selects* 0 where
# its output was 0 (gradscope's multiplies by 0, and NaN * 0 is NaN), so on PyTorch these NaNs
# never reach a parameter and every command reports healthy gradients. See nan_norm.py for a
# backward NaN that both engines report the same way.
import torch
from torch import nn

torch.manual_seed(0)


class SafeLog(nn.Module):
    def forward(self, h):
        return torch.where(h > 0, torch.log(h), torch.zeros_like(h))


model = nn.Sequential()
model.add_module("hidden", nn.Linear(4, 16))
model.add_module("relu", nn.ReLU())
model.add_module("safe_log", SafeLog())
model.add_module("out", nn.Linear(16, 1))
loss_fn = nn.MSELoss()


def batch(step):
    generator = torch.Generator().manual_seed(6000 + step)
    inputs = torch.randn(16, 4, generator=generator)
    return inputs, inputs.sum(dim=1, keepdim=True)
