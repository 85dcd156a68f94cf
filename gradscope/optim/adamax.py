"""Adamax: Adam with the infinity norm of past gradients."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.optim._functional import (array, check_adam_arguments, decay_and_sign, lerp_, params_with_grad,
                                         scalar_state, zeros_state)
from gradscope.optim.optimizer import Optimizer

__all__ = ["Adamax"]


class Adamax(Optimizer):
    """PyTorch's ``torch.optim.Adamax``.

    Args:
        params: parameters or parameter groups.
        lr: learning rate.
        betas: decay of the first moment and of the infinity norm.
        eps: added to the infinity norm.
        weight_decay: L2 penalty added to the gradient.
        maximize: ascend instead of descend.
    """

    def __init__(self, params: Any, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, foreach: bool | None = None, *, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False) -> None:
        check_adam_arguments(lr, betas, eps, weight_decay)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "foreach": foreach,
                    "maximize": maximize, "differentiable": differentiable, "capturable": capturable}
        super().__init__(params, defaults)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns the closure's loss (or None)."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            init = lambda p: {"step": scalar_state(0.0), "exp_avg": zeros_state(p),  # noqa: E731
                              "exp_inf": zeros_state(p)}
            for p, param, grad, state in params_with_grad(self, group, init):
                step_t = array(state["step"])
                step_t += 1
                grad = decay_and_sign(grad, param, group["weight_decay"], group["maximize"])
                exp_avg, exp_inf = array(state["exp_avg"]), array(state["exp_inf"])
                lerp_(exp_avg, grad, 1 - beta1)
                exp_inf *= beta2
                np.maximum(exp_inf, np.abs(grad) + group["eps"], out=exp_inf)
                clr = group["lr"] / (1 - beta1 ** float(step_t))
                param -= clr * (exp_avg / exp_inf)
                p._bump_version()
        return loss
