"""What an engine hands back when asked to watch a run: gradient-norm taps on autograd nodes
(:class:`GradientNormTaps`), the trace of the operations that made NaN/Inf (:class:`OpTrace`), and
the recorder of the operations run outside the model (:class:`GraphOpRecorder`).
"""
from __future__ import annotations

import abc
import functools
import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

from gradscope.engines.spec import HOOK_NODE

if TYPE_CHECKING:
    from gradscope.engines.spec import Engine


def stack_of(frame: Any) -> list[tuple[str, int]]:
    """``[(file, line), ...]`` of ``frame`` and its callers, outermost first (cheaper than
    ``traceback.extract_stack``, which reads the source lines)."""
    frames = []
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return frames[::-1]


class NonFiniteOp:
    """One operation whose output held NaN/Inf (see :class:`OpTrace`).

    Attributes:
        op: the operation (``"aten.log.default"``, ``"gradscope.log"``).
        kind: ``"nan"`` or ``"inf"``.
        frames: ``[(file, line), ...]`` of the Python stack that called it, outermost first.
        tensor: its output.
        grad_fn: the autograd node of that output, or None (on PyTorch the node is attached after
            the operation returns: it is read at the next operation or when the trace ends).
    """

    __slots__ = ("op", "kind", "frames", "tensor", "grad_fn")

    def __init__(self, op: str, kind: str, frames: list[tuple[str, int]], tensor: Any, grad_fn: Any = None) -> None:
        self.op, self.kind, self.frames, self.tensor, self.grad_fn = op, kind, frames, tensor, grad_fn

    @property
    def node(self) -> str | None:
        """The name of :attr:`grad_fn` (``"LogBackward0"``), or None."""
        return self.grad_fn.name() if self.grad_fn is not None else None


class OpTrace:
    """What :meth:`Engine.trace_nonfinite_ops` found: every operation whose output held NaN/Inf,
    in the order they ran (:attr:`outputs`), the first one's fields at the top level.

    Attributes:
        op: the first operation whose output held NaN/Inf (``"aten.log.default"``), or None.
        kind: ``"nan"`` or ``"inf"``.
        node: the autograd node of that output (``"LogBackward0"``), when it has one.
        frames: ``[(file, line), ...]`` of the Python stack that called it, outermost first.
        tensor: that output.
        outputs: one :class:`NonFiniteOp` per non-finite output.
    """

    def __init__(self) -> None:
        self.outputs: list[NonFiniteOp] = []

    def _first(self, name: str) -> Any:
        return getattr(self.outputs[0], name) if self.outputs else None

    op = property(lambda self: self._first("op"))
    kind = property(lambda self: self._first("kind"))
    node = property(lambda self: self._first("node"))
    tensor = property(lambda self: self._first("tensor"))
    frames = property(lambda self: self._first("frames") or [])

    def origin(self, tensor: Any) -> NonFiniteOp | None:
        """The operation that made the first NaN/Inf that ``tensor`` holds: the earliest recorded
        operation reached from ``tensor``'s node through nodes whose outputs were all non-finite
        (the identity nodes of module backward hooks pass through). An operation whose NaN was
        masked (``where(x > 0, log(x), 0)``) is not reached. None when ``tensor`` was not made
        by a recorded operation."""
        recorded: dict[int, int] = {}
        for index, output in enumerate(self.outputs):
            if output.grad_fn is not None:
                recorded.setdefault(id(output.grad_fn), index)
        first = None
        stack = [getattr(tensor, "grad_fn", None)]
        seen: set[int] = set()
        while stack:
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            index = recorded.get(id(node))
            if index is None and node.name() != HOOK_NODE:
                continue
            if index is not None and (first is None or index < first):
                first = index
            stack.extend(child for child, _ in node.next_functions)
        return self.outputs[first] if first is not None else None


class GraphOpRecorder(abc.ABC):
    """Records the operations that return floating-point tensors while it is started.

    State: ``records``, a sequence of ``(output, node, (file, line) | None, operation, inputs)``,
    one per such operation, in the order they ran: ``node`` is the output's autograd node (None
    when its inputs need no gradient), ``operation`` the function called (``torch.log``),
    ``inputs`` its ``(args, kwargs)``. Outputs and inputs are kept until :meth:`clear`. Starting
    and stopping may happen in different hooks; :meth:`stop` when not started does nothing.
    """

    engine: Engine

    @abc.abstractmethod
    def start(self) -> None:
        """Record from now on."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop recording (the records stay)."""

    @abc.abstractmethod
    def clear(self) -> None:
        """Forget the records."""


class GradientNormTaps:
    """Squared norms of the gradients that flow through chosen autograd nodes, delivered during
    backward. A tap only observes: no gradient is replaced and every ``.grad`` is what it would be
    without it.

    :meth:`add` taps one node: each time the node runs in backward,
    ``receiver(output_square, input_square, nonfinite)`` gets the sum of the squared norms of the
    gradients of the node's outputs ``output_slots`` and the sum of those it sends to its inputs
    ``input_slots`` (each None when none of those slots has a gradient), and the number of NaN/Inf
    entries among them. :meth:`close` removes every tap of the set.

    This version is a post-hook per node that asks :meth:`Engine.squared_norms` for the node's
    gradients (one host transfer per node): it sees them as they are at its place among the node's
    post-hooks. An engine may tap its nodes more cheaply (gradscope's reads them after all of them).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._handles: list[Any] = []

    def add(self, node: Any, output_slots: tuple, input_slots: tuple,
            receiver: Callable[[float | None, float | None, int], None]) -> None:
        """Tap ``node`` (see the class docstring)."""
        self._handles.append(node.register_hook(functools.partial(self._hook, output_slots, input_slots, receiver)))

    def close(self) -> None:
        """Remove every tap of this set (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, output_slots: tuple, input_slots: tuple, receiver: Callable, grad_inputs: tuple,
              grad_outputs: tuple) -> None:
        grads = [grad_outputs[index] for index in output_slots] + [grad_inputs[index] for index in input_slots]
        squares = self._engine.squared_norms(grads)
        outputs = len(output_slots)
        nonfinite = 0
        for index, square in enumerate(squares):
            if square is not None and not square < math.inf:  # (NaN or Inf)
                nonfinite += self._engine.nonfinite_count(grads[index])
        receiver(_sum_present(squares[:outputs]), _sum_present(squares[outputs:]), nonfinite)


def _sum_present(values: Sequence[float | None]) -> float | None:
    """Sum of the entries that are not None; None when all are."""
    present = [value for value in values if value is not None]
    return sum(present) if present else None

