"""Which module call created which autograd node, recorded with global forward hooks.

Every call of a module of the model becomes a :class:`Call`. When the call returns, the
graph is walked from its outputs back to its inputs: the nodes found are the call's
``nodes`` (including those of nested calls and the ``AccumulateGrad`` nodes of the leaves
it used), and each node not yet claimed by a nested call is *owned* by this call (so every
node has one innermost owner). Walks stop at the grad_fns of the call's tensor arguments
and at nodes owned by calls that started earlier.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable

from gradscope.engines import Engine, engine_of
from gradscope._tool.frames import is_user_file
from gradscope.monitor.tracing import relative_source


@dataclass(eq=False)
class Call:
    """One call of one module during a forward pass.

    Attributes:
        index: position of the call among the calls of this pass, in the order they started.
        path: the module's dotted path in the model ("" for the root).
        module: the module itself.
        occurrence: how many earlier calls of the same module this pass had (0 for the first).
        parent: the enclosing call, None for a top-level call.
        source: ``"file:line"`` of the user code that made the call (or, when gradscope's own
            code made it, where the module is defined).
        n_inputs: number of positional arguments (the length of ``grad_input``).
        has_grad_inputs: whether a positional tensor argument requires grad.
        has_grad_outputs: whether an output requires grad (backward will visit the call).
        input_edges: per positional argument, the ``(node, output_nr)`` its gradient flows to,
            taken when the call started (before an in-place forward changed the argument), or
            None for an argument that needs no gradient.
        output_edges: the ``(node, output_nr)`` of each output that requires grad and was made by
            the call (an argument returned unchanged is not).
        output_nodes: the nodes of ``output_edges``, without repeats.
        input_nodes: the nodes of every tensor argument's edge (where the call's walk stops).
        nodes: every node created during the call (nested calls included).
        own_nodes: the nodes this call owns (not claimed by a nested call).
    """

    index: int
    path: str
    module: Any
    occurrence: int
    parent: "Call | None"
    source: str
    n_inputs: int = 0
    has_grad_inputs: bool = False
    has_grad_outputs: bool = False
    input_edges: list = field(default_factory=list)
    output_edges: list = field(default_factory=list)
    output_nodes: list = field(default_factory=list)
    input_nodes: list = field(default_factory=list)
    nodes: set = field(default_factory=set)
    own_nodes: list = field(default_factory=list)

    @property
    def type_name(self) -> str:
        return type(self.module).__name__

    @property
    def depth(self) -> int:
        depth = 0
        parent = self.parent
        while parent is not None:
            depth += 1
            parent = parent.parent
        return depth

    @property
    def display(self) -> str:
        """The module path for people ("model" for the root), with ``[k]`` for repeated calls."""
        name = self.path or "model"
        return f"{name}[{self.occurrence}]" if self.occurrence else name


class UserCode:
    """Which stack frames are the user's code: files outside gradscope, the standard library and
    installed packages, minus the frames that were already on the stack when debugging started
    (the script or test that called the debugger, the installed ``gradscope`` entry point)."""

    def __init__(self, outside: frozenset = frozenset()) -> None:
        self.outside = outside

    @classmethod
    def below(cls, frame: FrameType | None) -> "UserCode":
        """User code is what runs below ``frame``: ``frame`` and its callers are excluded."""
        outside = set()
        while frame is not None:
            outside.add((frame.f_code.co_filename, frame.f_lineno))
            frame = frame.f_back
        return cls(frozenset(outside))

    def is_user_frame(self, filename: str, line: int) -> bool:
        return is_user_file(filename) and (filename, line) not in self.outside

    def user_frame(self) -> tuple[str, int] | None:
        """``(file, line)`` of the innermost user frame on the stack, or None when there is none."""
        frame = sys._getframe(1)
        while frame is not None:
            if self.is_user_frame(frame.f_code.co_filename, frame.f_lineno):
                return frame.f_code.co_filename, frame.f_lineno
            frame = frame.f_back
        return None

    def call_site(self) -> str | None:
        """``file:line`` of the innermost user frame on the stack (relative to the current
        directory when below it), or None when there is none."""
        found = self.user_frame()
        return None if found is None else relative_source(*found)

    def creation_site(self, engine: Engine, node: Any) -> str | None:
        """``"file:line in function"`` of the user code that created ``node``, from the stack
        recorded while creation traces were on; None when not recorded or all inside gradscope."""
        frames = [frame for frame in engine.node_creation_frames(node) if self.is_user_frame(frame[0], frame[1])]
        if not frames:
            return None
        filename, line, function = frames[-1]
        return f"{relative_source(filename, line)} in {function}" if function else relative_source(filename, line)


def forward_definition(module: Any) -> str | None:
    """``file:line`` of the module's ``forward`` when the user wrote it (not a library layer)."""
    forward = type(module).forward
    try:
        filename = inspect.getsourcefile(forward)
        line = inspect.getsourcelines(forward)[1]
    except (OSError, TypeError):
        return None
    if filename is None or not is_user_file(filename):
        return None
    return f"{relative_source(filename, line)} (forward)"


class ForwardTracker:
    """Records the module calls of ``model`` and which nodes each created.

    Args:
        model: the root module; calls of modules outside it are ignored.
        on_call_end: ``fn(call, output)`` called when a call returns (after its walk).
        on_pass_start: ``fn() -> bool`` called before a top-level call starts; when it returns
            True the calls recorded so far are forgotten.
        locate: ``fn(module_path) -> "file:line" | None``, where the module is defined; used
            for the source of a call made from library code (``nn.Sequential``).
        engine: the model's engine adapter (default: found from the model).
        user_code: which frames are the user's (default: every file outside gradscope and the
            installed libraries).
        on_call_start: ``fn(call, args)`` called when a call starts.
    """

    def __init__(self, model: Any, on_call_end: Callable[[Call, Any], None] | None = None,
                 on_pass_start: Callable[[], bool] | None = None,
                 locate: Callable[[str], str | None] | None = None, engine: Engine | None = None,
                 user_code: UserCode | None = None,
                 on_call_start: Callable[[Call, tuple], None] | None = None) -> None:
        self.model = model
        self.engine = engine or engine_of(model)
        self.locate = locate
        self.user_code = user_code or UserCode()
        self.on_call_start = on_call_start
        self.on_call_end = on_call_end
        self.on_pass_start = on_pass_start
        self.paths: dict[int, str] = {}
        for path, module in model.named_modules():
            self.paths.setdefault(id(module), path)
        self.calls: list[Call] = []
        self.owner: dict = {}
        self.suspended = False
        self._stack: list[Call] = []
        self._boundaries: dict = {}
        self._handles: list = []

    # ---------------------------------------------------------------- lifecycle
    def attach(self) -> None:
        """Register the global forward hooks."""
        self._handles = [self.engine.register_module_forward_pre_hook(self._forward_pre),
                         self.engine.register_module_forward_hook(self._forward_post, with_kwargs=True,
                                                                  always_call=True)]

    def detach(self) -> None:
        """Remove every hook this tracker registered (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def reset(self) -> None:
        """Forget the calls recorded so far (a new pass starts)."""
        self.calls = []
        self.owner = {}
        self._stack = []
        self._boundaries = {}

    @property
    def active_calls(self) -> list[Call]:
        """The calls whose forward has started but not returned, outermost first."""
        return list(self._stack)

    # ---------------------------------------------------------------- queries
    def owner_of(self, node: Any) -> Call | None:
        return self.owner.get(node)

    def calls_of(self, module: Any) -> list[Call]:
        return [call for call in self.calls if call.module is module]

    # ---------------------------------------------------------------- hooks
    def _forward_pre(self, module: Any, args: tuple) -> None:
        path = self.paths.get(id(module))
        if path is None or self.suspended:
            return None
        if not self._stack and self.on_pass_start is not None and self.on_pass_start():
            self.reset()
        occurrence = sum(1 for call in self.calls if call.module is module)
        call = Call(index=len(self.calls), path=path, module=module, occurrence=occurrence,
                    parent=self._stack[-1] if self._stack else None, source=self._source(path, module))
        edge = self.engine.gradient_edge
        call.n_inputs = len(args)
        call.input_edges = [edge(arg) if self.engine.is_tensor(arg) else None for arg in args]
        call.has_grad_inputs = any(e is not None for e in call.input_edges)
        # Keyword tensors are not part of grad_input, but the walk stops at them too.
        self._boundaries[call] = {e[0] for t in self.engine.tensors_in(args) for e in [edge(t)] if e is not None}
        self.calls.append(call)
        self._stack.append(call)
        if self.on_call_start is not None:
            self.on_call_start(call, args)
        return None

    def _source(self, path: str, module: Any) -> str:
        site = self.user_code.call_site()
        if site is not None:
            return site
        defined = self.locate(path) if self.locate is not None else None
        if defined is not None:
            return f"{defined} (defined here)"
        caller = f"{self._stack[-1].type_name}.forward" if self._stack else "gradscope"
        return forward_definition(module) or f"unknown (called by {caller}, no line of your code on the stack)"

    def _forward_post(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if not self._stack or self._stack[-1].module is not module or self.suspended:
            return None
        call = self._stack.pop()
        boundary = self._boundaries.pop(call, set())
        boundary.update(e[0] for t in self.engine.tensors_in(kwargs)
                        for e in [self.engine.gradient_edge(t)] if e is not None)
        call.input_nodes = list(dict.fromkeys(boundary))
        outputs = self.engine.tensors_in(output)
        call.has_grad_outputs = any(t.requires_grad for t in outputs)
        for tensor in outputs:
            edge = self.engine.gradient_edge(tensor)
            if edge is None or edge[0] in boundary or edge in call.output_edges:
                continue
            call.output_edges.append(edge)
            if edge[0] not in call.output_nodes:
                call.output_nodes.append(edge[0])
        self._walk(call, boundary)
        if self.on_call_end is not None:
            self.on_call_end(call, output)
        return None

    def _walk(self, call: Call, boundary: set) -> None:
        stack = list(call.output_nodes)
        seen = set(stack)
        while stack:
            node = stack.pop()
            owner = self.owner.get(node)
            if owner is not None and owner.index < call.index:
                continue  # created before this call started
            call.nodes.add(node)
            if owner is None:
                self.owner[node] = call
                call.own_nodes.append(node)
            for child, _ in node.next_functions:
                if child is None or child in seen or child in boundary:
                    continue
                seen.add(child)
                stack.append(child)
