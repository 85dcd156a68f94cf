"""The debugger's command interpreter (stdlib ``cmd``), with tab completion of module paths.

It is the ``Interface`` a :class:`~gradscope.debug.session.DebugSession` calls when it stops.
Commands come from the terminal, or from a list (``--commands``), in which case each is echoed
after the prompt so the output reads like the interactive session.
"""
from __future__ import annotations

import cmd
import fnmatch
import inspect
import re
from collections import deque
from typing import IO, Any, Protocol

from gradscope.debug.conditions import ConditionError
from gradscope.debug.errors import DebugCommandError
from gradscope.debug.session import DebugSession
from gradscope.debug.views import GraphView

KEYWORDS = ("nan", "inf", "nonfinite", "module", "type", "node", "norm", "grad_output", "grad_input", "output",
            "forward", "pre", "post", "and")
_REPEATABLE = {"step", "s", "next", "n"}


def word_completions(matches: list[str]) -> list[str]:
    """Completions that end a word with a space (readline, as Python sets it up, adds none, so
    ``bre<TAB>nan`` would read ``breaknan``). When the longest common beginning of the matches
    is a match itself (``break`` of ``break``/``breakpoints``), it is the only completion: the
    longer words are one more letter away (``breakp<TAB>``)."""
    matches = sorted(set(matches))
    if not matches:
        return []
    common = matches[0]
    for match in matches[1:]:
        while not match.startswith(common):
            common = common[:-1]
    if common in matches:
        return [common + " "]
    return [match + " " for match in matches]


class Presenter(Protocol):
    """Where the shell's output goes (plain text, or rich in the CLI)."""

    def show(self, view: Any) -> None:
        """Draw a view record (``Position``, ``GradsView``, ``LayerTable``, ...)."""

    def info(self, text: str) -> None:
        """A message."""

    def error(self, text: str) -> None:
        """A message about a command that could not run."""

    def banner(self, text: str) -> None:
        """The line announcing a stop."""

    def echo(self, text: str) -> None:
        """A scripted command, shown after the prompt."""


class DebuggerShell(cmd.Cmd):
    """``(gradscope)`` prompt. Type ``help`` for the commands, ``help CMD`` for one.

    Args:
        presenter: where output goes.
        commands: run these instead of reading a terminal. When they run out in the middle of
            a pass the shell quits (aborting the pass); after the pass it just ends.
        stdin, stdout: streams for the interactive prompt (default: the terminal, with readline).
    """

    prompt = "(gradscope) "
    doc_header = "commands (help CMD for details)"

    def __init__(self, presenter: Presenter, commands: list[str] | None = None, stdin: IO | None = None,
                 stdout: IO | None = None) -> None:
        super().__init__(stdin=stdin, stdout=stdout)
        if stdin is not None:
            self.use_rawinput = False
        self.presenter = presenter
        self.script = None if commands is None else deque(c.strip() for c in commands if c.strip())
        self.session: DebugSession | None = None

    # ---------------------------------------------------------------- Interface
    def interact(self, session: DebugSession) -> None:
        """Run commands until one resumes the pass (or quit raises DebuggerQuit)."""
        self.session = session
        self.presenter.banner(session.banner())
        if self.script is not None:
            while self.script:
                line = self.script.popleft()
                self.presenter.echo(self.prompt + line)
                if self.onecmd(line):
                    return
            if session.state == "finished":
                return
            self.presenter.info("(end of commands: quit)")
            session.quit()
        while True:
            try:
                self.cmdloop()
                return
            except KeyboardInterrupt:
                self.presenter.info("\n(interrupted: 'continue' goes on, 'quit' aborts the pass)")

    def show(self, view: Any) -> None:
        self.presenter.show(view)

    # ---------------------------------------------------------------- dispatch
    def onecmd(self, line: str) -> bool:
        try:
            return bool(super().onecmd(line))
        except (DebugCommandError, ConditionError) as error:
            self.presenter.error(str(error))
            return False

    def emptyline(self) -> bool:
        if self.lastcmd.split(" ")[0] in _REPEATABLE:
            return self.onecmd(self.lastcmd)
        return False

    def default(self, line: str) -> bool:
        self.presenter.error(f"unknown command {line.split()[0]!r} (type help)")
        return False

    def do_help(self, arg: str) -> bool:
        """help [CMD]: list the commands, or explain one."""
        if arg:
            method = getattr(self, "do_" + arg.strip(), None)
            if method is None or not method.__doc__:
                self.presenter.error(f"no help for {arg!r}")
            else:
                self.presenter.info(inspect.cleandoc(method.__doc__))
            return False
        functions = {getattr(type(self), n) for n in dir(type(self)) if n.startswith("do_") and n != "do_EOF"}
        lines = [f.__doc__.strip().splitlines()[0] for f in sorted(functions, key=lambda f: f.__name__) if f.__doc__]
        lines.append("short names: b = break, s = step, n = next, c = continue, w = where, p = print, q = quit; "
                     "an empty line repeats step or next")
        self.presenter.info("\n".join(lines))
        return False

    # ---------------------------------------------------------------- breakpoints
    def do_break(self, arg: str) -> bool:
        """break [COND]: stop when COND holds (no COND: list the breakpoints).

        COND is clauses joined by 'and': nan | inf | nonfinite | module GLOB | type NAME |
        [grad_output|grad_input|output] norm (>|<|>=|<=) X | node NAME | forward | pre | post.
        Examples: break nan / break module encoder.* / break grad_input norm > 100 /
        break node LogBackward0 / break forward nan"""
        if not arg.strip():
            return self.do_breakpoints("")
        breakpoint_ = self.session.breakpoints.add(arg)
        self.presenter.info(f"breakpoint {breakpoint_.number}: {breakpoint_.text} "
                            f"(checked at {breakpoint_.phase_text} points)")
        known = self.session.module_paths()
        for pattern in breakpoint_.module_patterns():
            module = re.sub(r"\[\d+\]$", "", pattern)
            if not any(fnmatch.fnmatchcase(path, pattern) or path == module for path in known):
                self.presenter.error(f"warning: no module matches {pattern!r}; modules: {', '.join(known)}")
        if "forward" in breakpoint_.phases and self.session.state not in ("idle", "forward"):
            self.presenter.info("forward breakpoints stop in the next forward pass")
        return False

    def do_delete(self, arg: str) -> bool:
        """delete [N ...]: delete breakpoints N (no N: all)."""
        for number in self._numbers(arg):
            self.session.breakpoints.delete(number)
            self.presenter.info(f"deleted breakpoint {number}")
        return False

    def do_disable(self, arg: str) -> bool:
        """disable [N ...]: disable breakpoints N (no N: all)."""
        for number in self._numbers(arg):
            self.session.breakpoints.get(number).enabled = False
            self.presenter.info(f"disabled breakpoint {number}")
        return False

    def do_enable(self, arg: str) -> bool:
        """enable [N ...]: enable breakpoints N (no N: all)."""
        for number in self._numbers(arg):
            self.session.breakpoints.get(number).enabled = True
            self.presenter.info(f"enabled breakpoint {number}")
        return False

    def do_breakpoints(self, arg: str) -> bool:
        """breakpoints: list breakpoints with their hit counts."""
        self.presenter.show(self.session.breakpoint_list())
        return False

    def _numbers(self, arg: str) -> list[int]:
        existing = [b.number for b in self.session.breakpoints.breakpoints]
        if not arg.strip():
            return existing
        numbers = []
        for word in arg.split():
            if not word.isdigit() or int(word) not in existing:
                raise DebugCommandError(f"no breakpoint {word!r} (breakpoints: "
                                        f"{', '.join(map(str, existing)) or 'none'})")
            numbers.append(int(word))
        return numbers

    # ---------------------------------------------------------------- navigation
    def do_step(self, arg: str) -> bool:
        """step: go to the next stopping point (the next module's pre or post point)."""
        self.session.resume("step")
        return True

    def do_next(self, arg: str) -> bool:
        """next: like step, but steps over the modules nested in this one.

        Goes to the next stopping point at this module's nesting level or above, or to a
        breakpoint that is hit before that."""
        self.session.resume("next")
        return True

    def do_continue(self, arg: str) -> bool:
        """continue: run to the next breakpoint (or to the end of the pass)."""
        self.session.resume("continue")
        return True

    def do_finish(self, arg: str) -> bool:
        """finish: run backward to the end, ignoring breakpoints, then show the table."""
        self.session.resume("finish")
        return True

    def do_quit(self, arg: str) -> bool:
        """quit: abort the pass, remove every hook, restore the model's gradients."""
        aborted = "" if self.session.state == "finished" else "the pass was aborted, "
        self.presenter.info(f"quit: {aborted}every hook removed and the model restored")
        self.session.quit()
        return True

    def do_EOF(self, arg: str) -> bool:
        self.presenter.info("")
        if self.session.state == "finished":
            return True
        return self.do_quit(arg)

    # ---------------------------------------------------------------- looking
    def do_where(self, arg: str) -> bool:
        """where: module path, phase, node, modules done/pending, source line of the forward call."""
        self.presenter.show(self.session.position())
        return False

    def do_graph(self, arg: str) -> bool:
        """graph [all|DEPTH]: the autograd graph from the loss down to the current point.

        Nodes show their output shapes and owning module; ✓ ran, ○ not run yet, ◀ here the
        current module's nodes. 'graph all' draws the whole graph, 'graph 3' three levels."""
        word = arg.strip()
        depth = None
        if word and word != "all":
            if not word.isdigit():
                raise DebugCommandError("usage: graph [all|DEPTH]")
            depth = int(word)
        stop_at_pending = not word and self.session.state == "backward"
        self.presenter.show(GraphView(self.session.graph(), depth, stop_at_pending))
        return False

    def do_grads(self, arg: str) -> bool:
        """grads: grad_output / grad_input here: shape, norm, mean, abs max, non-finite, histogram."""
        self.presenter.show(self.session.grads_view())
        return False

    def do_print(self, arg: str) -> bool:
        """print EXPR: evaluate a Python expression and show the result.

        Names: module, grad_output, grad_input (tuples of tensors; None where unknown), output
        (at forward points), node, loss, model, gs, np. Example: print grad_output[0].abs().max()"""
        if not arg.strip():
            raise DebugCommandError("usage: print EXPR")
        self.presenter.info(repr(self.session.evaluate(arg)))
        return False

    def do_table(self, arg: str) -> bool:
        """table: per-module table of what backward has done so far (norms, status, edits)."""
        self.presenter.show(self.session.layer_table())
        return False

    def do_params(self, arg: str) -> bool:
        """params: parameter gradients of the current module (once accumulated)."""
        self.presenter.show(self.session.params_view())
        return False

    # ---------------------------------------------------------------- changing
    def do_scale(self, arg: str) -> bool:
        """scale F: multiply the gradient here by F; the rest of backward uses the result."""
        self.session.edit().scale(_number(arg, "scale F"))
        self._edited()
        return False

    def do_clip(self, arg: str) -> bool:
        """clip X [norm|value]: clip the gradient here to total norm X (default) or to [-X, X]."""
        words = arg.split()
        if not words or len(words) > 2:
            raise DebugCommandError("usage: clip X [norm|value]")
        self.session.edit().clip(_number(words[0], "clip X [norm|value]"), words[1] if len(words) == 2 else "norm")
        self._edited()
        return False

    def do_zero(self, arg: str) -> bool:
        """zero: replace the gradient here by zeros."""
        self.session.edit().zero()
        self._edited()
        return False

    def do_set(self, arg: str) -> bool:
        """set EXPR: replace the gradient here by the value of EXPR.

        Same names as print. A tensor, array or number for one entry, a tuple for several.
        Example: set gs.nan_to_num(grad_input[0], nan=0.0)"""
        if not arg.strip():
            raise DebugCommandError("usage: set EXPR")
        self.session.edit().set(arg, self.session.evaluate)
        self._edited()
        return False

    def _edited(self) -> None:
        stop = self.session.current
        self.presenter.info(f"{stop.editable} edited ({stop.edits[-1]}); continuing uses the new value")

    # ---------------------------------------------------------------- completion
    def completenames(self, text: str, *ignored: Any) -> list[str]:
        """Command names, completed as words (see :func:`word_completions`)."""
        return word_completions(super().completenames(text, *ignored))

    def complete_break(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        words = line[:begidx].split()
        previous = words[-1] if len(words) > 1 else ""
        if previous == "module":
            candidates = self.session.module_paths()
        elif previous == "type":
            candidates = sorted({type(m).__name__ for m in self.session.model.modules()})
        elif previous == "node":
            candidates = sorted({node.name for node in self.session.graph().nodes})
        else:
            candidates = list(KEYWORDS)
        return word_completions([c for c in candidates if c.startswith(text)])

    def complete_print(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return [name for name in self.session.namespace() if name.startswith(text)]

    complete_set = complete_print

    # ---------------------------------------------------------------- short names
    do_b = do_break
    do_s = do_step
    do_n = do_next
    do_c = do_continue
    do_q = do_quit
    do_exit = do_quit
    do_p = do_print
    do_w = do_where


def _number(text: str, usage: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise DebugCommandError(f"usage: {usage} (a number, got {text.strip()!r})") from None
