"""Adagrad, Adadelta, Adamax, NAdam, RAdam and LBFGS against torch.optim over many steps in float32
and float64 (parameters and state), plus torch's step-hook semantics on every optimizer."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn, optim

torch = pytest.importorskip("torch")


def optimizer_module(lib):
    """``torch.optim.optimizer`` / ``gradscope.optim.optimizer``, where the global hooks live."""
    return importlib.import_module(lib.__name__ + ".optim.optimizer")

SHAPES = [(3, 4), (5,), (2, 1, 3)]

CASES = [
    ("Adagrad", {}),
    ("Adagrad", {"lr": 0.05, "lr_decay": 0.01, "weight_decay": 0.1, "initial_accumulator_value": 0.2}),
    ("Adagrad", {"lr": 0.05, "maximize": True, "eps": 1e-6}),
    ("Adadelta", {}),
    ("Adadelta", {"lr": 0.5, "rho": 0.8, "eps": 1e-5, "weight_decay": 0.1}),
    ("Adadelta", {"maximize": True}),
    ("Adamax", {}),
    ("Adamax", {"lr": 0.01, "betas": (0.8, 0.9), "weight_decay": 0.1}),
    ("Adamax", {"maximize": True, "foreach": False}),
    ("NAdam", {}),
    ("NAdam", {"lr": 0.01, "momentum_decay": 0.01, "weight_decay": 0.1}),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True, "maximize": True}),
    ("RAdam", {}),
    ("RAdam", {"lr": 0.01, "betas": (0.8, 0.9), "weight_decay": 0.1}),
    ("RAdam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True, "maximize": True}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01, "foreach": False}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "foreach": None, "maximize": True, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.5, "foreach": False}),
]
IDS = [f"{name}-{index}" for index, (name, _) in enumerate(CASES)]


def _arrays(dtype: type, seed: int, low: float | None = None) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if low is None:
        return [rng.standard_normal(shape).astype(dtype) for shape in SHAPES]
    return [rng.uniform(low, 2.0, shape).astype(dtype) for shape in SHAPES]


def _loss(lib, params, coefs):
    total = (lib.sin(params[0] * coefs[0])).sum()
    total = total + (params[1] ** 2 * coefs[1]).sum()
    return total + (lib.tanh(params[2]) * coefs[2]).sum()


def _run(lib, name: str, kwargs: dict, steps: int, dtype: type) -> tuple:
    make = torch.nn.Parameter if lib is torch else nn.Parameter
    params = [make(lib.tensor(a)) for a in _arrays(dtype, 0)]
    coefs = [lib.tensor(c) for c in _arrays(dtype, 1, 0.5)]
    opt = getattr(lib.optim, name)(params, **kwargs)
    for _ in range(steps):
        opt.zero_grad()
        _loss(lib, params, coefs).backward()
        opt.step()
    return params, opt


def _close(ours, theirs, dtype) -> None:
    rtol, atol = (2e-5, 2e-6) if dtype == np.float32 else (1e-10, 1e-12)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kwargs", CASES, ids=IDS)
def test_steps_match_torch(name: str, kwargs: dict, dtype: type) -> None:
    theirs, torch_opt = _run(torch, name, kwargs, 15, dtype)
    ours, gs_opt = _run(gs, name, kwargs, 15, dtype)
    for p, q in zip(ours, theirs):
        assert p.dtype == (gs.float32 if dtype == np.float32 else gs.float64)
        _close(p, q, dtype)
    ours_sd, theirs_sd = gs_opt.state_dict(), torch_opt.state_dict()
    assert ours_sd["param_groups"] == theirs_sd["param_groups"]
    for index, entry in theirs_sd["state"].items():
        assert list(ours_sd["state"][index]) == list(entry)
        for key, value in entry.items():
            assert str(ours_sd["state"][index][key].dtype) == str(value.dtype).replace("torch", "gradscope")
            _close(ours_sd["state"][index][key], value, dtype)


def test_adagrad_creates_state_at_construction_like_torch() -> None:
    p = nn.Parameter(gs.ones(2))
    opt = optim.Adagrad([p], initial_accumulator_value=0.5)
    assert float(opt.state[p]["step"]) == 0.0
    np.testing.assert_array_equal(opt.state[p]["sum"].numpy(), [0.5, 0.5])


LBFGS_CASES = [(np.float64, {}, 3), (np.float64, {"lr": 0.5, "history_size": 3, "max_iter": 7}, 3),
               (np.float64, {"tolerance_change": 1e-3, "max_iter": 50}, 3),
               (np.float32, {"max_iter": 4}, 1), (np.float32, {"lr": 0.5, "history_size": 2, "max_iter": 6}, 1)]


@pytest.mark.parametrize("dtype,kwargs,steps", LBFGS_CASES)
def test_lbfgs_matches_torch(kwargs: dict, dtype: type, steps: int) -> None:
    """float64 over 3 steps of up to 50 iterations; float32 over a few iterations only (its
    trajectory drifts with summation order, as it does between torch builds)."""
    def run(lib):
        make = torch.nn.Parameter if lib is torch else nn.Parameter
        params = [make(lib.tensor(a)) for a in _arrays(dtype, 0)]
        coefs = [lib.tensor(c) for c in _arrays(dtype, 1, 0.5)]
        opt = lib.optim.LBFGS(params, **kwargs)
        evaluations = []

        def closure():
            opt.zero_grad()
            loss = _loss(lib, params, coefs)
            loss.backward()
            evaluations.append(float(loss))
            return loss

        losses = [float(opt.step(closure)) for _ in range(steps)]
        return params, losses, evaluations, opt

    theirs, their_losses, their_evals, their_opt = run(torch)
    ours, our_losses, our_evals, our_opt = run(gs)
    assert len(our_evals) == len(their_evals)
    rtol = 1e-4 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(our_losses, their_losses, rtol=rtol)
    np.testing.assert_allclose(our_evals, their_evals, rtol=rtol, atol=1e-6)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=rtol * 10, atol=1e-5)
    first = our_opt.state[ours[0]]
    assert first["n_iter"] == their_opt.state[theirs[0]]["n_iter"]
    assert first["func_evals"] == their_opt.state[theirs[0]]["func_evals"]


def test_lbfgs_rejects_groups_and_line_search() -> None:
    a, b = nn.Parameter(gs.ones(1)), nn.Parameter(gs.ones(1))
    with pytest.raises(ValueError, match="doesn't support per-parameter options"):
        optim.LBFGS([{"params": [a]}, {"params": [b]}])
    with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
        optim.LBFGS([a], line_search_fn="armijo")
    with pytest.raises(NotImplementedError, match="line search"):
        optim.LBFGS([a], line_search_fn="strong_wolfe")


# ---------------------------------------------------------------- step hooks, against torch
def _hook_scenario(lib, make_opt):
    calls = []
    p = (torch.nn.Parameter if lib is torch else nn.Parameter)(lib.ones(3))
    opt = make_opt(lib, [p])
    handles = [
        optimizer_module(lib).register_optimizer_step_pre_hook(
            lambda o, args, kwargs: calls.append(("global pre", type(o).__name__, len(args), sorted(kwargs)))),
        optimizer_module(lib).register_optimizer_step_post_hook(lambda o, args, kwargs: calls.append(("global post",))),
        opt.register_step_pre_hook(lambda o, args, kwargs: calls.append(("pre", o is opt))),
        opt.register_step_post_hook(lambda o, args, kwargs: calls.append(("post", float(p.detach().sum())))),
    ]

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        calls.append(("closure",))
        return loss

    try:
        opt.step(closure)
        handles[0].remove()
        handles[2].remove()
        opt.step(closure=closure)
    finally:
        for handle in handles:
            handle.remove()
    opt.step(closure)
    return calls


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam",
                                  "RAdam", "LBFGS"])
def test_step_hooks_fire_in_torch_order_on_every_optimizer(name: str) -> None:
    def make(lib, params):
        options = {"lr": 0.1, "max_iter": 2} if name == "LBFGS" else {"lr": 0.1}
        return getattr(lib.optim, name)(params, **options)

    ours, theirs = _hook_scenario(gs, make), _hook_scenario(torch, make)
    assert [c[:2] if c[0] == "post" else c for c in ours] == [c[:2] if c[0] == "post" else c for c in theirs]
    post = [c[1] for c in ours if c[0] == "post"]
    np.testing.assert_allclose(post, [c[1] for c in theirs if c[0] == "post"], rtol=1e-5)


def test_pre_hook_can_replace_arguments_like_torch() -> None:
    for lib in (gs, torch):
        make = torch.nn.Parameter if lib is torch else nn.Parameter
        p = make(lib.ones(2))
        opt = lib.optim.SGD([p], lr=0.5)
        seen = []

        def replace(o, args, kwargs):
            assert args[0] is o
            return (o,), {"closure": lambda: seen.append("replaced") or lib.tensor(1.0)}

        handle = optimizer_module(lib).register_optimizer_step_pre_hook(replace)
        try:
            assert float(opt.step()) == 1.0
        finally:
            handle.remove()
        assert seen == ["replaced"]
        bad = opt.register_step_pre_hook(lambda o, args, kwargs: "not a pair")
        with pytest.raises(RuntimeError, match="must return None or a tuple of"):
            opt.step()
        bad.remove()


def test_subclass_of_new_optimizer_runs_hooks_once() -> None:
    class Counted(optim.NAdam):
        def step(self, closure=None):
            return super().step(closure)

    calls = []
    p = nn.Parameter(gs.ones(2))
    opt = Counted([p])
    handle = optim.register_optimizer_step_pre_hook(lambda o, args, kwargs: calls.append("pre"))
    try:
        (p * p).sum().backward()
        opt.step()
    finally:
        handle.remove()
    assert calls == ["pre"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,options", [
    ("Rprop", {}), ("Rprop", {"lr": 0.1, "etas": (0.3, 1.5), "step_sizes": (1e-3, 0.2), "maximize": True}),
    ("ASGD", {}), ("ASGD", {"lr": 0.1, "t0": 2, "weight_decay": 0.1, "lambd": 0.01})],
    ids=["rprop", "rprop-options", "asgd", "asgd-averaging"])
def test_rprop_and_asgd_match_torch_over_several_steps(name: str, options: dict, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    start = rng.standard_normal((3, 4)).astype(dtype)
    grads = [rng.standard_normal((3, 4)).astype(dtype) for _ in range(6)]
    results = []
    for engine in (torch, gs):
        parameter = engine.nn.Parameter(engine.tensor(start))
        optimizer = getattr(engine.optim, name)([parameter], **options)
        for grad in grads:
            parameter.grad = engine.tensor(grad)
            optimizer.step()
        state = {key: np.asarray(value.numpy()) for key, value in optimizer.state[parameter].items()}
        results.append((parameter.detach().numpy(), state))
    tolerance = dict(rtol=1e-6, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(results[1][0], results[0][0], **tolerance)
    assert sorted(results[1][1]) == sorted(results[0][1])
    for key, value in results[0][1].items():
        np.testing.assert_allclose(results[1][1][key], value, err_msg=key, **tolerance)
