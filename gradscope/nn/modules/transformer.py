"""Transformer layers with PyTorch's parameters, submodule names, masks and computation order:
``TransformerEncoderLayer``, ``TransformerDecoderLayer``, the stacks ``TransformerEncoder`` and
``TransformerDecoder``, and ``Transformer``.

The layers always take PyTorch's reference ("slow") path: PyTorch's fused inference fast path
computes the same function (except that it zeroes padded positions of nested-tensor outputs).
"""
from __future__ import annotations

import copy
import warnings
from typing import Any, Callable

import numpy as np

from gradscope.autograd import dtypes, grad_mode
from gradscope.autograd.tensor import Tensor
from gradscope.nn import functional as F
from gradscope.nn import init
from gradscope.nn.modules.activation import ReLU
from gradscope.nn.modules.attention import MultiheadAttention
from gradscope.nn.modules.container import ModuleList
from gradscope.nn.modules.dropout import Dropout
from gradscope.nn.modules.linear import Linear
from gradscope.nn.modules.module import Module
from gradscope.nn.modules.normalization import LayerNorm
from gradscope.ops import arith, pointwise
from gradscope.ops.creation import get_default_dtype

__all__ = ["Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
           "TransformerDecoderLayer"]


def _activation(activation: str | Callable) -> Callable:
    if not isinstance(activation, str):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


def _clones(module: Module, count: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(count)])


def generate_square_subsequent_mask(size: int, device: Any = None, dtype: Any = None) -> Tensor:
    """A (size, size) float mask: 0 on and below the diagonal, -inf above it (no looking ahead)."""
    np_dtype = dtypes.to_numpy_dtype(get_default_dtype() if dtype is None else dtype)
    return Tensor._make(np.triu(np.full((size, size), -np.inf, dtype=np_dtype), 1))


def _detect_is_causal_mask(mask: Tensor | None, is_causal: bool | None, size: int | None) -> bool:
    """True when ``is_causal`` says so, or (``is_causal`` None) when ``mask`` is the causal mask."""
    if is_causal is True:
        return True
    if is_causal is None and mask is not None:
        values = mask.numpy(force=True)
        size = size if size else values.shape[-2]
        causal = np.triu(np.full((size, size), -np.inf), 1)
        if values.dtype == np.bool_:
            causal = causal != 0
        return values.shape == causal.shape and bool(np.array_equal(values, causal))
    return False


def _sequence_length(src: Tensor, batch_first: bool) -> int:
    sizes = src.numpy(force=True).shape
    if len(sizes) == 2:
        return sizes[0]
    return sizes[1 if batch_first else 0]


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual connection and LayerNorm
    (after the residual, or before the block with ``norm_first``).

    ``forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = F.relu, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation_relu_or_gelu = 1 if activation in ("relu", F.relu) or isinstance(activation, ReLU) else \
            2 if activation in ("gelu", F.gelu) else 0
        self.activation = _activation(activation)

    def forward(self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = arith.add(x, self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal))
            return arith.add(x, self._ff_block(self.norm2(x)))
        x = self.norm1(arith.add(x, self._sa_block(x, src_mask, src_key_padding_mask, is_causal)))
        return self.norm2(arith.add(x, self._ff_block(x)))

    def _sa_block(self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                  is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoderLayer(Module):
    """Self-attention, attention over the encoder's ``memory`` and a feed-forward block, each
    with a residual connection and LayerNorm.

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)``.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = F.relu, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        x = tgt
        if self.norm_first:
            x = arith.add(x, self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = arith.add(x, self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask,
                                             memory_is_causal))
            return arith.add(x, self._ff_block(self.norm3(x)))
        x = self.norm1(arith.add(x, self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal)))
        x = self.norm2(arith.add(x, self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                                    memory_is_causal)))
        return self.norm3(arith.add(x, self._ff_block(x)))

    def _sa_block(self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                  is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal,
                           need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x: Tensor, memory: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                   is_causal: bool) -> Tensor:
        x = self.multihead_attn(x, memory, memory, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                is_causal=is_causal, need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


def _why_no_fast_path(layer: Any) -> str:
    """PyTorch's reason (for its warning) why a layer cannot use nested tensors, or ''."""
    if not isinstance(layer, TransformerEncoderLayer):
        return f"{type(layer).__name__} was not TransformerEncoderLayer"
    if layer.norm_first:
        return "encoder_layer.norm_first was True"
    if not layer.self_attn.batch_first:
        return "encoder_layer.self_attn.batch_first was not True (use batch_first for better inference performance)"
    if not layer.self_attn._qkv_same_embed_dim:
        return "encoder_layer.self_attn._qkv_same_embed_dim was not True"
    if layer.self_attn.in_proj_bias is None:
        return "encoder_layer.self_attn was passed bias=False"
    if not layer.activation_relu_or_gelu:
        return "encoder_layer.activation_relu_or_gelu was not True"
    if layer.norm1.eps != layer.norm2.eps:
        return "encoder_layer.norm1.eps was not equal to encoder_layer.norm2.eps"
    if layer.self_attn.num_heads % 2 == 1:
        return "num_head is odd"
    return ""


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (``layers``), then the optional ``norm``.

    ``forward(src, mask=None, src_key_padding_mask=None, is_causal=None)``; with ``is_causal``
    None, a ``mask`` equal to the causal mask is detected and passed on as causal.
    """

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        reason = _why_no_fast_path(encoder_layer)
        if enable_nested_tensor and reason:
            warnings.warn(f"enable_nested_tensor is True, but self.use_nested_tensor is False because {reason}",
                          stacklevel=2)
            self.use_nested_tensor = False

    def forward(self, src: Tensor, mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        first = self.layers[0] if len(self.layers) else None
        batch_first = getattr(getattr(first, "self_attn", None), "batch_first", False)
        is_causal = _detect_is_causal_mask(mask, is_causal, _sequence_length(src, batch_first))
        output = src
        for layer in self.layers:
            output = layer(output, src_mask=mask, is_causal=is_causal, src_key_padding_mask=src_key_padding_mask)
        if self._uses_nested_tensors(src, mask, src_key_padding_mask):
            keep = ~src_key_padding_mask.numpy(force=True)
            output = pointwise.where(Tensor._make(keep[..., None]), output, arith.mul(output, 0.0))
        if self.norm is not None:
            output = self.norm(output)
        return output


    def _uses_nested_tensors(self, src: Tensor, mask: Tensor | None, padding_mask: Tensor | None) -> bool:
        """Whether PyTorch's inference fast path runs, which returns zeros at padded positions:
        eval mode, no gradients needed, batched input, a left-aligned boolean padding mask and no mask."""
        if not self.use_nested_tensor or not len(self.layers) or self.layers[0].training or src.dim() != 3:
            return False
        if padding_mask is None or mask is not None or padding_mask.numpy(force=True).dtype != np.bool_:
            return False
        if grad_mode.is_grad_enabled() and (src.requires_grad or any(p.requires_grad for p in self.parameters())):
            return False
        padded = padding_mask.numpy(force=True)
        return bool(np.all(padded[:, 1:] >= padded[:, :-1]))  # padding only at the end of each row


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` (``layers``), then the optional ``norm``.

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False)``.
    """

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        first = self.layers[0] if len(self.layers) else None
        batch_first = getattr(getattr(first, "self_attn", None), "batch_first", False)
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal, _sequence_length(tgt, batch_first))
        output = tgt
        for layer in self.layers:
            output = layer(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                           tgt_key_padding_mask=tgt_key_padding_mask,
                           memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                           memory_is_causal=memory_is_causal)
        if self.norm is not None:
            output = self.norm(output)
        return output


class Transformer(Module):
    """An encoder-decoder transformer ("Attention Is All You Need") with PyTorch's defaults.

    ``forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None,
    tgt_is_causal=None, memory_is_causal=False)``.
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = F.relu, custom_encoder: Module | None = None,
                 custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias, dtype=dtype)
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
            self.encoder = TransformerEncoder(layer, num_encoder_layers, norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias, dtype=dtype)
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
            self.decoder = TransformerDecoder(layer, num_decoder_layers, norm)
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        batched = src.dim() == 3
        if not self.batch_first and batched and src.size(1) != tgt.size(1):
            raise RuntimeError("the batch number of src and tgt must be equal")
        if self.batch_first and batched and src.size(0) != tgt.size(0):
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.size(-1) != self.d_model or tgt.size(-1) != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
        """A (sz, sz) float mask with -inf above the diagonal and 0 elsewhere."""
        return generate_square_subsequent_mask(sz, device, dtype)

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)
