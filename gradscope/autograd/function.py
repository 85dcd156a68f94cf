"""Building graph nodes: the helpers every op uses, and user-defined ``autograd.Function``."""
from __future__ import annotations

import functools
import inspect
from typing import Any

import numpy as np

from gradscope.autograd import anomaly, grad_mode
from gradscope.autograd.node import _NO_EDGE, Node, _next_seq, saved_tensor_hooks_stack
from gradscope.autograd.tensor import Tensor

_grad_state = grad_mode._state
_anomaly = anomaly.state


def new_node(cls: type, inputs: tuple) -> Node | None:
    """A node of type ``cls`` with one edge per entry of ``inputs`` (Tensor or None), or None
    when no graph must be recorded (grad mode off, or no input requires grad)."""
    if not _grad_state.enabled:
        return None
    edges = []
    needed = False
    for x in inputs:
        if x is None:
            edges.append(_NO_EDGE)
            continue
        fn = x.grad_fn
        if fn is not None:
            edges.append((fn, x._output_nr))
            needed = True
        elif x.requires_grad:
            edges.append((x._accumulator(), 0))
            needed = True
        else:
            edges.append(_NO_EDGE)
    if not needed:
        return None
    node = object.__new__(cls)
    node._in, node._in_nr = edges[0]
    node._edges = None if len(edges) == 1 else tuple(edges)  # (Node._next adds a scalar operand's edge)
    node._seq = _next_seq()
    node._saved = None
    node._vcs = ()
    node._extras = None
    if _anomaly.enabled:
        node._extra().trace = anomaly.record_trace()
    return node


def once_differentiable(backward: Any) -> Any:
    """Decorate a Function's ``backward`` that can be differentiated only once: it runs
    without recording a graph (gradscope never records one in backward: no create_graph)."""
    @functools.wraps(backward)
    def wrapper(ctx: Any, *args: Any) -> Any:
        with grad_mode.no_grad():
            return backward(ctx, *args)

    return wrapper


_METAS: dict = {}


def output_meta(out: np.ndarray) -> tuple:
    """The ``_meta`` of a one-output node, ``((shape, dtype),)``: one shared tuple per shape and
    dtype, so that a node adds no metadata objects for the garbage collector to track."""
    key = (out.shape, out.dtype)
    meta = _METAS.get(key)
    if meta is None:
        if len(_METAS) > 1024:
            _METAS.clear()
        meta = _METAS[key] = (key,)
    return meta


def result(out: np.ndarray, node: Node | None) -> Tensor:
    """Wrap ``out`` as the single output of ``node`` (which may be None)."""
    if out.__class__ is not np.ndarray:  # numpy turns 0-d results into scalars
        out = np.asarray(out)
    t = object.__new__(Tensor)
    t._data = out
    t._output_nr = 0
    t._vc = None  # created on first use (see Tensor._version_counter)
    if node is None:
        t.requires_grad = False
        t.grad_fn = None
        return t
    t.requires_grad = True
    t.grad_fn = node
    meta = _METAS.get((out.shape, out.dtype))
    node._meta = meta if meta is not None else output_meta(out)
    if node._save_output:
        if saved_tensor_hooks_stack:
            node._pack([t])
        else:
            node._saved = out  # a bare array: one object less for the garbage collector
    return t


def unary_result(cls: type, out: np.ndarray, x: Tensor) -> Tensor:
    """``result(out, new_node(cls, (x,)))`` in one call, for the hot one-tensor ops (a
    ``_scalar_operand`` node type gets its second, ``(None, 0)`` edge as well: ``tensor * 2.0``)."""
    if out.__class__ is not np.ndarray:  # numpy turns 0-d results into scalars
        out = np.asarray(out)
    t = object.__new__(Tensor)
    t._data = out
    t._output_nr = 0
    t._vc = None
    if _grad_state.enabled:
        fn = x.grad_fn
        if fn is not None:
            nr = x._output_nr
        elif x.requires_grad:
            fn = x._accumulator()
            nr = 0
        if fn is not None:
            node = object.__new__(cls)
            node._edges = None  # stored flat (see Node._edges)
            node._in = fn
            node._in_nr = nr
            node._seq = _next_seq()
            node._vcs = ()
            node._extras = None
            meta = _METAS.get((out.shape, out.dtype))
            node._meta = meta if meta is not None else output_meta(out)
            t.requires_grad = True
            t.grad_fn = node
            if not cls._save_output:
                node._saved = None
            elif saved_tensor_hooks_stack:
                node._pack([t])
            else:
                node._saved = out  # a bare array: one object less for the garbage collector
            if _anomaly.enabled:
                node._extra().trace = anomaly.record_trace()
            return t
    t.requires_grad = False
    t.grad_fn = None
    return t


def binary_result(cls: type, out: np.ndarray, a: Tensor, b: Tensor, save: bool = False) -> Tensor:
    """``result(out, new_node(cls, (a, b)))`` in one call, for the hot ops of two tensors; with
    ``save`` the node also saves both operands, as ``node.save(a, b)`` does."""
    if out.__class__ is not np.ndarray:  # numpy turns 0-d results into scalars
        out = np.asarray(out)
    t = object.__new__(Tensor)
    t._data = out
    t._output_nr = 0
    t._vc = None
    if _grad_state.enabled:
        fn = a.grad_fn
        if fn is not None:
            edge_a = (fn, a._output_nr)
        else:
            edge_a = (a._accumulator(), 0) if a.requires_grad else _NO_EDGE
        fn = b.grad_fn
        if fn is not None:
            edge_b = (fn, b._output_nr)
        else:
            edge_b = (b._accumulator(), 0) if b.requires_grad else _NO_EDGE
        if edge_a is not _NO_EDGE or edge_b is not _NO_EDGE:
            node = object.__new__(cls)
            node._in, node._in_nr = edge_a
            node._edges = (edge_a, edge_b)
            node._seq = _next_seq()
            node._extras = None
            meta = _METAS.get((out.shape, out.dtype))
            node._meta = meta if meta is not None else output_meta(out)
            if not save:
                node._saved = None
                node._vcs = ()
            elif saved_tensor_hooks_stack:
                # each operand is needed only for the other's gradient (as PyTorch saves them)
                node.save(a if edge_b is not _NO_EDGE else None, b if edge_a is not _NO_EDGE else None)
            elif edge_a is _NO_EDGE:  # only ``a`` is needed (for b's gradient): node.save(a, None)
                vc_a = a._vc if a._vc is not None else a._version_counter()
                node._vcs = ((vc_a, vc_a[0], a),)
                node._saved = (a._data, None)
            elif edge_b is _NO_EDGE:  # node.save(None, b)
                vc_b = b._vc if b._vc is not None else b._version_counter()
                node._vcs = ((vc_b, vc_b[0], b),)
                node._saved = (None, b._data)
            else:  # node.save(a, b), inlined
                vc_a = a._vc if a._vc is not None else a._version_counter()
                vc_b = b._vc if b._vc is not None else b._version_counter()
                node._vcs = ((vc_a, vc_a[0], a), (vc_b, vc_b[0], b))
                node._saved = (a._data, b._data)
            if _anomaly.enabled:
                node._extra().trace = anomaly.record_trace()
            t.requires_grad = True
            t.grad_fn = node
            return t
    t.requires_grad = False
    t.grad_fn = None
    return t


def results(outs: list, node: Node | None) -> tuple:
    """Wrap several arrays as the outputs of one multi-output node."""
    tensors = []
    outs = [np.asarray(o) for o in outs]
    for index, out in enumerate(outs):
        t = Tensor._make(out)
        if node is not None:
            t.requires_grad = True
            t.grad_fn = node
            t._output_nr = index
        tensors.append(t)
    if node is not None:
        node._extra()  # several outputs: the engine's general path hands each its gradient
        node._meta = tuple((o.shape, o.dtype) for o in outs)
    return tuple(tensors)


class FunctionCtx(Node):
    """Node of a user-defined Function; also the ``ctx`` its forward/backward receive."""

    _single_input = False
    _slow = True
    _function: type
    needs_input_grad: tuple = ()
    materialize_grads = True
    _non_differentiable: tuple = ()
    _to_save: tuple = ()
    _arg_is_tensor: tuple = ()

    def name(self) -> str:
        return self._function.__name__ + "Backward"

    def save_for_backward(self, *tensors: Any) -> None:
        """Save tensors (or None) for backward; read them back through ``saved_tensors``."""
        self._to_save = tensors

    @property
    def saved_tensors(self) -> tuple:
        arrays = self.saved() if self._saved is not None else []
        return tuple(None if a is None else Tensor._make(a) for a in arrays)

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        self._non_differentiable = tuple(id(t) for t in tensors)

    def mark_dirty(self, *tensors: Tensor) -> None:
        for t in tensors:
            t._bump_version()

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)

    def backward(self, *grads: Any) -> tuple:
        if self.materialize_grads:  # (a non-tensor output, dtype None, keeps its None)
            grads = tuple(np.zeros(shape, dtype) if g is None and dtype is not None else g
                          for g, (shape, dtype) in zip(grads, self._meta))
        with grad_mode.no_grad():
            returned = self._function.backward(self, *(None if g is None else Tensor._make(g) for g in grads))
        if not isinstance(returned, tuple):
            returned = (returned,)
        n_args = len(self._arg_is_tensor)
        if len(returned) < n_args:
            raise RuntimeError(f"function {self.name()} returned an incorrect number of gradients "
                               f"(expected {n_args}, got {len(returned)})")
        extra = returned[n_args:]
        if any(g is not None for g in extra):
            raise RuntimeError(f"function {self.name()} returned an incorrect number of gradients "
                               f"(expected {n_args}, got {len(returned)})")
        out = []
        for g, is_tensor in zip(returned, self._arg_is_tensor):
            if not is_tensor:
                continue
            if g is not None and not isinstance(g, Tensor):
                g = Tensor._make(np.asarray(g))
            out.append(None if g is None else g._data)
        return tuple(out)


class _FunctionMeta(type):
    def __init__(cls, name: str, bases: tuple, namespace: dict) -> None:
        super().__init__(name, bases, namespace)
        cls._backward_cls = type(name + "Backward", (FunctionCtx,), {"_function": cls})


class Function(metaclass=_FunctionMeta):
    """Base class for user-defined differentiable operations.

    Subclasses define ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)`` as static
    methods and are called through ``apply``. ``backward`` returns one gradient per forward
    argument (None for non-tensors or inputs that need none).
    """

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError("You must implement the backward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        """Override to split ``forward(*args)`` (no ctx) from saving what backward needs:
        ``setup_context(ctx, inputs, output)`` then runs after ``forward``, with ``inputs``
        the forward arguments (defaults filled in)."""
        raise NotImplementedError("setup_context is not implemented.")

    @classmethod
    def _forward_with_setup_context(cls, ctx: Any, args: tuple, kwargs: dict) -> Any:
        """``forward(*args)`` then ``setup_context(ctx, inputs, output)`` (PyTorch's newer style)."""
        output = cls.forward(*args, **kwargs)
        try:
            bound = inspect.signature(cls.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            inputs = tuple(bound.arguments.values())
        except (TypeError, ValueError):
            inputs = args
        cls.setup_context(ctx, inputs, output)
        return output

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        tensor_args = tuple(a for a in args if isinstance(a, Tensor))
        ctx = new_node(cls._backward_cls, tensor_args)
        if ctx is None:
            ctx = object.__new__(cls._backward_cls)
            ctx._saved = None
            ctx._vcs = ()
            ctx._extras = None
            ctx._edges = ()
            ctx._in = None
            ctx._in_nr = 0
            ctx._seq = -1
            recording = False
        else:
            recording = True
        ctx._arg_is_tensor = tuple(isinstance(a, Tensor) for a in args)
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad and recording for a in args)
        with grad_mode.no_grad():
            if getattr(cls.setup_context, "__func__", cls.setup_context) is not _BASE_SETUP_CONTEXT:
                output = cls._forward_with_setup_context(ctx, args, kwargs)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(output, tuple)
        outputs = (output,) if single else output
        if recording:
            wrapped = []
            metas = []
            for index, out in enumerate(outputs):
                if not isinstance(out, Tensor):  # its slot gets None in backward and the hooks
                    wrapped.append(out)
                    metas.append(((), None))  # (shape () as PyTorch reports it; no dtype)
                    continue
                if any(out is a for a in tensor_args):
                    out = out.view_as(out)
                    out.grad_fn = None
                t = Tensor._make(out._data)
                t._vc = out._version_counter()
                if id(out) not in ctx._non_differentiable and out._data.dtype.kind == "f":
                    t.requires_grad = True
                    t.grad_fn = ctx
                    t._output_nr = index
                metas.append((out._data.shape, out._data.dtype))
                wrapped.append(t)
            ctx._meta = tuple(metas)
            if ctx._to_save:
                ctx.save(*ctx._to_save)
                ctx._to_save = ()
            outputs = tuple(wrapped)
        elif ctx._to_save:
            ctx._to_save = ()
        return outputs[0] if single else outputs


_BASE_SETUP_CONTEXT = Function.setup_context
