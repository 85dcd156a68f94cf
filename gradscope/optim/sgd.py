"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.autograd.tensor import Tensor
from gradscope.optim._functional import decay_and_sign
from gradscope.optim.optimizer import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """PyTorch's ``torch.optim.SGD``: ``buf = momentum * buf + (1 - dampening) * g``;
    ``p -= lr * (g + momentum * buf if nesterov else buf)``.

    Args:
        params: parameters or parameter groups.
        lr: learning rate.
        momentum: momentum factor (0 disables the buffer).
        dampening: dampening of the momentum.
        weight_decay: L2 penalty added to the gradient.
        nesterov: use Nesterov momentum (needs momentum > 0 and dampening 0).
        maximize: ascend instead of descend.
    """

    def __init__(self, params: Any, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False, fused: bool | None = None) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay,
                    "nesterov": nesterov, "maximize": maximize, "foreach": foreach,
                    "differentiable": differentiable, "fused": fused}
        super().__init__(params, defaults)

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns the closure's loss (or None)."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
            weight_decay, nesterov, maximize = group["weight_decay"], group["nesterov"], group["maximize"]
            for p in group["params"]:
                if p._grad is None:
                    continue
                grad = decay_and_sign(p._grad._data, p._data, weight_decay, maximize)
                if momentum != 0:
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        state["momentum_buffer"] = Tensor._make(np.array(grad, copy=True))
                        buf_data = state["momentum_buffer"]._data
                    else:
                        buf_data = buf._data
                        buf_data *= momentum
                        buf_data += (1 - dampening) * grad
                    grad = grad + momentum * buf_data if nesterov else buf_data
                p._data += -lr * grad
                p._bump_version()
        return loss
