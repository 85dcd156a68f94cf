# The PyTorch twin of sample_models/nan_forward.py: the same model and data, written with torch.
# A model whose forward pass produces NaN only at step 5: the features are counts and the
# model takes log(count + 1), but batch 5 contains a corrupted negative count (-3).
# What you should see: `watch --steps 10 --nan` trains steps 0-4 normally, stops at step 5 and
# reports phase "forward", module "features", node LogBackward0 and the line with `torch.log` in
# this file; the later layers (net.0, net.1, net.2) only passed the NaN on.
import torch
from torch import nn

torch.manual_seed(0)


class LogFeatures(nn.Module):
    def forward(self, counts):
        return torch.log(counts + 1.0)


class CountModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = LogFeatures()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, counts):
        return self.net(self.features(counts))


model = CountModel()
loss_fn = nn.MSELoss()


def batch(step):
    generator = torch.Generator().manual_seed(5000 + step)
    counts = torch.randint(0, 20, (16, 6), generator=generator).float()
    if step == 5:
        counts[3, 2] = -3.0
    targets = counts.sum(dim=1, keepdim=True) / 60.0
    return counts, targets
