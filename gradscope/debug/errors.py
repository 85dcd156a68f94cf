"""The debugger's two exceptions: quitting, and a command that cannot run."""
from __future__ import annotations

from gradscope.errors import ControlFlow, GradscopeError


class DebuggerQuit(ControlFlow):
    """Raised by ``quit``: aborts the forward or backward pass after every hook has been
    removed and the model restored. It derives from ``BaseException`` (through
    :class:`ControlFlow`) so that ``except Exception`` blocks in user code let it through."""


class DebugCommandError(GradscopeError):
    """A command that cannot run here (e.g. ``scale`` when there is no gradient to edit)."""
