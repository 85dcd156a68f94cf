"""Helpers the command modules share once they run (imported lazily by the commands)."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:  # rich is imported when something is drawn: a JSON run never needs it
    from rich.console import Console, RenderableType

from gradscope._tool.files import atomic_write_text
from gradscope.monitor.analysis import Thresholds

# The widest an exported view may be drawn (columns beyond it are left out, as on a terminal).
EXPORT_MAX_WIDTH = 1000


def thresholds_from(max_norm: float | None = None, min_norm: float | None = None,
                    min_ratio: float | None = None) -> Thresholds:
    """Thresholds with the given values; None keeps the default."""
    defaults = Thresholds()
    return Thresholds(max_norm=defaults.max_norm if max_norm is None else max_norm,
                      min_norm=min_norm,
                      min_ratio=defaults.min_ratio if min_ratio is None else min_ratio)


def export_view(view: "RenderableType", path: str | Path, title: str) -> None:
    """Render ``view`` off-screen and write it atomically as SVG or HTML (chosen by the file
    suffix), as wide as its content needs so that every column is shown with nothing cut."""
    from rich.console import Console
    from rich.measure import Measurement

    probe = Console(width=EXPORT_MAX_WIDTH, file=io.StringIO())
    width = Measurement.get(probe, probe.options, view).maximum
    console = Console(record=True, width=max(width, 20), file=io.StringIO(), force_terminal=True,
                      color_system="truecolor")
    console.print(view)
    text = console.export_svg(title=title) if Path(path).suffix.lower() == ".svg" else console.export_html()
    atomic_write_text(path, text)


def quiet_numpy() -> contextlib.AbstractContextManager:
    """Silence numpy's floating-point warnings (overflow, invalid value) while a model or script runs:
    gradscope reports non-finite values itself."""
    import numpy as np

    return np.errstate(all="ignore")


@contextlib.contextmanager
def training_steps() -> Iterator[None]:
    """The state a command's own training loop runs in (``watch``, ``clip``, ``check``): numpy's
    floating-point warnings silenced (:func:`quiet_numpy`), and every object alive when the loop
    starts (modules, the model, the libraries) moved out of the cyclic garbage collector's sight
    (``gc.freeze``) until it ends, so that the collections the steps' records trigger do not walk
    the whole process (a full collection of a CLI process costs about 10 ms). Nothing the model
    computes depends on it."""
    import gc

    gc.freeze()
    try:
        with quiet_numpy():
            yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def progress_on_terminal(console: "Console") -> Iterator[Callable[[str, int, int], None] | None]:
    """A ``progress(stage, done, total)`` callback that draws a transient progress bar on
    ``console`` (stderr) when it is a terminal; None (nothing drawn) when it is piped."""
    if not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        tasks: dict[str, Any] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=total)
            progress.update(tasks[stage], completed=done, total=total)

        yield update


class LogWriter:
    """``--log``: one JSON line per step, each written whole with one ``write`` to a file opened
    for appending, so lines of concurrent runs never interleave and an interruption never leaves
    half a line. A failing write (disk full) stops the log and is reported; training goes on.

    Args:
        run: the started command (its ``fail(output, error)`` reports a failing write).
        output: the resolved ``--log`` output, or None for no log.
        tensorboard: the resolved ``--tensorboard`` directory, or None: each record is also
            written there as TensorBoard scalars.
    """

    def __init__(self, run: Any, output: Any, tensorboard: Any = None) -> None:
        self.run = run
        self.output = output
        self.descriptor: int | None = None
        self.tensorboard = tensorboard
        self.scalars: Any = None
        if output is not None:
            try:
                self.descriptor = os.open(output.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            except OSError as exc:
                run.fail(output, exc)
        if tensorboard is not None:
            from gradscope.cli.tensorboard import ScalarWriter

            try:
                self.scalars = ScalarWriter(tensorboard.path)
            except Exception as exc:  # noqa: BLE001 - any failure of the event writer is one output's failure
                run.fail(tensorboard, exc)

    @property
    def active(self) -> bool:
        """Whether records are written anywhere (a log file or TensorBoard scalars, and no write
        has failed): callers skip building a record's line when they are not."""
        return self.descriptor is not None or self.scalars is not None

    def write(self, record: dict) -> None:
        """Append ``record`` as one JSON line with one ``write``, and give it to the TensorBoard
        writer (nothing is built when neither is on)."""
        if self.scalars is not None:
            try:
                self.scalars.write(record)
            except Exception as exc:  # noqa: BLE001 - see __init__
                self._close_scalars()
                self.run.fail(self.tensorboard, exc)
        if self.descriptor is None:
            return
        import json

        data = (json.dumps(record, allow_nan=False) + "\n").encode("utf-8")
        try:
            while data:
                data = data[os.write(self.descriptor, data):]
        except OSError as exc:
            self.close()
            self.run.fail(self.output, exc)

    def close(self) -> None:
        """Close the file and the event file (idempotent)."""
        if self.descriptor is not None:
            os.close(self.descriptor)
            self.descriptor = None
        if self.scalars is not None:
            try:
                self._close_scalars()
            except Exception as exc:  # noqa: BLE001 - see __init__
                self.run.fail(self.tensorboard, exc)

    def _close_scalars(self) -> None:
        scalars, self.scalars = self.scalars, None
        scalars.close()


@contextlib.contextmanager
def naming_the_bundle(bundle_label: str, model_label: str) -> Iterator[None]:
    """Let a bundle that does not fit the model (another engine, other parameters) be refused with
    one line that names the bundle file and the model file."""
    from gradscope.monitor.snapshot import BundleError

    try:
        yield
    except BundleError as exc:
        if str(exc).startswith(bundle_label):
            raise
        raise BundleError(f"{bundle_label}: {exc} (model file {model_label})") from exc
