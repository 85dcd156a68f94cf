"""The native engine's snapshot copies: one flat buffer per set of same-dtype tensors, rewritten in
place when reused, and read as one tensor by ``joined``."""
from __future__ import annotations

import numpy as np

import gradscope as gs
from gradscope.engines import get_engine


def test_copies_of_one_dtype_share_one_buffer_and_are_rewritten_in_place():
    engine = get_engine("gradscope")
    tensors = [gs.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), gs.tensor(np.float32(7.0)),
               gs.tensor(np.zeros((0, 2), np.float32)), gs.tensor(np.array([8.0, 9.0], np.float32))]
    copies = engine.clone_all(tensors)
    for copy, tensor in zip(copies, tensors):
        assert copy.shape == tensor.shape and np.array_equal(copy.numpy(), tensor.numpy())
        assert not np.shares_memory(copy.numpy(), tensor.numpy())
    joined = engine.joined(copies)
    np.testing.assert_array_equal(joined.numpy(), np.array([0, 1, 2, 3, 4, 5, 7, 8, 9], np.float32))
    with gs.no_grad():
        tensors[0].mul_(-1.0)
        tensors[3].fill_(np.nan)
    again = engine.clone_all(tensors, copies)
    assert all(a is b for a, b in zip(again, copies))
    np.testing.assert_array_equal(copies[0].numpy(), -np.arange(6, dtype=np.float32).reshape(2, 3))
    assert np.isnan(copies[3].numpy()).all() and copies[1].item() == 7.0
    assert np.isnan(engine.squared_norms([engine.joined(copies)])[0])


def test_mixed_dtypes_and_foreign_tensors_are_copied_one_by_one():
    engine = get_engine("gradscope")
    mixed = [gs.tensor(np.ones(3, np.float32)), gs.tensor(np.ones(2, np.float64))]
    copies = engine.clone_all(mixed)
    assert engine.joined(copies) is None
    np.testing.assert_array_equal(copies[1].numpy(), np.ones(2))
    assert engine.joined(mixed) is None  # (not copies: nothing to join)
    flat = engine.clone_all([gs.tensor(np.ones(3, np.float32)), gs.tensor(np.ones(2, np.float32))])
    assert engine.joined(flat[:1]) is None  # (part of a buffer is not all of it)
    # copies that are not views of one buffer are still written one by one
    engine.clone_all(mixed, copies)
    np.testing.assert_array_equal(copies[0].numpy(), np.ones(3, np.float32))


def test_reuse_after_a_dtype_change_copies_with_a_cast():
    engine = get_engine("gradscope")
    tensors = [gs.tensor(np.ones(3, np.float32)), gs.tensor(np.ones(2, np.float32))]
    copies = engine.clone_all(tensors)
    changed = [tensors[0], gs.tensor(np.array([2.5, -1.0], np.float64))]
    engine.clone_all(changed, copies)
    np.testing.assert_array_equal(engine.joined(copies).numpy(), np.array([1, 1, 1, 2.5, -1.0], np.float32))
