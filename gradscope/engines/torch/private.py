"""Every private PyTorch API the torch adapter relies on, in one place (imported only with torch).

torch does not promise to keep these, so each is reached only through this module, and
``tests/engines/test_torch_private.py`` exercises each one on the installed torch. When a new
torch release comes out, reviewing this file and running that test is the whole check.

Checked on torch 2.6.0 (the lowest supported, ``.ci/torch-lowest``) and 2.13.0 (CI):

==========================================================  ======================================================
private API                                                 what gradscope uses it for
==========================================================  ======================================================
``torch._foreach_norm(tensors, dtype=...)``                 all gradient norms of a step in one batched call
``torch._foreach_copy_(into, tensors)``                     snapshots of parameters into preallocated tensors
``torch.utils._python_dispatch.TorchDispatchMode``          finding the first operation that made a NaN/Inf
``torch.utils._pytree.tree_leaves``                         the tensors among an operation's outputs
``Node._sequence_nr()``                                     the order of autograd nodes (the debugger)
``Node._input_metadata[i].shape``                           the shapes of a node's outputs (its gradients' shapes)
``Node.metadata["traceback_"]`` (anomaly mode)              where a node was created
``torch._C._current_graph_task_id()``                       whether a backward pass is running
``Variable._execution_engine.queue_callback``               running code at the end of the backward pass
``OptimizedModule._orig_mod``                               the module that ``torch.compile`` wraps
``FSDPModule._get_fsdp_state()._fsdp_param_groups``         the FSDP2 parameter groups whose gradient reduction
(torch 2.6: ``._fsdp_param_group``, one or None)            and resharding settings are saved and restored
``FSDPParamGroup.reduce_grads``, ``.all_reduce_grads``,     those settings (see :data:`FSDP_GROUP_SETTINGS`)
``.reshard_after_backward``, ``.post_forward_mesh_info``
==========================================================  ======================================================

``torch.optim.optimizer.register_optimizer_step_pre_hook`` and ``..._post_hook`` are public API
but ``torch.optim`` deletes them from its own namespace, so they are imported from their module.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["CHECKED_ON", "FSDP_GROUP_SETTINGS", "TorchDispatchMode", "compiled_original", "foreach_copy_",
           "foreach_norm", "fsdp_param_groups", "in_backward", "node_creation_traceback", "node_output_shapes",
           "node_sequence_nr", "queue_backward_callback", "tree_leaves"]

#: The torch releases this file was last reviewed against (lowest and newest).
CHECKED_ON = ("2.6.0", "2.13.0")

#: The attributes of an FSDP2 parameter group that :func:`fsdp_param_groups` callers save and restore.
FSDP_GROUP_SETTINGS = ("reduce_grads", "all_reduce_grads", "reshard_after_backward", "post_forward_mesh_info")


def foreach_norm(tensors: Sequence[Any], dtype: Any = None) -> list:
    """The 2-norm of each tensor (accumulated in ``dtype`` when given), one batched call."""
    if dtype is None:
        return list(torch._foreach_norm(list(tensors)))
    return list(torch._foreach_norm(list(tensors), dtype=dtype))


def foreach_copy_(into: Sequence[Any], tensors: Sequence[Any]) -> None:
    """``into[i].copy_(tensors[i])`` for every ``i``, one batched call."""
    torch._foreach_copy_(list(into), list(tensors))


def node_sequence_nr(node: Any) -> int:
    """The autograd node's sequence number (later nodes have larger ones)."""
    return node._sequence_nr()


def node_output_shapes(node: Any) -> tuple:
    """The shapes of the tensors the node's forward produced (the gradients it receives)."""
    return tuple(tuple(int(size) for size in meta.shape) for meta in node._input_metadata)


def node_creation_traceback(node: Any) -> Sequence[str]:
    """The stack lines where the node was created (recorded only under anomaly mode), or ()."""
    return getattr(node, "metadata", {}).get("traceback_") or ()


def in_backward() -> bool:
    """Whether this thread is inside an autograd backward pass."""
    return torch._C._current_graph_task_id() != -1


def queue_backward_callback(callback: Callable[[], None]) -> None:
    """Run ``callback`` once the running backward pass has finished (call it during backward)."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


def compiled_original(module: Any) -> Any | None:
    """The module a ``torch.compile`` wrapper (``OptimizedModule``) holds, or None for any other module."""
    if type(module).__name__ == "OptimizedModule":
        return getattr(module, "_orig_mod", None)
    return None


def fsdp_param_groups(module: Any) -> list:
    """The FSDP2 parameter groups of one ``fully_shard`` module (those of its own parameters)."""
    state = module._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is not None:
        return list(groups)
    group = state._fsdp_param_group  # older torch (checked on 2.6): at most one group per module
    return [] if group is None else [group]
