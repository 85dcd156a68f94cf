"""In-place ops: version counter, saved-tensor checks, gradients through in-place ops, leaf rules."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs


def f32(data: Any) -> np.ndarray:
    return np.asarray(data, dtype=np.float32)


def _setitem_scalar(t):
    t[0] = 1.5


def _setitem_tensor(t, T):
    t[1:] = T.tensor(f32([7.0, 8.0]))


def _iadd(t):
    t += 1.0


def _imul(t):
    t *= 2.0


# name -> mutate(t, T); every entry modifies t in place exactly once.
INPLACE: dict[str, Callable[[Any, Any], Any]] = {
    "add_": lambda t, T: t.add_(1.0),
    "add_tensor": lambda t, T: t.add_(T.tensor(f32([1.0, 2.0, 3.0]))),
    "sub_": lambda t, T: t.sub_(0.5),
    "mul_": lambda t, T: t.mul_(3.0),
    "div_": lambda t, T: t.div_(2.0),
    "clamp_": lambda t, T: t.clamp_(min=-0.5, max=0.5),
    "clamp_min": lambda t, T: t.clamp_(min=0.0),
    "copy_": lambda t, T: t.copy_(T.tensor(f32([4.0, 5.0, 6.0]))),
    "fill_": lambda t, T: t.fill_(0.25),
    "zero_": lambda t, T: t.zero_(),
    "setitem_scalar": lambda t, T: _setitem_scalar(t),
    "setitem_tensor": lambda t, T: _setitem_tensor(t, T),
    "iadd": lambda t, T: _iadd(t),
    "imul": lambda t, T: _imul(t),
}
IDS = list(INPLACE)
BASE = f32([1.0, -2.0, 3.0])


@pytest.mark.parametrize("name", IDS)
def test_inplace_bumps_version_and_values_match_torch(name: str) -> None:
    mutate = INPLACE[name]
    t = gs.tensor(BASE)
    before = t._version
    identity = id(t)
    mutate(t, gs)
    assert t._version > before
    assert id(t) == identity
    torch = pytest.importorskip("torch")
    reference = torch.tensor(BASE)
    reference_before = reference._version
    mutate(reference, torch)
    assert t._version - before == reference._version - reference_before
    np.testing.assert_allclose(t.numpy(), reference.numpy())


@pytest.mark.parametrize("name", [n for n in IDS if n.endswith(("_", "_tensor", "_min")) and n != "setitem_tensor"])
def test_inplace_method_returns_self(name: str) -> None:
    t = gs.tensor(BASE)
    assert INPLACE[name](t, gs) is t


@pytest.mark.parametrize("name", IDS)
def test_modifying_a_saved_input_raises(name: str) -> None:
    x = gs.tensor(f32([0.5, 1.0, 1.5]), requires_grad=True)
    c = gs.tensor(BASE)
    y = x * c
    INPLACE[name](c, gs)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("name", IDS)
def test_modifying_a_saved_output_raises(name: str) -> None:
    x = gs.tensor(f32([0.5, 1.0, 1.5]), requires_grad=True)
    y = x.exp()
    INPLACE[name](y, gs)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("make", [lambda x: x.tanh(), lambda x: x.sigmoid(), lambda x: x.exp(),
                                  lambda x: x.sqrt()], ids=["tanh", "sigmoid", "exp", "sqrt"])
def test_modified_output_raises_for_ops_that_save_their_output(make) -> None:
    x = gs.tensor(f32([0.5, 1.0, 1.5]), requires_grad=True)
    y = make(x)
    y.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


SHARE_THEN_MODIFY = {
    "detach_": lambda y, T: y.detach_().add_(1.0),
    "detach": lambda y, T: y.detach().mul_(2.0),
    "view_under_no_grad": lambda y, T: _no_grad_mul(T, y[0:1]),
}


def _no_grad_mul(T: Any, t: Any) -> None:
    with T.no_grad():
        t.mul_(2.0)


@pytest.mark.parametrize("name", list(SHARE_THEN_MODIFY))
def test_saved_output_modified_through_a_tensor_sharing_it_raises(name: str, same_as_torch) -> None:
    """The version counter of a saved output is created on first use; every way of sharing the
    output must still let its node see the change (as PyTorch does)."""
    def scenario(T):
        x = T.tensor(f32([0.5, 1.0, 1.5]), requires_grad=True)
        y = x.tanh()
        z = (y * 2.0).sum()
        SHARE_THEN_MODIFY[name](y, T)
        try:
            z.backward()
        except RuntimeError as error:
            return ["raised", "modified by an inplace operation" in str(error)]
        return ["no error"]

    assert same_as_torch(scenario) == ["raised", True]


def test_modifying_an_unsaved_tensor_is_fine() -> None:
    x = gs.tensor(f32([0.5, 1.0, 1.5]), requires_grad=True)
    c = gs.tensor(BASE)
    y = x + c
    c.mul_(2.0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0, 1.0])


def test_error_message_names_the_versions() -> None:
    x = gs.tensor(f32([0.5, 1.0, 1.5]), requires_grad=True)
    c = gs.tensor(BASE)
    y = x * c
    c.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
        y.sum().backward()
    message = str(info.value)
    assert "version 1" in message and "version 0" in message


def test_modifying_a_view_of_a_saved_tensor_raises() -> None:
    x = gs.tensor(f32([0.5, 1.0, 1.5]), requires_grad=True)
    c = gs.tensor(BASE)
    y = x * c
    view = c[1:]
    view.mul_(2.0)
    assert c._version == view._version == 1
    np.testing.assert_array_equal(c.numpy(), [1.0, -4.0, 6.0])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_saved_tensor_check_with_retain_graph() -> None:
    x = gs.tensor(f32([0.5, 1.0, 1.5]), requires_grad=True)
    c = gs.tensor(BASE)
    y = (x * c).sum()
    y.backward(retain_graph=True)
    c.fill_(0.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


@pytest.mark.parametrize("name", IDS)
def test_gradient_through_each_inplace_op_on_non_leaf(name: str, same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(f32([0.5, -1.0, 1.5]), requires_grad=True)
        y = x * 2.0
        INPLACE[name](y, T)
        log = [y.requires_grad, y.is_leaf, y]
        (y * y).sum().backward()
        return log + [x.grad]

    log = same_as_torch(scenario)
    assert log[:2] == [True, False]


def test_gradient_through_inplace_ops_on_non_leaf(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(f32([0.5, 1.0, 1.5]), requires_grad=True)
        w = T.tensor(f32([2.0, 3.0]), requires_grad=True)
        y = x * 2.0
        y.mul_(3.0)
        y.add_(1.0)
        log = [y.grad_fn.name()]
        y[0] = 0.0
        y[1:] = w * w
        z = y * y
        z.sub_(1.0)
        z.div_(2.0)
        (z * z).sum().backward()
        return log + [y, x.grad, w.grad]

    log = same_as_torch(scenario)
    assert log[0] == "AddBackward0"
    assert log[1] == [0.0, 4.0, 9.0]
    assert log[2] == [0.0, 0.0, 0.0]


def test_clamp_inplace_gradient(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(f32([-2.0, 0.3, 2.0]), requires_grad=True)
        y = x * 1.0
        y.clamp_(min=-1.0, max=1.0)
        (y * y).sum().backward()
        return x.grad

    assert same_as_torch(scenario) == [0.0, 0.6, 0.0]


def test_inplace_on_no_grad_tensor_with_grad_value(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(f32([0.5, 1.0]), requires_grad=True)
        a = T.zeros(2)
        a.add_(x * 3.0)
        b = T.zeros(2)
        b.copy_(x * x)
        log = [a.requires_grad, a.is_leaf, b.requires_grad]
        (a + b).sum().backward()
        return log + [x.grad]

    assert same_as_torch(scenario) == [True, False, True, [4.0, 5.0]]


@pytest.mark.parametrize("name", IDS)
def test_inplace_on_leaf_requiring_grad_raises(name: str) -> None:
    x = gs.tensor(BASE, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        INPLACE[name](x, gs)


def test_inplace_on_leaf_under_no_grad_is_an_update(same_as_torch) -> None:
    def scenario(T):
        w = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        (w * w).sum().backward()
        version = w._version
        with T.no_grad():
            w.sub_(0.1 * w.grad)
            w[0] = 5.0
        return [w, w._version - version, w.requires_grad, w.is_leaf, w.grad_fn is None]

    assert same_as_torch(scenario) == [[5.0, 1.6], 2, True, True, True]
