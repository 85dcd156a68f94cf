"""Grad mode: whether operations record a graph. A per-thread flag (``_state.enabled``) that
every op reads."""
from __future__ import annotations

import functools
from typing import Any, Callable

import threading


class _GradState(threading.local):
    """Per-thread grad mode, as in PyTorch; read on every op."""

    enabled = True


_state = _GradState()


def is_grad_enabled() -> bool:
    """Return True when operations record the autograd graph."""
    return _state.enabled


class _GradModeContext:
    """Base for context managers / decorators that set grad mode and restore it on exit."""

    _target: bool

    def __enter__(self) -> None:
        self._prev = _state.enabled
        _state.enabled = self._target

    def __exit__(self, *exc_info: Any) -> None:
        _state.enabled = self._prev

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.__class__():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradModeContext):
    """Disable graph recording inside the block (also usable as a decorator)."""

    _target = False


class enable_grad(_GradModeContext):
    """Enable graph recording inside the block (also usable as a decorator)."""

    _target = True


class inference_mode(_GradModeContext):
    """Disable graph recording (gradscope has no separate inference tensors);
    ``inference_mode(False)`` leaves grad mode unchanged."""

    def __init__(self, mode: bool = True) -> None:
        self._mode = bool(mode)

    def __enter__(self) -> None:
        self._prev = _state.enabled
        if self._mode:
            _state.enabled = False

    def __call__(self, fn: Callable) -> Callable:
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with inference_mode(mode):
                return fn(*args, **kwargs)

        return wrapper


class set_grad_enabled(_GradModeContext):
    """Set grad mode to ``mode``; works as a function call, context manager or decorator."""

    def __init__(self, mode: bool) -> None:
        self._prev = _state.enabled
        self._target = bool(mode)
        _state.enabled = self._target

    def __enter__(self) -> None:
        pass

    def __call__(self, fn: Callable) -> Callable:
        _state.enabled = self._prev
        mode = self._target

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapper
