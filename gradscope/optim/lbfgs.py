"""L-BFGS with PyTorch's algorithm, state and stopping rules (fixed step length)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.autograd.grad_mode import enable_grad
from gradscope.optim._functional import array
from gradscope.optim.optimizer import Optimizer

__all__ = ["LBFGS"]


class LBFGS(Optimizer):
    """PyTorch's ``torch.optim.LBFGS`` (one parameter group; ``step(closure)`` is required).

    Args:
        params: the parameters.
        lr: step length.
        max_iter: iterations per ``step``.
        max_eval: closure evaluations per ``step`` (default ``max_iter * 5 // 4``).
        tolerance_grad: stop when the largest gradient entry is at most this.
        tolerance_change: stop when the step or the loss change is smaller than this.
        history_size: number of curvature pairs kept.
        line_search_fn: None (a fixed step); ``"strong_wolfe"`` is not supported by gradscope.
    """

    def __init__(self, params: Any, lr: float = 1, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        if line_search_fn is not None:
            if line_search_fn != "strong_wolfe":
                raise RuntimeError("only 'strong_wolfe' is supported")
            raise NotImplementedError("gradscope's LBFGS has no line search: use line_search_fn=None")
        defaults = {"lr": lr, "max_iter": max_iter, "max_eval": max_eval, "tolerance_grad": tolerance_grad,
                    "tolerance_change": tolerance_change, "history_size": history_size,
                    "line_search_fn": line_search_fn}
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _gather_flat_grad(self) -> np.ndarray:
        parts = [np.zeros(array(p).size, array(p).dtype) if p._grad is None else array(p._grad).reshape(-1)
                 for p in self._params]
        return np.concatenate(parts)

    def _add_grad(self, step_size: Any, direction: np.ndarray) -> None:
        offset = 0
        for p in self._params:
            data = array(p)
            data += step_size * direction[offset:offset + data.size].reshape(data.shape)
            offset += data.size
            p._bump_version()

    @staticmethod
    def _evaluate(closure: Callable[[], Any]) -> Any:
        with enable_grad():
            return closure()

    def step(self, closure: Callable[[], Any]) -> Any:  # noqa: C901 - PyTorch's loop, kept in one piece
        """Run up to ``max_iter`` L-BFGS iterations; ``closure`` clears the gradients, computes the
        loss, calls ``backward`` and returns the loss. Returns the first loss."""
        if closure is None:
            raise RuntimeError("LBFGS requires a closure")
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        history_size = group["history_size"]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        orig_loss = self._evaluate(closure)
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if np.abs(flat_grad).max() <= tolerance_grad:
            return orig_loss
        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag = state.get("H_diag")
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                h_diag = 1
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = y.dot(s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / y.dot(y)
                if "al" not in state:
                    state["al"] = [None] * history_size
                al = state["al"]
                q = -flat_grad
                for i in range(len(old_dirs) - 1, -1, -1):  # two-loop recursion
                    al[i] = old_stps[i].dot(q) * ro[i]
                    q = q - al[i] * old_dirs[i]
                d = r = q * h_diag
                for i in range(len(old_dirs)):
                    be_i = old_dirs[i].dot(r) * ro[i]
                    r += (al[i] - be_i) * old_stps[i]
            prev_flat_grad = flat_grad.copy()
            prev_loss = loss
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / np.abs(flat_grad).sum()) * lr
            else:
                t = lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:
                break
            ls_func_evals = 0
            self._add_grad(t, d)
            if n_iter != max_iter:
                loss = float(self._evaluate(closure))
                flat_grad = self._gather_flat_grad()
                ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if n_iter == max_iter or current_evals >= max_eval:
                break
            if np.abs(flat_grad).max() <= tolerance_grad:
                break
            if np.abs(d * t).max() <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                break
        state.update({"d": d, "t": t, "old_dirs": old_dirs, "old_stps": old_stps, "ro": ro, "H_diag": h_diag,
                      "prev_flat_grad": prev_flat_grad, "prev_loss": prev_loss})
        return orig_loss
