"""Linear and bilinear layers: ``addmm`` with the transposed weight, and the bilinear product."""
from __future__ import annotations

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import _check_dtypes, unbroadcast


class AddmmBackward0(Node):
    """``bias + mat1 @ mat2``; edges (bias, mat1, mat2) as in PyTorch's addmm."""

    __slots__ = ("bias_shape",)
    _single_input = False

    def backward(self, g):
        (node_b, _), (node_1, _), (node_2, _) = self._next
        mat1, mat2 = self.saved()
        gb = None
        if node_b is not None:
            gb = g.sum(axis=0) if self.bias_shape == g.shape[1:] else unbroadcast(g, self.bias_shape)
            if gb is g:
                gb = g.copy()  # never hand one array to two consumers
        g1 = g.dot(mat2.T) if node_1 is not None else None  # (ndarray.dot: ``@`` with less dispatch)
        # the transpose of a fresh (out, in) product: Linear's weight gradient is then contiguous
        g2 = g.T.dot(mat1).T if node_2 is not None else None
        return gb, g1, g2


class TBackward0(Node):
    """The transposed weight of ``linear`` (private to it: its one consumer is AddmmBackward0 or
    MmBackward0). A gradient that is the transpose of a whole contiguous array is handed on as
    that array, so the weight's ``.grad`` needs no copy."""

    __slots__ = ()

    def backward(self, g):
        out = g.T
        base = g.base
        if (base is not None and self._extras is None
                and out.flags.c_contiguous and base.flags.c_contiguous and base.shape == out.shape
                and base.__array_interface__["data"][0] == out.__array_interface__["data"][0]):
            return base
        return out


def weight_t(weight: Tensor) -> Tensor:
    """``weight.t()`` for ``linear`` (a view sharing the weight's version counter)."""
    out = result(weight._data.T, new_node(TBackward0, (weight,)))
    out._vc = weight._version_counter()
    return out


def addmm(bias: Tensor, mat1: Tensor, mat2: Tensor) -> Tensor:
    """``bias + mat1 @ mat2`` for 2-D ``mat1``/``mat2`` and a broadcastable ``bias``."""
    a, b = mat1._data, mat2._data
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError("addmm: mat1 and mat2 must be matrices")
    _check_dtypes(a, (mat2, bias), "self and mat2 must have the same dtype, but got {} and {}")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
                           f"{b.shape[0]}x{b.shape[1]})")
    out = a.dot(b)  # (``a @ b`` with less dispatch)
    out += bias._data
    node = new_node(AddmmBackward0, (bias, mat1, mat2))
    if node is not None:
        node.bias_shape = bias._data.shape
        # each matrix is needed only for the other's gradient (as PyTorch saves them)
        (_, _), (node_1, _), (node_2, _) = node._edges
        node.save(mat1 if node_2 is not None else None, mat2 if node_1 is not None else None)
    return result(out, node)


class TrilinearBackward0(Node):
    """``out[m, o] = sum_ij x1[m, i] w[o, i, j] x2[m, j]``; edges (input1, weight, input2)."""

    __slots__ = ()
    _single_input = False

    def backward(self, g):
        (node_1, _), (node_w, _), (node_2, _) = self._next
        x1, w, x2 = self.saved()
        g1 = g2 = gw = None
        if node_1 is not None or node_2 is not None:
            u = (g @ w.reshape(w.shape[0], -1)).reshape(g.shape[0], w.shape[1], w.shape[2])
            if node_1 is not None:
                g1 = np.einsum("mij,mj->mi", u, x2)
            if node_2 is not None:
                g2 = np.einsum("mij,mi->mj", u, x1)
        if node_w is not None:
            gw = np.einsum("mo,mi,mj->oij", g, x1, x2, optimize=True)
        return g1, gw, g2


def bilinear_product(input1: Tensor, input2: Tensor, weight: Tensor) -> Tensor:
    """``x1^T W_o x2`` for every output feature ``o``; 2-D inputs (batch, features)."""
    x1, w, x2 = input1._data, weight._data, input2._data
    out = np.einsum("moj,mj->mo", np.tensordot(x1, w, axes=([1], [1])), x2)
    node = new_node(TrilinearBackward0, (input1, weight, input2))
    if node is not None:
        node.save(input1, weight, input2)
    return result(out, node)
