"""Lazy modules: ``LazyLinear``, ``LazyConv{1,2,3}d``, ``LazyConvTranspose{1,2,3}d``, ``LazyBatchNorm{1,2,3}d``
and ``LazyInstanceNorm{1,2,3}d``.

As in PyTorch, their parameters (and normalisation buffers) are ``UninitializedParameter`` /
``UninitializedBuffer`` until the first call: a forward pre-hook reads the input's feature size,
materialises and initialises them, and the module then becomes the ordinary class (``LazyLinear``
becomes ``Linear``). Build the optimizer after that first (dry) call, as PyTorch requires.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from gradscope.autograd.grad_mode import no_grad
from gradscope.autograd.tensor import Tensor
from gradscope.nn.modules.conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,
                                       ConvTranspose3d)
from gradscope.nn.modules.linear import Linear
from gradscope.nn.modules.normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d,
                                                InstanceNorm2d, InstanceNorm3d)
from gradscope.nn.parameter import UninitializedBuffer, UninitializedParameter, is_lazy

__all__ = ["LazyModuleMixin", "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d",
           "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d",
           "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d"]


class LazyModuleMixin:
    """Infers parameter shapes from the first input (a forward pre-hook), then turns into ``cls_to_become``."""

    cls_to_become: type | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._initialize_hook = self.register_forward_pre_hook(self._infer_parameters, with_kwargs=True)

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        for name, value in itertools.chain(self._parameters.items(), self._buffers.items()):
            if value is None or (name in self._buffers and name in self._non_persistent_buffers_set):
                continue
            destination[prefix + name] = value if is_lazy(value) or keep_vars else value.detach()

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
        for name, value in itertools.chain(self._parameters.items(), self._buffers.items()):
            key = prefix + name
            if key in state_dict and value is not None and is_lazy(value) and not is_lazy(state_dict[key]):
                with no_grad():
                    value.materialize(np.shape(state_dict[key]._data if isinstance(state_dict[key], Tensor)
                                               else state_dict[key]))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def initialize_parameters(self, *args: Any, **kwargs: Any) -> None:
        """Materialise and initialise the parameters for this input (each lazy class defines it)."""
        raise NotImplementedError(f"initialize_parameters is not implemented for {type(self).__name__}")

    def has_uninitialized_params(self) -> bool:
        """True while a parameter or buffer is still uninitialised."""
        return any(is_lazy(v) for v in itertools.chain(self._parameters.values(), self._buffers.values()))

    def _infer_parameters(self, module: Any, args: tuple, kwargs: dict | None = None) -> None:
        module.initialize_parameters(*args, **(kwargs or {}))
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {self._get_name()} has not been fully initialized")
        hook_id = module._initialize_hook.id  # (by id: a deepcopied handle still points at the original's dicts)
        module._forward_pre_hooks.pop(hook_id, None)
        module._forward_pre_hooks_with_kwargs.pop(hook_id, None)
        del module._initialize_hook
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become


class LazyLinear(LazyModuleMixin, Linear):
    """``Linear`` whose ``in_features`` is the last dim of the first input."""

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__(0, 0, False)
        self.weight = UninitializedParameter(dtype=dtype)
        self.out_features = out_features
        if bias:
            self.bias = UninitializedParameter(dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input: Tensor, *args: Any, **kwargs: Any) -> None:
        if self.has_uninitialized_params():
            with no_grad():
                self.in_features = input.shape[-1]
                self.weight.materialize((self.out_features, self.in_features))
                if self.bias is not None:
                    self.bias.materialize((self.out_features,))
                self.reset_parameters()


class _LazyConvMixin(LazyModuleMixin):
    def _init_lazy(self, out_channels: int, bias: bool, dtype: Any) -> None:
        self.weight = UninitializedParameter(dtype=dtype)
        self.out_channels = out_channels
        if bias:
            self.bias = UninitializedParameter(dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()

    def _in_channels(self, input: Tensor) -> int:
        unbatched, batched = self._dims + 1, self._dims + 2
        if input.ndim not in (unbatched, batched):
            raise RuntimeError(f"Expected {unbatched}D (unbatched) or {batched}D (batched) input to "
                               f"{type(self).__name__}, but got input of size: {input.shape}")
        return input.shape[1] if input.ndim == batched else input.shape[0]

    def initialize_parameters(self, input: Tensor, *args: Any, **kwargs: Any) -> None:
        if self.has_uninitialized_params():
            self.in_channels = self._in_channels(input)
            if self.in_channels % self.groups != 0:
                raise ValueError("in_channels must be divisible by groups")
            if self.transposed:
                shape = (self.in_channels, self.out_channels // self.groups) + tuple(self.kernel_size)
            else:
                shape = (self.out_channels, self.in_channels // self.groups) + tuple(self.kernel_size)
            with no_grad():
                self.weight.materialize(shape)
                if self.bias is not None:
                    self.bias.materialize((self.out_channels,))
                self.reset_parameters()


class _LazyConv(_LazyConvMixin):
    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(0, 0, kernel_size, stride, padding, dilation, groups, False, padding_mode)
        self._init_lazy(out_channels, bias, dtype)


class _LazyConvTranspose(_LazyConvMixin):
    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(0, 0, kernel_size, stride, padding, output_padding, groups, False, dilation, padding_mode)
        self._init_lazy(out_channels, bias, dtype)


class LazyConv1d(_LazyConv, Conv1d):
    """``Conv1d`` whose ``in_channels`` comes from the first input."""

    cls_to_become = Conv1d


class LazyConv2d(_LazyConv, Conv2d):
    """``Conv2d`` whose ``in_channels`` comes from the first input."""

    cls_to_become = Conv2d


class LazyConv3d(_LazyConv, Conv3d):
    """``Conv3d`` whose ``in_channels`` comes from the first input."""

    cls_to_become = Conv3d


class LazyConvTranspose1d(_LazyConvTranspose, ConvTranspose1d):
    """``ConvTranspose1d`` whose ``in_channels`` comes from the first input."""

    cls_to_become = ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTranspose, ConvTranspose2d):
    """``ConvTranspose2d`` whose ``in_channels`` comes from the first input."""

    cls_to_become = ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTranspose, ConvTranspose3d):
    """``ConvTranspose3d`` whose ``in_channels`` comes from the first input."""

    cls_to_become = ConvTranspose3d


class _LazyNorm(LazyModuleMixin):
    def __init__(self, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None, *,
                 bias: bool = True) -> None:
        super().__init__(0, eps, momentum, False, False)
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = UninitializedParameter(dtype=dtype)
            if bias:
                self.bias = UninitializedParameter(dtype=dtype)
        if track_running_stats:
            self._buffers["running_mean"] = UninitializedBuffer(dtype=dtype)
            self._buffers["running_var"] = UninitializedBuffer(dtype=dtype)
            self._buffers["num_batches_tracked"] = Tensor._make(np.array(0, dtype=np.int64))

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.num_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input: Tensor, *args: Any, **kwargs: Any) -> None:
        if self.has_uninitialized_params():
            self.num_features = input.shape[1]
            with no_grad():
                if self.affine:
                    self.weight.materialize((self.num_features,))
                    if self.bias is not None:
                        self.bias.materialize((self.num_features,))
                if self.track_running_stats:
                    self.running_mean.materialize((self.num_features,))
                    self.running_var.materialize((self.num_features,))
                self.reset_parameters()


class LazyBatchNorm1d(_LazyNorm, BatchNorm1d):
    """``BatchNorm1d`` whose ``num_features`` comes from the first input."""

    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyNorm, BatchNorm2d):
    """``BatchNorm2d`` whose ``num_features`` comes from the first input."""

    cls_to_become = BatchNorm2d


class LazyBatchNorm3d(_LazyNorm, BatchNorm3d):
    """``BatchNorm3d`` whose ``num_features`` comes from the first input."""

    cls_to_become = BatchNorm3d


class LazyInstanceNorm1d(_LazyNorm, InstanceNorm1d):
    """``InstanceNorm1d`` whose ``num_features`` comes from the first input."""

    cls_to_become = InstanceNorm1d  # (affine and track_running_stats default to True, as in PyTorch)


class LazyInstanceNorm2d(_LazyNorm, InstanceNorm2d):
    """``InstanceNorm2d`` whose ``num_features`` comes from the first input."""

    cls_to_become = InstanceNorm2d


class LazyInstanceNorm3d(_LazyNorm, InstanceNorm3d):
    """``InstanceNorm3d`` whose ``num_features`` comes from the first input."""

    cls_to_become = InstanceNorm3d
