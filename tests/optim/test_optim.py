"""Optimizers against torch.optim: 20 steps of every option combination, state dicts, param
groups, hooks and errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn, optim

torch = pytest.importorskip("torch")

SHAPES = [(3, 4), (5,), (2, 1, 3)]

CASES = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.05, "momentum": 0.9}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3}),
    ("SGD", {"lr": 0.05, "momentum": 0.8, "nesterov": True}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.1, "nesterov": True}),
    ("SGD", {"lr": 0.05, "weight_decay": 0.01, "maximize": True}),
    ("Adam", {}),
    ("Adam", {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6}),
    ("Adam", {"lr": 0.01, "amsgrad": True}),
    ("Adam", {"lr": 0.01, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True, "maximize": True}),
    ("AdamW", {}),
    ("AdamW", {"lr": 0.02, "weight_decay": 0.1, "amsgrad": True}),
    ("AdamW", {"lr": 0.02, "maximize": True}),
    ("RMSprop", {}),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "eps": 1e-6}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.7}),
    ("RMSprop", {"lr": 0.01, "centered": True}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.5, "weight_decay": 0.05}),
    ("RMSprop", {"lr": 0.01, "maximize": True, "weight_decay": 0.1}),
]


def _initial(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for shape in SHAPES]


def _coefs() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.uniform(0.5, 2.0, shape).astype(np.float32) for shape in SHAPES]


def _loss(lib, params, coefs):
    """A non-quadratic loss so trajectories depend on every update."""
    total = (lib.sin(params[0] * coefs[0])).sum()
    total = total + (params[1] ** 2 * coefs[1]).sum()
    return total + (lib.tanh(params[2]) * coefs[2]).sum()


def _run_torch(name, kwargs, steps, initial):
    params = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in initial]
    coefs = [torch.from_numpy(c) for c in _coefs()]
    opt = getattr(torch.optim, name)(params, **kwargs)
    for _ in range(steps):
        opt.zero_grad()
        _loss(torch, params, coefs).backward()
        opt.step()
    return params, opt


def _run_gs(name, kwargs, steps, initial):
    params = [nn.Parameter(gs.tensor(a.copy())) for a in initial]
    coefs = [gs.tensor(c) for c in _coefs()]
    opt = getattr(optim, name)(params, **kwargs)
    for _ in range(steps):
        opt.zero_grad()
        _loss(gs, params, coefs).backward()
        opt.step()
    return params, opt


def _close(ours, theirs, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(ours._data if isinstance(ours, gs.Tensor) else ours,
                               theirs.detach().numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_twenty_steps_match_torch(name, kwargs):
    initial = _initial()
    theirs, torch_opt = _run_torch(name, kwargs, 20, initial)
    ours, gs_opt = _run_gs(name, kwargs, 20, initial)
    for p, q in zip(ours, theirs):
        assert p.dtype == gs.float32
        _close(p, q)
    ours_sd, theirs_sd = gs_opt.state_dict(), torch_opt.state_dict()
    assert ours_sd["param_groups"] == theirs_sd["param_groups"]
    assert list(ours_sd["state"]) == list(theirs_sd["state"])
    for index, entry in theirs_sd["state"].items():
        assert list(ours_sd["state"][index]) == list(entry)
        for key, value in entry.items():
            assert ours_sd["state"][index][key].dtype == gs.float32
            _close(ours_sd["state"][index][key], value)


def test_float64_parameters_stay_float64():
    initial = [a.astype(np.float64) for a in _initial()]
    params = [nn.Parameter(gs.tensor(a)) for a in initial]
    opt = optim.Adam(params, lr=0.01)
    for p in params:
        p.grad = gs.ones_like(p, dtype=gs.float64)
    opt.step()
    assert all(p.dtype == gs.float64 for p in params)
    assert opt.state[params[0]]["exp_avg"].dtype == gs.float64


def test_parameters_without_grad_are_skipped_and_get_no_state():
    a, b = nn.Parameter(gs.ones(2)), nn.Parameter(gs.ones(2))
    opt = optim.Adam([a, b], lr=0.1)
    a.grad = gs.ones(2)
    opt.step()
    assert b not in opt.state and a in opt.state
    np.testing.assert_array_equal(b._data, np.ones(2, np.float32))
    assert list(opt.state_dict()["state"]) == [0]


def test_step_bumps_version_so_stale_graphs_raise():
    w = nn.Parameter(gs.tensor([1.0, 2.0]))
    opt = optim.SGD([w], lr=0.1)
    loss = (w * w).sum()
    loss.backward(retain_graph=True)
    before = w._version
    opt.step()
    assert w._version == before + 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_step_runs_under_no_grad_and_in_place():
    w = nn.Parameter(gs.tensor([1.0, 2.0]))
    data = w._data
    opt = optim.SGD([w], lr=0.5, momentum=0.9)
    w.grad = gs.tensor([1.0, 1.0])
    opt.step()
    assert w._data is data and w.grad_fn is None and w.is_leaf
    np.testing.assert_allclose(w._data, [0.5, 1.5])


def test_zero_grad_set_to_none_and_zeros():
    w = nn.Parameter(gs.ones(3))
    opt = optim.SGD([w], lr=0.1)
    w.grad = gs.ones(3)
    grad = w.grad
    opt.zero_grad(set_to_none=False)
    assert w.grad is grad
    np.testing.assert_array_equal(w.grad._data, np.zeros(3))
    opt.zero_grad()
    assert w.grad is None


def test_closure_is_evaluated_with_grad_enabled():
    w = nn.Parameter(gs.tensor([3.0]))
    opt = optim.SGD([w], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    with gs.no_grad():
        loss = opt.step(closure)
    assert float(loss) == 9.0
    np.testing.assert_allclose(w._data, [3.0 - 0.1 * 6.0], rtol=1e-6)


def test_param_groups_with_own_options_match_torch():
    initial = _initial()
    tparams = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in initial]
    gparams = [nn.Parameter(gs.tensor(a.copy())) for a in initial]
    topt = torch.optim.SGD([{"params": tparams[:2]}, {"params": tparams[2:], "lr": 0.3, "momentum": 0.5}], lr=0.1)
    gopt = optim.SGD([{"params": gparams[:2]}, {"params": gparams[2:], "lr": 0.3, "momentum": 0.5}], lr=0.1)
    tcoefs, gcoefs = [torch.from_numpy(c) for c in _coefs()], [gs.tensor(c) for c in _coefs()]
    for _ in range(5):
        topt.zero_grad()
        gopt.zero_grad()
        _loss(torch, tparams, tcoefs).backward()
        _loss(gs, gparams, gcoefs).backward()
        topt.step()
        gopt.step()
    for p, q in zip(gparams, tparams):
        _close(p, q)
    assert gopt.state_dict()["param_groups"] == topt.state_dict()["param_groups"]


def test_add_param_group_and_errors():
    a, b = nn.Parameter(gs.ones(1)), nn.Parameter(gs.ones(1))
    opt = optim.SGD([a], lr=0.1)
    opt.add_param_group({"params": b, "momentum": 0.9})
    assert opt.param_groups[1]["params"] == [b] and opt.param_groups[1]["lr"] == 0.1
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(TypeError, match="ordered collections"):
        opt.add_param_group({"params": {nn.Parameter(gs.ones(1))}})
    with pytest.raises(TypeError, match="should be an iterable of Tensors"):
        optim.SGD(a, lr=0.1)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([a * 2], lr=0.1)
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors"):
        optim.SGD([1.0], lr=0.1)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.Adam([a], lr=-1)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
        optim.Adam([a], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        optim.SGD([a], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Invalid alpha value"):
        optim.RMSprop([a], alpha=-0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optim.SGD([a, a], lr=0.1)
    assert any("duplicate parameters" in str(w.message) for w in caught)


def test_named_parameters_are_accepted():
    model = nn.Module()
    model.w = nn.Parameter(gs.ones(2))
    opt = optim.SGD(model.named_parameters(), lr=0.1)
    assert opt.param_groups[0]["param_names"] == ["w"]
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["w"]


@pytest.mark.parametrize("name,kwargs", [("SGD", {"lr": 0.05, "momentum": 0.9}), ("Adam", {"lr": 0.01}),
                                         ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.3})])
def test_state_dict_round_trip_continues_the_same_trajectory(name, kwargs):
    initial = _initial()
    ours, opt = _run_gs(name, kwargs, 7, initial)
    saved = opt.state_dict()
    coefs = [gs.tensor(c) for c in _coefs()]
    copies = [nn.Parameter(gs.tensor(p._data.copy())) for p in ours]
    fresh = getattr(optim, name)(copies, **{**kwargs, "lr": 123.0})
    fresh.load_state_dict(saved)
    assert fresh.param_groups[0]["lr"] == kwargs["lr"]
    for params, o in ((ours, opt), (copies, fresh)):
        for _ in range(5):
            o.zero_grad()
            _loss(gs, params, coefs).backward()
            o.step()
    for p, q in zip(ours, copies):
        np.testing.assert_array_equal(p._data, q._data)


def test_load_state_dict_from_torch_optimizer():
    initial = _initial()
    theirs, torch_opt = _run_torch("Adam", {"lr": 0.01}, 6, initial)
    sd = torch_opt.state_dict()
    converted = {"state": {k: {n: gs.tensor(v.numpy()) for n, v in s.items()} for k, s in sd["state"].items()},
                 "param_groups": sd["param_groups"]}
    ours = [nn.Parameter(gs.tensor(p.detach().numpy().copy())) for p in theirs]
    opt = optim.Adam(ours, lr=0.01)
    opt.load_state_dict(converted)
    tcoefs, gcoefs = [torch.from_numpy(c) for c in _coefs()], [gs.tensor(c) for c in _coefs()]
    for _ in range(4):
        torch_opt.zero_grad()
        opt.zero_grad()
        _loss(torch, theirs, tcoefs).backward()
        _loss(gs, ours, gcoefs).backward()
        torch_opt.step()
        opt.step()
    for p, q in zip(ours, theirs):
        _close(p, q)


def test_load_state_dict_errors():
    a, b = nn.Parameter(gs.ones(1)), nn.Parameter(gs.ones(1))
    opt = optim.SGD([a, b], lr=0.1)
    other = optim.SGD([a], lr=0.1)
    with pytest.raises(ValueError, match="doesn't match the size"):
        opt.load_state_dict(other.state_dict())
    two = optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt.load_state_dict(two.state_dict())


def test_step_hooks_order_and_removal():
    w = nn.Parameter(gs.ones(1))
    opt = optim.SGD([w], lr=0.1)
    calls = []
    h1 = opt.register_step_pre_hook(lambda o, args, kwargs: calls.append(("pre", o is opt)))
    h2 = opt.register_step_post_hook(lambda o, args, kwargs: calls.append(("post", w._data[0])))
    h3 = optim.register_optimizer_step_post_hook(lambda o, args, kwargs: calls.append(("global post",)))
    w.grad = gs.ones(1)
    opt.step()
    assert calls == [("pre", True), ("post", np.float32(0.9)), ("global post",)]
    for handle in (h1, h2, h3):
        handle.remove()
    opt.step()
    assert len(calls) == 3


def test_optimizer_on_module_parameters_trains():
    gs.manual_seed(0)
    model = nn.Module()
    model.w = nn.Parameter(gs.randn(3, 1))
    x = gs.randn(16, 3)
    y = x @ gs.tensor([[1.0], [-2.0], [0.5]])
    opt = optim.Adam(model.parameters(), lr=0.1)
    for _ in range(200):
        opt.zero_grad()
        loss = ((x @ model.w - y) ** 2).mean()
        loss.backward()
        opt.step()
    assert float(loss) < 1e-3


def test_subclass_step_calling_super_runs_hooks_once():
    class Clipped(optim.SGD):
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad._data.clip(-1.0, 1.0, out=p.grad._data)
            return super().step(closure)

    w = nn.Parameter(gs.tensor([0.0]))
    opt = Clipped([w], lr=0.1)
    calls = []
    opt.register_step_pre_hook(lambda o, args, kwargs: calls.append("pre"))
    opt.register_step_post_hook(lambda o, args, kwargs: calls.append("post"))
    w.grad = gs.tensor([5.0])
    opt.step()
    assert calls == ["pre", "post"]
    np.testing.assert_allclose(w._data, [-0.1])
    assert "_stepping" not in opt.state_dict()
