"""Module full backward hooks, built from identity nodes around a module call.

Each call of a module that has full backward hooks or backward pre-hooks gets a
``BackwardHook``. Its input tensors pass through one identity node whose post-hook (H_in)
sees the gradients w.r.t. the inputs; its outputs pass through another identity node whose
post-hook (H_out) sees ``grad_output`` before the module's own backward runs.

gradscope differs from PyTorch on purpose in one point: a ``grad_input`` slot that received no
gradient stays ``None`` (PyTorch materialises zeros, which then land in ``.grad``).
"""
from __future__ import annotations

import warnings
from typing import Any

from gradscope.autograd import grad_mode
from gradscope.autograd.function import new_node
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor

_INPLACE_MESSAGE = (
    "Output {index} of BackwardHookFunction is a view and is being modified inplace. This view "
    "was created inside a custom Function (or because an input was returned as-is) and the autograd logic "
    "to handle view+inplace would override the custom backward associated with the custom Function, leading "
    "to incorrect gradients. This behavior is forbidden. You can fix this by cloning the output of the "
    "custom Function. (gradscope: the tensor was wrapped by a module backward hook on {module}; tensors "
    "wrapped for backward hooks must not be modified inplace.)")


_BASE_MODIFIED_MESSAGE = (
    "Output {index} of BackwardHookFunction is a view and its base or another view of its base has "
    "been modified inplace. This view was created inside a custom Function (or because an input was returned "
    "as-is) and the autograd logic to handle view+inplace would override the custom backward associated with "
    "the custom Function, leading to incorrect gradients. This behavior is forbidden. You can fix this by "
    "cloning the output of the custom Function. (gradscope: the tensor was wrapped by a module backward hook "
    "on {module}, and the tensor it wraps was modified inplace after the call.)")

_tensor_grad_fn = Tensor.grad_fn  # the slot's descriptor


class HookedTensor(Tensor):
    """A tensor passed through a module's backward-hook identity node. It aliases the tensor it
    wraps: once that one is modified in place, using this one raises (as PyTorch), because the
    gradient recorded for it would belong to the old value."""

    __slots__ = ("_wrapped_version", "_wrap_note")

    @property  # type: ignore[override]
    def grad_fn(self) -> Any:
        fn = _tensor_grad_fn.__get__(self)
        vc = self._vc
        if fn is not None and vc is not None and vc[0] != self._wrapped_version:
            raise RuntimeError(_BASE_MODIFIED_MESSAGE.format(index=self._output_nr, module=self._wrap_note))
        return fn

    @grad_fn.setter
    def grad_fn(self, value: Any) -> None:
        _tensor_grad_fn.__set__(self, value)


class BackwardHookFunctionBackward(Node):
    """Identity node: passes every incoming gradient through unchanged."""

    _single_input = False
    _slow = True

    def backward(self, *grads):
        return grads


def identity_wrap(tensors: list, module: Any) -> tuple[list, Node | None]:
    """Pass ``tensors`` through one identity node; outputs alias the inputs."""
    node = new_node(BackwardHookFunctionBackward, tuple(tensors))
    outs = []
    for index, t in enumerate(tensors):
        if node is not None and t.requires_grad:
            o = object.__new__(HookedTensor)
            o._data = t._data
            o._vc = vc = t._version_counter()
            o._wrapped_version = vc[0]
            o._wrap_note = type(module).__name__
            o.requires_grad = True
            o.grad_fn = node
            o._output_nr = index
            o._inplace_error = _INPLACE_MESSAGE.format(index=index, module=type(module).__name__)
        else:
            o = Tensor._make(t._data)
            o._vc = t._version_counter()
        outs.append(o)
    if node is not None:
        node._meta = tuple((t._data.shape, t._data.dtype) for t in tensors)
    return outs, node


class BackwardHook:
    """Per-call state linking a module's input and output identity nodes to its hooks."""

    def __init__(self, module: Any, full_hooks: list, pre_hooks: list) -> None:
        self.module = module  # strong reference: a temporary module lives through its hooks
        self.full_hooks = full_hooks
        self.pre_hooks = pre_hooks
        self.grad_outputs: tuple | None = None
        self.n_inputs = 0
        self.input_positions: list | None = None
        self.n_outputs = 0
        self.output_positions: list = []

    # ---------------------------------------------------------------- forward-time setup
    def setup_input_hook(self, args: tuple) -> tuple:
        """Wrap the tensor positional args (after the forward pre-hooks)."""
        self.n_inputs = len(args)
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        if not grad_mode._state.enabled or not any(args[i].requires_grad for i in positions):
            self.input_positions = None
            return args
        wrapped, node = identity_wrap([args[i] for i in positions], self.module)
        self.input_positions = positions
        node.register_hook(self._input_hook)
        new_args = list(args)
        for i, t in zip(positions, wrapped):
            new_args[i] = t
        return tuple(new_args)

    def setup_output_hook(self, result: Any) -> Any:
        """Wrap the tensor outputs (after the forward hooks)."""
        single = isinstance(result, Tensor)
        if not single and not isinstance(result, tuple):
            warnings.warn("For backward hooks to be called, module output should be a Tensor or a tuple of "
                          f"Tensors but received {type(result)}", UserWarning, stacklevel=4)
            return result
        outputs = (result,) if single else result
        self.n_outputs = len(outputs)
        positions = [i for i, o in enumerate(outputs) if isinstance(o, Tensor)]
        if not grad_mode._state.enabled or not any(outputs[i].requires_grad for i in positions):
            return result
        wrapped, node = identity_wrap([outputs[i] for i in positions], self.module)
        self.output_positions = positions
        node.register_hook(self._output_hook)
        new_outputs = list(outputs)
        for i, t in zip(positions, wrapped):
            new_outputs[i] = t
        return new_outputs[0] if single else tuple(new_outputs)

    # ---------------------------------------------------------------- backward-time hooks
    def _output_hook(self, grad_inputs: tuple, grad_outputs: tuple) -> tuple:
        """H_out: grad_output is known; run the pre-hooks (and, if no input needs grad, the hooks)."""
        grad_output = _spread(self.output_positions, grad_inputs, self.n_outputs)
        for hook in self.pre_hooks:
            replaced = hook(self.module, grad_output)
            if replaced is not None:
                grad_output = self._checked(replaced, self.n_outputs, "Backward pre hook", "grad_output")
        self.grad_outputs = grad_output
        if self.input_positions is None:
            warnings.warn(f"Full backward hooks of {type(self.module).__name__} fire when the gradients with "
                          "respect to its outputs are known, with grad_input of None, because no inputs "
                          "require gradients.", UserWarning, stacklevel=2)
            for hook in self.full_hooks:
                returned = hook(self.module, (None,) * self.n_inputs, grad_output)
                if returned is not None and not all(g is None for g in returned):
                    raise RuntimeError("Backward hook for Modules where no input requires gradient should "
                                       "always return None or None for all gradients.")
            self.grad_outputs = None
        return tuple(grad_output[i] for i in self.output_positions)

    def _checked(self, replaced: Any, expected: int, who: str, what: str) -> tuple:
        """A hook's replacement as a tuple; PyTorch's error when its length is wrong."""
        if not isinstance(replaced, (tuple, list)) or len(replaced) != expected:
            got = len(replaced) if isinstance(replaced, (tuple, list)) else type(replaced).__name__
            raise RuntimeError(f"{who} returned an invalid number of {what}, got {got}, but expected "
                               f"{expected} (module {type(self.module).__name__})")
        return tuple(replaced)

    def _input_hook(self, grad_inputs: tuple, grad_outputs: tuple) -> tuple | None:
        """H_in: grad_input is known; run the full hooks, whose return replaces it."""
        if self.grad_outputs is None:
            return None
        grad_input = _spread(self.input_positions, grad_inputs, self.n_inputs)
        for hook in self.full_hooks:
            replaced = hook(self.module, grad_input, self.grad_outputs)
            if replaced is not None:
                grad_input = self._checked(replaced, self.n_inputs, "Backward hook", "grad_input")
        self.grad_outputs = None
        return tuple(grad_input[i] for i in self.input_positions)


def _spread(positions: list, grads: tuple, size: int) -> tuple:
    """A tuple of ``size`` slots: ``grads`` at ``positions``, None elsewhere (non-tensor args)."""
    slots: list = [None] * size
    for position, g in zip(positions, grads):
        slots[position] = g
    return tuple(slots)
