"""Gradient clipping with PyTorch's semantics (``torch.nn.utils.clip_grad_norm_`` and friends).

Everything runs under ``no_grad`` and modifies ``.grad`` in place.
"""
from __future__ import annotations

import functools
import math
import types
import warnings
from typing import Any, Callable, Iterable

import numpy as np

from gradscope.autograd.grad_mode import no_grad
from gradscope.autograd.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_"]

TensorOrTensors = Tensor | Iterable[Tensor]


def _no_grad(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with no_grad():
            return fn(*args, **kwargs)

    return wrapper


def _vector_norm(values: np.ndarray, norm_type: float) -> np.ndarray:
    """``linalg.vector_norm`` of all entries, accumulated in float64, returned in ``values``' dtype."""
    flat = np.abs(values.reshape(-1).astype(np.float64))
    if norm_type == math.inf:
        norm = flat.max() if flat.size else 0.0
    elif norm_type == -math.inf:
        norm = flat.min() if flat.size else math.inf
    elif norm_type == 0:
        norm = float(np.count_nonzero(flat))
    elif norm_type == 1:
        norm = flat.sum()
    elif norm_type == 2:
        norm = np.sqrt(np.dot(flat, flat))
    else:
        norm = np.sum(flat ** norm_type) ** (1.0 / norm_type)
    return np.asarray(norm, dtype=values.dtype)


@_no_grad
def get_total_norm(tensors: TensorOrTensors, norm_type: float | str = 2.0, error_if_nonfinite: bool = False,
                   foreach: bool | None = None) -> Tensor:
    """The p-norm of the per-tensor p-norms of ``tensors`` (as if all were one vector).

    Args:
        tensors: a tensor or an iterable of tensors.
        norm_type: the p of the norm; ``float('inf')`` or ``'inf'`` for the max-abs norm.
        error_if_nonfinite: raise ``RuntimeError`` if the total norm is NaN or infinite.
        foreach: accepted for PyTorch compatibility; ignored.

    Returns:
        A 0-dim tensor (``tensor(0.)`` when there are no tensors).
    """
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return Tensor._make(np.array(0.0, dtype=np.float32))
    norms = [_vector_norm(t._data, norm_type) for t in tensors]
    dtype = np.result_type(*norms)
    total = _vector_norm(np.stack([n.astype(dtype) for n in norms]), norm_type)
    if error_if_nonfinite and not np.isfinite(total):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")
    return Tensor._make(total)


@_no_grad
def clip_grads_with_norm_(parameters: TensorOrTensors, max_norm: float, total_norm: Tensor,
                          foreach: bool | None = None) -> None:
    """Multiply every existing gradient in place by ``min(max_norm / (total_norm + 1e-6), 1)``.

    Raises:
        ValueError: ``max_norm`` is negative (PyTorch would flip the gradients' sign).
    """
    parameters = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    max_norm = float(max_norm)
    if max_norm < 0:
        raise ValueError(f"max_norm must be non-negative, got {max_norm} (a negative max_norm would flip the "
                         "sign of every gradient)")
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    total = total_norm._data if isinstance(total_norm, Tensor) else np.asarray(total_norm, dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        coef = np.minimum(max_norm / (total + 1e-6), 1.0).astype(total.dtype)
        for grad in grads:
            np.multiply(grad._data, coef, out=grad._data, casting="unsafe")
            grad._bump_version()


@_no_grad
def clip_grad_norm_(parameters: TensorOrTensors, max_norm: float, norm_type: float | str = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Rescale gradients in place so that their total norm is at most ``max_norm``.

    Parameters whose ``.grad`` is None are skipped. The coefficient
    ``max_norm / (total_norm + 1e-6)`` is clamped from above to 1 and applied to every
    gradient, even when it is 1.

    Args:
        parameters: a tensor or an iterable of tensors whose ``.grad`` is clipped.
        max_norm: the largest allowed total norm (must be non-negative).
        norm_type: the p of the norm; ``float('inf')`` or ``'inf'`` for the max-abs norm.
        error_if_nonfinite: raise ``RuntimeError`` (and leave the gradients untouched) when
            the total norm is NaN or infinite.
        foreach: accepted for PyTorch compatibility; ignored.

    Returns:
        The total norm of the gradients before clipping, as a 0-dim tensor.

    Raises:
        ValueError: ``max_norm`` is negative (PyTorch would flip the gradients' sign).
    """
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    else:
        is_generator = isinstance(parameters, types.GeneratorType)
        parameters = list(parameters)
        if is_generator and not parameters:
            warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.", stacklevel=3)
    if float(max_norm) < 0:
        raise ValueError(f"max_norm must be non-negative, got {float(max_norm)} (a negative max_norm would flip "
                         "the sign of every gradient)")
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = get_total_norm(grads, norm_type, error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total_norm)
    return total_norm


def clip_grad_norm(parameters: TensorOrTensors, max_norm: float, norm_type: float | str = 2.0,
                   error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Deprecated alias of ``clip_grad_norm_`` (warns with ``FutureWarning``)."""
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of `torch.nn.utils.clip_grad_norm_`.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


@_no_grad
def clip_grad_value_(parameters: TensorOrTensors, clip_value: float, foreach: bool | None = None) -> None:
    """Clamp every existing gradient in place to ``[-clip_value, clip_value]``.

    Args:
        parameters: a tensor or an iterable of tensors whose ``.grad`` is clipped.
        clip_value: the bound.
        foreach: accepted for PyTorch compatibility; ignored.
    """
    parameters = [parameters] if isinstance(parameters, Tensor) else parameters
    clip_value = float(clip_value)
    for p in parameters:
        grad = p.grad
        if grad is None:
            continue
        np.clip(grad._data, -clip_value, clip_value, out=grad._data)
        grad._bump_version()
