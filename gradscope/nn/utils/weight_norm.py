"""``weight_norm``: reparametrise a module's weight as ``g * v / ||v||`` (Salimans & Kingma, 2016),
with PyTorch's names (``weight_g``, ``weight_v``), the weight recomputed before every forward."""
from __future__ import annotations

from typing import Any

from gradscope.autograd.tensor import Tensor
from gradscope.nn.modules.module import Module
from gradscope.nn.parameter import Parameter

__all__ = ["WeightNorm", "remove_weight_norm", "weight_norm"]


def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:  # noqa: A002
    """The norm of ``v`` over every dim but ``dim``, shaped to broadcast against ``v`` (whole norm if -1)."""
    if dim == -1:
        return v.norm(pow)
    if dim == 0:
        shape = (v.size(0),) + (1,) * (v.dim() - 1)
        return v.contiguous().view(v.size(0), -1).norm(pow, dim=1).view(*shape)
    if dim == v.dim() - 1:
        shape = (1,) * (v.dim() - 1) + (v.size(-1),)
        return v.contiguous().view(-1, v.size(-1)).norm(pow, dim=0).view(*shape)
    return norm_except_dim(v.transpose(0, dim), pow, 0).transpose(0, dim)


class WeightNorm:
    """The forward pre-hook that recomputes ``module.<name>`` from ``<name>_g`` and ``<name>_v``."""

    def __init__(self, name: str, dim: int) -> None:
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module: Module) -> Tensor:
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return v * (g / norm_except_dim(v, 2, self.dim))

    @staticmethod
    def apply(module: Module, name: str, dim: int | None) -> "WeightNorm":
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, fn.dim).detach()))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs: Any) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Split ``module.<name>`` into a magnitude ``<name>_g`` and a direction ``<name>_v``; returns ``module``."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Fold ``<name>_g`` and ``<name>_v`` back into one parameter ``<name>``."""
    return remove_reparametrization_hook(module, name, WeightNorm, "weight_norm")


def remove_reparametrization_hook(module: Module, name: str, kind: type, what: str) -> Module:
    """Undo the ``kind`` forward pre-hook (weight or spectral norm) of ``module.<name>`` and
    unregister it; raises ``ValueError`` naming ``what`` when there is none."""
    for key, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, kind) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[key]
            return module
    raise ValueError(f"{what} of '{name}' not found in {module}")
