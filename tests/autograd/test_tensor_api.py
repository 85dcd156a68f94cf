"""The Tensor API model code relies on, checked against PyTorch: ``.data``, ``new_*``, legacy
constructors, in-place ops (with autograd), devices, default dtype and the CPU-only modules."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

BACKENDS = [pytest.param(gs, id="gradscope"), pytest.param(torch, id="torch")]


def _np(t) -> np.ndarray:
    return np.asarray(t.detach().numpy())


# ---------------------------------------------------------------- .data
@pytest.mark.parametrize("T", BACKENDS)
def test_data_is_a_tensor_sharing_storage_without_history(T) -> None:
    p = T.ones(3, requires_grad=True)
    view = p.data
    assert isinstance(view, T.Tensor)
    assert not view.requires_grad and view.grad_fn is None
    view.mul_(2)
    np.testing.assert_array_equal(_np(p), [2.0, 2.0, 2.0])
    assert p._version == 0  # writes through .data are invisible to autograd


@pytest.mark.parametrize("T", BACKENDS)
def test_sgd_style_updates_through_data(T) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        p = T.nn.Parameter(T.tensor([1.0, 2.0, 3.0]))
        (p * p).sum().backward()
        p.data.add_(-0.1, p.grad)
        p.data.add_(p.grad, alpha=-0.1)
        p.data.sub_(0.5, p.grad)
    np.testing.assert_allclose(_np(p), [1.0 - 0.4 - 1.0, 2.0 - 0.8 - 2.0, 3.0 - 1.2 - 3.0], rtol=1e-6)


@pytest.mark.parametrize("T", BACKENDS)
def test_data_copy_normal_and_assignment(T) -> None:
    p = T.nn.Parameter(T.zeros(2, 3))
    p.data.copy_(T.ones(2, 3))
    np.testing.assert_array_equal(_np(p), np.ones((2, 3)))
    p.data.normal_(0, 0.02)
    assert 0 < float(p.detach().abs().max()) < 0.2 and len(set(_np(p).ravel().tolist())) == 6
    p.data.uniform_(-1, 1)
    assert float(p.detach().abs().max()) <= 1 and len(set(_np(p).ravel().tolist())) == 6
    p.data.fill_(5.0)
    np.testing.assert_array_equal(_np(p), np.full((2, 3), 5.0))
    p.data = T.arange(4.0)
    assert tuple(p.shape) == (4,) and p.requires_grad
    with pytest.raises(TypeError, match="Variable data has to be a tensor"):
        p.data = np.zeros(4)
    with pytest.raises(RuntimeError, match="floating point"):
        p.data = T.arange(4)


@pytest.mark.parametrize("T", BACKENDS)
def test_data_update_keeps_gradient_of_later_step_correct(T) -> None:
    w = T.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    x = T.tensor([[1.0, 2.0]])
    for _ in range(3):
        loss = ((x @ w) ** 2).sum()
        loss.backward()
        w.data -= 0.01 * w.grad.data
        w.grad.data.zero_()
    expected = [[0.5, -1.0], [2.0, 0.25]]
    assert not np.allclose(_np(w), expected)


def test_data_gives_the_same_values_as_torch_over_a_training_loop() -> None:
    rng = np.random.default_rng(0)
    w0, x0 = rng.standard_normal((4, 3)), rng.standard_normal((5, 4))
    results = []
    for T in (gs, torch):
        w = T.tensor(w0, requires_grad=True)
        x = T.tensor(x0)
        for _ in range(4):
            loss = (x @ w).tanh().pow(2).mean()
            loss.backward()
            w.data.add_(w.grad, alpha=-0.5)
            w.grad.zero_()
        results.append(_np(w))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-10)


# ---------------------------------------------------------------- constructors
@pytest.mark.parametrize("T", BACKENDS)
def test_new_constructors_follow_the_source_dtype(T) -> None:
    x = T.ones(2, dtype=T.float64)
    assert x.new_zeros(3).dtype == T.float64 and tuple(x.new_zeros((2, 3)).shape) == (2, 3)
    assert tuple(x.new_ones(2, 3).shape) == (2, 3)
    assert x.new_empty((4,)).dtype == T.float64
    np.testing.assert_array_equal(_np(x.new_full((2,), 7)), [7.0, 7.0])
    assert x.new_tensor([1, 2]).dtype == T.float64
    assert x.new_zeros(2, dtype=T.long).dtype == T.int64
    assert T.ones(2, dtype=T.long).type_as(x).dtype == T.float64


@pytest.mark.parametrize("T", BACKENDS)
def test_legacy_constructors(T) -> None:
    assert tuple(T.Tensor(2, 3).shape) == (2, 3) and T.Tensor(2, 3).dtype == T.float32
    np.testing.assert_array_equal(_np(T.Tensor([1, 2])), [1.0, 2.0])
    assert T.Tensor([1, 2]).dtype == T.float32
    assert tuple(T.Tensor().shape) == (0,)
    assert T.FloatTensor([1, 2]).dtype == T.float32
    assert T.LongTensor([1, 2]).dtype == T.int64
    assert tuple(T.FloatTensor(3).shape) == (3,)
    assert T.ones(2).type(T.LongTensor).dtype == T.int64
    assert isinstance(T.ones(2), T.FloatTensor) and not isinstance(T.ones(2), T.LongTensor)
    assert T.ones(2).type().endswith("FloatTensor")


@pytest.mark.parametrize("T", BACKENDS)
def test_factories_take_size_and_device_keywords(T) -> None:
    assert tuple(T.zeros(size=(2, 3)).shape) == (2, 3)
    assert tuple(T.ones(size=[4]).shape) == (4,)
    assert tuple(T.empty(size=(1, 2)).shape) == (1, 2)
    assert tuple(T.randn(size=(3,)).shape) == (3,)
    assert tuple(T.rand(2, 2, device="cpu").shape) == (2, 2)
    assert T.zeros(2, device=T.device("cpu")).device == T.device("cpu")
    assert T.arange(start=0, end=6, step=2).tolist() == [0, 2, 4]
    np.testing.assert_allclose(_np(T.linspace(start=0, end=1, steps=3)), [0.0, 0.5, 1.0])
    assert T.full_like(T.zeros(2), 3).tolist() == [3.0, 3.0]
    assert T.zeros_like(T.zeros(2), dtype=T.long).dtype == T.int64
    assert T.tensor([1.0], device="cpu").device.type == "cpu"


def test_factories_reject_other_devices() -> None:
    with pytest.raises(RuntimeError, match="CPU only"):
        gs.zeros(2, device="cuda")
    with pytest.raises(RuntimeError, match="CPU only"):
        gs.ones(2).to("cuda:0")
    with pytest.raises(RuntimeError, match="CPU only"):
        gs.ones(2).cuda()


def test_default_dtype_affects_factories() -> None:
    try:
        gs.set_default_dtype(gs.float64)
        assert gs.get_default_dtype() == gs.float64
        assert gs.zeros(2).dtype == gs.float64
        assert gs.tensor([1.5]).dtype == gs.float64
        assert gs.randn(2).dtype == gs.float64
        assert gs.arange(0.0, 1.0, 0.5).dtype == gs.float64
        assert gs.Tensor(2).dtype == gs.float64
        assert gs.finfo().bits == 64
        with pytest.raises(TypeError, match="floating-point"):
            gs.set_default_dtype(gs.int64)
    finally:
        gs.set_default_dtype(gs.float32)
    assert gs.zeros(2).dtype == gs.float32


# ---------------------------------------------------------------- devices and CPU-only modules
@pytest.mark.parametrize("T", BACKENDS)
def test_device_object(T) -> None:
    d = T.device("cpu")
    assert d.type == "cpu" and d.index is None and str(d) == "cpu"
    assert T.ones(1).device == d and T.ones(1).device != "cpu" and str(T.ones(1).device) == "cpu"
    c = T.device("cuda:1")
    assert (c.type, c.index, str(c)) == ("cuda", 1, "cuda:1")
    assert T.device("cuda", 0) == T.device("cuda:0")
    assert repr(T.device("cpu")) == "device(type='cpu')"
    x = T.ones(2)
    assert not x.is_cuda and x.to(d) is x and x.cpu() is x
    assert x.to("cpu", T.float64).dtype == T.float64
    assert x.to(T.ones(1, dtype=T.float64)).dtype == T.float64
    assert x.to(device="cpu", dtype=T.float64).dtype == T.float64
    assert x.to_dense() is x


def test_cuda_and_backends_say_unavailable() -> None:
    assert gs.cuda.is_available() is False and gs.cuda.device_count() == 0
    gs.cuda.manual_seed(0)
    gs.cuda.manual_seed_all(0)
    assert gs.backends.mps.is_available() is False
    assert gs.backends.cudnn.is_available() is False
    import gradscope.backends.cudnn as cudnn

    cudnn.deterministic = True
    assert gs.backends.cudnn.deterministic is True
    cudnn.deterministic = False
    assert not gs.ones(1).is_xpu and not gs.ones(1).is_mps
    with pytest.raises(RuntimeError, match="CPU only"):
        gs.cuda.current_device()


def test_manual_seed_returns_the_generator_and_reproduces() -> None:
    generator = gs.manual_seed(3)
    assert isinstance(generator, gs.Generator) and generator.initial_seed() == 3
    first = gs.randn(4).tolist()
    gs.manual_seed(3)
    assert gs.randn(4).tolist() == first


def test_dense_fallbacks_for_sparse_calls() -> None:
    indices = [[0, 1, 1], [2, 0, 2]]
    values = [3.0, 4.0, 5.0]
    expected = torch.sparse_coo_tensor(indices, values, (2, 3)).to_dense().numpy()
    dense = gs.sparse_coo_tensor(indices, values, (2, 3))
    np.testing.assert_array_equal(dense.numpy(), expected)
    legacy = gs.sparse.FloatTensor(gs.tensor(indices), gs.tensor(values), (2, 3))
    np.testing.assert_array_equal(legacy.numpy(), expected)
    h = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    g_h = gs.tensor(h, requires_grad=True)
    t_h = torch.tensor(h, requires_grad=True)
    gs.spmm(dense, g_h).sum().backward()
    torch.spmm(torch.sparse_coo_tensor(indices, values, (2, 3)), t_h).sum().backward()
    np.testing.assert_array_equal(g_h.grad.numpy(), t_h.grad.numpy())
    np.testing.assert_array_equal(gs.sparse.mm(dense, g_h).detach().numpy(),
                                  torch.sparse.mm(torch.tensor(expected), t_h).detach().numpy())


def test_variable_is_a_tensor() -> None:
    from gradscope.autograd import Variable

    x = gs.ones(2)
    v = Variable(x, requires_grad=True)
    assert v.requires_grad and not x.requires_grad and v.is_leaf
    assert Variable(x) is x and isinstance(x, Variable)


@pytest.mark.parametrize("T", BACKENDS)
def test_dtype_limits(T) -> None:
    assert T.finfo(T.float32).eps == pytest.approx(np.finfo(np.float32).eps)
    assert T.finfo(T.float16).max == pytest.approx(65504.0)
    assert T.finfo(T.float32).min == pytest.approx(float(np.finfo(np.float32).min))
    assert T.iinfo(T.int64).max == 2 ** 63 - 1


# ---------------------------------------------------------------- in-place ops
INPLACE = [
    ("abs_", lambda x: x.abs_()),
    ("sqrt_", lambda x: x.abs_().sqrt_()),
    ("exp_", lambda x: x.exp_()),
    ("log_", lambda x: x.abs_().log_()),
    ("neg_", lambda x: x.neg_()),
    ("clamp_", lambda x: x.clamp_(-0.5, 0.5)),
    ("clamp_min_", lambda x: x.clamp_min_(0.1)),
    ("clamp_max_", lambda x: x.clamp_max_(0.1)),
    ("mul_", lambda x: x.mul_(3.0)),
    ("div_", lambda x: x.div_(4.0)),
    ("add_alpha", lambda x: x.add_(x.detach() * 0 + 1.0, alpha=-2.0)),
    ("sub_alpha", lambda x: x.sub_(2.0, alpha=0.5)),
    ("pow_", lambda x: x.pow_(2)),
    ("sigmoid_", lambda x: x.sigmoid_()),
    ("tanh_", lambda x: x.tanh_()),
    ("relu_", lambda x: x.relu_()),
    ("square_", lambda x: x.square_()),
    ("reciprocal_", lambda x: x.add_(5.0).reciprocal_()),
    ("lerp_", lambda x: x.lerp_(x.detach() * 0 + 1.0, 0.25)),
    ("addcmul_", lambda x: x.addcmul_(x.detach(), x.detach(), value=0.5)),
    ("addcdiv_", lambda x: x.addcdiv_(x.detach(), x.detach() + 3.0, value=2.0)),
    ("masked_fill_", None),
    ("fill_", lambda x: x.fill_(2.0)),
    ("zero_", lambda x: x.zero_()),
    ("copy_", lambda x: x.copy_(x.detach() * 3)),
    ("floor_", lambda x: x.floor_()),
    ("sign_", lambda x: x.sign_()),
    ("tril_", lambda x: x.tril_(-1)),
    ("triu_", lambda x: x.triu_(1)),
    ("scatter_", None),
    ("index_add_", None),
    ("fill_diagonal_", lambda x: x.fill_diagonal_(0.0)),
]


def _inplace_fn(name, fn, T):
    if name == "masked_fill_":
        return lambda x: x.masked_fill_(T.tensor([[True, False, True], [False, False, True]]), -1.0)
    if name == "scatter_":
        return lambda x: x.scatter_(1, T.tensor([[0], [2]]), 9.0)
    if name == "index_add_":
        return lambda x: x.index_add_(0, T.tensor([1, 1]), T.ones(2, 3, dtype=x.dtype))
    return fn


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("name", "fn"), INPLACE, ids=[n for n, _ in INPLACE])
def test_inplace_matches_torch_with_autograd(name, fn, dtype) -> None:
    values = np.array([[0.3, -1.2, 0.7], [1.5, -0.4, 0.05]], dtype=dtype)
    outcomes = []
    for T in (gs, torch):
        leaf = T.tensor(values, requires_grad=True)
        x = leaf * 1.5
        version = x._version
        out = _inplace_fn(name, fn, T)(x)
        assert out is x and x._version > version
        (x * T.tensor(values)).sum().backward()
        outcomes.append((_np(x), _np(leaf.grad)))
    np.testing.assert_allclose(outcomes[0][0], outcomes[1][0], rtol=1e-6, err_msg="values")
    np.testing.assert_allclose(outcomes[0][1], outcomes[1][1], rtol=1e-6, atol=1e-7, err_msg="gradients")


@pytest.mark.parametrize("T", BACKENDS)
def test_inplace_checks(T) -> None:
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        T.zeros(3, dtype=T.long).div_(2)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        T.zeros(3).add_(T.ones(2, 3))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        T.zeros(3, requires_grad=True).abs_()


def test_inplace_on_saved_tensor_is_detected() -> None:
    for T in (gs, torch):
        x = T.tensor([0.5, 1.0], requires_grad=True)
        y = x.exp()
        z = y * 1.0
        y.sqrt_()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            (z.sum() + y.sum()).backward()


def test_legacy_addcmul_and_addcdiv_overloads() -> None:
    for T in (gs, torch):  # torch warns once per process, so only gradscope's warning is checked
        x = T.zeros(2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x.addcmul_(2.0, T.ones(2), T.ones(2) * 3)
            x.addcdiv_(2.0, T.ones(2), T.ones(2) * 4)
        assert x.tolist() == [6.5, 6.5]
        if T is gs:
            assert sum("deprecated" in str(w.message) for w in caught) == 2


@pytest.mark.parametrize("T", BACKENDS)
def test_random_fills(T) -> None:
    T.manual_seed(0)
    x = T.empty(20000)
    exponential = x.exponential_(2.0).numpy()
    assert exponential.min() >= 0 and abs(exponential.mean() - 0.5) < 0.02 and abs(exponential.std() - 0.5) < 0.02
    # standard errors here: about 0.002 for the means, 0.0015 (uniform) and 0.0005 (normal) for the stds
    uniform = x.uniform_(-1.0, 3.0).numpy()
    assert uniform.min() >= -1.0 and uniform.max() < 3.0
    assert abs(uniform.mean() - 1.0) < 0.03 and abs(uniform.std() - 4.0 / 12 ** 0.5) < 0.01
    normal = x.normal_(5.0, 0.1).numpy()
    assert abs(normal.mean() - 5.0) < 0.005 and abs(normal.std() - 0.1) < 0.003
    assert set(x.random_(0, 3).tolist()) <= {0.0, 1.0, 2.0}
    assert set(x.bernoulli_(0.5).tolist()) <= {0.0, 1.0}


# ---------------------------------------------------------------- small non-differentiable ops
@pytest.mark.parametrize("T", BACKENDS)
def test_non_differentiable_helpers(T) -> None:
    x = T.tensor([[0.0, 2.0, -1.0], [3.0, 0.0, 0.0]])
    assert x.nonzero().tolist() == [[0, 1], [0, 2], [1, 0]]
    assert [t.tolist() for t in T.nonzero(x, as_tuple=True)] == [[0, 0, 1], [1, 2, 0]]
    assert T.argwhere(x).tolist() == [[0, 1], [0, 2], [1, 0]]
    assert x.argsort(dim=1, descending=True).tolist() == [[1, 0, 2], [0, 1, 2]]
    assert x.argmax(dim=1, keepdim=True).tolist() == [[1], [0]]
    assert x.max(dim=1).indices.tolist() == [1, 0]
    assert (T.tensor([True, False]) & T.tensor([True, True])).tolist() == [True, False]
    assert (T.tensor([6, 3]) & T.tensor([3, 1])).tolist() == [2, 1]
    assert (T.tensor([6, 3]) | 1).tolist() == [7, 3]
    assert (~T.tensor([True, False])).tolist() == [False, True]
    assert T.tensor([True, False]).logical_xor(T.tensor([True, True])).tolist() == [False, True]
    assert T.tril_indices(3, 3).tolist() == [[0, 1, 1, 2, 2, 2], [0, 0, 1, 0, 1, 2]]
    assert T.triu_indices(3, 3, 1).tolist() == [[0, 0, 1], [1, 2, 2]]
    assert T.repeat_interleave(T.tensor([2, 0, 1])).tolist() == [0, 0, 2]
    assert T.ones(2, 3).sum(axis=1).tolist() == [3.0, 3.0]
    assert T.ones(2, 3).size(-1) == 3 and T.numel(T.ones(2, 3)) == 6 and T.ones(2, 3).ndimension() == 2
    assert T.floor_divide(T.tensor([7, -7]), 2).tolist() == [3, -4]
    assert T.remainder(T.tensor([-5.0, 7.0]), 3).tolist() == [1.0, 1.0]
    assert T.fmod(T.tensor([-5.0, 7.0]), 3).tolist() == [-2.0, 1.0]
    assert T.tensor([1.7, -1.7]).trunc().tolist() == [1.0, -1.0]
    assert T.tensor([1, 2, 3]).cumprod(0).tolist() == [1, 2, 6]
    assert T.ones(2, 3).stride() == (3, 1)
