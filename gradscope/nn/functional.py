"""``gradscope.nn.functional``: PyTorch's ``torch.nn.functional`` names and signatures.

The fused computations live in ``gradscope.ops`` (``activations``, ``convolution``, ``losses``,
...); simple compositions are written here with Tensor ops, in the same way PyTorch composes them
(so the graph has the same nodes).
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import numpy as np

from gradscope.autograd import grad_mode
from gradscope.autograd.tensor import Tensor
from gradscope.ops import (_util, activations, arith, convolution, creation, ctc, indexing, inplace, normalization,
                           pointwise, pooling, resampling, shape, volumetric)
from gradscope.ops import embedding as embedding_ops
from gradscope.ops import linear as linear_ops
from gradscope.ops import losses as loss_ops
from gradscope.ops import padding as padding_ops
from gradscope.ops import reduce as reductions
from gradscope.ops.creation import _rng

__all__ = [
    "linear", "bilinear", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "max_pool1d",
    "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "embedding",
    "one_hot", "pad", "dropout", "dropout1d", "dropout2d", "batch_norm", "layer_norm", "group_norm", "normalize",
    "relu", "relu_", "relu6", "sigmoid", "tanh", "gelu", "elu", "elu_", "selu", "celu", "leaky_relu",
    "leaky_relu_", "softplus", "silu", "mish", "hardtanh", "hardtanh_", "hardsigmoid", "hardswish", "logsigmoid",
    "softsign", "tanhshrink", "threshold", "glu", "prelu", "softmax", "log_softmax", "softmin", "cosine_similarity",
    "pairwise_distance", "scaled_dot_product_attention", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
    "dropout3d", "alpha_dropout", "feature_alpha_dropout", "instance_norm", "rms_norm", "local_response_norm",
    "interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "pixel_shuffle", "pixel_unshuffle",
    "channel_shuffle", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d_with_indices", "max_pool1d_with_indices", "max_pool2d_with_indices", "hardshrink",
    "softshrink", "rrelu", "rrelu_", "celu_", "selu_", "threshold_", "gumbel_softmax", "margin_ranking_loss",
    "hinge_embedding_loss", "soft_margin_loss", "multilabel_soft_margin_loss", "cosine_embedding_loss",
    "triplet_margin_loss", "triplet_margin_with_distance_loss", "gaussian_nll_loss", "poisson_nll_loss",
    "conv3d", "conv_transpose3d", "max_pool3d", "max_pool3d_with_indices", "avg_pool3d", "adaptive_avg_pool3d",
    "adaptive_max_pool3d", "adaptive_max_pool3d_with_indices", "ctc_loss", "multi_margin_loss", "max_unpool1d",
    "max_unpool2d", "max_unpool3d", "lp_pool1d", "lp_pool2d", "lp_pool3d", "pdist", "multilabel_margin_loss",
]


# ---------------------------------------------------------------- linear
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``. A 2-D input gives PyTorch's ``AddmmBackward0``/``MmBackward0`` node."""
    if input._data.ndim == 2:
        if weight._data.ndim != 2:
            return arith.matmul(input, shape.t(weight))
        transposed = linear_ops.weight_t(weight)
        if bias is None:
            return arith.matmul(input, transposed)
        return linear_ops.addmm(bias, input, transposed)
    if input._data.ndim == 1:
        out = arith.matmul(input, shape.t(weight))
        return out if bias is None else arith.add(out, bias)
    lead = input._data.shape[:-1]
    flat = shape.reshape(input, (-1, input._data.shape[-1]))
    return shape.reshape(linear(flat, weight, bias), lead + (weight._data.shape[0],))


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``out[..., o] = input1 @ weight[o] @ input2 + bias[o]``."""
    if input1._data.shape[:-1] != input2._data.shape[:-1]:
        raise RuntimeError("bilinear(): input batch dimensions do not match: got "
                           f"{list(input1._data.shape[:-1])} and {list(input2._data.shape[:-1])}")
    if weight._data.ndim != 3 or weight._data.shape[1] != input1._data.shape[-1] \
            or weight._data.shape[2] != input2._data.shape[-1]:
        raise RuntimeError(f"bilinear(): weight size {list(weight._data.shape)} does not match the input "
                           f"sizes {input1._data.shape[-1]} and {input2._data.shape[-1]}")
    lead = input1._data.shape[:-1]
    x1 = input1 if input1._data.ndim == 2 else shape.reshape(input1, (-1, input1._data.shape[-1]))
    x2 = input2 if input2._data.ndim == 2 else shape.reshape(input2, (-1, input2._data.shape[-1]))
    out = linear_ops.bilinear_product(x1, x2, weight)
    if input1._data.ndim != 2:
        out = shape.reshape(out, lead + (weight._data.shape[0],))
    return out if bias is None else arith.add(out, bias)


# ---------------------------------------------------------------- convolution
def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """1-D cross-correlation over (N, C, L) or (C, L); ``padding`` may be ``"same"`` or ``"valid"``."""
    return convolution.convolution(input, weight, bias, stride, padding, dilation, groups, nd=1)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation over (N, C, H, W) or (C, H, W); ``padding`` may be ``"same"`` or ``"valid"``."""
    return convolution.convolution(input, weight, bias, stride, padding, dilation, groups, nd=2)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """1-D transposed convolution; ``weight`` is (in_channels, out_channels // groups, k)."""
    return convolution.conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nd=1)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """2-D transposed convolution; ``weight`` is (in_channels, out_channels // groups, kh, kw)."""
    return convolution.conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nd=2)


# ---------------------------------------------------------------- pooling
def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """2-D max pooling; with ``return_indices`` also the flat (h * W + w) index of each maximum."""
    return pooling.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, (tuple, list)) else value


def max_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """1-D max pooling over (N, C, L) or (C, L)."""
    stride = None if stride is None or stride == [] or stride == () else (1, _first(stride))
    result = pooling.max_pool2d(shape.unsqueeze(input, -2), (1, _first(kernel_size)), stride,
                               (0, _first(padding)), (1, _first(dilation)), ceil_mode, return_indices)
    if return_indices:
        return shape.squeeze(result[0], -2), shape.squeeze(result[1], -2)
    return shape.squeeze(result, -2)


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """2-D average pooling."""
    return pooling.avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """1-D average pooling over (N, C, L) or (C, L)."""
    stride = None if stride is None or stride == [] or stride == () else (1, _first(stride))
    out = pooling.avg_pool2d(shape.unsqueeze(input, -2), (1, _first(kernel_size)), stride, (0, _first(padding)),
                            ceil_mode, count_include_pad)
    return shape.squeeze(out, -2)


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """Average over the adaptive windows that give ``output_size``; (1, 1) is a plain mean."""
    sizes = (output_size, output_size) if not isinstance(output_size, (tuple, list)) else tuple(output_size)
    if tuple(sizes) == (1, 1) and input._data.ndim in (3, 4):
        return reductions.mean(input, (-2, -1), keepdim=True)
    return pooling.adaptive_avg_pool2d(input, output_size)


def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
    """1-D adaptive average pooling over (N, C, L) or (C, L)."""
    out = pooling.adaptive_avg_pool2d(shape.unsqueeze(input, -2), (1, _first(output_size)))
    return shape.squeeze(out, -2)


# ---------------------------------------------------------------- embedding, one_hot, pad
def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Look up rows of ``weight``; row ``padding_idx`` receives no gradient."""
    if padding_idx is not None:
        num = weight._data.shape[0]
        if padding_idx >= num or padding_idx < -num:
            raise AssertionError("Padding_idx must be within num_embeddings")
    return embedding_ops.embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None, max_norm: float | None = None,
                  norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:
    """Sum, mean or max of the embedding rows in each bag, without materialising the bags.

    A 2-D ``input`` (B, N) holds one bag per row; a 1-D ``input`` is cut into bags at ``offsets``.
    Indices equal to ``padding_idx`` take no part (and do not count towards a mean); an empty bag
    gives zeros. ``per_sample_weights`` scale each row before summing (``mode="sum"`` only).
    """
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"mode has to be one of sum, mean or max, got {mode!r}")
    if max_norm is not None or scale_grad_by_freq:
        raise NotImplementedError("embedding_bag: max_norm and scale_grad_by_freq are not supported by gradscope")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                      f"supported for mode='sum' (got mode='{mode}'). Please open a feature "
                                      "request on GitHub.")
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ValueError(f"embedding_bag: If per_sample_weights ({tuple(per_sample_weights.shape)}) is not "
                             f"None, then it must have the same shape as the input ({tuple(input.shape)})")
    indices = input._data
    if indices.dtype.kind not in "iu":
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {input.dtype} instead")
    if indices.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             "fixed length sequences.")
        bags, width = indices.shape
        starts = np.arange(bags) * width
        flat = shape.reshape(input, (-1,))
        weights = None if per_sample_weights is None else shape.reshape(per_sample_weights, (-1,))
    elif indices.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        starts = offsets._data.astype(np.int64)
        if starts.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
        if include_last_offset:
            starts = starts[:-1]
        flat, weights = input, per_sample_weights
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {indices.ndim}")
    count = flat._data.shape[0]
    ends = np.append(starts[1:], offsets._data[-1] if include_last_offset and offsets is not None else count)
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight._data.shape[0]
    rows = embedding(flat, weight)
    keep = np.ones(count, dtype=bool) if padding_idx is None else flat._data != padding_idx
    if mode == "max":
        pieces = []
        for start, end in zip(starts, ends):
            members = np.arange(start, end)[keep[start:end]]
            if members.size:
                pieces.append(reductions.amax(rows[Tensor._make(members)], 0))
            else:
                pieces.append(Tensor._make(np.zeros(weight._data.shape[1], weight._data.dtype)))
        return shape.stack(pieces, 0)
    segments = np.zeros((len(starts), count), dtype=weight._data.dtype)
    for bag, (start, end) in enumerate(zip(starts, ends)):
        segments[bag, start:end] = keep[start:end]
        if mode == "mean" and segments[bag].sum() > 0:
            segments[bag] /= segments[bag].sum()
    if weights is not None:
        rows = arith.mul(rows, shape.unsqueeze(weights, 1))
    return arith.matmul(Tensor._make(segments), rows)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """Int64 one-hot encoding with a new last dim of size ``num_classes`` (max + 1 when -1)."""
    data = tensor._data
    if data.dtype.kind not in "iu":
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if data.size and data.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if num_classes == -1:
        num_classes = int(data.max()) + 1 if data.size else 0
    elif data.size and data.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    return Tensor._make((data[..., None] == np.arange(num_classes)).astype(np.int64))


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dims; modes ``constant``, ``reflect``, ``replicate``, ``circular``."""
    if mode == "constant":
        return padding_ops.constant_pad(input, pad, 0.0 if value is None else value)
    if value is not None and value != 0:
        raise ValueError(f"Padding mode \"{mode}\" doesn't take in value argument.")
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    return padding_ops.index_pad(input, pad, mode)


# ---------------------------------------------------------------- dropout
def _dropout_mask(input: Tensor, p: float, mask_shape: tuple) -> Tensor:
    keep = _rng(None).random(mask_shape) < (1.0 - p)
    return Tensor._make((keep * (1.0 / (1.0 - p))).astype(input._data.dtype))


def _check_p(p: float) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _apply_dropout(input: Tensor, p: float, training: bool, inplace_: bool, mask_shape: tuple) -> Tensor:
    _check_p(p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        mask = Tensor._make(np.zeros(mask_shape, dtype=input._data.dtype))
    else:
        mask = _dropout_mask(input, p, mask_shape)
    return inplace.mul_(input, mask) if inplace_ else arith.mul(input, mask)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` (gradscope's generator) and scale by ``1 / (1 - p)``."""
    return _apply_dropout(input, p, training, inplace, input._data.shape)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, L) or (C, L) input."""
    if input._data.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input._data.ndim}D input.")
    return _apply_dropout(input, p, training, inplace, input._data.shape[:-1] + (1,))


def _feature_dropout(input: Tensor, p: float, training: bool, inplace: bool) -> Tensor:
    """Zero whole channels: one draw per (sample, channel) of an (N, C, *) input (PyTorch's feature_dropout)."""
    data = input.numpy(force=True)
    mask_shape = data.shape[:2] + (1,) * (data.ndim - 2)
    return _apply_dropout(input, p, training, inplace, mask_shape)


def _warn_feature_dims(name: str, ndim: int, expected: tuple) -> None:
    if ndim not in expected:
        warnings.warn(f"{name}: Received a {ndim}-D input to {name}, which is deprecated and will result in an "
                      f"error in a future release. To retain the behavior and silence this warning, please use "
                      f"dropout instead.", UserWarning, stacklevel=3)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, H, W) input.

    Like PyTorch, other ranks are accepted with a warning, and a 3-D input is read as (N, C, L).
    """
    _check_p(p)
    ndim = input.numpy(force=True).ndim
    _warn_feature_dims("dropout2d", ndim, (3, 4))
    if ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout "
                      "behavior is desired - input is interpreted as shape (N, C, L), where C is the channel dim. "
                      "This behavior will change in a future release to interpret the input as one without a "
                      "batch dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise dropout behavior, "
                      "please switch to using dropout1d instead.", UserWarning, stacklevel=2)
    return _feature_dropout(input, p, training, inplace)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) input."""
    _check_p(p)
    ndim = input.numpy(force=True).ndim
    _warn_feature_dims("dropout3d", ndim, (4, 5))
    if ndim == 4:  # unbatched (C, D, H, W)
        return _apply_dropout(input, p, training, inplace, (input.numpy(force=True).shape[0], 1, 1, 1))
    return _feature_dropout(input, p, training, inplace)


_ALPHA_DROPOUT = 1.7580993408473766  # -SELU's negative saturation value


def _alpha_dropout(input: Tensor, p: float, training: bool, mask_shape: tuple) -> Tensor:
    _check_p(p)
    if not training or p == 0.0:
        return input
    data = input.numpy(force=True)
    if p == 1.0:
        return arith.mul(input, 0.0)
    keep = (_rng(None).random(mask_shape) < (1.0 - p)).astype(data.dtype)
    a = 1.0 / math.sqrt((_ALPHA_DROPOUT ** 2 * p + 1) * (1 - p))
    scale = Tensor._make((keep * a).astype(data.dtype))
    shift = Tensor._make(((keep - 1) * _ALPHA_DROPOUT * a + _ALPHA_DROPOUT * a * p).astype(data.dtype))
    return arith.add(arith.mul(input, scale), shift)


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Dropout that keeps the mean and variance of SELU activations (masked values go to SELU's floor)."""
    out = _alpha_dropout(input, p, training, input.numpy(force=True).shape)
    return input.copy_(out) if inplace and out is not input else out


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """``alpha_dropout`` of whole channels."""
    data = input.numpy(force=True)
    out = _alpha_dropout(input, p, training, data.shape[:2] + (1,) * (data.ndim - 2))
    return input.copy_(out) if inplace and out is not input else out


# ---------------------------------------------------------------- normalisation
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation; in training the running statistics are updated in place."""
    return normalization.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Layer normalisation over the trailing ``normalized_shape`` dims."""
    return normalization.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Group normalisation over groups of channels."""
    return normalization.group_norm(input, num_groups, weight, bias, eps)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Any = None) -> Tensor:
    """``input / max(||input||_p, eps)`` along ``dim``."""
    norm = pointwise.clamp(reductions.norm(input, p, dim, keepdim=True), min=eps)
    return arith.div(input, shape.expand_as(norm, input))


# ---------------------------------------------------------------- activations
def _inplace(input: Tensor, compute: Any) -> Tensor:
    """Run the out-of-place ``compute(input)`` and write the result into ``input`` (PyTorch's rebase)."""
    def fast() -> None:
        with grad_mode.no_grad():
            np.copyto(input._data, compute(input)._data, casting="unsafe")

    return inplace._apply(input, None, compute, fast)


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu_() if inplace else pointwise.relu(input)


def relu_(input: Tensor) -> Tensor:
    return input.relu_()


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


def sigmoid(input: Tensor) -> Tensor:
    return pointwise.sigmoid(input)


def tanh(input: Tensor) -> Tensor:
    return pointwise.tanh(input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU: ``x * Phi(x)`` exactly, or with the tanh approximation (``approximate="tanh"``)."""
    return activations.gelu(input, approximate)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    if inplace:
        return elu_(input, alpha)
    return activations.elu(input, alpha)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return _inplace(input, lambda x: activations.elu(x, alpha, node_cls=activations.EluBackward1))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    if inplace:
        return _inplace(input, lambda x: activations.elu(x, _SELU_ALPHA, _SELU_SCALE, node_cls=activations.EluBackward1))
    return activations.elu(input, _SELU_ALPHA, _SELU_SCALE)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError")
    if inplace:
        return _inplace(input, lambda x: activations.elu(x, alpha, 1.0, 1.0 / alpha, node_cls=activations.CeluBackward1))
    return activations.elu(input, alpha, 1.0, 1.0 / alpha, node_cls=activations.CeluBackward0)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    if inplace:
        return leaky_relu_(input, negative_slope)
    return activations.leaky_relu(input, negative_slope)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    if negative_slope < 0 and input.requires_grad and grad_mode.is_grad_enabled():
        raise RuntimeError("In-place leakyReLu backward calculation is triggered with a negative slope which is "
                           "not supported. This is caused by calling in-place forward function with a negative "
                           "slope, please call out-of-place version instead.")
    return _inplace(input, lambda x: activations.leaky_relu(x, negative_slope, node_cls=activations.LeakyReluBackward1))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return activations.softplus(input, beta, threshold)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, activations.silu) if inplace else activations.silu(input)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, activations.mish) if inplace else activations.mish(input)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    if inplace:
        return hardtanh_(input, min_val, max_val)
    return activations.hardtanh(input, min_val, max_val)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return _inplace(input, lambda x: activations.hardtanh(x, min_val, max_val, node_cls=activations.HardtanhBackward1))


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, activations.hardsigmoid) if inplace else activations.hardsigmoid(input)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, activations.hardswish) if inplace else activations.hardswish(input)


def logsigmoid(input: Tensor) -> Tensor:
    return activations.logsigmoid(input)


def softsign(input: Tensor) -> Tensor:
    return arith.div(input, arith.add(pointwise.abs(input), 1))


def tanhshrink(input: Tensor) -> Tensor:
    return arith.sub(input, pointwise.tanh(input))


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    if inplace:
        return _inplace(input, lambda x: activations.threshold(x, threshold, value))
    return activations.threshold(input, threshold, value)


_threshold = threshold


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """``a * sigmoid(b)`` where ``a, b`` are the halves of ``input`` along ``dim``."""
    if input._data.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    size = input._data.shape[dim]
    if size % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim % input._data.ndim} is size {size}")
    first, second = shape.chunk(input, 2, dim)
    return arith.mul(first, pointwise.sigmoid(second))


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """``x`` for positive ``x``, else ``weight * x`` (``weight`` per channel, dim 1, or shared)."""
    if weight._data.size != 1:
        channel_dim = 1 if input._data.ndim >= 2 else 0
        if input._data.ndim == 0 or input._data.shape[channel_dim] != weight._data.size:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               f"{weight._data.size} and channel size = "
                               f"{input._data.shape[channel_dim] if input._data.ndim else 1}.")
        view = [1] * input._data.ndim
        view[channel_dim] = -1
        weight = shape.reshape(weight, tuple(view))
    return pointwise.where(Tensor._make(input._data > 0), input, arith.mul(weight, input))


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    return reductions.softmax(input, dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    return reductions.log_softmax(input, dim, dtype=dtype)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    return reductions.softmax(arith.neg(input), dim, dtype=dtype)


# ---------------------------------------------------------------- distances, attention
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``x1 . x2 / max(||x1|| * ||x2||, eps)`` along ``dim`` (inputs broadcast)."""
    dot = reductions.sum(arith.mul(x1, x2), dim)
    norms = arith.mul(reductions.norm(x1, 2, dim), reductions.norm(x2, 2, dim))
    return arith.div(dot, pointwise.clamp(norms, min=eps))


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """``||x1 - x2 + eps||_p`` along the last dim."""
    return reductions.norm(arith.add(arith.sub(x1, x2), eps), p, -1, keepdim=keepdim)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """``softmax(q k^T * scale + mask) v`` over the last two dims (boolean masks keep True entries)."""
    length, source = query._data.shape[-2], key._data.shape[-2]
    scale = 1.0 / math.sqrt(query._data.shape[-1]) if scale is None else scale
    scores = arith.mul(arith.matmul(query, shape.transpose(key, -2, -1)), scale)
    if is_causal:
        if attn_mask is not None:
            raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when "
                               "is_causal=True")
        attn_mask = Tensor._make(np.tril(np.ones((length, source), dtype=bool)))
    if attn_mask is not None:
        if attn_mask._data.dtype == np.bool_:
            scores = arith.add(scores, Tensor._make(np.where(attn_mask._data, 0.0, -np.inf).astype(scores._data.dtype)))
        else:
            scores = arith.add(scores, attn_mask)
    weights = reductions.softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, True)
    return arith.matmul(weights, value)


# ---------------------------------------------------------------- losses
def _legacy_reduction(size_average: bool | None, reduce_: bool | None, reduction: str) -> str:
    if size_average is None and reduce_ is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce_ = True if reduce_ is None else reduce_
    result = "mean" if size_average and reduce_ else "sum" if reduce_ else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{result}' instead.",
                  UserWarning, stacklevel=3)
    return result


def _class_shape(input: Tensor) -> tuple:
    """Shape that broadcasts a per-class vector along the class dim (1, or 0 when unbatched)."""
    ndim = input._data.ndim
    return (-1,) if ndim == 1 else (1, -1) + (1,) * (ndim - 2)


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
             ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class indices given log-probabilities (class dim 1)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return loss_ops.nll_loss(input, target, weight, ignore_index, reduction)


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
                  ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits against class indices or class probabilities (class dim 1)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss_ops._reduction_check(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    class_dim = 0 if input._data.ndim == 1 else 1
    classes = input._data.shape[class_dim]
    log_probs = reductions.log_softmax(input, class_dim)
    if target._data.dtype.kind == "f":
        return _cross_entropy_probabilities(input, log_probs, target, weight, reduction, label_smoothing, classes)
    nll = loss_ops.nll_loss(log_probs, target, weight, ignore_index, reduction)
    if label_smoothing == 0.0:
        return nll
    ignored = target._data == ignore_index
    weighted = log_probs if weight is None else arith.mul(log_probs, shape.reshape(weight, _class_shape(input)))
    smooth = indexing.masked_fill(reductions.sum(arith.neg(weighted), class_dim), Tensor._make(ignored), 0.0)
    if reduction == "mean":
        if weight is None:
            denominator = float((~ignored).sum())
        else:
            denominator = float(weight._data[target._data[~ignored]].sum())
        smooth = arith.div(reductions.sum(smooth), denominator)
    elif reduction == "sum":
        smooth = reductions.sum(smooth)
    # (1 - s) * nll + s * smooth / C; add/sub/div keep a 0-d float64 loss float64 (mul of a 0-d tensor does not)
    return arith.add(nll, arith.sub(arith.div(smooth, float(classes)), nll), alpha=label_smoothing)


def _cross_entropy_probabilities(input: Tensor, log_probs: Tensor, target: Tensor, weight: Tensor | None,
                                 reduction: str, label_smoothing: float, classes: int) -> Tensor:
    if target._data.shape != input._data.shape:
        raise RuntimeError(f"Expected target size {list(input._data.shape)}, got {list(target._data.shape)}")
    class_dim = 0 if input._data.ndim == 1 else 1
    if label_smoothing > 0.0:
        target = arith.add(arith.mul(target, 1.0 - label_smoothing), label_smoothing / classes)
    product = arith.mul(log_probs, target)
    if weight is not None:
        product = arith.mul(product, shape.reshape(weight, _class_shape(input)))
    if reduction == "none":
        return reductions.sum(arith.neg(product), class_dim)
    total = reductions.sum(arith.neg(product))
    if reduction == "sum":
        return total
    batch = input._data.size // classes if classes else 0
    return arith.div(total, float(batch))


def mse_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
             reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Mean squared error."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return loss_ops.mse_loss(input, target, reduction, weight)


def l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
            reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Mean absolute error (composed as PyTorch does: ``abs(input - target)`` then reduce)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss_ops._reduction_check(reduction)
    loss_ops._broadcast_warning(input._data, target._data)
    loss = pointwise.abs(arith.sub(input, target))
    if weight is not None:
        loss = arith.mul(loss, weight)
    return _reduce_tensor(loss, reduction)


def _reduce_tensor(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return reductions.mean(loss)
    if reduction == "sum":
        return reductions.sum(loss)
    return loss


def smooth_l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """Smooth L1: quadratic below ``beta``, linear above."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return loss_ops.smooth_l1_loss(input, target, reduction, beta)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:
    """Huber: quadratic below ``delta``, linear (slope ``delta``) above."""
    return loss_ops.huber_loss(input, target, reduction, delta, weight)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Tensor:
    """Binary cross-entropy of probabilities ``input`` against ``target``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return loss_ops.binary_cross_entropy(input, target, weight, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     size_average: bool | None = None, reduce: bool | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """Binary cross-entropy of logits (sigmoid fused in, numerically stable)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return loss_ops.binary_cross_entropy_with_logits(input, target, weight, reduction, pos_weight)


def kl_div(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
           reduction: str = "mean", log_target: bool = False) -> Tensor:
    """KL divergence with ``input`` as log-probabilities; ``reduction="batchmean"`` divides by the batch size."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce, "mean")
    if reduction not in ("none", "mean", "sum", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      UserWarning, stacklevel=2)
    loss = loss_ops.kl_div_pointwise(input, target, log_target)
    if reduction == "batchmean":
        total = reductions.sum(loss)
        return arith.div(total, float(input._data.shape[0])) if input._data.ndim else total
    return _reduce_tensor(loss, reduction)



# ---------------------------------------------------------------- instance and RMS normalisation
def instance_norm(input: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise every (sample, channel) plane on its own; running statistics average over the batch.

    With input statistics this is a group norm with one group per channel; the running
    statistics move towards the batch average of the per-instance mean and unbiased variance,
    as PyTorch's repeated batch norm does. Without them it is an eval-mode batch norm.
    """
    data = input.numpy(force=True)
    if not use_input_stats:
        return normalization.batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    spatial = int(np.prod(data.shape[2:])) if data.ndim > 2 else 1
    if spatial <= 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size "
                         f"gradscope.Size({list(data.shape)})")
    out = normalization.group_norm(input, data.shape[1], weight, bias, eps)
    axes = tuple(range(2, data.ndim))
    for buffer, statistic in ((running_mean, lambda: data.mean(axis=axes)),
                              (running_var, lambda: data.var(axis=axes, ddof=1))):
        if buffer is not None:
            stored = buffer.numpy(force=True)
            stored[...] = (1 - momentum) * stored + momentum * statistic().mean(axis=0).astype(stored.dtype)
            buffer._bump_version()
    return out


def rms_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """``input / sqrt(mean(input ** 2) + eps) * weight`` over the trailing ``normalized_shape`` dims
    (``eps`` defaults to the dtype's machine epsilon)."""
    if isinstance(normalized_shape, (int, np.integer)):
        normalized_shape = (int(normalized_shape),)
    normalized_shape = tuple(int(s) for s in normalized_shape)
    data = input.numpy(force=True)
    k = len(normalized_shape)
    if data.ndim < k or tuple(data.shape[data.ndim - k:]) != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(str(s) for s in normalized_shape)}], but got input of size"
                           f"{list(data.shape)}")
    if eps is None:
        eps = float(np.finfo(data.dtype if data.dtype.kind == "f" else np.float32).eps)
    dims = tuple(range(-k, 0))
    scale = pointwise.rsqrt(arith.add(reductions.mean(arith.mul(input, input), dims, keepdim=True), eps))
    out = arith.mul(input, scale)
    return out if weight is None else arith.mul(out, weight)


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> Tensor:
    """Normalise each element by the squared activity of ``size`` neighbouring channels."""
    ndim = input.numpy(force=True).ndim
    if ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {ndim} dimensions)")
    if input.numpy(force=True).size == 0:
        return input
    squared = arith.mul(input, input)
    if ndim == 3:
        div = padding_ops.constant_pad(shape.unsqueeze(squared, 1), (0, 0, size // 2, (size - 1) // 2))
        div = shape.squeeze(avg_pool2d(div, (size, 1), stride=1), 1)
    else:
        sizes = input.numpy(force=True).shape
        div = shape.reshape(squared, (sizes[0], 1, sizes[1], sizes[2], -1))
        div = padding_ops.constant_pad(div, (0, 0, 0, 0, size // 2, (size - 1) // 2))
        merged = shape.reshape(div, (sizes[0], 1, div.numpy(force=True).shape[2], -1))
        div = avg_pool2d(merged, (size, 1), stride=1)
        div = shape.reshape(shape.squeeze(div, 1), tuple(sizes))
    div = arith.pow(arith.add(arith.mul(div, alpha), k), beta)
    return arith.div(input, div)


# ---------------------------------------------------------------- resampling
_INTERPOLATING = ("linear", "bilinear", "bicubic", "trilinear")
_MODE_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


def _pair(value: Any, name: str) -> tuple:
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2:
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return tuple(int(v) for v in pair)


def _patch_index(height: int, width: int, kernel: tuple, dilation: tuple, stride: tuple) -> tuple:
    """Flat (H*W) positions of every kernel tap for every output position: (kh, kw, out_h, out_w)."""
    out_h = (height - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    out_w = (width - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    if out_h <= 0 or out_w <= 0:
        raise RuntimeError(f"Given input with spatial size ({height}, {width}), kernel_size={kernel}, "
                           f"dilation={dilation}, the calculated shape of the array of sliding blocks is "
                           f"({out_h}, {out_w}), but its components must be at least one.")
    rows = (np.arange(kernel[0]) * dilation[0])[:, None] + (np.arange(out_h) * stride[0])[None, :]
    cols = (np.arange(kernel[1]) * dilation[1])[:, None] + (np.arange(out_w) * stride[1])[None, :]
    return rows[:, None, :, None] * width + cols[None, :, None, :], out_h * out_w


def unfold(input: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1) -> Tensor:
    """Sliding local blocks (im2col): (N, C, H, W) -> (N, C * kh * kw, L)."""
    if input.dim() not in (3, 4):
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported (got {input.dim()}D)")
    batched = input.dim() == 4
    x = input if batched else shape.unsqueeze(input, 0)
    kernel, dilation, padding, stride = (_pair(v, n) for v, n in ((kernel_size, "kernel_size"),
                                                                  (dilation, "dilation"), (padding, "padding"),
                                                                  (stride, "stride")))
    if any(padding):
        x = pad(x, (padding[1], padding[1], padding[0], padding[0]))
    n, channels, height, width = (int(v) for v in x.shape)
    index, blocks = _patch_index(height, width, kernel, dilation, stride)
    flat = shape.reshape(x, (n, channels, height * width))
    patches = flat[:, :, Tensor._make(index.reshape(-1).astype(np.int64))]
    out = shape.reshape(patches, (n, channels * kernel[0] * kernel[1], blocks))
    return out if batched else shape.squeeze(out, 0)


def fold(input: Tensor, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
         stride: Any = 1) -> Tensor:
    """Sum sliding local blocks back into an image (col2im): (N, C * kh * kw, L) -> (N, C, H, W)."""
    if input.dim() not in (2, 3):
        raise NotImplementedError(f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported "
                                  f"(got {input.dim()}D)")
    batched = input.dim() == 3
    x = input if batched else shape.unsqueeze(input, 0)
    size, kernel, dilation, padding, stride = (_pair(v, n) for v, n in (
        (output_size, "output_size"), (kernel_size, "kernel_size"), (dilation, "dilation"), (padding, "padding"),
        (stride, "stride")))
    height, width = size[0] + 2 * padding[0], size[1] + 2 * padding[1]
    index, blocks = _patch_index(height, width, kernel, dilation, stride)
    n, rows, count = (int(v) for v in x.shape)
    taps = kernel[0] * kernel[1]
    if rows % taps:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, "
                           f"but got input.size(1)={rows} and kernel_size={kernel}")
    if count != blocks:
        raise RuntimeError(f"Given output_size={size}, kernel_size={kernel}, dilation={dilation}, "
                           f"padding={padding}, stride={stride}, expected size of input's dimension 2 to match the "
                           f"calculated number of sliding blocks {blocks}, but got input.size(2)={count}.")
    channels = rows // taps
    values = shape.reshape(x, (n, channels, taps * blocks))
    canvas = Tensor._make(np.zeros((n, channels, height * width), dtype=x._data.dtype))
    out = shape.reshape(indexing.index_add(canvas, 2, Tensor._make(index.reshape(-1).astype(np.int64)), values),
                        (n, channels, height, width))
    out = out[:, :, padding[0]:padding[0] + size[0], padding[1]:padding[1] + size[1]]
    return out if batched else shape.squeeze(out, 0)


def _warn_align_corners(align_corners: bool | None, name: str) -> bool:
    if align_corners is None:
        warnings.warn(f"Default {name} behavior has changed to align_corners=False since 1.3.0. Please specify "
                      "align_corners=True if the old behavior is desired. See the documentation of grid_sample for "
                      "details.", UserWarning, stacklevel=3)
        return False
    return bool(align_corners)


def _base_coordinates(steps: int, align_corners: bool, dtype: np.dtype) -> np.ndarray:
    """Normalised pixel positions in [-1, 1]: the centres (corners when ``align_corners``) of ``steps`` pixels."""
    if steps <= 1:
        return np.zeros(max(steps, 0), dtype=dtype)
    coords = creation.linspace(-1, 1, steps, dtype=dtype)._data
    if align_corners:
        return coords
    return (coords * dtype.type(steps - 1)) / dtype.type(steps)  # PyTorch's order of the two roundings


def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool | None = None) -> Tensor:
    """The sampling grid (N, H, W, 2) of the 2-D affine maps ``theta`` (N, 2, 3) for an output ``size``."""
    align = _warn_align_corners(align_corners, "grid_sample and affine_grid")
    if len(size) != 4:
        raise NotImplementedError("affine_grid only supports 4D sizes (2-D spatial transformers) in gradscope")
    if theta.dim() != 3 or tuple(theta.shape[1:]) != (2, 3):
        raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {torch_size(size)}. "
                         f"Got {tuple(theta.shape)}.")
    n, _, height, width = (int(v) for v in size)
    if theta.shape[0] != n:
        raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {torch_size(size)}. "
                         f"Got {tuple(theta.shape)}.")
    dtype = theta._data.dtype
    base = np.empty((height, width, 3), dtype=dtype)
    base[..., 0] = _base_coordinates(width, align, dtype)
    base[..., 1] = _base_coordinates(height, align, dtype)[:, None]
    base[..., 2] = 1
    grid = arith.matmul(Tensor._make(base.reshape(1, height * width, 3)), shape.transpose(theta, 1, 2))
    return shape.reshape(grid, (n, height, width, 2))


def torch_size(size: Sequence[int]) -> str:
    return f"[{', '.join(str(int(v)) for v in size)}]"


def _source_index(coordinate: Tensor, size: int, align_corners: bool) -> Tensor:
    """Normalised grid coordinates in [-1, 1] to pixel positions of an axis of ``size`` pixels."""
    if align_corners:
        return arith.mul(arith.add(coordinate, 1), (size - 1) / 2)
    return arith.div(arith.sub(arith.mul(arith.add(coordinate, 1), size), 1), 2)


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Tensor:
    """Sample ``input`` (N, C, H, W) at the normalised positions ``grid`` (N, Ho, Wo, 2) holding (x, y).

    ``mode`` is ``bilinear`` or ``nearest``; ``padding_mode`` ``zeros`` or ``border``. Gradients
    reach the input and (bilinear) the grid, as in PyTorch.
    """
    align = _warn_align_corners(align_corners, "grid_sample and affine_grid")
    if mode not in ("bilinear", "nearest"):
        raise NotImplementedError(f"grid_sample: mode '{mode}' is not supported by gradscope (bilinear, nearest)")
    if padding_mode not in ("zeros", "border"):
        raise NotImplementedError(f"grid_sample: padding_mode '{padding_mode}' is not supported by gradscope "
                                  "(zeros, border)")
    if input.dim() != 4 or grid.dim() != 4 or grid.shape[-1] != 2:
        raise NotImplementedError("grid_sample supports 4-D input with a (N, H_out, W_out, 2) grid in gradscope")
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got input with "
                           f"sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    n, channels, height, width = (int(v) for v in input.shape)
    out_h, out_w = int(grid.shape[1]), int(grid.shape[2])
    ix = _source_index(grid[..., 0], width, align)
    iy = _source_index(grid[..., 1], height, align)
    if padding_mode == "border":
        ix, iy = pointwise.clamp(ix, 0, width - 1), pointwise.clamp(iy, 0, height - 1)
    flat = shape.reshape(input, (n, channels, height * width))

    def corner(rows: np.ndarray, cols: np.ndarray) -> Tensor:
        inside = (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
        index = np.where(inside, np.clip(rows, 0, height - 1) * width + np.clip(cols, 0, width - 1), 0)
        index = np.broadcast_to(index.reshape(n, 1, out_h * out_w), (n, channels, out_h * out_w))
        values = shape.reshape(indexing.gather(flat, 2, Tensor._make(index.astype(np.int64))),
                               (n, channels, out_h, out_w))
        return arith.mul(values, Tensor._make(inside[:, None].astype(input._data.dtype)))

    if mode == "nearest":
        return corner(np.rint(iy._data).astype(np.int64), np.rint(ix._data).astype(np.int64))
    x0, y0 = np.floor(ix._data), np.floor(iy._data)
    wx1 = shape.unsqueeze(arith.sub(ix, Tensor._make(x0)), 1)
    wy1 = shape.unsqueeze(arith.sub(iy, Tensor._make(y0)), 1)
    wx0, wy0 = arith.rsub(wx1, 1), arith.rsub(wy1, 1)
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    top = arith.add(arith.mul(corner(y0, x0), wx0), arith.mul(corner(y0, x0 + 1), wx1))
    bottom = arith.add(arith.mul(corner(y0 + 1, x0), wx0), arith.mul(corner(y0 + 1, x0 + 1), wx1))
    return arith.add(arith.mul(top, wy0), arith.mul(bottom, wy1))


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize the spatial dims of an (N, C, *) input: ``nearest``, ``nearest-exact``, ``linear``,
    ``bilinear``, ``bicubic``, ``trilinear`` or ``area``, to ``size`` or by ``scale_factor``."""
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
    elif mode in _INTERPOLATING:
        align_corners = bool(align_corners)
    else:
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got "
                                  f"{input.dim()}D) for the modes: nearest | linear | bilinear | bicubic | "
                                  f"trilinear | area | nearest-exact (got {mode})")
    if antialias:
        raise NotImplementedError("gradscope's interpolate does not support antialias=True")
    sizes = input.numpy(force=True).shape
    dim = len(sizes) - 2
    if dim < 1 or dim > 3:
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {len(sizes)}D) "
                                  f"for the modes: nearest | linear | bilinear | bicubic | trilinear | area | "
                                  f"nearest-exact (got {mode})")
    if mode in _MODE_DIMS and _MODE_DIMS[mode] != dim:
        raise NotImplementedError(f"Got {len(sizes)}D input, but {mode} mode needs {_MODE_DIMS[mode] + 2}D input")
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    scales: list = [None] * dim
    if size is not None:
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(f"Input and output must have the same number of spatial dimensions, but got "
                                 f"input with spatial dimensions of {list(sizes[2:])} and output size of "
                                 f"{list(size)}. Please provide input tensor in (N, C, d1, d2, ...,dK) format "
                                 f"and output size in (o1, o2, ...,oK) format.")
            out_sizes = [int(s) for s in size]
        else:
            out_sizes = [int(size)] * dim
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    elif scale_factor is not None:
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(f"Input and scale_factor must have the same number of spatial dimensions, but "
                                 f"got input with spatial dimensions of {list(sizes[2:])} and scale_factor of "
                                 f"shape {list(scale_factor)}. Please provide input tensor in (N, C, d1, d2, "
                                 f"...,dK) format and scale_factor in (s1, s2, ...,sK) format.")
            factors = [float(f) for f in scale_factor]
        else:
            factors = [float(scale_factor)] * dim
        out_sizes = [int(math.floor(sizes[2 + i] * factors[i])) for i in range(dim)]
        if not (recompute_scale_factor or mode == "area"):
            scales = factors
    else:
        raise ValueError("either size or scale_factor should be defined")
    if mode == "area":
        if dim == 1:
            return adaptive_avg_pool1d(input, out_sizes[0])
        if dim == 2:
            return adaptive_avg_pool2d(input, tuple(out_sizes))
        raise NotImplementedError("gradscope's interpolate does not support mode='area' on 5D input")
    return resampling.resample(input, tuple(out_sizes), tuple(scales), mode, align_corners)


def upsample(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    """Deprecated alias of ``interpolate``."""
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    """Deprecated: ``interpolate(..., mode="nearest")``."""
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use nn.functional.interpolate instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    """Deprecated: ``interpolate(..., mode="bilinear", align_corners=True)``."""
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use nn.functional.interpolate instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C * r * r, H, W) -> (*, C, H * r, W * r)."""
    sizes = input.numpy(force=True).shape
    if len(sizes) < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{len(sizes)} dimension(s)")
    r = int(upscale_factor)
    channels, height, width = sizes[-3:]
    if channels % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
                           f"of upscale_factor, but input.size(-3)={channels} is not divisible by {r * r}")
    lead = tuple(sizes[:-3])
    n = len(lead)
    x = shape.reshape(input, lead + (channels // (r * r), r, r, height, width))
    order = tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2)
    return shape.reshape(shape.permute(x, order), lead + (channels // (r * r), height * r, width * r))


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H * r, W * r) -> (*, C * r * r, H, W)."""
    sizes = input.numpy(force=True).shape
    if len(sizes) < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                           f"{len(sizes)} dimension(s)")
    r = int(downscale_factor)
    channels, height, width = sizes[-3:]
    if height % r or width % r:
        raise RuntimeError(f"pixel_unshuffle expects height and width to be divisible by downscale_factor, but "
                           f"got height={height}, width={width} and downscale_factor={r}")
    lead = tuple(sizes[:-3])
    n = len(lead)
    x = shape.reshape(input, lead + (channels, height // r, r, width // r, r))
    order = tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3)
    return shape.reshape(shape.permute(x, order), lead + (channels * r * r, height // r, width // r))


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """Interleave the channels of ``groups`` groups: (N, g * k, *) viewed as (N, g, k, *) -> (N, k, g, *)."""
    sizes = input.numpy(force=True).shape
    if sizes[1] % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {sizes[1]} channels and "
                           f"{groups} groups.")
    x = shape.reshape(input, (sizes[0], groups, sizes[1] // groups) + tuple(sizes[2:]))
    return shape.reshape(shape.transpose(x, 1, 2), tuple(sizes))


# ---------------------------------------------------------------- adaptive max pooling
def adaptive_max_pool2d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    """Adaptive max pooling of (N, C, H, W) or (C, H, W); with ``return_indices`` also the flat indices."""
    out, indices = pooling.adaptive_max_pool2d(input, output_size)
    return (out, indices) if return_indices else out


def adaptive_max_pool2d_with_indices(input: Tensor, output_size: Any, return_indices: bool = False) -> tuple:
    return pooling.adaptive_max_pool2d(input, output_size)


def adaptive_max_pool1d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    """Adaptive max pooling of (N, C, L) or (C, L)."""
    out, indices = pooling.adaptive_max_pool2d(shape.unsqueeze(input, -2), (1, _first(output_size)))
    out, indices = shape.squeeze(out, -2), shape.squeeze(indices, -2)
    return (out, indices) if return_indices else out


def adaptive_max_pool1d_with_indices(input: Tensor, output_size: Any, return_indices: bool = False) -> tuple:
    return adaptive_max_pool1d(input, output_size, True)


def max_pool2d_with_indices(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> tuple:
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool1d_with_indices(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> tuple:
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


# ---------------------------------------------------------------- more activations
def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, else 0."""
    keep = Tensor._make(np.abs(input.numpy(force=True)) > lambd)
    return pointwise.where(keep, input, arith.mul(input, 0.0))


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    data = input.numpy(force=True)
    shifted = arith.sub(input, Tensor._make(np.sign(data).astype(data.dtype) * lambd))
    return pointwise.where(Tensor._make(np.abs(data) > lambd), shifted, arith.mul(input, 0.0))


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,
          inplace: bool = False) -> Tensor:
    """Leaky ReLU with a random slope in [lower, upper] per element in training, their mean otherwise."""
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    data = input.numpy(force=True)
    slopes = _rng(None).uniform(lower, upper, data.shape).astype(data.dtype)
    factor = Tensor._make(np.where(data >= 0, 1.0, slopes).astype(data.dtype))
    return inplace.mul_(input, factor) if inplace else arith.mul(input, factor)


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False) -> Tensor:
    return rrelu(input, lower, upper, training, True)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return celu(input, alpha, True)


def selu_(input: Tensor) -> Tensor:
    return selu(input, True)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    return _threshold(input, threshold, value, True)


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10,
                   dim: int = -1) -> Tensor:
    """Sample from the Gumbel-softmax distribution; ``hard`` returns one-hot samples with soft gradients."""
    data = logits.numpy(force=True)
    gumbels = Tensor._make(-np.log(_rng(None).exponential(1.0, data.shape)).astype(data.dtype))
    soft = reductions.softmax(arith.div(arith.add(logits, gumbels), tau), dim)
    if not hard:
        return soft
    probabilities = soft.numpy(force=True)
    index = np.expand_dims(probabilities.argmax(axis=dim), dim)
    one_hot_values = np.zeros_like(probabilities)
    np.put_along_axis(one_hot_values, index, 1.0, axis=dim)
    return arith.add(arith.sub(Tensor._make(one_hot_values), soft.detach()), soft)


# ---------------------------------------------------------------- more losses
def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    loss_ops._reduction_check(reduction)
    return _reduce_tensor(loss, reduction)


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                        size_average: bool | None = None, reduce: bool | None = None,
                        reduction: str = "mean") -> Tensor:
    """``max(0, -target * (input1 - input2) + margin)``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = pointwise.clamp(arith.add(arith.mul(arith.neg(target), arith.sub(input1, input2)), margin), min=0)
    return _reduce_loss(loss, reduction)


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, size_average: bool | None = None,
                         reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """``input`` where target is 1, ``max(0, margin - input)`` where target is -1."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    t = target.numpy(force=True)
    margin_part = pointwise.clamp(arith.rsub(input, margin), min=0)
    zeros = arith.mul(input, 0.0)
    loss = arith.add(pointwise.where(Tensor._make(t != 1), margin_part, zeros),
                     pointwise.where(Tensor._make(t != -1), input, zeros))
    return _reduce_loss(loss, reduction)


def soft_margin_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
                     reduction: str = "mean") -> Tensor:
    """``log(1 + exp(-target * input))``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = pointwise.log1p(pointwise.exp(arith.mul(arith.neg(target), input)))
    return _reduce_loss(loss, reduction)


def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                size_average: bool | None = None, reduce: bool | None = None,
                                reduction: str = "mean") -> Tensor:
    """Per-sample mean over classes of the binary logistic loss."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = arith.neg(arith.add(arith.mul(target, logsigmoid(input)),
                               arith.mul(arith.rsub(target, 1), logsigmoid(arith.neg(input)))))
    if weight is not None:
        loss = arith.mul(loss, weight)
    classes = input.numpy(force=True).shape[-1]
    loss = arith.div(reductions.sum(loss, input.dim() - 1), float(classes))
    return _reduce_loss(loss, reduction)


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          size_average: bool | None = None, reduce: bool | None = None,
                          reduction: str = "mean") -> Tensor:
    """``1 - cos(x1, x2)`` where target is 1, ``max(0, cos(x1, x2) - margin)`` where target is -1."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    dim = input1.dim() - 1
    eps = 1e-12
    dot = reductions.sum(arith.mul(input1, input2), dim)
    mag1 = arith.add(reductions.sum(arith.mul(input1, input1), dim), eps)
    mag2 = arith.add(reductions.sum(arith.mul(input2, input2), dim), eps)
    cos = arith.div(dot, pointwise.sqrt(arith.mul(mag1, mag2)))
    t = target.numpy(force=True)
    zeros = arith.mul(cos, 0.0)
    positive = pointwise.where(Tensor._make(t == 1), arith.rsub(cos, 1), zeros)
    negative = pointwise.where(Tensor._make(t == -1), pointwise.clamp(arith.sub(cos, margin), min=0), zeros)
    return _reduce_loss(arith.add(positive, negative), reduction)


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average: bool | None = None,
                        reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the pairwise p-norm distance."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    dims = {anchor.dim(), positive.dim(), negative.dim()}
    if len(dims) != 1 or dims.pop() not in (1, 2):
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions (1D or 2D), but got: anchor {anchor.dim()}D, positive {positive.dim()}D, "
                           f"and negative {negative.dim()}D inputs")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = pointwise.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    loss = pointwise.clamp(arith.add(arith.sub(d_pos, d_neg), margin), min=0)
    return _reduce_loss(loss, reduction)


def triplet_margin_with_distance_loss(anchor: Tensor, positive: Tensor, negative: Tensor, *,
                                      distance_function: Any = None, margin: float = 1.0, swap: bool = False,
                                      reduction: str = "mean") -> Tensor:
    """``triplet_margin_loss`` with a custom ``distance_function(x1, x2)`` (default: pairwise distance)."""
    distance = pairwise_distance if distance_function is None else distance_function
    d_pos = distance(anchor, positive)
    d_neg = distance(anchor, negative)
    if swap:
        d_neg = pointwise.minimum(d_neg, distance(positive, negative))
    loss = pointwise.clamp(arith.add(arith.sub(d_pos, d_neg), margin), min=0)
    return _reduce_loss(loss, reduction)


def gaussian_nll_loss(input: Tensor, target: Tensor, var: Tensor, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean") -> Tensor:
    """``0.5 * (log(max(var, eps)) + (input - target) ** 2 / max(var, eps))`` (+ const with ``full``)."""
    in_shape, var_shape = input.numpy(force=True).shape, var.numpy(force=True).shape
    if var_shape != in_shape:
        if in_shape[:-1] == var_shape:
            var = shape.unsqueeze(var, -1)
        elif not (in_shape[:-1] == var_shape[:-1] and var_shape[-1] == 1):
            raise ValueError("var is of incorrect size")
    if np.any(var.numpy(force=True) < 0):
        raise ValueError("var has negative entry/entries")
    with grad_mode.no_grad():
        floor = Tensor._make(np.maximum(var.numpy(force=True), eps) - var.numpy(force=True))
    var = arith.add(var, floor)
    diff = arith.sub(input, target)
    loss = arith.mul(arith.add(pointwise.log(var), arith.div(arith.mul(diff, diff), var)), 0.5)
    if full:
        loss = arith.add(loss, 0.5 * math.log(2 * math.pi))
    return _reduce_loss(loss, reduction)


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,
                     size_average: bool | None = None, eps: float = 1e-8, reduce: bool | None = None,
                     reduction: str = "mean") -> Tensor:
    """Poisson negative log-likelihood (``exp(input) - target * input`` with ``log_input``)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if log_input:
        loss = arith.sub(pointwise.exp(input), arith.mul(target, input))
    else:
        loss = arith.sub(input, arith.mul(target, pointwise.log(arith.add(input, eps))))
    if full:
        t = target.numpy(force=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            stirling = t * np.log(t) - t + 0.5 * np.log(2 * np.pi * t)
        loss = arith.add(loss, Tensor._make(np.where(t > 1, stirling, 0.0).astype(t.dtype)))
    return _reduce_loss(loss, reduction)


# ---------------------------------------------------------------- 3-D convolution and pooling
def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """3-D cross-correlation over (N, C, D, H, W) or (C, D, H, W); ``padding`` may be ``"same"`` or ``"valid"``."""
    return volumetric.conv3d(input, weight, bias, stride, padding, dilation, groups)


def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """3-D transposed convolution; ``weight`` is (in_channels, out_channels // groups, kd, kh, kw)."""
    return volumetric.conv_transpose3d(input, weight, bias, stride, padding, output_padding, groups, dilation)


def max_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """3-D max pooling; with ``return_indices`` also the flat ((d * H + h) * W + w) index of each maximum."""
    return volumetric.max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d_with_indices(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> tuple:
    return volumetric.max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def avg_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """3-D average pooling."""
    return volumetric.avg_pool3d(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                 divisor_override)


def adaptive_avg_pool3d(input: Tensor, output_size: Any) -> Tensor:
    """Average over the adaptive windows that give ``output_size`` (D, H, W); (1, 1, 1) is a plain mean."""
    return volumetric.adaptive_avg_pool3d(input, output_size)


def adaptive_max_pool3d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    """Adaptive max pooling of (N, C, D, H, W) or (C, D, H, W); with ``return_indices`` also the flat indices."""
    out, indices = volumetric.adaptive_max_pool3d(input, output_size)
    return (out, indices) if return_indices else out


def adaptive_max_pool3d_with_indices(input: Tensor, output_size: Any, return_indices: bool = False) -> tuple:
    return volumetric.adaptive_max_pool3d(input, output_size)


# ---------------------------------------------------------------- CTC, multi-margin, max unpooling
def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths: Any, target_lengths: Any, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """Connectionist temporal classification loss of ``log_probs`` (T, N, C) against padded (N, S) or
    concatenated targets; ``'mean'`` divides each loss by its target length, then averages."""
    loss_ops._reduction_check(reduction)
    losses = ctc.ctc_losses(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
    if reduction == "none":
        return losses
    if reduction == "sum":
        return reductions.sum(losses)
    lengths = np.asarray(target_lengths._data if isinstance(target_lengths, Tensor) else target_lengths)
    divisor = Tensor._make(np.maximum(lengths, 1).astype(losses._data.dtype).reshape(losses._data.shape))
    return reductions.mean(arith.div(losses, divisor))


def multi_margin_loss(input: Tensor, target: Tensor, p: int = 1, margin: float = 1.0, weight: Tensor | None = None,
                      size_average: bool | None = None, reduce: bool | None = None,
                      reduction: str = "mean") -> Tensor:
    """Multi-class hinge loss: ``sum_{i != y} max(0, margin - x[y] + x[i])**p / C`` per sample."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    x = input if input.ndim == 2 else shape.reshape(input, (1, -1))
    y = shape.reshape(target, (-1, 1))
    picked = indexing.gather(x, 1, y)
    hinge = pointwise.relu(arith.add(arith.sub(x, picked), margin))  # (no gradient at the hinge, as torch)
    if p == 2:
        hinge = arith.mul(hinge, hinge)
    if weight is not None:
        hinge = arith.mul(hinge, shape.reshape(indexing.index_select(weight, 0, shape.reshape(target, (-1,))),
                                               (-1, 1)))
    others = Tensor._make(np.arange(x.shape[1]) != y._data)
    loss = arith.div(reductions.sum(pointwise.where(others, hinge, 0.0), 1), x.shape[1])
    if input.ndim < 2:
        loss = shape.reshape(loss, ())
    return _reduce_loss(loss, reduction)


def _max_unpool(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any, padding: Any, output_size: Any,
                dims: int) -> Tensor:
    kernel = _util._tuple(kernel_size, dims, "kernel_size")
    stride = kernel if stride is None else _util._tuple(stride, dims, "stride")
    pad = _util._tuple(padding, dims, "padding")
    sizes = input.shape[-dims:]
    default = [(sizes[d] - 1) * stride[d] + kernel[d] - 2 * pad[d] for d in range(dims)]
    if output_size is None:
        out = default
    else:
        out = [int(s) for s in output_size]
        if len(out) == dims + 2:
            out = out[2:]
        if len(out) != dims:
            raise ValueError(f"output_size should be a sequence containing {dims} or {dims + 2} elements, but it "
                             f"has a length of '{len(out)}'")
        for d in range(dims):
            if not default[d] - stride[d] < out[d] < default[d] + stride[d]:
                raise ValueError(f'invalid output_size "{list(output_size)}" (dim {d} must be between '
                                 f"{default[d] - stride[d]} and {default[d] + stride[d]})")
    lead = tuple(input.shape[:-dims])
    flat_in = shape.reshape(input, lead + (-1,))
    flat_index = shape.reshape(indices, lead + (-1,))
    total = int(np.prod(out))
    if flat_index.numel() and (int(flat_index._data.max()) >= total or int(flat_index._data.min()) < 0):
        raise RuntimeError(f"Found an invalid max index: {int(flat_index._data.max())} (output volumes are of "
                           f"size {'x'.join(map(str, out))})")
    zeros = Tensor._make(np.zeros(lead + (total,), dtype=input._data.dtype))
    return shape.reshape(indexing.scatter(zeros, -1, flat_index, flat_in), lead + tuple(out))


def max_unpool1d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 output_size: Any = None) -> Tensor:
    """The partial inverse of ``max_pool1d``: each value goes back to its index, zeros elsewhere."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1)


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 output_size: Any = None) -> Tensor:
    """The partial inverse of ``max_pool2d``: each value goes back to its flat ``h * W + w`` index."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2)


def max_unpool3d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 output_size: Any = None) -> Tensor:
    """The partial inverse of ``max_pool3d``."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 3)


# ---------------------------------------------------------------- power-average pooling, pdist, multi-label margin
def _lp_pool(input: Tensor, norm_type: float, kernel_size: Any, stride: Any, ceil_mode: bool, dims: int) -> Tensor:
    max_pool = (max_pool1d, max_pool2d, max_pool3d)[dims - 1]
    if norm_type == float("inf"):
        return max_pool(pointwise.abs(input), kernel_size, stride, 0, 1, ceil_mode)
    if norm_type == -float("inf"):
        return arith.neg(max_pool(arith.neg(pointwise.abs(input)), kernel_size, stride, 0, 1, ceil_mode))
    avg_pool = (avg_pool1d, avg_pool2d, avg_pool3d)[dims - 1]
    out = avg_pool(arith.pow(input, norm_type), kernel_size, stride, 0, ceil_mode)
    window = int(np.prod(_util._tuple(kernel_size, dims, "kernel_size")))
    magnitude = arith.mul(pointwise.sign(out), pointwise.relu(pointwise.abs(out)))
    return arith.pow(arith.mul(magnitude, window), 1.0 / norm_type)


def lp_pool1d(input: Tensor, norm_type: float, kernel_size: int, stride: Any = None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling ``(sum x**p)**(1/p)`` over windows of (N, C, L)."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool2d(input: Tensor, norm_type: float, kernel_size: Any, stride: Any = None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling ``(sum x**p)**(1/p)`` over windows of (N, C, H, W)."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2)


def lp_pool3d(input: Tensor, norm_type: float, kernel_size: Any, stride: Any = None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling ``(sum x**p)**(1/p)`` over windows of (N, C, D, H, W)."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3)


def pdist(input: Tensor, p: float = 2) -> Tensor:
    """The ``p``-norm distances between every pair of rows ``i < j`` of an (N, M) input, row-major."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    first, second = np.triu_indices(input.shape[0], 1)
    rows_i = indexing.index_select(input, 0, Tensor._make(first.astype(np.int64)))
    rows_j = indexing.index_select(input, 0, Tensor._make(second.astype(np.int64)))
    return reductions.norm(arith.sub(rows_i, rows_j), p, 1)


def multilabel_margin_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
                           reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """``sum_{j in targets} sum_{i not in targets} max(0, 1 - (x[j] - x[i])) / C``; each target row lists
    class indices up to the first -1."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    x = input if input.ndim == 2 else shape.reshape(input, (1, -1))
    labels = target._data.reshape(x.shape)
    classes = x.shape[1]
    counts = np.zeros(x.shape, dtype=x._data.dtype)
    is_target = np.zeros(x.shape, dtype=bool)
    for row, values in enumerate(labels):
        for label in values:
            if label < 0:
                break
            counts[row, label] += 1
            is_target[row, label] = True
    hinge = pointwise.relu(arith.rsub(arith.sub(shape.unsqueeze(x, 2), shape.unsqueeze(x, 1)), 1.0))
    pairs = Tensor._make(counts[:, :, None] * (~is_target)[:, None, :])
    loss = arith.div(reductions.sum(arith.mul(hinge, pairs), (1, 2)), classes)
    if input.ndim < 2:
        loss = shape.reshape(loss, ())
    return _reduce_loss(loss, reduction)
