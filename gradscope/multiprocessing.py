"""``gradscope.multiprocessing``: Python's multiprocessing under PyTorch's module name, so that
Hogwild-style training scripts (``model.share_memory()`` then ``mp.Process(target=train, ...)``)
run. Tensors moved to shared memory with ``share_memory_()`` live in anonymous shared mappings,
which processes created by *fork* (the default start method on Linux) share: their in-place
optimizer updates are seen by every process, as in PyTorch. Processes started with *spawn* get
pickled copies instead."""
from __future__ import annotations

import multiprocessing as _multiprocessing
from multiprocessing import *  # noqa: F401,F403
from typing import Any, Callable

__all__ = [name for name in _multiprocessing.__all__] + ["spawn", "get_sharing_strategy", "set_sharing_strategy",
                                                         "get_all_sharing_strategies"]

_STRATEGY = ["file_descriptor"]


def get_all_sharing_strategies() -> set:
    return {"file_descriptor", "file_system"}


def get_sharing_strategy() -> str:
    return _STRATEGY[0]


def set_sharing_strategy(new_strategy: str) -> None:
    """Recorded for compatibility: shared tensors are anonymous mappings under either strategy."""
    if new_strategy not in get_all_sharing_strategies():
        raise ValueError(f"invalid sharing strategy: {new_strategy}")
    _STRATEGY[0] = new_strategy


class ProcessRaisedException(Exception):
    """A process started by ``spawn`` exited with an error."""


def spawn(fn: Callable, args: tuple = (), nprocs: int = 1, join: bool = True, daemon: bool = False,
          start_method: str = "spawn") -> Any:
    """Run ``fn(i, *args)`` in ``nprocs`` processes; with ``join`` wait and raise if any failed."""
    context = _multiprocessing.get_context(start_method)
    processes = [context.Process(target=fn, args=(index, *args), daemon=daemon) for index in range(nprocs)]
    for process in processes:
        process.start()
    if not join:
        return processes
    for process in processes:
        process.join()
    failed = [(index, p.exitcode) for index, p in enumerate(processes) if p.exitcode != 0]
    if failed:
        index, code = failed[0]
        raise ProcessRaisedException(f"process {index} terminated with exit code {code}")
    return None
