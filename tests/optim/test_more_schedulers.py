"""The remaining learning-rate schedulers against torch.optim.lr_scheduler: the learning rates
(and cycled momentum) of every epoch, closed forms, state dicts and errors."""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn

torch = pytest.importorskip("torch")


def _optimizer(lib: Any, name: str = "SGD", **options: Any) -> Any:
    make = torch.nn.Parameter if lib is torch else nn.Parameter
    groups = [{"params": [make(lib.ones(1))], "lr": 0.1}, {"params": [make(lib.ones(1))], "lr": 0.02}]
    defaults = {"lr": 1.0, "momentum": 0.9} if name == "SGD" else {"lr": 1.0}
    defaults.update(options)
    return getattr(lib.optim, name)(groups, **defaults)


class Scale:
    """A callable object (its ``__dict__`` goes into LambdaLR's state dict)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def __call__(self, epoch: int) -> float:
        return self.rate ** epoch


SCHEDULES: dict[str, Callable] = {
    "lambda": lambda S, opt: S.LambdaLR(opt, lambda epoch: 1.0 / (1 + epoch)),
    "lambda_per_group": lambda S, opt: S.LambdaLR(opt, [Scale(0.9), lambda epoch: 0.5 if epoch > 3 else 1.0]),
    "multiplicative": lambda S, opt: S.MultiplicativeLR(opt, lambda epoch: 0.95),
    "multistep": lambda S, opt: S.MultiStepLR(opt, milestones=[3, 7, 7, 12], gamma=0.5),
    "constant": lambda S, opt: S.ConstantLR(opt, factor=0.5, total_iters=4),
    "linear": lambda S, opt: S.LinearLR(opt, start_factor=0.1, total_iters=6),
    "linear_down": lambda S, opt: S.LinearLR(opt, start_factor=1.0, end_factor=0.2, total_iters=10),
    "exponential": lambda S, opt: S.ExponentialLR(opt, gamma=0.9),
    "polynomial": lambda S, opt: S.PolynomialLR(opt, total_iters=8, power=2.0),
    "warm_restarts": lambda S, opt: S.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=0.001),
    "onecycle_cos": lambda S, opt: S.OneCycleLR(opt, max_lr=[0.5, 0.1], total_steps=25),
    "onecycle_linear_three_phase": lambda S, opt: S.OneCycleLR(opt, max_lr=0.3, epochs=5, steps_per_epoch=5,
                                                              anneal_strategy="linear", three_phase=True,
                                                              pct_start=0.25),
    "sequential_warmup_cosine": lambda S, opt: S.SequentialLR(
        opt, [S.LinearLR(opt, start_factor=0.1, total_iters=4), S.CosineAnnealingLR(opt, T_max=10)], milestones=[5]),
    "sequential_three": lambda S, opt: S.SequentialLR(
        opt, [S.ConstantLR(opt, factor=0.5, total_iters=10), S.ExponentialLR(opt, gamma=0.8),
              S.StepLR(opt, step_size=3)], milestones=[4, 9]),
    "chained": lambda S, opt: S.ChainedScheduler([S.ExponentialLR(opt, gamma=0.9),
                                                  S.MultiStepLR(opt, milestones=[5, 10])]),
}


def _trajectory(lib: Any, make: Callable, epochs: int = 24, optimizer: str = "SGD") -> tuple:
    opt = _optimizer(lib, optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scheduler = make(lib.optim.lr_scheduler, opt)
    history = [scheduler.get_last_lr()]
    momenta = []
    for _ in range(epochs):
        opt.step()
        scheduler.step()
        history.append(scheduler.get_last_lr())
        group = opt.param_groups[0]
        momenta.append(group.get("momentum", group.get("betas", (None,))[0]))
    return history, momenta, scheduler


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_learning_rates_match_torch(name: str, optimizer: str) -> None:
    epochs = 24 if "onecycle" in name else 30
    ours, our_momenta, ours_sched = _trajectory(gs, SCHEDULES[name], epochs, optimizer)
    theirs, their_momenta, their_sched = _trajectory(torch, SCHEDULES[name], epochs, optimizer)
    for epoch, (a, b) in enumerate(zip(ours, theirs)):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15), f"epoch {epoch}"
    assert our_momenta == pytest.approx(their_momenta, rel=1e-12)
    assert sorted(ours_sched.state_dict()) == sorted(their_sched.state_dict())


@pytest.mark.parametrize("name", ["multistep", "constant", "linear", "exponential", "polynomial"])
def test_closed_form_with_explicit_epoch_matches_torch(name: str) -> None:
    results = []
    for lib in (gs, torch):
        opt = _optimizer(lib)
        scheduler = SCHEDULES[name](lib.optim.lr_scheduler, opt)
        opt.step()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scheduler.step(9)
        results.append(scheduler.get_last_lr())
    assert results[0] == pytest.approx(results[1], rel=1e-12)


@pytest.mark.parametrize("mode,threshold_mode,cooldown", [("min", "rel", 0), ("min", "abs", 2), ("max", "rel", 1),
                                                          ("max", "abs", 0)])
def test_reduce_on_plateau_matches_torch(mode: str, threshold_mode: str, cooldown: int) -> None:
    metrics = [1.0, 0.9, 0.9, 0.91, 0.95, 0.9, 0.89999, 0.7, 0.7, 0.7, 0.7, 0.71, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]
    histories = []
    for lib in (gs, torch):
        opt = _optimizer(lib)
        scheduler = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, mode=mode, factor=0.5, patience=2,
                                                             threshold=0.05, threshold_mode=threshold_mode,
                                                             cooldown=cooldown, min_lr=[0.01, 0.004])
        history = []
        for value in metrics:
            opt.step()
            scheduler.step(value if mode == "min" else -value)
            history.append((scheduler.get_last_lr(), scheduler.num_bad_epochs, scheduler.best))
        histories.append((history, sorted(scheduler.state_dict())))
    assert histories[0] == histories[1]


def test_lambda_state_dict_keeps_callable_objects_state() -> None:
    opt = _optimizer(gs)
    scale = Scale(0.9)
    scheduler = gs.optim.lr_scheduler.LambdaLR(opt, [scale, lambda epoch: 1.0])
    state = scheduler.state_dict()
    assert state["lr_lambdas"] == [{"rate": 0.9}, None]
    state["lr_lambdas"] = [{"rate": 0.5}, None]
    scheduler.load_state_dict(state)
    assert scale.rate == 0.5


def test_sequential_state_dict_round_trip_continues_the_schedule() -> None:
    def make(opt: Any) -> Any:
        return SCHEDULES["sequential_warmup_cosine"](gs.optim.lr_scheduler, opt)

    opt = _optimizer(gs)
    first = make(opt)
    for _ in range(7):
        opt.step()
        first.step()
    saved = first.state_dict()
    opt2 = _optimizer(gs)
    second = make(opt2)
    second.load_state_dict(saved)
    for group, lr in zip(opt2.param_groups, first.get_last_lr()):
        group["lr"] = lr
    for _ in range(3):
        opt.step()
        first.step()
        opt2.step()
        second.step()
        assert second.get_last_lr() == pytest.approx(first.get_last_lr())


def test_scheduler_errors_match_torch() -> None:
    for lib in (gs, torch):
        S, opt = lib.optim.lr_scheduler, _optimizer(lib)
        with pytest.raises(ValueError, match="Factor should be < 1.0"):
            S.ReduceLROnPlateau(opt, factor=1.5)
        with pytest.raises(ValueError, match="total_steps OR"):
            S.OneCycleLR(opt, max_lr=0.1)
        with pytest.raises(ValueError, match="Expected 2 lr_lambdas"):
            S.LambdaLR(opt, [lambda e: 1.0])
        with pytest.raises(ValueError, match="Starting multiplicative factor"):
            S.LinearLR(opt, start_factor=0)
        plain = lib.optim.Adagrad([(torch.nn.Parameter if lib is torch else nn.Parameter)(lib.ones(1))])
        with pytest.raises(ValueError, match="optimizer must support momentum"):
            S.OneCycleLR(plain, max_lr=0.1, total_steps=5)
        with pytest.raises(ValueError, match="number of schedulers provided to be one more"):
            S.SequentialLR(opt, [S.ExponentialLR(opt, 0.9)], milestones=[3])
        scheduler = S.OneCycleLR(opt, max_lr=0.1, total_steps=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scheduler.step()
            scheduler.step()
            with pytest.raises(ValueError, match="Tried to step 3 times"):
                scheduler.step()


@pytest.mark.parametrize("optimizer_name,mode,options", [
    ("SGD", "triangular", {}), ("SGD", "triangular2", {"step_size_down": 3}), ("Adam", "exp_range", {"gamma": 0.9}),
    ("SGD", "triangular", {"scale_fn": lambda x: 0.5 ** x, "scale_mode": "iterations"}),
    ("SGD", "triangular", {"cycle_momentum": False})], ids=["triangular", "triangular2", "exp_range-adam",
                                                           "custom", "no-momentum"])
def test_cyclic_lr_matches_torch(optimizer_name: str, mode: str, options: dict) -> None:
    torch = pytest.importorskip("torch")
    histories = []
    for engine in (torch, gs):
        parameter = engine.nn.Parameter(engine.ones(2))
        extra = {"momentum": 0.9} if optimizer_name == "SGD" else {}
        optimizer = getattr(engine.optim, optimizer_name)([parameter], lr=0.5, **extra)
        scheduler = engine.optim.lr_scheduler.CyclicLR(optimizer, 0.01, 0.1, step_size_up=2, mode=mode, **options)
        history = []
        for _ in range(9):
            parameter.grad = engine.ones(2)
            optimizer.step()
            scheduler.step()
            group = optimizer.param_groups[0]
            history.append((scheduler.get_last_lr()[0], group.get("momentum", group.get("betas", (0.0,))[0]),
                            float(parameter.detach().sum())))
        histories.append(history)
    np.testing.assert_allclose(np.array(histories[1]), np.array(histories[0]), rtol=1e-6)
