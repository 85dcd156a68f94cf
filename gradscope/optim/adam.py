"""Adam and AdamW (decoupled weight decay), with AMSGrad."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.optim._functional import (array, check_adam_arguments, decay_and_sign, params_with_grad, scalar_state,
                                         update_moments, zeros_state)
from gradscope.optim.optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """PyTorch's ``torch.optim.Adam``.

    Args:
        params: parameters or parameter groups.
        lr: learning rate.
        betas: decay rates of the first and second moment estimates.
        eps: added to the denominator.
        weight_decay: L2 penalty added to the gradient (or, with ``decoupled_weight_decay``,
            ``p *= 1 - lr * weight_decay`` as in AdamW).
        amsgrad: use the running maximum of the second moment.
        maximize: ascend instead of descend.
        decoupled_weight_decay: AdamW's weight decay.
    """

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 decoupled_weight_decay: bool = False) -> None:
        check_adam_arguments(lr, betas, eps, weight_decay)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad,
                    "maximize": maximize, "foreach": foreach, "capturable": capturable,
                    "differentiable": differentiable, "fused": fused,
                    "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns the closure's loss (or None)."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
            beta1, beta2 = group["betas"]
            amsgrad, maximize = group["amsgrad"], group["maximize"]
            decoupled = group.get("decoupled_weight_decay", False)
            init = lambda p: {"step": scalar_state(0.0), "exp_avg": zeros_state(p),  # noqa: E731
                              "exp_avg_sq": zeros_state(p),
                              **({"max_exp_avg_sq": zeros_state(p)} if amsgrad else {})}
            for p, param, grad, state in params_with_grad(self, group, init):
                step_t = array(state["step"])
                step_t += 1
                grad = decay_and_sign(grad, param, weight_decay, maximize, decoupled, lr)
                exp_avg, exp_avg_sq = update_moments(state, grad, beta1, beta2)
                step = float(step_t)
                bias_correction1 = 1 - beta1 ** step
                bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
                step_size = lr / bias_correction1
                if amsgrad:
                    max_sq = array(state["max_exp_avg_sq"])
                    np.maximum(max_sq, exp_avg_sq, out=max_sq)
                    denom = np.sqrt(max_sq) / bias_correction2_sqrt + eps
                else:
                    denom = np.sqrt(exp_avg_sq) / bias_correction2_sqrt + eps
                param += -step_size * exp_avg / denom
                p._bump_version()
        return loss


class AdamW(Adam):
    """PyTorch's ``torch.optim.AdamW``: Adam with decoupled weight decay (default 0.01)."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
