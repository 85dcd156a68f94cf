"""The engine interface: everything that differs between gradscope's engine and PyTorch.

An :class:`Engine` is a stateless object; :mod:`gradscope.engines` returns one per engine. The
monitors, the debugger and the CLI ask it for what is engine-specific and use the API both
engines share (``tensor.grad``, ``tensor.register_hook``, ``node.next_functions``,
``module.named_parameters()``, ``optimizer.state_dict()``, ...) directly.
"""
from __future__ import annotations

import contextlib
import functools
import math
from typing import Any, Callable, Iterable, Sequence

import numpy as np

#: The node name of the identity nodes that module full backward hooks insert (both engines).
HOOK_NODE = "BackwardHookFunctionBackward"
#: The node name of a leaf's gradient accumulator (both engines).
ACCUMULATE_NODE = "torch::autograd::AccumulateGrad"


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


class Engine:
    """What the monitor layer needs from an autograd engine.

    Attributes:
        name: ``"gradscope"`` or ``"torch"`` (the value of ``--engine``).
        display: how messages name it (``"gradscope"``, ``"PyTorch"``).
    """

    name = ""
    display = ""

    # ------------------------------------------------------------------ objects
    def is_module(self, value: Any) -> bool:
        """True if ``value`` is an ``nn.Module`` of this engine."""
        raise NotImplementedError

    #: The engine's tensor class (parameters are instances too).
    tensor_type: type = type(None)

    def is_tensor(self, value: Any) -> bool:
        """True if ``value`` is a tensor of this engine (parameters included)."""
        return isinstance(value, self.tensor_type)

    def tensors_in(self, value: Any) -> list:
        """The tensors in a module's arguments or output: tuples, lists and dict values, nested."""
        tensor_type = self.tensor_type
        if isinstance(value, tensor_type):
            return [value]
        if isinstance(value, dict):
            value = value.values()
        elif not isinstance(value, (tuple, list)):
            return []
        elif len(value) == 1 and isinstance(value[0], tensor_type):  # (a module's usual arguments)
            return [value[0]]
        found = []
        for item in value:  # (one level without recursion: the usual tuple of tensors)
            if isinstance(item, tensor_type):
                found.append(item)
            elif isinstance(item, (tuple, list, dict)):
                found += self.tensors_in(item)
        return found

    # ------------------------------------------------------------------ global hooks
    def register_module_forward_pre_hook(self, hook: Callable) -> Any:
        """Global ``hook(module, args) -> None | args`` before every module's forward; returns a handle."""
        raise NotImplementedError

    def register_module_forward_hook(self, hook: Callable, *, with_kwargs: bool = False,
                                     always_call: bool = False) -> Any:
        """Global ``hook(module, args, output) -> None | output`` after every module's forward."""
        raise NotImplementedError

    def register_optimizer_step_pre_hook(self, hook: Callable) -> Any:
        """Global ``hook(optimizer, args, kwargs) -> None`` before every ``optimizer.step()``."""
        raise NotImplementedError

    def register_optimizer_step_post_hook(self, hook: Callable) -> Any:
        """Global ``hook(optimizer, args, kwargs) -> None`` after every ``optimizer.step()``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ modes
    def no_grad(self) -> contextlib.AbstractContextManager:
        """The engine's ``no_grad()`` context."""
        raise NotImplementedError

    def record_creation_traces(self) -> contextlib.AbstractContextManager:
        """Anomaly mode without its checks: every node created inside remembers the user's stack
        (read it with :meth:`node_trace`)."""
        raise NotImplementedError

    def trace_nonfinite_ops(self) -> contextlib.AbstractContextManager:
        """A context that watches every operation's output and yields an :class:`OpTrace` naming
        the first operation whose output holds NaN/Inf, or yields None when the engine cannot.
        Slow: for the re-run of a step that already went wrong."""
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ graph nodes
    def node_trace(self, node: Any) -> list[tuple[str, int]]:
        """``[(file, line), ...]``, outermost first, of the code that created ``node`` (empty
        unless it was created inside :meth:`record_creation_traces`)."""
        raise NotImplementedError

    def node_sequence_nr(self, node: Any) -> int:
        """The node's creation sequence number (later nodes have larger numbers)."""
        raise NotImplementedError

    def node_output_shapes(self, node: Any) -> tuple:
        """The shape of each output of ``node`` (the gradients it receives), as tuples of ints."""
        raise NotImplementedError

    def node_name(self, tensor: Any) -> str | None:
        """``tensor.grad_fn.name()``, looking through the identity nodes of module backward hooks."""
        node = getattr(tensor, "grad_fn", None)
        while node is not None and node.name() == HOOK_NODE:
            following = [fn for fn, _ in node.next_functions if fn is not None]
            node = following[0] if following else None
        return node.name() if node is not None else None

    # ------------------------------------------------------------------ numbers
    def to_numpy(self, tensor: Any) -> np.ndarray:
        """The tensor's values on the host as a numpy array (float32 for 16-bit floats)."""
        raise NotImplementedError

    def squared_norms(self, tensors: Sequence[Any]) -> list[float | None]:
        """Sum of squares of each tensor (None for a None entry), exact for finite values
        (no float32 overflow), NaN/Inf when the tensor holds them, with one host transfer."""
        raise NotImplementedError

    def gradient_norm_taps(self) -> "GradientNormTaps":
        """A new, empty set of :class:`GradientNormTaps` on autograd nodes."""
        return GradientNormTaps(self)

    def loss_and_squared_norms(self, loss: Any, tensors: Sequence[Any]) -> tuple[float, list[float | None]]:
        """``(float(loss), squared_norms(tensors))`` with a single host synchronisation."""
        return float(loss.item()), self.squared_norms(tensors)

    def activation_summary(self, tensor: Any) -> Any:
        """What a monitor keeps of a module's output to tell, with the step's one host transfer
        after backward, whether it held NaN/Inf: a tensor whose :meth:`squared_norms` entry is
        non-finite exactly when ``tensor`` held a non-finite value. Here the tensor itself (host
        arrays: reading it later costs nothing extra); engines whose activations are large device
        tensors return a reduction of at most two entries instead, so the activation is freed when
        autograd is done with it (peak memory does not grow with the model's activations), made
        without a temporary copy of the activation."""
        return tensor

    def nonfinite_kind(self, tensor: Any) -> str | None:
        """``"nan"`` if the tensor holds a NaN, else ``"inf"`` if it holds an Inf, else None."""
        return nonfinite_kind_of_array(self.to_numpy(tensor))

    def clip_grad_norm_(self, parameters: Iterable[Any], max_norm: float) -> Any:
        """The engine's ``nn.utils.clip_grad_norm_``."""
        raise NotImplementedError

    def clip_grad_value_(self, parameters: Iterable[Any], clip_value: float) -> None:
        """The engine's ``nn.utils.clip_grad_value_``."""
        raise NotImplementedError

    def sgd(self, parameters: Iterable[Any], lr: float) -> Any:
        """The engine's ``optim.SGD(parameters, lr=lr)``: the default optimizer."""
        raise NotImplementedError

    # ------------------------------------------------------------------ state
    def manual_seed(self, seed: int) -> None:
        """Seed the engine's default random generator(s)."""
        raise NotImplementedError

    def get_rng_state(self) -> dict[str, np.ndarray]:
        """The default generators' states as plain arrays (``{"cpu": ..., "cuda:0": ...}``)."""
        raise NotImplementedError

    def set_rng_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`get_rng_state` returned."""
        raise NotImplementedError

    def clone(self, tensor: Any) -> Any:
        """A detached copy of ``tensor`` on its device (for snapshots)."""
        return tensor.detach().clone()

    def clone_all(self, tensors: Sequence[Any], into: Sequence[Any] | None = None) -> list:
        """Detached copies of ``tensors``; written into ``into`` (tensors of the same shapes,
        dtypes and devices, e.g. an older snapshot's) when given, to save allocations."""
        if into is None:
            return [self.clone(tensor) for tensor in tensors]
        with self.no_grad():
            for target, tensor in zip(into, tensors, strict=True):
                target.copy_(tensor)
        return list(into)

    def joined(self, copies: Sequence[Any]) -> Any | None:
        """One tensor holding all of ``copies`` (made by :meth:`clone_all`) when the engine keeps
        them in one buffer and reading it costs no host synchronisation, else None. Its squared
        norm is the sum of theirs."""
        return None

    def copy_into(self, target: Any, value: Any) -> None:
        """``target.copy_(value)`` without recording graph; ``value`` is a tensor or a numpy array
        (moved to the target's device and cast to its dtype)."""
        raise NotImplementedError

    def from_numpy(self, array: np.ndarray, device: str | None = None, dtype: str | None = None) -> Any:
        """A new tensor with ``array``'s values (on ``device``, as ``dtype`` when given)."""
        raise NotImplementedError

    def describe_device(self, tensor: Any) -> str | None:
        """The tensor's device as a string (``"cuda:0"``), or None on the CPU-only engine."""
        return None

    def storage_key(self, tensor: Any) -> tuple:
        """Where a tensor's values live, as ``(address, bytes, shape)``: aliases and detached copies
        of one tensor share the key."""
        array = self.to_numpy(tensor)
        return array.__array_interface__["data"][0], array.nbytes, array.shape

    def dtype_name(self, tensor: Any) -> str:
        """The dtype's short name: ``"float32"``, ``"bfloat16"``, ``"int64"``, ..."""
        return str(tensor.dtype).rpartition(".")[2]

    # ------------------------------------------------------------------ attaching to a script (``gradscope run``)
    def backward_entry_points(self) -> list[tuple[Any, str]]:
        """``(owner, attribute)`` pairs through which ``tensor.backward()`` and the engine's
        ``autograd.backward`` reach the engine; ``gradscope run`` wraps them while a script runs."""
        raise NotImplementedError

    def in_backward(self) -> bool:
        """True while a backward pass runs in this thread (e.g. activation checkpointing's
        recomputation of forward)."""
        raise NotImplementedError

    def is_compiling(self) -> bool:
        """True while a compiler traces the code (hooks must then do nothing)."""
        return False

    def gradient_scaler_class(self) -> type | None:
        """The engine's loss-scaling class (``scale(outputs)``, ``step(optimizer)``,
        ``get_scale()``), or None when the engine has none."""
        return None

    def process_start_entry_points(self) -> list[tuple[Any, str]]:
        """``(owner, attribute)`` pairs of the functions through which a script starts processes for
        its ranks (``torch.multiprocessing.start_processes``, called as ``start_processes(fn,
        args=(), nprocs=1, ...)``); ``gradscope run`` wraps them to follow those processes."""
        return []

    def record_graph_ops(self, follow: Callable[[str], bool], limit: int) -> "GraphOpRecorder | None":
        """A :class:`GraphOpRecorder` for the operations run outside the model (the loss
        computation), or None when the engine cannot record them (gradscope's engine: a NaN the
        loss computation makes is then reported without node or line).

        ``follow(filename)`` tells the user's files: each record keeps the innermost such frame.
        Only the last ``limit`` records are kept.
        """
        return None

    def is_compiled_module(self, module: Any) -> bool:
        """True if ``module`` is a compiled wrapper whose inner modules' hooks are not observed."""
        return False

    def uncompiled(self, module: Any) -> Any:
        """The module a compiled wrapper wraps (``module`` itself when it is not one)."""
        return module

    # ------------------------------------------------------------------ debugger (gradscope.debug)
    def gradient_edge(self, tensor: Any) -> tuple[Any, int] | None:
        """``(node, output_nr)`` that receives ``tensor``'s gradient in backward: its ``grad_fn``
        and output slot, or a leaf's gradient accumulator; None when it does not require grad."""
        raise NotImplementedError

    def queue_backward_callback(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` once the backward pass now running has finished."""
        raise NotImplementedError

    def node_creation_frames(self, node: Any) -> list[tuple[str, int, str]]:
        """``[(file, line, function), ...]``, outermost first, of the code that created ``node``
        (empty unless it was created inside :meth:`record_creation_traces`)."""
        return [(file, line, "") for file, line in self.node_trace(node)]

    def debug_namespace(self) -> dict[str, Any]:
        """The engine's names for expressions typed at the debugger's prompt (``gs`` or ``torch``)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ distributed (``gradscope run`` under torchrun)
    def process_group(self) -> Any:
        """The per-step collectives on the script's initialised default process group
        (:class:`gradscope.engines.torch_distributed.DistributedTensors`), or None."""
        return None

    def group_teardown_entry_points(self) -> list[tuple[Any, str]]:
        """``(owner, attribute)`` pairs through which a script tears down its process group
        (``torch.distributed.destroy_process_group``): the last point every rank reaches with the
        group still up, where ``gradscope run`` makes its end-of-run checks collectively."""
        return []

    def local_module(self, module: Any) -> Any:
        """The module to call when re-running ``module`` on this process alone (a data-parallel
        wrapper's inner module, whose call starts no collective); ``module`` itself otherwise."""
        return module


class GraphOpRecorder:
    """Records the operations that return floating-point tensors while it is started.

    State: ``records``, a sequence of ``(output, node, (file, line) | None, operation, inputs)``,
    one per such operation, in the order they ran: ``node`` is the output's autograd node (None
    when its inputs need no gradient), ``operation`` the function called (``torch.log``),
    ``inputs`` its ``(args, kwargs)``. Outputs and inputs are kept until :meth:`clear`. Starting and stopping may happen in different hooks; :meth:`stop` when not
    started does nothing.
    """

    engine: Engine

    def start(self) -> None:
        """Record from now on."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop recording (the records stay)."""
        raise NotImplementedError

    def clear(self) -> None:
        """Forget the records."""
        raise NotImplementedError


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
                nonfinite += nonfinite_entries(self._engine.to_numpy(grads[index]))
        receiver(_sum_present(squares[:outputs]), _sum_present(squares[outputs:]), nonfinite)


def _sum_present(values: Sequence[float | None]) -> float | None:
    """Sum of the entries that are not None; None when all are."""
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def nonfinite_entries(array: np.ndarray) -> int:
    """Number of NaN and Inf entries of a numpy array."""
    if array.dtype.kind != "f":
        return 0
    return int(array.size - np.count_nonzero(np.isfinite(array)))


def nonfinite_kind_of_array(array: np.ndarray) -> str | None:
    """``"nan"`` if a numpy array holds a NaN, else ``"inf"`` if it holds an Inf, else None
    (always None for an array that is not floating point)."""
    if array.dtype.kind != "f":
        return None
    if np.isnan(array).any():
        return "nan"
    if np.isinf(array).any():
        return "inf"
    return None


#: ``np.vdot`` without numpy's ``__array_function__`` dispatch (a Python call per use; the
#: arrays here are always plain ndarrays), where numpy exposes it.
_vdot = getattr(np.vdot, "_implementation", np.vdot)

#: A float32 sum of squares below this may have lost squares to underflow (float32's smallest
#: normal number is about 1.2e-38): it is computed again in float64.
_FLOAT32_SQUARES_MIN = 1e-30
_FLOAT32 = np.dtype(np.float32)
_FLOAT64 = np.dtype(np.float64)


def squared_norm(array: np.ndarray) -> float:
    """Sum of squares of a numpy array, in float64 when float32 would overflow or underflow;
    NaN/Inf when the array holds them."""
    dtype = array.dtype
    if dtype is _FLOAT32:  # (the usual case: one dot product, whose result is in float32's safe range)
        value = float(_vdot(array, array))
        if _FLOAT32_SQUARES_MIN < value < math.inf:
            return value
    elif dtype is _FLOAT64:
        return float(_vdot(array, array))
    if array.dtype.kind != "f" or array.dtype.itemsize < 4:  # (float16 would overflow and round)
        array = array.astype(np.float64)
    value = float(_vdot(array, array))  # (0.0 when empty)
    if array.dtype.itemsize == 4 and not _FLOAT32_SQUARES_MIN < value < math.inf:
        # A small finite sum may have underflowed (the array is finite, or the sum would not be);
        # an infinite one may have overflowed, unless the array holds an infinity; NaN stays NaN.
        if value < math.inf or (value == math.inf and np.isfinite(array).all()):
            flat64 = array.astype(np.float64)
            value = float(_vdot(flat64, flat64))
    return value


#: Float arrays up to this many elements are reduced together by the parameter statistics
#: (``gradscope.monitor.stats``), where each array would otherwise take several calls.
BATCH_LIMIT = 1 << 15


def segment_starts(sizes: Sequence[int]) -> np.ndarray:
    """Where each of arrays of ``sizes`` elements starts once they are concatenated."""
    starts = np.zeros(len(sizes), dtype=np.intp)
    np.cumsum(sizes[:-1], out=starts[1:])
    return starts


def exact_squares(arrays: Sequence[np.ndarray]) -> list[float]:
    """Sums of squares of non-empty float32/float16 arrays, each square taken in float64 (where it
    can neither overflow nor underflow), all arrays in one buffer: for many small arrays."""
    flat = np.concatenate(arrays, axis=None, dtype=np.float64)
    np.multiply(flat, flat, out=flat)
    return np.add.reduceat(flat, segment_starts([array.size for array in arrays])).tolist()


def squared_norms_of_arrays(arrays: Sequence[np.ndarray | None]) -> list[float | None]:
    """:func:`squared_norm` of each array (None for None). Float32 and float64 arrays take one dot
    product each, called from C (``map``: no Python call per array, and no copy, which on a busy
    machine is cheaper than summing them together in one buffer); a result that float32 may have
    overflowed or underflowed is recomputed as :func:`squared_norm` does."""
    if len(arrays) < 3:  # (a monitor's hook: one or two gradients; less set-up one by one)
        return [None if array is None else squared_norm(array) for array in arrays]
    where = [index for index, array in enumerate(arrays)
             if array is not None and (array.dtype is _FLOAT32 or array.dtype is _FLOAT64)]
    plain = [arrays[index] for index in where] if len(where) < len(arrays) else arrays
    values = np.fromiter(map(_vdot, plain, plain), dtype=np.float64, count=len(plain))
    suspect = ~((values > _FLOAT32_SQUARES_MIN) & (values < math.inf))
    squares = values.tolist()
    if suspect.any():
        # float32 sums that may have underflowed or overflowed, again in float64: the small ones
        # together (vanishing gradients make many), the others one by one; float64 ones stand
        batch = []
        for position in np.flatnonzero(suspect).tolist():
            array = plain[position]
            if array.dtype is _FLOAT32 and 0 < array.size <= BATCH_LIMIT:
                batch.append(position)
            elif array.dtype is not _FLOAT64:
                squares[position] = squared_norm(array)
        if batch:
            for position, square in zip(batch, exact_squares([plain[position] for position in batch])):
                squares[position] = square
    if len(where) == len(arrays):  # (the usual case: every array a native float32/float64 one)
        return squares
    result: list[float | None] = [None] * len(arrays)
    for index, square in zip(where, squares):
        result[index] = square
    for index, array in enumerate(arrays):
        if array is not None and result[index] is None:  # (other dtypes, one by one)
            result[index] = squared_norm(array)
    return result
