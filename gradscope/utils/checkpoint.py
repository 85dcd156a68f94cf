"""``gradscope.utils.checkpoint``: activation checkpointing as model code calls it. gradscope keeps
every activation (it is a debugger: the graph must be there to inspect), so ``checkpoint`` runs the
function once and returns exactly what PyTorch's checkpoint returns: the same values and gradients."""
from __future__ import annotations

from typing import Any, Callable


def checkpoint(function: Callable, *args: Any, use_reentrant: bool | None = None, context_fn: Any = None,
               determinism_check: str = "default", debug: bool = False, preserve_rng_state: bool = True,
               **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``; PyTorch would recompute it during backward instead of storing it."""
    return function(*args, **kwargs)


def checkpoint_sequential(functions: Any, segments: int, input: Any, use_reentrant: bool | None = None,
                          **kwargs: Any) -> Any:
    """Run ``functions`` (a Sequential or a list of modules) one after another on ``input``."""
    layers = list(functions.children()) if hasattr(functions, "children") else list(functions)
    for layer in layers:
        input = layer(input)
    return input
