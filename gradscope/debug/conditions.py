"""Breakpoint conditions: parsing ``"module encoder.* and norm > 10"`` and matching events.

A condition is one or more clauses joined by ``and``:

* ``nan``, ``inf``, ``nonfinite``: the gradients at this point contain NaN / Inf / either;
* ``module PATTERN``: the module path matches the glob (``encoder.*``, ``fc2``; ``model`` is
  the root module), or names one call of a module called several times (``cell[2]``);
* ``type PATTERN``: the module's class name matches the glob (``Linear``);
* ``[grad_output|grad_input|output] norm OP X`` with OP one of ``> < >= <=``: the total
  Euclidean norm of the gradients (or of the forward output) compares with X;
* ``node PATTERN``: an autograd node whose name matches (``LogBackward0``) has just run;
* ``forward``, ``pre``, ``post``: restrict to a phase (``forward`` = module outputs during
  the forward pass, ``pre`` = grad_output before the module's backward, ``post`` =
  grad_input after it).

Without a phase, ``nan``/``inf``/``norm`` check both ``pre`` and ``post`` points, a
``grad_output``/``grad_input``/``output`` norm checks its own phase, and a condition made
only of ``module``/``type`` clauses stops at ``pre`` (entering the module's backward).
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from gradscope.engines import total_norm
from gradscope.errors import GradscopeError

PHASE_ORDER = ("forward", "pre", "node", "post")
NONFINITE_KINDS = frozenset({"nan", "inf", "nonfinite"})
ROOT_NAME = "model"

SYNTAX_HELP = ("a condition is clauses joined by 'and': nan | inf | nonfinite | module PATTERN | "
               "type PATTERN | [grad_output|grad_input|output] norm (>|<|>=|<=) NUMBER | node PATTERN | "
               "forward | pre | post")

_TOKEN = re.compile(r"\s*(>=|<=|>|<|[^\s<>=]+)")
_OPERATORS = {">": np.greater, "<": np.less, ">=": np.greater_equal, "<=": np.less_equal}
_TARGET_PHASES = {"grad_output": {"pre"}, "grad_input": {"post"}, "output": {"forward"}}


class ConditionError(GradscopeError, ValueError):
    """A breakpoint condition that cannot be parsed."""


@dataclass(frozen=True)
class Event:
    """One point where the debugger may stop.

    Attributes:
        phase: ``"forward"``, ``"pre"``, ``"post"`` or ``"node"``.
        module_path: dotted path of the module ("" for the root), or None outside modules.
        module_type: class name of the module, or None.
        node_name: name of the autograd node (node events), or None.
        arrays: the values the condition looks at: outputs (forward), grad_output (pre),
            grad_input (post), or the gradients the node produced (node); None entries skipped.
        module_call: the call as displayed, ``"cell[2]"`` for the third call of ``cell``.
        value: a forward event about one value a line of forward code made (not a module's
            output); only conditions that look for NaN/Inf stop there.
    """

    phase: str
    module_path: str | None
    module_type: str | None
    node_name: str | None
    arrays: tuple
    module_call: str | None = None
    value: bool = False


@dataclass(frozen=True)
class _Clause:
    kind: str
    argument: str = ""
    operator: str = ""
    threshold: float = 0.0

    def matches(self, event: Event) -> bool:
        kind = self.kind
        if kind in ("nan", "inf", "nonfinite"):
            return any(_has_nonfinite(a, kind) for a in event.arrays if a is not None)
        if kind == "module":
            if event.module_path is None:
                return False
            path = event.module_path or ROOT_NAME
            return fnmatch.fnmatchcase(path, self.argument) or self.argument == event.module_call
        if kind == "type":
            return event.module_type is not None and fnmatch.fnmatchcase(event.module_type, self.argument)
        if kind == "node":
            return event.node_name is not None and fnmatch.fnmatchcase(event.node_name, self.argument)
        if kind == "norm":
            present = [a for a in event.arrays if a is not None]
            if not present:
                return False
            return bool(_OPERATORS[self.operator](total_norm(present), self.threshold))
        return True  # phase clauses are applied through Breakpoint.phases

    def text(self) -> str:
        if self.kind in ("module", "type", "node"):
            return f"{self.kind} {self.argument}"
        if self.kind == "norm":
            prefix = f"{self.argument} " if self.argument else ""
            return f"{prefix}norm {self.operator} {self.threshold:g}"
        return self.kind


def _has_nonfinite(array: np.ndarray, kind: str) -> bool:
    if array.dtype.kind not in "fc":
        return False
    if kind == "nan":
        return bool(np.isnan(array).any())
    if kind == "inf":
        return bool(np.isinf(array).any())
    return not bool(np.isfinite(array).all())


@dataclass
class Breakpoint:
    """A numbered condition with the phases it applies to, an enabled flag and a hit count."""

    number: int
    clauses: tuple
    phases: frozenset
    enabled: bool = True
    hits: int = 0

    @property
    def text(self) -> str:
        """The condition in canonical form, e.g. ``"module fc* and norm > 10"``."""
        return " and ".join(clause.text() for clause in self.clauses)

    def matches(self, event: Event) -> bool:
        """Whether this breakpoint (ignoring ``enabled``) stops at ``event``."""
        if event.value and not self.kinds() & NONFINITE_KINDS:
            return False
        return event.phase in self.phases and all(clause.matches(event) for clause in self.clauses)

    def watches_forward_values(self) -> bool:
        """Whether it looks for NaN/Inf in the forward pass (``forward nan``)."""
        return "forward" in self.phases and bool(self.kinds() & NONFINITE_KINDS)

    def kinds(self) -> set[str]:
        """The kinds of its clauses (``{"forward", "nan"}``)."""
        return {clause.kind for clause in self.clauses}

    @property
    def phase_text(self) -> str:
        """The phases checked, in the order they happen (``"pre/post"``)."""
        return "/".join(phase for phase in PHASE_ORDER if phase in self.phases)

    def module_patterns(self) -> list[str]:
        """The ``module`` globs of this condition (to warn when they match nothing)."""
        return [clause.argument for clause in self.clauses if clause.kind == "module"]


def parse_condition(text: str, number: int = 0) -> Breakpoint:
    """Parse a condition such as ``"nan"`` or ``"grad_input norm > 1e3 and type Linear"``.

    Raises:
        ConditionError: with what was wrong and the accepted syntax.
    """
    tokens = _TOKEN.findall(text.strip())
    if not tokens:
        raise ConditionError(f"empty breakpoint condition; {SYNTAX_HELP}")
    groups: list[list[str]] = [[]]
    for token in tokens:
        if token.lower() == "and":
            groups.append([])
        else:
            groups[-1].append(token)
    clauses = []
    for group in groups:
        if not group:
            raise ConditionError(f"'and' needs a clause on each side in {text!r}; {SYNTAX_HELP}")
        clauses.extend(_parse_group(group, text))
    phases = _phases(clauses, text)
    return Breakpoint(number=number, clauses=tuple(clauses), phases=phases)


def _parse_group(tokens: list[str], text: str) -> list[_Clause]:
    """One 'and'-separated group; a group may hold several clauses ('forward nan')."""
    clauses = []
    index = 0
    while index < len(tokens):
        word = tokens[index].lower()
        if word in ("nan", "inf", "nonfinite", "forward", "pre", "post"):
            clauses.append(_Clause(word))
            index += 1
        elif word in ("module", "type", "node"):
            if index + 1 >= len(tokens):
                raise ConditionError(f"'{word}' needs a pattern in {text!r}, e.g. '{word} "
                                     f"{ {'module': 'encoder.*', 'type': 'Linear', 'node': 'LogBackward0'}[word] }'")
            clauses.append(_Clause(word, tokens[index + 1]))
            index += 2
        elif word in ("norm", "grad_output", "grad_input", "output"):
            target = ""
            if word != "norm":
                target = word
                index += 1
                if index >= len(tokens) or tokens[index].lower() != "norm":
                    raise ConditionError(f"expected 'norm' after '{word}' in {text!r}; {SYNTAX_HELP}")
            if index + 2 >= len(tokens) or tokens[index + 1] not in _OPERATORS:
                raise ConditionError(f"expected 'norm > X' or 'norm < X' in {text!r}; {SYNTAX_HELP}")
            try:
                threshold = float(tokens[index + 2])
            except ValueError:
                raise ConditionError(f"'{tokens[index + 2]}' is not a number in {text!r}") from None
            clauses.append(_Clause("norm", target, tokens[index + 1], threshold))
            index += 3
        else:
            raise ConditionError(f"unknown word '{tokens[index]}' in breakpoint condition {text!r}; "
                                 f"{SYNTAX_HELP}")
    return clauses


def _phases(clauses: Sequence[_Clause], text: str) -> frozenset:
    kinds = {clause.kind for clause in clauses}
    explicit = kinds & {"forward", "pre", "post"}
    if "node" in kinds:
        if explicit:
            raise ConditionError(f"'node' conditions stop after the node ran; drop "
                                 f"'{' '.join(sorted(explicit))}' from {text!r}")
        phases = {"node"}
    elif explicit:
        phases = set(explicit)
    elif any(clause.kind == "norm" and clause.argument for clause in clauses):
        phases = {"forward", "pre", "post"}
    elif kinds & {"nan", "inf", "nonfinite", "norm"}:
        phases = {"pre", "post"}
    else:
        phases = {"pre"}
    for clause in clauses:
        if clause.kind == "norm" and clause.argument:
            narrowed = phases & _TARGET_PHASES[clause.argument]
            if not narrowed:
                raise ConditionError(f"'{clause.argument} norm' is never checked at a "
                                     f"{'/'.join(sorted(phases))} point in {text!r}")
            phases = narrowed
    return frozenset(phases)


@dataclass
class BreakpointTable:
    """The numbered breakpoints of one debugging session."""

    breakpoints: list = field(default_factory=list)
    _next_number: int = 1

    def add(self, text: str) -> Breakpoint:
        """Parse ``text`` and add it as a new enabled breakpoint."""
        breakpoint_ = parse_condition(text, self._next_number)
        self._next_number += 1
        self.breakpoints.append(breakpoint_)
        return breakpoint_

    def watches_forward_values(self) -> bool:
        """Whether an enabled ``forward`` breakpoint looks for NaN/Inf (then ``run_debug_step``
        traces the lines of the forward pass with a ``ValueWatch``)."""
        return any(b.enabled and b.watches_forward_values() for b in self.breakpoints)

    def forward_condition_for(self, loss_kind: str | None) -> str | None:
        """The ``forward`` condition that stops at the line which made the loss NaN/Inf, when the
        loss is already ``loss_kind`` (``"nan"``/``"inf"``) before backward starts and the
        breakpoints that look for NaN/Inf only check backward points (they would stop far from
        the cause, at the loss's own nodes); None otherwise."""
        if self.watches_forward_values() or loss_kind is None:
            return None
        backward_only = [b for b in self.breakpoints
                         if b.enabled and b.kinds() & NONFINITE_KINDS and "forward" not in b.phases]
        return f"forward {loss_kind}" if backward_only else None

    def get(self, number: int) -> Breakpoint:
        for breakpoint_ in self.breakpoints:
            if breakpoint_.number == number:
                return breakpoint_
        raise KeyError(number)

    def delete(self, number: int) -> Breakpoint:
        breakpoint_ = self.get(number)
        self.breakpoints.remove(breakpoint_)
        return breakpoint_

    def hit(self, event: Event) -> list[Breakpoint]:
        """The enabled breakpoints that stop at ``event``; their hit counts go up by one."""
        hits = [b for b in self.breakpoints if b.enabled and b.matches(event)]
        for breakpoint_ in hits:
            breakpoint_.hits += 1
        return hits

    def wants(self, phase: str) -> bool:
        """Whether any enabled breakpoint can stop at a point of this phase."""
        return any(b.enabled and phase in b.phases for b in self.breakpoints)
