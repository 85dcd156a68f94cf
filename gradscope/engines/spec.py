"""The engine interface: everything that differs between gradscope's engine and PyTorch, and
nothing else (the array kernels live in :mod:`gradscope.engines.kernels`, the objects an engine
hands back when asked to observe in :mod:`gradscope.engines.observers`).

:class:`Engine` is the sum of capability sections, one class each (:class:`Objects`,
:class:`Hooks`, :class:`Modes`, :class:`Graph`, :class:`Numbers`, :class:`Training`,
:class:`State`, :class:`ScriptAttach`, :class:`Debugger`, :class:`Distributed`). Each method
states its contract in its docstring. Abstract methods are those every adapter implements; the
others have a default that is right for an engine without that capability (gradscope's own
engine has no compiler, no process groups, no devices) or that only needs the abstract ones.
The sections are parts of one object: a default may use the methods of another section.

State: the registry (:func:`gradscope.engines.get_engine`) makes one adapter per engine and every
monitor of the process shares it, so an adapter keeps no state about a run, a model or a monitor.
What it may keep is a cache of something the process has set up: the torch adapter keeps the
collectives object of the current default process group (:meth:`Distributed.process_group`),
made again when the script creates another group and dropped when the group goes away. The
objects that adapters return (hook handles, taps, traces, recorders) hold their own state and
belong to the caller.

The monitors, the debugger and the CLI ask an adapter for what is engine-specific and use the API
both engines share (``tensor.grad``, ``tensor.register_hook``, ``node.next_functions``,
``module.named_parameters()``, ``optimizer.state_dict()``, ...) directly.
"""
from __future__ import annotations

import abc
import contextlib
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from gradscope.engines.kernels import nonfinite_count, nonfinite_kind_of_array

if TYPE_CHECKING:
    from gradscope.engines.observers import GradientNormTaps, GraphOpRecorder

__all__ = ["ACCUMULATE_NODE", "CAPABILITIES", "Debugger", "Distributed", "Engine", "Graph", "HOOK_NODE", "Hooks",
           "Modes", "Numbers", "Objects", "ScriptAttach", "State", "Training"]

#: The node name of the identity nodes that module full backward hooks insert (both engines).
HOOK_NODE = "BackwardHookFunctionBackward"
#: The node name of a leaf's gradient accumulator (both engines).
ACCUMULATE_NODE = "torch::autograd::AccumulateGrad"


class Objects(abc.ABC):
    """Which objects belong to the engine."""

    #: The engine's tensor class (parameters are instances too).
    tensor_type: type = type(None)

    @abc.abstractmethod
    def is_module(self, value: Any) -> bool:
        """True if ``value`` is an ``nn.Module`` of this engine."""

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


class Hooks(abc.ABC):
    """Global hooks on every module's forward and every optimizer step (PyTorch's signatures; each
    registration returns a removable handle)."""

    @abc.abstractmethod
    def register_module_forward_pre_hook(self, hook: Callable) -> Any:
        """Global ``hook(module, args) -> None | args`` before every module's forward; returns a handle."""

    @abc.abstractmethod
    def register_module_forward_hook(self, hook: Callable, *, with_kwargs: bool = False,
                                     always_call: bool = False) -> Any:
        """Global ``hook(module, args, output) -> None | output`` after every module's forward."""

    @abc.abstractmethod
    def register_optimizer_step_pre_hook(self, hook: Callable) -> Any:
        """Global ``hook(optimizer, args, kwargs) -> None`` before every ``optimizer.step()``."""

    @abc.abstractmethod
    def register_optimizer_step_post_hook(self, hook: Callable) -> Any:
        """Global ``hook(optimizer, args, kwargs) -> None`` after every ``optimizer.step()``."""


class Modes(abc.ABC):
    """Contexts that change how the engine runs the code inside them."""

    @abc.abstractmethod
    def no_grad(self) -> contextlib.AbstractContextManager:
        """The engine's ``no_grad()`` context."""

    @abc.abstractmethod
    def record_creation_traces(self) -> contextlib.AbstractContextManager:
        """Anomaly mode without its checks: every node created inside remembers the user's stack
        (read it with :meth:`node_trace`)."""

    def trace_nonfinite_ops(self) -> contextlib.AbstractContextManager:
        """A context that watches every operation's output and yields an :class:`OpTrace` naming
        the first operation whose output holds NaN/Inf, or yields None when the engine cannot.
        Slow: for the re-run of a step that already went wrong."""
        return contextlib.nullcontext()


class Graph(abc.ABC):
    """Facts about autograd nodes (``tensor.grad_fn`` and its ``next_functions``), and taps on them."""

    @abc.abstractmethod
    def node_trace(self, node: Any) -> list[tuple[str, int]]:
        """``[(file, line), ...]``, outermost first, of the code that created ``node`` (empty
        unless it was created inside :meth:`record_creation_traces`)."""

    @abc.abstractmethod
    def node_sequence_nr(self, node: Any) -> int:
        """The node's creation sequence number (later nodes have larger numbers)."""

    @abc.abstractmethod
    def node_output_shapes(self, node: Any) -> tuple:
        """The shape of each output of ``node`` (the gradients it receives), as tuples of ints."""

    def node_name(self, tensor: Any) -> str | None:
        """``tensor.grad_fn.name()``, looking through the identity nodes of module backward hooks."""
        node = getattr(tensor, "grad_fn", None)
        while node is not None and node.name() == HOOK_NODE:
            following = [fn for fn, _ in node.next_functions if fn is not None]
            node = following[0] if following else None
        return node.name() if node is not None else None

    @abc.abstractmethod
    def gradient_norm_taps(self) -> GradientNormTaps:
        """A new, empty set of :class:`~gradscope.engines.observers.GradientNormTaps` on this
        engine's autograd nodes (the generic one, or one that reads the gradients more cheaply)."""


class Numbers(abc.ABC):
    """Tensor values on the host, and the statistics the monitors take of them."""

    @abc.abstractmethod
    def to_numpy(self, tensor: Any) -> np.ndarray:
        """The tensor's values on the host as a numpy array, not to be written into: gradscope's
        engine returns the tensor's own array (its dtype, no copy); torch's a copy, in float32
        for 16-bit floats (numpy has no bfloat16)."""

    @abc.abstractmethod
    def squared_norms(self, tensors: Sequence[Any]) -> list[float | None]:
        """Sum of squares of each tensor (None for a None entry), exact for finite values
        (no float32 overflow), NaN/Inf when the tensor holds them, with one host transfer."""

    @abc.abstractmethod
    def fine_squared_norms(self, tensors: Sequence[Any]) -> list[float]:
        """Sum of squares of each tensor's values accumulated in float64, to tell whether a
        parameter changed at all between two points of a run: unlike a float32 norm, it moves
        when an update moves a few entries of a large tensor by an ulp. Equal values give equal
        results; a large tensor is read in pieces, so no float64 copy of it is made. One host
        transfer; not for every step (one reduction per tensor)."""

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

    def nonfinite_count(self, tensor: Any) -> int:
        """The number of NaN and Inf entries of ``tensor`` (0 for a tensor that is not floating
        point)."""
        return nonfinite_count(self.to_numpy(tensor))


class Training(abc.ABC):
    """The engine's own clipping utilities and default optimizer."""

    @abc.abstractmethod
    def clip_grad_norm_(self, parameters: Iterable[Any], max_norm: float) -> Any:
        """The engine's ``nn.utils.clip_grad_norm_``."""

    @abc.abstractmethod
    def clip_grad_value_(self, parameters: Iterable[Any], clip_value: float) -> None:
        """The engine's ``nn.utils.clip_grad_value_``."""

    @abc.abstractmethod
    def sgd(self, parameters: Iterable[Any], lr: float) -> Any:
        """The engine's ``optim.SGD(parameters, lr=lr)``: the default optimizer."""


class State(abc.ABC):
    """Random generator state, tensor copies and where tensors live (snapshots and restores)."""

    @abc.abstractmethod
    def manual_seed(self, seed: int) -> None:
        """Seed the engine's default random generator(s)."""

    @abc.abstractmethod
    def get_rng_state(self) -> dict[str, np.ndarray]:
        """The default generators' states as plain arrays (``{"cpu": ..., "cuda:0": ...}``), which
        the caller must not write to (an engine may hand out the same read-only array while the
        state is unchanged)."""

    @abc.abstractmethod
    def set_rng_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`get_rng_state` returned."""

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

    @abc.abstractmethod
    def copy_into(self, target: Any, value: Any) -> None:
        """``target.copy_(value)`` without recording graph; ``value`` is a tensor or a numpy array
        (moved to the target's device and cast to its dtype)."""

    @abc.abstractmethod
    def from_numpy(self, array: np.ndarray, device: str | None = None, dtype: str | None = None) -> Any:
        """A new tensor with ``array``'s values (on ``device``, as ``dtype`` when given)."""

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


class ScriptAttach(abc.ABC):
    """Attaching to a user's script (``gradscope run``): the functions it wraps while the script
    runs, and what it must know about the code it watches."""

    @abc.abstractmethod
    def backward_entry_points(self) -> list[tuple[Any, str]]:
        """``(owner, attribute)`` pairs through which ``tensor.backward()`` and the engine's
        ``autograd.backward`` reach the engine; ``gradscope run`` wraps them while a script runs."""

    @abc.abstractmethod
    def in_backward(self) -> bool:
        """True while a backward pass runs in this thread (e.g. activation checkpointing's
        recomputation of forward)."""

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


class Debugger(abc.ABC):
    """What the gradient debugger (``gradscope.debug``) needs beyond the monitors."""

    @abc.abstractmethod
    def gradient_edge(self, tensor: Any) -> tuple[Any, int] | None:
        """``(node, output_nr)`` that receives ``tensor``'s gradient in backward: its ``grad_fn``
        and output slot, or a leaf's gradient accumulator; None when it does not require grad."""

    @abc.abstractmethod
    def queue_backward_callback(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` once the backward pass now running has finished."""

    def node_creation_frames(self, node: Any) -> list[tuple[str, int, str]]:
        """``[(file, line, function), ...]``, outermost first, of the code that created ``node``
        (empty unless it was created inside :meth:`record_creation_traces`)."""
        return [(file, line, "") for file, line in self.node_trace(node)]

    @abc.abstractmethod
    def debug_namespace(self) -> dict[str, Any]:
        """The engine's names for expressions typed at the debugger's prompt (``gs`` or ``torch``)."""


class Distributed(abc.ABC):
    """Processes that run one script together (``gradscope run`` under ``torchrun``)."""

    def process_group(self) -> Any:
        """The per-step collectives on the script's initialised default process group
        (:class:`gradscope.engines.torch.distributed.DistributedTensors`), or None: always on an
        engine without process groups (gradscope's), and on torch while no group is up."""
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


class Engine(Objects, Hooks, Modes, Graph, Numbers, Training, State, ScriptAttach, Debugger, Distributed):
    """What the monitor layer needs from an autograd engine: every capability section.

    Attributes:
        name: ``"gradscope"`` or ``"torch"`` (the value of ``--engine``); an identity, not
            something to choose behaviour by outside ``gradscope.engines``.
        display: how messages name it (``"gradscope"``, ``"PyTorch"``).
    """

    name = ""
    display = ""


#: The capability sections of :class:`Engine`, in the order above.
CAPABILITIES = (Objects, Hooks, Modes, Graph, Numbers, Training, State, ScriptAttach, Debugger, Distributed)
