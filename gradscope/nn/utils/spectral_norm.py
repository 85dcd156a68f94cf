"""``spectral_norm``: divide a module's weight by its largest singular value, estimated by power
iteration (Miyato et al., 2018), with PyTorch's names (``weight_orig``, buffers ``weight_u``/``weight_v``).
The vectors advance one power-iteration step per forward in training mode, as in PyTorch."""
from __future__ import annotations

from typing import Any

import numpy as np

from gradscope.autograd.grad_mode import no_grad
from gradscope.autograd.tensor import Tensor
from gradscope.nn.modules.conv import _ConvTranspose
from gradscope.nn.modules.module import Module
from gradscope.nn.parameter import Parameter
from gradscope.nn.utils.weight_norm import remove_reparametrization_hook
from gradscope.ops import arith, shape

__all__ = ["SpectralNorm", "remove_spectral_norm", "spectral_norm"]


def _normalize(vector: np.ndarray, eps: float) -> np.ndarray:
    return vector / max(float(np.linalg.norm(vector)), eps)


class SpectralNorm:
    """The forward pre-hook that recomputes ``module.<name>`` as ``<name>_orig / sigma``."""

    def __init__(self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.name, self.n_power_iterations, self.dim, self.eps = name, n_power_iterations, dim, eps

    def reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        """The weight as a matrix with ``dim`` as its rows."""
        if self.dim != 0:
            order = [self.dim] + [d for d in range(weight.dim()) if d != self.dim]
            weight = shape.permute(weight, order)
        return shape.reshape(weight, (weight.shape[0], -1))

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Tensor:
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        matrix = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            data = matrix.detach().numpy()
            u_data, v_data = u.numpy(), v.numpy()
            for _ in range(self.n_power_iterations):
                v_data[...] = _normalize(data.T @ u_data, self.eps)
                u_data[...] = _normalize(data @ v_data, self.eps)
            u._bump_version()
            v._bump_version()
            u, v = u.clone(), v.clone()
        sigma = arith.dot(u, arith.mv(matrix, v))
        return arith.div(weight, sigma)

    def remove(self, module: Module) -> None:
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs: Any) -> None:
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))

    @staticmethod
    def apply(module: Module, name: str, n_power_iterations: int, dim: int, eps: float) -> "SpectralNorm":
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two spectral_norm hooks on the same parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        with no_grad():
            rows, cols = fn.reshape_weight_to_matrix(weight).shape
            u = weight.new_empty(rows).normal_(0, 1)
            v = weight.new_empty(cols).normal_(0, 1)
            u = Tensor._make(_normalize(u.numpy(), eps))
            v = Tensor._make(_normalize(v.numpy(), eps))
        del module._parameters[name]
        module.register_parameter(name + "_orig", weight)
        setattr(module, name, weight.detach())
        module.register_buffer(name + "_u", u)
        module.register_buffer(name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
                  dim: int | None = None) -> Module:
    """Normalise ``module.<name>`` by its spectral norm before every forward; returns ``module``."""
    if dim is None:
        dim = 1 if isinstance(module, _ConvTranspose) else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Fold the normalised weight back into one parameter ``<name>``."""
    return remove_reparametrization_hook(module, name, SpectralNorm, "spectral_norm")
