"""``nn.utils.parametrizations``: ``weight_norm`` and ``spectral_norm`` as parametrizations (PyTorch's
current API), registered through :mod:`gradscope.nn.utils.parametrize` so the parameters are named
as in PyTorch (``parametrizations.weight.original0`` / ``original1`` for weight norm's g and v,
``parametrizations.weight.original`` plus the buffers ``parametrizations.weight.0._u`` / ``_v`` for
spectral norm)."""
from __future__ import annotations

from gradscope.autograd.grad_mode import no_grad
from gradscope.autograd.tensor import Tensor
from gradscope.nn import functional as F
from gradscope.nn.modules.conv import _ConvTranspose
from gradscope.nn.modules.module import Module
from gradscope.nn.utils import parametrize
from gradscope.nn.utils.weight_norm import norm_except_dim
from gradscope.ops import arith, creation, shape

__all__ = ["spectral_norm", "weight_norm"]


class _WeightNorm(Module):
    """``weight = g * v / ||v||`` with the norm over every dim but ``dim`` (the whole tensor for None)."""

    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return arith.mul(weight_v, arith.div(weight_g, norm_except_dim(weight_v, 2, self.dim)))

    def right_inverse(self, weight: Tensor) -> tuple:
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Reparametrise ``module.<name>`` as magnitude ``original0`` (g) times direction ``original1`` (v)."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def load_old_weight_norm(state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                             missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
        # a checkpoint of the old ``nn.utils.weight_norm`` names g and v ``<name>_g``/``<name>_v``
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)

    module._register_load_state_dict_pre_hook(load_old_weight_norm)
    return module


class _SpectralNorm(Module):
    """``weight / sigma`` with ``sigma`` the largest singular value, estimated by power iteration on the
    buffers ``_u`` and ``_v`` (one step per call in training mode, 15 at registration)."""

    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got "
                             f"{dim})")
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            weight_mat = self._reshape_weight_to_matrix(weight)
            rows, cols = weight_mat.shape
            u = creation.empty(rows, dtype=weight.dtype).normal_(0, 1)
            v = creation.empty(cols, dtype=weight.dtype).normal_(0, 1)
            self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
            self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
            self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        if self.dim != 0:
            weight = shape.permute(weight, [self.dim] + [d for d in range(weight.ndim) if d != self.dim])
        return shape.flatten(weight, 1)

    def _power_method(self, weight_mat: Tensor, n_power_iterations: int) -> None:
        """Advance ``_u`` and ``_v`` in place (so replicas and earlier graphs see the same buffers)."""
        with no_grad():
            for _ in range(n_power_iterations):
                self._u.copy_(F.normalize(arith.mv(weight_mat, self._v), dim=0, eps=self.eps))
                self._v.copy_(F.normalize(arith.mv(shape.t(weight_mat), self._u), dim=0, eps=self.eps))

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        u, v = shape.clone(self._u), shape.clone(self._v)
        sigma = arith.dot(u, arith.mv(weight_mat, v))
        return arith.div(weight, sigma)

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
                  dim: int | None = None) -> Module:
    """Divide ``module.<name>`` by its spectral norm on every access (rows along ``dim``: 1 for transposed
    convolutions, else 0)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if isinstance(module, _ConvTranspose) else 0
    parametrize.register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module
