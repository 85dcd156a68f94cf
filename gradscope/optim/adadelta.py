"""Adadelta: steps scaled by the ratio of running RMS of updates and of gradients."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.optim._functional import array, decay_and_sign, params_with_grad, scalar_state, zeros_state
from gradscope.optim.optimizer import Optimizer

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """PyTorch's ``torch.optim.Adadelta``.

    Args:
        params: parameters or parameter groups.
        lr: coefficient of the computed delta.
        rho: decay of the running averages.
        eps: added inside the square roots.
        weight_decay: L2 penalty added to the gradient.
        maximize: ascend instead of descend.
    """

    def __init__(self, params: Any, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0,
                 foreach: bool | None = None, *, capturable: bool = False, maximize: bool = False,
                 differentiable: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay, "maximize": maximize,
                    "capturable": capturable, "foreach": foreach, "differentiable": differentiable}
        super().__init__(params, defaults)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns the closure's loss (or None)."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            rho, eps = group["rho"], group["eps"]
            init = lambda p: {"step": scalar_state(0.0), "square_avg": zeros_state(p),  # noqa: E731
                              "acc_delta": zeros_state(p)}
            for p, param, grad, state in params_with_grad(self, group, init):
                array(state["step"])[...] += 1
                grad = decay_and_sign(grad, param, group["weight_decay"], group["maximize"])
                square_avg, acc_delta = array(state["square_avg"]), array(state["acc_delta"])
                square_avg *= rho
                square_avg += (1 - rho) * grad * grad
                delta = np.sqrt(acc_delta + eps) / np.sqrt(square_avg + eps) * grad
                acc_delta *= rho
                acc_delta += (1 - rho) * delta * delta
                param -= group["lr"] * delta
                p._bump_version()
        return loss
