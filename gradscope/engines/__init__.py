"""Engine adapters: the one place where gradscope's engine and PyTorch differ, and the only way in.

This module is the registry, and the rest of gradscope uses only the names it exports (no code
outside ``gradscope/engines`` imports one of its submodules; ``tests/test_layering.py`` checks that):

* :func:`get_engine` returns the adapter for ``"gradscope"`` or ``"torch"`` (torch is imported
  then, and only then);
* :func:`engine_of` tells which engine an object (module, tensor, optimizer) belongs to without
  importing torch: an object can only be a torch object if the program imported torch already;
* :func:`select_engine` applies ``--engine`` to a model file's model and explains a mismatch;
* :func:`engines_for_code` tells which engines a model file's code uses, before it runs;
* :func:`attach_engines` attaches to gradscope's engine at once and to torch's once a script
  imports torch;
* :func:`rank_launcher` is the launcher that starts a script's ranks (``run --nproc``).

The layout: ``spec`` holds the interface (:class:`~gradscope.engines.spec.Engine`), ``kernels``
the numpy array kernels, ``observers`` what an engine hands back when asked to observe (norm
taps, op traces, op recorders), ``activation`` the import watcher, ``native`` gradscope's adapter
and the package ``torch`` PyTorch's.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import types
from typing import Any, Callable, Iterator

from gradscope.engines.activation import when_imported
from gradscope.engines.kernels import (BATCH_LIMIT, nonfinite_count, nonfinite_kind_of_array, segment_starts,
                                       squared_norm, squared_norms_of_arrays, total_norm)
from gradscope.engines.observers import GradientNormTaps, OpTrace
from gradscope.engines.spec import ACCUMULATE_NODE, HOOK_NODE, Engine
from gradscope.errors import GradscopeError

__all__ = ["ACCUMULATE_NODE", "BATCH_LIMIT", "ENGINE_NAMES", "Engine", "EngineError", "GradientNormTaps", "HOOK_NODE",
           "OpTrace", "attach_engines", "engine_of", "engines_for_code", "get_engine", "nonfinite_count",
           "nonfinite_kind_of_array", "rank_launcher", "segment_starts", "select_engine", "squared_norm",
           "squared_norms_of_arrays", "total_norm"]

#: The values ``--engine`` accepts.
ENGINE_NAMES = ("gradscope", "torch")
#: The engines other than gradscope's, each with the top-level module of the library it runs: code
#: that imports that module may use the engine.
_LIBRARIES = {"torch": "torch"}

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


def engines_for_code(code: types.CodeType, requested: str | None = None) -> list[Engine]:
    """The engines that compiled model-file ``code`` may use, before it runs: gradscope's always,
    and each other engine whose library the code imports anywhere (``import torch``, ``from
    torch import nn``, inside functions too) or that ``requested`` names.

    Raises:
        EngineError: such an engine is not installed.
    """
    names = _imported_names(code)
    return [get_engine("gradscope")] + [get_engine(name) for name, library in _LIBRARIES.items()
                                        if name == requested or library in names]


def _imported_names(code: types.CodeType) -> set[str]:
    """The top-level package of every dotted name the code and its nested code objects use (an
    import of ``torch.nn`` names ``torch``)."""
    names = {name.partition(".")[0] for name in code.co_names}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _imported_names(const)
    return names


@contextlib.contextmanager
def attach_engines(attach: Callable[[Engine], None]) -> Iterator[None]:
    """Call ``attach(engine)`` for gradscope's engine now, and for each other engine once the code
    run inside the block imports its library (at once when it is imported already): a script
    that never imports torch never pays for torch."""
    attach(get_engine("gradscope"))
    with contextlib.ExitStack() as watchers:
        for name, library in _LIBRARIES.items():
            watchers.enter_context(when_imported(library, functools.partial(_attach_named, attach, name)))
        yield


def _attach_named(attach: Callable[[Engine], None], name: str) -> None:
    attach(get_engine(name))


def rank_launcher() -> Callable[..., Any]:
    """The launcher of ``gradscope run --nproc``: ``launch(nproc, arguments, log_dir, verbose=False)``
    runs ``python ARGUMENTS`` on ``nproc`` local processes through torch's elastic agent and
    returns how that ended (see :func:`gradscope.engines.torch.launch.launch_local`).

    Raises:
        EngineError: PyTorch is not installed.
    """
    try:
        from gradscope.engines.torch.launch import launch_local
    except ImportError as exc:
        raise EngineError("starting ranks needs PyTorch with torch.distributed, which is not installed "
                          "(pip install 'gradscope[torch]')") from exc
    return launch_local


def _is_optimizer_of(value: Any, name: str) -> bool:
    root = "gradscope.optim" if name == "gradscope" else "torch.optim"
    return any(cls.__module__.startswith(root) and cls.__name__ == "Optimizer" for cls in type(value).__mro__)


def _qualified(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"
