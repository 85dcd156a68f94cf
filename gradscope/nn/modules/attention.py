"""``MultiheadAttention`` with PyTorch's parameters, state-dict keys, masks and outputs.

The computation is composed from Tensor ops in PyTorch's order (in-projection, per-head
scaled scores plus the merged mask, softmax, dropout on the weights, weighted sum,
out-projection), so its graph has the familiar nodes.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from gradscope.autograd.tensor import Tensor
from gradscope.nn import functional as F
from gradscope.nn import init
from gradscope.nn.modules.linear import Linear
from gradscope.nn.modules.module import Module
from gradscope.nn.parameter import Parameter
from gradscope.ops import arith, shape
from gradscope.ops import reduce as reductions
from gradscope.ops.creation import zeros

__all__ = ["MultiheadAttention"]


class NonDynamicallyQuantizableLinear(Linear):
    """A ``Linear``; the name PyTorch gives ``MultiheadAttention.out_proj`` (it shows in reprs)."""


def _new_parameter(*size: int, dtype: Any = None) -> Parameter:
    return Parameter(zeros(*size, dtype=dtype))


def _canonical_mask(mask: Tensor | None, name: str, other: Tensor | None, other_name: str,
                    dtype: np.dtype) -> Tensor | None:
    """A float additive mask: boolean True (masked out) becomes -inf, float masks pass through."""
    if mask is None:
        return None
    kind = mask._data.dtype.kind
    if kind not in "bf":
        raise AssertionError(f"only bool and floating types of {name} are supported")
    if other is not None and other._data.dtype != mask._data.dtype:
        warnings.warn(f"Support for mismatched {name} and {other_name} is deprecated. Use same type for both "
                      "instead.", stacklevel=4)
    if kind == "b":
        return Tensor._make(np.where(mask._data, -np.inf, 0.0).astype(dtype))
    return mask


def _shape_check(query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None,
                 attn_mask: Tensor | None, num_heads: int) -> bool:
    """Validate input ranks as PyTorch does; returns whether the input is batched."""
    dims = query.dim()
    if dims not in (2, 3):
        raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {dims}-D query tensor")
    batched = dims == 3
    label = "batched (3-D)" if batched else "unbatched (2-D)"
    if key.dim() != dims or value.dim() != dims:
        raise AssertionError(f"For {label} `query`, expected `key` and `value` to be {dims}-D but found "
                             f"{key.dim()}-D and {value.dim()}-D tensors respectively")
    if key_padding_mask is not None and key_padding_mask.dim() != dims - 1:
        raise AssertionError(f"For {label} `query`, expected `key_padding_mask` to be `None` or {dims - 1}-D but "
                             f"found {key_padding_mask.dim()}-D tensor instead")
    if attn_mask is not None:
        if attn_mask.dim() not in (2, 3):
            raise AssertionError(f"For {label} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
                                 f"{attn_mask.dim()}-D tensor instead")
        if not batched and attn_mask.dim() == 3:
            expected = (num_heads, query._data.shape[0], key._data.shape[0])
            if tuple(attn_mask._data.shape) != expected:
                raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got "
                                     f"{tuple(attn_mask._data.shape)}")
    return batched


def _pad_last(mask: Tensor | None) -> Tensor | None:
    """Append one unmasked (0) column to a float mask."""
    if mask is None:
        return None
    return F.pad(mask, (0, 1))


class MultiheadAttention(Module):
    """Multi-head attention: ``out_proj(concat_h softmax(q_h k_h^T / sqrt(d) + mask) v_h)``.

    Args:
        embed_dim: model width E (query features, output features).
        num_heads: heads; E must be divisible by it.
        dropout: dropout probability on the attention weights (training only).
        bias: in- and out-projection biases.
        add_bias_kv: learnable ``bias_k``/``bias_v`` appended to keys and values.
        add_zero_attn: append a zero key/value position.
        kdim, vdim: key and value features (default E; when different, ``q_proj_weight``,
            ``k_proj_weight`` and ``v_proj_weight`` replace ``in_proj_weight``).
        batch_first: inputs and outputs are (N, L, E) instead of (L, N, E).

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)`` returns ``(output, weights or None)``.
    Masks are boolean (True = not allowed) or float (added to the scores).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None, dtype: Any = None) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if self._qkv_same_embed_dim:
            self.in_proj_weight = _new_parameter(3 * embed_dim, embed_dim, dtype=dtype)
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = _new_parameter(embed_dim, embed_dim, dtype=dtype)
            self.k_proj_weight = _new_parameter(embed_dim, self.kdim, dtype=dtype)
            self.v_proj_weight = _new_parameter(embed_dim, self.vdim, dtype=dtype)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = _new_parameter(3 * embed_dim, dtype=dtype)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if add_bias_kv:
            self.bias_k = _new_parameter(1, 1, embed_dim, dtype=dtype)
            self.bias_v = _new_parameter(1, 1, embed_dim, dtype=dtype)
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        batched = _shape_check(query, key, value, key_padding_mask, attn_mask, self.num_heads)
        dtype = query._data.dtype
        key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", attn_mask, "attn_mask", dtype)
        attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", dtype)
        if self.batch_first and batched:
            same_kv = key is value
            same_qk = query is key
            query = shape.transpose(query, 0, 1)
            key = query if same_qk else shape.transpose(key, 0, 1)
            value = key if same_kv else shape.transpose(value, 0, 1)
        output, weights = self._attend(query, key, value, key_padding_mask, need_weights, attn_mask,
                                       average_attn_weights, is_causal, batched)
        if self.batch_first and batched:
            output = shape.transpose(output, 0, 1)
        return output, weights

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        embed = self.embed_dim
        bias = self.in_proj_bias
        biases = (None, None, None) if bias is None else tuple(bias[i * embed:(i + 1) * embed] for i in range(3))
        if self._qkv_same_embed_dim:
            weight = self.in_proj_weight
            if query is key and key is value:
                packed = F.linear(query, weight, bias)
                return tuple(packed[..., i * embed:(i + 1) * embed] for i in range(3))
            weights = tuple(weight[i * embed:(i + 1) * embed] for i in range(3))
        else:
            weights = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        return tuple(F.linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))

    def _attend(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None,
                need_weights: bool, attn_mask: Tensor | None, average_attn_weights: bool, is_causal: bool,
                batched: bool) -> tuple[Tensor, Tensor | None]:
        if not batched:
            query, key, value = (shape.unsqueeze(x, 1) for x in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = shape.unsqueeze(key_padding_mask, 0)
        tgt_len, batch, embed = query._data.shape
        src_len = key._data.shape[0]
        heads, head_dim = self.num_heads, self.head_dim
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                               "method `generate_square_subsequent_mask` to create this mask.")
        if is_causal and key_padding_mask is None and not need_weights:
            causal = np.triu(np.full((tgt_len, src_len), -np.inf, dtype=query._data.dtype), 1)
            attn_mask = Tensor._make(causal)
        if embed != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got {embed}")
        if self._qkv_same_embed_dim and tuple(key._data.shape) != tuple(value._data.shape):
            raise AssertionError(f"key shape {tuple(key._data.shape)} does not match value shape "
                                 f"{tuple(value._data.shape)}")
        if not self._qkv_same_embed_dim and key._data.shape[:2] != value._data.shape[:2]:
            raise AssertionError(f"key's sequence and batch dims {tuple(key._data.shape[:2])} do not match value's "
                                 f"{tuple(value._data.shape[:2])}")
        q, k, v = self._project(query, key, value)
        if attn_mask is not None:
            if attn_mask.dim() == 2:
                if tuple(attn_mask._data.shape) != (tgt_len, src_len):
                    raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(attn_mask._data.shape)}, but should "
                                       f"be {(tgt_len, src_len)}.")
                attn_mask = shape.unsqueeze(attn_mask, 0)
            elif tuple(attn_mask._data.shape) != (batch * heads, tgt_len, src_len):
                raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(attn_mask._data.shape)}, but should be "
                                   f"{(batch * heads, tgt_len, src_len)}.")
        if self.bias_k is not None:
            k = shape.cat([k, shape.repeat(self.bias_k, (1, batch, 1))])
            v = shape.cat([v, shape.repeat(self.bias_v, (1, batch, 1))])
            attn_mask, key_padding_mask = _pad_last(attn_mask), _pad_last(key_padding_mask)
        q = shape.transpose(shape.reshape(q, (tgt_len, batch * heads, head_dim)), 0, 1)
        k = shape.transpose(shape.reshape(k, (k._data.shape[0], batch * heads, head_dim)), 0, 1)
        v = shape.transpose(shape.reshape(v, (v._data.shape[0], batch * heads, head_dim)), 0, 1)
        if self.add_zero_attn:
            zero = Tensor._make(np.zeros((batch * heads, 1, head_dim), dtype=k._data.dtype))
            k = shape.cat([k, zero], 1)
            v = shape.cat([v, zero], 1)
            attn_mask, key_padding_mask = _pad_last(attn_mask), _pad_last(key_padding_mask)
        src_len = k._data.shape[1]
        if key_padding_mask is not None:
            if tuple(key_padding_mask._data.shape) != (batch, src_len):
                raise AssertionError(f"expecting key_padding_mask shape of {(batch, src_len)}, but got "
                                     f"{tuple(key_padding_mask._data.shape)}")
            expanded = shape.reshape(shape.expand(shape.reshape(key_padding_mask, (batch, 1, 1, src_len)),
                                                  (batch, heads, 1, src_len)), (batch * heads, 1, src_len))
            attn_mask = expanded if attn_mask is None else arith.add(attn_mask, expanded)
        dropout_p = self.dropout if self.training else 0.0
        output, weights = _scaled_dot_product_attention(q, k, v, attn_mask, dropout_p)
        output = shape.reshape(shape.transpose(output, 0, 1), (tgt_len * batch, embed))
        output = F.linear(output, self.out_proj.weight, self.out_proj.bias)
        output = shape.reshape(output, (tgt_len, batch, embed))
        if not batched:
            output = shape.squeeze(output, 1)
        if not need_weights:
            return output, None
        weights = shape.reshape(weights, (batch, heads, tgt_len, src_len))
        if average_attn_weights:
            weights = reductions.mean(weights, 1)
        if not batched:
            weights = shape.squeeze(weights, 0)
        return output, weights


def _scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None,
                                  dropout_p: float) -> tuple[Tensor, Tensor]:
    """``softmax(q / sqrt(d) @ k^T + mask) @ v`` and the (possibly dropped-out) weights.

    Args:
        q: (B, L, d) queries; k, v: (B, S, d).
        attn_mask: additive float mask broadcastable to (B, L, S), or None.
        dropout_p: dropout probability applied to the weights.
    """
    scaled = arith.mul(q, math.sqrt(1.0 / float(q._data.shape[-1])))
    scores = arith.matmul(scaled, shape.transpose(k, -2, -1))
    if attn_mask is not None:
        scores = arith.add(scores, attn_mask)
    weights = reductions.softmax(scores, -1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, dropout_p, True)
    return arith.matmul(weights, v), weights
