"""StepLR and CosineAnnealingLR against torch.optim.lr_scheduler."""
from __future__ import annotations

import warnings

import pytest

import gradscope as gs
from gradscope import nn, optim
from gradscope.optim import lr_scheduler

torch = pytest.importorskip("torch")


def _pair(lrs=(0.1, 0.02)):
    tparams = [torch.nn.Parameter(torch.ones(1)) for _ in lrs]
    gparams = [nn.Parameter(gs.ones(1)) for _ in lrs]
    topt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(tparams, lrs)], lr=1.0)
    gopt = optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(gparams, lrs)], lr=1.0)
    return topt, gopt


SCHEDULES = [
    ("StepLR", {"step_size": 3}),
    ("StepLR", {"step_size": 2, "gamma": 0.5}),
    ("CosineAnnealingLR", {"T_max": 5}),
    ("CosineAnnealingLR", {"T_max": 4, "eta_min": 0.001}),
]


@pytest.mark.parametrize("name,kwargs", SCHEDULES)
def test_schedule_matches_torch_over_many_epochs(name, kwargs):
    topt, gopt = _pair()
    tsched = getattr(torch.optim.lr_scheduler, name)(topt, **kwargs)
    gsched = getattr(lr_scheduler, name)(gopt, **kwargs)
    assert gsched.get_last_lr() == tsched.get_last_lr()
    for _ in range(23):
        topt.step()
        gopt.step()
        tsched.step()
        gsched.step()
        assert gsched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-12, abs=1e-15)
        assert [g["lr"] for g in gopt.param_groups] == pytest.approx([g["lr"] for g in topt.param_groups])
    assert list(gsched.state_dict()) == list(tsched.state_dict())
    for key, value in tsched.state_dict().items():
        assert gsched.state_dict()[key] == pytest.approx(value)


@pytest.mark.parametrize("name,kwargs", SCHEDULES)
def test_explicit_epoch_uses_closed_form_and_warns(name, kwargs):
    topt, gopt = _pair()
    tsched = getattr(torch.optim.lr_scheduler, name)(topt, **kwargs)
    gsched = getattr(lr_scheduler, name)(gopt, **kwargs)
    topt.step()
    gopt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tsched.step(7)
    with pytest.warns(UserWarning, match="epoch parameter"):
        gsched.step(7)
    assert gsched.get_last_lr() == pytest.approx(tsched.get_last_lr())


def test_resume_from_state_dict():
    _, gopt = _pair()
    sched = lr_scheduler.CosineAnnealingLR(gopt, T_max=6)
    for _ in range(4):
        gopt.step()
        sched.step()
    saved_sched, saved_opt = sched.state_dict(), gopt.state_dict()
    _, gopt2 = _pair()
    sched2 = lr_scheduler.CosineAnnealingLR(gopt2, T_max=6)
    gopt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved_sched)
    for _ in range(3):
        gopt.step()
        sched.step()
        gopt2.step()
        sched2.step()
    assert sched2.get_last_lr() == sched.get_last_lr()


def test_warns_when_stepped_before_optimizer():
    _, gopt = _pair()
    sched = lr_scheduler.StepLR(gopt, step_size=1)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        sched.step()


def test_no_warning_in_the_right_order():
    _, gopt = _pair()
    sched = lr_scheduler.StepLR(gopt, step_size=1)
    gopt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()


def test_initial_lr_and_errors():
    _, gopt = _pair()
    lr_scheduler.StepLR(gopt, step_size=2)
    assert [g["initial_lr"] for g in gopt.param_groups] == [0.1, 0.02]
    _, fresh = _pair()
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.StepLR(fresh, step_size=2, last_epoch=3)
    with pytest.raises(TypeError, match="is not an Optimizer"):
        lr_scheduler.StepLR(object(), step_size=2)
    sched = lr_scheduler.StepLR(gopt, step_size=2)
    with pytest.warns(UserWarning, match="get_last_lr"):
        sched.get_lr()
