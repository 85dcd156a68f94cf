"""The backward engine: count the gradients each node will receive, then run ready nodes from a
heap keyed on descending sequence number (leaf accumulators first, ties in readiness order).
No recursion anywhere, and no structure over the whole graph: the count walks the graph newest
node first, remembering only the nodes queued, and keeps a count only for the nodes that
receive several gradients (and the accumulators), so that a chain of a million nodes costs no
million-entry dict."""
from __future__ import annotations

import heapq
from typing import Any, Callable, Sequence

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
        """Whether ``node`` is reached by this backward call (E4 of the hook contract)."""
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
    """Nodes on a path to a target (E4) and the gradients each of them receives from them."""
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


def run_backward(outputs: tuple, root_grads: list, keep_graph: bool, capture: list | None,
                 accumulate: bool) -> list:
    """Run one backward pass. Returns the captured gradients (one per ``capture`` entry)."""
    root_edges = [make_edge(t) for t in outputs]
    root_nodes = []
    for node, _ in root_edges:
        if node not in root_nodes:
            root_nodes.append(node)
    task = GraphTask(root_nodes)
    relevant = None
    needed = None
    captured: list = []
    capture_at: dict = {}
    if capture is None:
        deps = _count_dependencies(root_nodes)
    else:
        reachable = task.reachable = _count_dependencies(root_nodes, every_node=True)
        captured = [None] * len(capture)
        for index, ((node, nr), _tensor) in enumerate(capture):
            capture_at.setdefault(node, []).append((nr, index))
        targets = {node for node in capture_at if node in reachable}
        needed, deps = _restrict(root_nodes, reachable, targets)
        relevant = needed | targets
        task.relevant = relevant
        if accumulate:
            needed = needed | {n for n in targets if isinstance(n, AccumulateGrad)}

    buffers: dict = {}  # node -> gradient buffer (one slot per output) of nodes still waiting
    heap: list = []  # (-sequence number, counter, node, its buffer) of the ready nodes
    counter = 0
    for (node, nr), g in zip(root_edges, root_grads):
        if relevant is not None and node not in relevant:
            continue
        buf = buffers.get(node)
        if buf is None:
            buf = buffers[node] = [None] * len(node._meta)
        buf[nr] = g if buf[nr] is None else buf[nr] + g
    # ``deps`` counts the gradients of the nodes that receive several (a node it does not list
    # receives one: it is ready on arrival); ``remaining``, how many are still to come.
    remaining: dict = {}
    for node in root_nodes:
        if node in buffers:
            count = deps.get(node, 1)
            if count == 1:
                heapq.heappush(heap, (-node._seq, counter, node, buffers.pop(node)))
                counter += 1
            else:  # its root gradient has arrived
                remaining[node] = count - 1

    check_anomaly = anomaly.state.enabled
    prev_mode = grad_mode._state.enabled
    saved_hooks = saved_tensor_hooks_stack[:]  # put back when the pass ends (as PyTorch)
    grad_mode._state.enabled = False
    _active_tasks.append(task)
    heappush, heappop = heapq.heappush, heapq.heappop
    freed = _FREED
    stored: dict = {}  # id -> array of every gradient stored into a .grad by this pass
    general = capture is not None or check_anomaly  # every node needs the general path
    owned: set = set()  # buffer slots holding an array the engine allocated itself
    # The next node to run and its buffer, kept out of the heap: it is the one the heap would
    # pop next (its sequence number is above every queued one). In a chain every node is.
    ready = ready_buf = None
    errstate = np.errstate(divide="ignore", invalid="ignore", over="ignore")
    errstate.__enter__()  # IEEE results (inf/nan) are what the user asked for; no numpy warnings
    try:
        while True:
            if ready is not None:
                fn, buf = ready, ready_buf
                ready = None
            elif heap:
                _, _, fn, buf = heappop(heap)
            else:
                break
            if general or fn._slow or fn._extras is not None:
                if fn.__class__ is AccumulateGrad and not (general or fn._extras is not None
                                                           or fn.variable._hooks):
                    # a leaf's accumulator without node or tensor hooks: E5 steps 4-5 only
                    _accumulate(fn, buf[0], False, stored)
                    continue
                if check_anomaly:
                    try:
                        grads_in = _run_node_general(fn, buf, capture_at, captured, needed, accumulate, stored)
                        if grads_in is not None:
                            anomaly.check_node(fn, grads_in)
                    except Exception:
                        anomaly.warn_error_in(fn)
                        raise
                else:
                    grads_in = _run_node_general(fn, buf, capture_at, captured, needed, accumulate, stored)
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
            if grads_in is None:
                # One input whose only gradient this is, running next (a chain): hand it over
                # without the loop over edges below, its buffer look-ups and the heap.
                child = fn._in
                if child is None:
                    continue
                nr = fn._in_nr
                if (nr == 0 and relevant is None and child not in deps
                        and (not heap or -heap[0][0] < child._seq)):
                    if g is not None:
                        shape, dtype = child._meta[0]
                        if g.shape != shape:
                            g = _fix_shape(fn, g, shape)
                        if g.dtype is not dtype and g.dtype != dtype:
                            g = g.astype(dtype)
                    buf[0] = g  # (the node's one-slot buffer, which it no longer needs)
                    ready, ready_buf = child, buf
                    continue
                grads_in = (g,)
                edges = ((child, nr),)
            else:
                edges = fn._edges
                if edges is None:  # a one-input node stored flat, run on the general path
                    edges = fn._next
            # hand the gradients to the input nodes
            for (child, nr), g in zip(edges, grads_in):
                if child is None or (relevant is not None and child not in relevant):
                    continue
                if g is not None:
                    shape, dtype = child._meta[nr]
                    if g.shape != shape:
                        g = _fix_shape(fn, g, shape)
                    if g.dtype is not dtype and g.dtype != dtype:
                        g = g.astype(dtype)
                count = deps.get(child, 1)
                if count == 1:  # the child's only gradient: it is ready now
                    if nr == 0:
                        cbuf = [g]  # (the general path pads the buffer of a several-output node)
                    else:
                        cbuf = [None] * len(child._meta)
                        cbuf[nr] = g
                else:
                    left = remaining.get(child, count) - 1
                    cbuf = buffers.get(child)
                    if cbuf is None:
                        cbuf = buffers[child] = [None] * len(child._meta)
                        cbuf[nr] = g
                    elif g is not None:
                        old = cbuf[nr]
                        if old is None:
                            cbuf[nr] = g
                        elif (child, nr) in owned:
                            np.add(old, g, old)  # an array the engine allocated: sum in place
                        else:
                            total = old + g
                            if total.__class__ is np.ndarray and total.ndim:
                                owned.add((child, nr))
                            else:
                                total = np.asarray(total)
                            cbuf[nr] = total
                    if left:
                        remaining[child] = left
                        continue
                    del buffers[child]
                # the child is ready: run it next unless a queued node comes first
                seq = child._seq
                if ready is None:
                    if heap and -heap[0][0] >= seq:
                        heappush(heap, (-seq, counter, child, cbuf))
                        counter += 1
                    else:
                        ready, ready_buf = child, cbuf
                elif seq > ready._seq:
                    heappush(heap, (-ready._seq, counter, ready, ready_buf))
                    counter += 1
                    ready, ready_buf = child, cbuf
                else:
                    heappush(heap, (-seq, counter, child, cbuf))
                    counter += 1
        for callback in task.callbacks:
            callback()
    finally:
        errstate.__exit__(None, None, None)
        _active_tasks.pop()
        grad_mode._state.enabled = prev_mode
        if saved_tensor_hooks_stack != saved_hooks:
            saved_tensor_hooks_stack[:] = saved_hooks
    return captured


def _run_node_general(fn: Node, buf: list, capture_at: dict, captured: list, needed: set | None,
                      accumulate: bool, stored: dict) -> tuple | None:
    """Run one node with everything E5 of the contract allows: tensor hooks, retain_grad,
    capture, pre-hooks, compute, post-accumulate hooks, post-hooks (then the adapter's observers).
    None means: skip it."""
    is_acc = type(fn) is AccumulateGrad
    extras = fn._extras
    if len(buf) < len(fn._meta):
        buf += [None] * (len(fn._meta) - len(buf))
    # 1-2. tensor hooks of each output slot, then retain_grad capture
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
    if capture_at and fn in capture_at:
        for nr, index in capture_at[fn]:
            captured[index] = buf[nr]
        if needed is not None and fn not in needed:
            if not accumulate or extras is None or not (extras.pre_hooks or extras.post_hooks):
                return None
            captured_only = True  # backward() still runs its node hooks (as PyTorch), no compute
    # 3. node pre-hooks
    if extras is not None and extras.pre_hooks:
        exposed = True
        for hook in tuple(extras.pre_hooks.values()):
            result = hook(_wrap(buf))
            if result is not None:
                buf = _replace_tuple(result, buf, fn, "hook", [shape for shape, _ in fn._meta])
    # 4-5. compute (AccumulateGrad also runs post-accumulate hooks)
    if is_acc:
        if accumulate:
            # the post-hooks see the buffer that became ``.grad``, if it did (as PyTorch)
            buf[0] = _accumulate(fn, buf[0], exposed, stored)
        grads_in = ()
    elif captured_only or (buf[0] is None if len(buf) == 1 else all(g is None for g in buf)):
        grads_in = (None,) * len(fn._next)
    else:
        grads_in = fn.backward(*buf)
        if fn._single_input:  # the gradient of the first input; any other input gets None
            grads_in = (grads_in,) if fn._edges is None and not fn._scalar_operand else \
                (grads_in,) + (None,) * (len(fn._next) - 1)
    # 6. node post-hooks (each sees the same tensors until one returns replacements)
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
    # 7. observers (the engine adapter's statistics): the final gradients, as arrays
    if extras is not None and extras.observers:
        for observer in tuple(extras.observers):
            observer(grads_in, buf)
    return grads_in


def _accumulate(fn: AccumulateGrad, grad: np.ndarray | None, exposed: bool, stored: dict) -> np.ndarray | None:
    """E5 steps 4-5 of a leaf's accumulator: add ``grad`` into ``.grad``, then run the leaf's
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


def _fix_shape(fn: Node, g: np.ndarray, shape: tuple) -> np.ndarray:
    if g.size == int(np.prod(shape)) and g.ndim == 0:
        return g.reshape(shape)
    raise RuntimeError(f"Function {fn.name()} returned an invalid gradient - got {list(g.shape)} but "
                       f"expected shape compatible with {list(shape)}")


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
