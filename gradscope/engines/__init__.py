"""Engine adapters: the one place where gradscope's engine and PyTorch differ.

* :func:`get_engine` returns the adapter for ``"gradscope"`` or ``"torch"`` (torch is imported
  then, and only then);
* :func:`engine_of` tells which engine an object (module, tensor, optimizer) belongs to without
  importing torch: an object can only be a torch object if the program imported torch already;
* :func:`select_engine` applies ``--engine`` to a model file's model and explains a mismatch.

See :class:`gradscope.engines.spec.Engine` for what an adapter provides.
"""
from __future__ import annotations

import sys
from typing import Any

from gradscope.engines.kernels import (BATCH_LIMIT, exact_squares, nonfinite_count, nonfinite_kind_of_array,
                                       segment_starts, squared_norm, squared_norms_of_arrays, total_norm)
from gradscope.engines.observers import GradientNormTaps, OpTrace
from gradscope.engines.spec import ACCUMULATE_NODE, HOOK_NODE, Engine
from gradscope.errors import GradscopeError

__all__ = ["ACCUMULATE_NODE", "BATCH_LIMIT", "ENGINE_NAMES", "Engine", "EngineError", "GradientNormTaps", "HOOK_NODE",
           "OpTrace", "engine_of", "exact_squares", "get_engine", "nonfinite_count", "nonfinite_kind_of_array",
           "segment_starts", "select_engine", "squared_norm", "squared_norms_of_arrays", "total_norm"]

#: The values ``--engine`` accepts.
ENGINE_NAMES = ("gradscope", "torch")

_engines: dict[str, Engine] = {}


class EngineError(GradscopeError):
    """An engine is unknown or not installed, or a model does not belong to the requested engine."""


def get_engine(name: str) -> Engine:
    """The adapter for ``name`` (``"gradscope"`` or ``"torch"``), created once.

    Raises:
        EngineError: unknown name, or torch is not installed.
    """
    engine = _engines.get(name)
    if engine is not None:
        return engine
    if name == "gradscope":
        from gradscope.engines.native import NativeEngine

        engine = NativeEngine()
    elif name == "torch":
        try:
            from gradscope.engines.torch import TorchEngine
        except ImportError as exc:
            raise EngineError("the torch engine needs PyTorch, which is not installed "
                              "(pip install 'gradscope[torch]')") from exc
        engine = TorchEngine()
    else:
        raise EngineError(f"unknown engine {name!r}; expected one of {', '.join(ENGINE_NAMES)}")
    _engines[name] = engine
    return engine


def engine_of(value: Any) -> Engine | None:
    """The engine whose module, tensor or optimizer ``value`` is, or None if neither's.

    gradscope's classes are checked first; torch is consulted only when it is already imported.
    """
    native = get_engine("gradscope")
    if native.is_module(value) or native.is_tensor(value) or _is_optimizer_of(value, "gradscope"):
        return native
    if "torch" in sys.modules:
        torch_engine = get_engine("torch")
        if torch_engine.is_module(value) or torch_engine.is_tensor(value) or _is_optimizer_of(value, "torch"):
            return torch_engine
    return None


def select_engine(model: Any, requested: str | None = None) -> Engine | None:
    """The engine to run ``model`` with: the model's own, checked against ``requested``.

    Returns None when ``model`` is a module of neither engine (the caller explains that).

    Raises:
        EngineError: ``requested`` names another engine than the model's.
    """
    engine = engine_of(model)
    if engine is None or requested is None or requested == engine.name:
        return engine
    raise EngineError(f"--engine {requested} was given, but the model is a {engine.display} module "
                      f"({_qualified(model)}); use --engine {engine.name} or leave --engine out")


def _is_optimizer_of(value: Any, name: str) -> bool:
    root = "gradscope.optim" if name == "gradscope" else "torch.optim"
    return any(cls.__module__.startswith(root) and cls.__name__ == "Optimizer" for cls in type(value).__mro__)


def _qualified(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"
