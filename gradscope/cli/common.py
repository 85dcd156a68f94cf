"""Helpers the command modules share once they run (imported lazily by the commands)."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

from rich.console import Console, RenderableType

from gradscope.monitor.analysis import Thresholds
from gradscope.utils.files import atomic_write_text


def thresholds_from(max_norm: float | None = None, min_norm: float | None = None,
                    min_ratio: float | None = None) -> Thresholds:
    """Thresholds with the given values; None keeps the default."""
    defaults = Thresholds()
    return Thresholds(max_norm=defaults.max_norm if max_norm is None else max_norm,
                      min_norm=min_norm,
                      min_ratio=defaults.min_ratio if min_ratio is None else min_ratio)


def export_view(view: RenderableType, path: str | Path, title: str) -> None:
    """Render ``view`` off-screen and write it atomically as SVG or HTML (chosen by the file suffix)."""
    console = Console(record=True, width=140, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    console.print(view)
    text = console.export_svg(title=title) if Path(path).suffix.lower() == ".svg" else console.export_html()
    atomic_write_text(path, text)


def quiet_numpy() -> contextlib.AbstractContextManager:
    """Silence numpy's floating-point warnings (overflow, invalid value) while a model runs:
    gradscope reports non-finite values itself."""
    import numpy as np

    return np.errstate(all="ignore")
