"""Ops real model code calls that were missing, against torch: ``index_copy(_)``, the in-place shape
ops (``t_``, ``transpose_``, ``unsqueeze_``, ``squeeze_``), ``unique``, ``bincount``, ``searchsorted``,
``bucketize``, ``histc`` and ``utils.checkpoint``."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("dim", [0, 1])
def test_index_copy_values_and_gradients(dim: int, dtype: str) -> None:
    base = RNG.standard_normal((4, 5)).astype(dtype)
    index = [3, 0] if dim == 0 else [4, 1]
    source = RNG.standard_normal((2, 5) if dim == 0 else (4, 2)).astype(dtype)
    weights = RNG.standard_normal((4, 5)).astype(dtype)
    results = []
    for engine in (torch, gs):
        x = engine.tensor(base, requires_grad=True)
        s = engine.tensor(source, requires_grad=True)
        out = x.index_copy(dim, engine.tensor(index), s)
        (out * engine.tensor(weights)).sum().backward()
        inplace = engine.tensor(base).index_copy_(dim, engine.tensor(index), engine.tensor(source))
        results.append([out.detach().numpy(), x.grad.numpy(), s.grad.numpy(), inplace.numpy()])
    for want, got in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(IndexError, match="Number of indices"):
        gs.zeros(3, 2).index_copy_(0, gs.tensor([0]), gs.ones(2, 2))


@pytest.mark.parametrize("op,args", [("t_", ()), ("transpose_", (0, 2)), ("unsqueeze_", (1,)), ("squeeze_", (1,)),
                                     ("swapaxes_", (1, 2))])
def test_inplace_shape_ops_change_the_tensor_and_keep_gradients(op: str, args: tuple) -> None:
    data = RNG.standard_normal((3, 1, 4) if op != "t_" else (3, 4))
    results = []
    for engine in (torch, gs):
        leaf = engine.tensor(data, requires_grad=True)
        hidden = leaf * 2
        same = getattr(hidden, op)(*args)
        assert same is hidden
        (hidden * engine.tensor(np.arange(hidden.numel()).reshape(tuple(hidden.shape)).astype(float))).sum().backward()
        plain = engine.tensor(data)
        getattr(plain, op)(*args)
        results.append([tuple(hidden.shape), hidden.detach().numpy(), leaf.grad.numpy(), plain.numpy()])
    assert results[0][0] == results[1][0]
    for want, got in zip(results[0][1:], results[1][1:]):
        np.testing.assert_allclose(got, want)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        getattr(gs.tensor(data, requires_grad=True), op)(*args)


def _same(want: object, got: object) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for w, g in zip(want, got):
            _same(w, g)
        return
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("call", [
    lambda e: e.unique(e.tensor([[3, 1], [3, 2]])),
    lambda e: e.unique(e.tensor([[3, 1], [3, 2]]), return_inverse=True, return_counts=True),
    lambda e: e.unique(e.tensor([[3, 1], [0, 2], [3, 1]]), dim=0, return_counts=True),
    lambda e: e.tensor([2, 0, 2]).unique(return_counts=True),
    lambda e: e.bincount(e.tensor([0, 2, 2])),
    lambda e: e.bincount(e.tensor([0, 2, 2]), weights=e.tensor([0.5, 1.0, 2.0]), minlength=5),
    lambda e: e.searchsorted(e.tensor([0.0, 1.0, 2.0]), e.tensor([0.5, 1.0, 3.0])),
    lambda e: e.searchsorted(e.tensor([[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]), e.tensor([[0.5], [2.0]]), right=True),
    lambda e: e.bucketize(e.tensor([0.0, 1.5, 3.0]), e.tensor([0.0, 1.0, 2.0])),
    lambda e: e.bucketize(e.tensor([1.0]), e.tensor([0.0, 1.0, 2.0]), out_int32=True, right=True),
    lambda e: e.histc(e.tensor([1.0, 2.0, 1.0, 5.0]), bins=4, min=0, max=3),
    lambda e: e.histc(e.tensor([1.0, 2.0, 1.0]), bins=2),
], ids=["unique", "unique-inverse-counts", "unique-dim", "unique-method", "bincount", "bincount-weights",
        "searchsorted", "searchsorted-rows", "bucketize", "bucketize-int32-right", "histc", "histc-range"])
def test_counting_and_bucketing_match_torch(call: object) -> None:
    _same(call(torch), call(gs))


def test_checkpoint_returns_the_same_values_and_gradients() -> None:
    import gradscope.utils.checkpoint as gs_checkpoint
    import torch.utils.checkpoint as torch_checkpoint

    data = RNG.standard_normal((2, 3))
    results = []
    for engine, module in ((torch, torch_checkpoint), (gs, gs_checkpoint)):
        engine.manual_seed(0)
        layer = engine.nn.Linear(3, 3).double()
        with engine.no_grad():
            layer.weight.copy_(engine.tensor(np.arange(9.0).reshape(3, 3) / 10))
            layer.bias.fill_(-0.2)
        x = engine.tensor(data, requires_grad=True)
        out = module.checkpoint(lambda t: layer(t).tanh(), x, use_reentrant=False)
        out = module.checkpoint_sequential(engine.nn.Sequential(engine.nn.Tanh(), engine.nn.ReLU()), 2, out,
                                           use_reentrant=False)
        out.sum().backward()
        results.append([out.detach().numpy(), x.grad.numpy(), layer.weight.grad.numpy()])
    for want, got in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_dense_stand_ins_for_sparse_tensors_and_mH() -> None:
    data = np.array([[0.0, 2.0, 0.0], [1.5, 0.0, -1.0]])
    results = []
    for engine in (torch, gs):
        dense = engine.tensor(data, requires_grad=True)
        sparse = dense.to_sparse().coalesce()
        values = sparse.values()
        (values * engine.tensor([1.0, 2.0, 3.0], dtype=engine.float64)).sum().backward()
        product = engine.sparse.mm(engine.tensor(data).to_sparse(), engine.ones(3, 2, dtype=engine.float64))
        results.append([sparse.indices().numpy(), values.detach().numpy(), dense.grad.numpy(), product.numpy(),
                        engine.tensor(data).mH.numpy()])
    for want, got in zip(*results):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_linspace_is_bit_identical_to_torch(dtype: str) -> None:
    """Sampling grids (affine_grid) land on pixel edges exactly where torch's do only if the
    coordinates agree to the last bit."""
    for steps in list(range(0, 40)) + [224, 1001]:
        for start, end in ((-1, 1), (0, 10), (0.5, -3.2)):
            want = torch.linspace(start, end, steps, dtype=getattr(torch, dtype)).numpy()
            got = gs.linspace(start, end, steps, dtype=getattr(gs, dtype)).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{start}..{end} in {steps} steps")


@pytest.mark.parametrize("call", [
    lambda e, x: x.sum(1, keepdims=True), lambda e, x: e.sum(x, axis=0), lambda e, x: x.mean(axis=1, keepdims=True),
    lambda e, x: x.var(0, keepdims=True, unbiased=True), lambda e, x: x.amax(axis=1), lambda e, x: x.max(axis=0)[0],
    lambda e, x: e.cat([x, x], axis=1), lambda e, x: x.cumsum(axis=1), lambda e, x: e.softmax(x, axis=1),
    lambda e, x: x.logsumexp(axis=1, keepdims=True), lambda e, x: x.argmax(axis=1, keepdims=True),
    lambda e, x: x.unsqueeze(axis=0).squeeze(axis=0), lambda e, x: e.stack([x, x], axis=2),
], ids=["sum-keepdims", "sum-axis", "mean", "var", "amax", "max", "cat", "cumsum", "softmax", "logsumexp", "argmax",
        "squeeze", "stack"])
def test_numpy_style_axis_and_keepdims_keywords_work_as_in_torch(call: object) -> None:
    data = RNG.standard_normal((3, 4))
    np.testing.assert_allclose(call(gs, gs.tensor(data)).numpy(), call(torch, torch.tensor(data)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_erfinv_erfc_values_and_gradients_match_torch(dtype: str) -> None:
    data = np.array([-0.999, -0.9, -0.5, -1e-3, 0.0, 0.3, 0.7, 0.99, 0.999999]).astype(dtype)
    results = []
    for engine in (torch, gs):
        x = engine.tensor(data, requires_grad=True)
        (engine.erfinv(x) * 2 + engine.erfc(x * 3)).sum().backward()
        edges = engine.erfinv(engine.tensor([-1.0, 1.0, 1.5])).numpy()
        results.append([engine.erfinv(x).detach().numpy(), engine.special.erfc(x).detach().numpy(), x.grad.numpy(), edges])
    tolerance = dict(rtol=2e-6, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    for want, got in zip(*results):
        np.testing.assert_allclose(got, want, **tolerance)


def test_truncated_normal_written_with_erfinv_matches_torch() -> None:
    """The ``_no_grad_trunc_normal_`` many ViT code bases carry: uniform_, erfinv_, mul_, add_, clamp_."""
    import math

    values = []
    for engine in (torch, gs):
        tensor = engine.tensor(np.linspace(0.05, 0.95, 12).reshape(3, 4))
        with engine.no_grad():
            low = (1.0 + math.erf((-2.0 - 0.0) / 0.02 / math.sqrt(2.0))) / 2.0
            high = (1.0 + math.erf((2.0 - 0.0) / 0.02 / math.sqrt(2.0))) / 2.0
            tensor.mul_(2 * high - 1 - (2 * low - 1)).add_(2 * low - 1)
            tensor.erfinv_()
            tensor.mul_(0.02 * math.sqrt(2.0))
            tensor.add_(0.0)
            tensor.clamp_(min=-2.0, max=2.0)
        values.append(tensor.numpy())
    np.testing.assert_allclose(values[1], values[0], rtol=1e-12)


@pytest.mark.parametrize("call", [
    lambda e, x: e.nansum(x), lambda e, x: x.nansum(dim=1, keepdim=True), lambda e, x: e.nanmean(x, dim=0),
    lambda e, x: e.diff(x, dim=1), lambda e, x: e.diff(x, n=2, dim=1, prepend=x[:, :1]),
    lambda e, x: x.ravel(), lambda e, x: e.take_along_dim(x, e.tensor([[2], [0], [1]]), dim=1),
    lambda e, x: e.take_along_dim(x, e.tensor([4, 0])), lambda e, x: x.clone().cumsum_(1),
    lambda e, x: x.clone().cumprod_(0)],
    ids=["nansum", "nansum-dim", "nanmean", "diff", "diff-n2-prepend", "ravel", "take_along_dim",
         "take_along_dim-flat", "cumsum_", "cumprod_"])
def test_reductions_and_reshapes_match_torch(call: object) -> None:
    data = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 7.0], [0.5, 2.0, np.nan]])
    finite = np.nan_to_num(data, nan=1.5)
    source = data if "nan" in str(call.__code__.co_names) else finite
    results = []
    for engine in (torch, gs):
        x = engine.tensor(source, requires_grad=True)
        out = call(engine, x)
        if out.requires_grad:
            (out * engine.tensor(np.arange(out.numel()).reshape(tuple(out.shape)).astype(float))).sum().backward()
        results.append([out.detach().numpy(), None if x.grad is None else x.grad.numpy()])
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-12)
    if results[0][1] is not None:
        np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-12)


def test_byte_char_and_is_cpu_like_torch() -> None:
    for name in ("byte", "char"):
        assert str(getattr(gs.tensor([1.7, -2.0]), name)().dtype).split(".")[-1] == \
            str(getattr(torch.tensor([1.7, -2.0]), name)().dtype).split(".")[-1]
    assert gs.ones(1).is_cpu is torch.ones(1).is_cpu is True


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_matches_torch(accumulate: bool) -> None:
    base = np.arange(12.0).reshape(4, 3)
    columns = [1, 1, 1] if accumulate else [1, 0, 2]  # repeated positions are defined only when accumulating
    results = []
    for engine in (torch, gs):
        x = engine.tensor(base, requires_grad=True)
        values = engine.tensor([10.0, 20.0, 30.0], dtype=engine.float64, requires_grad=True)
        out = x.index_put((engine.tensor([0, 2, 0]), engine.tensor(columns)), values, accumulate=accumulate)
        (out * engine.tensor(np.arange(12.0).reshape(4, 3))).sum().backward()
        rows = engine.zeros(4, 3)
        rows.index_put_((engine.tensor([1, 3]),), engine.tensor([1.0, 2.0, 3.0]), accumulate=accumulate)
        results.append([out.detach().numpy(), x.grad.numpy(), values.grad.numpy(), rows.numpy()])
    for want, got in zip(*results):
        np.testing.assert_allclose(got, want)
    with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
        gs.zeros(2, dtype=gs.float64).index_put_((gs.tensor([0]),), gs.tensor([1.0]))


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_scatter_reduce_matches_torch(reduce: str, include_self: bool) -> None:
    rng = np.random.default_rng(0)
    base, source = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    index = np.array([[0, 1, 0], [2, 1, 0], [0, 3, 3], [2, 2, 0], [0, 0, 1]])
    source[3, 0] = source[1, 0]  # two values tie for the maximum/minimum at (2, 0)
    results = []
    for engine in (torch, gs):
        x = engine.tensor(base, requires_grad=True)
        src = engine.tensor(source, requires_grad=True)
        out = x.scatter_reduce(0, engine.tensor(index), src, reduce=reduce, include_self=include_self)
        (out * engine.tensor(np.arange(12.0).reshape(4, 3))).sum().backward()
        partial = engine.scatter_reduce(engine.tensor(base), 1, engine.tensor(index[:4, :2] % 3), engine.tensor(source),
                                        reduce=reduce, include_self=include_self)
        results.append([out.detach().numpy(), x.grad.numpy(), src.grad.numpy(), partial.numpy()])
    for want, got in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(NotImplementedError, match="prod"):
        gs.zeros(2).scatter_reduce(0, gs.tensor([0]), gs.ones(1), reduce="prod")
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 1 with size 3"):
        gs.zeros(2, 3).scatter_reduce(1, gs.tensor([[3]]), gs.ones(1, 1), reduce="sum")
