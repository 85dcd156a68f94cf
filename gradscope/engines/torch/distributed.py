"""torch.distributed specifics for ``gradscope run`` under ``torchrun`` (imported only with torch).

Everything that depends on the process group and on ``DTensor`` lives here:

* whether the script's default process group is up, this process's rank and the world size;
* which parameters are sharded (FSDP2 ``fully_shard``: a ``DTensor`` with a ``Shard``
  placement), decided from the parameter itself so that every rank decides the same way;
* the rank-local part of a tensor (a ``DTensor``'s local shard; anything else as it is), so that
  norms are computed without the implicit collectives a ``DTensor`` operation would start;
* the two small collectives of a step (a sum over a float64 vector, a gather of a few integers)
  and a gather of picklable objects for the rare failure path;
* the module a ``DistributedDataParallel`` wrapper holds, which can be called again on one rank
  without starting a gradient all-reduce, and :meth:`DistributedTensors.unsharded`, which gathers
  an FSDP2 model's parameters on every rank at once so that one rank can then re-run it alone.
"""
from __future__ import annotations

import contextlib
import pickle
import time
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist

__all__ = ["DistributedTensors", "group_ready", "local_module"]


def group_ready() -> bool:
    """True once the script has initialised the default process group (and not destroyed it)."""
    return dist.is_available() and dist.is_initialized()


def local_module(module: Any) -> Any:
    """The module inside a ``DistributedDataParallel`` wrapper (else ``module``): calling it runs
    no collective (the wrapper's forward prepares the gradient all-reduce)."""
    if isinstance(module, torch.nn.parallel.DistributedDataParallel):
        return module.module
    return module


def _is_dtensor(value: Any) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch built without distributed tensors
        return False
    return isinstance(value, DTensor)


def _all_gather(output: Any, tensor: Any) -> None:
    """Every rank's ``tensor`` concatenated into ``output`` (torch 2.13 renamed
    ``all_gather_into_tensor`` to ``all_gather_single`` and warns on the old name)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(output, tensor)


class DistributedTensors:
    """The per-step collectives and tensor views on the default process group."""

    def __init__(self) -> None:
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        backend = dist.get_backend()
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        self._in_flight: tuple[Any, ...] = ()

    @staticmethod
    def is_sharded(parameter: Any) -> bool:
        """True for a parameter whose value is split across ranks (a ``DTensor`` with a ``Shard``
        placement): its squared norm is the sum of the ranks' shards' squared norms."""
        if not _is_dtensor(parameter):
            return False
        return any(placement.is_shard() for placement in parameter.placements)

    @staticmethod
    def local(tensor: Any) -> Any:
        """The rank's own part of ``tensor`` (a ``DTensor``'s local shard), or ``tensor`` itself."""
        if tensor is not None and _is_dtensor(tensor):
            return tensor.to_local()
        return tensor

    # gloo runs a collective on its own worker thread, which drops its references to the
    # collective's tensors a moment after ``wait()`` has returned. Dropping the last C++ reference
    # to a tensor that Python created releases its Python object, which needs the GIL; if the
    # interpreter is shutting down by then (a stopped run ends right after its last collective),
    # the worker thread is killed inside a C++ destructor and the process aborts (SIGABRT). So the
    # tensors of every collective the worker may still hold are remembered, and :meth:`release` waits until the worker
    # has let go of them before the process may exit.
    def _hold(self, *tensors: Any) -> None:
        self._in_flight = tuple(t for t in self._in_flight if t._use_count() > 1) + tensors

    def release(self, timeout: float = 5.0) -> None:
        """Make the process safe to exit: wait (at most ``timeout`` seconds) until gloo's worker
        threads hold none of gradscope's collective tensors, then destroy the default process group
        if the script left it up (it was stopped before its own ``destroy_process_group()``)."""
        deadline = time.monotonic() + timeout
        while any(tensor._use_count() > 1 for tensor in self._in_flight) and time.monotonic() < deadline:
            time.sleep(0.001)  # releases the GIL the worker thread is waiting for
        self._in_flight = ()
        if group_ready():
            dist.destroy_process_group()

    @staticmethod
    def rerun_is_local(modules: Sequence[Any]) -> bool:
        """False when calling ``modules`` again on one rank would start collectives gradscope cannot
        switch off: FSDP (v1) ``FullyShardedDataParallel`` gathers its parameters in every forward."""
        try:
            from torch.distributed.fsdp import FullyShardedDataParallel
        except ImportError:  # a torch built without FSDP
            return True
        return not any(isinstance(sub, FullyShardedDataParallel) for module in modules for sub in module.modules())

    @contextlib.contextmanager
    def unsharded(self, modules: Sequence[Any]) -> Iterator[None]:
        """Collective (every rank must enter it, with the same ``modules``): all-gather the
        parameters of every FSDP2 module in ``modules`` (nested ones included, in module order)
        and keep them gathered, with gradient reduction off, until the block exits. Inside it, one
        rank may run the modules' forward and backward passes alone: FSDP neither all-gathers
        parameters that are already gathered nor reduce-scatters gradients it is told not to
        sync. On exit the modules' settings are restored, and their parameters stay gathered
        until their next forward pass.

        Meant for the failure path of a stopping run only: the gradients that the block's
        backward passes accumulate stay in the unsharded parameters' gradients."""
        from torch.distributed.fsdp import FSDPModule

        from gradscope.engines.torch.private import FSDP_GROUP_SETTINGS, fsdp_param_groups

        fsdp = [module for root in modules for module in root.modules() if isinstance(module, FSDPModule)]
        groups = [group for module in fsdp for group in fsdp_param_groups(module)]
        saved = [{name: getattr(group, name) for name in FSDP_GROUP_SETTINGS} for group in groups]
        for module in fsdp:
            module.unshard()
            module.set_reshard_after_forward(False, recurse=False)
            module.set_reshard_after_backward(False, recurse=False)
            module.set_requires_gradient_sync(False, recurse=False)
        try:
            yield
        finally:
            for group, settings in zip(groups, saved):
                for name, value in settings.items():
                    setattr(group, name, value)

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum of ``values`` over all ranks (one ``all_reduce``, float64)."""
        tensor = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        self._hold(tensor)
        dist.all_reduce(tensor)
        return tensor.cpu().tolist()

    def gather(self, values: Sequence[int]) -> list[list[int]]:
        """Every rank's ``values`` (one ``all_gather`` of int64), indexed by rank."""
        tensor = torch.tensor(list(values), dtype=torch.int64, device=self.device)
        gathered = torch.empty(self.world_size * len(values), dtype=torch.int64, device=self.device)
        self._hold(tensor, gathered)
        _all_gather(gathered, tensor)
        return gathered.view(self.world_size, len(values)).cpu().tolist()

    def gather_objects(self, value: Any) -> list[Any]:
        """Every rank's picklable ``value``, indexed by rank (failure path only: two all_gathers,
        the payload sizes and then the padded payloads)."""
        payload = pickle.dumps(value)
        sizes = [size for size, in self.gather([len(payload)])]
        local = torch.zeros(max(sizes), dtype=torch.uint8, device=self.device)
        local[:len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        gathered = torch.empty(self.world_size * max(sizes), dtype=torch.uint8, device=self.device)
        self._hold(local, gathered)
        _all_gather(gathered, local)
        rows = gathered.view(self.world_size, max(sizes)).cpu().numpy()
        return [pickle.loads(rows[rank, :size].tobytes()) for rank, size in enumerate(sizes)]
