"""Gradient edits at the point where a session is stopped: ``scale``, ``clip``, ``zero`` and ``set``.

An edit replaces the arrays of the stop's editable group (``grad_output`` at a ``pre`` point,
``grad_input`` at ``post`` and ``node`` points) and notes itself on the stop and on the module
call's :class:`~gradscope.debug.record.CallState` (for ``table``). The session's hooks pass the
edited arrays on when the stop resumes.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.debug.errors import DebugCommandError
from gradscope.debug.record import PassRecord, Stop
from gradscope.engines import Engine, total_norm


class GradientEdit:
    """The edits that can be made at ``stop`` (None when the session is not stopped).

    Args:
        stop: the point the session is stopped at.
        record: the pass's record, where the stop's module call notes its edits.
        engine: the engine adapter (to read a tensor given to ``set``).
    """

    def __init__(self, stop: Stop | None, record: PassRecord, engine: Engine) -> None:
        self.stop = stop
        self.record = record
        self.engine = engine

    def scale(self, factor: float) -> None:
        """Multiply the gradient at this point by ``factor``."""
        arrays = self._arrays()
        self._apply([None if a is None else a * factor for a in arrays], f"scale {factor:g}")

    def clip(self, limit: float, mode: str = "norm") -> None:
        """Clip the gradient at this point: its total norm to ``limit`` (``mode="norm"``, the
        rule of ``clip_grad_norm_``: multiply by ``limit / (norm + 1e-6)`` when that is below
        1) or each element to ``[-limit, limit]`` (``mode="value"``)."""
        if limit < 0:
            raise DebugCommandError("clip needs a limit >= 0")
        arrays = self._arrays()
        if mode == "value":
            new = [None if a is None else np.clip(a, -limit, limit) for a in arrays]
        elif mode == "norm":
            norm = total_norm(arrays)
            factor = limit / (norm + 1e-6)
            new = [None if a is None else (a * factor if factor < 1 else a) for a in arrays]
        else:
            raise DebugCommandError(f"clip mode must be 'norm' or 'value', not {mode!r}")
        self._apply(new, f"clip {limit:g} {mode}")

    def zero(self) -> None:
        """Replace the gradient at this point by zeros."""
        arrays = self._arrays()
        self._apply([None if a is None else np.zeros_like(a) for a in arrays], "zero")

    def set(self, expression: str, evaluate: Callable[[str], Any]) -> None:
        """Replace the gradient by ``evaluate(expression)``: a tensor, array or number for a
        single slot, or a tuple with one entry per slot."""
        arrays = self._arrays()
        editable = self.stop.editable
        value = evaluate(expression)
        if isinstance(value, (tuple, list)):
            if len(value) != len(arrays):
                raise DebugCommandError(f"{editable} has {len(arrays)} entries; the value has {len(value)}")
            entries = list(value)
        elif len(arrays) == 1:
            entries = [value]
        else:
            raise DebugCommandError(f"{editable} has {len(arrays)} entries: give a tuple with one per entry")
        new = []
        for index, (entry, old) in enumerate(zip(entries, arrays)):
            if entry is None:
                new.append(None)
                continue
            if old is None:
                raise DebugCommandError(f"{editable}[{index}] has no gradient here; it can only stay None")
            data = self.engine.to_numpy(entry) if self.engine.is_tensor(entry) else entry
            try:
                new.append(np.asarray(data, dtype=old.dtype))
            except (TypeError, ValueError) as error:
                raise DebugCommandError(f"cannot use {type(entry).__name__} as a gradient: {error}") from None
        self._apply(new, f"set {expression}")

    def _arrays(self) -> list:
        """The arrays an edit replaces; DebugCommandError when there are none here."""
        stop = self.stop
        if stop is None or stop.editable is None:
            where = "here" if stop is None else f"at a {stop.phase} point"
            if stop is not None and stop.phase == "post":
                where += " whose grad_input has already been passed on"
            raise DebugCommandError(f"no gradient to edit {where}: edits apply at pre (grad_output), post "
                                    "(grad_input) and node points")
        arrays = stop.groups[stop.editable]
        if not any(a is not None for a in arrays):
            raise DebugCommandError(f"{stop.editable} is all None here: nothing to edit")
        return arrays

    def _apply(self, new: list, description: str) -> None:
        """Put ``new`` (cast to the old arrays' shapes and dtypes) in place of the editable group."""
        stop = self.stop
        old = stop.groups[stop.editable]
        cast = []
        for before, after in zip(old, new):
            if before is None or after is None:
                cast.append(None if before is None else after)
                continue
            after = np.asarray(after)
            if after.shape != before.shape:
                try:
                    after = np.broadcast_to(after, before.shape)
                except ValueError:
                    raise DebugCommandError(f"the new gradient has shape {list(after.shape)}, expected "
                                            f"{list(before.shape)}") from None
            cast.append(np.array(after, dtype=before.dtype))
        stop.groups[stop.editable] = cast
        stop.edited = True
        stop.edits.append(description)
        if stop.call is not None:
            state = self.record.state(stop.call)
            state.edits.append(f"{stop.phase}: {description}")
            if stop.phase == "pre":
                state.grad_output, state.grad_output_norm = cast, total_norm(cast)
            elif stop.phase == "post":
                state.grad_input, state.grad_input_norm = cast, total_norm(cast)
