"""Variable-length sequences: ``PackedSequence``, packing and padding, as in ``torch.nn.utils.rnn``.

Packing and unpacking are single gathers (differentiable), so gradients flow from a packed
RNN output back to the padded input.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from gradscope.autograd.tensor import Tensor
from gradscope.nn import functional as F
from gradscope.ops import shape
from gradscope.ops.creation import full

__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence",
           "unpad_sequence", "pack_sequence", "unpack_sequence"]


class PackedSequence(NamedTuple):
    """Time-major packed rows of sorted sequences.

    ``data`` holds, for each time step, the entries of the sequences still running
    (``batch_sizes[t]`` of them, longest first); ``sorted_indices`` maps sorted to original
    batch positions and ``unsorted_indices`` back (None when the input was already sorted).
    """

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def to(self, *args: Any, **kwargs: Any) -> "PackedSequence":
        """``data.to(...)`` (indices stay int64)."""
        return self._replace(data=self.data.to(*args, **kwargs))

    def cpu(self) -> "PackedSequence":
        return self

    def double(self) -> "PackedSequence":
        return self._replace(data=self.data.double())

    def float(self) -> "PackedSequence":
        return self._replace(data=self.data.float())

    @property
    def is_cuda(self) -> bool:
        return False

    def is_pinned(self) -> bool:
        return False


def _int_array(values: Any) -> np.ndarray:
    if isinstance(values, Tensor):
        return values.numpy(force=True).astype(np.int64).reshape(-1)
    return np.asarray([int(v) for v in values], dtype=np.int64)


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The inverse of an index permutation (None stays None)."""
    if permutation is None:
        return None
    order = permutation.numpy(force=True)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    return Tensor._make(inverse)


def packed_row_index(batch_sizes: np.ndarray) -> np.ndarray:
    """(T, B) position of each (step, sorted sequence) in the packed data, -1 where it has ended."""
    steps, batch = len(batch_sizes), int(batch_sizes[0]) if len(batch_sizes) else 0
    valid = np.arange(batch)[None, :] < batch_sizes[:, None]
    index = np.full((steps, batch), -1, dtype=np.int64)
    index[valid] = np.arange(int(valid.sum()))
    return index


def pack_padded_sequence(input: Tensor, lengths: Any, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded (T, B, *) (or (B, T, *) with ``batch_first``) batch of sequences of ``lengths``."""
    lengths = _int_array(lengths)
    if enforce_sorted:
        if np.any(lengths[1:] > lengths[:-1]):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                               "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
                               "to sidestep this requirement if you do not need ONNX exportability.")
        sorted_indices = None
        order = np.arange(lengths.size)
    else:
        order = np.argsort(-lengths, kind="stable")
        sorted_indices = Tensor._make(order.astype(np.int64))
    if lengths.size and lengths.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' that "
                           "is <= 0")
    sizes = input.numpy(force=True).shape
    time_first = shape.transpose(input, 0, 1) if batch_first else input
    steps, batch = (sizes[1], sizes[0]) if batch_first else sizes[:2]
    sorted_lengths = lengths[order]
    if sorted_lengths.size and sorted_lengths[0] > steps:
        raise RuntimeError(f"Expected sequence length to be at most {steps}, but got {int(sorted_lengths[0])}")
    batch_sizes = (sorted_lengths[None, :] > np.arange(int(sorted_lengths[0]))[:, None]).sum(1).astype(np.int64)
    rows = packed_row_index(batch_sizes)
    step_index, slot = np.nonzero(rows >= 0)
    flat = shape.reshape(time_first, (steps * batch,) + tuple(sizes[2:]))
    data = flat[Tensor._make(step_index * batch + order[slot])]
    return PackedSequence(data, Tensor._make(batch_sizes), sorted_indices, invert_permutation(sorted_indices))


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, Tensor]:
    """Undo ``pack_padded_sequence``: the padded batch (original order) and the int64 lengths."""
    data, batch_sizes, _, unsorted_indices = sequence
    sizes = batch_sizes.numpy(force=True).astype(np.int64)
    rows = packed_row_index(sizes)
    steps, batch = rows.shape
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"Expected total_length to be at least the length of the longest sequence in input, "
                             f"but got total_length={total_length} and max sequence length being {steps}")
        rows = np.concatenate([rows, np.full((total_length - steps, batch), -1, np.int64)])
        steps = total_length
    if unsorted_indices is not None:
        rows = rows[:, unsorted_indices.numpy(force=True)]
    feature_shape = tuple(data.numpy(force=True).shape[1:])
    count = data.numpy(force=True).shape[0]
    filler = full((1,) + feature_shape, padding_value, dtype=data.dtype)
    extended = shape.cat([data, filler], 0)
    gather = np.where(rows >= 0, rows, count)
    if batch_first:
        gather = gather.T
    padded = shape.reshape(extended[Tensor._make(gather.reshape(-1))], gather.shape + feature_shape)
    lengths = (rows >= 0).sum(0).astype(np.int64)
    return padded, Tensor._make(lengths)


def pad_sequence(sequences: Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack sequences of different lengths (L_i, *) into (T, B, *) (or (B, T, *)), padding them."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    if isinstance(sequences, Tensor):
        sequences = list(shape.unbind(sequences, 0))
    longest = max(seq.numpy(force=True).shape[0] for seq in sequences)
    padded = []
    for seq in sequences:
        dims = seq.numpy(force=True).ndim
        missing = longest - seq.numpy(force=True).shape[0]
        pads = [0, 0] * (dims - 1) + ([missing, 0] if padding_side == "left" else [0, missing])
        padded.append(F.pad(seq, pads, "constant", padding_value))
    return shape.stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths: Any, batch_first: bool = False) -> list[Tensor]:
    """Split a padded batch back into its sequences (inverse of ``pad_sequence``)."""
    if not batch_first:
        padded_sequences = shape.transpose(padded_sequences, 0, 1)
    return [padded_sequences[index][:int(length)] for index, length in enumerate(_int_array(lengths))]


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of (L_i, *) sequences (``pad_sequence`` then ``pack_padded_sequence``)."""
    lengths = [seq.numpy(force=True).shape[0] for seq in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The list of sequences in a ``PackedSequence`` (original order)."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
