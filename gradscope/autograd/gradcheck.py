"""Finite-difference gradient checking in float64."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from gradscope.autograd.engine import grad as autograd_grad
from gradscope.autograd.grad_mode import no_grad
from gradscope.autograd.tensor import Tensor


class GradcheckError(RuntimeError):
    """Analytic and numerical gradients disagree; the message names input and element."""


def _outputs(fn: Callable, inputs: Sequence) -> tuple:
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return tuple(o for o in outs if isinstance(o, Tensor))


def gradcheck(fn: Callable, inputs: Any, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True, **_ignored: Any) -> bool:
    """Compare ``fn``'s analytic gradients with central differences, in float64.

    Inputs that are floating tensors with ``requires_grad`` are checked; they are copied to
    float64 first. On mismatch raises ``GradcheckError`` naming the input, the worst element
    index, and the analytic and numeric values (or returns False if ``raise_exception=False``).
    """
    inputs = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    prepared = []
    for x in inputs:
        if isinstance(x, Tensor) and x._data.dtype.kind == "f":
            t = Tensor._make(x._data.astype(np.float64))
            t.requires_grad = x.requires_grad
            prepared.append(t)
        else:
            prepared.append(x)
    checked = [i for i, x in enumerate(prepared) if isinstance(x, Tensor) and x.requires_grad]
    outs = _outputs(fn, prepared)
    for out_index, out in enumerate(outs):
        if not out.requires_grad:
            continue
        flat_out = out._data.reshape(-1)
        analytic = {i: np.zeros((flat_out.size, prepared[i]._data.size)) for i in checked}
        for k in range(flat_out.size):
            seed = np.zeros(out._data.shape)
            seed.reshape(-1)[k] = 1.0
            outs_k = _outputs(fn, prepared)
            grads = autograd_grad(outs_k[out_index], [prepared[i] for i in checked],
                                  grad_outputs=Tensor._make(seed), allow_unused=True)
            for i, g in zip(checked, grads):
                if g is not None:
                    analytic[i][k] = g._data.reshape(-1)
        for i in checked:
            x = prepared[i]
            numeric = np.zeros_like(analytic[i])
            flat = x._data.reshape(-1)
            for j in range(flat.size):
                original = flat[j]
                with no_grad():
                    flat[j] = original + eps
                    plus = _outputs(fn, prepared)[out_index]._data.astype(np.float64).reshape(-1)
                    flat[j] = original - eps
                    minus = _outputs(fn, prepared)[out_index]._data.astype(np.float64).reshape(-1)
                flat[j] = original
                numeric[:, j] = (plus - minus) / (2 * eps)
            error = np.abs(analytic[i] - numeric) - (atol + rtol * np.abs(numeric))
            if np.any(error > 0) or np.any(np.isnan(analytic[i]) != np.isnan(numeric)):
                worst = np.unravel_index(np.nanargmax(np.where(np.isnan(error), np.inf, error)), error.shape)
                element = np.unravel_index(worst[1], x._data.shape)
                message = (f"Jacobian mismatch for output {out_index} with respect to input {i}: worst element "
                           f"input[{i}]{list(int(e) for e in element)} (output element {int(worst[0])}): "
                           f"analytic {analytic[i][worst]:.8g}, numeric {numeric[worst]:.8g} "
                           f"(atol={atol}, rtol={rtol})")
                if raise_exception:
                    raise GradcheckError(message)
                return False
    return True
