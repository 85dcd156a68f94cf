"""Rprop and ASGD: resilient backpropagation and averaged SGD."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.autograd.tensor import Tensor
from gradscope.optim._functional import array, decay_and_sign, params_with_grad, scalar_state, zeros_state
from gradscope.optim.optimizer import Optimizer

__all__ = ["ASGD", "Rprop"]


class Rprop(Optimizer):
    """PyTorch's ``torch.optim.Rprop``: per-element step sizes that grow by ``etas[1]`` while the
    gradient keeps its sign and shrink by ``etas[0]`` when it flips (that step is skipped).

    Args:
        params: parameters or parameter groups.
        lr: initial step size.
        etas: (decrease, increase) factors.
        step_sizes: (minimum, maximum) step size.
        maximize: ascend instead of descend.
    """

    def __init__(self, params: Any, lr: float = 1e-2, etas: tuple[float, float] = (0.5, 1.2),
                 step_sizes: tuple[float, float] = (1e-6, 50), *, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False, differentiable: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        defaults = {"lr": lr, "etas": etas, "step_sizes": step_sizes, "foreach": foreach, "maximize": maximize,
                    "differentiable": differentiable, "capturable": capturable}
        super().__init__(params, defaults)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns the closure's loss (or None)."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            eta_minus, eta_plus = group["etas"]
            smallest, largest = group["step_sizes"]
            init = lambda p: {"step": scalar_state(0.0), "prev": zeros_state(p),  # noqa: E731
                              "step_size": Tensor._make(np.full_like(array(p), group["lr"]))}
            for p, param, grad, state in params_with_grad(self, group, init):
                array(state["step"])[...] += 1
                grad = decay_and_sign(grad, param, 0, group["maximize"])
                prev, step_size = array(state["prev"]), array(state["step_size"])
                agreement = np.sign(grad * prev)
                factor = np.where(agreement > 0, eta_plus, np.where(agreement < 0, eta_minus, 1.0))
                np.clip(step_size * factor.astype(step_size.dtype), smallest, largest, out=step_size)
                grad = np.where(agreement < 0, 0, grad).astype(param.dtype)
                param -= np.sign(grad) * step_size
                prev[...] = grad
                p._bump_version()
        return loss


class ASGD(Optimizer):
    """PyTorch's ``torch.optim.ASGD``: SGD with a decaying step ``eta`` and a running average ``ax``
    of the parameters that starts after ``t0`` steps.

    Args:
        params: parameters or parameter groups.
        lr: learning rate.
        lambd: decay term.
        alpha: power of the ``eta`` update.
        t0: step at which averaging starts.
        weight_decay: L2 penalty added to the gradient.
        maximize: ascend instead of descend.
    """

    def __init__(self, params: Any, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6,
                 weight_decay: float = 0, foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "lambd": lambd, "alpha": alpha, "t0": t0, "weight_decay": weight_decay,
                    "foreach": foreach, "maximize": maximize, "differentiable": differentiable,
                    "capturable": capturable}
        super().__init__(params, defaults)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns the closure's loss (or None)."""
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, lambd, alpha, t0 = group["lr"], group["lambd"], group["alpha"], group["t0"]
            # eta and mu are 0-d float32 tensors in PyTorch's state: their values are rounded to float32
            init = lambda p: {"step": scalar_state(0.0), "eta": scalar_state(lr),  # noqa: E731
                              "mu": scalar_state(1.0), "ax": zeros_state(p)}
            for p, param, grad, state in params_with_grad(self, group, init):
                step_t = array(state["step"])
                step_t[...] += 1
                grad = decay_and_sign(grad, param, group["weight_decay"], group["maximize"])
                eta, mu = float(array(state["eta"])), float(array(state["mu"]))
                param *= 1 - lambd * eta
                param -= eta * grad
                ax = array(state["ax"])
                if mu != 1:
                    ax += (param - ax) * mu
                else:
                    ax[...] = param
                step = float(step_t)
                array(state["eta"])[...] = lr / ((1 + lambd * lr * step) ** alpha)
                array(state["mu"])[...] = 1 / max(1, step - t0)
                p._bump_version()
        return loss
