"""Helpers shared by the op modules: operand conversion, dtype promotion, unbroadcasting, and the
argument and dtype checks of the nn ops."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import numpy as np

from gradscope.autograd.tensor import Tensor

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
_SCALARS = (int, float, bool, np.number, np.bool_)


def _const(values: np.ndarray) -> Tensor:
    """``values`` as a tensor without history."""
    return Tensor._make(np.asarray(values))


_SCALAR_ARRAYS: dict = {}


def scalar_array(value: Any, dtype: np.dtype) -> np.ndarray:
    """``value`` as a cached read-only 0-d array of ``dtype``: numpy combines an array with it
    several times faster than with a python scalar, which it must convert on every call.

    Zero is never cached: ``0.0 == -0.0`` (and they hash alike), but ``x * -0.0`` must give
    ``-0.`` where ``x * 0.0`` gives ``+0.``. Any other equal key converts to the same array
    (a NaN only matches itself, the same object, so its bits are kept as well).
    """
    if not value:
        return np.array(value, dtype=dtype)
    key = (value, dtype)
    arr = _SCALAR_ARRAYS.get(key)
    if arr is None:
        if len(_SCALAR_ARRAYS) > 512:
            _SCALAR_ARRAYS.clear()
        arr = np.array(value, dtype=dtype)
        arr.flags.writeable = False
        _SCALAR_ARRAYS[key] = arr
    return arr


_UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def select_or_zero(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` where ``mask`` is true, else +0.0, as ``np.where(mask, values, 0)`` gives it (a
    NaN or inf outside the mask becomes 0, unlike ``values * mask``), for a float ``values`` of
    ``mask``'s shape. Done on the bits, without a branch per element: ``np.where`` mispredicts on
    an irregular mask (a ReLU's) and is several times slower than these two integer operations."""
    if not values.ndim:  # (numpy would turn the result into a scalar)
        return np.where(mask, values, np.zeros((), values.dtype))
    unsigned = _UNSIGNED[values.dtype.itemsize]
    keep = np.negative(mask.astype(unsigned))  # all ones where mask is true, else zeros
    return (values.view(unsigned) & keep).view(values.dtype)


def wide_sum(a: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """The sum of a float array accumulated in float64 (complex128 for complex), left wide: the
    accumulator torch's CPU kernels use for float32 (BatchNorm statistics, var/std). numpy's
    float32 sum is pairwise only along a contiguous axis; along a strided one it adds in order,
    in float32. Other dtypes are summed as numpy sums them."""
    kind = a.dtype.kind
    wide = F64 if kind == "f" else np.dtype(np.complex128) if kind == "c" else None
    return np.asarray(np.add.reduce(a, axis=axis, dtype=wide, keepdims=keepdims))


def accurate_mean(a: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """torch's CPU ``mean`` of a float array: the sum, accumulated wide and rounded to ``a``'s
    dtype, divided by the count in that dtype."""
    count = a.size if axis is None else int(np.prod([a.shape[i] for i in
                                                      (axis if isinstance(axis, tuple) else (axis,))]))
    if a.dtype.itemsize < 4:  # float16: as torch, divide in float32 (the count may not fit)
        return np.asarray(wide_sum(a, axis, keepdims) / count).astype(a.dtype)
    total = wide_sum(a, axis, keepdims).astype(a.dtype, copy=False)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(total / np.asarray(count, dtype=a.dtype))


def fused_multiply_add(x: np.ndarray, scale: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``x * scale + shift`` rounded once, as a fused multiply-add gives it (torch's vectorised
    CPU loops compile ``a * b + c`` to one): for float32 and narrower, the product is exact in
    float64. float64 is computed in two roundings."""
    if x.dtype.kind != "f" or x.dtype.itemsize > 4:
        return x * scale + shift
    wide = np.multiply(x, scale, dtype=F64)
    wide += shift
    return wide.astype(x.dtype)


def unbroadcast(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``grad`` over the axes that broadcasting added or stretched, to give ``shape``."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    if extra > 0:
        # (np.add.reduce: ndarray.sum without its python-level wrapper)
        grad = np.add.reduce(grad, axis=0 if extra == 1 else tuple(range(extra)))
        if grad.shape == shape:  # only leading axes were added (a bias)
            return grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad.reshape(shape)


def operand(x: Any) -> Any:
    """The numpy value of an op operand: a Tensor's array, a python scalar as is, else an array."""
    if isinstance(x, Tensor):
        return x._data
    if isinstance(x, (int, float, bool)):
        return x
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, np.generic):
        return x.item()
    return np.asarray(x)


def fix_float(out: np.ndarray, a: Any, b: Any = None) -> np.ndarray:
    """Apply PyTorch's promotion where numpy differs: float64 only if a tensor operand was
    float64 (python floats and integer tensors promote to float32)."""
    if out.dtype == F64:
        for x in (a, b):
            if isinstance(x, Tensor) and x._data.dtype == F64 and x._data.ndim > 0:
                return out
            if isinstance(x, np.ndarray) and x.dtype == F64 and x.ndim > 0:
                return out
        if _zero_dim_f64_only(a, b):
            return out
        return out.astype(F32)
    return out


def _zero_dim_f64_only(a: Any, b: Any) -> bool:
    """True when the only float64 operands are 0-d and no other operand is a float tensor."""
    saw_f64 = False
    for x in (a, b):
        data = x._data if isinstance(x, Tensor) else x
        if isinstance(data, np.ndarray):
            if data.dtype == F64:
                saw_f64 = True
            elif data.dtype.kind == "f" and data.ndim > 0:
                return False
    return saw_f64


def float_input(x: Tensor) -> np.ndarray:
    """The array of ``x`` as floating point (integers become float32), for float-only ops."""
    data = x._data
    if data.dtype.kind != "f":
        return data.astype(F32)
    return data


def normalize_dim(dim: Any, ndim: int) -> Any:
    """Normalise an int or tuple of ints (possibly negative) to non-negative axes."""
    if dim is None:
        return None
    if isinstance(dim, (tuple, list)):
        return tuple(_one_dim(d, ndim) for d in dim)
    return _one_dim(dim, ndim)


def _one_dim(d: int, ndim: int) -> int:
    d = int(d)
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n


def ensure_tensor(x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x
    from gradscope.ops.creation import tensor

    return tensor(x)


def is_scalar(x: Any) -> bool:
    return isinstance(x, _SCALARS)


def numpy_style_keywords(function: Callable) -> Callable:
    """Accept ``axis=`` for ``dim=`` and ``keepdims=`` for ``keepdim=``, as PyTorch's argument parser does.

    Functions without a ``dim`` or ``keepdim`` parameter are returned unchanged, so arithmetic pays nothing.
    """
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return function
    has_dim, has_keepdim = "dim" in parameters, "keepdim" in parameters
    if not (has_dim or has_keepdim):
        return function

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            if has_dim and "axis" in kwargs:
                kwargs["dim"] = kwargs.pop("axis")
            if has_keepdim and "keepdims" in kwargs:
                kwargs["keepdim"] = kwargs.pop("keepdims")
        return function(*args, **kwargs)

    return call


# ======================================== argument and dtype checks of the nn ops
def _tuple(value: Any, n: int, name: str = "value") -> tuple:
    """``value`` as an n-tuple of ints (an int is repeated)."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1 and n > 1:
        return value * n
    if len(value) != n:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {n} values to match "
                           f"the convolution dimensions, but got {name}={list(value)}")
    return value


def _shape_list(shape: tuple) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


_SCALAR_NAMES = {"float16": "Half", "float32": "Float", "float64": "Double"}


def _scalar_name(a: np.ndarray) -> str:
    return _SCALAR_NAMES.get(a.dtype.name, a.dtype.name)


def _check_dtypes(x: np.ndarray, params: tuple, message: str) -> None:
    """Raise PyTorch's mixed-dtype error (``message`` formatted with the two type names)."""
    for p in params:
        if p is not None and p._data.dtype != x.dtype:
            raise RuntimeError(message.format(_scalar_name(x), _scalar_name(p._data)))
