"""The core computations of the losses: NLL, MSE, smooth L1 and Huber, binary cross-entropy (with
and without logits), pointwise KL divergence; and the reduction they share."""
from __future__ import annotations

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import _shape_list, unbroadcast
from gradscope.ops.activations import _softplus_array
from gradscope.ops.pointwise import _sigmoid_array


def _reduction_check(reduction: str) -> None:
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _reduce(loss: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum(), dtype=loss.dtype)
    return np.asarray(loss.mean() if loss.size else np.nan, dtype=loss.dtype)


def _reduced_grad(g: np.ndarray, shape: tuple, reduction: str) -> np.ndarray:
    """The gradient of each element of an unreduced loss of ``shape`` given the reduced one's."""
    if reduction == "none":
        return g
    if reduction == "mean":
        return np.broadcast_to(g / max(int(np.prod(shape)), 1), shape)
    return np.broadcast_to(g, shape)


class NllLossBackward0(Node):
    """Edge: the log-probabilities only (targets and class weights get no gradient)."""

    __slots__ = ("coef", "rows", "targets", "rows_shape", "moved_shape", "x_shape")

    def backward(self, g):
        grad = np.zeros(self.rows_shape, dtype=g.dtype)
        grad[self.rows, self.targets] = self.coef * g.reshape(-1) if g.ndim else self.coef * g
        if self.moved_shape is None:
            return grad.reshape(self.x_shape)
        return np.moveaxis(grad.reshape(self.moved_shape), -1, 1)


class NllLoss2DBackward0(NllLossBackward0):
    __slots__ = ()


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of the target classes: ``-input[n, target[n]] * weight[target[n]]``."""
    _reduction_check(reduction)
    x = input._data
    t = target._data
    if t.dtype.kind not in "iu":
        raise RuntimeError(f"expected scalar type Long but found {target.dtype}")
    if x.ndim == 1:
        if t.ndim != 0:
            raise ValueError(f"Expected input batch_size (1) to match target batch_size ({t.shape[0]}).")
        rows_x = x.reshape(1, -1)
        moved_shape = None
    else:
        if t.shape[:1] != x.shape[:1]:
            raise ValueError(f"Expected input batch_size ({x.shape[0]}) to match target batch_size "
                             f"({t.shape[0] if t.ndim else 1}).")
        if t.shape != x.shape[:1] + x.shape[2:]:
            raise RuntimeError(f"Expected target size {_shape_list(x.shape[:1] + x.shape[2:])}, got "
                               f"{_shape_list(t.shape)}")
        if x.ndim == 2:
            rows_x, moved_shape = x, None
        else:
            moved = np.moveaxis(x, 1, -1)
            moved_shape = moved.shape
            rows_x = moved.reshape(-1, x.shape[1])
    classes = rows_x.shape[1]
    flat_t = t.reshape(-1)
    valid = flat_t != ignore_index
    bad = valid & ((flat_t < 0) | (flat_t >= classes))
    if bad.any():
        raise IndexError(f"Target {int(flat_t[bad][0])} is out of bounds.")
    safe_t = np.where(valid, flat_t, 0)
    if weight is not None:
        w_rows = weight._data[safe_t].astype(x.dtype) * valid
    else:
        w_rows = valid.astype(x.dtype)
    rows = np.arange(rows_x.shape[0])
    losses = -rows_x[rows, safe_t] * w_rows
    if reduction == "none":
        out = losses.reshape(t.shape)
        coef = -w_rows
    elif reduction == "sum":
        out = np.asarray(losses.sum(), dtype=x.dtype)
        coef = -w_rows
    else:
        total = w_rows.sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.asarray(losses.sum() / total, dtype=x.dtype)
            coef = (-w_rows / total).astype(x.dtype)
    cls = NllLoss2DBackward0 if x.ndim == 4 else NllLossBackward0
    node = new_node(cls, (input,))
    if node is not None:
        node.coef, node.rows, node.targets = coef, rows, safe_t
        node.rows_shape, node.moved_shape, node.x_shape = rows_x.shape, moved_shape, x.shape
    return result(out, node)


class MseLossBackward0(Node):
    __slots__ = ("reduction", "shape_x", "shape_t")
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_t, _) = self._next
        x, t, w = self.saved()
        diff = x - t
        grad = 2.0 * diff * _reduced_grad(g, diff.shape, self.reduction)
        if w is not None:
            grad = grad * w
        gx = unbroadcast(grad, self.shape_x) if node_x is not None else None
        gt = -unbroadcast(grad, self.shape_t) if node_t is not None else None
        return gx, gt


def _broadcast_warning(x: np.ndarray, t: np.ndarray) -> None:
    if x.shape != t.shape:
        import warnings

        warnings.warn(f"Using a target size (gradscope.Size({list(t.shape)})) that is different to the input "
                      f"size (gradscope.Size({list(x.shape)})). This will likely lead to incorrect results due "
                      "to broadcasting. Please ensure they have the same size.", UserWarning, stacklevel=4)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Mean squared error ``(input - target) ** 2`` (optionally weighted), reduced."""
    _reduction_check(reduction)
    x, t = input._data, target._data
    _broadcast_warning(x, t)
    diff = x - t
    loss = diff * diff
    if weight is not None:
        loss = loss * weight._data
    node = new_node(MseLossBackward0, (input, target))
    if node is not None:
        node.reduction, node.shape_x, node.shape_t = reduction, x.shape, t.shape
        node.save(input, target, weight)
    return result(_reduce(loss, reduction), node)


class SmoothL1LossBackward0(Node):
    """Smooth L1 (``beta``) and Huber (``delta``) share one derivative shape."""

    __slots__ = ("reduction", "shape_x", "shape_t", "beta")
    _single_input = False
    _huber = False

    def backward(self, g):
        (node_x, _), (node_t, _) = self._next
        x, t, w = self.saved()
        diff = x - t
        beta = self.beta
        if self._huber:
            local = np.clip(diff, -beta, beta)
        elif beta == 0:
            local = np.sign(diff)
        else:
            local = np.where(np.abs(diff) < beta, diff / beta, np.sign(diff))
        grad = local * _reduced_grad(g, diff.shape, self.reduction)
        if w is not None:
            grad = grad * w
        gx = unbroadcast(grad, self.shape_x) if node_x is not None else None
        gt = -unbroadcast(grad, self.shape_t) if node_t is not None else None
        return gx, gt


class HuberLossBackward0(SmoothL1LossBackward0):
    __slots__ = ()
    _huber = True


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``; reduced."""
    _reduction_check(reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    x, t = input._data, target._data
    _broadcast_warning(x, t)
    diff = np.abs(x - t)
    loss = diff if beta == 0 else np.where(diff < beta, 0.5 * diff * diff / beta, diff - 0.5 * beta)
    node = new_node(SmoothL1LossBackward0, (input, target))
    if node is not None:
        node.reduction, node.shape_x, node.shape_t, node.beta = reduction, x.shape, t.shape, beta
        node.save(input, target, None)
    return result(_reduce(loss.astype(diff.dtype, copy=False), reduction), node)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:
    """``0.5 d**2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 delta)``; reduced."""
    _reduction_check(reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    x, t = input._data, target._data
    _broadcast_warning(x, t)
    diff = np.abs(x - t)
    loss = np.where(diff < delta, 0.5 * diff * diff, delta * (diff - 0.5 * delta)).astype(diff.dtype, copy=False)
    if weight is not None:
        loss = loss * weight._data
    node = new_node(HuberLossBackward0, (input, target))
    if node is not None:
        node.reduction, node.shape_x, node.shape_t, node.beta = reduction, x.shape, t.shape, delta
        node.save(input, target, weight)
    return result(_reduce(loss, reduction), node)


class BinaryCrossEntropyBackward0(Node):
    __slots__ = ("reduction",)
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_t, _) = self._next
        x, t, w = self.saved()
        scale = _reduced_grad(g, x.shape, self.reduction)
        if w is not None:
            scale = scale * w
        gx = gt = None
        if node_x is not None:
            gx = scale * (x - t) / np.maximum((1.0 - x) * x, 1e-12)
        if node_t is not None:
            with np.errstate(divide="ignore"):
                gt = scale * (np.maximum(np.log1p(-x), -100.0) - np.maximum(np.log(x), -100.0))
        return gx, gt


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: str = "mean") -> Tensor:
    """``-w (t log x + (1 - t) log(1 - x))`` with the logs clamped at -100, as PyTorch does."""
    _reduction_check(reduction)
    x, t = input._data, target._data
    if x.shape != t.shape:
        raise ValueError(f"Using a target size (gradscope.Size({list(t.shape)})) that is different to the "
                         f"input size (gradscope.Size({list(x.shape)})) is deprecated. Please ensure they have "
                         "the same size.")
    if x.size and (np.nanmin(x) < 0 or np.nanmax(x) > 1):
        raise RuntimeError("all elements of input should be between 0 and 1")
    with np.errstate(divide="ignore"):
        loss = -(t * np.maximum(np.log(x), -100.0) + (1.0 - t) * np.maximum(np.log1p(-x), -100.0))
    if weight is not None:
        loss = loss * weight._data
    node = new_node(BinaryCrossEntropyBackward0, (input, target))
    if node is not None:
        node.reduction = reduction
        node.save(input, target, None if weight is None else Tensor._make(np.broadcast_to(weight._data, x.shape)))
    return result(_reduce(loss.astype(x.dtype, copy=False), reduction), node)


class BinaryCrossEntropyWithLogitsBackward0(Node):
    __slots__ = ("reduction",)
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_t, _) = self._next
        x, t, w, pw = self.saved()
        scale = _reduced_grad(g, x.shape, self.reduction)
        if w is not None:
            scale = scale * w
        gx = gt = None
        if node_x is not None:
            sig = _sigmoid_array(x)
            if pw is None:
                gx = scale * (sig - t)
            else:
                log_weight = (pw - 1.0) * t + 1.0
                gx = scale * ((1.0 - t) - log_weight * (1.0 - sig))
        if node_t is not None:
            if pw is None:
                gt = -scale * x
            else:
                softplus_neg = _softplus_array(-x)
                gt = scale * ((pw - 1.0) * softplus_neg - x)
        return gx, gt


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """Sigmoid + binary cross-entropy in one stable expression; ``pos_weight`` weighs the positive term."""
    _reduction_check(reduction)
    x, t = input._data, target._data
    if x.shape != t.shape:
        raise ValueError(f"Target size (gradscope.Size({list(t.shape)})) must be the same as input size "
                         f"(gradscope.Size({list(x.shape)}))")
    softplus_neg = _softplus_array(-x)
    if pos_weight is None:
        loss = (1.0 - t) * x + softplus_neg
        pw = None
    else:
        pw = np.broadcast_to(pos_weight._data, x.shape)
        loss = (1.0 - t) * x + ((pw - 1.0) * t + 1.0) * softplus_neg
    w = None
    if weight is not None:
        w = np.broadcast_to(weight._data, x.shape)
        loss = loss * w
    node = new_node(BinaryCrossEntropyWithLogitsBackward0, (input, target))
    if node is not None:
        node.reduction = reduction
        node.save(input, target, None if w is None else Tensor._make(w), None if pw is None else Tensor._make(pw))
    return result(_reduce(loss.astype(x.dtype, copy=False), reduction), node)


class KlDivBackward0(Node):
    __slots__ = ("log_target",)
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_t, _) = self._next
        x, t = self.saved()
        gx = gt = None
        if self.log_target:
            e = np.exp(t)
            gx = -g * e if node_x is not None else None
            gt = g * e * (t - x + 1.0) if node_t is not None else None
        else:
            gx = -g * t if node_x is not None else None
            if node_t is not None:
                with np.errstate(divide="ignore", invalid="ignore"):
                    gt = g * (np.where(t > 0, np.log(np.where(t > 0, t, 1.0)), 0.0) + 1.0 - x)
        return gx, gt


def kl_div_pointwise(input: Tensor, target: Tensor, log_target: bool = False) -> Tensor:
    """Elementwise ``target * (log target - input)`` (0 where target is 0), or its log-target form."""
    x, t = input._data, target._data
    if log_target:
        out = np.exp(t) * (t - x)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(t > 0, t * np.log(np.where(t > 0, t, 1.0)), 0.0) - t * x
    node = new_node(KlDivBackward0, (input, target))
    if node is not None:
        node.log_target = log_target
        node.save(input, target)
    return result(np.asarray(out).astype(np.result_type(x, t), copy=False), node)
