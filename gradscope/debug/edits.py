"""Gradient edits at the point where a session is stopped: ``scale``, ``clip``, ``zero`` and ``set``."""
from __future__ import annotations

import numpy as np

from gradscope.debug.errors import DebugCommandError
from gradscope.debug.record import Stop
from gradscope.debug.stats import total_norm


def _editable(session) -> tuple[Stop, list]:
    stop = session.current
    if stop is None or stop.editable is None:
        where = "here" if stop is None else f"at a {stop.phase} point"
        if stop is not None and stop.phase == "post":
            where += " whose grad_input has already been passed on"
        raise DebugCommandError(f"no gradient to edit {where}: edits apply at pre (grad_output), post "
                                "(grad_input) and node points")
    arrays = stop.groups[stop.editable]
    if not any(a is not None for a in arrays):
        raise DebugCommandError(f"{stop.editable} is all None here: nothing to edit")
    return stop, arrays


def _apply(session, stop: Stop, new: list, description: str) -> None:
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
        state = session._state(stop.call)
        state.edits.append(f"{stop.phase}: {description}")
        if stop.phase == "pre":
            state.grad_output, state.grad_output_norm = cast, total_norm(cast)
        elif stop.phase == "post":
            state.grad_input, state.grad_input_norm = cast, total_norm(cast)


def scale(session, factor: float) -> None:
    """Multiply the gradient at this point by ``factor``."""
    stop, arrays = _editable(session)
    _apply(session, stop, [None if a is None else a * factor for a in arrays], f"scale {factor:g}")


def clip(session, limit: float, mode: str = "norm") -> None:
    """Clip the gradient at this point: its total norm to ``limit`` (``mode="norm"``, the
    rule of ``clip_grad_norm_``: multiply by ``limit / (norm + 1e-6)`` when that is below
    1) or each element to ``[-limit, limit]`` (``mode="value"``)."""
    if limit < 0:
        raise DebugCommandError("clip needs a limit >= 0")
    stop, arrays = _editable(session)
    if mode == "value":
        new = [None if a is None else np.clip(a, -limit, limit) for a in arrays]
    elif mode == "norm":
        norm = total_norm(arrays)
        factor = limit / (norm + 1e-6)
        new = [None if a is None else (a * factor if factor < 1 else a) for a in arrays]
    else:
        raise DebugCommandError(f"clip mode must be 'norm' or 'value', not {mode!r}")
    _apply(session, stop, new, f"clip {limit:g} {mode}")


def zero(session) -> None:
    """Replace the gradient at this point by zeros."""
    stop, arrays = _editable(session)
    _apply(session, stop, [None if a is None else np.zeros_like(a) for a in arrays], "zero")


def set_value(session, expression: str) -> None:
    """Replace the gradient by the value of a Python expression (see ``namespace``): a
    tensor, array or number for a single slot, or a tuple with one entry per slot."""
    stop, arrays = _editable(session)
    value = session.evaluate(expression)
    if isinstance(value, (tuple, list)):
        if len(value) != len(arrays):
            raise DebugCommandError(f"{stop.editable} has {len(arrays)} entries; the value has {len(value)}")
        entries = list(value)
    elif len(arrays) == 1:
        entries = [value]
    else:
        raise DebugCommandError(f"{stop.editable} has {len(arrays)} entries: give a tuple with one per entry")
    new = []
    for index, (entry, old) in enumerate(zip(entries, arrays)):
        if entry is None:
            new.append(None)
            continue
        if old is None:
            raise DebugCommandError(f"{stop.editable}[{index}] has no gradient here; it can only stay None")
        data = session.engine.to_numpy(entry) if session.engine.is_tensor(entry) else entry
        try:
            new.append(np.asarray(data, dtype=old.dtype))
        except (TypeError, ValueError) as error:
            raise DebugCommandError(f"cannot use {type(entry).__name__} as a gradient: {error}") from None
    _apply(session, stop, new, f"set {expression}")
