"""Linear layers: ``Linear`` (``y = x W^T + b``) and ``Bilinear`` (``y = x1^T W x2 + b``)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from gradscope.autograd import dtypes
from gradscope.autograd.tensor import Tensor
from gradscope.nn import functional as F
from gradscope.nn import init
from gradscope.nn.modules.module import Module
from gradscope.nn.parameter import Parameter
from gradscope.ops.creation import get_default_dtype

__all__ = ["Linear", "Bilinear"]


def _new_parameter(shape: tuple, dtype: Any = None) -> Parameter:
    """An uninitialised (zero) parameter of ``shape`` in ``dtype`` (default: gradscope's default)."""
    np_dtype = dtypes.to_numpy_dtype(get_default_dtype() if dtype is None else dtype)
    return Parameter(Tensor._make(np.zeros(shape, dtype=np_dtype)))


def _new_buffer(shape: tuple, fill: float, dtype: Any = None) -> Tensor:
    np_dtype = dtypes.to_numpy_dtype(get_default_dtype() if dtype is None else dtype)
    return Tensor._make(np.full(shape, fill, dtype=np_dtype))


class Linear(Module):
    """``y = x W^T + b`` with ``weight`` (out_features, in_features) and ``bias`` (out_features).

    Both start as U(-1/sqrt(in_features), 1/sqrt(in_features)), as in PyTorch
    (``kaiming_uniform_(a=sqrt(5))`` for the weight).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = _new_parameter((out_features, in_features), dtype)
        if bias:
            self.bias = _new_parameter((out_features,), dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """``y[o] = x1^T W[o] x2 + b[o]`` with ``weight`` (out, in1, in2) and ``bias`` (out)."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        self.weight = _new_parameter((out_features, in1_features, in2_features), dtype)
        if bias:
            self.bias = _new_parameter((out_features,), dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
