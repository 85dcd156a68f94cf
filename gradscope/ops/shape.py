"""Shape ops (views), indexing, concatenation and splitting, copies and dtype conversion, and
rearrangements (``rot90``, ``cartesian_prod``, ``combinations``)."""
from __future__ import annotations

import itertools
import warnings
from typing import Any, Sequence

import numpy as np

from gradscope.autograd import dtypes
from gradscope.autograd.device import check_device, device as device_type
from gradscope.autograd.function import new_node, result, results
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import _const, normalize_dim, operand


def _view_result(out: np.ndarray, node: Node | None, base: Tensor) -> Tensor:
    """A result that shares ``base``'s memory also shares its version counter."""
    t = result(out, node)
    if out.base is not None or out is base._data:
        t._vc = base._version_counter()
        if base.requires_grad:
            t._view_of_grad = True
    return t


def _sizes(shape: Sequence) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


class ViewBackward0(Node):
    __slots__ = ("shape",)

    def backward(self, g):
        return g.reshape(self.shape)


class UnsafeViewBackward0(ViewBackward0):
    __slots__ = ()


def _infer_shape(shape: tuple, numel: int, current: tuple) -> tuple:
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


def reshape(input: Tensor, *shape: Any) -> Tensor:
    """Same data with a new shape (a view when possible)."""
    target = _infer_shape(_sizes(shape), input._data.size, input._data.shape)
    out = input._data.reshape(target)
    node = new_node(ViewBackward0, (input,))
    if node is not None:
        node.shape = input._data.shape
    return _view_result(out, node, input)


def view(input: Tensor, *shape: Any) -> Tensor:
    """A view with a new shape; raises like PyTorch when the strides do not allow it."""
    if len(shape) == 1 and isinstance(shape[0], dtypes.dtype):
        return Tensor._make(input._data.view(shape[0].np))
    target = _infer_shape(_sizes(shape), input._data.size, input._data.shape)
    data = input._data
    if not data.flags.c_contiguous and data.size > 1:
        try:
            out = data.view()
            out.shape = target
        except (AttributeError, ValueError):
            raise RuntimeError("view size is not compatible with input tensor's size and stride (at least "
                               "one dimension spans across two contiguous subspaces). Use .reshape(...) "
                               "instead.") from None
    else:
        out = data.reshape(target)
    node = new_node(ViewBackward0, (input,))
    if node is not None:
        node.shape = data.shape
    return _view_result(out, node, input)


def view_as(input: Tensor, other: Tensor) -> Tensor:
    return view(input, other._data.shape)


def reshape_as(input: Tensor, other: Tensor) -> Tensor:
    return reshape(input, other._data.shape)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    shape = input._data.shape
    if input._data.ndim == 0:
        return reshape(input, 1)
    start = normalize_dim(start_dim, len(shape))
    end = normalize_dim(end_dim, len(shape))
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if start == end:
        return reshape(input, shape) if True else input
    new = shape[:start] + (int(np.prod(shape[start:end + 1])),) + shape[end + 1:]
    return reshape(input, new)


def unflatten(input: Tensor, dim: int, sizes: Sequence) -> Tensor:
    shape = input._data.shape
    d = normalize_dim(dim, len(shape))
    sizes = tuple(sizes)
    if -1 in sizes:
        known = int(np.prod([s for s in sizes if s != -1]))
        sizes = tuple(shape[d] // known if s == -1 else s for s in sizes)
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


class SqueezeBackward1(ViewBackward0):
    __slots__ = ()


class UnsqueezeBackward0(ViewBackward0):
    __slots__ = ()


def squeeze(input: Tensor, dim: Any = None) -> Tensor:
    data = input._data
    if dim is None:
        out = data.reshape(tuple(s for s in data.shape if s != 1))
    else:
        dims = normalize_dim(dim, data.ndim)
        dims = dims if isinstance(dims, tuple) else (dims,)
        if data.ndim == 0:
            out = data.reshape(())
        else:
            out = data.reshape(tuple(s for i, s in enumerate(data.shape) if not (i in dims and s == 1)))
    node = new_node(SqueezeBackward1, (input,))
    if node is not None:
        node.shape = data.shape
    return _view_result(out, node, input)


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    data = input._data
    d = normalize_dim(dim, data.ndim + 1)
    out = np.expand_dims(data, d)
    node = new_node(UnsqueezeBackward0, (input,))
    if node is not None:
        node.shape = data.shape
    return _view_result(out, node, input)


class PermuteBackward0(Node):
    __slots__ = ("inverse",)

    def backward(self, g):
        return np.transpose(g, self.inverse)


def permute(input: Tensor, *dims: Any) -> Tensor:
    dims = normalize_dim(_sizes(dims), input._data.ndim)
    if sorted(dims) != list(range(input._data.ndim)):
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match "
                           f"the length of the desired ordering of dimensions i.e. input.dim() = "
                           f"{input._data.ndim} is not equal to len(dims) = {len(dims)}")
    out = np.transpose(input._data, dims)
    node = new_node(PermuteBackward0, (input,))
    if node is not None:
        node.inverse = tuple(np.argsort(dims))
    return _view_result(out, node, input)


class TransposeBackward0(Node):
    __slots__ = ("d0", "d1")

    def backward(self, g):
        return np.swapaxes(g, self.d0, self.d1)


class TBackward0(TransposeBackward0):
    __slots__ = ()


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    nd = input._data.ndim
    d0, d1 = normalize_dim(dim0, nd), normalize_dim(dim1, nd)
    out = np.swapaxes(input._data, d0, d1) if nd else input._data.view()
    node = new_node(TransposeBackward0, (input,))
    if node is not None:
        node.d0, node.d1 = d0, d1
    return _view_result(out, node, input)


swapaxes = transpose
swapdims = transpose


def t(input: Tensor) -> Tensor:
    nd = input._data.ndim
    if nd > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {nd}D")
    out = input._data.T
    node = new_node(TBackward0, (input,))
    if node is not None:
        node.d0, node.d1 = (0, 1) if nd == 2 else (0, 0)
    return _view_result(out, node, input)


def T_property(input: Tensor) -> Tensor:
    return permute(input, *reversed(range(input._data.ndim)))


def mT(input: Tensor) -> Tensor:
    return transpose(input, -2, -1)


class ExpandBackward0(Node):
    __slots__ = ("shape",)

    def backward(self, g):
        from gradscope.ops._util import unbroadcast

        return unbroadcast(g, self.shape)


def expand(input: Tensor, *sizes: Any) -> Tensor:
    sizes = _sizes(sizes)
    data = input._data
    lead = len(sizes) - data.ndim
    if lead < 0:
        raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal "
                           f"to the number of dimensions in the tensor ({data.ndim})")
    target = tuple(data.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    try:
        if any(size < 0 for size in target) or np.broadcast_shapes(data.shape, target) != target:
            raise ValueError
    except ValueError:
        raise RuntimeError(f"The expanded size of the tensor ({list(target)}) must match the existing size "
                           f"({list(data.shape)}) at non-singleton dimensions") from None
    # A writable view, as PyTorch's: a write into a part without repeated elements is allowed,
    # one into repeated elements is refused by the in-place ops (check_no_internal_overlap).
    strides = (0,) * lead + tuple(0 if size == 1 and want != 1 else stride
                                  for size, stride, want in zip(data.shape, data.strides, target[lead:]))
    out = np.lib.stride_tricks.as_strided(data, target, strides, writeable=data.flags.writeable)
    node = new_node(ExpandBackward0, (input,))
    if node is not None:
        node.shape = data.shape
    return _view_result(out, node, input)


def expand_as(input: Tensor, other: Tensor) -> Tensor:
    return expand(input, other._data.shape)


def broadcast_to(input: Tensor, shape: Sequence) -> Tensor:
    return expand(input, tuple(shape))


class RepeatBackward0(Node):
    __slots__ = ("shape", "reps")

    def backward(self, g):
        shape = self.shape
        lead = len(self.reps) - len(shape)
        full = (1,) * lead + tuple(shape)
        split = []
        for r, s in zip(self.reps, full):
            split.extend([r, s])
        return g.reshape(split).sum(axis=tuple(range(0, len(split), 2))).reshape(shape)


def repeat(input: Tensor, *sizes: Any) -> Tensor:
    reps = _sizes(sizes)
    data = input._data
    lead = len(reps) - data.ndim
    out = np.tile(data.reshape((1,) * lead + data.shape), reps)
    node = new_node(RepeatBackward0, (input,))
    if node is not None:
        node.shape, node.reps = data.shape, reps
    return result(out, node)


class CloneBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        return g


def clone(input: Tensor, *, memory_format: Any = None) -> Tensor:
    return result(input._data.copy(), new_node(CloneBackward0, (input,)))


def contiguous(input: Tensor, memory_format: Any = None) -> Tensor:
    if input._data.flags.c_contiguous:
        return input
    return result(np.ascontiguousarray(input._data), new_node(CloneBackward0, (input,)))


class ToCopyBackward0(Node):
    __slots__ = ("dtype",)

    def backward(self, g):
        return g.astype(self.dtype)


def to_dtype(input: Tensor, dtype: Any) -> Tensor:
    np_dtype = dtypes.to_numpy_dtype(dtype)
    if input._data.dtype == np_dtype:
        return input
    out = input._data.astype(np_dtype)
    node = new_node(ToCopyBackward0, (input,)) if np_dtype.kind == "f" else None
    if node is not None:
        node.dtype = input._data.dtype
    return result(out, node)


def to(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)`` and the keyword forms;
    any device other than the CPU is rejected with a clear error."""
    dtype = kwargs.get("dtype")
    for a in args:
        if isinstance(a, (dtypes.dtype, np.dtype)) or a in (float, int, bool):
            dtype = a
        elif isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, (str, device_type, int)) and not isinstance(a, bool):
            check_device(a)
        elif a is not None:
            raise TypeError(f"to() received an invalid combination of arguments: {type(a).__name__}")
    check_device(kwargs.get("device"))
    if dtype is None or dtypes.to_numpy_dtype(dtype) == input._data.dtype:
        return input.clone() if kwargs.get("copy") else input
    return to_dtype(input, dtype)


def type_as(input: Tensor, other: Tensor) -> Tensor:
    """``input`` converted to ``other``'s dtype (itself when they already agree)."""
    return to_dtype(input, other.dtype)


def cuda(input: Tensor, device: Any = None, non_blocking: bool = False, memory_format: Any = None) -> Tensor:
    """Always an error: gradscope has no CUDA device."""
    check_device(device_type("cuda", device) if device is None or isinstance(device, int) else device)
    return input


def cpu(input: Tensor, memory_format: Any = None) -> Tensor:
    return input


# ---------------------------------------------------------------- indexing
def _convert_index(index: Any) -> tuple[Any, bool]:
    """numpy index for a PyTorch index, and whether it uses advanced indexing."""
    items = index if isinstance(index, tuple) else (index,)
    out = []
    advanced = False
    for item in items:
        if isinstance(item, Tensor):
            item = item._data
            advanced = True
            if item.dtype.kind == "f":
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        elif isinstance(item, (list, np.ndarray)):
            item = np.asarray(item)
            advanced = True
        elif isinstance(item, (bool, np.bool_)):
            advanced = True
        out.append(item)
    return (tuple(out) if isinstance(index, tuple) else out[0]), advanced


class IndexBackward0(Node):
    __slots__ = ("shape", "index")

    def backward(self, g):
        index = self.index
        if (isinstance(index, tuple) and len(index) == len(self.shape)
                and all(isinstance(i, np.ndarray) and i.dtype.kind in "iu" for i in index)):
            # Every dim indexed by an integer array: one bincount beats np.add.at by far.
            flat = np.ravel_multi_index(np.broadcast_arrays(*index), self.shape, mode="wrap")
            size = int(np.prod(self.shape))
            summed = np.bincount(flat.ravel(), weights=g.ravel(), minlength=size)
            return summed.reshape(self.shape).astype(g.dtype, copy=False)
        grad = np.zeros(self.shape, dtype=g.dtype)
        np.add.at(grad, index, g)
        return grad


class SelectBackward0(Node):
    __slots__ = ("shape", "index")

    def backward(self, g):
        grad = np.zeros(self.shape, dtype=g.dtype)
        grad[self.index] = g
        return grad


class SliceBackward0(SelectBackward0):
    __slots__ = ()


def _basic_node_cls(index: Any) -> type:
    items = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, (int, np.integer)) for i in items):
        return SelectBackward0
    if all(i is None for i in items):
        return UnsqueezeBackward0
    return SliceBackward0


def getitem(input: Tensor, index: Any) -> Tensor:
    """``input[index]`` with basic (int, slice, None, ...), advanced and boolean indexing."""
    np_index, advanced = _convert_index(index)
    data = input._data
    try:
        out = data[np_index]
    except IndexError as exc:
        raise IndexError(f"{exc} (tensor of shape {list(data.shape)})") from None
    if advanced:
        node = new_node(IndexBackward0, (input,))
        if node is not None:
            node.shape, node.index = data.shape, np_index
        return result(np.asarray(out), node)
    cls = _basic_node_cls(np_index)
    node = new_node(cls, (input,))
    if node is not None:
        if cls is UnsqueezeBackward0:
            node.shape = data.shape
        else:
            node.shape, node.index = data.shape, np_index
    if not isinstance(out, np.ndarray):
        out = np.asarray(out)
        return result(out, node)
    return _view_result(out, node, input)


class IndexPutBackward0(Node):
    __slots__ = ("index", "value_shape")
    _single_input = False

    def backward(self, g):
        from gradscope.ops._util import unbroadcast

        (node_a, _), (node_v, _) = self._next
        ga = gv = None
        if node_a is not None:
            ga = g.copy()
            ga[self.index] = 0
        if node_v is not None:
            gv = unbroadcast(np.asarray(g[self.index]), self.value_shape)
        return ga, gv


def setitem(input: Tensor, index: Any, value: Any) -> None:
    """``input[index] = value`` in place, recording the write when grad is involved."""
    from gradscope.ops.inplace import check_inplace

    np_index, _ = _convert_index(index)
    value_t = value if isinstance(value, Tensor) else None
    value_data = value._data if value_t is not None else value
    region, overlap = None, True
    if 0 in input._data.strides:  # an expanded tensor: what must not overlap is the part written
        parts = np_index if isinstance(np_index, tuple) else (np_index,)
        try:  # (with a trailing ..., integer indices give a 0-d view rather than a scalar copy)
            region = input._data[parts if any(p is Ellipsis for p in parts) else (*parts, Ellipsis)]
        except (IndexError, TypeError, ValueError):
            region = None
        if region is not None and not np.shares_memory(region, input._data):
            # advanced indexing (index_put_): PyTorch writes, with a deprecation warning
            warnings.warn("Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor before "
                          "performing this operation. This also applies to advanced indexing e.g. "
                          "tensor[indices] = tensor", UserWarning, stacklevel=2)
            region, overlap = None, False
    needs_graph = check_inplace(input, value_t, region, overlap)
    if not needs_graph:
        input._data[np_index] = value_data
        input._bump_version()
        return
    node = new_node(IndexPutBackward0, (input, value_t))
    node.index = np_index
    node.value_shape = np.shape(value_data)
    input._data[np_index] = value_data
    input._bump_version()
    node._meta = ((input._data.shape, input._data.dtype),)
    old_fn, old_nr = input.grad_fn, input._output_nr
    input.grad_fn = node
    input.requires_grad = True
    input._output_nr = 0
    input._move_retain_grad(old_fn, old_nr)


# ---------------------------------------------------------------- cat / stack / split
class CatBackward0(Node):
    __slots__ = ("axis", "bounds")
    _single_input = False

    def backward(self, g):
        return tuple(np.take(g, range(lo, hi), axis=self.axis) if edge[0] is not None else None
                     for (lo, hi), edge in zip(self.bounds, self._next))


def cat(tensors: Sequence[Tensor], dim: int = 0, *, out: Any = None) -> Tensor:
    """Concatenate along an existing dimension."""
    tensors = [t for t in tensors]
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    arrays = [t._data for t in tensors]
    nonempty = [a for a in arrays if not (a.ndim == 1 and a.size == 0)]
    axis = normalize_dim(dim, (nonempty or arrays)[0].ndim)
    try:
        out_arr = np.concatenate(nonempty or arrays, axis=axis)
    except ValueError as exc:
        raise RuntimeError(f"torch.cat(): Sizes of tensors must match except in dimension {dim}: "
                           f"{[list(a.shape) for a in arrays]} ({exc})") from None
    node = new_node(CatBackward0, tuple(tensors))
    if node is not None:
        bounds, start = [], 0
        for a in arrays:
            size = 0 if (a.ndim == 1 and a.size == 0) else a.shape[axis]
            bounds.append((start, start + size))
            start += size
        node.axis, node.bounds = axis, bounds
    return result(out_arr, node)


concat = cat
concatenate = cat


class StackBackward0(Node):
    __slots__ = ("axis",)
    _single_input = False

    def backward(self, g):
        return tuple(np.take(g, i, axis=self.axis) if edge[0] is not None else None
                     for i, edge in enumerate(self._next))


def stack(tensors: Sequence[Tensor], dim: int = 0, *, out: Any = None) -> Tensor:
    """Stack along a new dimension."""
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    arrays = [t._data for t in tensors]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise RuntimeError(f"stack expects each tensor to be equal size, but got {[list(a.shape) for a in arrays]}")
    axis = normalize_dim(dim, arrays[0].ndim + 1)
    node = new_node(StackBackward0, tuple(tensors))
    if node is not None:
        node.axis = axis
    return result(np.stack(arrays, axis=axis), node)


def split(input: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple:
    """Split into chunks of a given size, or of the given list of sizes (views)."""
    size = input._data.shape[normalize_dim(dim, input._data.ndim)]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        bounds = [(i, min(i + step, size)) for i in range(0, size, step)] or [(0, 0)]
    else:
        sections = list(split_size_or_sections)
        if sum(sections) != size:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's "
                               f"size at dimension {dim}), but got split_sizes={sections}")
        bounds, start = [], 0
        for s in sections:
            bounds.append((start, start + s))
            start += s
    d = normalize_dim(dim, input._data.ndim)
    return _view_pieces(input, [(slice(None),) * d + (slice(lo, hi),) for lo, hi in bounds], SplitBackward0)


def _view_pieces(input: Tensor, indices: list, node_class: type) -> tuple:
    """Views ``input[index]`` for each index, all outputs of one ``node_class`` node."""
    node = new_node(node_class, (input,))
    if node is not None:
        node.shape, node.indices = input._data.shape, indices
    pieces = results([input._data[index] for index in indices], node)
    vc = input._version_counter()
    for piece in pieces:
        piece._vc = vc
        if input.requires_grad:
            piece._view_of_grad = True
    return pieces


class SplitBackward0(Node):
    """One node for all pieces of split/chunk: their hooks fire together, in slot order."""

    __slots__ = ("shape", "indices")

    def backward(self, *grads):
        dtype = next(g for g in grads if g is not None).dtype
        full = np.zeros(self.shape, dtype=dtype)
        for index, g in zip(self.indices, grads):
            if g is not None:
                full[index] = g
        return full


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple:
    size = input._data.shape[normalize_dim(dim, input._data.ndim)]
    step = -(-size // chunks)
    return split(input, max(step, 1), dim)


class UnbindBackward0(SplitBackward0):
    """One node for all slices of unbind, as in torch (each output is one slot of it)."""

    __slots__ = ()


def unbind(input: Tensor, dim: int = 0) -> tuple:
    d = normalize_dim(dim, input._data.ndim)
    return _view_pieces(input, [(slice(None),) * d + (i,) for i in range(input._data.shape[d])], UnbindBackward0)


class FlipBackward0(Node):
    __slots__ = ("axes",)

    def backward(self, g):
        return np.flip(g, self.axes)


def flip(input: Tensor, *dims: Any) -> Tensor:
    """Reverse the order of entries along ``dims`` (a sequence, or several ints)."""
    axes = normalize_dim(tuple(_sizes(dims)), input._data.ndim)
    node = new_node(FlipBackward0, (input,))
    if node is not None:
        node.axes = axes
    return result(np.flip(input._data, axes).copy(), node)


def fliplr(input: Tensor) -> Tensor:
    return flip(input, (1,))


def flipud(input: Tensor) -> Tensor:
    return flip(input, (0,))


class RollBackward0(Node):
    __slots__ = ("shifts", "axes")

    def backward(self, g):
        return np.roll(g, tuple(-s for s in self.shifts), self.axes)


def roll(input: Tensor, shifts: Any, dims: Any = None) -> Tensor:
    """Rotate entries along ``dims`` by ``shifts`` (the flattened tensor when ``dims`` is None)."""
    data = input._data
    shift_tuple = tuple(shifts) if isinstance(shifts, (tuple, list)) else (int(shifts),)
    if dims is None:
        flat = reshape(input, -1)
        return reshape(roll(flat, shift_tuple[0], 0), tuple(data.shape))
    axes = normalize_dim(tuple(dims) if isinstance(dims, (tuple, list)) else (dims,), data.ndim)
    if len(axes) != len(shift_tuple):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shift_tuple)}, dims:{len(axes)}")
    node = new_node(RollBackward0, (input,))
    if node is not None:
        node.shifts, node.axes = shift_tuple, axes
    return result(np.roll(data, shift_tuple, axes), node)


def repeat_interleave(input: Any, repeats: Any = None, dim: int | None = None, *,
                      output_size: int | None = None) -> Tensor:
    """Repeat each entry ``repeats`` times (an int or one count per entry) along ``dim``; a lone
    integer tensor ``t`` gives ``repeat_interleave(arange(len(t)), t)``."""
    from gradscope.ops.indexing import index_select

    if repeats is None:
        counts = operand(input).astype(np.int64)
        return Tensor._make(np.repeat(np.arange(counts.size, dtype=np.int64), counts))
    if dim is None:
        input, axis = reshape(input, -1), 0
    else:
        axis = normalize_dim(dim, input._data.ndim)
    length = input._data.shape[axis] if input._data.ndim else 1
    counts = np.broadcast_to(np.asarray(operand(repeats), dtype=np.int64).reshape(-1), (length,))
    if np.any(counts < 0):
        raise RuntimeError("repeats can not be negative")
    index = np.repeat(np.arange(length, dtype=np.int64), counts)
    return index_select(input, axis, Tensor._make(index))


def tile(input: Tensor, dims: Sequence[int]) -> Tensor:
    reps = tuple(dims)
    if len(reps) < input._data.ndim:
        reps = (1,) * (input._data.ndim - len(reps)) + reps
    return repeat(input, reps)


def narrow(input: Tensor, dim: int, start: Any, length: int) -> Tensor:
    axis = normalize_dim(dim, input._data.ndim)
    begin = int(start) % input._data.shape[axis] if int(start) < 0 else int(start)
    return getitem(input, (slice(None),) * axis + (slice(begin, begin + int(length)),))


def select(input: Tensor, dim: int, index: int) -> Tensor:
    axis = normalize_dim(dim, input._data.ndim)
    return getitem(input, (slice(None),) * axis + (int(index),))


def movedim(input: Tensor, source: Any, destination: Any) -> Tensor:
    ndim = input._data.ndim
    src = normalize_dim(tuple(source) if isinstance(source, (tuple, list)) else (source,), ndim)
    dst = normalize_dim(tuple(destination) if isinstance(destination, (tuple, list)) else (destination,), ndim)
    order = [d for d in range(ndim) if d not in src]
    for s, d in sorted(zip(dst, src)):
        order.insert(s, d)
    return permute(input, order)


class DiagonalBackward0(Node):
    __slots__ = ("shape", "offset", "axes")

    def backward(self, g):
        grad = np.zeros(self.shape, dtype=g.dtype)
        view = np.diagonal(grad, self.offset, *self.axes)
        view.setflags(write=True)
        view[...] = g
        return grad


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal over ``dim1``/``dim2`` as the last dimension (offset above/below)."""
    axes = normalize_dim((dim1, dim2), input._data.ndim)
    node = new_node(DiagonalBackward0, (input,))
    if node is not None:
        node.shape, node.offset, node.axes = input._data.shape, offset, axes
    return result(np.diagonal(input._data, offset, *axes).copy(), node)


class DiagEmbedBackward0(Node):
    __slots__ = ("offset",)

    def backward(self, g):
        return np.diagonal(g, self.offset, -2, -1).copy()


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """Matrices (last two dims) with ``input``'s last dimension on their ``offset`` diagonal."""
    if (dim1, dim2) not in ((-2, -1), (input._data.ndim - 1, input._data.ndim)):
        raise NotImplementedError("gradscope's diag_embed places the diagonal in the last two dims only")
    data = input._data
    n = data.shape[-1] + abs(offset)
    out = np.zeros(data.shape[:-1] + (n, n), dtype=data.dtype)
    view = np.diagonal(out, offset, -2, -1)
    view.setflags(write=True)
    view[...] = data
    node = new_node(DiagEmbedBackward0, (input,))
    if node is not None:
        node.offset = offset
    return result(out, node)


def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D input becomes a square matrix with it on a diagonal; a 2-D input gives its diagonal."""
    ndim = input._data.ndim
    if ndim == 1:
        return diag_embed(input, diagonal)
    if ndim == 2:
        return globals()["diagonal"](input, diagonal)
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {ndim}D")


def diagflat(input: Tensor, offset: int = 0) -> Tensor:
    return diag_embed(reshape(input, -1), offset)


def trace(input: Tensor) -> Tensor:
    from gradscope.ops.reduce import sum as sum_op

    return sum_op(diagonal(input))


def broadcast_tensors(*tensors: Tensor) -> tuple:
    shape = np.broadcast_shapes(*(t._data.shape for t in tensors))
    return tuple(expand(t, shape) for t in tensors)


def meshgrid(*tensors: Any, indexing: str | None = None) -> tuple:
    """Coordinate grids from 1-D tensors (``indexing='ij'`` by default, or ``'xy'``)."""
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        tensors = tuple(tensors[0])
    mode = indexing or "ij"
    if mode not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {mode}")
    sizes = [t._data.size for t in tensors]
    if mode == "xy" and len(tensors) >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    grids = []
    for i, t in enumerate(tensors):
        position = i
        if mode == "xy" and len(tensors) >= 2 and i < 2:
            position = 1 - i
        shape = [1] * len(tensors)
        shape[position] = t._data.size
        grids.append(expand(reshape(t, tuple(shape)), tuple(sizes)))
    return tuple(grids)


def unfold(input: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Sliding windows of ``size`` (every ``step``) along ``dimension``, as a new last dim."""
    from gradscope.ops.indexing import index_select

    axis = normalize_dim(dimension, input._data.ndim)
    length = input._data.shape[axis] if input._data.ndim else 1
    if size > length:
        raise RuntimeError(f"maximum size for tensor at dimension {axis} is {length} but size is {size}")
    count = (length - size) // step + 1
    index = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
    picked = index_select(input, axis, Tensor._make(index.astype(np.int64)))
    shape = input._data.shape[:axis] + (count, size) + input._data.shape[axis + 1:]
    return movedim(reshape(picked, shape), axis + 1, -1)


def _index_pairs(row: int, col: int, offset: int, lower: bool) -> Tensor:
    keep = np.tri(row, col, offset, dtype=bool) if lower else ~np.tri(row, col, offset - 1, dtype=bool)
    return Tensor._make(np.stack(np.nonzero(keep)).astype(np.int64))


def tril_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None, device: Any = None,
                 layout: Any = None) -> Tensor:
    check_device(device)
    return _index_pairs(row, col, offset, True)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None, device: Any = None,
                 layout: Any = None) -> Tensor:
    check_device(device)
    return _index_pairs(row, col, offset, False)


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    return cat(tensors, dim=0 if all(t._data.ndim == 1 for t in tensors) else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    return cat([t if t._data.ndim >= 2 else reshape(t, (1, -1)) for t in tensors], dim=0)


def column_stack(tensors: Sequence[Tensor]) -> Tensor:
    return cat([t if t._data.ndim >= 2 else reshape(t, (-1, 1)) for t in tensors], dim=1)


def dstack(tensors: Sequence[Tensor]) -> Tensor:
    def as_3d(t: Tensor) -> Tensor:
        if t._data.ndim == 1:
            return reshape(t, (1, -1, 1))
        if t._data.ndim == 2:
            return unsqueeze(t, -1)
        return t

    return cat([as_3d(t) for t in tensors], dim=2)


def tensor_split(input: Tensor, indices_or_sections: Any, dim: int = 0) -> tuple:
    """Split into ``n`` nearly equal parts (the first ones one longer), or at the given indices."""
    axis = normalize_dim(dim, input._data.ndim)
    length = input._data.shape[axis]
    if isinstance(indices_or_sections, (int, np.integer)):
        n = int(indices_or_sections)
        sizes = [length // n + (1 if i < length % n else 0) for i in range(n)]
    else:
        bounds = [0] + [min(int(i), length) for i in indices_or_sections] + [length]
        sizes = [max(b - a, 0) for a, b in zip(bounds[:-1], bounds[1:])]
    return split(input, sizes, axis)


def ravel(input: Tensor) -> Tensor:
    """The elements as a 1-D tensor (a view when possible)."""
    return reshape(input, (-1,))


def diff(input: Tensor, n: int = 1, dim: int = -1, prepend: Tensor | None = None,
         append: Tensor | None = None) -> Tensor:
    """The ``n``-th forward difference along ``dim`` (after attaching ``prepend``/``append``)."""
    axis = normalize_dim(dim, input._data.ndim)
    if prepend is not None or append is not None:
        input = cat([t for t in (prepend, input, append) if t is not None], axis)
    for _ in range(n):
        length = input._data.shape[axis]
        later = narrow(input, axis, 1, max(length - 1, 0))
        earlier = narrow(input, axis, 0, max(length - 1, 0))
        input = later != earlier if input._data.dtype == np.bool_ else later - earlier
    return input


def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    """``input``'s values at ``indices`` along ``dim`` (of the flattened input when ``dim`` is None),
    broadcasting the other dims as ``torch.take_along_dim``."""
    from gradscope.ops.indexing import gather

    if dim is None:
        return gather(reshape(input, (-1,)), 0, reshape(indices, (-1,)))
    axis = normalize_dim(dim, input._data.ndim)
    in_shape, index_shape = list(input._data.shape), list(indices._data.shape)
    in_shape[axis] = index_shape[axis] = 1
    batch = list(np.broadcast_shapes(tuple(in_shape), tuple(index_shape)))
    source_shape, target_shape = list(batch), list(batch)
    source_shape[axis], target_shape[axis] = input._data.shape[axis], indices._data.shape[axis]
    return gather(expand(input, *source_shape), axis, expand(indices, *target_shape))


# ============================== rearrangements: rot90, cartesian_prod, combinations
def rot90(input: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
    """Rotate by 90 degrees ``k`` times in the plane of ``dims`` (from the first towards the second)."""
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    d0, d1 = dims
    k %= 4
    if k == 1:
        return transpose(flip(input, [d1]), d0, d1)
    if k == 2:
        return flip(input, [d0, d1])
    if k == 3:
        return transpose(flip(input, [d0]), d0, d1)
    return clone(input)


def cartesian_prod(*tensors: Tensor) -> Tensor:
    """Every combination of one element from each 1-D tensor, as rows (one tensor: itself)."""
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return stack([reshape(g, (-1,)) for g in grids], 1)


def combinations(input: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:
    """The length-``r`` combinations of a 1-D tensor's elements, as rows (itertools order)."""
    from gradscope.ops.indexing import index_select
    if input.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return _const(np.zeros((0,), dtype=input._data.dtype))
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    index = np.array(list(pick(range(input.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    if index.shape[0] == 0:
        return _const(np.zeros((0, r), dtype=input._data.dtype))
    return reshape(index_select(input, 0, _const(index.reshape(-1))), (-1, r))
