"""Normalisation layers: batch norm, layer norm, group norm."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import F64, _check_dtypes, _shape_list, float_input, fused_multiply_add, wide_sum


class NativeBatchNormBackward0(Node):
    """Edges (input, weight, bias). Saved: the input and the weight; ``mean`` and ``invstd`` per
    channel (the batch's in training, from the running statistics in evaluation).

    As torch's CPU kernel: the per-channel sums ``sum(dy)`` and ``sum((x - mean) * dy)`` are
    accumulated in float64, then ``dx = (dy - sum(dy) / n - (x - mean) * k) * invstd * w`` with
    ``k = sum((x - mean) * dy) * invstd**2 / n`` in the input's dtype."""

    __slots__ = ("axes", "mean", "invstd", "training", "count")
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_w, _), (node_b, _) = self._next
        x, w = self.saved()
        shape = (1, -1) + (1,) * (g.ndim - 2)
        centred = x - self.mean.reshape(shape)
        dtype = x.dtype
        grad_sum = wide_sum(g, self.axes)
        need_dot = node_w is not None or (node_x is not None and self.training)
        dot = wide_sum(centred * g, self.axes) if need_dot else None
        gx = None
        if node_x is not None:
            scale = self.invstd if w is None else self.invstd * w
            if self.training:
                k = dot.astype(dtype) * self.invstd * self.invstd / np.asarray(self.count, dtype)
                grad_mean = (grad_sum / self.count).astype(dtype)
                gx = (g - grad_mean.reshape(shape) - centred * k.reshape(shape)) * scale.reshape(shape)
            else:
                gx = g * scale.reshape(shape)
        gw = (dot * self.invstd).astype(dtype) if node_w is not None else None
        gb = grad_sum.astype(dtype) if node_b is not None else None
        return gx, gw, gb


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation over all dims but the channel dim 1; updates running stats in training.

    Computed as torch's CPU kernel computes it: the per-channel mean and sum of squared deviations
    are accumulated in float64 and rounded to the input's dtype, then ``x * alpha + beta`` (the
    fused multiply-add torch's vectorised loop compiles to, to within an ulp of the output) with
    ``alpha = invstd * weight`` and ``beta = bias - mean * alpha`` per channel."""
    x = float_input(input)
    if x.ndim < 2:
        raise ValueError(f"Expected 2D or more input (got {x.ndim}D input)")
    _check_dtypes(x, (weight, bias, running_mean, running_var), "mixed dtype (CPU): expect parameter to have scalar type of {}")
    axes = (0,) + tuple(range(2, x.ndim))
    channels = x.shape[1]
    shape = (1, channels) + (1,) * (x.ndim - 2)
    count = x.size // channels if channels else 0
    dtype = x.dtype
    if training:
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"gradscope.Size({list(x.shape)})")
        mean = (wide_sum(x, axes) / count).astype(dtype)
        centred = x - mean.reshape(shape)
        var_sum = wide_sum(centred * centred, axes).astype(dtype).astype(F64)
        invstd = (1.0 / np.sqrt(var_sum / count + eps)).astype(dtype)
        if running_mean is not None:
            rm = running_mean._data
            rm[...] = momentum * mean.astype(F64) + (1.0 - momentum) * rm
            running_mean._bump_version()
        if running_var is not None:
            rv = running_var._data
            rv[...] = momentum * var_sum / (count - 1) + (1.0 - momentum) * rv
            running_var._bump_version()
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("running_mean must be defined in evaluation mode")
        mean = running_mean._data.astype(dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            invstd = (1 / np.sqrt(running_var._data.astype(dtype) + np.asarray(eps, dtype))).astype(dtype)
    alpha = invstd * weight._data if weight is not None else invstd
    beta = fused_multiply_add(-mean, alpha, np.zeros((), dtype) if bias is None else bias._data)
    # x * alpha + beta, fused, is (x - mean) * alpha + (mean * alpha + beta): the second form in
    # the input's dtype keeps beta's rounding (far from 0 when mean * alpha is large), as torch
    # does, without a float64 copy of x; it differs from the fused result by an ulp of the output
    offset = (mean.astype(F64) * alpha + beta).astype(dtype)
    out = (x - mean.reshape(shape)) * alpha.reshape(shape)
    out += offset.reshape(shape)
    node = new_node(NativeBatchNormBackward0, (input, weight, bias))
    if node is not None:
        node.axes, node.mean, node.invstd, node.training, node.count = axes, mean, invstd, training, count
        node.save(input, weight)
    return result(out, node)


def _norm_backward(gxh: np.ndarray, xhat: np.ndarray, invstd: np.ndarray, axes: tuple) -> np.ndarray:
    """Input gradient of ``(x - mean) * invstd`` over ``axes`` given the gradient of the result."""
    mean_g = gxh.mean(axis=axes, keepdims=True)
    mean_gx = (gxh * xhat).mean(axis=axes, keepdims=True)
    return (gxh - mean_g - xhat * mean_gx) * invstd


def _normalise(x: np.ndarray, axes: tuple, eps: float) -> tuple:
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=axes, keepdims=True)
    invstd = 1.0 / np.sqrt(var + eps)
    return centered * invstd, invstd


class NativeLayerNormBackward0(Node):
    __slots__ = ("axes", "invstd")
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_w, _), (node_b, _) = self._next
        xhat, w = self.saved()
        lead = tuple(range(g.ndim - len(self.axes)))
        gx = gw = gb = None
        if node_x is not None:
            gx = _norm_backward(g if w is None else g * w, xhat, self.invstd, self.axes)
        if node_w is not None:
            gw = (g * xhat).sum(axis=lead)
        if node_b is not None:
            gb = g.sum(axis=lead)
        return gx, gw, gb


def layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dims, then scale and shift elementwise."""
    if isinstance(normalized_shape, (int, np.integer)):
        normalized_shape = (int(normalized_shape),)
    normalized_shape = tuple(int(s) for s in normalized_shape)
    x = float_input(input)
    k = len(normalized_shape)
    if x.ndim < k or x.shape[x.ndim - k:] != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(str(s) for s in normalized_shape)}], but got input of size"
                           f"{_shape_list(x.shape)}")
    _check_dtypes(x, (weight, bias), "mixed dtype (CPU): expect parameter to have scalar type of {}")
    axes = tuple(range(x.ndim - k, x.ndim))
    xhat, invstd = _normalise(x, axes, eps)
    out = xhat * weight._data if weight is not None else xhat.copy()
    if bias is not None:
        out += bias._data
    node = new_node(NativeLayerNormBackward0, (input, weight, bias))
    if node is not None:
        node.axes, node.invstd = axes, invstd
        node.save(Tensor._make(xhat), weight)
    return result(out, node)


class NativeGroupNormBackward0(Node):
    __slots__ = ("groups", "invstd")
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_w, _), (node_b, _) = self._next
        xhat, w = self.saved()
        n, c = g.shape[:2]
        shape = (1, c) + (1,) * (g.ndim - 2)
        axes = (0,) + tuple(range(2, g.ndim))
        gx = gw = gb = None
        if node_x is not None:
            gxh = (g if w is None else g * w.reshape(shape)).reshape(n, self.groups, -1)
            gx = _norm_backward(gxh, xhat.reshape(n, self.groups, -1), self.invstd, (2,)).reshape(g.shape)
        if node_w is not None:
            gw = (g * xhat).sum(axis=axes)
        if node_b is not None:
            gb = g.sum(axis=axes)
        return gx, gw, gb


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalise each group of ``C // num_groups`` channels per sample, then scale and shift per channel."""
    x = float_input(input)
    if x.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {x.ndim}")
    n, c = x.shape[:2]
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input "
                           f"of shape {_shape_list(x.shape)} and num_groups={num_groups}")
    _check_dtypes(x, (weight, bias), "mixed dtype (CPU): expect parameter to have scalar type of {}")
    shape = (1, c) + (1,) * (x.ndim - 2)
    xhat, invstd = _normalise(x.reshape(n, num_groups, -1), (2,), eps)
    xhat = xhat.reshape(x.shape)
    out = xhat * weight._data.reshape(shape) if weight is not None else xhat.copy()
    if bias is not None:
        out += bias._data.reshape(shape)
    node = new_node(NativeGroupNormBackward0, (input, weight, bias))
    if node is not None:
        node.groups, node.invstd = num_groups, invstd
        node.save(Tensor._make(xhat), weight)
    return result(out, node)
