"""clip_grad_norm_, clip_grad_value_ and parameter/vector conversion against torch.nn.utils."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn
from gradscope.nn.utils import (clip_grad_norm, clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_,
                                get_total_norm, parameters_to_vector, vector_to_parameters)

torch = pytest.importorskip("torch")

GRADS = [np.array([3.0, -4.0], np.float32), np.array([[0.5, 12.0], [-2.0, 0.0]], np.float32),
         np.array([1e-3, -7.5, 2.25], np.float32)]


def _pair(grads=GRADS, dtype=np.float32):
    ours, theirs = [], []
    for g in grads:
        p = nn.Parameter(gs.tensor(np.ones_like(g, dtype=dtype)))
        p.grad = gs.tensor(g.astype(dtype))
        q = torch.nn.Parameter(torch.ones(g.shape, dtype=getattr(torch, np.dtype(dtype).name)))
        q.grad = torch.from_numpy(g.astype(dtype))
        ours.append(p)
        theirs.append(q)
    return ours, theirs


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, 0.5, float("inf"), "inf", 0.0])
@pytest.mark.parametrize("max_norm", [0.0, 1.0, 5.0, 1e3])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    ours, theirs = _pair()
    total = clip_grad_norm_(ours, max_norm, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert total.shape == () and total.dtype == gs.float32
    np.testing.assert_allclose(total._data, expected.numpy(), rtol=1e-6)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.grad._data, q.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_float64_grads_give_float64_total():
    ours, theirs = _pair(dtype=np.float64)
    total = clip_grad_norm_(ours, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert total.dtype == gs.float64
    np.testing.assert_allclose(total._data, expected.numpy(), rtol=1e-12)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.grad._data, q.grad.numpy(), rtol=1e-12)


def test_grads_are_modified_in_place_even_when_coefficient_is_one():
    ours, _ = _pair()
    grad = ours[0].grad
    version = grad._version
    clip_grad_norm_(ours, 1e6)
    assert ours[0].grad is grad and grad._version == version + 1
    np.testing.assert_array_equal(grad._data, GRADS[0])


def test_none_grads_are_skipped_and_single_tensor_accepted():
    ours, theirs = _pair()
    ours[1].grad = None
    theirs[1].grad = None
    np.testing.assert_allclose(clip_grad_norm_(ours, 2.0)._data, torch.nn.utils.clip_grad_norm_(theirs, 2.0).numpy())
    assert ours[1].grad is None
    single = nn.Parameter(gs.ones(2))
    single.grad = gs.tensor([3.0, 4.0])
    assert float(clip_grad_norm_(single, 1.0)) == 5.0
    np.testing.assert_allclose(single.grad._data, [0.6, 0.8], rtol=1e-5)


def test_no_grads_returns_zero_and_empty_generator_warns():
    p = nn.Parameter(gs.ones(2))
    total = clip_grad_norm_([p], 1.0)
    assert total.dtype == gs.float32 and float(total) == 0.0
    with pytest.warns(UserWarning, match="empty generator"):
        clip_grad_norm_((q for q in []), 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clip_grad_norm_([], 1.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_total(bad):
    grads = [np.array([bad, 1.0], np.float32), np.array([2.0], np.float32)]
    ours, theirs = _pair(grads)
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(ours[1].grad._data, [2.0])
    total = clip_grad_norm_(ours, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    np.testing.assert_array_equal(total._data, expected.numpy())
    for p, q in zip(ours, theirs):
        np.testing.assert_array_equal(p.grad._data, q.grad.numpy())


def test_negative_max_norm_raises_value_error():
    ours, _ = _pair()
    with pytest.raises(ValueError, match="max_norm must be non-negative"):
        clip_grad_norm_(ours, -1.0)
    np.testing.assert_array_equal(ours[0].grad._data, GRADS[0])


def test_get_total_norm_and_clip_grads_with_norm():
    ours, theirs = _pair()
    total = get_total_norm([p.grad for p in ours], 3.0)
    expected = torch.nn.utils.get_total_norm([q.grad for q in theirs], 3.0)
    np.testing.assert_allclose(total._data, expected.numpy(), rtol=1e-6)
    clip_grads_with_norm_(ours, 1.0, total)
    torch.nn.utils.clip_grads_with_norm_(theirs, 1.0, expected)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.grad._data, q.grad.numpy(), rtol=1e-6)


def test_deprecated_clip_grad_norm_warns():
    ours, _ = _pair()
    with pytest.warns(FutureWarning, match="deprecated"):
        clip_grad_norm(ours, 1.0)


@pytest.mark.parametrize("value", [0.0, 0.5, 3.0, 100.0])
def test_clip_grad_value_matches_torch(value):
    grads = GRADS + [np.array([float("nan"), -float("inf"), float("inf")], np.float32)]
    ours, theirs = _pair(grads)
    assert clip_grad_value_(ours, value) is None
    torch.nn.utils.clip_grad_value_(theirs, value)
    for p, q in zip(ours, theirs):
        np.testing.assert_array_equal(p.grad._data, q.grad.numpy())


def test_clipping_inside_training_loop_after_backward():
    gs.manual_seed(0)
    w = nn.Parameter(gs.randn(4, 3))
    x = gs.randn(5, 4)
    loss = ((x @ w) ** 2).sum()
    loss.backward()
    before = math.sqrt(float((w.grad._data.astype(np.float64) ** 2).sum()))
    total = clip_grad_norm_([w], 0.5)
    assert float(total) == pytest.approx(before, rel=1e-6)
    assert float(np.linalg.norm(w.grad._data)) == pytest.approx(0.5, rel=1e-5)


def test_parameters_to_vector_and_back():
    ours = [nn.Parameter(gs.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))), nn.Parameter(gs.ones(2))]
    vec = parameters_to_vector(ours)
    theirs = [torch.nn.Parameter(torch.arange(6.0).reshape(2, 3)), torch.nn.Parameter(torch.ones(2))]
    expected = torch.nn.utils.parameters_to_vector(theirs)
    np.testing.assert_array_equal(vec._data, expected.detach().numpy())
    assert vec.requires_grad and vec.grad_fn is not None
    (vec * gs.arange(8.0)).sum().backward()
    np.testing.assert_array_equal(ours[0].grad._data, np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(ours[1].grad._data, [6.0, 7.0])
    new = gs.arange(10.0, 18.0)
    vector_to_parameters(new, ours)
    np.testing.assert_array_equal(ours[0]._data, np.arange(10.0, 16.0).reshape(2, 3))
    np.testing.assert_array_equal(ours[1]._data, [16.0, 17.0])
    with pytest.raises(TypeError, match="expected gradscope.Tensor"):
        vector_to_parameters(np.zeros(8), ours)
    with pytest.raises(TypeError, match="expected gradscope.Tensor"):
        parameters_to_vector([np.zeros(2)])


def test_lazy_import_from_nn():
    assert nn.utils.clip_grad_norm_ is clip_grad_norm_
    assert nn.utils.parameters_to_vector is parameters_to_vector
