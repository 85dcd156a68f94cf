"""NAdam (Adam with Nesterov momentum) and RAdam (rectified Adam)."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from gradscope.optim._functional import (array, check_adam_arguments, decay_and_sign, params_with_grad, scalar_state,
                                         update_moments, zeros_state)
from gradscope.optim.optimizer import Optimizer

__all__ = ["NAdam", "RAdam"]


class NAdam(Optimizer):
    """PyTorch's ``torch.optim.NAdam``.

    Args:
        params: parameters or parameter groups.
        lr: learning rate.
        betas: decay rates of the first and second moment estimates.
        eps: added to the denominator.
        weight_decay: weight decay (L2, or decoupled with ``decoupled_weight_decay``).
        momentum_decay: the momentum schedule's decay.
        decoupled_weight_decay: AdamW-style decay.
        maximize: ascend instead of descend.
    """

    def __init__(self, params: Any, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        check_adam_arguments(lr, betas, eps, weight_decay)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "momentum_decay": momentum_decay, "decoupled_weight_decay": decoupled_weight_decay,
                    "maximize": maximize, "foreach": foreach, "capturable": capturable,
                    "differentiable": differentiable}
        super().__init__(params, defaults)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns the closure's loss (or None)."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, eps, momentum_decay = group["lr"], group["eps"], group["momentum_decay"]
            beta1, beta2 = group["betas"]
            init = lambda p: {"step": scalar_state(0.0), "mu_product": scalar_state(1.0),  # noqa: E731
                              "exp_avg": zeros_state(p), "exp_avg_sq": zeros_state(p)}
            for p, param, grad, state in params_with_grad(self, group, init):
                step_t = array(state["step"])
                step_t += 1
                step = float(step_t)
                bias_correction2 = 1 - beta2 ** step
                grad = decay_and_sign(grad, param, group["weight_decay"], group["maximize"],
                                      group["decoupled_weight_decay"], lr)
                mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * momentum_decay))
                mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * momentum_decay))
                mu_product = array(state["mu_product"])
                mu_product *= mu  # a float32 tensor, as in PyTorch
                exp_avg, exp_avg_sq = update_moments(state, grad, beta1, beta2)
                denom = np.sqrt(exp_avg_sq / bias_correction2) + eps
                product = float(mu_product)
                param += (-lr * (1.0 - mu) / (1.0 - product)) * (grad / denom)
                param += (-lr * mu_next / (1.0 - product * mu_next)) * (exp_avg / denom)
                p._bump_version()
        return loss


class RAdam(Optimizer):
    """PyTorch's ``torch.optim.RAdam``: Adam whose adaptive step is switched on (and rectified)
    once the variance estimate is tractable.

    Args:
        params: parameters or parameter groups.
        lr: learning rate.
        betas: decay rates of the first and second moment estimates.
        eps: added to the denominator.
        weight_decay: weight decay (L2, or decoupled with ``decoupled_weight_decay``).
        decoupled_weight_decay: AdamW-style decay.
        maximize: ascend instead of descend.
    """

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False) -> None:
        check_adam_arguments(lr, betas, eps, weight_decay)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "maximize": maximize,
                    "foreach": foreach, "capturable": capturable, "decoupled_weight_decay": decoupled_weight_decay,
                    "differentiable": differentiable}
        super().__init__(params, defaults)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns the closure's loss (or None)."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, eps = group["lr"], group["eps"]
            beta1, beta2 = group["betas"]
            init = lambda p: {"step": scalar_state(0.0), "exp_avg": zeros_state(p),  # noqa: E731
                              "exp_avg_sq": zeros_state(p)}
            for p, param, grad, state in params_with_grad(self, group, init):
                step_t = array(state["step"])
                step_t += 1
                step = float(step_t)
                grad = decay_and_sign(grad, param, group["weight_decay"], group["maximize"],
                                      group["decoupled_weight_decay"], lr)
                exp_avg, exp_avg_sq = update_moments(state, grad, beta1, beta2)
                bias_correction1 = 1 - beta1 ** step
                bias_correction2 = 1 - beta2 ** step
                corrected = exp_avg / bias_correction1
                rho_inf = 2 / (1 - beta2) - 1
                rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
                if rho_t > 5.0:
                    rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                    adaptive = bias_correction2 ** 0.5 / (np.sqrt(exp_avg_sq) + eps)
                    param -= corrected * lr * adaptive * rect
                else:
                    param -= corrected * lr
                p._bump_version()
        return loss
