"""gradscope's own engine (numpy, CPU): the default. Its API is PyTorch's, so this adapter is thin."""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import weakref
from types import FrameType
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from gradscope.autograd import anomaly, grad_mode
from gradscope.autograd.tensor import Tensor
from gradscope.engines.kernels import fine_squared_norm, nonfinite_count, squared_norm, squared_norms_of_arrays
from gradscope.engines.observers import GradientNormTaps, NonFiniteOp, OpTrace, stack_of
from gradscope.engines.spec import Engine
from gradscope.nn.modules import module as module_hooks
from gradscope.nn.modules.module import Module
from gradscope.optim import optimizer as optimizer_hooks
from gradscope.ops import creation


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where gradscope's operations live (the PyTorch mirror below the modules): a tensor returned by a
# function of these files is an operation's output. (Not nn/modules: a module's attribute lookup
# returns its parameters, which no operation made.)
_OP_SOURCES = tuple(os.path.join(_PACKAGE_DIR, *part) for part in (
    ("ops", ""), ("autograd", ""), ("nn", "functional.py"), ("_api.py",), ("linalg.py",), ("special.py",)))
_RESULT_SOURCE = os.path.join(_PACKAGE_DIR, "autograd", "function.py")
# Operations whose output is uninitialised memory: a NaN there means nothing.
_UNINITIALISED = frozenset({"empty", "empty_like", "new_empty", "empty_strided"})


class _NonFiniteOps:
    """Checks the tensors returned by gradscope's operations (``sys.setprofile``: every Python
    function's return is seen, those of the operations' files are checked) and records each that
    holds NaN/Inf, with the stack that called it. Each tensor is checked once."""

    def __init__(self, engine: "NativeEngine", trace: OpTrace) -> None:
        self.engine = engine
        self.trace = trace
        self._is_op: dict = {}
        self._checked: dict[int, Any] = {}
        self._previous: Any = None

    def __enter__(self) -> OpTrace:
        self._previous = sys.getprofile()
        sys.setprofile(self._returned)
        return self.trace

    def __exit__(self, *exc_info: Any) -> None:
        sys.setprofile(self._previous)
        self._checked.clear()

    def _returned(self, frame: FrameType, event: str, value: Any) -> None:
        if event != "return" or value is None:
            return
        code = frame.f_code
        is_op = self._is_op.get(code)
        if is_op is None:
            is_op = self._is_op[code] = code.co_filename.startswith(_OP_SOURCES) and code.co_name not in _UNINITIALISED
        if not is_op:
            return
        for tensor in self.engine.tensors_in(value):
            if self._checked.get(id(tensor)) is tensor:
                continue
            self._checked[id(tensor)] = tensor
            kind = self.engine.nonfinite_kind(tensor)
            if kind is not None:
                self._record(frame, tensor, kind)
                return

    def _record(self, frame: FrameType, tensor: Tensor, kind: str) -> None:
        op_frame = frame
        while op_frame.f_back is not None and op_frame.f_code.co_filename == _RESULT_SOURCE:
            op_frame = op_frame.f_back  # (result() wraps the output of the operation that called it)
        self.trace.outputs.append(NonFiniteOp(f"gradscope.{op_frame.f_code.co_name}", kind, stack_of(frame), tensor,
                                              tensor.grad_fn))


class NativeEngine(Engine):
    """The adapter for gradscope's numpy engine."""

    name = "gradscope"
    display = "gradscope"
    tensor_type = Tensor

    def is_module(self, value: Any) -> bool:
        return isinstance(value, Module)

    def register_module_forward_pre_hook(self, hook: Callable) -> Any:
        return module_hooks.register_module_forward_pre_hook(hook)

    def register_module_forward_hook(self, hook: Callable, *, with_kwargs: bool = False,
                                     always_call: bool = False) -> Any:
        return module_hooks.register_module_forward_hook(hook, with_kwargs=with_kwargs, always_call=always_call)

    def register_optimizer_step_pre_hook(self, hook: Callable) -> Any:
        return optimizer_hooks.register_optimizer_step_pre_hook(hook)

    def register_optimizer_step_post_hook(self, hook: Callable) -> Any:
        return optimizer_hooks.register_optimizer_step_post_hook(hook)

    def no_grad(self) -> contextlib.AbstractContextManager:
        return grad_mode.no_grad()

    def record_creation_traces(self) -> contextlib.AbstractContextManager:
        return anomaly.set_detect_anomaly(True, check_nan=False, check_inf=False)

    @contextlib.contextmanager
    def trace_nonfinite_ops(self) -> Any:
        with _NonFiniteOps(self, OpTrace()) as trace:
            yield trace

    def node_trace(self, node: Any) -> list[tuple[str, int]]:
        return [(frame.filename, frame.lineno) for frame in getattr(node, "_trace", None) or ()]

    def node_sequence_nr(self, node: Any) -> int:
        return node._seq

    def node_output_shapes(self, node: Any) -> tuple:
        return tuple(tuple(int(size) for size in shape) for shape, _ in node._meta or ())

    def to_numpy(self, tensor: Any) -> np.ndarray:
        return tensor._data

    def squared_norms(self, tensors: Sequence[Any]) -> list[float | None]:
        return squared_norms_of_arrays([None if tensor is None else tensor._data for tensor in tensors])

    def gradient_norm_taps(self) -> GradientNormTaps:
        return NativeGradientNormTaps(self)

    def fine_squared_norms(self, tensors: Sequence[Any]) -> list[float]:
        return [fine_squared_norm(tensor._data) for tensor in tensors]

    def clone(self, tensor: Any) -> Any:
        return Tensor._make(tensor._data.copy())

    def clone_all(self, tensors: Sequence[Any], into: Sequence[Any] | None = None) -> list:
        # Tensors of one dtype are copied into one flat buffer, the copies being views of it: a
        # later copy into them is one call, and :meth:`joined` reads them as one tensor.
        arrays = [tensor._data for tensor in tensors]
        if into is not None:
            base = _flat_base(into)
            if base is not None:
                try:  # (casting="no": a tensor whose dtype changed is copied below, with a cast)
                    np.concatenate(arrays, axis=None, out=base, casting="no")
                    return list(into)
                except (TypeError, ValueError):
                    pass
            for target, array in zip(into, arrays, strict=True):
                target._data[...] = array  # (half the cost of np.copyto per call)
            return list(into)
        if len(arrays) < 2 or any(array.dtype != arrays[0].dtype for array in arrays):
            return [Tensor._make(array.copy()) for array in arrays]
        flat = np.concatenate(arrays, axis=None)
        copies = []
        offset = 0
        for array in arrays:
            copies.append(Tensor._make(flat[offset:offset + array.size].reshape(array.shape)))
            offset += array.size
        return copies

    def joined(self, copies: Sequence[Any]) -> Any | None:
        base = _flat_base(copies)
        return None if base is None else Tensor._make(base)

    def clip_grad_norm_(self, parameters: Iterable[Any], max_norm: float) -> Any:
        from gradscope.nn.utils import clip_grad_norm_

        return clip_grad_norm_(list(parameters), max_norm)

    def clip_grad_value_(self, parameters: Iterable[Any], clip_value: float) -> None:
        from gradscope.nn.utils import clip_grad_value_

        clip_grad_value_(list(parameters), clip_value)

    def sgd(self, parameters: Iterable[Any], lr: float) -> Any:
        from gradscope.optim import SGD

        return SGD(parameters, lr=lr)

    def manual_seed(self, seed: int) -> None:
        creation.manual_seed(seed)

    def get_rng_state(self) -> dict[str, np.ndarray]:
        return {"cpu": creation.default_generator.state_bytes()}  # (read-only; shared until the state changes)

    def set_rng_state(self, state: dict[str, np.ndarray]) -> None:
        creation.set_rng_state(creation.tensor(state["cpu"]))

    def copy_into(self, target: Any, value: Any) -> None:
        if isinstance(value, np.ndarray):
            value = creation.tensor(value)
        with grad_mode.no_grad():
            target.copy_(value)

    def from_numpy(self, array: np.ndarray, device: str | None = None, dtype: str | None = None) -> Any:
        return creation.tensor(array)

    # ------------------------------------------------------------------ attaching to a script (``gradscope run``)
    def backward_entry_points(self) -> list[tuple[Any, str]]:
        import gradscope.autograd
        from gradscope.autograd import engine

        return [(engine, "backward"), (gradscope.autograd, "backward")]

    def in_backward(self) -> bool:
        from gradscope.autograd.engine import current_task

        return current_task() is not None

    # ------------------------------------------------------------------ debugger (gradscope.debug)
    def gradient_edge(self, tensor: Any) -> tuple[Any, int] | None:
        if tensor.grad_fn is not None:
            return tensor.grad_fn, tensor._output_nr
        return (tensor._accumulator(), 0) if tensor.requires_grad else None

    def queue_backward_callback(self, callback: Callable[[], None]) -> None:
        from gradscope.autograd.engine import queue_callback

        queue_callback(callback)

    def node_creation_frames(self, node: Any) -> list[tuple[str, int, str]]:
        return [(frame.filename, frame.lineno, frame.name) for frame in getattr(node, "_trace", None) or ()]

    def debug_namespace(self) -> dict[str, Any]:
        import gradscope

        return {"gs": gradscope}


def _flat_base(copies: Sequence[Any]) -> np.ndarray | None:
    """The flat buffer that ``copies`` (made by :meth:`NativeEngine.clone_all`) tile, or None."""
    if not copies:
        return None
    base = copies[0]._data.base
    if base is None or base.ndim != 1:
        return None
    total = 0
    for copy in copies:
        if copy._data.base is not base:
            return None
        total += copy._data.size
    return base if total == base.size else None


class NativeGradientNormTaps(GradientNormTaps):
    """:class:`GradientNormTaps` as observers of gradscope's nodes: the engine hands them the
    gradients as arrays after the node's post-hooks, with no hook handle and no tensor per
    gradient (a monitor taps a node per module call)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self._taps: list[tuple[weakref.ref, Callable]] = []  # (weak: a tapped graph is freed as usual)

    def add(self, node: Any, output_slots: tuple, input_slots: tuple,
            receiver: Callable[[float | None, float | None, int], None]) -> None:
        observer = functools.partial(_tap, output_slots, input_slots, receiver)
        node._observe(observer)
        self._taps.append((weakref.ref(node), observer))

    def close(self) -> None:
        for ref, observer in self._taps:
            node = ref()
            if node is not None:
                node._unobserve(observer)
        self._taps.clear()


def _tap(output_slots: tuple, input_slots: tuple, receiver: Callable, grad_inputs: tuple, grad_outputs: tuple
         ) -> None:
    """A node observer of :class:`NativeGradientNormTaps`."""
    if len(output_slots) == 1 and len(input_slots) == 1:  # (a module of one op: one gradient each way)
        grad_output, grad_input = grad_outputs[output_slots[0]], grad_inputs[input_slots[0]]
        output_square = None if grad_output is None else squared_norm(grad_output)
        input_square = None if grad_input is None else squared_norm(grad_input)
        nonfinite = 0
        if output_square is not None and not output_square < math.inf:  # (NaN or Inf)
            nonfinite += nonfinite_count(grad_output)
        if input_square is not None and not input_square < math.inf:
            nonfinite += nonfinite_count(grad_input)
        receiver(output_square, input_square, nonfinite)
        return
    output_square, output_nonfinite = _squares_at(grad_outputs, output_slots)
    input_square, input_nonfinite = _squares_at(grad_inputs, input_slots)
    receiver(output_square, input_square, output_nonfinite + input_nonfinite)


def _squares_at(arrays: tuple, slots: tuple) -> tuple[float | None, int]:
    """Sum of the squared norms of ``arrays[slot]`` (None when all are None), and their number of
    NaN/Inf entries."""
    total = None
    nonfinite = 0
    for slot in slots:
        array = arrays[slot]
        if array is not None:
            square = squared_norm(array)
            total = square if total is None else total + square
            if not square < math.inf:  # (NaN or Inf)
                nonfinite += nonfinite_count(array)
    return total, nonfinite
