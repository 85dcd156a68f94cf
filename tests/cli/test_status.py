"""The live status line of ``run`` stays under the script's own output."""
from __future__ import annotations

import io
import sys

from gradscope.cli.status import StatusLine, output_below


def _screen(stream: str) -> list[str]:
    """What a terminal shows for ``stream``: ``\\r`` returns to the line start, ``ESC[2K`` clears it."""
    lines = [""]
    for part in stream.replace("\x1b[2K", "\x00").split("\n"):
        line = ""
        for piece in part.split("\r"):
            line = piece.replace("\x00", "") if "\x00" in piece else piece + line[len(piece):]
        lines[-1] = line
        lines.append("")
    return lines[:-1]


def test_script_lines_are_never_glued_to_the_status():
    terminal = io.StringIO()
    status = StatusLine(terminal)

    class Both(io.StringIO):  # the script's stdout and stderr go to the same terminal
        def write(self, text: str) -> int:
            return terminal.write(text)

    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = Both()
    try:
        with output_below(status):
            for step in range(3):
                status.show(f"gradscope: step {step}")
                print(f"step {step} loss 0.5")
            print("warning from the script", file=sys.stderr)
    finally:
        sys.stdout, sys.stderr = saved
    assert _screen(terminal.getvalue()) == ["step 0 loss 0.5", "step 1 loss 0.5", "step 2 loss 0.5",
                                            "warning from the script", ""]


def test_without_a_status_nothing_is_wrapped():
    saved = sys.stdout
    with output_below(None):
        assert sys.stdout is saved
