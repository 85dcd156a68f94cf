"""Monitors: context managers that attach to a model through the engine's public hook API.

Each monitor holds the ``RemovableHandle`` of every hook it registers and removes them all when its
``with`` block exits, also on error. Monitors record plain data and never print.

Observing must not change what is observed, so no monitor uses module full backward hooks
(they wrap module inputs and outputs in identity nodes, which turns a missing input gradient
into zeros and makes in-place operations on module outputs fail). Per module call,
:class:`ModuleGradientHooks` sees instead

* ``grad_output`` through tensor hooks on the call's outputs, registered from a global forward
  hook (a hook on a tensor later modified in place still sees the gradient of the value the
  module returned);
* ``grad_input`` through post-hooks on the autograd nodes that the call created and that send
  gradient to its inputs (found by walking the graph from the outputs back to the inputs).

When one node both made an output and sends gradient to the inputs (a module of one operation),
its post-hook reports both, so that the node needs a single hook. :class:`GradientMonitor`, which
only reads, taps those nodes through the engine's :class:`~gradscope.engines.GradientNormTaps`
instead (on gradscope's engine, observers that cost less than a post-hook with its handle).
"""
from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any, Callable

from gradscope.engines import Engine, OpTrace, engine_of
from gradscope.monitor.records import ModuleRecord
from gradscope.monitor.tracing import LineTracer, NonFiniteKinds, encloses, hook_every_node, join_path, lines_of

_ACCUMULATE = "AccumulateGrad"
_NO_INPUTS: frozenset = frozenset()


class _HookOwner:
    """Base: keeps handles and removes them all on ``__exit__``, also on error.

    Args:
        model: the model observed; its engine is found from it unless ``engine`` is given.
        engine: the engine adapter.
    """

    def __init__(self, model: Any, engine: Engine | None = None) -> None:
        self.model = model
        self.engine = engine or engine_of(model)
        self._names = {id(module): name for name, module in model.named_modules()}
        self._handles: list[Any] = []

    def _attach(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> "_HookOwner":
        try:
            self._attach()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        """Remove every hook this monitor registered (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


class ModuleCall:
    """One call of one module of the model during a forward pass.

    Attributes:
        name: the module's dotted path ("" for the model itself).
        module: the module.
        edges: the ``(node, output_nr)`` graph edges of the call's non-leaf tensor arguments
            (emptied when the call returns).
        leaves: ``id`` of the call's leaf tensor arguments that require grad (emptied when the
            call returns).
        output_nonfinite: a ``grad_output`` tensor of this call held NaN/Inf (set by tracers).
        totals: what a monitor adds up for the call's module (set by :class:`GradientMonitor`).
    """

    __slots__ = ("name", "module", "edges", "leaves", "output_nonfinite", "totals")

    def __init__(self, name: str, module: Any) -> None:
        self.name = name
        self.module = module
        self.edges: set = set()
        self.leaves: set = set()
        self.output_nonfinite = False
        self.totals: Any = None


class ModuleGradientHooks(_HookOwner):
    """Base of the monitors that see each module call's ``grad_output`` and ``grad_input``.

    Subclasses override :meth:`_call_started`, :meth:`_grad_output` and :meth:`_grad_input`.
    ``_grad_input`` may return replacement gradients, which then flow upstream.

    Attributes:
        owner: ``node -> ModuleCall``, the innermost call that created each node (filled only
            when the class sets ``track_owners``).
    """

    track_owners = False

    def __init__(self, model: Any, engine: Engine | None = None) -> None:
        super().__init__(model, engine)
        self.owner: dict = {}
        self._stack: list[ModuleCall] = []

    def _attach(self) -> None:
        self._handles.append(self.engine.register_module_forward_pre_hook(self._forward_pre))
        self._handles.append(self.engine.register_module_forward_hook(self._forward_post, with_kwargs=True))

    # ---- subclass interface
    def _call_started(self, call: ModuleCall) -> None:
        """A call of a module of the model starts."""

    def _grad_output(self, call: ModuleCall, grad: Any) -> None:
        """The gradient of one output of ``call`` arrived (``hook(grad) -> None``); None when
        the node that made the output ran but the output itself got no gradient."""

    def _grad_input(self, call: ModuleCall, grads: list) -> list | None:
        """Gradients that ``call`` sends to its inputs, from one autograd node; return
        replacements (same length, same shapes) or None."""
        return None

    # ---- forward hooks
    def _forward_pre(self, module: Any, args: tuple) -> None:
        name = self._names.get(id(module))
        if name is None:
            return
        call = ModuleCall(name, module)
        for tensor in self.engine.tensors_in(args):
            if tensor.requires_grad:
                node = tensor.grad_fn
                if node is None:
                    call.leaves.add(id(tensor))
                else:
                    call.edges.add((node, tensor.output_nr))
        self._stack.append(call)
        self._call_started(call)

    def _forward_post(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        stack = self._stack
        if stack and stack[-1].module is module:
            call = stack.pop()
        else:
            call = self._pop(module)
            if call is None:
                return
        tensors_in = self.engine.tensors_in
        if kwargs:
            # keyword arguments are not given to global forward pre-hooks: their edges are taken here
            for tensor in tensors_in(kwargs):
                if tensor.requires_grad:
                    if tensor.grad_fn is None:
                        call.leaves.add(id(tensor))
                    else:
                        call.edges.add((tensor.grad_fn, tensor.output_nr))
        outputs = [t for t in tensors_in(output) if t.requires_grad]
        if not outputs:
            call.edges = call.leaves = _NO_INPUTS
            return
        boundary = self._walk(call, outputs) if call.edges or call.leaves or self.track_owners else None
        call.edges = call.leaves = _NO_INPUTS  # the walk was their only use: free them with the call's forward
        append = self._handles.append
        cls = type(self)  # (hooks are partials of the class's functions: no bound method per hook)
        if not boundary:
            for tensor in outputs:
                append(tensor.register_hook(partial(cls._grad_output, self, call)))
            return
        # An output made by a node that also sends gradient to the inputs (a leaf module's
        # single op) is seen by that node's post-hook: one hook instead of two.
        if len(outputs) == 1 and len(boundary) == 1:  # (the usual case, without the bookkeeping below)
            tensor = outputs[0]
            node = tensor.grad_fn
            slots = boundary.get(node)
            if slots is not None:
                self._hook_node(call, node, slots, (tensor.output_nr,))
                return
        output_slots: dict = {}
        for tensor in outputs:
            node = tensor.grad_fn
            if node in boundary:
                slots = output_slots.setdefault(node, [])
                output_nr = tensor.output_nr
                if output_nr not in slots:
                    slots.append(output_nr)
                    continue
            append(tensor.register_hook(partial(cls._grad_output, self, call)))
        for node, slots in boundary.items():
            self._hook_node(call, node, slots, tuple(output_slots.get(node, ())))

    def _hook_node(self, call: ModuleCall, node: Any, slots: tuple, output_slots: tuple) -> None:
        """Hook ``node``, made by ``call``: it sends gradient to the call's inputs through its input
        ``slots``, and its outputs ``output_slots`` are outputs of the call."""
        # (a partial of the class's function: no bound method per hook)
        self._handles.append(node.register_hook(partial(type(self)._node_hook, self, call, slots, output_slots)))

    def _pop(self, module: Any) -> ModuleCall | None:
        """The open call of ``module`` (calls above it, whose forward raised, are dropped)."""
        for index in range(len(self._stack) - 1, -1, -1):
            if self._stack[index].module is module:
                call = self._stack[index]
                del self._stack[index:]
                return call
        return None

    def _walk(self, call: ModuleCall, outputs: list) -> dict:
        """The nodes created by ``call`` that send gradient to its inputs: ``node -> slots``."""
        edges, leaves = call.edges, call.leaves
        owner = self.owner if self.track_owners else None
        boundary: dict = {}
        stack = []
        for tensor in outputs:
            node = tensor.grad_fn
            if node is not None and node not in stack and (node, tensor.output_nr) not in edges:
                stack.append(node)
        seen = set(stack)
        while stack:
            node = stack.pop()
            if owner is not None and node not in owner:
                owner[node] = call
            slots = ()
            index = -1
            for edge in node.next_functions:
                index += 1
                child = edge[0]
                if child is None:
                    continue
                if edge in edges:
                    slots += (index,)
                elif type(child).__name__ == _ACCUMULATE:
                    if leaves and id(child.variable) in leaves:
                        slots += (index,)
                elif child not in seen:
                    seen.add(child)
                    stack.append(child)
            if slots:
                boundary[node] = slots
        return boundary

    def _node_hook(self, call: ModuleCall, slots: tuple, output_slots: tuple, grad_inputs: tuple,
                   grad_outputs: tuple) -> tuple | None:
        for index in output_slots:
            if grad_outputs[index] is not None:
                self._grad_output(call, grad_outputs[index])
        replaced = self._grad_input(call, [grad_inputs[index] for index in slots])
        if replaced is None:
            return None
        result = list(grad_inputs)
        for index, grad in zip(slots, replaced):
            result[index] = grad
        return tuple(result)


class GradientMonitor(ModuleGradientHooks):
    """Record the gradient flowing through each module of ``model``.

    Per module (all its calls together): the number of calls, the norms of ``grad_output`` and
    ``grad_input`` and how many of their entries are NaN/Inf. Modules outside ``model`` are
    ignored. ``grad_input`` is None for a module whose inputs need no gradient.

    Example::

        with GradientMonitor(model) as monitor:
            loss_fn(model(x), y).backward()
        records = monitor.module_records()
    """

    def __init__(self, model: Any, engine: Engine | None = None) -> None:
        super().__init__(model, engine)
        # per module, in the order of first calls: [type name, calls, grad_output square, grad_input square,
        # non-finite entries]; every call of the module holds the same list (``ModuleCall.totals``)
        self._totals: dict[str, list] = {}
        self._taps = self.engine.gradient_norm_taps()

    def close(self) -> None:
        self._taps.close()
        super().close()

    def _call_started(self, call: ModuleCall) -> None:
        totals = self._totals.get(call.name)
        if totals is None:
            totals = self._totals[call.name] = [type(call.module).__name__, 0, None, None, 0]
        totals[1] += 1
        call.totals = totals

    def _grad_output(self, call: ModuleCall, grad: Any) -> None:
        if grad is not None:
            square = self.engine.squared_norms([grad])[0]
            _add_squares(call.totals, square, None, self.engine.nonfinite_count(grad) if not square < math.inf else 0)

    def _hook_node(self, call: ModuleCall, node: Any, slots: tuple, output_slots: tuple) -> None:
        # a monitor that never replaces gradients: the engine's taps add up the squared norms
        self._taps.add(node, output_slots, slots, partial(_add_squares, call.totals))

    def module_records(self) -> tuple[ModuleRecord, ...]:
        """One record per module called in forward, in the order of their first call."""
        sqrt = math.sqrt  # (norm_from_square, inlined: one record per module)
        return tuple([ModuleRecord(name, module_type, calls, None if out_sq is None else sqrt(out_sq),
                                   None if in_sq is None else sqrt(in_sq), nonfinite)
                      for name, (module_type, calls, out_sq, in_sq, nonfinite) in self._totals.items()])


def _add_squares(totals: list, output_square: float | None, input_square: float | None, nonfinite: int) -> None:
    """Add one node's squared gradient norms to a module's :class:`GradientMonitor` totals."""
    if output_square is not None:
        totals[2] = output_square if totals[2] is None else totals[2] + output_square
    if input_square is not None:
        totals[3] = input_square if totals[3] is None else totals[3] + input_square
    totals[4] += nonfinite


class ForwardNonFiniteTracer(_HookOwner):
    """Find where the first NaN/Inf appears in a forward pass.

    A global forward hook checks every module's inputs and output: the first module (in completion
    order) whose inputs are finite but whose output is not is the origin; later modules that receive
    a non-finite input only pass it on. When ``source_file`` (or ``follow``) is given, the lines of
    code in those files are traced as well (``sys.settrace``, only during this expensive re-run), so
    the exact line whose result first holds a non-finite tensor is known.

    When ``trace_ops`` is on, every operation's output is checked as well
    (``engine.trace_nonfinite_ops``): :attr:`ops` then holds every operation that produced NaN/Inf,
    its autograd node and the stack that called it, also outside the model file. :attr:`node` and
    :attr:`source_node` name the operation that made the first NaN/Inf of the tensor a module
    returned or a line left behind (``LogBackward0`` for ``log(x).mean()`` on one line, not
    ``MeanBackward0``), and :attr:`op` is that operation.

    Args:
        model: the model observed.
        source_file: the model file, whose lines are traced.
        engine: the engine adapter (found from the model when None).
        follow: ``follow(filename, first_line) -> bool``, the files to trace instead of
            ``source_file`` (e.g. every file of the user's, see
            :func:`~gradscope._tool.frames.is_user_file`).
        module_name: ``module_name(module) -> str | None``, the path of a module (None: outside
            the model); by default its path in ``model``.
        module_outputs_at_lines: attribute a module's non-finite output to the traced line that
            received it (by default only tensors the forward hook has not seen already count, so
            a line is found only for a value made by the traced code itself); arguments of a
            traced function are never attributed to it.
        trace_ops: check every operation's output where the engine can.
        allow_inf: ``allow_inf(module path) -> bool``: modules whose outputs may hold ``-inf`` by
            design; their outputs (also as the inputs of later modules) are checked with ``-inf``
            counted as finite, so NaN and ``+inf`` are still found.

    Attributes:
        module: dotted path of the originating module, or None.
        node: the autograd node of the operation that made the originating module's non-finite
            output (``"LogBackward0"``), else of that output, if any.
        ops: the non-finite operations (an ``OpTrace``), or None when the engine cannot tell.
        op: the operation (a ``NonFiniteOp`` of ``ops``) that made the first NaN/Inf of the tensor
            reported (:attr:`node`, else :attr:`source_node`), or None.
        kind: ``"nan"`` or ``"inf"``.
        parameter: the first of the originating module's own parameters that is already non-finite
            (its dotted path), or None; ``parameter_kind`` is its kind.
        source: ``(file, line)`` of the first line that produced a non-finite tensor, or None.
        propagated: modules that received a non-finite input.
    """

    def __init__(self, model: Any, source_file: Path | None = None, engine: Engine | None = None, *,
                 follow: Callable[[str, int], bool] | None = None,
                 module_name: Callable[[Any], str | None] | None = None,
                 module_outputs_at_lines: bool = False, trace_ops: bool = True,
                 allow_inf: Callable[[str | None], bool] | None = None) -> None:
        super().__init__(model, engine)
        self._allow_inf = allow_inf
        self._allowed: dict[int, Any] = {}
        if follow is None and source_file is not None:
            follow = lines_of(source_file)
        self._module_name = module_name or (lambda module: self._names.get(id(module)))
        self._module_outputs_at_lines = module_outputs_at_lines
        self._trace_ops = trace_ops
        self.module: str | None = None
        self.module_found = False
        self.node: str | None = None
        self.kind: str | None = None
        self.source: tuple[str, int] | None = None
        self.source_node: str | None = None
        self.source_kind: str | None = None
        self.parameter: str | None = None
        self.parameter_kind: str | None = None
        self.propagated: list[str] = []
        self.ops: OpTrace | None = None
        self.op: OpTrace | None = None
        self._ops_context: Any = None
        self._found_tensors: list = []  # [(attribute, tensor)]: the tensors node and source_node name
        self._kinds = NonFiniteKinds(self.engine)
        self._arguments: dict[int, Any] = {}
        self._lines = LineTracer(follow, self._attribute, self._entered) if follow is not None else None

    @property
    def parameter_nonfinite(self) -> bool:
        """Whether one of the originating module's own parameters is already non-finite."""
        return self.parameter is not None

    def _attach(self) -> None:
        self._handles.append(self.engine.register_module_forward_hook(self._on_forward))
        if self._trace_ops:
            self._ops_context = self.engine.trace_nonfinite_ops()
            self.ops = self._ops_context.__enter__()
        if self._lines is not None:
            self._lines.__enter__()

    def close(self) -> None:
        if self._lines is not None:
            self._lines.close()
        if self._ops_context is not None:
            context, self._ops_context = self._ops_context, None
            context.__exit__(None, None, None)
            self._name_operations()
        super().close()

    def _name_operations(self) -> None:
        """Name the operation that made the first NaN/Inf instead of the later operation whose
        output was found (on the same line, or as the module's output), when one led to the other."""
        if self.ops is not None:
            for attribute, tensor in self._found_tensors:
                origin = self.ops.origin(tensor)
                if origin is not None and origin.node is not None:
                    setattr(self, attribute, origin.node)
                    self.op = self.op or origin
        self._found_tensors.clear()

    def _on_forward(self, module: Any, args: tuple, output: Any) -> None:
        name = self._module_name(module)
        if self._allow_inf is not None and self._allow_inf(name):
            for tensor in self.engine.tensors_in(output):
                self._allowed[id(tensor)] = tensor
        out_kind, tensor = self._first_kind(output)
        if out_kind is None:
            return
        in_kind, _ = self._first_kind(args)
        bad_parameter = next(((parameter_name, kind) for parameter_name, parameter
                              in module.named_parameters(recurse=False)
                              if (kind := self._kinds.kind(parameter)) is not None), None)
        if not self.module_found and in_kind is None:
            self.module_found = True
            self.module = name
            self.kind = out_kind
            self.node = self.engine.node_name(tensor)
            self._found_tensors.append(("node", tensor))
            if bad_parameter is not None:
                self.parameter = join_path(name or "", bad_parameter[0])
                self.parameter_kind = bad_parameter[1]
        elif self.module_found and name is not None and not encloses(name, self.module):
            self.propagated.append(name)

    def _first_kind(self, value: Any) -> tuple[str | None, Any]:
        """Like ``NonFiniteKinds.first``, with the ``-inf`` of allowed modules' outputs counted as finite."""
        if not self._allowed:
            return self._kinds.first(value)
        for tensor in self.engine.tensors_in(value):
            if self._allowed.get(id(tensor)) is tensor:
                kind = self.engine.nonfinite_kind(tensor.detach().nan_to_num(nan=math.nan, posinf=math.inf,
                                                                              neginf=0.0))
            else:
                kind = self._kinds.kind(tensor)
            if kind is not None:
                return kind, tensor
        return None, None

    # ---- line tracing (sys.settrace), only for the followed files
    def _entered(self, value: Any) -> None:
        for tensor in self.engine.tensors_in(value):  # arguments are not attributed to this frame
            self._arguments[id(tensor)] = tensor

    def _attribute(self, value: Any, filename: str, line: int) -> None:
        if self.source is not None:
            return
        for tensor in self.engine.tensors_in(value):
            if self._arguments.get(id(tensor)) is tensor or \
                    (not self._module_outputs_at_lines and self._kinds.known(tensor)):
                continue
            kind = self._kinds.kind(tensor)
            if kind == "inf" and self._allow_inf is not None and self.engine.nonfinite_kind(
                    tensor.detach().nan_to_num(nan=math.nan, posinf=math.inf, neginf=0.0)) is None:
                continue  # only -inf: a line cannot tell whether an allowed module made it
            if kind is not None:
                self.source = (filename, line)
                self.source_node = self.engine.node_name(tensor)
                self.source_kind = kind
                self._found_tensors.append(("source_node", tensor))
                return


class BackwardNonFiniteTracer(ModuleGradientHooks):
    """Find the autograd node, and the module, whose backward first produces a NaN/Inf gradient.

    Attach it before the forward pass, then call :meth:`watch` with the loss before backward.
    Every node of the graph gets a post-hook: the first node (in execution order) whose incoming
    gradients are finite but whose outgoing ones are not produced the first NaN/Inf (checking Inf
    too finds ``sqrt(0)``'s Inf before a later ``inf * 0`` turns it into NaN). Its module is the
    innermost module call that created it. Per module call, the first module whose ``grad_output``
    is finite but whose ``grad_input`` is not is recorded too; modules after it only pass it on.

    Attributes:
        node: name of the producing node, or None.
        node_module: dotted path of the module that created it (None: outside the model's modules).
        node_trace: ``[(file, line), ...]`` where the node was created (run the forward pass inside
            ``engine.record_creation_traces()`` to have it).
        module: the first module whose backward turned finite ``grad_output`` into non-finite
            ``grad_input``; ``module_found`` tells whether there was one.
        kind: ``"nan"`` or ``"inf"`` of the first non-finite gradient.
        propagated: modules whose ``grad_input`` was non-finite after the origin.
    """

    track_owners = True

    def __init__(self, model: Any, engine: Engine | None = None) -> None:
        super().__init__(model, engine)
        self.module: str | None = None
        self.module_found = False
        self.kind: str | None = None
        self.node: str | None = None
        self.node_module: str | None = None
        self.node_owned = False
        self.node_trace: list[tuple[str, int]] = []
        self.propagated: list[str] = []

    def watch(self, loss: Any) -> None:
        """Put a post-hook on every node of the graph below ``loss``."""
        self._handles.extend(hook_every_node([loss.grad_fn], self._check_node))

    def _first_kind(self, grads: Any) -> str | None:
        for grad in grads:
            if grad is not None:
                kind = self.engine.nonfinite_kind(grad)
                if kind is not None:
                    return kind
        return None

    def _check_node(self, node: Any, grad_inputs: tuple, grad_outputs: tuple) -> None:
        if self.node is not None:
            return
        kind = self._first_kind(grad_inputs)
        if kind is None or self._first_kind(grad_outputs) is not None:
            return
        self.node = node.name()
        self.kind = self.kind or kind
        call = self.owner.get(node)
        self.node_owned = call is not None
        self.node_module = call.name if call is not None else None
        self.node_trace = self.engine.node_trace(node)

    def _grad_output(self, call: ModuleCall, grad: Any) -> None:
        if grad is not None and not call.output_nonfinite and self.engine.nonfinite_kind(grad) is not None:
            call.output_nonfinite = True

    def _grad_input(self, call: ModuleCall, grads: list) -> None:
        kind = self._first_kind(grads)
        if kind is None:
            return None
        if not self.module_found and not call.output_nonfinite:
            self.module_found = True
            self.module = call.name
            self.kind = self.kind or kind
        elif self.module_found and not encloses(call.name, self.module) and call.name not in self.propagated:
            self.propagated.append(call.name)
        return None
