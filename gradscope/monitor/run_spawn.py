"""Following the processes a script starts with ``torch.multiprocessing.spawn`` (``gradscope run``).

The script's function ``fn`` is handed to the processes wrapped in :class:`FollowedRank`, a
picklable callable: in each new process it attaches a :class:`~gradscope.monitor.run.RunMonitor`
with the same options before calling ``fn(index, *args)``, and its reducer joins the other
processes once the function's default process group is up (every process runs the same wrapper,
so every rank is watched and each step is combined over all of them, as under ``--nproc``). The
process that ends up as rank 0 (the first process without a group) writes its report to a file
that the script's own process reads when it reports.

A stop at a non-finite value ends the function early in every rank at the same step; the wrapper
then returns normally, so that ``spawn`` does not raise in the script's process.
"""
from __future__ import annotations

import os
import pickle
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

from gradscope.monitor.records import RunReport

__all__ = ["FollowedRank", "SpawnedRanks", "read_report"]


@dataclass(frozen=True)
class FollowedRank:
    """``fn(index, *args)`` run under a :class:`RunMonitor` with ``options``; the rank-0 process
    writes its :class:`RunReport` to ``report_path``.

    Attributes:
        fn: the script's function.
        options: the ``RunOptions`` of the ``gradscope run`` command.
        report_path: where rank 0 writes its report.
    """

    fn: Callable[..., Any]
    options: Any
    report_path: str

    def __call__(self, index: int, *args: Any) -> Any:
        from gradscope.engines import attach_engines
        from gradscope.monitor.distributed import JoiningReducer
        from gradscope.monitor.run import ATTACHED, RunMonitor, StopRun

        for inherited in list(ATTACHED):  # forked from the script's process: its monitor came along
            inherited.close()
        reducer = JoiningReducer(lambda: True)
        result = None
        try:
            with RunMonitor(self.options, main_globals=lambda: vars(sys.modules["__main__"]),
                            reducer=reducer) as monitor, attach_engines(monitor.attach):
                try:
                    result = self.fn(index, *args)
                    monitor.finish()
                except StopRun:
                    pass
        finally:
            reducer.release()
        rank = reducer.rank if reducer.rank is not None else index
        if rank == 0:
            temporary = f"{self.report_path}.{os.getpid()}.tmp"
            with open(temporary, "wb") as file:
                pickle.dump(monitor.report(""), file)
            os.replace(temporary, self.report_path)
        return result


class SpawnedRanks:
    """The groups of processes a script started (``torch.multiprocessing`` ``start_processes``),
    each one's function handed on as a :class:`FollowedRank`, and the reports their rank 0 left.

    Args:
        options: the ``RunOptions`` each followed rank runs under.
    """

    def __init__(self, options: Any) -> None:
        self.options = options
        self.started: list[tuple[str, int, str]] = []  # (function name, process count, report path)
        self._directory: str | None = None
        self._reports: list[RunReport | None] = []

    def follow(self, fn: Callable[..., Any], count: int) -> FollowedRank:
        """The function to start in ``count`` processes instead of ``fn``."""
        if self._directory is None:
            self._directory = tempfile.mkdtemp(prefix="gradscope-spawn-")
        path = os.path.join(self._directory, f"report{len(self.started)}.pickle")
        self.started.append((getattr(fn, "__qualname__", None) or repr(fn), count, path))
        return FollowedRank(fn, self.options, path)

    def reports(self) -> list[tuple[str, int, RunReport | None]]:
        """``(function name, process count, rank 0's report or None)`` of each group (the reports are
        read once, then their folder is removed)."""
        if self._directory is not None:
            self._reports = [read_report(path) for _, _, path in self.started]
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
        return [(name, count, report) for (name, count, _), report in zip(self.started, self._reports)]


def read_report(path: str) -> RunReport | None:
    """The report a followed rank 0 wrote, or None when there is none."""
    try:
        with open(path, "rb") as file:
            return pickle.load(file)
    except (OSError, EOFError, pickle.UnpicklingError):
        return None
