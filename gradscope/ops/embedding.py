"""Embedding lookup, with ``padding_idx`` and ``max_norm`` renormalisation."""
from __future__ import annotations

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor


class EmbeddingBackward0(Node):
    __slots__ = ("num_weights", "indices", "padding_idx", "scale_grad_by_freq")

    def backward(self, g):
        dim = g.shape[-1]
        flat = self.indices.reshape(-1)
        rows = g.reshape(-1, dim)
        if self.scale_grad_by_freq:
            counts = np.bincount(flat, minlength=self.num_weights)
            rows = rows / counts[flat].reshape(-1, 1).astype(g.dtype)
        grad = np.zeros((self.num_weights, dim), dtype=g.dtype)
        np.add.at(grad, flat, rows)
        if self.padding_idx is not None:
            grad[self.padding_idx] = 0
        return grad


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` picked by the integer ``input``; row ``padding_idx`` gets no gradient."""
    idx = input._data
    if idx.dtype.kind not in "iu":
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar "
                           f"types: Long, Int; but got {input._type_name()} instead (while checking arguments "
                           "for embedding)")
    w = weight._data
    num = w.shape[0]
    if idx.size and (idx.min() < -num or idx.max() >= num):
        raise IndexError("index out of range in self")
    idx = np.where(idx < 0, idx + num, idx)
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx = padding_idx % num
    if max_norm is not None:
        _renorm_rows(weight, np.unique(idx), max_norm, norm_type)
    node = new_node(EmbeddingBackward0, (weight,))
    if node is not None:
        node.num_weights, node.indices, node.padding_idx = num, idx, padding_idx
        node.scale_grad_by_freq = scale_grad_by_freq
    return result(w[idx], node)


def _renorm_rows(weight: Tensor, rows: np.ndarray, max_norm: float, norm_type: float) -> None:
    """Rescale (in place, without grad) the given rows whose norm exceeds ``max_norm``."""
    data = weight._data
    picked = data[rows]
    norms = np.linalg.norm(picked.astype(np.float64), ord=norm_type, axis=1)
    scale = np.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    data[rows] = (picked * scale[:, None]).astype(data.dtype)
    weight._bump_version()
