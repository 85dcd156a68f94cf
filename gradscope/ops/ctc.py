"""Connectionist temporal classification loss (Graves et al., 2006): the forward (alpha) and backward
(beta) recursions in log space, per sequence, with PyTorch's gradient convention (the gradient with
respect to ``log_probs`` is ``exp(log_probs) - posterior``, which is exact once it flows back
through the ``log_softmax`` that produced them, as PyTorch's native kernel computes it)."""
from __future__ import annotations

from typing import Any

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor

__all__ = ["ctc_losses"]


def _lengths(value: Any, count: int, name: str) -> np.ndarray:
    array = np.asarray(value._data if isinstance(value, Tensor) else value, dtype=np.int64).reshape(-1)
    if array.size != count:
        raise RuntimeError(f"Expected {name} to have size {count}, but got size {array.size}")
    return array


def _logsumexp3(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.logaddexp(a, b), c)


def _one_sequence(lp: np.ndarray, labels: np.ndarray, blank: int) -> tuple:
    """Negative log-likelihood of ``labels`` under ``lp`` (T, C) and the gradient w.r.t. ``lp``."""
    steps = lp.shape[0]
    extended = np.full(2 * labels.size + 1, blank, dtype=np.int64)
    extended[1::2] = labels
    size = extended.size
    emit = lp[:, extended]
    skip = np.zeros(size, dtype=bool)
    skip[2:] = (extended[2:] != blank) & (extended[2:] != extended[:-2])
    alpha = np.full((steps, size), -np.inf)
    beta = np.full((steps, size), -np.inf)
    if steps == 0:
        return np.inf, np.zeros_like(lp)
    alpha[0, :min(2, size)] = emit[0, :min(2, size)]
    for t in range(1, steps):
        prev = alpha[t - 1]
        one = np.concatenate(([-np.inf], prev))[:size]
        two = np.where(skip, np.concatenate(([-np.inf, -np.inf], prev))[:size], -np.inf)
        alpha[t] = _logsumexp3(prev, one, two) + emit[t]
    nll = -np.logaddexp(alpha[-1, -1], alpha[-1, -2] if size > 1 else -np.inf)
    beta[-1, max(size - 2, 0):] = emit[-1, max(size - 2, 0):]
    skip_from = np.concatenate((skip, [False, False]))[2:]  # s -> s + 2 allowed
    for t in range(steps - 2, -1, -1):
        nxt = beta[t + 1]
        one = np.concatenate((nxt, [-np.inf]))[1:]
        two = np.where(skip_from, np.concatenate((nxt, [-np.inf, -np.inf]))[2:], -np.inf)
        beta[t] = _logsumexp3(nxt, one, two) + emit[t]
    both = alpha + beta
    per_class = np.full(lp.shape, -np.inf)
    for s in range(size):
        per_class[:, extended[s]] = np.logaddexp(per_class[:, extended[s]], both[:, s])
    with np.errstate(over="ignore", invalid="ignore"):
        grad = np.exp(lp) - np.exp(per_class + nll - lp)
    return nll, grad


class CtcLossBackward0(Node):
    __slots__ = ("grads", "lp_shape")

    def backward(self, g):
        grad = self.grads * g.reshape(1, -1, 1)
        return grad.reshape(self.lp_shape).astype(g.dtype, copy=False)


def ctc_losses(log_probs: Tensor, targets: Tensor, input_lengths: Any, target_lengths: Any, blank: int = 0,
               zero_infinity: bool = False) -> Tensor:
    """Per-sequence CTC negative log-likelihoods (N,) for ``log_probs`` (T, N, C) or (T, C)."""
    lp_all = log_probs._data
    if lp_all.ndim not in (2, 3):
        raise RuntimeError(f"ctc_loss: expected log_probs to be 2-D or 3-D, got {lp_all.ndim}-D")
    batched = lp_all.ndim == 3
    lp3 = lp_all if batched else lp_all[:, None, :]
    steps, batch, classes = lp3.shape
    if not 0 <= blank < classes:
        raise RuntimeError("blank must be in label range")
    in_lengths = _lengths(input_lengths, batch, "input_lengths")
    out_lengths = _lengths(target_lengths, batch, "target_lengths")
    tg = targets._data.astype(np.int64)
    if not batched:
        tg = tg.reshape(1, -1)
    offsets = np.concatenate(([0], np.cumsum(out_lengths)))
    losses = np.zeros(batch, dtype=np.float64)
    grads = np.zeros((steps, batch, classes), dtype=np.float64)
    for b in range(batch):
        if in_lengths[b] > steps:
            raise RuntimeError(f"Expected input_lengths to have value at most {steps}, but got value "
                               f"{in_lengths[b]} (while checking arguments for ctc_loss_cpu)")
        labels = tg[b, :out_lengths[b]] if tg.ndim == 2 else tg[offsets[b]:offsets[b + 1]]
        nll, grad = _one_sequence(lp3[:in_lengths[b], b].astype(np.float64), labels, blank)
        if zero_infinity and np.isinf(nll):
            nll, grad = 0.0, np.zeros_like(grad)
        losses[b] = nll
        grads[:in_lengths[b], b] = grad
    node = new_node(CtcLossBackward0, (log_probs,))
    if node is not None:
        node.grads, node.lp_shape = grads, lp3.shape if batched else lp_all.shape
    out = losses.astype(lp_all.dtype)
    return result(out if batched else out.reshape(()), node)
