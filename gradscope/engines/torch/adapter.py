"""PyTorch (optional): imported only when a torch model is loaded or ``--engine torch`` is given.

Statistics stay on the tensors' devices: one batched norm call over all tensors
(``torch._foreach_norm``), one transfer of the resulting small vector to the host. A float32
norm overflows to ``inf`` for finite values above about 1e19, so a non-finite norm is confirmed
with a float64 norm of that tensor alone before it is reported (a rare, slow path).
"""
from __future__ import annotations

import contextlib
import math
import re
import sys
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from gradscope.engines.observers import GradientNormTaps, GraphOpRecorder, OpTrace
from gradscope.engines.spec import Engine
from gradscope.engines.torch import private
from gradscope.engines.torch.dispatch import _NonFiniteOps, _TorchGraphOpRecorder

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_LOW_PRECISION = (torch.float16, torch.bfloat16)


_FINE_PIECE = 1 << 20  # elements converted to float64 at a time by fine_squared_norms


def _norms(tensors: list) -> list:
    """2-norms of the tensors in one batched call per precision group (16-bit floats accumulate
    in float32), in the order given."""
    low = [index for index, t in enumerate(tensors) if t.dtype in _LOW_PRECISION]
    if not low:
        return private.foreach_norm(tensors)
    if len(low) == len(tensors):
        return private.foreach_norm(tensors, dtype=torch.float32)
    result: list = [None] * len(tensors)
    high = [index for index in range(len(tensors)) if index not in set(low)]
    for indices, norms in ((low, private.foreach_norm([tensors[i] for i in low], dtype=torch.float32)),
                           (high, private.foreach_norm([tensors[i] for i in high]))):
        for index, norm in zip(indices, norms):
            result[index] = norm
    return result


def _local(tensor: Any) -> Any:
    """The rank's own shard of a distributed tensor (norms of it start no collective); else ``tensor``."""
    if type(tensor) is torch.Tensor or type(tensor) is torch.nn.Parameter:
        return tensor
    from gradscope.engines.torch.distributed import DistributedTensors

    return DistributedTensors.local(tensor)


class TorchEngine(Engine):
    """The adapter for PyTorch.

    Its one piece of state is a cache: the :class:`~gradscope.engines.torch.distributed.DistributedTensors`
    of the script's default process group, kept while that group is up (see :meth:`process_group`).
    """

    name = "torch"
    display = "PyTorch"
    tensor_type = torch.Tensor
    _group: Any = None
    _group_key: Any = None

    def is_module(self, value: Any) -> bool:
        return isinstance(value, torch.nn.Module)

    def register_module_forward_pre_hook(self, hook: Callable) -> Any:
        return torch.nn.modules.module.register_module_forward_pre_hook(hook)

    def register_module_forward_hook(self, hook: Callable, *, with_kwargs: bool = False,
                                     always_call: bool = False) -> Any:
        return torch.nn.modules.module.register_module_forward_hook(hook, with_kwargs=with_kwargs,
                                                                    always_call=always_call)

    def register_optimizer_step_pre_hook(self, hook: Callable) -> Any:
        from torch.optim.optimizer import register_optimizer_step_pre_hook  # torch.optim deletes the attribute

        return register_optimizer_step_pre_hook(hook)

    def register_optimizer_step_post_hook(self, hook: Callable) -> Any:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        return register_optimizer_step_post_hook(hook)

    def no_grad(self) -> contextlib.AbstractContextManager:
        return torch.no_grad()

    def record_creation_traces(self) -> contextlib.AbstractContextManager:
        return torch.autograd.set_detect_anomaly(True, check_nan=False)

    @contextlib.contextmanager
    def trace_nonfinite_ops(self) -> Any:
        trace = OpTrace()
        with _NonFiniteOps(trace):
            yield trace

    def node_trace(self, node: Any) -> list[tuple[str, int]]:
        frames = []
        for text in private.node_creation_traceback(node):
            match = _FRAME.search(text)
            if match is not None:
                frames.append((match["file"], int(match["line"])))
        return frames

    def node_sequence_nr(self, node: Any) -> int:
        return private.node_sequence_nr(node)

    def node_output_shapes(self, node: Any) -> tuple:
        return private.node_output_shapes(node)

    def to_numpy(self, tensor: Any) -> np.ndarray:
        tensor = tensor.detach()
        if tensor.dtype in _LOW_PRECISION:
            tensor = tensor.float()
        elif tensor.device.type == "cpu":
            # A copy: numpy() on the tensor's own storage would make that storage unresizable for
            # good, which breaks FSDP2 (it resizes the storage of the parameters it gathers).
            tensor = tensor.clone()
        return tensor.cpu().numpy()

    def squared_norms(self, tensors: Sequence[Any]) -> list[float | None]:
        return self._squares(None, tensors)[1]

    def gradient_norm_taps(self) -> GradientNormTaps:
        return GradientNormTaps(self)

    def fine_squared_norms(self, tensors: Sequence[Any]) -> list[float]:
        values = []
        for tensor in tensors:
            local = _local(tensor).detach()
            if local.is_complex():
                local = torch.view_as_real(local)
            wide = torch.float32 if local.device.type == "mps" else torch.float64  # (mps has no float64)
            total = torch.zeros((), dtype=wide, device=local.device)
            for piece in local.reshape(-1).split(_FINE_PIECE):  # (a float64 copy of one piece at a time)
                total += piece.to(wide).square().sum()
            values.append(total)
        return [float(value) for value in torch.stack(values).cpu().tolist()] if values else []

    def activation_summary(self, tensor: Any) -> Any:
        # The smallest and the largest entry, as a 2-element tensor: NaN when an entry is NaN
        # (both reductions propagate it), +-Inf when an entry is infinite, finite otherwise (its
        # norm can't overflow: squared_norms recomputes an overflowing one in float64). One
        # reduction kernel and no host synchronisation; unlike a sum, it needs no float64 copy of
        # the activation (sum(dtype=float64) on CPU allocates one, twice the activation's size,
        # which costs time and, freed at once, fragments the heap: peak RSS grew by a fifth).
        local = _local(tensor).detach()
        if local.numel() == 0:
            return local.new_zeros(2, dtype=torch.float32)
        if local.is_complex():
            local = torch.view_as_real(local)
        if not local.is_floating_point():
            return local.sum()
        return torch.stack(torch.aminmax(local))

    def loss_and_squared_norms(self, loss: Any, tensors: Sequence[Any]) -> tuple[float, list[float | None]]:
        return self._squares(loss, tensors)

    def _squares(self, loss: Any, tensors: Sequence[Any]) -> tuple[float, list[float | None]]:
        present = [_local(t).detach() for t in tensors if t is not None]
        values: list[Any] = [loss.detach().reshape(())] if loss is not None else []
        if present:
            values.extend(_norms(present))
        if not values:
            return math.nan, [None] * len(tensors)
        device = values[0].device
        if any(v.device != device for v in values):
            values = [v.to(device) for v in values]
        host = torch.stack(values).to(torch.float64).tolist()
        loss_value = host.pop(0) if loss is not None else math.nan
        squares = iter(value * value for value in host)
        result: list[float | None] = []
        for tensor in tensors:
            if tensor is None:
                result.append(None)
                continue
            square = next(squares)
            if not math.isfinite(square):
                square = float(torch.linalg.vector_norm(_local(tensor).detach(), dtype=torch.float64).item()) ** 2
            result.append(square)
        return loss_value, result

    def clone_all(self, tensors: Sequence[Any], into: Sequence[Any] | None = None) -> list:
        if into is None:
            return [tensor.detach().clone() for tensor in tensors]
        if tensors:
            with torch.no_grad():
                private.foreach_copy_(into, tensors)
        return list(into)

    def clip_grad_norm_(self, parameters: Iterable[Any], max_norm: float) -> Any:
        return torch.nn.utils.clip_grad_norm_(list(parameters), max_norm)

    def clip_grad_value_(self, parameters: Iterable[Any], clip_value: float) -> None:
        torch.nn.utils.clip_grad_value_(list(parameters), clip_value)

    def sgd(self, parameters: Iterable[Any], lr: float) -> Any:
        return torch.optim.SGD(parameters, lr=lr)

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def get_rng_state(self) -> dict[str, np.ndarray]:
        state = {"cpu": torch.get_rng_state().numpy().copy()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            for index, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
                state[f"cuda:{index}"] = cuda_state.numpy().copy()
        return state

    def set_rng_state(self, state: dict[str, np.ndarray]) -> None:
        torch.set_rng_state(torch.from_numpy(np.array(state["cpu"], dtype=np.uint8)))
        for key, value in state.items():
            if key.startswith("cuda:") and torch.cuda.is_available():
                torch.cuda.set_rng_state(torch.from_numpy(np.array(value, dtype=np.uint8)), device=key)

    def storage_key(self, tensor: Any) -> tuple:
        return tensor.data_ptr(), tensor.numel() * tensor.element_size(), tuple(tensor.shape)

    def copy_into(self, target: Any, value: Any) -> None:
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(np.array(value))
        with torch.no_grad():
            target.copy_(value)

    def from_numpy(self, array: np.ndarray, device: str | None = None, dtype: str | None = None) -> Any:
        tensor = torch.from_numpy(np.array(array))
        target_dtype = getattr(torch, dtype) if dtype is not None else tensor.dtype
        return tensor.to(device=device or "cpu", dtype=target_dtype)

    def describe_device(self, tensor: Any) -> str | None:
        return str(tensor.device)

    # ------------------------------------------------------------------ attaching to a script (``gradscope run``)
    def backward_entry_points(self) -> list[tuple[Any, str]]:
        return [(torch.autograd, "backward")]

    def in_backward(self) -> bool:
        return private.in_backward()

    def is_compiling(self) -> bool:
        return torch.compiler.is_compiling()

    def gradient_scaler_class(self) -> type | None:
        return torch.amp.GradScaler

    def process_start_entry_points(self) -> list[tuple[Any, str]]:
        import torch.multiprocessing

        spawning = sys.modules.get("torch.multiprocessing.spawn")
        points = [(torch.multiprocessing, "start_processes")]
        if spawning is not None and hasattr(spawning, "start_processes"):
            points.append((spawning, "start_processes"))  # what torch.multiprocessing.spawn calls
        return points

    def record_graph_ops(self, follow: Callable[[str], bool], limit: int) -> GraphOpRecorder | None:
        return _TorchGraphOpRecorder(self, follow, limit)

    def is_compiled_module(self, module: Any) -> bool:
        return private.compiled_original(module) is not None

    def uncompiled(self, module: Any) -> Any:
        from gradscope.engines.torch.distributed import local_module

        module = local_module(module)  # a DDP wrapper is named as the model it holds
        original = private.compiled_original(module)
        return module if original is None else original

    # ------------------------------------------------------------------ debugger (gradscope.debug)
    _FRAME_IN = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')

    def gradient_edge(self, tensor: Any) -> tuple[Any, int] | None:
        if not tensor.requires_grad:
            return None
        edge = torch.autograd.graph.get_gradient_edge(tensor)
        return edge.node, edge.output_nr

    def queue_backward_callback(self, callback: Callable[[], None]) -> None:
        private.queue_backward_callback(callback)

    def node_creation_frames(self, node: Any) -> list[tuple[str, int, str]]:
        frames = []
        for text in private.node_creation_traceback(node):
            match = self._FRAME_IN.search(text)
            if match is not None:
                frames.append((match["file"], int(match["line"]), match["function"]))
        return frames

    def debug_namespace(self) -> dict[str, Any]:
        return {"torch": torch}

    # ------------------------------------------------------------------ distributed
    def process_group(self) -> Any:
        from gradscope.engines.torch.distributed import DistributedTensors, group_ready

        if not group_ready():
            self._group = None
            return None
        import torch.distributed as dist

        world = dist.group.WORLD
        if self._group is None or self._group_key is not world:
            self._group, self._group_key = DistributedTensors(), world
        return self._group

    def group_teardown_entry_points(self) -> list[tuple[Any, str]]:
        import torch.distributed as dist

        return [(dist, "destroy_process_group")] if dist.is_available() else []

    def local_module(self, module: Any) -> Any:
        from gradscope.engines.torch.distributed import local_module

        return local_module(module)
