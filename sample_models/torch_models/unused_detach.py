# The PyTorch twin of sample_models/unused_detach.py: the same model and data, written with torch.
# Two classic wiring bugs: an auxiliary head that is built but never used, and a .detach() that
# cuts the encoder off from the loss.
# What you should see: `inspect` and `check` report "no_grad" for encoder.0.weight,
# encoder.0.bias, aux_head.weight and aux_head.bias; the head trains normally.
import torch
from torch import nn

torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.aux_head = nn.Linear(16, 2)
        self.head = nn.Linear(16, 3)

    def forward(self, inputs):
        features = self.encoder(inputs).detach()
        return self.head(features)


model = Classifier()
loss_fn = nn.CrossEntropyLoss()


def batch(step):
    generator = torch.Generator().manual_seed(8000 + step)
    inputs = torch.randn(32, 8, generator=generator)
    return inputs, torch.randint(0, 3, (32,), generator=generator)
