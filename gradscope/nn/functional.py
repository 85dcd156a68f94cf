"""``gradscope.nn.functional``: PyTorch's ``torch.nn.functional`` names and signatures.

The fused computations live in ``gradscope.ops.nn_ops``; simple compositions are written here
with Tensor ops, in the same way PyTorch composes them (so the graph has the same nodes).
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import numpy as np

from gradscope.autograd import grad_mode
from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, indexing, inplace, nn_ops, pointwise, shape
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
]


# ---------------------------------------------------------------- linear
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``. A 2-D input gives PyTorch's ``AddmmBackward0``/``MmBackward0`` node."""
    if input._data.ndim == 2:
        if weight._data.ndim != 2:
            return arith.matmul(input, shape.t(weight))
        transposed = nn_ops.weight_t(weight)
        if bias is None:
            return arith.matmul(input, transposed)
        return nn_ops.addmm(bias, input, transposed)
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
    out = nn_ops.bilinear_product(x1, x2, weight)
    if input1._data.ndim != 2:
        out = shape.reshape(out, lead + (weight._data.shape[0],))
    return out if bias is None else arith.add(out, bias)


# ---------------------------------------------------------------- convolution
def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """1-D cross-correlation over (N, C, L) or (C, L); ``padding`` may be ``"same"`` or ``"valid"``."""
    return nn_ops.convolution(input, weight, bias, stride, padding, dilation, groups, nd=1)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation over (N, C, H, W) or (C, H, W); ``padding`` may be ``"same"`` or ``"valid"``."""
    return nn_ops.convolution(input, weight, bias, stride, padding, dilation, groups, nd=2)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """1-D transposed convolution; ``weight`` is (in_channels, out_channels // groups, k)."""
    return nn_ops.conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nd=1)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """2-D transposed convolution; ``weight`` is (in_channels, out_channels // groups, kh, kw)."""
    return nn_ops.conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nd=2)


# ---------------------------------------------------------------- pooling
def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """2-D max pooling; with ``return_indices`` also the flat (h * W + w) index of each maximum."""
    return nn_ops.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, (tuple, list)) else value


def max_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """1-D max pooling over (N, C, L) or (C, L)."""
    stride = None if stride is None or stride == [] or stride == () else (1, _first(stride))
    result = nn_ops.max_pool2d(shape.unsqueeze(input, -2), (1, _first(kernel_size)), stride,
                               (0, _first(padding)), (1, _first(dilation)), ceil_mode, return_indices)
    if return_indices:
        return shape.squeeze(result[0], -2), shape.squeeze(result[1], -2)
    return shape.squeeze(result, -2)


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """2-D average pooling."""
    return nn_ops.avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """1-D average pooling over (N, C, L) or (C, L)."""
    stride = None if stride is None or stride == [] or stride == () else (1, _first(stride))
    out = nn_ops.avg_pool2d(shape.unsqueeze(input, -2), (1, _first(kernel_size)), stride, (0, _first(padding)),
                            ceil_mode, count_include_pad)
    return shape.squeeze(out, -2)


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """Average over the adaptive windows that give ``output_size``; (1, 1) is a plain mean."""
    sizes = (output_size, output_size) if not isinstance(output_size, (tuple, list)) else tuple(output_size)
    if tuple(sizes) == (1, 1) and input._data.ndim in (3, 4):
        return reductions.mean(input, (-2, -1), keepdim=True)
    return nn_ops.adaptive_avg_pool2d(input, output_size)


def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
    """1-D adaptive average pooling over (N, C, L) or (C, L)."""
    out = nn_ops.adaptive_avg_pool2d(shape.unsqueeze(input, -2), (1, _first(output_size)))
    return shape.squeeze(out, -2)


# ---------------------------------------------------------------- embedding, one_hot, pad
def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Look up rows of ``weight``; row ``padding_idx`` receives no gradient."""
    if padding_idx is not None:
        num = weight._data.shape[0]
        if padding_idx >= num or padding_idx < -num:
            raise AssertionError("Padding_idx must be within num_embeddings")
    return nn_ops.embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)


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
        return nn_ops.constant_pad(input, pad, 0.0 if value is None else value)
    if value is not None and value != 0:
        raise ValueError(f"Padding mode \"{mode}\" doesn't take in value argument.")
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    return nn_ops.index_pad(input, pad, mode)


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


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, H, W) or (C, H, W) input."""
    if input._data.ndim not in (3, 4):
        raise RuntimeError(f"dropout2d: Expected 3D or 4D input, but received a {input._data.ndim}D input.")
    return _apply_dropout(input, p, training, inplace, input._data.shape[:-2] + (1, 1))


# ---------------------------------------------------------------- normalisation
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation; in training the running statistics are updated in place."""
    return nn_ops.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Layer normalisation over the trailing ``normalized_shape`` dims."""
    return nn_ops.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Group normalisation over groups of channels."""
    return nn_ops.group_norm(input, num_groups, weight, bias, eps)


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
    return nn_ops.gelu(input, approximate)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    if inplace:
        return elu_(input, alpha)
    return nn_ops.elu(input, alpha)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return _inplace(input, lambda x: nn_ops.elu(x, alpha, node_cls=nn_ops.EluBackward1))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    if inplace:
        return _inplace(input, lambda x: nn_ops.elu(x, _SELU_ALPHA, _SELU_SCALE, node_cls=nn_ops.EluBackward1))
    return nn_ops.elu(input, _SELU_ALPHA, _SELU_SCALE)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError")
    if inplace:
        return _inplace(input, lambda x: nn_ops.elu(x, alpha, 1.0, 1.0 / alpha, node_cls=nn_ops.CeluBackward1))
    return nn_ops.elu(input, alpha, 1.0, 1.0 / alpha, node_cls=nn_ops.CeluBackward0)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    if inplace:
        return leaky_relu_(input, negative_slope)
    return nn_ops.leaky_relu(input, negative_slope)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    if negative_slope < 0 and input.requires_grad and grad_mode.is_grad_enabled():
        raise RuntimeError("In-place leakyReLu backward calculation is triggered with a negative slope which is "
                           "not supported. This is caused by calling in-place forward function with a negative "
                           "slope, please call out-of-place version instead.")
    return _inplace(input, lambda x: nn_ops.leaky_relu(x, negative_slope, node_cls=nn_ops.LeakyReluBackward1))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return nn_ops.softplus(input, beta, threshold)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, nn_ops.silu) if inplace else nn_ops.silu(input)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, nn_ops.mish) if inplace else nn_ops.mish(input)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    if inplace:
        return hardtanh_(input, min_val, max_val)
    return nn_ops.hardtanh(input, min_val, max_val)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return _inplace(input, lambda x: nn_ops.hardtanh(x, min_val, max_val, node_cls=nn_ops.HardtanhBackward1))


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, nn_ops.hardsigmoid) if inplace else nn_ops.hardsigmoid(input)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, nn_ops.hardswish) if inplace else nn_ops.hardswish(input)


def logsigmoid(input: Tensor) -> Tensor:
    return nn_ops.logsigmoid(input)


def softsign(input: Tensor) -> Tensor:
    return arith.div(input, arith.add(pointwise.abs(input), 1))


def tanhshrink(input: Tensor) -> Tensor:
    return arith.sub(input, pointwise.tanh(input))


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    if inplace:
        return _inplace(input, lambda x: nn_ops.threshold(x, threshold, value))
    return nn_ops.threshold(input, threshold, value)


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
    return nn_ops.nll_loss(input, target, weight, ignore_index, reduction)


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
                  ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits against class indices or class probabilities (class dim 1)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    nn_ops._reduction_check(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    class_dim = 0 if input._data.ndim == 1 else 1
    classes = input._data.shape[class_dim]
    log_probs = reductions.log_softmax(input, class_dim)
    if target._data.dtype.kind == "f":
        return _cross_entropy_probabilities(input, log_probs, target, weight, reduction, label_smoothing, classes)
    nll = nn_ops.nll_loss(log_probs, target, weight, ignore_index, reduction)
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
    return nn_ops.mse_loss(input, target, reduction, weight)


def l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
            reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Mean absolute error (composed as PyTorch does: ``abs(input - target)`` then reduce)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    nn_ops._reduction_check(reduction)
    nn_ops._broadcast_warning(input._data, target._data)
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
    return nn_ops.smooth_l1_loss(input, target, reduction, beta)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:
    """Huber: quadratic below ``delta``, linear (slope ``delta``) above."""
    return nn_ops.huber_loss(input, target, reduction, delta, weight)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Tensor:
    """Binary cross-entropy of probabilities ``input`` against ``target``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return nn_ops.binary_cross_entropy(input, target, weight, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     size_average: bool | None = None, reduce: bool | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """Binary cross-entropy of logits (sigmoid fused in, numerically stable)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return nn_ops.binary_cross_entropy_with_logits(input, target, weight, reduction, pos_weight)


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
    loss = nn_ops.kl_div_pointwise(input, target, log_target)
    if reduction == "batchmean":
        total = reductions.sum(loss)
        return arith.div(total, float(input._data.shape[0])) if input._data.ndim else total
    return _reduce_tensor(loss, reduction)

