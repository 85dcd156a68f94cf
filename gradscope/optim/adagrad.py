"""Adagrad: per-coordinate learning rates from the sum of squared gradients."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.autograd.tensor import Tensor
from gradscope.optim._functional import array, decay_and_sign, scalar_state
from gradscope.optim.optimizer import Optimizer

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """PyTorch's ``torch.optim.Adagrad``.

    Args:
        params: parameters or parameter groups.
        lr: learning rate.
        lr_decay: the rate becomes ``lr / (1 + (step - 1) * lr_decay)``.
        weight_decay: L2 penalty added to the gradient.
        initial_accumulator_value: starting value of the sum of squares.
        eps: added to the denominator.
        maximize: ascend instead of descend.

    As in PyTorch, the state (``step`` and ``sum``) is created for every parameter at construction.
    """

    def __init__(self, params: Any, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False, fused: bool | None = None) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        defaults = {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
                    "initial_accumulator_value": initial_accumulator_value, "foreach": foreach,
                    "maximize": maximize, "differentiable": differentiable, "fused": fused}
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["step"] = scalar_state(0.0)
                state["sum"] = Tensor._make(np.full_like(array(p), group["initial_accumulator_value"]))

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns the closure's loss (or None)."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p._grad is None:
                    continue
                state = self.state[p]
                param = array(p)
                grad = decay_and_sign(array(p._grad), param, group["weight_decay"], group["maximize"])
                step_t = array(state["step"])
                step_t += 1
                clr = group["lr"] / (1 + (float(step_t) - 1) * group["lr_decay"])
                total = array(state["sum"])
                total += grad * grad
                param -= clr * (grad / (np.sqrt(total) + group["eps"]))
                p._bump_version()
        return loss
