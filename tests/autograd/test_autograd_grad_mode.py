"""Grad mode: no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import gradscope as gs


def leaf() -> gs.Tensor:
    return gs.tensor([1.0, 2.0], requires_grad=True)


def test_no_grad_builds_no_graph_and_restores() -> None:
    x = leaf()
    assert gs.is_grad_enabled()
    with gs.no_grad():
        assert not gs.is_grad_enabled()
        y = x * 2.0
        z = x.exp().sum()
    assert gs.is_grad_enabled()
    for t in (y, z):
        assert t.requires_grad is False and t.grad_fn is None and t.is_leaf
    assert (x * 2.0).requires_grad


def test_no_grad_restores_after_exception() -> None:
    with pytest.raises(ValueError):
        with gs.no_grad():
            raise ValueError("boom")
    assert gs.is_grad_enabled()


def test_no_grad_as_decorator() -> None:
    @gs.no_grad()
    def double(t):
        assert not gs.is_grad_enabled()
        return t * 2.0

    y = double(leaf())
    assert not y.requires_grad
    assert gs.is_grad_enabled()


def test_enable_grad_inside_no_grad() -> None:
    x = leaf()
    with gs.no_grad():
        with gs.enable_grad():
            assert gs.is_grad_enabled()
            y = x * 2.0
        assert not gs.is_grad_enabled()
    assert y.requires_grad and y.grad_fn is not None
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_enable_grad_as_decorator() -> None:
    @gs.enable_grad()
    def double(t):
        return t * 2.0

    with gs.no_grad():
        y = double(leaf())
    assert y.requires_grad


def test_set_grad_enabled_context_and_function() -> None:
    x = leaf()
    with gs.set_grad_enabled(False):
        assert not gs.is_grad_enabled()
        assert not (x * 2.0).requires_grad
    assert gs.is_grad_enabled()
    with gs.set_grad_enabled(True):
        assert (x * 2.0).requires_grad
    gs.set_grad_enabled(False)
    try:
        assert not gs.is_grad_enabled()
        assert not (x * 2.0).requires_grad
    finally:
        gs.set_grad_enabled(True)
    assert gs.is_grad_enabled()


def test_nested_modes() -> None:
    with gs.no_grad():
        with gs.set_grad_enabled(True):
            assert gs.is_grad_enabled()
            with gs.no_grad():
                assert not gs.is_grad_enabled()
            assert gs.is_grad_enabled()
        assert not gs.is_grad_enabled()
    assert gs.is_grad_enabled()


def test_inference_mode() -> None:
    x = leaf()
    with gs.inference_mode():
        assert not gs.is_grad_enabled()
        y = x * 2.0
    assert not y.requires_grad and y.grad_fn is None
    assert gs.is_grad_enabled()
    with gs.inference_mode(False):
        assert gs.is_grad_enabled()
        assert (x * 2.0).requires_grad

    @gs.inference_mode()
    def double(t):
        return t * 2.0

    assert not double(x).requires_grad


def test_grad_mode_is_per_thread() -> None:
    seen = []
    with gs.no_grad():
        worker = threading.Thread(target=lambda: seen.append(gs.is_grad_enabled()))
        worker.start()
        worker.join()
    assert seen == [True]


def test_autograd_namespace_exports_the_same_modes() -> None:
    assert gs.autograd.no_grad is gs.no_grad
    with gs.autograd.set_grad_enabled(False):
        assert not gs.is_grad_enabled()
    assert gs.autograd.grad_mode.no_grad is gs.no_grad


def test_grad_mode_off_inside_backward_hooks(same_as_torch) -> None:
    def scenario(T):
        seen = []
        x = T.tensor(np.array([1.0, 2.0], dtype=np.float32), requires_grad=True)
        y = x * x
        y.register_hook(lambda g: seen.append([T.is_grad_enabled(), g.requires_grad]))
        y.sum().backward()
        seen.append(T.is_grad_enabled())
        return seen

    assert same_as_torch(scenario) == [[False, False], True]


def test_requires_grad_flags(same_as_torch) -> None:
    def scenario(T):
        log = []
        c = T.tensor(np.array([1.0, 2.0], dtype=np.float32))
        c.requires_grad_()
        log.append([c.requires_grad, c.is_leaf])
        y = c * 2.0
        try:
            y.requires_grad_(False)
        except RuntimeError as error:
            log.append(["raised", "leaf variables" in str(error)])
        log.append(c.requires_grad_(False) is c)
        log.append(c.requires_grad)
        return log

    assert same_as_torch(scenario) == [[True, True], ["raised", True], True, False]
