"""``gradscope.nn.functional`` against ``torch.nn.functional``: signatures, the compositions written in
functional.py (linear's node structure, dropout, in-place activations, softmax family, distances,
attention), and gradient checks. The fused ops themselves are covered by tests/ops/test_nn_ops.py.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs
from gradscope.nn import functional as F


def rand(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def both(fn: Callable, *arrays: np.ndarray, grad: tuple = (), nonleaf: bool = False) -> None:
    """Run ``fn(T, *tensors)`` on gradscope and torch; compare values and gradients of ``grad`` inputs.

    With ``nonleaf`` the differentiable inputs are passed as ``leaf * 1`` (for in-place ops).
    """
    torch = pytest.importorskip("torch")
    results = []
    for T in (gs, torch):
        leaves = [T.tensor(a, requires_grad=i in grad) for i, a in enumerate(arrays)]
        args = [t * 1 if nonleaf and i in grad else t for i, t in enumerate(leaves)]
        out = fn(T, *args)
        values = out.detach().numpy().copy()
        if grad:
            upstream = np.random.default_rng(7).standard_normal(values.shape).astype(values.dtype)
            out.backward(T.tensor(upstream))
        results.append((values, [leaves[i].grad.numpy() for i in grad]))
    (ours, our_grads), (theirs, their_grads) = results
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    for a, b in zip(our_grads, their_grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_every_name_has_torchs_parameter_names() -> None:
    torch = pytest.importorskip("torch")
    checked = 0
    for name in F.__all__:
        theirs = getattr(torch.nn.functional, name)
        try:
            their_params = list(inspect.signature(theirs).parameters)
        except (TypeError, ValueError):
            continue
        if their_params == ["args", "kwargs"]:
            continue
        assert list(inspect.signature(getattr(F, name)).parameters) == their_params, name
        checked += 1
    assert checked >= 35


def test_nn_functional_is_reachable_from_nn() -> None:
    assert gs.nn.functional is F


# ---------------------------------------------------------------- linear
def test_linear_2d_with_bias_has_torchs_node_structure() -> None:
    x = gs.randn(3, 4, requires_grad=True)
    w = gs.nn.Parameter(gs.randn(2, 4))
    b = gs.nn.Parameter(gs.randn(2))
    out = F.linear(x, w, b)
    assert out.grad_fn.name() == "AddmmBackward0"
    names = [n.name() for n, _ in out.grad_fn.next_functions]
    assert names == ["torch::autograd::AccumulateGrad", "torch::autograd::AccumulateGrad", "TBackward0"]
    assert out.grad_fn.next_functions[0][0].variable is b
    assert out.grad_fn.next_functions[1][0].variable is x
    assert out.grad_fn.next_functions[2][0].next_functions[0][0].variable is w


def test_linear_without_bias_is_mm_of_transposed_weight() -> None:
    out = F.linear(gs.randn(3, 4), gs.randn(2, 4, requires_grad=True))
    assert out.grad_fn.name() == "MmBackward0"
    assert out.grad_fn.next_functions[1][0].name() == "TBackward0"


def test_linear_parameter_accumulation_order_is_bias_input_weight() -> None:
    order = []
    x = gs.randn(2, 3, requires_grad=True)
    w = gs.randn(4, 3, requires_grad=True)
    b = gs.randn(4, requires_grad=True)
    for name, t in (("x", x), ("w", w), ("b", b)):
        t.register_hook(lambda g, name=name: order.append(name))
    F.linear(x, w, b).sum().backward()
    assert order == ["b", "x", "w"]


def test_linear_weight_grad_is_contiguous_owned_and_accumulates() -> None:
    x = gs.randn(5, 3)
    w = gs.randn(4, 3, requires_grad=True)
    b = gs.randn(4, requires_grad=True)
    F.linear(x, w, b).sum().backward()
    first = w.grad._data.copy()
    assert w.grad._data.flags.c_contiguous and w.grad._data.base is None and b.grad._data.base is None
    F.linear(x, w, b).sum().backward()
    np.testing.assert_allclose(w.grad._data, 2 * first, rtol=1e-6)


def test_linear_weight_transpose_node_hooks_see_and_replace_the_gradient() -> None:
    x = gs.randn(5, 3)
    w = gs.randn(4, 3, requires_grad=True)
    out = F.linear(x, w, gs.zeros(4))
    seen = []
    t_node = out.grad_fn.next_functions[2][0]
    t_node.register_prehook(lambda go: (seen.append(go[0].shape), (go[0] * 0,))[1])
    out.sum().backward()
    assert seen == [(3, 4)]
    np.testing.assert_array_equal(w.grad._data, 0)


@pytest.mark.parametrize("shape", [(4,), (3, 4), (2, 3, 4), (2, 1, 3, 4)])
def test_linear_shapes_match_torch(shape: tuple) -> None:
    both(lambda T, x, w, b: T.nn.functional.linear(x, w, b), rand(*shape), rand(5, 4, seed=1), rand(5, seed=2),
         grad=(0, 1, 2))


def test_bilinear_matches_torch() -> None:
    both(lambda T, x, y, w, b: T.nn.functional.bilinear(x, y, w, b), rand(2, 3, 4), rand(2, 3, 2, seed=1),
         rand(5, 4, 2, seed=2), rand(5, seed=3), grad=(0, 1, 2, 3))


def test_linear_and_bilinear_gradcheck() -> None:
    x, w, b = (gs.tensor(rand(*s, seed=i).astype(np.float64), requires_grad=True)
               for i, s in enumerate([(2, 3, 4), (2, 4), (2,)]))
    assert gs.autograd.gradcheck(F.linear, (x, w, b))
    y, w2 = (gs.tensor(rand(*s, seed=i).astype(np.float64), requires_grad=True)
             for i, s in enumerate([(2, 3, 2), (2, 4, 2)]))
    assert gs.autograd.gradcheck(F.bilinear, (x, y, w2, b))


# ---------------------------------------------------------------- activations
@pytest.mark.parametrize("name, kwargs", [
    ("relu", {}), ("relu6", {}), ("sigmoid", {}), ("tanh", {}), ("softsign", {}), ("tanhshrink", {}),
    ("silu", {}), ("mish", {}), ("logsigmoid", {}), ("hardswish", {}), ("hardsigmoid", {}),
    ("elu", {"alpha": 0.3}), ("selu", {}), ("celu", {"alpha": 2.0}), ("leaky_relu", {"negative_slope": 0.3}),
    ("softplus", {"beta": 0.5, "threshold": 2.0}), ("hardtanh", {"min_val": -0.5, "max_val": 2.0}),
    ("gelu", {"approximate": "tanh"}), ("threshold", {"threshold": 0.3, "value": -1.0}),
])
def test_activation_matches_torch(name: str, kwargs: dict) -> None:
    both(lambda T, x: getattr(T.nn.functional, name)(x, **kwargs), rand(4, 6, scale=3), grad=(0,))


@pytest.mark.parametrize("name, kwargs", [
    ("relu", {}), ("relu6", {}), ("elu", {"alpha": 0.5}), ("selu", {}), ("celu", {"alpha": 0.5}),
    ("leaky_relu", {"negative_slope": 0.2}), ("hardtanh", {}), ("silu", {}), ("mish", {}), ("hardswish", {}),
    ("hardsigmoid", {}), ("threshold", {"threshold": 0.1, "value": 2.0}),
])
def test_inplace_activation_matches_torch(name: str, kwargs: dict) -> None:
    def run(T: Any, x: Any) -> Any:
        out = getattr(T.nn.functional, name)(x, inplace=True, **kwargs)
        assert out is x
        return out

    both(run, rand(3, 5, scale=3), grad=(0,), nonleaf=True)


def test_inplace_relu_on_leaf_requiring_grad_raises() -> None:
    with pytest.raises(RuntimeError, match="leaf Variable"):
        F.relu(gs.randn(3, requires_grad=True), inplace=True)


def test_inplace_leaky_relu_with_negative_slope_raises_like_torch() -> None:
    with pytest.raises(RuntimeError, match="negative slope"):
        F.leaky_relu(gs.randn(3, requires_grad=True) * 1, -0.1, inplace=True)


def test_inplace_activation_without_grad_writes_input() -> None:
    x = gs.tensor([-1.0, 0.5, 3.0])
    F.hardtanh(x, inplace=True)
    np.testing.assert_array_equal(x._data, [-1.0, 0.5, 1.0])
    assert x._version == 1


def test_inplace_nodes_are_torchs_backward1() -> None:
    x = gs.randn(3, requires_grad=True) * 1
    assert F.elu(x, inplace=True).grad_fn.name() == "EluBackward1"
    y = gs.randn(3, requires_grad=True) * 1
    assert F.leaky_relu(y, inplace=True).grad_fn.name() == "LeakyReluBackward1"
    z = gs.randn(3, requires_grad=True) * 1
    assert F.hardtanh(z, inplace=True).grad_fn.name() == "HardtanhBackward1"


@pytest.mark.parametrize("name, call", [
    ("softmax", lambda T, x: T.nn.functional.softmax(x, dim=1)),
    ("log_softmax", lambda T, x: T.nn.functional.log_softmax(x, dim=-1)),
    ("softmin", lambda T, x: T.nn.functional.softmin(x, dim=0)),
    ("softmax_dtype", lambda T, x: T.nn.functional.softmax(x, dim=1, dtype=T.float64)),
    ("glu", lambda T, x: T.nn.functional.glu(x, dim=1)),
    ("normalize", lambda T, x: T.nn.functional.normalize(x, p=2.0, dim=1)),
    ("normalize_p1", lambda T, x: T.nn.functional.normalize(x, p=1.0, dim=0)),
])
def test_softmax_family_and_normalize_match_torch(name: str, call: Callable) -> None:
    both(call, rand(3, 4, 2), grad=(0,))


def test_prelu_matches_torch() -> None:
    both(lambda T, x, w: T.nn.functional.prelu(x, w), rand(2, 3, 4), np.array([0.1, 0.2, 0.3], np.float32),
         grad=(0, 1))
    both(lambda T, x, w: T.nn.functional.prelu(x, w), rand(2, 3), np.array([0.25], np.float32), grad=(0, 1))


def test_distances_match_torch() -> None:
    both(lambda T, a, b: T.nn.functional.cosine_similarity(a, b, dim=1), rand(3, 4), rand(3, 4, seed=1),
         grad=(0, 1))
    both(lambda T, a, b: T.nn.functional.cosine_similarity(a, b, dim=-1), rand(2, 3, 4), rand(1, 4, seed=1),
         grad=(0, 1))
    both(lambda T, a, b: T.nn.functional.pairwise_distance(a, b), rand(3, 4), rand(3, 4, seed=1), grad=(0, 1))
    both(lambda T, a, b: T.nn.functional.pairwise_distance(a, b, p=1.0, keepdim=True), rand(3, 4),
         rand(3, 4, seed=1), grad=(0, 1))


def test_activation_gradcheck_float64() -> None:
    x = gs.tensor(rand(3, 4, scale=2).astype(np.float64), requires_grad=True)
    for fn in (F.softsign, F.tanhshrink, lambda t: F.glu(t, 1), lambda t: F.normalize(t, dim=0),
               lambda t: F.softmin(t, 1), lambda t: F.cosine_similarity(t, t * t, dim=1)):
        assert gs.autograd.gradcheck(fn, (x,))


# ---------------------------------------------------------------- attention
@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"scale": 0.3}])
def test_scaled_dot_product_attention_matches_torch(kwargs: dict) -> None:
    both(lambda T, q, k, v: T.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs),
         rand(2, 3, 4, 5), rand(2, 3, 4, 5, seed=1), rand(2, 3, 4, 6, seed=2), grad=(0, 1, 2))


def test_scaled_dot_product_attention_masks_match_torch() -> None:
    keep = np.tril(np.ones((4, 4), dtype=bool))
    bias = rand(4, 4, seed=5)
    torch = pytest.importorskip("torch")
    for mask in (keep, bias):
        both(lambda T, q, k, v: T.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=T.tensor(mask) if T is gs else torch.tensor(mask)),
            rand(1, 4, 3), rand(1, 4, 3, seed=1), rand(1, 4, 2, seed=2), grad=(0, 1, 2))


# ---------------------------------------------------------------- dropout
def test_dropout_zeroes_with_probability_p_and_scales_survivors() -> None:
    gs.manual_seed(0)
    x = gs.ones(200, 200, requires_grad=True)
    out = F.dropout(x, 0.3)
    kept = out._data != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(out._data[kept], 1 / 0.7, rtol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(x.grad._data, np.where(kept, 1 / 0.7, 0), rtol=1e-6)
    assert out.grad_fn.name() == "MulBackward0"


def test_dropout_is_reproducible_with_manual_seed() -> None:
    gs.manual_seed(3)
    first = F.dropout(gs.ones(50))._data
    gs.manual_seed(3)
    np.testing.assert_array_equal(first, F.dropout(gs.ones(50))._data)


def test_dropout_identity_cases_return_the_input() -> None:
    x = gs.randn(4, requires_grad=True)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    out = F.dropout(x, 1.0)
    np.testing.assert_array_equal(out._data, 0)
    assert out.requires_grad


def test_dropout_rejects_bad_probability() -> None:
    with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
        F.dropout(gs.ones(2), 1.5)


def test_dropout_inplace_modifies_input_and_backpropagates() -> None:
    gs.manual_seed(1)
    leaf = gs.ones(100, requires_grad=True)
    x = leaf * 1
    out = F.dropout(x, 0.5, inplace=True)
    assert out is x
    out.sum().backward()
    np.testing.assert_array_equal(leaf.grad._data, out._data)


@pytest.mark.parametrize("fn, shape, mask_axes", [(F.dropout2d, (4, 6, 3, 3), (2, 3)), (F.dropout1d, (4, 6, 5), (2,))])
def test_channel_dropout_zeroes_whole_channels(fn: Callable, shape: tuple, mask_axes: tuple) -> None:
    gs.manual_seed(2)
    out = fn(gs.ones(*shape), 0.5)._data
    per_channel = out.max(axis=mask_axes) == out.min(axis=mask_axes)
    assert per_channel.all() and 0 < (out == 0).mean() < 1


# ---------------------------------------------------------------- one_hot, pooling wrappers
def test_one_hot_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    idx = np.array([[0, 2], [1, 3]])
    np.testing.assert_array_equal(F.one_hot(gs.tensor(idx))._data, torch.nn.functional.one_hot(torch.tensor(idx)))
    ours = F.one_hot(gs.tensor(idx), num_classes=6)
    assert ours.dtype == gs.int64 and ours.shape == (2, 2, 6)
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        F.one_hot(gs.tensor([3]), 2)


def test_max_pool1d_returns_indices_like_torch() -> None:
    torch = pytest.importorskip("torch")
    x = rand(2, 3, 9)
    out, idx = F.max_pool1d(gs.tensor(x), 3, 2, 1, return_indices=True)
    ref, ref_idx = torch.nn.functional.max_pool1d(torch.tensor(x), 3, 2, 1, return_indices=True)
    np.testing.assert_allclose(out._data, ref.numpy())
    np.testing.assert_array_equal(idx._data, ref_idx.numpy())


def test_pad_value_is_rejected_for_non_constant_modes() -> None:
    with pytest.raises(ValueError, match="doesn't take in value"):
        F.pad(gs.zeros(1, 3, 3), (1, 1), mode="reflect", value=2.0)
