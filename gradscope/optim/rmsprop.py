"""RMSprop, optionally centered and with momentum."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.autograd.tensor import Tensor
from gradscope.optim.adam import _lerp_
from gradscope.optim.optimizer import Optimizer

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """PyTorch's ``torch.optim.RMSprop``.

    Args:
        params: parameters or parameter groups.
        lr: learning rate.
        alpha: smoothing constant of the squared-gradient average.
        eps: added to the denominator.
        weight_decay: L2 penalty added to the gradient.
        momentum: momentum factor.
        centered: normalise by the estimated variance instead of the second moment.
        maximize: ascend instead of descend.
    """

    def __init__(self, params: Any, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0, momentum: float = 0, centered: bool = False,
                 capturable: bool = False, foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        defaults = {"lr": lr, "momentum": momentum, "alpha": alpha, "eps": eps, "centered": centered,
                    "weight_decay": weight_decay, "capturable": capturable, "foreach": foreach,
                    "maximize": maximize, "differentiable": differentiable}
        super().__init__(params, defaults)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns the closure's loss (or None)."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
            weight_decay, momentum = group["weight_decay"], group["momentum"]
            centered, maximize = group["centered"], group["maximize"]
            for p in group["params"]:
                if p._grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = Tensor._make(np.array(0.0, dtype=np.float32))
                    state["square_avg"] = Tensor._make(np.zeros_like(p._data))
                    if momentum > 0:
                        state["momentum_buffer"] = Tensor._make(np.zeros_like(p._data))
                    if centered:
                        state["grad_avg"] = Tensor._make(np.zeros_like(p._data))
                grad = p._grad._data
                if maximize:
                    grad = -grad
                state["step"]._data += 1
                if weight_decay != 0:
                    grad = grad + weight_decay * p._data
                square_avg = state["square_avg"]._data
                square_avg *= alpha
                square_avg += (1 - alpha) * grad * grad
                if centered:
                    grad_avg = state["grad_avg"]._data
                    _lerp_(grad_avg, grad, 1 - alpha)
                    avg = np.sqrt(square_avg - grad_avg * grad_avg)
                else:
                    avg = np.sqrt(square_avg)
                avg += eps
                if momentum > 0:
                    buf = state["momentum_buffer"]._data
                    buf *= momentum
                    buf += grad / avg
                    p._data += -lr * buf
                else:
                    p._data += -lr * grad / avg
                p._bump_version()
        return loss
