"""``nn.Module``: registration of parameters, buffers and submodules, state dicts, and the
hook system (per-module and global forward, backward and registration hooks).

All dispatch lives in ``Module._call_impl``, in PyTorch's order; without any hook registered
anywhere a call goes straight to ``forward``.
"""
from __future__ import annotations

import itertools
import warnings
import weakref
from collections import OrderedDict, namedtuple
from typing import Any, Callable, Iterator

import numpy as np

from gradscope.autograd.tensor import Tensor
from gradscope.hooks.backward import BackwardHook
from gradscope.nn.parameter import Buffer, Parameter
from gradscope.utils.hooks import RemovableHandle, add_hook

__all__ = ["Module", "register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_pre_hook", "register_module_full_backward_hook",
           "register_module_backward_hook", "register_module_module_registration_hook",
           "register_module_parameter_registration_hook", "register_module_buffer_registration_hook"]

_global_forward_pre_hooks: OrderedDict = OrderedDict()
_global_forward_hooks: OrderedDict = OrderedDict()
_global_forward_hooks_with_kwargs: OrderedDict = OrderedDict()
_global_forward_hooks_always_called: OrderedDict = OrderedDict()
_global_backward_pre_hooks: OrderedDict = OrderedDict()
_global_backward_hooks: OrderedDict = OrderedDict()
_global_non_full_backward_hooks: OrderedDict = OrderedDict()  # ids of the deprecated kind among them
_global_module_registration_hooks: OrderedDict = OrderedDict()
_global_parameter_registration_hooks: OrderedDict = OrderedDict()
_global_buffer_registration_hooks: OrderedDict = OrderedDict()

_LEGACY_WARNING = ("{old} is deprecated: in PyTorch it reports only the gradients of the module's last "
                   "operation. gradscope registers it as a full backward hook; use {new} instead.")


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class _WrappedHook:
    """A load-state-dict pre-hook, called with its module first when registered ``with_module``.
    It holds the module weakly (no reference cycle keeps a module alive), and strongly only
    while pickled."""

    def __init__(self, hook: Callable, module: "Module | None" = None) -> None:
        self.hook = hook
        self.with_module = module is not None
        if module is not None:
            self.module = weakref.ref(module)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.with_module:
            module = self.module()
            if module is None:
                raise RuntimeError("You are trying to call the hook of a dead Module!")
            return self.hook(module, *args, **kwargs)
        return self.hook(*args, **kwargs)

    def __getstate__(self) -> dict:
        state = {"hook": self.hook, "with_module": self.with_module}
        if self.with_module:
            state["module"] = self.module()
        return state

    def __setstate__(self, state: dict) -> None:
        self.hook = state["hook"]
        self.with_module = state["with_module"]
        if self.with_module:
            if state["module"] is None:
                raise RuntimeError("You are trying to revive the hook of a dead Module!")
            self.module = weakref.ref(state["module"])


class _PublicStateDictHook:
    """A ``register_state_dict_post_hook`` hook: it must return None (it edits the dict in place)."""

    _from_public_api = True

    def __init__(self, hook: Callable) -> None:
        self.hook = hook

    def __call__(self, *args: Any) -> Any:
        return self.hook(*args)


def _parameter_items(module: "Module") -> Any:
    return module._parameters.items()


def _buffer_items(module: "Module") -> Any:
    return module._buffers.items()


def _typename(value: Any) -> str:
    if isinstance(value, Tensor):
        return value._type_name()
    return type(value).__module__ + "." + type(value).__qualname__ if type(value).__module__ != "builtins" \
        else type(value).__name__


# ---------------------------------------------------------------- global hook registration
def register_module_forward_pre_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(module, args) -> args | None`` for every module call, before local pre-hooks."""
    return add_hook(_global_forward_pre_hooks, hook)


def register_module_forward_hook(hook: Callable, *, with_kwargs: bool = False,
                                 always_call: bool = False) -> RemovableHandle:
    """Register ``hook(module, args, output) -> output | None`` for every module call.

    With ``with_kwargs=True`` the hook is called as ``hook(module, args, kwargs, output)``;
    with ``always_call=True`` it also runs when forward raises.
    """
    handle = RemovableHandle(_global_forward_hooks, _global_forward_hooks_with_kwargs,
                             _global_forward_hooks_always_called)
    _global_forward_hooks[handle.id] = hook
    if with_kwargs:
        _global_forward_hooks_with_kwargs[handle.id] = True
    if always_call:
        _global_forward_hooks_always_called[handle.id] = True
    return handle


def register_module_full_backward_pre_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(module, grad_output) -> tuple | None`` for every module, before local ones."""
    return add_hook(_global_backward_pre_hooks, hook)


def register_module_full_backward_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(module, grad_input, grad_output) -> tuple | None`` for every module."""
    return add_hook(_global_backward_hooks, hook)


def register_module_backward_hook(hook: Callable) -> RemovableHandle:
    """Deprecated: registers a *full* backward hook for every module and warns (FutureWarning)."""
    warnings.warn(_LEGACY_WARNING.format(old="register_module_backward_hook",
                                         new="register_module_full_backward_hook"), FutureWarning, stacklevel=2)
    handle = RemovableHandle(_global_backward_hooks, _global_non_full_backward_hooks)
    _global_backward_hooks[handle.id] = hook
    _global_non_full_backward_hooks[handle.id] = True
    return handle


_NON_FULL_WARNINGS = {
    "output": "Using non-full backward hooks on a Module that does not return a single Tensor or a tuple of "
              "Tensors is deprecated and will be removed in future versions. This hook will be missing some of "
              "the grad_output. Please use register_full_backward_hook to get the documented behavior.",
    "input": "Using non-full backward hooks on a Module that does not take as input a single Tensor or a tuple "
             "of Tensors is deprecated and will be removed in future versions. This hook will be missing some "
             "of the grad_input. Please use register_full_backward_hook to get the documented behavior.",
    "nested": "Using a non-full backward hook when outputs are nested in python data structure is deprecated "
              "and will be removed in future versions. This hook will be missing some grad_output.",
    "nodes": "Using a non-full backward hook when outputs are generated by different autograd Nodes is "
             "deprecated and will be removed in future versions. This hook will be missing some grad_output. "
             "Please use register_full_backward_hook to get the documented behavior.",
    "forward": "Using a non-full backward hook when the forward contains multiple autograd Nodes is deprecated "
               "and will be removed in future versions. This hook will be missing some grad_input. Please use "
               "register_full_backward_hook to get the documented behavior.",
}


def _warn_non_full_backward_hook(inputs: tuple, result: Any) -> None:
    """PyTorch's FutureWarnings for a module call that a deprecated (non-full) backward hook
    would see only part of. gradscope runs such hooks as full hooks; the warnings still say
    where PyTorch's legacy hook would have been wrong."""
    var = result
    while not isinstance(var, Tensor):
        if isinstance(var, dict):
            var = next((v for v in var.values() if isinstance(v, Tensor)), None)
        elif isinstance(var, (list, tuple)) and var:
            var = var[0]
        else:
            return
        if var is None:
            return
    grad_fn = var.grad_fn
    if grad_fn is None:
        return
    if isinstance(result, Tensor):
        result = (result,)
    elif not (isinstance(result, tuple) and all(isinstance(r, Tensor) for r in result)):
        warnings.warn(_NON_FULL_WARNINGS["output"], FutureWarning, stacklevel=4)
        return
    if not all(isinstance(i, Tensor) for i in inputs):
        warnings.warn(_NON_FULL_WARNINGS["input"], FutureWarning, stacklevel=4)
        return
    out_grad_fn = {r.grad_fn for r in result if r.grad_fn is not None}
    if not out_grad_fn or (len(out_grad_fn) == 1 and grad_fn not in out_grad_fn):
        warnings.warn(_NON_FULL_WARNINGS["nested"], FutureWarning, stacklevel=4)
    elif len(out_grad_fn) > 1:
        warnings.warn(_NON_FULL_WARNINGS["nodes"], FutureWarning, stacklevel=4)
    elif {i.grad_fn for i in inputs if i.grad_fn is not None} != {n for n, _ in grad_fn.next_functions}:
        warnings.warn(_NON_FULL_WARNINGS["forward"], FutureWarning, stacklevel=4)


def register_module_module_registration_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(module, name, submodule) -> Module | None`` called when a submodule is registered."""
    return add_hook(_global_module_registration_hooks, hook)


def register_module_parameter_registration_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(module, name, param) -> Parameter | None`` called when a parameter is registered."""
    return add_hook(_global_parameter_registration_hooks, hook)


def register_module_buffer_registration_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(module, name, buffer) -> Tensor | None`` called when a buffer is registered."""
    return add_hook(_global_buffer_registration_hooks, hook)


def _any_global_call_hooks() -> bool:
    return bool(_global_forward_pre_hooks or _global_forward_hooks or _global_backward_pre_hooks
                or _global_backward_hooks)


def _forward_unimplemented(self: "Module", *args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')


class Module:
    """Base class for all neural network modules (PyTorch's ``nn.Module`` API)."""

    training: bool
    _version = 1
    call_super_init = False
    forward: Callable[..., Any] = _forward_unimplemented

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected argument")
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", OrderedDict())
        setattr_(self, "_buffers", OrderedDict())
        setattr_(self, "_non_persistent_buffers_set", set())
        setattr_(self, "_modules", OrderedDict())
        for name in ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                     "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_pre_hooks",
                     "_backward_hooks", "_state_dict_hooks", "_state_dict_pre_hooks",
                     "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks"):
            setattr_(self, name, OrderedDict())

    # ---------------------------------------------------------------- registration
    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or a None placeholder) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_name(name, "parameter", self._parameters)
        if param is None:
            self._parameters[name] = None
            return
        if not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        if param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be "
                             f"created explicitly. To express '{name}' as a function of another Tensor, compute "
                             "the value in the forward() method.")
        for hook in tuple(_global_parameter_registration_hooks.values()):
            output = hook(self, name, param)
            if output is not None:
                param = output
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a buffer (state that is not a parameter, e.g. BatchNorm's running mean)."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_name(name, "buffer", self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        for hook in tuple(_global_buffer_registration_hooks.values()):
            output = hook(self, name, tensor)
            if output is not None:
                tensor = output
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def _check_name(self, name: Any, kind: str, registry: dict) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain "."')
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if hasattr(self, name) and name not in registry:
            raise KeyError(f"attribute '{name}' already exists")

    def add_module(self, name: str, module: "Module | None") -> None:
        """Add a child module under ``name``."""
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {type(name).__name__}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        for hook in tuple(_global_module_registration_hooks.values()):
            output = hook(self, name, module)
            if output is not None:
                module = output
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path ``target`` ("" is self)."""
        if target == "":
            return self
        module = self
        for item in target.split("."):
            if not hasattr(module, item):
                raise AttributeError(f"{module._get_name()} has no attribute `{item}`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return module

    def get_parameter(self, target: str) -> Parameter:
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
        param = getattr(module, name)
        if not isinstance(param, Parameter):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return param

    def get_buffer(self, target: str) -> Tensor:
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if name not in module._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return module._buffers[name]

    # ---------------------------------------------------------------- attribute protocol
    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        if "_parameters" in d and name in d["_parameters"]:
            return d["_parameters"][name]
        if "_buffers" in d and name in d["_buffers"]:
            return d["_buffers"][name]
        if "_modules" in d and name in d["_modules"]:
            return d["_modules"][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params = d.get("_parameters")

        def remove_from(*dicts: Any) -> None:
            for registry in dicts:
                if name in registry:
                    if isinstance(registry, dict):
                        del registry[name]
                    else:
                        registry.discard(name)

        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(d, d["_buffers"], d["_modules"], d["_non_persistent_buffers_set"])
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        else:
            modules = d.get("_modules")
            if isinstance(value, Module):
                if modules is None:
                    raise AttributeError("cannot assign module before Module.__init__() call")
                remove_from(d, d["_parameters"], d["_buffers"], d["_non_persistent_buffers_set"])
                for hook in tuple(_global_module_registration_hooks.values()):
                    output = hook(self, name, value)
                    if output is not None:
                        value = output
                modules[name] = value
            elif modules is not None and name in modules:
                if value is not None:
                    raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                    "(torch.nn.Module or None expected)")
                modules[name] = value
            else:
                buffers = d.get("_buffers")
                if isinstance(value, Buffer):
                    if buffers is None:
                        raise AttributeError("cannot assign buffer before Module.__init__() call")
                    remove_from(d)
                    self.register_buffer(name, Tensor._make(value._data), value.persistent)
                elif buffers is not None and name in buffers:
                    if value is not None and not isinstance(value, Tensor):
                        raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                        "(torch.Tensor or None expected)")
                    for hook in tuple(_global_buffer_registration_hooks.values()):
                        output = hook(self, name, value)
                        if output is not None:
                            value = output
                    buffers[name] = value
                else:
                    object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        d = self.__dict__
        if name in d.get("_parameters", {}):
            del d["_parameters"][name]
        elif name in d.get("_buffers", {}):
            del d["_buffers"][name]
            d["_non_persistent_buffers_set"].discard(name)
        elif name in d.get("_modules", {}):
            del d["_modules"][name]
        else:
            object.__delattr__(self, name)

    def __dir__(self) -> list:
        keys = list(object.__dir__(self))
        keys += list(self._parameters) + list(self._buffers) + list(self._modules)
        return sorted(set(k for k in keys if not k[0].isdigit()))

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        for name in ("_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                     "_load_state_dict_post_hooks", "_forward_hooks_always_called"):
            if name not in self.__dict__:  # a module pickled before the attribute existed
                object.__setattr__(self, name, OrderedDict())

    # ---------------------------------------------------------------- iteration
    def _named_members(self, get_members: Callable, prefix: str = "", recurse: bool = True,
                       remove_duplicate: bool = True) -> Iterator:
        memo: set = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for module_prefix, module in modules:
            members = get_members(module)
            if not members:  # (most modules of a network own no parameter or buffer)
                continue
            dot = module_prefix + "." if module_prefix else ""
            for name, value in members:
                if value is None:
                    continue
                if remove_duplicate:
                    key = id(value)
                    if key in memo:
                        continue
                    memo.add(key)
                yield dot + name, value

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Yield the parameters of this module (and of its descendants if ``recurse``)."""
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """Yield ``(dotted_name, parameter)``, e.g. ``("body.0.weight", p)``."""
        return self._named_members(_parameter_items, prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        return self._named_members(_buffer_items, prefix, recurse, remove_duplicate)

    def children(self) -> Iterator["Module"]:
        for _, module in self.named_children():
            yield module

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        memo: set = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in memo:
                memo.add(id(module))
                yield name, module

    def modules(self) -> Iterator["Module"]:
        for _, module in self.named_modules():
            yield module

    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, "Module"]]:
        """Yield ``(dotted_path, module)`` for this module and every descendant, depth first."""
        if memo is None:
            memo = set()
        stack = [(prefix, self)]
        while stack:
            path, module = stack.pop()
            if remove_duplicate:
                if id(module) in memo:
                    continue
                memo.add(id(module))
            yield path, module
            if module._modules:
                children = [(path + ("." if path else "") + name, child)
                            for name, child in module._modules.items() if child is not None]
                stack.extend(reversed(children))

    # ---------------------------------------------------------------- modes and grads
    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset parameter gradients (to None by default, else to zeros in place)."""
        for p in self.parameters():
            if p._grad is None:
                continue
            if set_to_none:
                p._grad = None
            else:
                p._grad._data.fill(0)
                p._grad._bump_version()

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def _apply_to_tensors(self, convert: Callable[[np.ndarray], np.ndarray]) -> "Module":
        for module in self.modules():
            for p in module._parameters.values():
                if p is not None and p._data.dtype.kind == "f":
                    p._data = convert(p._data)
                    if p._grad is not None:
                        p._grad._data = convert(p._grad._data)
            for name, b in module._buffers.items():
                if b is not None and b._data.dtype.kind == "f":
                    b._data = convert(b._data)
        return self

    def float(self) -> "Module":
        return self._apply_to_tensors(lambda a: a.astype(np.float32))

    def double(self) -> "Module":
        return self._apply_to_tensors(lambda a: a.astype(np.float64))

    def half(self) -> "Module":
        return self._apply_to_tensors(lambda a: a.astype(np.float16))

    def to(self, *args: Any, **kwargs: Any) -> "Module":
        """Move to a dtype (``cpu`` is the only device)."""
        from gradscope.autograd import dtypes

        target = kwargs.get("dtype")
        for a in list(args) + [kwargs.get("device")]:
            if isinstance(a, dtypes.dtype):
                target = a
            elif isinstance(a, str) and not a.startswith("cpu"):
                raise RuntimeError(f"gradscope runs on the CPU only; cannot move a module to {a!r}")
        if target is None:
            return self
        np_dtype = dtypes.to_numpy_dtype(target)
        return self._apply_to_tensors(lambda arr: arr.astype(np_dtype))

    def cpu(self) -> "Module":
        return self

    def share_memory(self) -> "Module":
        """Move every parameter, gradient and buffer into shared memory (``Tensor.share_memory_``)."""
        for module in self.modules():
            for tensor in list(module._parameters.values()) + list(module._buffers.values()):
                if tensor is not None:
                    tensor.share_memory_()
                    if tensor.grad is not None:
                        tensor.grad.share_memory_()
        return self

    def type(self, dst_type: Any) -> "Module":
        return self.to(dst_type)

    # ---------------------------------------------------------------- state dict
    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()

    def state_dict(self, *args: Any, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> OrderedDict:
        """An ordered dict of every parameter and persistent buffer, keyed by dotted name; its
        ``_metadata`` attribute holds each module's ``version``, as in PyTorch."""
        if args:  # the deprecated positional form state_dict(destination, prefix, keep_vars)
            destination = args[0] if destination is None else destination
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()  # type: ignore[attr-defined]
        local_metadata = {"version": self._version}
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        for hook in tuple(self._state_dict_pre_hooks.values()):
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook in tuple(self._state_dict_hooks.values()):
            result = hook(self, destination, prefix, local_metadata)
            if getattr(hook, "_from_public_api", False):
                if result is not None:
                    raise RuntimeError("state_dict post-hook must return None")
            elif result is not None:
                destination = result
        return destination

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
        for hook in tuple(self._load_state_dict_pre_hooks.values()):
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        persistent_buffers = {k: v for k, v in self._buffers.items() if k not in self._non_persistent_buffers_set}
        local_state = {k: v for k, v in itertools.chain(self._parameters.items(), persistent_buffers.items())
                       if v is not None}
        for name, param in local_state.items():
            key = prefix + name
            if key not in state_dict:
                missing_keys.append(key)
                continue
            value = state_dict[key]
            array = value._data if isinstance(value, Tensor) else np.asarray(value)
            if array.shape != param._data.shape:
                error_msgs.append(f"size mismatch for {key}: copying a param with shape "
                                  f"gradscope.Size({list(array.shape)}) from checkpoint, the shape in current "
                                  f"model is gradscope.Size({list(param._data.shape)}).")
                continue
            param._data[...] = array.astype(param._data.dtype, copy=False)
            param._bump_version()
        if strict:
            for key in state_dict:
                if not key.startswith(prefix):
                    continue
                rest = key[len(prefix):]
                head = rest.split(".", 1)[0]
                if "." in rest:
                    if head not in self._modules:
                        unexpected_keys.append(key)
                elif rest not in local_state:
                    unexpected_keys.append(key)

    def load_state_dict(self, state_dict: dict, strict: bool = True, assign: bool = False) -> _IncompatibleKeys:
        """Copy parameters and buffers from ``state_dict``; returns ``(missing_keys, unexpected_keys)``.

        Each module's load pre-hooks run first (and may rewrite the dict, e.g. to load an old
        checkpoint), its post-hooks ``hook(module, incompatible_keys) -> None`` after it and its
        submodules are loaded; they may edit the key lists, which strict mode then checks."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata  # type: ignore[attr-defined]
        missing: list = []
        unexpected: list = []
        errors: list = []

        def load(module: Module, local_state_dict: dict, prefix: str = "") -> None:
            local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
            if assign:
                local_metadata["assign_to_params_buffers"] = assign
            module._load_from_state_dict(local_state_dict, prefix, local_metadata, True, missing, unexpected,
                                         errors)
            for name, child in module._modules.items():
                if child is not None:
                    child_prefix = prefix + name + "."
                    load(child, {k: v for k, v in local_state_dict.items() if k.startswith(child_prefix)},
                         child_prefix)
            incompatible = _IncompatibleKeys(missing, unexpected)
            for hook in tuple(module._load_state_dict_post_hooks.values()):
                if hook(module, incompatible) is not None:  # (PyTorch asserts it)
                    raise AssertionError("Hooks registered with ``register_load_state_dict_post_hook`` are not "
                                       "expected to return new values, if incompatible_keys need to be "
                                       "modified, it should be done inplace.")

        load(self, state_dict)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected)
                              + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {self._get_name()}:\n\t" + "\n\t".join(errors))
        return _IncompatibleKeys(missing, unexpected)

    # ---------------------------------------------------------------- printing
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """Extra information shown in ``repr`` (override in layers)."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for name, module in self._modules.items():
            child = repr(module).split("\n")
            child = [child[0]] + ["  " + line for line in child[1:]]
            lines.append(f"({name}): " + "\n".join(child))
        main = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    # ---------------------------------------------------------------- hooks
    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """Register ``hook(module, args) -> args | None`` (or ``hook(module, args, kwargs) ->
        (args, kwargs) | None`` with ``with_kwargs``), called before ``forward``."""
        handle = RemovableHandle(self._forward_pre_hooks, self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """Register ``hook(module, args, output) -> output | None`` (``hook(module, args, kwargs,
        output)`` with ``with_kwargs``), called after ``forward``; ``always_call`` also on error."""
        handle = RemovableHandle(self._forward_hooks, self._forward_hooks_with_kwargs,
                                 self._forward_hooks_always_called)
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """Register ``hook(module, grad_output) -> tuple[Tensor | None, ...] | None``, called when the
        gradients w.r.t. the module's outputs are known; a return replaces ``grad_output``."""
        return add_hook(self._backward_pre_hooks, hook, prepend)

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """Register ``hook(module, grad_input, grad_output) -> tuple[Tensor | None, ...] | None``,
        called when the gradients w.r.t. the module's positional inputs are computed; a return
        replaces ``grad_input``. Slots of inputs that got no gradient are None."""
        return add_hook(self._backward_hooks, hook, prepend)

    def register_backward_hook(self, hook: Callable) -> RemovableHandle:
        """Deprecated: registers a *full* backward hook and warns (FutureWarning), and again at a
        call where PyTorch's legacy hook would see only part of the gradients."""
        warnings.warn(_LEGACY_WARNING.format(old="register_backward_hook", new="register_full_backward_hook"),
                      FutureWarning, stacklevel=2)
        if "_non_full_backward_hooks" not in self.__dict__:
            object.__setattr__(self, "_non_full_backward_hooks", OrderedDict())
        handle = RemovableHandle(self._backward_hooks, self._non_full_backward_hooks)
        self._backward_hooks[handle.id] = hook
        self._non_full_backward_hooks[handle.id] = True
        return handle

    def register_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """Register ``hook(module, prefix, keep_vars) -> None``, called before ``state_dict``
        collects this module's entries."""
        return add_hook(self._state_dict_pre_hooks, hook)

    def register_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """Register ``hook(module, state_dict, prefix, local_metadata) -> None``, called after
        ``state_dict`` collected this module's entries (and its submodules'); it edits the dict
        in place."""
        hook = _PublicStateDictHook(hook)
        return add_hook(self._state_dict_hooks, hook)

    def _register_state_dict_hook(self, hook: Callable) -> RemovableHandle:
        """Register ``hook(module, state_dict, prefix, local_metadata) -> dict | None``; a
        returned dict replaces the state dict (PyTorch's private form)."""
        return add_hook(self._state_dict_hooks, hook)

    register_state_dict_hook = _register_state_dict_hook

    def _register_load_state_dict_pre_hook(self, hook: Callable, with_module: bool = False) -> RemovableHandle:
        """Register ``hook(state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs) -> None`` (with ``module`` first when ``with_module``), called
        before this module loads its entries; it may rewrite ``state_dict``."""
        return add_hook(self._load_state_dict_pre_hooks, _WrappedHook(hook, self if with_module else None))

    def register_load_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """Register ``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs) -> None``, called before this module loads its entries."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def register_load_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """Register ``hook(module, incompatible_keys) -> None``, called after ``load_state_dict``
        loaded this module and its submodules; it may edit ``incompatible_keys``' lists in place."""
        return add_hook(self._load_state_dict_post_hooks, hook)

    # ---------------------------------------------------------------- dispatch
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_pre_hooks
                or self._backward_hooks or _global_forward_pre_hooks or _global_forward_hooks
                or _global_backward_pre_hooks or _global_backward_hooks):
            return self.forward(*args, **kwargs)
        return self._call_impl(*args, **kwargs)

    def _forward_hook_list(self) -> list:
        """(hook, with_kwargs, always_call) for global then local forward hooks, read now."""
        hooks = [(h, hid in _global_forward_hooks_with_kwargs, hid in _global_forward_hooks_always_called)
                 for hid, h in _global_forward_hooks.items()]
        if self._forward_hooks:
            hooks += [(h, hid in self._forward_hooks_with_kwargs, hid in self._forward_hooks_always_called)
                      for hid, h in self._forward_hooks.items()]
        return hooks

    def _call_impl(self, *args: Any, **kwargs: Any) -> Any:
        """One module call with every hook kind, in PyTorch's order: the global forward pre-hooks,
        then the module's; with backward (pre-)hooks registered, the inputs passed through an
        identity node; forward; the global forward hooks, then the module's (a return value other
        than None replaces the result); then the outputs through an identity node. When forward or
        a hook raises, the ``always_call`` forward hooks not yet called are called (an error of
        theirs becomes a warning) and the error is raised again. Hook lists are read when the call
        starts (forward hooks: after forward); the kinds nobody registered cost one test each
        (gradscope's monitors register global forward hooks only)."""
        backward_hook = None
        if _global_backward_pre_hooks or _global_backward_hooks or self._backward_pre_hooks or self._backward_hooks:
            backward_hook = BackwardHook(self, [*_global_backward_hooks.values(), *self._backward_hooks.values()],
                                         [*_global_backward_pre_hooks.values(), *self._backward_pre_hooks.values()])
        global_pre = tuple(_global_forward_pre_hooks.values())
        local_pre = [(h, hid in self._forward_pre_hooks_with_kwargs)
                     for hid, h in self._forward_pre_hooks.items()] if self._forward_pre_hooks else ()
        forward_post: list = []
        result = None
        reached = 0  # forward hooks [0, reached) were called (or raised)
        try:
            for hook in global_pre:
                returned = hook(self, args)
                if returned is not None:
                    args = returned if isinstance(returned, tuple) else (returned,)
            for hook, with_kwargs in local_pre:
                if with_kwargs:
                    returned = hook(self, args, kwargs)
                    if returned is not None:
                        if isinstance(returned, tuple) and len(returned) == 2:
                            args, kwargs = returned
                        else:
                            raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, "
                                               f"new_kwargs), but got {returned}.")
                else:
                    returned = hook(self, args)
                    if returned is not None:
                        args = returned if isinstance(returned, tuple) else (returned,)
            if backward_hook is not None:
                plain_args = args
                args = backward_hook.setup_input_hook(args)
            result = self.forward(*args, **kwargs)
            forward_post = self._forward_hook_list()
            for hook, with_kwargs, _ in forward_post:
                reached += 1
                returned = hook(self, args, kwargs, result) if with_kwargs else hook(self, args, result)
                if returned is not None:
                    result = returned
            if backward_hook is not None:
                local_non_full = self.__dict__.get("_non_full_backward_hooks")
                if (_global_non_full_backward_hooks and any(hid in _global_non_full_backward_hooks
                                                            for hid in _global_backward_hooks)) or (
                        local_non_full and any(hid in local_non_full for hid in self._backward_hooks)):
                    _warn_non_full_backward_hook(plain_args, result)
                result = backward_hook.setup_output_hook(result)
            return result
        except Exception:
            self._call_always_called(forward_post or self._forward_hook_list(), reached, args, kwargs, result)
            raise

    def _call_always_called(self, forward_post: list, reached: int, args: tuple, kwargs: dict, result: Any) -> None:
        """After forward or a hook raised: the ``always_call`` forward hooks not reached yet, each
        failure of theirs a warning (the original error is re-raised by the caller)."""
        for index, (hook, with_kwargs, always) in enumerate(forward_post):
            if not always or index < reached:
                continue
            try:
                if with_kwargs:
                    hook(self, args, kwargs, result)
                else:
                    hook(self, args, result)
            except Exception as hook_error:  # noqa: BLE001 - reported as a warning, as PyTorch does
                warnings.warn("forward hook with ``always_call=True`` raised an exception that was "
                              f"silenced as another error was raised in forward: {hook_error}",
                              UserWarning, stacklevel=3)
