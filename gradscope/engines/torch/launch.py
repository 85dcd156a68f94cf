"""``gradscope run --nproc N``: N local processes started by torch's elastic agent (what
``torchrun`` runs), with every rank's output passed through behind a ``[rankR]`` prefix."""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from dataclasses import dataclass
from typing import Iterator, Sequence


@dataclass(frozen=True)
class LaunchOutcome:
    """How :func:`launch_local` ended.

    Attributes:
        failed_rank: the first rank that exited with a non-zero code (None when none did).
        exitcode: that rank's exit code (negative: killed by that signal).
        signal: the signal that stopped the launcher (SIGINT, SIGTERM), or None.
    """

    failed_rank: int | None = None
    exitcode: int | None = None
    signal: int | None = None


def free_port() -> int:
    """A localhost TCP port nobody listens on now (a fresh rendezvous port for each run: reusing
    the previous run's port can abort the next one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def _agent_logging(verbose: bool) -> Iterator[None]:
    """The agent's own log lines (rendezvous, worker start, shutdown) only when ``verbose``."""
    logger = logging.getLogger("torch.distributed.elastic")
    previous = logger.level
    if not verbose:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(previous)


def launch_local(nproc: int, arguments: Sequence[str], log_dir: str, verbose: bool = False) -> LaunchOutcome:
    """Run ``python ARGUMENTS`` on ``nproc`` local processes through torch's elastic agent.

    The environment is the one ``torchrun --nproc-per-node N`` sets (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``, ...), on a c10d rendezvous at a fresh localhost port, with
    no restarts. Each rank's stdout and stderr pass through to this process's, every line behind
    ``[rankR] ``. When a rank fails, the agent stops the others; a SIGINT/SIGTERM to this process
    is passed on to every rank, which get the agent's grace period to finish.
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"gradscope-{os.getpid()}",
        rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", rdzv_configs={"timeout": 60},
        max_restarts=0, monitor_interval=0.1, log_line_prefix_template="[rank${rank}] ",
        logs_specs=DefaultLogsSpecs(log_dir=log_dir, redirects=Std.ALL, tee=Std.ALL))
    try:
        with _agent_logging(verbose):
            elastic_launch(config, entrypoint=sys.executable)(*arguments)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        return LaunchOutcome(failed_rank=rank, exitcode=failure.exitcode)
    except SignalException as exc:
        return LaunchOutcome(signal=int(exc.sigval))
    return LaunchOutcome()
