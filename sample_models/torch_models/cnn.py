# The PyTorch twin of sample_models/cnn.py: the same model and data, written with torch.
# A small healthy CNN: two 3x3 convolutions, max pooling and a linear classifier on 10x10
# images of three kinds of stripes (horizontal, vertical, diagonal), trained with Adam.
# What you should see: every layer gets a gradient of reasonable size, no findings;
# `gradscope check --overfit` passes.
import torch
from torch import nn, optim

# Seed 1: with seed 0, PyTorch's initialisation leaves half of the second convolution's filters dead.
torch.manual_seed(1)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 4, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(4, 8, 3),
            nn.ReLU(),
        )
        self.classifier = nn.Linear(8 * 2 * 2, 3)

    def forward(self, images):
        return self.classifier(self.features(images).flatten(1))


model = SmallCNN()
loss_fn = nn.CrossEntropyLoss()


def make_optimizer(parameters):
    return optim.Adam(parameters, lr=1e-2)


def batch(step):
    generator = torch.Generator().manual_seed(2000 + step)
    labels = torch.randint(0, 3, (16,), generator=generator)
    rows = torch.arange(10).reshape(10, 1).expand(10, 10)
    cols = torch.arange(10).reshape(1, 10).expand(10, 10)
    patterns = torch.stack([(rows % 2 == 0), (cols % 2 == 0), ((rows + cols) % 3 == 0)]).float()
    images = patterns[labels].unsqueeze(1) + 0.3 * torch.randn(16, 1, 10, 10, generator=generator)
    return images, labels
