"""Binary arithmetic, matmul and comparisons."""
from __future__ import annotations

from typing import Any

import numpy as np

from gradscope.autograd.function import binary_result, new_node, result, unary_result
from gradscope.autograd.node import _FREED, _FREED_MESSAGE, Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import fix_float, operand, scalar_array, unbroadcast


def _edges(a: Any, b: Any) -> tuple:
    return (a if isinstance(a, Tensor) else None, b if isinstance(b, Tensor) else None)


class AddBackward0(Node):
    __slots__ = ("shape_a", "shape_b", "alpha")
    _single_input = False

    def backward(self, g):
        (node_a, _), (node_b, _) = self._edges  # (two inputs: never stored flat)
        shape = g.shape
        ga = gb = None
        if node_a is not None:
            ga = g if shape == self.shape_a else unbroadcast(g, self.shape_a)
        if node_b is not None:
            gb = g if shape == self.shape_b else unbroadcast(g, self.shape_b)
            if self.alpha != 1:
                gb = gb * self.alpha
        return ga, gb


class SubBackward0(AddBackward0):
    __slots__ = ()

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        ga = unbroadcast(g, self.shape_a) if node_a is not None else None
        gb = -unbroadcast(g, self.shape_b) * self.alpha if node_b is not None else None
        return ga, gb


def add(input: Any, other: Any, *, alpha: Any = 1, out: Any = None) -> Tensor:
    """``input + alpha * other`` with broadcasting."""
    if alpha == 1 and isinstance(input, Tensor) and isinstance(other, Tensor):  # the common case
        a, b = input._data, other._data
        out_arr = a + b
        if out_arr.__class__ is not np.ndarray or out_arr.dtype.kind == "f" and out_arr.dtype.itemsize == 8:
            out_arr = fix_float(np.asarray(out_arr), input, other)
        total = binary_result(AddBackward0, out_arr, input, other)
        node = total.grad_fn
        if node is not None:
            node.shape_a = a.shape
            node.shape_b = b.shape
            node.alpha = 1
        return total
    a, b = operand(input), operand(other)
    out_arr = a + (b if alpha == 1 else b * alpha)
    if not isinstance(out_arr, np.ndarray) or out_arr.dtype.kind == "f" and out_arr.dtype.itemsize == 8:
        out_arr = fix_float(np.asarray(out_arr), input, other)
    node = new_node(AddBackward0, _edges(input, other))
    if node is not None:
        node.shape_a = a.shape if isinstance(input, Tensor) else None
        node.shape_b = b.shape if isinstance(other, Tensor) else None
        node.alpha = alpha
    return result(out_arr, node)


def sub(input: Any, other: Any, *, alpha: Any = 1, out: Any = None) -> Tensor:
    """``input - alpha * other`` with broadcasting."""
    a, b = operand(input), operand(other)
    if isinstance(a, np.ndarray) and a.dtype == np.bool_ and isinstance(b, np.ndarray) and b.dtype == np.bool_:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported.")
    out_arr = a - (b if alpha == 1 else b * alpha)
    if not isinstance(out_arr, np.ndarray) or out_arr.dtype.kind == "f" and out_arr.dtype.itemsize == 8:
        out_arr = fix_float(np.asarray(out_arr), input, other)
    node = new_node(SubBackward0, _edges(input, other))
    if node is not None:
        node.shape_a = a.shape if isinstance(input, Tensor) else None
        node.shape_b = b.shape if isinstance(other, Tensor) else None
        node.alpha = alpha
    return result(out_arr, node)


class RsubBackward1(Node):
    __slots__ = ()

    def backward(self, g):
        return -g


def rsub(input: Tensor, other: Any) -> Tensor:
    """``other - input`` for a python-scalar ``other``."""
    out_arr = fix_float(np.asarray(operand(other) - input._data), input)
    return result(out_arr, new_node(RsubBackward1, (input,)))


class MulBackward0(Node):
    __slots__ = ("shape_a", "shape_b")
    _single_input = False

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        a, b = self.saved()
        ga = unbroadcast(g * b, self.shape_a) if node_a is not None else None
        gb = unbroadcast(g * a, self.shape_b) if node_b is not None else None
        return ga, gb


class _MulScalarBackward(Node):
    """``tensor * python scalar``: PyTorch's MulBackward0 with a ``(None, 0)`` second edge; its
    own class so that the engine's one-input path runs it."""

    __slots__ = ("scalar",)
    _scalar_operand = True

    def backward(self, g):
        if self._saved is _FREED:  # the scalar counts as saved: a second backward must fail
            raise RuntimeError(_FREED_MESSAGE)
        return g * self.scalar


_MulScalarBackward.__name__ = _MulScalarBackward.__qualname__ = "MulBackward0"


def mul(input: Any, other: Any, *, out: Any = None) -> Tensor:
    """Elementwise product with broadcasting."""
    other_type = type(other)
    if (other_type is float or other_type is int) and isinstance(input, Tensor):
        data = input._data
        dtype = data.dtype
        if dtype.kind == "f":
            scalar = scalar_array(other, dtype)
            product = unary_result(_MulScalarBackward, data * scalar, input)
            node = product.grad_fn
            if node is not None:
                node.scalar = scalar
                node._saved = ()
            return product
    if not isinstance(input, Tensor):
        input, other = other, input
    a, b = input._data, operand(other)
    out_arr = a * b
    if out_arr.dtype.itemsize == 8 and out_arr.dtype.kind == "f":
        out_arr = fix_float(out_arr, input, other)
    if isinstance(b, np.ndarray):
        other_t = other if isinstance(other, Tensor) else Tensor._make(b)
        node = new_node(MulBackward0, (input, other_t))
        if node is not None:
            node.shape_a = a.shape
            node.shape_b = b.shape
            # each operand is needed only for the other's gradient (as PyTorch saves them)
            node.save(input if node._edges[1][0] is not None else None,
                      other_t if node._in is not None else None)
        return result(out_arr, node)
    product = unary_result(_MulScalarBackward, out_arr, input)
    node = product.grad_fn
    if node is not None:
        node.scalar = b
        node._saved = ()
    return product


class DivBackward0(Node):
    __slots__ = ("scalar", "shape_a", "shape_b")
    _single_input = False

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        saved = self.saved()
        if len(saved) == 1:  # tensor / scalar or scalar / tensor
            (x,) = saved
            if node_a is not None:
                return (g / self.scalar, None)
            return (None, -g * self.scalar / (x * x))
        a, b = saved
        ga = unbroadcast(g / b, self.shape_a) if node_a is not None else None
        gb = unbroadcast(-g * a / (b * b), self.shape_b) if node_b is not None else None
        return ga, gb


def div(input: Any, other: Any, *, rounding_mode: str | None = None, out: Any = None) -> Tensor:
    """True division (or ``rounding_mode='floor'|'trunc'``, which has no gradient)."""
    a, b = operand(input), operand(other)
    if rounding_mode is not None:
        q = np.floor_divide(a, b) if rounding_mode == "floor" else np.trunc(np.true_divide(a, b))
        return Tensor._make(np.asarray(q).astype(np.result_type(a, b)))
    with np.errstate(divide="ignore", invalid="ignore"):
        out_arr = fix_float(np.asarray(np.true_divide(a, b)), input, other)
    node = new_node(DivBackward0, _edges(input, other))
    if node is not None:
        if isinstance(input, Tensor) and isinstance(other, Tensor):
            node.shape_a, node.shape_b = input._data.shape, other._data.shape
            # the numerator only for the denominator's gradient (as PyTorch saves them)
            node.save(input if node._edges[1][0] is not None else None, other)
        elif isinstance(input, Tensor):
            node.scalar = b
            node.save(input)
        else:
            node.scalar = a
            node.save(other)
    return result(out_arr, node)


def rdiv(input: Tensor, other: Any) -> Tensor:
    return div(other, input)


class NegBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        return -g


def neg(input: Tensor) -> Tensor:
    if input._data.dtype == np.bool_:
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported.")
    return result(-input._data, new_node(NegBackward0, (input,)))


class PowBackward0(Node):
    """x ** scalar."""

    __slots__ = ("exponent",)

    def backward(self, g):
        (x,) = self.saved()
        p = self.exponent
        if p == 0:
            return np.zeros_like(g)
        if p == 2:
            return g * 2.0 * x
        with np.errstate(divide="ignore", invalid="ignore"):
            return g * p * x ** (p - 1)


class PowBackward1(Node):
    """tensor ** tensor."""

    __slots__ = ("shape_a", "shape_b")
    _single_input = False

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        a, b = self.saved()
        with np.errstate(divide="ignore", invalid="ignore"):
            ga = unbroadcast(g * b * a ** (b - 1), self.shape_a) if node_a is not None else None
            gb = None
            if node_b is not None:
                log_a = np.where((a == 0) & (b >= 0), 0, np.log(a))
                gb = unbroadcast(g * a ** b * log_a, self.shape_b)
        return ga, gb


class PowBackward2(Node):
    """scalar ** tensor."""

    __slots__ = ("base",)
    _save_output = True

    def backward(self, g):
        (out,) = self.saved()
        return g * out * np.log(self.base) if self.base != 0 else np.zeros_like(g)


def pow(input: Any, exponent: Any) -> Tensor:
    """``input ** exponent`` (either may be a python scalar)."""
    a, b = operand(input), operand(exponent)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if isinstance(input, Tensor) and a.dtype.kind in "iu" and isinstance(b, (int, np.integer)) and b < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        out_arr = fix_float(np.asarray(np.power(a, b)), input, exponent)
    if isinstance(input, Tensor) and isinstance(exponent, Tensor):
        node = new_node(PowBackward1, (input, exponent))
        if node is not None:
            node.shape_a, node.shape_b = a.shape, b.shape
            node.save(input, exponent)
        return result(out_arr, node)
    if isinstance(input, Tensor):
        node = new_node(PowBackward0, (input,))
        if node is not None:
            node.exponent = b
            node.save(input)
        return result(out_arr, node)
    node = new_node(PowBackward2, (exponent,))
    if node is not None:
        node.base = a
    return result(out_arr, node)


def rpow(input: Tensor, other: Any) -> Tensor:
    return pow(other, input)


# ---------------------------------------------------------------- matmul
class MmBackward0(Node):
    __slots__ = ("shape_a", "shape_b")
    _single_input = False

    def backward(self, g):
        (node_a, _), (node_b, _) = self._edges  # (two inputs: never stored flat)
        a, b = self.saved()
        ga = g.dot(b.T) if node_a is not None else None  # (ndarray.dot: ``@``'s BLAS call, less dispatch)
        gb = a.T.dot(g) if node_b is not None else None
        return ga, gb


class DotBackward0(MmBackward0):
    __slots__ = ()

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        a, b = self.saved()
        return (g * b if node_a is not None else None, g * a if node_b is not None else None)


class MvBackward0(MmBackward0):
    __slots__ = ()

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        a, b = self.saved()
        return (np.outer(g, b) if node_a is not None else None, a.T @ g if node_b is not None else None)


class BmmBackward0(MmBackward0):
    """Batched / broadcast matmul, including 1-D operands promoted to matrices."""

    __slots__ = ()

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        a, b = self.saved()  # (each only when the other operand needs its gradient)
        ndim_a, ndim_b = len(self.shape_a), len(self.shape_b)
        g2 = g
        if ndim_a == 1:
            g2 = np.expand_dims(g2, -2)
        if ndim_b == 1:
            g2 = np.expand_dims(g2, -1)
        ga = gb = None
        if node_a is not None:
            b2 = b[:, None] if ndim_b == 1 else b
            a2_shape = (1, self.shape_a[0]) if ndim_a == 1 else self.shape_a
            ga = unbroadcast(g2 @ np.swapaxes(b2, -1, -2), a2_shape).reshape(self.shape_a) \
                if ndim_a > 1 else (g2 @ np.swapaxes(b2, -1, -2)).reshape(-1, self.shape_a[0]).sum(0)
        if node_b is not None:
            a2 = a[None, :] if ndim_a == 1 else a
            b2_shape = (self.shape_b[0], 1) if ndim_b == 1 else self.shape_b
            gb = unbroadcast(np.swapaxes(a2, -1, -2) @ g2, b2_shape).reshape(self.shape_b) \
                if ndim_b > 1 else (np.swapaxes(a2, -1, -2) @ g2).reshape(-1, self.shape_b[0]).sum(0)
        return ga, gb


def matmul(input: Tensor, other: Tensor) -> Tensor:
    """Matrix product with PyTorch's 1-D / 2-D / batched rules."""
    if not isinstance(input, Tensor):
        input = Tensor._make(np.asarray(operand(input)))
    if not isinstance(other, Tensor):
        other = Tensor._make(np.asarray(operand(other)))
    a, b = input._data, other._data
    ndim_a, ndim_b = a.ndim, b.ndim
    if ndim_a == 0 or ndim_b == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D, but they are "
                           f"{ndim_a}D and {ndim_b}D")
    try:
        # (ndarray.dot: for two matrices the same BLAS call as ``@``, with less dispatch)
        out_arr = a.dot(b) if ndim_a == 2 and ndim_b == 2 else a @ b
    except ValueError:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({_shape_str(a)} and {_shape_str(b)})") from None
    if a.dtype is not b.dtype and a.dtype != b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}")
    if ndim_a == 2 and ndim_b == 2:
        cls = MmBackward0
    elif ndim_a == 1 and ndim_b == 1:
        cls = DotBackward0
    elif ndim_a == 2 and ndim_b == 1:
        cls = MvBackward0
    else:
        cls = BmmBackward0
    product = binary_result(cls, out_arr, input, other, save=True)
    if cls is BmmBackward0 and product.grad_fn is not None:
        product.grad_fn.shape_a, product.grad_fn.shape_b = a.shape, b.shape
    return product


def _shape_str(a: np.ndarray) -> str:
    return "x".join(str(d) for d in a.shape)


def rmatmul(input: Tensor, other: Any) -> Tensor:
    return matmul(other, input)


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError("mm: both arguments must be 2-D")
    return matmul(input, mat2)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 3 or mat2.ndim != 3:
        raise RuntimeError("bmm: both arguments must be 3-D")
    return matmul(input, mat2)


def dot(input: Tensor, other: Tensor) -> Tensor:
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError("1D tensors expected, but got " f"{input.ndim}D and {other.ndim}D tensors")
    return matmul(input, other)


def mv(input: Tensor, vec: Tensor) -> Tensor:
    return matmul(input, vec)


# ---------------------------------------------------------------- comparisons (no grad)
def _compare(fn: Any) -> Any:
    def compare(input: Any, other: Any) -> Tensor:
        return Tensor._make(np.asarray(fn(operand(input), operand(other))))

    compare.__name__ = fn.__name__
    return compare


eq = _compare(np.equal)
ne = _compare(np.not_equal)
lt = _compare(np.less)
le = _compare(np.less_equal)
gt = _compare(np.greater)
ge = _compare(np.greater_equal)
logical_and = _compare(np.logical_and)
logical_or = _compare(np.logical_or)
logical_xor = _compare(np.logical_xor)


def logical_not(input: Tensor) -> Tensor:
    return Tensor._make(np.logical_not(input._data))


def bitwise_not(input: Tensor) -> Tensor:
    return Tensor._make(np.invert(input._data))


def equal(input: Tensor, other: Tensor) -> bool:
    return input._data.shape == other._data.shape and bool(np.array_equal(input._data, other._data))


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    return bool(np.allclose(input._data, operand(other), rtol=rtol, atol=atol, equal_nan=equal_nan))


def isclose(input: Tensor, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Tensor:
    return Tensor._make(np.isclose(input._data, operand(other), rtol=rtol, atol=atol, equal_nan=equal_nan))


def floor_divide(input: Any, other: Any) -> Tensor:
    return div(input, other, rounding_mode="floor")


def remainder(input: Any, other: Any) -> Tensor:
    return Tensor._make(np.asarray(np.remainder(operand(input), operand(other))))


divide = true_divide = div
subtract = sub
multiply = mul
negative = neg
