"""Adam and AdamW (decoupled weight decay), with AMSGrad."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.autograd.tensor import Tensor
from gradscope.optim.optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


def _lerp_(target: np.ndarray, end: np.ndarray, weight: float) -> None:
    """``target += weight * (end - target)`` in place, in PyTorch's two-sided form."""
    if abs(weight) < 0.5:
        target += weight * (end - target)
    else:
        np.subtract(end, (end - target) * (1 - weight), out=target)


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
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
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
            for p in group["params"]:
                if p._grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = Tensor._make(np.array(0.0, dtype=np.float32))
                    state["exp_avg"] = Tensor._make(np.zeros_like(p._data))
                    state["exp_avg_sq"] = Tensor._make(np.zeros_like(p._data))
                    if amsgrad:
                        state["max_exp_avg_sq"] = Tensor._make(np.zeros_like(p._data))
                grad = p._grad._data
                if maximize:
                    grad = -grad
                step_t = state["step"]._data
                step_t += 1
                if weight_decay != 0:
                    if decoupled:
                        p._data *= 1 - lr * weight_decay
                    else:
                        grad = grad + weight_decay * p._data
                exp_avg, exp_avg_sq = state["exp_avg"]._data, state["exp_avg_sq"]._data
                _lerp_(exp_avg, grad, 1 - beta1)
                exp_avg_sq *= beta2
                exp_avg_sq += (1 - beta2) * grad * grad
                step = float(step_t)
                bias_correction1 = 1 - beta1 ** step
                bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
                step_size = lr / bias_correction1
                if amsgrad:
                    max_sq = state["max_exp_avg_sq"]._data
                    np.maximum(max_sq, exp_avg_sq, out=max_sq)
                    denom = np.sqrt(max_sq) / bias_correction2_sqrt + eps
                else:
                    denom = np.sqrt(exp_avg_sq) / bias_correction2_sqrt + eps
                p._data += -step_size * exp_avg / denom
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
