"""``autograd.Variable``: the pre-0.4 wrapper, kept because classic example code still uses it.
Since PyTorch 0.4 a Variable is just a Tensor; so it is here."""
from __future__ import annotations

from typing import Any

from gradscope.autograd.tensor import Tensor


class _VariableMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Tensor)


class Variable(metaclass=_VariableMeta):
    """``Variable(t, requires_grad=False)``: a leaf sharing ``t``'s data (``t`` is unchanged)."""

    def __new__(cls, data: Any = None, requires_grad: bool = False, volatile: bool = False) -> Tensor:  # type: ignore[misc]
        if data is None:
            data = Tensor()
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        if not requires_grad:
            return data
        leaf = data.detach()
        leaf.requires_grad_(True)
        return leaf


class _ExecutionEngine:
    """``Variable._execution_engine``: the engine object PyTorch exposes to Python. Code that
    schedules work for the end of the current backward pass calls its ``queue_callback``."""

    @staticmethod
    def queue_callback(callback: Any) -> None:
        """Run ``callback()`` once the backward pass in progress has run all its nodes."""
        from gradscope.autograd.engine import queue_callback

        queue_callback(callback)


Variable._execution_engine = _ExecutionEngine()
