"""Hinton's forward-forward algorithm in the style of pytorch/examples/mnist_forward_forward/main.py:
each Layer (an nn.Linear subclass overriding train()) owns its Adam optimizer and trains greedily."""
import numpy as np
import torch
import torch.nn as nn
from torch.optim import Adam

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class args:
    lr = 0.03
    threshold = 2
    epochs = 2


def overlay_y_on_x(x, y):
    """Replace the first 10 pixels of data [x] with one-hot-encoded label [y]
    """
    x_ = x.clone()
    x_[:, :10] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Net(torch.nn.Module):
    def __init__(self, dims):

        super().__init__()
        self.layers = []
        for d in range(len(dims) - 1):
            self.layers = self.layers + [Layer(dims[d], dims[d + 1]).to(device)]

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness = goodness + [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)

    def train(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for i, layer in enumerate(self.layers):
            h_pos, h_neg = layer.train(h_pos, h_neg)


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=args.lr)
        self.threshold = args.threshold
        self.num_epochs = args.epochs

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for i in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            # The following loss pushes pos (neg) samples to
            # values larger (smaller) than the self.threshold.
            loss = torch.log(1 + torch.exp(torch.cat([
                -g_pos + self.threshold,
                g_neg - self.threshold]))).mean()
            self.opt.zero_grad()
            # this backward just compute the derivative and hence
            # is not considered backpropagation.
            loss.backward()
            self.opt.step()
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


class Holder(nn.Module):
    """Registers the layers (Net keeps them in a plain list) so their weights can be compared."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.layers = nn.ModuleList(net.layers)


CORPUS_FLOAT64 = False


def corpus_model():
    torch.manual_seed(1234)
    return Holder(Net([784, 20, 20]))


def corpus_batch(rng):
    x = torch.from_numpy(rng.uniform(0, 1, (6, 784)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, 6))
    return x, y


def corpus_loss(holder, batch):
    x, y = batch
    layer = holder.net.layers[0]
    x_pos = overlay_y_on_x(x, y)
    rnd = torch.randperm(x.size(0))
    x_neg = overlay_y_on_x(x, y[rnd])
    g_pos = layer.forward(x_pos).pow(2).mean(1)
    g_neg = layer.forward(x_neg).pow(2).mean(1)
    return torch.log(1 + torch.exp(torch.cat([-g_pos + layer.threshold, g_neg - layer.threshold]))).mean()


def corpus_train(holder, batch):
    net = holder.net
    x, y = batch
    x, y = x.to(device), y.to(device)
    x_pos = overlay_y_on_x(x, y)
    rnd = torch.randperm(x.size(0))
    x_neg = overlay_y_on_x(x, y[rnd])
    net.train(x_pos, x_neg)
    return 1.0 - net.predict(x).eq(y).float().mean().item()
