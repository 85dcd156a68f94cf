"""``--tensorboard DIR``: the per-step records of ``watch`` and ``run`` as TensorBoard scalars.

The events are written with the ``tensorboard`` package's own event-file writer and protocol
buffers, so neither torch nor TensorFlow is needed; without the package the option is refused
at start-up with one line that says what to install. The scalars are those of the ``--log``
record of each step (``loss``, the total gradient norm, each layer's and, for ``run``, each
parameter's gradient norm), tagged so that TensorBoard groups them:

``loss``, ``grad_norm/total``, ``grad_norm/layer/<module>``, ``grad_norm/parameter/<name>``,
``clipped/grad_norm/total`` (``run --clip``).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

__all__ = ["INSTALL_HINT", "ScalarWriter", "available", "scalars"]

INSTALL_HINT = "writing TensorBoard scalars needs the tensorboard package (pip install tensorboard)"


def available() -> bool:
    """True when the ``tensorboard`` package (with its event-file writer) can be imported."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: F401
        from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: F401
    except ImportError:
        return False
    return True


def _number(value: Any) -> float | None:
    """A record's number: floats as they are, the JSON spellings "nan", "inf", "-inf" as floats."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def scalars(record: dict[str, Any]) -> Iterator[tuple[str, float]]:
    """The ``(tag, value)`` pairs of one step record (a ``gradscope.watch.step/1`` or
    ``gradscope.run.step/1`` dict); numbers that do not exist (``null``) are left out."""
    pairs: list[tuple[str, Any]] = [("loss", record.get("loss")), ("grad_norm/total", record.get("total_grad_norm"))]
    pairs += [(f"grad_norm/layer/{name or 'model'}", value) for name, value in (record.get("layers") or {}).items()]
    pairs += [(f"grad_norm/parameter/{name}", value) for name, value in (record.get("parameters") or {}).items()]
    clipped = record.get("clipped") or {}
    pairs.append(("clipped/grad_norm/total", clipped.get("total_grad_norm")))
    for tag, value in pairs:
        number = _number(value)
        if number is not None:
            yield tag, number


class ScalarWriter:
    """An event file in ``directory`` (created by TensorBoard's writer, one per run, as
    ``SummaryWriter`` does), flushed after every step so that a dashboard follows the run.

    Raises:
        OSError: the event file cannot be created or written.
    """

    def __init__(self, directory: str | Path) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._writer = EventFileWriter(str(directory), flush_secs=1)

    def write(self, record: dict[str, Any]) -> None:
        """Add the scalars of one step record under its ``step``."""
        from tensorboard.compat.proto import event_pb2, summary_pb2

        values = [summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in scalars(record)]
        if not values:
            return
        self._writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(record["step"]),
                                               summary=summary_pb2.Summary(value=values)))
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        self._writer.close()
