"""Combining a ``gradscope run`` step across the ranks of a torch.distributed job.

:class:`RunMonitor` hands the numbers of each backward pass to a reducer at the step boundary.
:class:`StepReducer` (one process) returns them unchanged. :class:`DistributedReducer` (under
``torchrun``, once the script has initialised its default process group) combines them with one
``all_reduce`` of a fixed-size float64 vector on that group, laid out as

* one entry per parameter: sharded parameters (FSDP2 ``DTensor`` shards) contribute their
  shard's squared gradient norm, so the sum is the global squared norm; replicated parameters
  (DDP: gradients already averaged, the same on every rank) are taken locally and contribute
  0 when finite, their own value when not, so that every rank sees the same non-finite entries;
* per rank (each rank fills its own slots, the others hold 0): the loss, the squared norm of
  the rank's own gradients (its shards under FSDP), the squared norm of its model outputs, its
  first non-finite value (phase, index, kind) before any combination, and a pending signal.

Everything a rank decides afterwards (stop or go on, which rank is the origin) is computed from
that reduced vector, which is identical on every rank, so every rank decides the same way at the
same step: no rank is left waiting in a collective. A Ctrl-C or SIGTERM is deferred to the next
step boundary for the same reason (with a short watchdog for a script that is not stepping).
Only when a watched non-finite value stops the job (or, with ``--on-nonfinite skip``, has a step
skipped) does a second collective run: each rank localises its own first non-finite value
(re-running its model locally when that starts no collective) and the ranks' findings are
gathered to pick the origin (``origin_across_ranks``).
"""
from __future__ import annotations

import _thread
import contextlib
import dataclasses
import math
import signal
import threading
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from gradscope.engines import Engine
from gradscope.monitor.records import NonFiniteOrigin, RankFigures
from gradscope.monitor.stats import module_of

if TYPE_CHECKING:
    from gradscope.monitor.run import RunMonitor

__all__ = ["DistributedReducer", "JoiningReducer", "StepReducer", "rank_figures"]

#: Phases of a rank's first non-finite value, in the order they happen within a step.
PHASE_NONE, PHASE_OUTPUT, PHASE_LOSS, PHASE_GRADIENT = 0, 1, 2, 3
_KINDS = {0: None, 1: "nan", 2: "inf"}
_RANK_SLOTS = 7  # loss, gradient square, output square, phase, index, kind, signal

#: Seconds a deferred Ctrl-C waits for the next step boundary before it interrupts the script anyway.
SIGNAL_GRACE_SECONDS = 3.0


class StepReducer:
    """One process: the local numbers are the global ones, and the origin is found locally."""

    rank: int | None = None
    world_size = 1

    def combine(self, engine: Engine, parameters: Sequence[tuple[str, Any]], stats: Any) -> Any:
        """The step's numbers combined over all ranks (a
        :class:`~gradscope.monitor.run_step.BackwardStats` in, the same kind out)."""
        return stats

    def combine_squares(self, engine: Engine, parameters: Sequence[tuple[str, Any]],
                        squares: list[float | None]) -> list[float | None]:
        """Per-parameter squared norms combined over all ranks (for ``--clip``'s after-norms)."""
        return squares

    def origin_across_ranks(self, monitor: "RunMonitor", engine: Engine, loss: Any, stats: Any,
                            step: int) -> NonFiniteOrigin:
        """Where the first non-finite value of this backward pass started: which processes re-run
        their kept model calls to localise it, and which of their findings is the origin (one
        process: this one re-runs, and its finding is the origin; see :mod:`gradscope.monitor.localize`)."""
        from gradscope.monitor.run_localize import localize_from_kept_calls

        return localize_from_kept_calls(monitor, engine, loss, stats, step)

    def parameter_origin(self, engine: Engine, parameters: list[tuple[str, Any]], optimizer: Any, step: int,
                         options: Any, gradient_norms: dict[str, float | None] | None = None
                         ) -> NonFiniteOrigin | None:
        """An ``update`` origin if a watched parameter is non-finite, else None (the end-of-run check)."""
        from gradscope.monitor.run_localize import parameter_origin

        return parameter_origin(engine, parameters, optimizer, step, options, gradient_norms)

    @contextlib.contextmanager
    def deferred_signals(self) -> Iterator[None]:
        """Ctrl-C and SIGTERM act at once in one process."""
        yield

    def release(self) -> None:
        """Called once the script has ended, whichever way: nothing to release in one process."""

    def shards_parameters(self, engine: Engine, parameters: Sequence[tuple[str, Any]]) -> bool:
        """True when some of ``parameters`` are sharded over the ranks (FSDP2): the model cannot
        run on one rank alone."""
        return False


def _code(value: float | None) -> int:
    if value is None or math.isfinite(value):
        return 0
    return 1 if math.isnan(value) else 2


def _first_nonfinite(stats: Any) -> tuple[int, int, int]:
    """``(phase, index, kind)`` of the rank's first non-finite number of this backward pass."""
    for index, value in enumerate(stats.output_squares):
        if _code(value):
            return PHASE_OUTPUT, index, _code(value)
    if _code(stats.loss):
        return PHASE_LOSS, 0, _code(stats.loss)
    if not stats.scaled:
        for index, value in enumerate(stats.squares):
            if _code(value):
                return PHASE_GRADIENT, index, _code(value)
    return PHASE_NONE, 0, 0


def _square_sum(values: Sequence[float | None]) -> float:
    return sum(value for value in values if value is not None)


class DistributedReducer(StepReducer):
    """Combine each step over the ranks of the script's default process group (see the module docstring).

    Args:
        rank: this process's rank in the default process group (the one ``torchrun`` gave it, or
            the group's for a process that the script started itself).
        world_size: how many ranks the group has.
    """

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.collectives = 0
        self._sharded: tuple[tuple[int, ...], list[bool]] | None = None
        self._local: Any = None
        self._phases: list[tuple[int, int, int]] = []
        self._signal: int | None = None
        self._watchdog: threading.Timer | None = None
        self._used: Any = None

    # ------------------------------------------------------------------ the step
    def _group(self, engine: Engine) -> Any:
        group = engine.process_group()
        if group is not None:
            self._used = group
        return group

    def release(self) -> None:
        """Tear down the script's process group when the script did not (it was stopped early and
        never reached its own ``destroy_process_group()``)."""
        if self._used is not None:
            self._used.release()
            self._used = None

    def shards_parameters(self, engine: Engine, parameters: Sequence[tuple[str, Any]]) -> bool:
        group = self._group(engine)
        return group is not None and any(self._sharded_mask(group, parameters))

    def _sharded_mask(self, group: Any, parameters: Sequence[tuple[str, Any]]) -> list[bool]:
        key = tuple(id(p) for _, p in parameters)
        if self._sharded is None or self._sharded[0] != key:
            self._sharded = (key, [group.is_sharded(p) for _, p in parameters])
        return self._sharded[1]

    def combine(self, engine: Engine, parameters: Sequence[tuple[str, Any]], stats: Any) -> Any:
        group = self._group(engine)
        self._local = stats
        if group is None:
            self._honour_signal_alone()
            return stats
        sharded = self._sharded_mask(group, parameters)
        entries = [(value or 0.0) if shard or not math.isfinite(value or 0.0) else 0.0
                   for value, shard in zip(stats.squares, sharded)]
        slots = [0.0] * (_RANK_SLOTS * self.world_size)
        phase, index, kind = _first_nonfinite(stats)
        own = [0.0 if stats.loss is None else stats.loss, _square_sum(stats.squares),
               _square_sum(stats.output_squares), float(phase), float(index), float(kind),
               float(self._signal or 0)]
        slots[self.rank * _RANK_SLOTS:(self.rank + 1) * _RANK_SLOTS] = own
        reduced = group.sum(entries + slots)
        self.collectives += 1
        per_rank = [reduced[len(entries) + r * _RANK_SLOTS:len(entries) + (r + 1) * _RANK_SLOTS]
                    for r in range(self.world_size)]
        self._phases = [(int(values[3]), int(values[4]), int(values[5])) for values in per_rank]
        self._raise_collective_signal([int(values[6]) for values in per_rank])
        squares = [None if local is None else (combined if shard or not math.isfinite(combined) else local)
                   for local, combined, shard in zip(stats.squares, reduced[:len(entries)], sharded)]
        losses = [values[0] for values in per_rank]
        loss = None if stats.loss is None else \
            (math.fsum(losses) if all(math.isfinite(v) for v in losses) else sum(losses)) / self.world_size
        ranks = tuple((values[0] if stats.loss is not None else None, values[1]) for values in per_rank)
        return dataclasses.replace(stats, loss=loss, squares=squares,
                                   output_squares=[values[2] for values in per_rank], ranks=ranks)

    def combine_squares(self, engine: Engine, parameters: Sequence[tuple[str, Any]],
                        squares: list[float | None]) -> list[float | None]:
        group = self._group(engine)
        if group is None:
            return squares
        sharded = self._sharded_mask(group, parameters)
        reduced = group.sum([(value or 0.0) if shard else 0.0 for value, shard in zip(squares, sharded)])
        self.collectives += 1
        return [None if value is None else (combined if shard else value)
                for value, combined, shard in zip(squares, reduced, sharded)]

    # ------------------------------------------------------------------ the origin
    def origin_across_ranks(self, monitor: "RunMonitor", engine: Engine, loss: Any, stats: Any,
                            step: int) -> NonFiniteOrigin:
        """Collective (every rank reaches it: the stop was decided from the reduced vector). Each rank
        whose own numbers hold a non-finite value localises it: by re-running its kept calls when
        the model can run on that rank alone (an FSDP2-sharded model is gathered on every rank
        first), else from its numbers. The findings are gathered and the origin is the one of the
        earliest phase, then one that names a node, then the lowest rank. When no rank's own
        numbers hold one, only their sum over the ranks overflowed, and the origin says so.
        Without a process group, the one-process answer."""
        group = self._group(engine)
        local = self._local if self._local is not None else stats
        if group is None:
            return super().origin_across_ranks(monitor, engine, loss, local, step)
        phase = self._phases[self.rank][0] if self._phases else PHASE_NONE
        origin: NonFiniteOrigin | None = None
        sharded = any(self._sharded_mask(group, monitor.parameters))
        # A sharded model is gathered on every rank first (every rank reaches this point: the stop
        # was decided from the reduced vector), so that the rank that localises re-runs it alone.
        if phase != PHASE_NONE and not sharded and not group.rerun_is_local(monitor.models):
            # re-running the model here alone would wait on the other ranks: say what is known
            origin = _origin_without_rerun(monitor, self._phases[self.rank], step)
        elif phase != PHASE_NONE and sharded and monitor.guard.skip_nonfinite:
            # the run goes on after a skipped step: a re-run on one rank would leave FSDP2's state
            # on that rank out of step with the others'
            origin = _origin_without_rerun(monitor, self._phases[self.rank], step, _FSDP2_SKIP)
        else:
            with group.unsharded(monitor.models) if sharded else contextlib.nullcontext():
                if phase != PHASE_NONE:
                    origin = super().origin_across_ranks(monitor, engine, loss, local, step)
        found = group.gather_objects(origin)
        self.collectives += 1
        candidates = [(self._phases[r][0] if self._phases else PHASE_NONE, candidate.node is None, r, candidate)
                      for r, candidate in enumerate(found) if candidate is not None]
        if not candidates:
            return NonFiniteOrigin(step=step, phase="backward", module=None, node=None, source=None,
                                   kind="inf", detail="every rank's own numbers are finite; their sum over the "
                                                      "ranks overflows")
        _, _, rank, chosen = min(candidates, key=lambda item: item[:3])
        return dataclasses.replace(chosen, rank=rank)

    def parameter_origin(self, engine: Engine, parameters: list[tuple[str, Any]], optimizer: Any, step: int,
                         options: Any, gradient_norms: dict[str, float | None] | None = None
                         ) -> NonFiniteOrigin | None:
        """Collective (every rank that reaches the end of the script calls it): each rank checks its
        own parameters (its shards under FSDP2), and the first rank that holds a non-finite one is
        the origin on every rank. Without a process group, the local check."""
        local = super().parameter_origin(engine, parameters, optimizer, step, options, gradient_norms)
        group = self._group(engine)
        if group is None:
            return local
        found = group.gather_objects(local)
        self.collectives += 1
        rank, chosen = next(((rank, origin) for rank, origin in enumerate(found) if origin is not None),
                            (None, None))
        return None if chosen is None else dataclasses.replace(chosen, rank=rank)

    # ------------------------------------------------------------------ signals
    @contextlib.contextmanager
    def deferred_signals(self) -> Iterator[None]:
        """Ctrl-C and SIGTERM wait for the next step boundary, where every rank stops together."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            for signum in previous:
                signal.signal(signum, self._on_signal)
            yield
        finally:
            self._cancel_watchdog()
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    @property
    def signalled(self) -> bool:
        """True once SIGINT or SIGTERM arrived (errors after it are the shutdown, not the script's)."""
        return self._signal is not None

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._signal is not None:  # a second signal, or the watchdog: act now
            self._interrupt(signum)
        self._signal = signum
        self._watchdog = threading.Timer(SIGNAL_GRACE_SECONDS, _thread.interrupt_main, args=(signum,))
        self._watchdog.daemon = True
        self._watchdog.start()

    def _cancel_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def _interrupt(self, signum: int) -> None:
        from gradscope._tool.usercode import interrupt

        self._cancel_watchdog()
        interrupt(signum)

    def _raise_collective_signal(self, signals: list[int]) -> None:
        received = [signum for signum in signals if signum]
        if received:
            self._interrupt(signal.SIGTERM if signal.SIGTERM in received else signal.SIGINT)

    def _honour_signal_alone(self) -> None:
        if self._signal is not None:
            self._interrupt(self._signal)


class JoiningReducer(StepReducer):
    """One process until the script's default process group is up with more than one rank and
    ``joins()`` says every other rank is watched too; from then on a :class:`DistributedReducer`
    on that group (with the rank and size the group has).

    For the processes of a script that starts its own ranks (Lightning's ``devices=N`` re-runs the
    script for each other rank): every one of them must combine each step, or the first
    collective would wait for a rank that never sends it, so a process joins only when all are
    followed.
    """

    def __init__(self, joins: Any) -> None:
        self._joins = joins
        self.inner: DistributedReducer | None = None

    @property
    def rank(self) -> int | None:  # type: ignore[override]
        return None if self.inner is None else self.inner.rank

    @property
    def world_size(self) -> int:  # type: ignore[override]
        return 1 if self.inner is None else self.inner.world_size

    @property
    def signalled(self) -> bool:
        return self.inner is not None and self.inner.signalled

    def _current(self, engine: Engine) -> StepReducer:
        if self.inner is None and self._joins():
            group = engine.process_group()
            if group is not None and group.world_size > 1:
                self.inner = DistributedReducer(group.rank, group.world_size)
        return self.inner or StepReducer()

    def combine(self, engine: Engine, parameters: Sequence[tuple[str, Any]], stats: Any) -> Any:
        return self._current(engine).combine(engine, parameters, stats)

    def combine_squares(self, engine: Engine, parameters: Sequence[tuple[str, Any]],
                        squares: list[float | None]) -> list[float | None]:
        return self._current(engine).combine_squares(engine, parameters, squares)

    def origin_across_ranks(self, monitor: "RunMonitor", engine: Engine, loss: Any, stats: Any,
                            step: int) -> NonFiniteOrigin:
        return self._current(engine).origin_across_ranks(monitor, engine, loss, stats, step)

    def parameter_origin(self, engine: Engine, parameters: list[tuple[str, Any]], optimizer: Any, step: int,
                         options: Any, gradient_norms: dict[str, float | None] | None = None
                         ) -> NonFiniteOrigin | None:
        return self._current(engine).parameter_origin(engine, parameters, optimizer, step, options, gradient_norms)

    def release(self) -> None:
        if self.inner is not None:
            self.inner.release()

    def shards_parameters(self, engine: Engine, parameters: Sequence[tuple[str, Any]]) -> bool:
        return self._current(engine).shards_parameters(engine, parameters)


_FSDP1 = ("the model is wrapped in FSDP (v1) FullyShardedDataParallel, whose forward gathers parameters on every "
          "rank, so it was not re-run on this rank alone to find the node")
_FSDP2_SKIP = ("the model is sharded with FSDP2 and the run goes on after skipping the step, so it was not re-run "
               "on this rank alone to find the node")


def _origin_without_rerun(monitor: "RunMonitor", first: tuple[int, int, int], step: int,
                          why: str = _FSDP1) -> NonFiniteOrigin:
    """This rank's first non-finite number as the origin, for a model that is not re-run on one rank
    (``why``): the parameter whose gradient it was, or the forward phase, without a node."""
    phase, index, code = first
    kind = _KINDS[code] or "nan"
    if phase == PHASE_GRADIENT and index < len(monitor.parameters):
        name = monitor.parameters[index][0]
        return NonFiniteOrigin(step=step, phase="backward", module=module_of(name), node=None, source=None,
                               kind=kind, detail=f"the gradient of {name} was this rank's first {kind}; {why}")
    what = "the loss" if phase == PHASE_LOSS else "a module's output"
    return NonFiniteOrigin(step=step, phase="forward", module=None, node=None, source=None, kind=kind,
                           detail=f"{what} was this rank's first {kind}; {why}")


def rank_figures(pending: Sequence[Any]) -> tuple[RankFigures, ...]:
    """Per-rank loss (summed over the step's backward passes) and gradient norm (of the last one)."""
    last = pending[-1]
    if not getattr(last, "ranks", ()):
        return ()
    figures = []
    for rank, (_, square) in enumerate(last.ranks):
        losses = [stats.ranks[rank][0] for stats in pending
                  if getattr(stats, "ranks", ()) and stats.ranks[rank][0] is not None]
        loss = (math.fsum(losses) if all(math.isfinite(v) for v in losses) else sum(losses)) if losses else None
        figures.append(RankFigures(rank=rank, loss=loss, total_grad_norm=math.sqrt(square)
                                   if not math.isnan(square) else math.nan))
    return tuple(figures)
