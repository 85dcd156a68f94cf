"""More elementwise ops: the unary math functions beyond pointwise.py (``lgamma`` and ``hypot``
among them), rounding with PyTorch's zero gradient, ternary blends (``lerp``, ``addcmul``,
``addcdiv``), bitwise logic, ``heaviside`` and ``signbit``."""
from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, pointwise
from gradscope.ops._util import fix_float, float_input, operand, unbroadcast


class _UnaryBackward(Node):
    """A one-input node whose local derivative is ``derivative(x, out)`` (saved input and output)."""

    __slots__ = ()

    @staticmethod
    def derivative(x: np.ndarray, out: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def backward(self, g):
        x, out = self.saved()
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return (g * self.derivative(x, out)).astype(g.dtype, copy=False)


def _unary(cls: type, fn: Any, input: Tensor) -> Tensor:
    x = float_input(input)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = np.asarray(fn(x)).astype(x.dtype, copy=False)
    node = new_node(cls, (input,))
    if node is not None:
        node.save(input, Tensor._make(out))
    return result(out, node)


class ReciprocalBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: -out * out)


class Log2Backward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: 1.0 / (x * math.log(2.0)))


class Log10Backward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: 1.0 / (x * math.log(10.0)))


class Expm1Backward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: out + 1)


class TanBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: 1 + out * out)


class SinhBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: np.cosh(x))


class CoshBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: np.sinh(x))


class AsinBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: 1 / np.sqrt(1 - x * x))


class AcosBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: -1 / np.sqrt(1 - x * x))


class AtanBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: 1 / (1 + x * x))


class AsinhBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: 1 / np.sqrt(x * x + 1))


class AcoshBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: 1 / np.sqrt(x * x - 1))


class AtanhBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: 1 / (1 - x * x))


class LogitBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: 1 / (x * (1 - x)))


class ErfinvBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: (math.sqrt(math.pi) / 2) * np.exp(out * out))


class ErfcBackward0(_UnaryBackward):
    __slots__ = ()
    derivative = staticmethod(lambda x, out: (-2.0 / math.sqrt(math.pi)) * np.exp(-x * x))


_erfc_vec = np.vectorize(math.erfc, otypes=[np.float64])


def _erfinv_array(y: np.ndarray) -> np.ndarray:
    """The inverse error function: a closed-form first guess refined by Newton steps on math.erf."""
    y64 = y.astype(np.float64)
    inside = np.abs(y64) < 1
    t = np.where(inside, y64, 0.0)
    # Winitzki's approximation, good to ~2e-3, then Newton's method converges quadratically
    a = 0.147
    ln = np.log1p(-t * t)
    first = 2 / (math.pi * a) + ln / 2
    x = np.sign(t) * np.sqrt(np.sqrt(first * first - ln / a) - first)
    magnitude, sign = np.abs(x), np.sign(t)
    tail = np.abs(t) > 0.5  # near +-1, solve erfc(|x|) = 1 - |y| to avoid cancellation
    for _ in range(4):
        error = np.where(tail, (1 - np.abs(t)) - _erfc_vec(magnitude), pointwise.erf_array(magnitude) - np.abs(t))
        magnitude = magnitude - error / ((2 / math.sqrt(math.pi)) * np.exp(-magnitude * magnitude))
    x = sign * magnitude
    edges = np.where(np.abs(y64) == 1, np.sign(y64) * np.inf, np.nan)
    return np.where(inside, x, edges)


def erfinv(input: Tensor) -> Tensor:
    """The inverse of ``erf`` on (-1, 1) (±inf at ±1, nan outside)."""
    return _unary(ErfinvBackward0, _erfinv_array, input)


def erfc(input: Tensor) -> Tensor:
    """``1 - erf(x)`` without the cancellation for large ``x``."""
    return _unary(ErfcBackward0, lambda x: _erfc_vec(x) if x.size else x.copy(), input)


def reciprocal(input: Tensor) -> Tensor:
    return _unary(ReciprocalBackward0, lambda x: 1.0 / x, input)


def log2(input: Tensor) -> Tensor:
    return _unary(Log2Backward0, np.log2, input)


def log10(input: Tensor) -> Tensor:
    return _unary(Log10Backward0, np.log10, input)


def expm1(input: Tensor) -> Tensor:
    return _unary(Expm1Backward0, np.expm1, input)


def tan(input: Tensor) -> Tensor:
    return _unary(TanBackward0, np.tan, input)


def sinh(input: Tensor) -> Tensor:
    return _unary(SinhBackward0, np.sinh, input)


def cosh(input: Tensor) -> Tensor:
    return _unary(CoshBackward0, np.cosh, input)


def asin(input: Tensor) -> Tensor:
    return _unary(AsinBackward0, np.arcsin, input)


def acos(input: Tensor) -> Tensor:
    return _unary(AcosBackward0, np.arccos, input)


def atan(input: Tensor) -> Tensor:
    return _unary(AtanBackward0, np.arctan, input)


def asinh(input: Tensor) -> Tensor:
    return _unary(AsinhBackward0, np.arcsinh, input)


def acosh(input: Tensor) -> Tensor:
    return _unary(AcoshBackward0, np.arccosh, input)


def atanh(input: Tensor) -> Tensor:
    return _unary(AtanhBackward0, np.arctanh, input)


def logit(input: Tensor, eps: float | None = None) -> Tensor:
    """``log(p / (1 - p))``; with ``eps`` the input is first clamped to ``[eps, 1 - eps]``."""
    if eps is not None:
        input = pointwise.clamp(input, eps, 1 - eps)
    return _unary(LogitBackward0, lambda p: np.log(p / (1 - p)), input)


def square(input: Tensor) -> Tensor:
    return arith.pow(input, 2)


# ---------------------------------------------------------------- rounding: zero gradient
class RoundingBackward(Node):
    """floor, ceil, round, trunc, sign: piecewise constant, so the gradient is zero."""

    __slots__ = ("kind",)

    def name(self) -> str:
        return f"{self.kind}Backward0"

    def backward(self, g):
        return np.zeros_like(g)


def _rounding(kind: str, fn: Any, input: Tensor) -> Tensor:
    data = input._data
    out = fn(data) if data.dtype.kind == "f" else data.copy()
    node = new_node(RoundingBackward, (input,))
    if node is not None:
        node.kind = kind
    return result(np.asarray(out), node)


def floor(input: Tensor) -> Tensor:
    return _rounding("Floor", np.floor, input)


def ceil(input: Tensor) -> Tensor:
    return _rounding("Ceil", np.ceil, input)


def trunc(input: Tensor) -> Tensor:
    return _rounding("Trunc", np.trunc, input)


def round(input: Tensor, decimals: int = 0) -> Tensor:
    return _rounding("Round", lambda x: np.round(x, decimals), input)


def frac(input: Tensor) -> Tensor:
    """``x - trunc(x)``: the gradient passes through unchanged."""
    return arith.sub(input, trunc(input).detach())


# ---------------------------------------------------------------- two and three operands
class Atan2Backward0(Node):
    __slots__ = ("shape_a", "shape_b")
    _single_input = False

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        a, b = self.saved()
        denominator = a * a + b * b
        ga = unbroadcast(g * b / denominator, self.shape_a) if node_a is not None else None
        gb = unbroadcast(-g * a / denominator, self.shape_b) if node_b is not None else None
        return ga, gb


def atan2(input: Tensor, other: Tensor) -> Tensor:
    a, b = np.asarray(operand(input)), np.asarray(operand(other))
    out = fix_float(np.asarray(np.arctan2(a, b)), input, other)
    node = new_node(Atan2Backward0, (input, other))
    if node is not None:
        node.shape_a, node.shape_b = a.shape, b.shape
        node.save(input, other)
    return result(out, node)


arctan2 = atan2


def lerp(input: Tensor, end: Tensor, weight: Any) -> Tensor:
    """``input + weight * (end - input)``."""
    return arith.add(input, arith.mul(weight, arith.sub(end, input)))


def _legacy_value(name: str, tensor1: Any, tensor2: Any, args: tuple, value: Any) -> tuple:
    """Resolve the deprecated ``op(value, tensor1, tensor2)`` overload."""
    if not args:
        return tensor1, tensor2, value
    if len(args) == 1 and not isinstance(tensor1, Tensor):
        warnings.warn(f"This overload of {name} is deprecated:\n\t{name}(Number value, Tensor tensor1, "
                      f"Tensor tensor2)\nConsider using one of the following signatures instead:\n"
                      f"\t{name}(Tensor tensor1, Tensor tensor2, *, Number value = 1)", UserWarning, stacklevel=3)
        return tensor2, args[0], tensor1
    raise TypeError(f"{name}() takes two tensors and an optional value keyword")


def addcmul(input: Tensor, tensor1: Any, tensor2: Any, *args: Any, value: Any = 1) -> Tensor:
    """``input + value * tensor1 * tensor2``."""
    tensor1, tensor2, value = _legacy_value("addcmul", tensor1, tensor2, args, value)
    product = arith.mul(tensor1, tensor2)
    return arith.add(input, product if value == 1 else arith.mul(product, value))


def addcdiv(input: Tensor, tensor1: Any, tensor2: Any, *args: Any, value: Any = 1) -> Tensor:
    """``input + value * tensor1 / tensor2``."""
    tensor1, tensor2, value = _legacy_value("addcdiv", tensor1, tensor2, args, value)
    quotient = arith.div(tensor1, tensor2)
    return arith.add(input, quotient if value == 1 else arith.mul(quotient, value))


def clamp_min(input: Tensor, min: Any) -> Tensor:
    return pointwise.clamp(input, min=min)


def clamp_max(input: Tensor, max: Any) -> Tensor:
    return pointwise.clamp(input, max=max)


def xlogy(input: Any, other: Any) -> Tensor:
    """``input * log(other)``, and 0 where ``input`` is 0 (unless ``other`` is NaN)."""
    x = input if isinstance(input, Tensor) else Tensor._make(np.asarray(operand(input)))
    y = other if isinstance(other, Tensor) else Tensor._make(np.asarray(operand(other), dtype=x._data.dtype))
    zero = np.asarray((x._data == 0) & ~np.isnan(y._data))
    safe_y = pointwise.where(Tensor._make(zero), Tensor._make(np.ones((), y._data.dtype)), y)
    product = arith.mul(x, pointwise.log(safe_y))
    return pointwise.where(Tensor._make(zero), Tensor._make(np.zeros((), product._data.dtype)), product)


def logaddexp(input: Tensor, other: Tensor) -> Tensor:
    """``log(exp(input) + exp(other))`` without overflow."""
    from gradscope.ops.reduce import logsumexp
    from gradscope.ops.shape import broadcast_tensors, stack

    return logsumexp(stack(broadcast_tensors(input, other)), dim=0)


def fmod(input: Tensor, other: Any) -> Tensor:
    """Remainder with the sign of the dividend (C's fmod): ``input - trunc(input / other) * other``."""
    a, b = operand(input), operand(other)
    if input._data.dtype.kind != "f":
        return Tensor._make(np.asarray(np.fmod(a, b)))
    with np.errstate(divide="ignore", invalid="ignore"):
        quotient = np.trunc(np.asarray(a / b)).astype(input._data.dtype)
    return arith.sub(input, arith.mul(Tensor._make(quotient), other))


# ---------------------------------------------------------------- bitwise logic (no gradient)
def _bitwise(fn: Any, logical: Any, input: Any, other: Any) -> Tensor:
    a, b = operand(input), operand(other)
    kinds = {np.asarray(v).dtype.kind for v in (a, b)}
    if "f" in kinds:
        raise TypeError(f"{fn.__name__} is only supported for integer and boolean tensors")
    return Tensor._make(np.asarray(logical(a, b) if kinds == {"b"} else fn(a, b)))


def bitwise_and(input: Any, other: Any) -> Tensor:
    return _bitwise(np.bitwise_and, np.logical_and, input, other)


def bitwise_or(input: Any, other: Any) -> Tensor:
    return _bitwise(np.bitwise_or, np.logical_or, input, other)


def bitwise_xor(input: Any, other: Any) -> Tensor:
    return _bitwise(np.bitwise_xor, np.logical_xor, input, other)


# ============================== lgamma, hypot, heaviside, signbit
def _digamma(x: np.ndarray) -> np.ndarray:
    """The digamma function (reflection below 0.5, recurrence up to 6, then the asymptotic series)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    reflect = x < 0.5
    z = np.where(reflect, 1.0 - x, x)
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            small = z < 10.0
            if not small.any():
                break
            out -= np.where(small, 1.0 / z, 0.0)
            z = np.where(small, z + 1.0, z)
        inv2 = 1.0 / (z * z)
        series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 * (
            1 / 132 - inv2 * 691 / 32760)))))
        out += np.log(z) - 0.5 / z - series
        out = np.where(reflect, out - math.pi / np.tan(math.pi * x), out)
        poles = (x <= 0) & (x == np.floor(x))
    return np.where(x == 0, -np.inf, np.where(poles, np.nan, out))


_lgamma_array = np.vectorize(math.lgamma, otypes=[np.float64])


def _lgamma_values(x: np.ndarray) -> np.ndarray:
    flat = x.astype(np.float64).reshape(-1)
    out = np.full(flat.shape, np.inf)
    finite = np.isfinite(flat) & ~((flat <= 0) & (flat == np.floor(flat)))
    out[finite] = _lgamma_array(flat[finite]) if finite.any() else out[finite]
    out[np.isnan(flat)] = np.nan
    return out.reshape(x.shape)


class LgammaBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        (x,) = self.saved()
        return (g * _digamma(x)).astype(g.dtype, copy=False)


def lgamma(input: Tensor) -> Tensor:
    """``log|Gamma(x)|`` (inf at the poles); the gradient is the digamma function."""
    x = float_input(input)
    out = _lgamma_values(x).astype(x.dtype)
    node = new_node(LgammaBackward0, (input,))
    if node is not None:
        node.save(input)
    return result(out, node)


def hypot(input: Tensor, other: Any) -> Tensor:
    """``sqrt(input**2 + other**2)`` elementwise (broadcast)."""
    return pointwise.sqrt(arith.add(arith.mul(input, input), arith.mul(other, other)))


class HeavisideBackward0(Node):
    __slots__ = ()
    _single_input = False

    def backward(self, g):
        raise RuntimeError("the derivative for 'heaviside' is not implemented.")


def heaviside(input: Tensor, values: Any) -> Tensor:
    """0 where ``input < 0``, 1 where ``input > 0`` and ``values`` where it is 0 (no derivative, as in torch)."""
    values = values if isinstance(values, Tensor) else Tensor._make(np.asarray(values, dtype=input._data.dtype))
    x, v = input._data, values._data
    if x.dtype != v.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes")
    out = np.where(x == 0, v, (x > 0).astype(x.dtype)).astype(x.dtype)
    return result(out, new_node(HeavisideBackward0, (input, values)))


def signbit(input: Tensor) -> Tensor:
    """True where the sign bit is set (negative numbers and -0.0)."""
    return Tensor._make(np.signbit(input._data))
