"""Polynomial regression in the style of pytorch/examples/regression/main.py."""
from __future__ import print_function
from itertools import count

import numpy as np
import torch
import torch.nn.functional as F

POLY_DEGREE = 4
W_target = None
b_target = None


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE+1)], 1)


def f(x):
    """Approximated function."""
    return x.mm(W_target) + b_target.item()


def poly_desc(W, b):
    """Creates a string description of a polynomial."""
    result = 'y = '
    for i, w in enumerate(W):
        result += '{:+.2f} x^{} '.format(w, i + 1)
    result += '{:+.2f}'.format(b[0])
    return result


def get_batch(random, batch_size=8):
    """Builds a batch i.e. (x, f(x)) pair."""
    random = torch.tensor(random, dtype=torch.get_default_dtype())
    x = make_features(random)
    y = f(x)
    return x, y


def corpus_model():
    global W_target, b_target
    W_target = torch.randn(POLY_DEGREE, 1) * 5
    b_target = torch.randn(1) * 5
    return torch.nn.Linear(W_target.size(0), 1)


def corpus_batch(rng):
    return [rng.standard_normal(8) for _ in range(3)]


def corpus_loss(fc, batch):
    batch_x, batch_y = get_batch(batch[0])
    return F.smooth_l1_loss(fc(batch_x), batch_y)


def corpus_train(fc, batch):
    losses = []
    for batch_idx in count(1):
        batch_x, batch_y = get_batch(batch[batch_idx - 1])
        # Reset gradients
        fc.zero_grad()
        # Forward pass
        output = F.smooth_l1_loss(fc(batch_x), batch_y)
        loss = output.item()
        # Backward pass
        output.backward()
        # Apply gradients
        for param in fc.parameters():
            param.data.add_(-0.1 * param.grad)
        losses.append(loss)
        if batch_idx == len(batch):
            break
    description = poly_desc(fc.weight.view(-1), fc.bias)
    return losses, description.count('x^'), fc.weight.view(-1)
