"""Array helpers shared by the optimizers: arrays of parameters, gradients and state, and the
per-parameter loop with lazily created state."""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from gradscope.autograd.tensor import Tensor


def array(t: Tensor) -> np.ndarray:
    """The live array of a parameter, gradient or state tensor (writes update the tensor)."""
    return t.numpy(force=True)


def scalar_state(value: float) -> Tensor:
    """A 0-d float32 state tensor (``step``, ``mu_product``), as PyTorch keeps them."""
    return Tensor._make(np.array(value, dtype=np.float32))


def zeros_state(p: Tensor) -> Tensor:
    """A state tensor of zeros shaped like the parameter ``p``."""
    return Tensor._make(np.zeros_like(array(p)))


def params_with_grad(optimizer: Any, group: dict, init_state: Callable[[Tensor], dict]) -> Iterator[tuple]:
    """Yield ``(p, param_array, grad_array, state)`` for the parameters of ``group`` that have a
    gradient, creating their state with ``init_state(p)`` on first use."""
    for p in group["params"]:
        if p._grad is None:
            continue
        state = optimizer.state[p]
        if len(state) == 0:
            state.update(init_state(p))
        yield p, array(p), array(p._grad), state


def decay_and_sign(grad: np.ndarray, param: np.ndarray, weight_decay: float, maximize: bool,
                   decoupled: bool = False, lr: float = 0.0) -> np.ndarray:
    """The gradient negated when maximizing, plus the L2 term ``weight_decay * param``; with
    ``decoupled`` (AdamW), the parameter is decayed in place (``param *= 1 - lr * weight_decay``)
    and the gradient left as it is."""
    if maximize:
        grad = -grad
    if weight_decay != 0:
        if decoupled:
            param *= 1 - lr * weight_decay
        else:
            grad = grad + weight_decay * param
    return grad


def lerp_(target: np.ndarray, end: np.ndarray, weight: float) -> None:
    """``target += weight * (end - target)`` in place, in PyTorch's two-sided form."""
    if abs(weight) < 0.5:
        target += weight * (end - target)
    else:
        np.subtract(end, (end - target) * (1 - weight), out=target)


def update_moments(state: dict, grad: np.ndarray, beta1: float, beta2: float) -> tuple[np.ndarray, np.ndarray]:
    """Adam's running averages: ``exp_avg`` of the gradient and ``exp_avg_sq`` of its square,
    updated in place and returned."""
    exp_avg, exp_avg_sq = array(state["exp_avg"]), array(state["exp_avg_sq"])
    lerp_(exp_avg, grad, 1 - beta1)
    exp_avg_sq *= beta2
    exp_avg_sq += (1 - beta2) * grad * grad
    return exp_avg, exp_avg_sq


def check_adam_arguments(lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    """PyTorch's checks (and messages) of the arguments the Adam family shares."""
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
