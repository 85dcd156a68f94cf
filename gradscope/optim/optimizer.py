"""The ``Optimizer`` base class: parameter groups, per-parameter state, step hooks and
state dicts in PyTorch's format (state keyed by parameter index)."""
from __future__ import annotations

import copy
import functools
import warnings
from collections import OrderedDict, defaultdict
from typing import Any, Callable

import numpy as np

from gradscope.autograd.grad_mode import enable_grad, no_grad
from gradscope.autograd.tensor import Tensor
from gradscope.utils.hooks import RemovableHandle, add_hook

__all__ = ["Optimizer", "required", "register_optimizer_step_pre_hook", "register_optimizer_step_post_hook"]

_global_step_pre_hooks: OrderedDict = OrderedDict()
_global_step_post_hooks: OrderedDict = OrderedDict()


class _RequiredParameter:
    """Marker for a hyper-parameter that every parameter group must specify."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


def register_optimizer_step_pre_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(optimizer, args, kwargs) -> tuple[args, kwargs] | None`` before every step.

    As in PyTorch, ``args`` starts with the optimizer itself; a returned ``(args, kwargs)``
    replaces the arguments of ``step`` (keep the optimizer first). Global pre hooks run before
    the optimizer's own; after the step its own post hooks run before the global ones.
    """
    return add_hook(_global_step_pre_hooks, hook)


def register_optimizer_step_post_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(optimizer, args, kwargs) -> None`` after every optimizer's step."""
    return add_hook(_global_step_post_hooks, hook)


def _typename(value: Any) -> str:
    if isinstance(value, Tensor):
        return value._type_name()
    module = type(value).__module__
    return type(value).__qualname__ if module == "builtins" else f"{module}.{type(value).__qualname__}"


def _wrap_step(step: Callable) -> Callable:
    """Run step hooks around ``step``, under no_grad, and note that a step happened
    (learning-rate schedulers warn when they are stepped before the optimizer)."""

    @functools.wraps(step)
    def wrapper(self: "Optimizer", *args: Any, **kwargs: Any) -> Any:
        if self.__dict__.get("_stepping"):  # a subclass's step calling super().step(): hooks already ran
            return step(self, *args, **kwargs)
        args = (self, *args)  # as in PyTorch, hooks see the optimizer as the first positional argument
        for hook in (*_global_step_pre_hooks.values(), *self._step_pre_hooks.values()):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{hook} must return None or a tuple of (new_args, new_kwargs), "
                                       f"but got {result}.")
                args, kwargs = result
        self._opt_called = True
        self._stepping = True
        try:
            with no_grad():
                out = step(*args, **kwargs)
        finally:
            self._stepping = False
        for hook in (*self._step_post_hooks.values(), *_global_step_post_hooks.values()):
            hook(self, args, kwargs)
        return out

    wrapper._gradscope_step_wrapped = True
    return wrapper


class Optimizer:
    """Base class for optimizers (PyTorch's ``torch.optim.Optimizer`` API).

    Args:
        params: an iterable of parameters, of ``(name, parameter)`` pairs, or of dicts
            defining parameter groups (each with a ``"params"`` entry).
        defaults: default hyper-parameters, used for groups that do not set them.

    Subclasses implement ``step(closure=None)``; it runs under ``no_grad``, updates
    ``p._data`` in place and bumps each updated parameter's version counter.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "_gradscope_step_wrapped", False):
            cls.step = _wrap_step(step)

    def __init__(self, params: Any, defaults: dict) -> None:
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        self._step_pre_hooks: OrderedDict = OrderedDict()
        self._step_post_hooks: OrderedDict = OrderedDict()
        self._opt_called = False
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {_typename(params)}")
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for index, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {index}")
            for key in sorted(group):
                if key != "params":
                    lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)

    def __getstate__(self) -> dict:
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_step_pre_hooks", OrderedDict())
        self.__dict__.setdefault("_step_post_hooks", OrderedDict())
        self.__dict__.setdefault("_opt_called", False)

    # ---------------------------------------------------------------- groups
    def add_param_group(self, param_group: dict) -> None:
        """Add a parameter group; options it does not set take the optimizer's defaults."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering "
                            "of tensors in sets will change between runs. Please use a list instead.")
        else:
            params = list(params)
        names = [p[0] for p in params if isinstance(p, tuple)]
        params = [p[1] if isinstance(p, tuple) else p for p in params]
        param_group["params"] = params
        if names:
            if len(names) != len(params):
                raise ValueError("all optimizer params should be with/without names. Some param names are missing")
            param_group["param_names"] = names
        for param in params:
            if not isinstance(param, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is " + _typename(param))
            if not (param.is_leaf or param.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            param_group.setdefault(name, default)
        ids = [id(p) for p in params]
        if len(ids) != len(set(ids)):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will "
                          "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
        existing = set()
        for group in self.param_groups:
            existing.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                which = "with names" if "param_names" in param_group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {which} to the optimizer")
        if not existing.isdisjoint(ids):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    # ---------------------------------------------------------------- gradients
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all optimized parameters (to None by default, else to zeros)."""
        for group in self.param_groups:
            for p in group["params"]:
                grad = p._grad
                if grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                    continue
                if grad.grad_fn is not None:
                    grad.detach_()
                else:
                    grad.requires_grad = False
                grad._data.fill(0)
                grad._bump_version()

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        raise NotImplementedError(f"{type(self).__name__} does not implement step()")

    @staticmethod
    def _closure_loss(closure: Callable[[], Any] | None) -> Any:
        if closure is None:
            return None
        with enable_grad():
            return closure()

    # ---------------------------------------------------------------- hooks
    def register_step_pre_hook(self, hook: Callable) -> RemovableHandle:
        """Register ``hook(optimizer, args, kwargs) -> tuple[args, kwargs] | None`` before ``step``."""
        return add_hook(self._step_pre_hooks, hook)

    def register_step_post_hook(self, hook: Callable) -> RemovableHandle:
        """Register ``hook(optimizer, args, kwargs) -> None`` after ``step``."""
        return add_hook(self._step_post_hooks, hook)

    # ---------------------------------------------------------------- state dicts
    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``.

        Parameters are numbered in group order; state values are the live tensors (not copies),
        as in PyTorch.
        """
        mapping: dict[int, int] = {}
        groups = []
        start = 0
        for group in self.param_groups:
            packed = {key: value for key, value in group.items() if key != "params"}
            for index, p in enumerate(group["params"], start):
                mapping.setdefault(id(p), index)
            packed["params"] = [mapping[id(p)] for p in group["params"]]
            start += len(packed["params"])
            groups.append(packed)
        state = {(mapping[id(key)] if isinstance(key, Tensor) else key): value for key, value in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state dict produced by ``state_dict`` (of this optimizer class, or PyTorch's).

        State tensors are copied and cast to their parameter's dtype (``step`` excepted).
        """
        state_dict = dict(state_dict)
        groups = self.param_groups
        saved_groups = copy.deepcopy(list(state_dict["param_groups"]))
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        id_map = {}
        for group, saved in zip(groups, saved_groups):
            for old_id, p in zip(saved["params"], group["params"]):
                id_map[old_id] = p
        state: defaultdict = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in id_map:
                param = id_map[key]
                state[param] = {name: _cast_state(param, name, v) for name, v in value.items()}
            else:
                state[key] = value
        new_groups = []
        for group, saved in zip(groups, saved_groups):
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
            for name, default in self.defaults.items():
                saved.setdefault(name, default)
            new_groups.append(saved)
        self.state = state
        self.param_groups = new_groups


def _cast_state(param: Tensor, name: str, value: Any) -> Any:
    if isinstance(value, np.ndarray):
        value = Tensor._make(value)
    if not isinstance(value, Tensor):
        return value
    if name == "step":
        return Tensor._make(np.array(value._data, dtype=value._data.dtype))
    data = value._data
    if param._data.dtype.kind == "f" and data.dtype.kind == "f":
        data = data.astype(param._data.dtype)
    return Tensor._make(np.array(data))
