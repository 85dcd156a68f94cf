"""Lazy layers as in the PyTorch docs and d2l.ai: LazyConv2d/LazyBatchNorm2d/LazyLinear infer their
input sizes on a dry run, after which the optimizer is built and the model trains as usual."""
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


class LazyNet(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.LazyConv2d(6, kernel_size=3, padding=1), nn.LazyBatchNorm2d(), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.LazyConv2d(8, kernel_size=3), nn.ReLU(),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.LazyLinear(16), nn.ReLU(), nn.LazyLinear(num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def corpus_model():
    net = LazyNet()
    net(torch.zeros(2, 1, 10, 10))  # dry run: infers every input size and initialises the parameters
    return net


def corpus_batch(rng):
    x = torch.tensor(rng.normal(size=(6, 1, 10, 10)), dtype=torch.get_default_dtype())
    y = torch.tensor(rng.integers(0, 4, size=6))
    return x, y


def corpus_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def corpus_train(model, batch):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = corpus_loss(model, batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def corpus_eval(model, batch):
    model.eval()
    with torch.no_grad():
        logits = model(batch[0])
    return logits.argmax(1), [type(layer).__name__ for layer in model.modules()]
