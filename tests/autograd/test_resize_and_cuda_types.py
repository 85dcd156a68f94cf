"""``resize_``/``resize_as_`` and the legacy ``cuda.FloatTensor`` types, against torch."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("sizes", [(2, 3), (6,), (2, 2), (1, 1, 2)])
def test_resize_keeps_the_leading_elements_like_torch(sizes: tuple) -> None:
    reference = torch.arange(6.0).view(3, 2)
    tensor = gs.arange(6.0).view(3, 2)
    version = tensor._version
    assert tensor.resize_(*sizes) is tensor
    reference.resize_(*sizes)
    assert tuple(tensor.shape) == tuple(reference.shape)
    kept = min(6, int(np.prod(sizes)))
    np.testing.assert_array_equal(tensor.numpy().reshape(-1)[:kept], reference.numpy().reshape(-1)[:kept])
    assert tensor._version > version


def test_resize_as_then_copy_and_errors() -> None:
    buffer = gs.zeros(3, 3, 4)
    source = gs.arange(12.0).view(3, 4)
    np.testing.assert_array_equal(buffer.resize_as_(source).copy_(source).numpy(), source.numpy())
    with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
        gs.zeros(2, requires_grad=True).resize_(3)
    with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
        torch.zeros(2, requires_grad=True).resize_(3)


def test_cuda_tensor_types_match_nothing_and_cannot_be_made() -> None:
    for name in ("FloatTensor", "DoubleTensor", "LongTensor", "ByteTensor"):
        cuda_type = getattr(gs.cuda, name)
        assert not isinstance(gs.zeros(2), cuda_type)
        assert isinstance(torch.zeros(2), getattr(torch.cuda, name)) is False
        with pytest.raises(TypeError, match="not available. Torch not compiled with CUDA enabled"):
            cuda_type(2)
