"""Temporal convolutional network written against PyTorch's current weight-norm API
(torch.nn.utils.parametrizations.weight_norm, as recent TCN and WaveNet-style code does), with a
spectral-normalised head and parametrize.remove_parametrizations at export time."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize
from torch.nn.utils.parametrizations import spectral_norm, weight_norm


class CausalBlock(nn.Module):
    def __init__(self, n_inputs, n_outputs, kernel_size, dilation):
        super().__init__()
        self.padding = (kernel_size - 1) * dilation
        self.conv1 = weight_norm(nn.Conv1d(n_inputs, n_outputs, kernel_size, dilation=dilation))
        self.conv2 = weight_norm(nn.Conv1d(n_outputs, n_outputs, kernel_size, dilation=dilation))
        self.downsample = nn.Conv1d(n_inputs, n_outputs, 1) if n_inputs != n_outputs else nn.Identity()

    def forward(self, x):
        out = F.relu(self.conv1(F.pad(x, (self.padding, 0))))
        out = F.relu(self.conv2(F.pad(out, (self.padding, 0))))
        return F.relu(out + self.downsample(x))


class TCN(nn.Module):
    def __init__(self, input_size, output_size, channels, kernel_size=2):
        super().__init__()
        layers = []
        for i, out_channels in enumerate(channels):
            in_channels = input_size if i == 0 else channels[i - 1]
            layers.append(CausalBlock(in_channels, out_channels, kernel_size, dilation=2 ** i))
        self.network = nn.Sequential(*layers)
        self.head = spectral_norm(nn.Linear(channels[-1], output_size))

    def forward(self, x):
        with parametrize.cached():
            return self.head(self.network(x)[:, :, -1])


def corpus_model():
    return TCN(2, 1, [4, 5, 5], kernel_size=3)


def corpus_batch(rng):
    x = torch.tensor(rng.uniform(0, 1, (4, 2, 10)), dtype=torch.get_default_dtype())
    y = x[:, 0].sum(dim=1, keepdim=True) / 5
    return x, y


def corpus_loss(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def corpus_train(model, batch):
    optimizer = torch.optim.Adam(model.parameters(), lr=4e-3)
    history = []
    for _ in range(4):
        optimizer.zero_grad()
        loss = corpus_loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        history.append(loss.item())
    return history


def corpus_eval(model, batch):
    model.eval()
    with torch.no_grad():
        before = model(batch[0])
    block = model.network[0]
    names = sorted(name for name, _ in block.named_parameters())
    parametrize.remove_parametrizations(block.conv1, "weight")
    parametrize.remove_parametrizations(model.head, "weight")
    with torch.no_grad():
        after = model(batch[0])
    return before, after, names, sorted(block.conv1.state_dict()), parametrize.is_parametrized(block.conv2)
