"""Graph nodes. A node is the backward half of one op: ``tensor.grad_fn``.

Every op is a ``Node`` subclass whose ``backward(*grad_outputs)`` maps numpy gradients of its
outputs to numpy gradients of its inputs (a tuple aligned with ``next_functions``; ``None``
for an input that needs no gradient). Nodes carry PyTorch's surface: ``name()``,
``next_functions``, ``register_prehook``, ``register_hook``, ``metadata`` and a creation
sequence number used by the engine's scheduler.
"""
from __future__ import annotations

import itertools
import sys
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from gradscope.autograd import grad_mode
from gradscope.utils.hooks import RemovableHandle, add_hook

_next_seq = itertools.count().__next__
ACCUMULATE_SEQ = sys.maxsize

# Stack of active (pack, unpack) pairs from saved_tensors_hooks; only the innermost applies.
saved_tensor_hooks_stack: list = []
# The message of the innermost disable_saved_tensors_hooks in force (a one-entry list), or empty.
saved_tensor_hooks_disabled: list = []

_FREED = object()
_DETACHED_VERSION = -(2 ** 62)  # (= tensor.DETACHED_VERSION: a counter whose tensor was detached in place)
_NO_EDGE = (None, 0)
_FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
    "graph a second time or if you need to access saved tensors after calling backward.")


class NodeExtras:
    """The rarely used state of a node (hooks, retain_grad, saved-tensor unpacking, metadata,
    anomaly trace), kept apart so that a plain node carries one empty slot for all of it."""

    __slots__ = ("pre_hooks", "post_hooks", "tensor_hooks", "retain", "metadata", "trace", "observers")

    def __init__(self) -> None:
        self.pre_hooks: OrderedDict | None = None
        self.post_hooks: OrderedDict | None = None
        self.tensor_hooks: dict | None = None  # output slot -> OrderedDict of tensor hooks
        self.retain: dict | None = None  # output slot -> weakref of a tensor that retains grad
        self.metadata: dict | None = None
        self.trace: Any = None
        self.observers: dict | None = None  # observer(grad_inputs, grad_outputs) -> None, in order added


class Node:
    """Base class of every backward node.

    Subclasses implement ``backward(self, *grads)``; ``grads`` are numpy arrays (one per node
    output; ``None`` for an output that received no gradient), and the return value is a
    tuple with one entry per input edge, or a single array for one-input nodes.

    A node has no ``__dict__`` (as in PyTorch, attributes cannot be added to it): each op's
    subclass declares its own slots, and everything rare lives in ``_extras``.
    """

    __slots__ = ("_edges", "_in", "_in_nr", "_seq", "_saved", "_vcs", "_meta", "_extras", "__weakref__")
    # _in, _in_nr: the node and output number of the first input edge ((None, 0) if none).
    # _edges: the tuple of all input edges, or None when the first one is the only one (plus the
    # (None, 0) edge of a ``_scalar_operand`` node). A one-input node thus owns no container the
    # garbage collector tracks: ``_next`` rebuilds its edges on request.
    # _saved: None (nothing saved), a tuple of arrays (``save``), the node's own output as a bare
    # array (``_save_output``), a list of packed values (saved-tensor hooks), or _FREED.
    # _vcs: (version counter, expected version, tensor or None for the output) per saved tensor.

    _save_output = False
    # ``backward`` returns one array: the gradient of the first input (any further input edge
    # is never differentiable, e.g. the scalar of ``tensor * 2.0``).
    _single_input = True
    # True for node types that always need the engine's general path (several outputs,
    # AccumulateGrad, user-defined Functions); nodes with ``_extras`` take it as well.
    _slow = False
    # Every node of this type has a second, ``(None, 0)`` edge: a python scalar operand.
    _scalar_operand = False

    def name(self) -> str:
        """The node's type name, e.g. ``"MulBackward0"``."""
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.name()} object at {hex(id(self))}>"

    @property
    def next_functions(self) -> tuple:
        """One ``(node_or_None, output_index)`` pair per differentiable input slot."""
        return self._next

    @property
    def _next(self) -> tuple:
        """The input edges, one ``(node_or_None, output_index)`` pair per input slot."""
        edges = self._edges
        if edges is None:
            if self._scalar_operand:
                return (self._in, self._in_nr), _NO_EDGE
            return ((self._in, self._in_nr),)
        return edges

    @property
    def metadata(self) -> dict:
        """A dict for users to attach information to this node."""
        extras = self._extra()
        if extras.metadata is None:
            extras.metadata = {}
        return extras.metadata

    @property
    def _trace(self) -> Any:
        """The creation stack anomaly mode recorded for this node, or None."""
        return None if self._extras is None else self._extras.trace

    def _extra(self) -> NodeExtras:
        """The node's rare state, created on first use (the engine then runs it on its general path)."""
        extras = self._extras
        if extras is None:
            extras = self._extras = NodeExtras()
        return extras

    def _num_outputs(self) -> int:
        return len(self._meta)

    # ---------------------------------------------------------------- hooks
    def register_prehook(self, fn: Callable) -> RemovableHandle:
        """Register ``fn(grad_outputs) -> tuple | None``, called before the node computes."""
        extras = self._extra()
        if extras.pre_hooks is None:
            extras.pre_hooks = OrderedDict()
        return add_hook(extras.pre_hooks, fn)

    def register_hook(self, fn: Callable) -> RemovableHandle:
        """Register ``fn(grad_inputs, grad_outputs) -> tuple | None``, called after it computes."""
        extras = self._extra()
        if extras.post_hooks is None:
            extras.post_hooks = OrderedDict()
        return add_hook(extras.post_hooks, fn)

    def _observe(self, observer: Callable) -> None:
        """Call ``observer(grad_inputs, grad_outputs)`` each time this node runs in backward,
        after its post-hooks, with the final gradients as numpy arrays (None where there is none),
        which it must not modify; it cannot replace them. For the engine adapter's statistics: no
        handle and no tensor per gradient. Removed with :meth:`_unobserve`."""
        extras = self._extra()
        if extras.observers is None:
            extras.observers = {}
        extras.observers[observer] = None

    def _unobserve(self, observer: Callable) -> None:
        """Remove ``observer`` (no error when it is not there)."""
        extras = self._extras
        if extras is not None and extras.observers:
            extras.observers.pop(observer, None)

    def _hooks_for_slot(self, slot: int) -> OrderedDict:
        extras = self._extra()
        if extras.tensor_hooks is None:
            extras.tensor_hooks = {}
        hooks = extras.tensor_hooks.get(slot)
        if hooks is None:
            hooks = extras.tensor_hooks[slot] = OrderedDict()
        return hooks

    # ---------------------------------------------------------------- saved tensors
    def save(self, *tensors: Any) -> None:
        """Save input tensors (or ``None``) for backward; read them back with ``saved()``."""
        vcs = []
        arrays = []
        for t in tensors:
            if t is None:
                arrays.append(None)
                continue
            vc = t._version_counter()
            vcs.append((vc, vc[0], t))
            arrays.append(t._data)
        self._vcs = tuple(vcs)
        if saved_tensor_hooks_stack:
            self._pack(tensors)
        else:
            self._saved = tuple(arrays)

    def _watch_output(self, vc: list) -> None:
        """Check ``vc``, the version counter of the output this node saved, on every read."""
        if self._saved is not _FREED:  # (once freed, reading raises before any version check)
            self._vcs = (*self._vcs, (vc, vc[0], None))

    def _pack(self, tensors: Any) -> None:
        """Save ``tensors`` (Tensors or None) through the innermost ``saved_tensors_hooks``:
        each tensor itself goes to the pack hook, which must not modify it in place."""
        pack, unpack = saved_tensor_hooks_stack[-1]
        self._saved = None  # (while the hooks run)
        self._saved = [None if t is None else _Packed(_call_pack_hook(pack, t), unpack) for t in tensors]
        for t in tensors:
            if t is not None and t.grad_fn is self and t._vc is not None:  # its own output
                self._vcs = (*self._vcs, (t._vc, t._vc[0], None))

    def saved(self) -> list:
        """The saved arrays; raises if they were freed or modified in place since saving."""
        saved = self._saved
        for entry in self._vcs:  # (empty once freed)
            if entry[0][0] != entry[1]:
                self._raise_modified(entry)
        if saved.__class__ is tuple:  # neither freed nor packed
            return saved
        if saved.__class__ is np.ndarray:  # a saved output, stored without a tuple
            return (saved,)
        if saved is _FREED:
            raise RuntimeError(_FREED_MESSAGE)
        return [entry.unpacked() if entry.__class__ is _Packed else entry for entry in saved]

    def _saved_tensor_source(self, index: int) -> Any:
        """The tensor saved in slot ``index`` (None for the node's own saved output)."""
        saved = self._saved
        if saved.__class__ is np.ndarray:
            return None
        sources = [entry[2] for entry in self._vcs if entry[2] is not None]
        position = sum(1 for slot in range(index) if saved[slot] is not None)
        return sources[position] if position < len(sources) else None

    def _saved_names(self) -> tuple:
        """PyTorch's names of the saved slots: ``result`` for a node that saves its output, else
        ``self``, ``other``, ... in the order the op saved them."""
        if self._save_output:
            return ("result",)
        count = len(self._saved)
        return ("self", "other", "weight", "bias")[:count] if count <= 4 else \
            tuple(f"saved{i}" for i in range(count))

    def __getattr__(self, name: str) -> Any:
        # grad_fn._saved_<name> (the saved value) and grad_fn._raw_saved_<name> (a SavedTensor)
        raw = name.startswith("_raw_saved_")
        if raw or name.startswith("_saved_"):
            key = name[len("_raw_saved_"):] if raw else name[len("_saved_"):]
            saved = object.__getattribute__(self, "_saved")
            if saved is not None and saved is not _FREED:
                names = self._saved_names()
                if key in names:
                    index = names.index(key)
                    return SavedTensor(self, index) if raw else self._saved_value(index)
            elif saved is _FREED and not raw:
                raise RuntimeError(_FREED_MESSAGE)
            if not raw:  # a saved non-tensor argument (``_saved_exponent``): the node's attribute
                for klass in type(self).__mro__:
                    if key in getattr(klass, "__slots__", ()):
                        try:
                            return object.__getattribute__(self, key)
                        except AttributeError:
                            break
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def _saved_value(self, index: int) -> Any:
        """``_saved_<name>``: the saved tensor, unpacked, with the history of the tensor saved."""
        from gradscope.autograd.tensor import Tensor

        saved = self._saved
        if saved.__class__ is list:  # packed: unpack this one only (as PyTorch)
            for entry in self._vcs:
                if entry[0][0] != entry[1]:
                    self._raise_modified(entry)
            entry = saved[index]
            array = entry.unpacked() if entry.__class__ is _Packed else entry
        else:
            array = self.saved()[index]
        if array is None:
            return None
        source = self._saved_tensor_source(index)
        if source is not None and array is source._data:
            return source
        t = Tensor._make(array)
        if source is not None:
            t.requires_grad = source.requires_grad
            t.grad_fn = source.grad_fn
            t._output_nr = source._output_nr
        elif self._save_output:  # the node's own output: a new tensor with its history and version
            t.requires_grad = True
            t.grad_fn = self
            t._vc = self._output_version_counter()
        return t

    def _output_version_counter(self) -> list:
        """The version counter of the output this node saved (created, and watched, on first use)."""
        for entry in self._vcs:
            if entry[2] is None:
                return entry[0]
        vc = [0]
        self._watch_output(vc)
        return vc

    def _register_saved_hooks(self, index: int, pack_hook: Callable, unpack_hook: Callable) -> None:
        """``SavedTensor.register_hooks``: pack the value saved in slot ``index`` now, unpack on use."""
        from gradscope.autograd.tensor import Tensor

        saved = self._saved
        if saved is _FREED:
            raise RuntimeError(_FREED_MESSAGE)
        if not callable(pack_hook) or not callable(unpack_hook):
            raise TypeError("expects pack_hook and unpack_hook to be callable")
        entries = [saved] if saved.__class__ is np.ndarray else list(saved)
        entry = entries[index]
        if entry is None:
            raise RuntimeError("Calling register_hooks on a saved tensor with value None is forbidden")
        if entry.__class__ is _Packed:
            raise RuntimeError("Calling register_hooks on a saved tensor whose hooks have already been set. "
                               "Hint: only one pair of hooks is allowed at a time.")
        source = self._saved_tensor_source(index)
        tensor = source if source is not None and source._data is entry else Tensor._make(entry)
        entries[index] = _Packed(_call_pack_hook(pack_hook, tensor), unpack_hook)
        self._saved = entries

    def saved_output(self) -> np.ndarray:
        """The output a ``_save_output`` node saved: ``saved()[0]`` without building a tuple."""
        out = self._saved
        if out.__class__ is np.ndarray:
            for entry in self._vcs:
                if entry[0][0] != entry[1]:
                    self._raise_modified(entry)
            return out
        return self.saved()[0]

    def _raise_modified(self, entry: tuple) -> None:
        vc, expected, tensor = entry
        if vc[0] == _DETACHED_VERSION:
            raise RuntimeError("Trying to use a saved tensor that has been detached in-place, i.e. with "
                               ".detach_(). This is not supported, please use out of place `.detach()` instead "
                               f"(needed by {self.name()}).")
        if tensor is None:  # the node's own saved output
            what = f"[output of shape {list(self._meta[0][0])}], which is output 0 of {self.name()}"
        else:
            producer = tensor.grad_fn.name() if tensor.grad_fn is not None else "a leaf"
            what = (f"[{tensor._type_name()} {list(tensor.shape)}], which is output {tensor._output_nr} "
                    f"of {producer}")
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an inplace "
            f"operation: {what}, is at version {vc[0]}; expected version {expected} instead (needed by "
            f"{self.name()}). Hint: clone the tensor before modifying it in place.")

    def _release(self) -> None:
        if self._saved is not None:
            self._saved = _FREED
            self._vcs = ()

    def backward(self, *grads: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError(f"{self.name()} has no backward")


class _Packed:
    """One saved tensor as its pack hook returned it, with the hook that unpacks it."""

    __slots__ = ("value", "unpack")

    def __init__(self, value: Any, unpack: Callable) -> None:
        self.value = value
        self.unpack = unpack

    def unpacked(self) -> np.ndarray:
        value = self.unpack(self.value)
        data = getattr(value, "_data", None)
        if data is None:
            raise TypeError("Output of saved tensor unpack_hook expected to be a Tensor but got result "
                            f"of type {type(value).__name__}")
        return data


def _call_pack_hook(pack: Callable, tensor: Any) -> Any:
    """``pack(tensor)``, refused when the hook modifies ``tensor`` in place (as PyTorch)."""
    version = tensor._version
    with grad_mode.no_grad():  # (as PyTorch: nothing a pack hook computes is recorded)
        packed = pack(tensor)
    if tensor._version != version:
        raise RuntimeError("A saved tensor pack hook is modifying its input in place. Tensors provided as "
                           "input to pack hook cannot be modified by in-place operations as this can lead "
                           "to unexpected side-effects. Please open an issue if you need to perform in-place "
                           "operations on the input to a pack hook.")
    return packed


class SavedTensor:
    """``grad_fn._raw_saved_<name>``: a handle on one saved tensor, to attach pack/unpack hooks."""

    __slots__ = ("_node", "_index")

    def __init__(self, node: Node, index: int) -> None:
        self._node = node
        self._index = index

    def register_hooks(self, pack_hook: Callable, unpack_hook: Callable) -> None:
        """Call ``pack_hook(tensor)`` now and keep only what it returns; backward gets the tensor
        back from ``unpack_hook(packed)``."""
        self._node._register_saved_hooks(self._index, pack_hook, unpack_hook)


class AccumulateGrad(Node):
    """The node that writes a leaf's ``.grad``. One per leaf, shared by all its consumers."""

    __slots__ = ("variable",)
    _slow = True

    def __init__(self, variable: Any) -> None:
        self.variable = variable
        self._edges = ()
        self._in = None
        self._in_nr = 0
        self._seq = ACCUMULATE_SEQ
        self._saved = None
        self._vcs = ()
        self._extras = None
        self._meta = ((variable._data.shape, variable._data.dtype),)

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    def _hooks_for_slot(self, slot: int) -> OrderedDict:
        return self.variable._leaf_hooks()

    def backward(self, grad: np.ndarray) -> tuple:
        variable = self.variable
        old = variable._grad
        if old is None:
            variable._grad = variable._make(grad)
        else:
            data = old._data
            if data.shape == grad.shape and data.flags.writeable:
                np.add(data, grad, out=data, casting="unsafe")
            else:
                old._data = data + grad
        return ()


def make_edge(t: Any) -> tuple:
    """The (node, output_nr) edge of tensor ``t`` as an input of a new node."""
    fn = t.grad_fn
    if fn is not None:
        return (fn, t._output_nr)
    if t.requires_grad:
        return (t._accumulator(), 0)
    return (None, 0)
