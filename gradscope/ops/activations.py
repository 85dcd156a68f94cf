"""Activation functions with their own backward (GELU, ELU/CELU/SELU, leaky ReLU, softplus, SiLU,
Mish, hardtanh, hardsigmoid, hardswish, logsigmoid, threshold)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import float_input, select_or_zero
from gradscope.ops.pointwise import _sigmoid_array, erf_array


def fast_erf(x: np.ndarray) -> np.ndarray:
    """erf for float arrays: a Chebyshev fit of erfc (|error| < 1.2e-7, computed in the input's
    precision) for float32 and half, the exact ``math.erf`` for float64."""
    if x.dtype == np.float64:
        return erf_array(x)
    z = np.abs(x)
    t = z * 0.5
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * 0.17087277
    for coef in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196,
                 1.00002368):
        poly += coef
        poly *= t
    poly -= 1.26551223
    z *= z
    poly -= z
    np.exp(poly, out=poly)
    poly *= t  # erfc(|x|)
    np.subtract(1.0, poly, out=poly)
    return np.copysign(poly, x, out=poly)


def _softplus_array(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))`` without overflow: ``max(x, 0) + log1p(exp(-|x|))``."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _unary(cls: type, input: Tensor, out: np.ndarray, **attrs: Any) -> Tensor:
    """Result of an elementwise op whose node saves its input (or output, per ``cls``)."""
    node = new_node(cls, (input,))
    if node is not None:
        for key, value in attrs.items():
            setattr(node, key, value)
        if not cls._save_output:
            node.save(input)
    return result(out, node)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


class GeluBackward0(Node):
    __slots__ = ("approximate",)

    def backward(self, g):
        x = self.saved()[0]
        if self.approximate == "tanh":
            inner = _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
            t = np.tanh(inner)
            d_inner = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)
            return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner)
        cdf = self.saved()[1]
        pdf = np.exp(-0.5 * x * x) * _INV_SQRT_2PI
        return g * (cdf + x * pdf)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit: exact (erf) or the tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    x = float_input(input)
    cdf = None
    if approximate == "tanh":
        out = 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    else:
        cdf = fast_erf(x * _INV_SQRT_2)
        cdf += 1.0
        cdf *= 0.5
        out = x * cdf
    node = new_node(GeluBackward0, (input,))
    if node is not None:
        node.approximate = approximate
        node.save(input, None if cdf is None else Tensor._make(cdf))
    return result(out, node)


class EluBackward0(Node):
    """ELU family ``scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1))`` (saves input)."""

    __slots__ = ("alpha", "scale", "input_scale")

    def backward(self, g):
        x = self.saved()[0]
        neg = self.scale * self.alpha * self.input_scale * np.exp(np.minimum(x, 0) * self.input_scale)
        return g * np.where(x > 0, np.asarray(self.scale, dtype=g.dtype), neg.astype(g.dtype))


class EluBackward1(EluBackward0):
    """The in-place form: the gradient comes from the saved output."""

    __slots__ = ()
    _save_output = True

    def backward(self, g):
        out = self.saved()[0]
        neg = self.input_scale * (out + self.scale * self.alpha)
        return g * np.where(out > 0, np.asarray(self.scale, dtype=g.dtype), neg.astype(g.dtype))


class CeluBackward0(EluBackward0):
    __slots__ = ()


class CeluBackward1(EluBackward1):
    __slots__ = ()


def elu(input: Tensor, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0, *,
        node_cls: type = EluBackward0) -> Tensor:
    """``scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1))`` (ELU, SELU, CELU)."""
    x = float_input(input)
    with np.errstate(over="ignore"):
        neg = alpha * np.expm1(np.minimum(x, 0) * input_scale)
    out = (scale * np.where(x > 0, x, neg)).astype(x.dtype)
    return _unary(node_cls, input, out, alpha=alpha, scale=scale, input_scale=input_scale)


class LeakyReluBackward0(Node):
    __slots__ = ("slope",)

    def backward(self, g):
        return g * np.where(self.saved()[0] > 0, np.ones((), g.dtype), np.asarray(self.slope, g.dtype))


class LeakyReluBackward1(LeakyReluBackward0):
    __slots__ = ()
    _save_output = True


def leaky_relu(input: Tensor, negative_slope: float = 0.01, *, node_cls: type = LeakyReluBackward0) -> Tensor:
    x = input._data
    out = np.where(x > 0, x, x * negative_slope).astype(x.dtype, copy=False)
    return _unary(node_cls, input, out, slope=negative_slope)


class SoftplusBackward0(Node):
    __slots__ = ("beta", "threshold")

    def backward(self, g):
        z = self.saved()[0] * self.beta
        return g * np.where(z > self.threshold, np.ones((), g.dtype), _sigmoid_array(z))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``."""
    x = float_input(input)
    z = x * beta
    soft = _softplus_array(z) / beta
    out = np.where(z > threshold, x, soft).astype(x.dtype, copy=False)
    return _unary(SoftplusBackward0, input, out, beta=beta, threshold=threshold)


class SiluBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        x = self.saved()[0]
        s = _sigmoid_array(x)
        return g * (s * (1.0 + x * (1.0 - s)))


def silu(input: Tensor) -> Tensor:
    x = float_input(input)
    return _unary(SiluBackward0, input, x * _sigmoid_array(x))


class MishBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        x = self.saved()[0]
        t = np.tanh(_softplus_array(x))
        return g * (t + x * _sigmoid_array(x) * (1.0 - t * t))


def mish(input: Tensor) -> Tensor:
    x = float_input(input)
    return _unary(MishBackward0, input, x * np.tanh(_softplus_array(x)))


class HardtanhBackward0(Node):
    __slots__ = ("low", "high")

    def backward(self, g):
        x = self.saved()[0]
        return select_or_zero((x > self.low) & (x < self.high), g)


class HardtanhBackward1(HardtanhBackward0):
    __slots__ = ()
    _save_output = True


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, *,
             node_cls: type = HardtanhBackward0) -> Tensor:
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    x = input._data
    out = np.clip(x, min_val, max_val).astype(x.dtype, copy=False)
    return _unary(node_cls, input, out, low=min_val, high=max_val)


class HardsigmoidBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        x = self.saved()[0]
        # torch's kernel uses the float32 constant 1/6 for every dtype
        return select_or_zero((x > -3.0) & (x < 3.0), g * g.dtype.type(np.float32(1.0 / 6.0)))


def hardsigmoid(input: Tensor) -> Tensor:
    x = float_input(input)
    return _unary(HardsigmoidBackward0, input, (np.clip(x + 3.0, 0.0, 6.0) / 6.0).astype(x.dtype, copy=False))


class HardswishBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        x = self.saved()[0]
        middle = g * (x / 3.0 + 0.5)
        return np.where(x < -3.0, np.zeros((), g.dtype), np.where(x <= 3.0, middle, g))


def hardswish(input: Tensor) -> Tensor:
    x = float_input(input)
    return _unary(HardswishBackward0, input, (x * np.clip(x + 3.0, 0.0, 6.0) / 6.0).astype(x.dtype, copy=False))


class LogSigmoidBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        return g * _sigmoid_array(-self.saved()[0])


def logsigmoid(input: Tensor) -> Tensor:
    x = float_input(input)
    out = np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))
    return _unary(LogSigmoidBackward0, input, out.astype(x.dtype, copy=False))


class ThresholdBackward0(Node):
    __slots__ = ("threshold",)

    def backward(self, g):
        return select_or_zero(self.saved()[0] > self.threshold, g)


def threshold(input: Tensor, threshold: float, value: float) -> Tensor:
    x = input._data
    out = np.where(x > threshold, x, np.asarray(value, dtype=x.dtype))
    return _unary(ThresholdBackward0, input, out, threshold=threshold)
