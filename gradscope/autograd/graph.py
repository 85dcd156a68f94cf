"""Graph-level hook utilities: multi-tensor gradient hooks, saved-tensor hooks, callbacks."""
from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Callable, Sequence

from gradscope.autograd.engine import current_task, queue_callback
from gradscope.autograd.node import Node, make_edge, saved_tensor_hooks_disabled, saved_tensor_hooks_stack
from gradscope.autograd.tensor import Tensor
from gradscope.utils.hooks import RemovableHandle

__all__ = ["Node", "disable_saved_tensors_hooks", "register_multi_grad_hook", "save_on_cpu",
           "saved_tensors_hooks", "queue_callback"]


def register_multi_grad_hook(tensors: Sequence[Tensor], fn: Callable, *, mode: str = "all") -> RemovableHandle:
    """Call ``fn`` once per backward call when the gradients of ``tensors`` are known.

    ``mode="all"``: ``fn(grads)`` with a list aligned with ``tensors`` (None for tensors that got
    no gradient in this pass), called from inside the hook of the last tensor to receive its
    gradient. ``mode="any"``: ``fn(grad)`` with the first gradient computed among them.
    """
    if mode not in ("all", "any"):
        raise ValueError(f"Expects mode to be one of ('all', 'any') but got {mode}")
    tensors = list(tensors)
    if mode == "any":
        state = {"task": None}

        def any_hook(grad: Tensor) -> None:
            task = current_task()
            if state["task"] is task:
                return
            state["task"] = task
            fn(grad)

        return _register_all([t for t in tensors if t.requires_grad], [any_hook] * len(tensors))

    for t in tensors:
        assert t.requires_grad, "register_multi_grad_hook(mode='all') needs tensors that require grad"
    count = len(tensors)
    state: dict = {"task": None, "grads": None, "expected": 0, "seen": 0}

    def make_hook(index: int) -> Callable:
        def hook(grad: Tensor) -> None:
            task = current_task()
            if state["task"] is not task:
                state["task"] = task
                state["grads"] = [None] * count
                state["seen"] = 0
                state["expected"] = sum(1 for t in tensors if task is not None
                                        and make_edge(t)[0] is not None
                                        and task.will_execute(make_edge(t)[0]))
            state["grads"][index] = grad
            state["seen"] += 1
            if state["seen"] == state["expected"]:
                grads = state["grads"]
                state["grads"] = None
                fn(grads)

        return hook

    return _register_all(tensors, [make_hook(i) for i in range(count)])


def _register_all(tensors: list, hooks: list) -> RemovableHandle:
    """Register hooks[i] on tensors[i] under one handle that removes them all."""
    dicts = [t._hook_dict() for t in tensors]
    handle = RemovableHandle(*dicts) if dicts else RemovableHandle(OrderedDict())
    for hook_dict, hook in zip(dicts, hooks):
        hook_dict[handle.id] = hook
    return handle


class saved_tensors_hooks:
    """Within the block, ops call ``pack(tensor)`` for each tensor they save (the tensor itself,
    which the hook must not modify in place) and backward calls ``unpack(packed)`` to get it
    back (and uses what it returns)."""

    def __init__(self, pack_hook: Callable[[Tensor], Any], unpack_hook: Callable[[Any], Tensor]) -> None:
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self) -> "saved_tensors_hooks":
        if saved_tensor_hooks_disabled:
            raise RuntimeError(saved_tensor_hooks_disabled[0])
        saved_tensor_hooks_stack.append(_HookPair(self))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        # its own innermost entry: a backward pass puts back the stack it started with, so an
        # enter or exit inside backward neither leaks nor makes a later exit fail
        for index in range(len(saved_tensor_hooks_stack) - 1, -1, -1):
            if saved_tensor_hooks_stack[index].owner is self:
                del saved_tensor_hooks_stack[index]
                break


class _HookPair(tuple):
    """A ``(pack_hook, unpack_hook)`` entry of the saved-tensor hook stack, knowing its context."""

    owner: Any

    def __new__(cls, owner: saved_tensors_hooks) -> "_HookPair":
        pair = super().__new__(cls, (owner.pack_hook, owner.unpack_hook))
        pair.owner = owner
        return pair


class save_on_cpu(saved_tensors_hooks):
    """Saved tensors are kept as copies "on the CPU" and handed back on use. gradscope's
    tensors always live in host memory, so this only copies them (``pin_memory`` and
    ``device_type`` are accepted for PyTorch's signature)."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        def pack_to_cpu(tensor: Tensor) -> Tensor:
            return Tensor._make(tensor._data.copy())

        def unpack_from_cpu(packed: Tensor) -> Tensor:
            return packed

        super().__init__(pack_to_cpu, unpack_from_cpu)


class disable_saved_tensors_hooks:
    """Within the block (or the decorated function), entering ``saved_tensors_hooks`` raises
    ``RuntimeError(error_message)``: for code that cannot work with saved-tensor hooks."""

    def __init__(self, error_message: str) -> None:
        self.error_message = error_message

    def __enter__(self) -> None:
        if saved_tensor_hooks_stack:  # hooks already in force cannot be disabled (as PyTorch)
            raise RuntimeError(self.error_message)
        self._previous = list(saved_tensor_hooks_disabled)
        saved_tensor_hooks_disabled[:] = [self.error_message]

    def __exit__(self, *exc_info: Any) -> None:
        saved_tensor_hooks_disabled[:] = self._previous

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with disable_saved_tensors_hooks(self.error_message):
                return fn(*args, **kwargs)

        return wrapper
