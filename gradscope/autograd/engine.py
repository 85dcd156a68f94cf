"""The backward engine: count the gradients each node will receive, then run ready nodes from a
heap keyed on descending sequence number (leaf accumulators first, ties in readiness order).
No recursion anywhere, and no structure over the whole graph: the count walks the graph newest
node first, remembering only the nodes queued, and keeps a count only for the nodes that
receive several gradients (and the accumulators), so that a chain of a million nodes costs no
million-entry dict."""
from __future__ import annotations

import contextlib
import heapq
import itertools
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from gradscope.autograd import anomaly, grad_mode
from gradscope.autograd.node import _FREED, AccumulateGrad, Node, make_edge, saved_tensor_hooks_stack
from gradscope.autograd.tensor import Tensor

_active_tasks: list["GraphTask"] = []


class GraphTask:
    """State of one backward call, visible to hooks through ``current_task()``."""

    __slots__ = ("roots", "reachable", "relevant", "callbacks")

    def __init__(self, roots: list) -> None:
        self.roots = roots
        self.reachable: dict | None = None  # every node reached, listed on the first question
        self.relevant: set | None = None
        self.callbacks: list = []

    def will_execute(self, node: Node) -> bool:
        """Whether ``node`` runs in this backward call: it is reached from the roots and, when the
        call has inputs (``autograd.grad``, ``backward(inputs=...)``), on a path to one of them."""
        if self.relevant is not None:
            return node in self.relevant
        if self.reachable is None:
            self.reachable = _count_dependencies(self.roots, every_node=True)
        return node in self.reachable


def current_task() -> GraphTask | None:
    """The innermost backward call in progress, or None outside backward."""
    return _active_tasks[-1] if _active_tasks else None


def queue_callback(callback: Callable[[], None]) -> None:
    """Run ``callback()`` once the current backward call has finished all its nodes."""
    if not _active_tasks:
        raise RuntimeError("Final callbacks can only be installed during backward pass.")
    _active_tasks[-1].callbacks.append(callback)


def _as_tuple(tensors: Any) -> tuple:
    if tensors is None:
        return ()
    if isinstance(tensors, Tensor):
        return (tensors,)
    return tuple(tensors)


def _root_grads(outputs: tuple, grads: tuple, what: str) -> list:
    if len(grads) == 0:
        grads = (None,) * len(outputs)
    if len(grads) != len(outputs):
        raise RuntimeError(f"{what}: got {len(grads)} gradients for {len(outputs)} outputs")
    arrays = []
    for i, (out, g) in enumerate(zip(outputs, grads)):
        if not isinstance(out, Tensor):
            raise TypeError(f"{what}: expected Tensor outputs, got {type(out).__name__}")
        if not out.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if out._data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs "
                                   f"(output {i} has shape {list(out.shape)})")
            arrays.append(np.ones(out._data.shape, dtype=out._data.dtype))
        else:
            data = g._data if isinstance(g, Tensor) else np.asarray(g, dtype=out._data.dtype)
            if data.shape != out._data.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {list(data.shape)} "
                                   f"and output[{i}] has a shape of {list(out._data.shape)}.")
            arrays.append(np.array(data, dtype=out._data.dtype))
    return arrays


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False, grad_variables: Any = None, inputs: Any = None) -> None:
    """Accumulate into ``.grad`` of the leaves the gradient of ``tensors``.

    Args:
        tensors: output tensor(s) to differentiate.
        grad_tensors: the vector(s) of the vector-Jacobian product; None for scalars.
        retain_graph: keep saved tensors for another backward (defaults to create_graph).
        create_graph: unsupported (raises NotImplementedError).
        inputs: if given, only these tensors accumulate gradient.
    """
    if create_graph:
        raise NotImplementedError("gradscope does not support create_graph=True (higher-order gradients)")
    outputs = _as_tuple(tensors)
    grads = _as_tuple(grad_tensors if grad_tensors is not None else grad_variables)
    roots = _root_grads(outputs, grads, "backward")
    input_tensors = _as_tuple(inputs)
    if inputs is not None and not input_tensors:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    capture = None
    if input_tensors:
        for t in input_tensors:
            if not t.requires_grad:
                raise RuntimeError("One of the differentiated Tensors does not require grad")
        capture = [(make_edge(t), t) for t in input_tensors]
    captured = run_backward(outputs, roots, bool(retain_graph), capture, accumulate=True)
    for t, g in zip(input_tensors, captured):
        if t.grad_fn is not None and g is not None:
            t._grad = Tensor._make(np.array(g)) if t._grad is None else Tensor._make(t._grad._data + g)


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, only_inputs: bool = True, allow_unused: bool | None = None,
         is_grads_batched: bool = False, materialize_grads: bool = False) -> tuple:
    """Return the gradients of ``outputs`` w.r.t. ``inputs`` without touching leaf ``.grad``."""
    if create_graph:
        raise NotImplementedError("gradscope does not support create_graph=True (higher-order gradients)")
    if is_grads_batched:
        raise NotImplementedError("gradscope does not support is_grads_batched=True")
    if allow_unused is None:
        allow_unused = materialize_grads
    if materialize_grads and not allow_unused:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, "
                         "but got: allow_unused=False.")
    outs = _as_tuple(outputs)
    ins = _as_tuple(inputs)
    roots = _root_grads(outs, _as_tuple(grad_outputs), "grad")
    for t in ins:
        if not isinstance(t, Tensor):
            raise TypeError(f"grad: expected Tensor inputs, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    capture = [(make_edge(t), t) for t in ins]
    results = run_backward(outs, roots, bool(retain_graph), capture, accumulate=False)
    final = []
    for i, (g, t) in enumerate(zip(results, ins)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(f"The differentiated Tensor at index {i} appears to not have been used "
                                   "in the graph. Set allow_unused=True if this is the desired behavior.")
            final.append(Tensor._make(np.zeros_like(t._data)) if materialize_grads else None)
        else:
            final.append(Tensor._make(g))
    return tuple(final)


def _count_dependencies(root_nodes: list, every_node: bool = False) -> dict:
    """How many gradients each node reachable from the roots receives (one per edge from a
    reachable node, plus a root's own), for every leaf accumulator and every node receiving
    more than one: any other reachable node receives one (``every_node`` lists it as well).

    Nodes are visited newest first (descending sequence number). A node's consumers were all
    created after it, so when it is visited they all have been: nothing but the queue needs
    remembering, and a node queued by several consumers comes out of it that many times in a row.
    """
    deps: dict = {}
    heap: list = []  # (-sequence number, push counter, node) of the queued nodes
    heappush, heappop = heapq.heappush, heapq.heappop
    for node in root_nodes:
        if node.__class__ is AccumulateGrad:
            deps[node] = 1
        else:
            heappush(heap, (-node._seq, len(heap), node))
    pushed = len(heap)
    while heap:
        fn = heappop(heap)[2]
        while heap and heap[0][2] is fn:  # queued by several consumers
            heappop(heap)
            deps[fn] = deps.get(fn, 1) + 1
        while True:  # walk on down the newest input while it is newer than every queued node
            if every_node:
                deps.setdefault(fn, 1)
            if fn._edges is None:  # one input, stored flat (no edge tuple to build)
                newest = fn._in
                if newest.__class__ is AccumulateGrad:
                    deps[newest] = deps.get(newest, 0) + 1
                    break
            else:
                newest = None  # the newest input that is no accumulator; the others are queued
                for child, _ in fn._edges:
                    if child is None:
                        continue
                    if child.__class__ is AccumulateGrad:
                        deps[child] = deps.get(child, 0) + 1
                    elif newest is None:
                        newest = child
                    elif child is newest:  # a second edge to the same input
                        deps[child] = deps.get(child, 1) + 1
                    else:
                        if child._seq > newest._seq:
                            child, newest = newest, child
                        heappush(heap, (-child._seq, pushed, child))
                        pushed += 1
                if newest is None:
                    break
            if heap and -heap[0][0] >= newest._seq:  # a queued node comes first
                heappush(heap, (-newest._seq, pushed, newest))
                pushed += 1
                break
            fn = newest  # (not queued: it is newer than every queued node)
    return deps


def _restrict(root_nodes: list, deps: dict, targets: set) -> tuple[set, dict]:
    """The nodes on a path to a target (with inputs given, only those run) and how many
    gradients each of them and each target receives along such paths."""
    parents: dict = {}
    for fn in deps:
        for child, _ in fn._next:
            if child is not None:
                parents.setdefault(child, []).append(fn)
    needed: set = set()
    stack = [t for t in targets]
    while stack:
        fn = stack.pop()
        for parent in parents.get(fn, ()):
            if parent not in needed:
                needed.add(parent)
                stack.append(parent)
    relevant = needed | targets
    restricted = {fn: 0 for fn in relevant}
    for fn in root_nodes:
        if fn in relevant:
            restricted[fn] += 1  # its own gradient
    for fn in needed:
        for child, _ in fn._next:
            if child is not None and child in relevant:
                restricted[child] += 1
    return needed, restricted


def _wrap(grads: Sequence) -> tuple:
    """The gradient arrays ``grads`` as tensors without history (None stays None), for hooks."""
    out = []
    for g in grads:
        if g is not None:
            t = object.__new__(Tensor)  # (Tensor._make, inlined)
            t._data = g
            t.requires_grad = False
            t.grad_fn = None
            t._output_nr = 0
            t._vc = None
            g = t
        out.append(g)
    return tuple(out)


def _check_hook_result(new: Any, old: np.ndarray, what: str, fn: Node | None = None) -> np.ndarray:
    """The array of a hook's replacement gradient ``new``, checked against ``old``; ``what`` names
    the hook in messages (``"tensor"``; ``"hook"`` with ``fn``: a hook of node ``fn``)."""
    if new.__class__ is Tensor or isinstance(new, Tensor):
        data = new._data
        if data.shape == old.shape and data.dtype == old.dtype:
            return data
    where = what if fn is None else f"{what} of {fn.name()}"
    if not isinstance(new, Tensor):
        raise TypeError(f"{where} hook returned an invalid value: expected a Tensor or None, got "
                        f"{type(new).__name__}")
    if data.shape != old.shape:
        raise RuntimeError(f"{where} hook changed the size of the gradient: expected {list(old.shape)}, "
                           f"got {list(data.shape)}")
    raise RuntimeError(f"{where} hook changed the type of the gradient: expected {old.dtype}, got "
                       f"{data.dtype}")


def _tensor_hook_result(hook: Callable, grad: np.ndarray | None) -> np.ndarray | None:
    """Call one tensor hook. A node that runs calls the hooks of every one of its outputs, with
    None for an output that got no gradient (as PyTorch: the unused half of a ``split``); such a
    hook may not return a gradient."""
    if grad is None:
        if hook(None) is not None:
            raise RuntimeError("can't replace a None gradient with a non-None value")
        return None
    result = hook(Tensor._make(grad))
    return grad if result is None else _check_hook_result(result, grad, "tensor")


def _run_tensor_hooks(hooks: dict, grad: np.ndarray | None) -> np.ndarray | None:
    for hook in tuple(hooks.values()):
        grad = _tensor_hook_result(hook, grad)
    return grad


def _run_slot_hooks(slot_hooks: dict, buf: list) -> None:
    """Tensor hooks of a node's output slots, in registration order across slots (as PyTorch)."""
    if len(slot_hooks) == 1:
        for slot, hooks in slot_hooks.items():
            if hooks:
                buf[slot] = _run_tensor_hooks(hooks, buf[slot])
        return
    entries = sorted((handle_id, slot, hook) for slot, hooks in slot_hooks.items()
                     for handle_id, hook in hooks.items())
    for _, slot, hook in entries:
        buf[slot] = _tensor_hook_result(hook, buf[slot])


def _replace_tuple(result: Any, old: list, fn: Node, what: str, expected: list) -> list:
    if not isinstance(result, tuple):
        raise TypeError(f"{what} of {fn.name()}: expected tuple of Tensors or None, got "
                        f"{type(result).__name__}")
    if len(result) != len(old):
        raise RuntimeError(f"{what} of {fn.name()} returned an incorrect number of values "
                           f"(got {len(result)}, but expected {len(old)})")
    new = []
    for value, previous, shape in zip(result, old, expected):
        if value is None:
            new.append(None)
        elif previous is None:
            if not isinstance(value, Tensor):
                raise TypeError(f"{what} of {fn.name()} returned an invalid value: expected a Tensor or None, "
                                f"got {type(value).__name__}")
            if shape is not None and value._data.shape != shape:
                raise RuntimeError(f"{what} of {fn.name()} changed the size of the gradient: expected "
                                   f"{list(shape)}, got {list(value._data.shape)}")
            new.append(value._data)
        else:
            new.append(_check_hook_result(value, previous, what, fn))
    return new


def _unique_nodes(edges: list) -> list:
    """The nodes of ``edges``, each once, in order."""
    nodes: list = []
    for node, _ in edges:
        if node not in nodes:
            nodes.append(node)
    return nodes


class _Pass:
    """What one backward pass computes: how many gradients each node receives and, when the pass
    captures gradients (``backward(inputs=...)``, ``autograd.grad``), where it reads them and
    which nodes it must run to get there; and its queue of ready nodes, holding the roots'
    gradients.

    ``deps`` counts the gradients of the leaf accumulators and of the nodes that receive several;
    a node it does not list receives one. With a capture, only the ``relevant`` nodes (those on a
    path to a captured input, and the inputs' own) get gradients, ``needed`` are the ones that
    compute (a captured input's own node computes only when another target needs it, or when it
    is a leaf that ``backward(inputs=...)`` accumulates into), and ``captured`` collects one
    gradient per capture entry."""

    __slots__ = ("task", "deps", "relevant", "needed", "capture_at", "captured", "accumulate",
                 "stored", "check_anomaly", "general", "queue")

    def __init__(self, root_edges: list, root_grads: list, capture: list | None, accumulate: bool) -> None:
        root_nodes = _unique_nodes(root_edges)
        self.task = task = GraphTask(root_nodes)
        self.relevant = self.needed = None
        self.captured: list = []
        self.capture_at: dict = {}  # node -> [(output number, index into captured)]
        self.accumulate = accumulate
        self.stored: dict = {}  # id -> array of every gradient stored into a .grad by this pass
        self.check_anomaly = anomaly.state.enabled
        self.general = capture is not None or self.check_anomaly  # every node takes the hooked path
        if capture is None:
            self.deps = _count_dependencies(root_nodes)
        else:
            self._restrict_to(root_nodes, capture)
        self.queue = _ReadyQueue(self.deps, self.relevant)
        self.queue.receive_roots(root_nodes, root_edges, root_grads)

    def _restrict_to(self, root_nodes: list, capture: list) -> None:
        """Count the gradients of the nodes on a path to a captured input only."""
        task = self.task
        reachable = task.reachable = _count_dependencies(root_nodes, every_node=True)
        self.captured = [None] * len(capture)
        for index, ((node, nr), _tensor) in enumerate(capture):
            self.capture_at.setdefault(node, []).append((nr, index))
        targets = {node for node in self.capture_at if node in reachable}
        needed, self.deps = _restrict(root_nodes, reachable, targets)
        self.relevant = task.relevant = needed | targets
        if self.accumulate:  # backward(inputs=...) accumulates into the leaves it captures
            needed = needed | {n for n in targets if isinstance(n, AccumulateGrad)}
        self.needed = needed

    def _run_node(self, fn: Node, buf: list) -> tuple | None:
        """Run ``fn`` on the general path (a node with hooks or several outputs, a leaf's
        accumulator, a user-defined Function, or any node of a pass that captures or checks for
        anomalies) with all its hooks, in PyTorch's order: the tensor hooks of each output slot,
        retain_grad, capture, node pre-hooks, compute (for a leaf's accumulator: accumulate into
        ``.grad``, then its post-accumulate hooks), node post-hooks; then the engine adapter's
        observers. Returns the gradients of its inputs; None: nothing to hand on (a leaf's
        accumulator without hooks, or a node this pass skips)."""
        if fn.__class__ is AccumulateGrad and not (self.general or fn._extras is not None
                                                   or fn.variable._hooks):
            _accumulate(fn, buf[0], False, self.stored)  # no hooks: accumulate, post-accumulate hooks
            return None
        is_acc = type(fn) is AccumulateGrad
        extras = fn._extras
        if len(buf) < len(fn._meta):
            buf += [None] * (len(fn._meta) - len(buf))
        # tensor hooks of each output slot, then retain_grad capture
        exposed = False
        if is_acc:
            hooks = fn.variable._hooks
            if hooks:
                buf[0] = _run_tensor_hooks(hooks, buf[0])
                exposed = True
        elif extras is not None and extras.tensor_hooks is not None:
            _run_slot_hooks(extras.tensor_hooks, buf)
        if extras is not None and extras.retain is not None:
            _retain_grads(extras.retain, buf)
        captured_only = False  # a target of backward(inputs=...) that nothing else needs
        if self.capture_at and fn in self.capture_at:
            for nr, index in self.capture_at[fn]:
                self.captured[index] = buf[nr]
            if self.needed is not None and fn not in self.needed:
                if not self.accumulate or extras is None or not (extras.pre_hooks or extras.post_hooks):
                    return None
                captured_only = True  # backward() still runs its node hooks (as PyTorch), no compute
        # node pre-hooks
        if extras is not None and extras.pre_hooks:
            exposed = True
            for hook in tuple(extras.pre_hooks.values()):
                result = hook(_wrap(buf))
                if result is not None:
                    buf = _replace_tuple(result, buf, fn, "hook", [shape for shape, _ in fn._meta])
        # compute (AccumulateGrad also runs post-accumulate hooks)
        if is_acc:
            if self.accumulate:
                # the post-hooks see the buffer that became ``.grad``, if it did (as PyTorch)
                buf[0] = _accumulate(fn, buf[0], exposed, self.stored)
            grads_in = ()
        elif captured_only or (buf[0] is None if len(buf) == 1 else all(g is None for g in buf)):
            grads_in = (None,) * len(fn._next)
        else:
            grads_in = fn.backward(*buf)
            if fn._single_input:  # the gradient of the first input; any other input gets None
                grads_in = (grads_in,) if fn._edges is None and not fn._scalar_operand else \
                    (grads_in,) + (None,) * (len(fn._next) - 1)
        # node post-hooks (each sees the same tensors until one returns replacements)
        if extras is not None and extras.post_hooks:
            outs = _wrap(buf)
            ins = _wrap(grads_in)
            for hook in tuple(extras.post_hooks.values()):
                result = hook(ins, outs)
                if result is not None:
                    expected = [None if child is None else child._meta[nr][0] for child, nr in fn._next]
                    grads_in = _replace_tuple(result, grads_in, fn, "hook", expected)
                    ins = _wrap(grads_in)
        if captured_only:
            return None
        # observers (the engine adapter's statistics): the final gradients, as arrays
        if extras is not None and extras.observers:
            for observer in tuple(extras.observers):
                observer(grads_in, buf)
        return grads_in

    def _run_checked(self, fn: Node, buf: list) -> tuple | None:
        """``_run_node`` in anomaly mode: check the gradients it computes, and name the node that
        raised in a warning."""
        try:
            grads_in = self._run_node(fn, buf)
            if grads_in is not None:
                anomaly.check_node(fn, grads_in)
        except Exception:
            anomaly.warn_error_in(fn)
            raise
        return grads_in

class _ReadyQueue:
    """The nodes whose gradients have all arrived, and the buffers (one slot per output) of the
    nodes still waiting for some.

    Ready nodes wait in a heap keyed on descending sequence number, ties in readiness order. The
    one the heap would give next is often known as soon as it becomes ready: its sequence number
    is above every queued one. ``run_backward`` then keeps it in a slot of its own (the *ready
    slot*) instead of pushing and popping it; in a chain every node goes through that slot."""

    __slots__ = ("heap", "counter", "deps", "relevant", "waiting", "remaining", "owned")

    def __init__(self, deps: dict, relevant: set | None) -> None:
        self.heap: list = []  # (-sequence number, counter, node, its buffer)
        self.counter = itertools.count()
        self.deps = deps
        self.relevant = relevant
        self.waiting: dict = {}  # node -> its buffer, for the nodes still waiting for gradients
        self.remaining: dict = {}  # node -> how many of its gradients are still to come
        self.owned: set = set()  # (node, slot) of the buffer slots holding a sum the engine allocated

    def receive_roots(self, root_nodes: list, root_edges: list, root_grads: list) -> None:
        """Deliver the gradients the caller gave for the outputs (summed where an output appears
        twice); a root node that receives no other gradient is queued."""
        waiting, relevant = self.waiting, self.relevant
        for (node, nr), g in zip(root_edges, root_grads):
            if relevant is not None and node not in relevant:
                continue
            buf = waiting.get(node)
            if buf is None:
                buf = waiting[node] = [None] * len(node._meta)
            buf[nr] = g if buf[nr] is None else buf[nr] + g
        for node in root_nodes:
            if node in waiting:
                count = self.deps.get(node, 1)
                if count == 1:
                    heapq.heappush(self.heap, (-node._seq, next(self.counter), node, waiting.pop(node)))
                else:  # its root gradient has arrived
                    self.remaining[node] = count - 1

    def add(self, child: Node, nr: int, g: np.ndarray | None, count: int) -> list | None:
        """Add ``g`` into slot ``nr`` of the buffer of ``child``, one of the ``count`` gradients
        it receives. Returns the buffer once the last has arrived, else None.

        The first sum in a slot is a new array, which the engine owns, so later gradients are
        added into it in place; a gradient as a node returned it may be held elsewhere (by a
        saved tensor, a hook) and is never summed into."""
        waiting = self.waiting
        left = self.remaining.get(child, count) - 1
        cbuf = waiting.get(child)
        if cbuf is None:
            cbuf = waiting[child] = [None] * len(child._meta)
            cbuf[nr] = g
        elif g is not None:
            old = cbuf[nr]
            if old is None:
                cbuf[nr] = g
            elif (child, nr) in self.owned:
                np.add(old, g, old)
            else:
                total = old + g
                if total.__class__ is np.ndarray and total.ndim:
                    self.owned.add((child, nr))
                else:
                    total = np.asarray(total)
                cbuf[nr] = total
        if left:
            self.remaining[child] = left
            return None
        del waiting[child]
        return cbuf

@contextlib.contextmanager
def _backward_mode(task: GraphTask) -> Iterator[None]:
    """The state a backward pass runs in, put back when it ends: grad mode off, ``task`` the
    current task, no numpy warnings (IEEE results, inf and nan, are what the user asked for),
    and the saved-tensor hooks stack as it was before (as PyTorch)."""
    grad_enabled = grad_mode._state.enabled
    saved_hooks = saved_tensor_hooks_stack[:]
    grad_mode._state.enabled = False
    _active_tasks.append(task)
    try:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            yield
    finally:
        _active_tasks.pop()
        grad_mode._state.enabled = grad_enabled
        if saved_tensor_hooks_stack != saved_hooks:
            saved_tensor_hooks_stack[:] = saved_hooks


def run_backward(outputs: tuple, root_grads: list, keep_graph: bool, capture: list | None,
                 accumulate: bool) -> list:
    """Run one backward pass. Returns the captured gradients (one per ``capture`` entry).

    The schedule: count the gradients each node will receive; deliver the roots' gradients;
    then, while a node is ready, take the one with the highest sequence number, run it (with
    its hooks, if it has any) and deliver the gradients it computes to its inputs.

    The per-node work of the plain case is written out in the loop rather than called: running
    a node without hooks, the hand-over of its gradient to a one-input node that is ready at
    once and runs next (a chain), and the delivery of the gradients of a node with several
    inputs. A helper call per node costs several percent of a pass through a chain of tiny ops,
    and about 2% of one through an RNN (the ``chain`` and ``rnn`` workloads of
    tests/benchmarks/bench_engine.py). The rest is in helpers: nodes with hooks
    (``_Pass._run_node``), sums of several gradients (``_ReadyQueue.add``), ``_conform``."""
    run = _Pass([make_edge(t) for t in outputs], root_grads, capture, accumulate)
    deps, relevant, general = run.deps, run.relevant, run.general
    run_hooked = run._run_checked if run.check_anomaly else run._run_node
    queue, freed = run.queue, _FREED
    heap, counter, add, heappush, heappop = queue.heap, queue.counter, queue.add, heapq.heappush, heapq.heappop
    ready = ready_buf = None  # the ready slot: the next node to run and its buffer
    with _backward_mode(run.task):
        while True:
            if ready is not None:
                fn, buf = ready, ready_buf
                ready = None
            elif heap:
                _, _, fn, buf = heappop(heap)
            else:
                break
            if general or fn._slow or fn._extras is not None:
                grads_in = run_hooked(fn, buf)
                if grads_in is None:
                    continue
            else:  # one output, no hooks of any kind
                g = buf[0]
                if fn._single_input:
                    grads_in = None  # its one gradient is ``g``
                    if g is not None:
                        g = fn.backward(g)
                elif g is None:
                    grads_in = (None,) * len(fn._next)
                else:
                    grads_in = fn.backward(g)
            if not keep_graph and fn._saved is not None:
                fn._saved = freed
                fn._vcs = ()
            if grads_in is None:  # (a plain one-input node)
                child, nr = fn._in, fn._in_nr
                if child is None:
                    continue
                if (nr == 0 and relevant is None and child not in deps
                        and (not heap or -heap[0][0] < child._seq)):
                    # the chain hand-over: its only gradient, and it runs next
                    if g is not None:
                        shape, dtype = child._meta[0]
                        if g.shape != shape or g.dtype is not dtype:
                            g = _conform(fn, g, shape, dtype)
                    buf[0] = g  # (the node's one-slot buffer, which it no longer needs)
                    ready, ready_buf = child, buf
                    continue
                grads_in, edges = (g,), ((child, nr),)
            else:  # (a one-input node stored flat has no edge tuple)
                edges = fn._next if fn._edges is None else fn._edges
            # deliver each gradient to its input node, which is ready once it has all of them
            for (child, nr), g in zip(edges, grads_in):
                if child is None or (relevant is not None and child not in relevant):
                    continue
                if g is not None:
                    shape, dtype = child._meta[nr]
                    if g.shape != shape or g.dtype is not dtype:
                        g = _conform(fn, g, shape, dtype)
                count = deps.get(child, 1)
                if count == 1:  # the child's only gradient
                    if nr == 0:
                        cbuf = [g]  # (the general path pads the buffer of a several-output node)
                    else:
                        cbuf = [None] * len(child._meta)
                        cbuf[nr] = g
                else:
                    cbuf = add(child, nr, g, count)
                    if cbuf is None:  # more gradients to come
                        continue
                # the child is ready: it takes the ready slot unless a queued node comes first
                seq = child._seq
                if ready is None:
                    if heap and -heap[0][0] >= seq:
                        heappush(heap, (-seq, next(counter), child, cbuf))
                    else:
                        ready, ready_buf = child, cbuf
                elif seq > ready._seq:
                    heappush(heap, (-ready._seq, next(counter), ready, ready_buf))
                    ready, ready_buf = child, cbuf
                else:
                    heappush(heap, (-seq, next(counter), child, cbuf))
        for callback in run.task.callbacks:
            callback()
    return run.captured


def _accumulate(fn: AccumulateGrad, grad: np.ndarray | None, exposed: bool, stored: dict) -> np.ndarray | None:
    """The compute step of a leaf's accumulator: add ``grad`` into ``.grad``, then run the leaf's
    post-accumulate hooks, also when no gradient came (as PyTorch). ``exposed``: a hook has
    seen ``grad`` (and may have kept it). Returns the array that became ``.grad`` if there was
    none before, else ``grad``."""
    variable = fn.variable
    if grad is not None:
        fresh = variable._grad is None
        if fresh and (exposed or grad.base is not None or id(grad) in stored
                      or not grad.flags.writeable or variable._post_acc_hooks):
            grad = grad.copy()  # .grad must own its memory: nobody else may see it change
        stored[id(grad)] = grad
        fn.backward(grad)
        if fresh and variable._grad is not None:
            grad = variable._grad._data
    if variable._post_acc_hooks:
        _post_accumulate(variable)
    return grad


def _conform(fn: Node, g: np.ndarray, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """The gradient ``g`` that node ``fn`` computed for an input of ``shape`` and ``dtype``, in
    that shape and dtype: a 0-d array of one element is reshaped (a node may return a scalar for
    a one-element input), a differing dtype converted; any other shape is the node's error."""
    if g.shape != shape:
        if g.size == int(np.prod(shape)) and g.ndim == 0:
            g = g.reshape(shape)
        else:
            raise RuntimeError(f"Function {fn.name()} returned an invalid gradient - got {list(g.shape)} but "
                               f"expected shape compatible with {list(shape)}")
    if g.dtype != dtype:
        g = g.astype(dtype)
    return g


def _retain_grads(retain: dict, buf: list) -> None:
    for slot, ref in retain.items():
        tensor = ref()
        g = buf[slot]
        if tensor is None or g is None:
            continue
        if tensor._grad is None:
            tensor._grad = Tensor._make(np.array(g))
        else:
            tensor._grad._data = tensor._grad._data + g


def _post_accumulate(variable: Tensor) -> None:
    for hook in tuple(variable._post_acc_hooks.values()):
        if hook(variable) is not None:
            raise RuntimeError("Tensor post accumulate grad hooks should return None.")
