"""Small modules built from tensor ops, shared by the hook tests (T is gradscope or torch)."""
from __future__ import annotations

import numpy as np


def affine_cls(T):
    """``x @ weight.t() + bias`` with fixed weights, built from tensor ops."""
    class Affine(T.nn.Module):
        def __init__(self, in_features=3, out_features=2, offset=0.0):
            super().__init__()
            weight = np.arange(in_features * out_features, dtype=np.float32).reshape(out_features, in_features)
            self.weight = T.nn.Parameter(T.tensor((weight - offset) / 10))
            self.bias = T.nn.Parameter(T.tensor(np.linspace(-0.5, 0.5, out_features, dtype=np.float32)))

        def forward(self, x):
            return x @ self.weight.t() + self.bias

    return Affine


def tanh_cls(T):
    class Tanh(T.nn.Module):
        def forward(self, x):
            return T.tanh(x)

    return Tanh
