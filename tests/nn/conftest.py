"""Fixtures for the nn tests: differential runs against torch and global-hook hygiene.

A differential test writes one scenario ``run(T, log)`` that builds the same thing with the
backend module ``T`` (``gradscope`` or ``torch``) and records events with ``log(tag, *values)``.
The ``compare`` fixture runs it on both backends and asserts the two logs are equal.
``log`` snapshots tensors at the moment they are logged (as float arrays, compared with a
tolerance), so later in-place changes such as ``.grad`` accumulation cannot alter the record.
"""
from __future__ import annotations

import builtins
import sys
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs
from gradscope.nn.modules import module as gs_module_file

_GLOBAL_HOOK_DICTS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_forward_hooks_with_kwargs",
                      "_global_forward_hooks_always_called", "_global_backward_pre_hooks",
                      "_global_backward_hooks", "_global_non_full_backward_hooks", "_global_module_registration_hooks",
                      "_global_parameter_registration_hooks", "_global_buffer_registration_hooks")


class Arr:
    """A snapshot of a tensor's values; equal to another within float32 tolerance."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Arr):
            return NotImplemented
        return (self.values.shape == other.values.shape and self.values.dtype.kind == other.values.dtype.kind
                and np.allclose(self.values, other.values, rtol=1e-5, atol=1e-6, equal_nan=True))

    def __repr__(self) -> str:
        return f"Arr({self.values.tolist()!r})"


def is_tensor(value: Any) -> bool:
    """Duck-typed tensor check that works for both backends."""
    return hasattr(value, "detach") and hasattr(value, "numpy") and hasattr(value, "shape")


def snapshot(value: Any) -> Any:
    """Loggable copy of ``value``: tensors become ``Arr``, containers are copied recursively."""
    if is_tensor(value):
        array = np.array(value.detach().numpy(), copy=True)
        return Arr(array.astype(np.float64) if array.dtype.kind == "f" else array)
    if isinstance(value, (tuple, list)):
        return [snapshot(v) for v in value]
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    return value


def builtin_exception_name(error: BaseException) -> str:
    """The name of the nearest builtin class of ``error`` (library subclasses compare equal)."""
    for cls in type(error).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return type(error).__name__


class Log(list):
    """The event list of one scenario run."""

    def __call__(self, tag: str, *values: Any) -> None:
        self.append([tag, *(snapshot(v) for v in values)])

    def hook(self, tag: str, result: Any = None) -> Callable:
        """A hook that only records ``tag`` and returns ``result``."""
        def record(*_args: Any) -> Any:
            self.append([tag])
            return result
        return record

    def raises(self, tag: str, fn: Callable[[], Any], phrase: str) -> None:
        """Call ``fn``; record the builtin exception type and whether ``phrase`` is in its message."""
        try:
            fn()
        except Exception as error:  # noqa: BLE001 - the type is what gets compared
            self.append([tag, builtin_exception_name(error), phrase.lower() in str(error).lower()])
            return
        self.append([tag, "no exception"])

    def warnings(self, tag: str, caught: list, *phrases: str) -> None:
        """Record, per caught warning that contains one of ``phrases``, its category and phrase."""
        for w in caught:
            text = str(w.message).lower()
            for phrase in phrases:
                if phrase.lower() in text:
                    self.append([tag, w.category.__name__, phrase])


def _clear_global_hooks(module_file: Any) -> None:
    for name in _GLOBAL_HOOK_DICTS:
        hooks = getattr(module_file, name, None)
        if hooks is not None:
            hooks.clear()


@pytest.fixture(autouse=True)
def no_leaking_global_hooks():
    """Clear gradscope's and torch's global module hooks after every test, even a failed one."""
    yield
    _clear_global_hooks(gs_module_file)
    if "torch" in sys.modules:
        _clear_global_hooks(sys.modules["torch"].nn.modules.module)


@pytest.fixture
def compare() -> Callable:
    """``compare(run)``: run the scenario on gradscope, then torch, and assert equal logs.

    Returns gradscope's log. Skips the torch half (after gradscope ran) when torch is missing.
    """
    def run_both(scenario: Callable[[Any, Log], Any]) -> Log:
        ours = Log()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            scenario(gs, ours)
        torch = pytest.importorskip("torch")
        theirs = Log()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            scenario(torch, theirs)
        assert ours == theirs
        return ours

    return run_both


@pytest.fixture
def log() -> Log:
    """A fresh event log, for scenarios that only run on gradscope."""
    return Log()
