"""RMSprop, optionally centered and with momentum."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.optim._functional import array, decay_and_sign, lerp_, params_with_grad, scalar_state, zeros_state
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
            init = lambda p: {"step": scalar_state(0.0), "square_avg": zeros_state(p),  # noqa: E731
                              **({"momentum_buffer": zeros_state(p)} if momentum > 0 else {}),
                              **({"grad_avg": zeros_state(p)} if centered else {})}
            for p, param, grad, state in params_with_grad(self, group, init):
                array(state["step"])[...] += 1
                grad = decay_and_sign(grad, param, weight_decay, maximize)
                square_avg = array(state["square_avg"])
                square_avg *= alpha
                square_avg += (1 - alpha) * grad * grad
                if centered:
                    grad_avg = array(state["grad_avg"])
                    lerp_(grad_avg, grad, 1 - alpha)
                    avg = np.sqrt(square_avg - grad_avg * grad_avg)
                else:
                    avg = np.sqrt(square_avg)
                avg += eps
                if momentum > 0:
                    buf = array(state["momentum_buffer"])
                    buf *= momentum
                    buf += grad / avg
                    param += -lr * buf
                else:
                    param += -lr * grad / avg
                p._bump_version()
        return loss
