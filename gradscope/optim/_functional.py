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


def decay_and_sign(grad: np.ndarray, param: np.ndarray, weight_decay: float, maximize: bool) -> np.ndarray:
    """The gradient negated when maximizing, plus the L2 term ``weight_decay * param``."""
    if maximize:
        grad = -grad
    if weight_decay != 0:
        grad = grad + weight_decay * param
    return grad
