"""The backward-pass debugger: breakpoints inside backward, stepping module by module,
looking at and editing the gradients, and the autograd graph.

``breakpoint_on(model, "nan")`` opens the prompt from inside your own training loop when a
condition holds; ``gradscope debug MODEL`` does the same for a model file.
"""
from __future__ import annotations

import sys
from collections import deque
from typing import IO, Any, Sequence

from gradscope.debug.conditions import Breakpoint, ConditionError, Event, parse_condition
from gradscope.debug.graph import AutogradGraph, GraphNode, build_graph, trace_graph
from gradscope.debug.errors import DebugCommandError, DebuggerQuit
from gradscope.debug.session import DebugSession, Snapshot, run_debug_step
from gradscope.debug.shell import DebuggerShell, Presenter
from gradscope.debug.text import TextPresenter
from gradscope.debug.tracking import Call, ForwardTracker

__all__ = ["AutogradGraph", "Breakpoint", "Call", "ConditionError", "DebugCommandError", "DebugSession",
           "DebuggerQuit", "DebuggerShell", "Event", "ForwardTracker", "GraphNode", "Presenter", "Snapshot",
           "TextPresenter", "breakpoint_on", "build_graph", "parse_condition", "run_debug_step", "trace_graph"]

NO_TERMINAL_COMMANDS = ("where", "grads", "finish")


def breakpoint_on(model: Any, *conditions: str, commands: Sequence[str] | str | None = None,
                  presenter: Presenter | None = None, stdin: IO | None = None,
                  stdout: IO | None = None) -> DebugSession:
    """Stop inside backward (or forward) whenever one of ``conditions`` holds, with a prompt.

    Call it once before the training loop; it returns the attached session (remove it with
    ``.detach()``, or use it as a context manager). Every backward pass of ``model`` is then
    watched, and when a condition holds the ``(gradscope)`` prompt opens inside the hook::

        dbg = gradscope.debug.breakpoint_on(model, "nan")
        for step in range(1000):
            loss = loss_fn(model(x), y)
            loss.backward()      # stops here, inside backward, at the first NaN gradient
            opt.step(); opt.zero_grad()
        dbg.detach()

    ``quit`` at the prompt aborts the backward pass by raising :class:`DebuggerQuit` (a
    ``BaseException``) out of ``backward()``, after restoring the gradients the parameters had
    when the pass started and removing every hook.

    Args:
        model: the module to watch (gradscope's or PyTorch's).
        conditions: breakpoint conditions, e.g. ``"nan"``, ``"module encoder.*"``,
            ``"grad_input norm > 100"`` (see ``gradscope.debug.conditions``).
        commands: run these commands (a list, or one string separated by ";") instead of
            reading the terminal. Without a terminal and without commands, a hit shows
            ``where`` and ``grads`` and finishes the pass.
        presenter: where output goes (default: plain text on stdout); the CLI's rich output is
            ``gradscope.render.debug.RichPresenter(console)``.
        stdin, stdout: streams for the prompt.
    """
    if isinstance(commands, str):
        commands = commands.replace("\n", ";").split(";")
    output = presenter or TextPresenter(stdout)
    if commands is None and stdin is None and not (sys.stdin is not None and sys.stdin.isatty()):
        shell: DebuggerShell = _NoTerminalShell(output)
    else:
        shell = DebuggerShell(output, commands=None if commands is None else list(commands), stdin=stdin,
                              stdout=stdout)
    return DebugSession(model, shell, conditions=conditions, snapshot_each_pass=True).attach()


class _NoTerminalShell(DebuggerShell):
    """Without a terminal: report every stop with ``where`` and ``grads``, then finish the pass."""

    def interact(self, session: DebugSession) -> None:
        self.script = deque(NO_TERMINAL_COMMANDS)
        super().interact(session)
