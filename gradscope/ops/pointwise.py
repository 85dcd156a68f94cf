"""Elementwise unary ops, clamp, maximum/minimum and where."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from gradscope.autograd.function import new_node, result, unary_result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import fix_float, float_input, operand, select_or_zero, unbroadcast


class ExpBackward0(Node):
    __slots__ = ()
    _save_output = True

    def backward(self, g):
        return g * self.saved_output()  # d exp(x) = exp(x)


def exp(input: Tensor) -> Tensor:
    with np.errstate(over="ignore"):
        return unary_result(ExpBackward0, np.exp(float_input(input)), input)


class LogBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        with np.errstate(divide="ignore", invalid="ignore"):
            return g / self.saved()[0]


def log(input: Tensor) -> Tensor:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(float_input(input))
    node = new_node(LogBackward0, (input,))
    if node is not None:
        node.save(input)
    return result(out, node)


class Log1PBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        with np.errstate(divide="ignore", invalid="ignore"):
            return g / (1 + self.saved()[0])


def log1p(input: Tensor) -> Tensor:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log1p(float_input(input))
    node = new_node(Log1PBackward0, (input,))
    if node is not None:
        node.save(input)
    return result(out, node)


class SqrtBackward0(Node):
    __slots__ = ()
    _save_output = True

    def backward(self, g):
        with np.errstate(divide="ignore", invalid="ignore"):
            return g / (2 * self.saved_output())


def sqrt(input: Tensor) -> Tensor:
    with np.errstate(invalid="ignore"):
        return unary_result(SqrtBackward0, np.sqrt(float_input(input)), input)


class RsqrtBackward0(Node):
    __slots__ = ()
    _save_output = True

    def backward(self, g):
        out = self.saved_output()
        return g * -0.5 * out * out * out


def rsqrt(input: Tensor) -> Tensor:
    with np.errstate(divide="ignore", invalid="ignore"):
        return result(1.0 / np.sqrt(float_input(input)), new_node(RsqrtBackward0, (input,)))


class AbsBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        return g * np.sign(self.saved()[0])


def abs(input: Tensor) -> Tensor:
    node = new_node(AbsBackward0, (input,))
    if node is not None:
        node.save(input)
    return result(np.abs(input._data), node)


class SignBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        return np.zeros_like(g)


def sign(input: Tensor) -> Tensor:
    return result(np.sign(input._data), new_node(SignBackward0, (input,)))


class SinBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        return g * np.cos(self.saved()[0])


def sin(input: Tensor) -> Tensor:
    node = new_node(SinBackward0, (input,))
    if node is not None:
        node.save(input)
    return result(np.sin(float_input(input)), node)


class CosBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        return -g * np.sin(self.saved()[0])


def cos(input: Tensor) -> Tensor:
    node = new_node(CosBackward0, (input,))
    if node is not None:
        node.save(input)
    return result(np.cos(float_input(input)), node)


# A 0-d one: numpy would convert a python ``1`` on every call. (float32: with float64 it
# promotes exactly; a float16 result is computed in float32 and cast back.)
_ONE = np.ones((), dtype=np.float32)
_ONE.flags.writeable = False


class TanhBackward0(Node):
    __slots__ = ()
    _save_output = True

    def backward(self, g):
        out = self._saved
        if out.__class__ is not np.ndarray or self._vcs:  # (saved_output's checks, inlined)
            out = self.saved_output()
        if not out.ndim:
            return g * (1 - out * out)
        d = out * out
        np.subtract(_ONE, d, d)  # d tanh = 1 - tanh^2 (``out=`` given positionally: faster)
        d *= g
        return d


def tanh(input: Tensor) -> Tensor:
    data = input._data
    return unary_result(TanhBackward0, np.tanh(data if data.dtype.kind == "f" else data.astype(np.float32)),
                        input)


class SigmoidBackward0(Node):
    __slots__ = ()
    _save_output = True

    def backward(self, g):
        out = self.saved_output()
        return g * out * (1 - out)


def _sigmoid_array(x: np.ndarray) -> np.ndarray:
    # Stable for large |x|: exp of a non-positive number only.
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + z), z / (1 + z)).astype(x.dtype, copy=False)


def sigmoid(input: Tensor) -> Tensor:
    return unary_result(SigmoidBackward0, _sigmoid_array(float_input(input)), input)


class ReluBackward0(Node):
    __slots__ = ()
    _save_output = True

    def backward(self, g):
        # relu'(0) = 0; selected, not multiplied, so a NaN/Inf gradient stops here as in torch
        return select_or_zero(self.saved_output() > 0, g)


def relu(input: Tensor) -> Tensor:
    return unary_result(ReluBackward0, np.maximum(input._data, 0), input)


class ErfBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        x = self.saved()[0]
        return g * (2.0 / math.sqrt(math.pi)) * np.exp(-x * x)


_erf_vec = np.vectorize(math.erf, otypes=[np.float64])


def erf_array(x: np.ndarray) -> np.ndarray:
    """erf for numpy arrays (Abramowitz-Stegun would lose precision; use math.erf)."""
    return _erf_vec(x).astype(x.dtype) if x.size else x.copy()


def erf(input: Tensor) -> Tensor:
    node = new_node(ErfBackward0, (input,))
    if node is not None:
        node.save(input)
    return result(erf_array(float_input(input)), node)


class ClampBackward1(Node):
    __slots__ = ("low", "high")

    def backward(self, g):
        x = self.saved()[0]
        mask = np.ones(x.shape, dtype=bool)
        if self.low is not None:
            mask &= x >= self.low
        if self.high is not None:
            mask &= x <= self.high
        return select_or_zero(mask, g)


def clamp(input: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """Clamp into ``[min, max]``; the gradient passes where ``min <= x <= max``."""
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        out_t = input if min is None else maximum(input, min)
        return out_t if max is None else minimum(out_t, max)
    low = operand(min) if min is not None else None
    high = operand(max) if max is not None else None
    out = input._data
    if low is not None:
        out = np.maximum(out, low)
    if high is not None:
        out = np.minimum(out, high)
    node = new_node(ClampBackward1, (input,))
    if node is not None:
        node.low, node.high = low, high
        node.save(input)
    return result(np.asarray(out).astype(input._data.dtype, copy=False), node)


class MaximumBackward0(Node):
    __slots__ = ("shape_a", "shape_b")
    _single_input = False
    _pick = staticmethod(np.greater)

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        a, b = self.saved()
        wins, loses, tie = self._pick(a, b), self._pick(b, a), a == b
        zero, half = np.zeros((), g.dtype), g * g.dtype.type(0.5)
        # selected, not multiplied by a 0/1 mask: the loser gets exactly 0 even where g is NaN (torch)
        ga = unbroadcast(np.where(wins, g, np.where(tie, half, zero)), self.shape_a) if node_a is not None else None
        gb = unbroadcast(np.where(loses, g, np.where(tie, half, zero)), self.shape_b) if node_b is not None else None
        return ga, gb


class MinimumBackward0(MaximumBackward0):
    __slots__ = ()
    _pick = staticmethod(np.less)


def _binary_select(cls: type, fn: Any, input: Tensor, other: Tensor) -> Tensor:
    a, b = operand(input), operand(other)
    out = fix_float(np.asarray(fn(a, b)), input, other)
    node = new_node(cls, (input if isinstance(input, Tensor) else None,
                          other if isinstance(other, Tensor) else None))
    if node is not None:
        node.shape_a, node.shape_b = np.shape(a), np.shape(b)
        node.save(input if isinstance(input, Tensor) else Tensor._make(np.asarray(a)),
                  other if isinstance(other, Tensor) else Tensor._make(np.asarray(b)))
    return result(out, node)


def maximum(input: Tensor, other: Tensor) -> Tensor:
    """Elementwise maximum; ties split the gradient equally."""
    return _binary_select(MaximumBackward0, np.maximum, input, other)


def minimum(input: Tensor, other: Tensor) -> Tensor:
    """Elementwise minimum; ties split the gradient equally."""
    return _binary_select(MinimumBackward0, np.minimum, input, other)


class WhereBackward0(Node):
    __slots__ = ("condition", "shape_a", "shape_b")
    _single_input = False

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        zero = np.zeros((), dtype=g.dtype)
        ga = unbroadcast(np.where(self.condition, g, zero), self.shape_a) if node_a is not None else None
        gb = unbroadcast(np.where(self.condition, zero, g), self.shape_b) if node_b is not None else None
        return ga, gb


def where(condition: Tensor, input: Any = None, other: Any = None) -> Any:
    """``input`` where ``condition`` else ``other`` (or the indices of true elements)."""
    cond = operand(condition).astype(bool)
    if input is None and other is None:
        return tuple(Tensor._make(i.astype(np.int64)) for i in np.nonzero(cond))
    a, b = operand(input), operand(other)
    out = fix_float(np.asarray(np.where(cond, a, b)), input, other)
    node = new_node(WhereBackward0, (input if isinstance(input, Tensor) else None,
                                     other if isinstance(other, Tensor) else None))
    if node is not None:
        node.condition = cond
        node.shape_a, node.shape_b = np.shape(a), np.shape(b)
    return result(out, node)


# ---------------------------------------------------------------- predicates (no grad)
def isnan(input: Tensor) -> Tensor:
    return Tensor._make(np.isnan(input._data))


def isinf(input: Tensor) -> Tensor:
    return Tensor._make(np.isinf(input._data))


def isfinite(input: Tensor) -> Tensor:
    return Tensor._make(np.isfinite(input._data))


def nan_to_num(input: Tensor, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    return Tensor._make(np.nan_to_num(input._data, nan=nan, posinf=posinf, neginf=neginf))
