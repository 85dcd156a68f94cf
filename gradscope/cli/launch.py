"""``gradscope run --nproc N``: the script on N local processes, started by torch.distributed's launcher.

Two sides:

* the **launcher** (:func:`launch`) starts ``python -m gradscope run OPTIONS SCRIPT ARGS`` N times
  through ``torch.distributed.launcher.elastic_launch`` (the agent behind ``torchrun``: the same
  ``RANK``/``WORLD_SIZE``/``MASTER_*`` environment, a fresh localhost rendezvous port per run, no
  restarts), passes every rank's output through with a ``[rankR]`` prefix, and prints rank 0's
  report once all ranks have finished;
* each **worker** (:class:`Worker`, from the environment ``torchrun`` sets) runs the script with a
  :class:`~gradscope.monitor.distributed.DistributedReducer`. Under ``torchrun`` started by the
  user, rank 0 prints the report itself. Under :func:`launch`, rank 0 writes its report to a
  file the launcher reads, and ranks that ended cleanly (findings included) exit 0, so the agent
  never stops a rank that is still writing; a rank whose script raised exits 3, and the agent
  then stops the others.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from gradscope.cli.app import App, ExitCode

__all__ = ["FOLLOWED_ENV", "RESULT_ENV", "Worker", "launch"]

#: The environment variable through which :func:`launch` tells rank 0 where to write its result.
RESULT_ENV = "GRADSCOPE_RUN_RESULT"

#: Set in the environment of a process that ``gradscope run`` followed: the script started it to
#: run itself for another rank (see :class:`gradscope.scripts.ProcessFollower`).
FOLLOWED_ENV = "GRADSCOPE_RUN_FOLLOWED"


@dataclass(frozen=True)
class Worker:
    """This process's place in a distributed run (from the environment ``torchrun`` sets).

    Attributes:
        rank: the global rank (0 outside a launcher).
        world_size: the number of processes (1 outside a launcher).
        result_path: where rank 0 writes its result for :func:`launch` (None under a plain ``torchrun``).
        followed: the script started this process for another rank and ``gradscope run`` followed it:
            it watches and combines its steps with the other ranks, and the process that started it
            prints the report.
    """

    rank: int = 0
    world_size: int = 1
    result_path: str | None = None
    followed: bool = False

    @classmethod
    def from_environment(cls) -> "Worker":
        """The worker described by ``RANK`` and ``WORLD_SIZE`` (one process when they are unset)."""
        if os.environ.get(FOLLOWED_ENV):
            return cls(rank=int(os.environ.get("LOCAL_RANK", "1") or 1), followed=True)
        rank, world = os.environ.get("RANK", ""), os.environ.get("WORLD_SIZE", "")
        if not (rank.isdigit() and world.isdigit()) or int(world) < 2:
            return cls()
        return cls(int(rank), int(world), os.environ.get(RESULT_ENV) or None)

    @property
    def distributed(self) -> bool:
        """True when several processes run the script."""
        return self.world_size > 1

    @property
    def prints_report(self) -> bool:
        """True for the process that prints the report and writes the log (rank 0 without :func:`launch`)."""
        return self.rank == 0 and self.result_path is None and not self.followed

    @property
    def writes_log(self) -> bool:
        """True for the process that appends to ``--log`` (rank 0)."""
        return self.rank == 0 and not self.followed

    def reducer(self, peers_followed: Any = None) -> Any:
        """The step reducer for this process. One process that may start its own ranks joins them
        once its process group is up, if ``peers_followed()`` says every one is followed."""
        from gradscope.monitor.distributed import DistributedReducer, JoiningReducer

        if self.followed:
            return JoiningReducer(lambda: True)
        if not self.distributed:
            return JoiningReducer(peers_followed) if peers_followed is not None else None
        return DistributedReducer(self.rank, self.world_size)

    def finish(self, report: Any, code: int, lines: list[str]) -> int:
        """The process's exit code; under :func:`launch`, rank 0 first writes its result.

        ``lines`` are what the process would print after the report (``interrupted after ...``).
        """
        if self.result_path is None:
            return code
        if self.rank == 0:
            temporary = self.result_path + ".tmp"
            with open(temporary, "wb") as file:
                pickle.dump({"report": report, "code": int(code), "lines": lines}, file)
            os.replace(temporary, self.result_path)
        return ExitCode.MODEL_ERROR if code == ExitCode.MODEL_ERROR else ExitCode.OK


def worker_arguments(options: Any, output_format: str, log_path: str | None, debug: bool,
                     script: str, args: list[str], module: bool = False, tensorboard: str | None = None,
                     debugger: list[str] | None = None, conditions: tuple[str, ...] = ()) -> list[str]:
    """``gradscope run`` arguments that make each worker run as this command was asked to
    (``debugger``: the ``--debug-on-failure`` commands, given to every rank; the rank where the
    value started runs them)."""
    arguments = ["-m", "gradscope"]
    if debug:
        arguments.append("--debug")
    arguments.append("run")
    if options.nan:
        arguments.append("--nan")
    if options.inf:
        arguments.append("--inf")
    if options.clip is not None:
        arguments += ["--clip", repr(options.clip), "--clip-mode", options.clip_mode]
    if options.on_nonfinite != "stop":
        arguments += ["--on-nonfinite", options.on_nonfinite, "--max-skips", str(options.max_skips)]
    if options.health != "warn":
        arguments += ["--health", options.health]
    arguments += ["--max-norm", repr(options.thresholds.max_norm)]
    if options.thresholds.min_norm is not None:
        arguments += ["--min-norm", repr(options.thresholds.min_norm)]
    for waiver in options.waivers:
        arguments += ["--ignore", str(waiver)]
    for pattern in options.allow_inf:
        arguments += ["--allow-inf", pattern]
    if options.on_spike != "warn":
        arguments += ["--on-spike", options.on_spike]
    if debugger is not None:
        arguments += ["--debug-on-failure", "--commands", "; ".join(debugger)]
        for condition in conditions:
            arguments += ["--break", condition]
    if log_path is not None:
        arguments += ["--log", log_path]
    if tensorboard is not None:
        arguments += ["--tensorboard", str(tensorboard)]
    arguments += ["--format", output_format, *(["-m"] if module else []), script, *args]
    return arguments


def launch(app: App, nproc: int, script: str, args: list[str], options: Any, output_format: str,
           log_path: str | None, debug: bool, module: bool = False, tensorboard: Any = None,
           debugger: list[str] | None = None, conditions: tuple[str, ...] = ()) -> int:
    """Run ``script`` (a module with ``module``) on ``nproc`` local processes and print rank 0's
    report; returns the exit code."""
    from gradscope.scripts import check_module, check_script

    (check_module if module else check_script)(script)
    from gradscope.engines import EngineError, rank_launcher

    try:
        launch_local = rank_launcher()
    except EngineError:
        app.abort("--nproc needs PyTorch with torch.distributed (pip install 'gradscope[torch]')", ExitCode.USAGE)
    with tempfile.TemporaryDirectory(prefix="gradscope-run-") as directory:
        result_path = os.path.join(directory, "result.pickle")
        arguments = worker_arguments(options, output_format, log_path, debug, script, args, module, tensorboard,
                                     debugger, conditions)
        saved = os.environ.get(RESULT_ENV)
        os.environ[RESULT_ENV] = result_path
        try:
            outcome = launch_local(nproc, arguments, os.path.join(directory, "logs"), verbose=debug)
        except KeyboardInterrupt:  # before the agent took over the signals
            outcome = None
        finally:
            if saved is None:
                os.environ.pop(RESULT_ENV, None)
            else:
                os.environ[RESULT_ENV] = saved
        sys.stdout.flush()
        sys.stderr.flush()
        result = _read_result(result_path)
    return _conclude(app, result, output_format, outcome)


def _how_it_ended(exitcode: int) -> str:
    if exitcode == ExitCode.MODEL_ERROR:
        return "raised (its traceback is above)"
    if exitcode < 0:
        return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def _read_result(path: str) -> dict | None:
    try:
        with open(path, "rb") as file:
            return pickle.load(file)
    except (OSError, EOFError, pickle.UnpicklingError):
        return None


def _conclude(app: App, result: dict | None, output_format: str, outcome: Any) -> int:
    from gradscope.cli.run import print_report

    interrupted = signal.SIGINT if outcome is None else outcome.signal
    failure, failed_code = None, ExitCode.MODEL_ERROR
    if outcome is not None and outcome.failed_rank is not None:
        failure = f"rank {outcome.failed_rank} {_how_it_ended(outcome.exitcode)}; the other ranks were stopped"
        if outcome.exitcode == ExitCode.USAGE:
            failed_code = ExitCode.USAGE
    if result is not None:
        print_report(app, result["report"], output_format)
        for line in result["lines"]:
            app.err.print(line, style="bold red" if line.startswith("error:") else "yellow", markup=False)
    if failure is not None:
        app.err.print(f"error: {failure}", style="bold red", markup=False)
        return failed_code
    if interrupted is not None:
        if result is None:
            app.err.print("interrupted", style="yellow")
        return ExitCode.TERMINATED if interrupted == signal.SIGTERM else ExitCode.INTERRUPTED
    if result is None:
        app.err.print("error: rank 0 ended without a report", style="bold red")
        return ExitCode.INTERNAL_ERROR
    return result["code"]
