"""Saved-tensor hooks as PyTorch runs them (issue 25): what gets packed, what the pack hook is
handed, the hook stack around backward, ``grad_fn._saved_<name>`` / ``_raw_saved_<name>``."""
from __future__ import annotations

from typing import Any

import pytest

import gradscope as gs


def test_an_op_packs_only_what_it_saves(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        packed = []
        x = T.tensor([1.0, 2.0], requires_grad=True)
        y = T.tensor([3.0, 4.0])
        w = T.tensor([[1.0], [2.0]])
        with T.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t.tolist()) or t, lambda t: t):
            x * y        # only x needs a gradient: y alone is saved
            y * x
            x * x        # both
            x @ w        # w alone
            x * 2.0      # a python scalar: nothing
            x / y        # the denominator alone
            T.addmm(T.zeros(1), x.reshape(1, 2), w)  # w alone
        return packed

    assert same_as_torch(scenario) == [[3.0, 4.0], [3.0, 4.0], [1.0, 2.0], [1.0, 2.0], [[1.0], [2.0]],
                                       [3.0, 4.0], [[1.0], [2.0]]]


def test_the_pack_hook_gets_the_tensor_itself_with_grad_mode_off(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        seen = []
        x = T.tensor([1.0, 2.0], requires_grad=True)
        y = T.tensor([3.0, 4.0])

        def pack(t: Any) -> Any:
            seen.append([t is x, t is y, T.is_grad_enabled(), (t * 2).requires_grad])
            return t

        with T.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            x * y
            x.pow(2)
        return seen

    assert same_as_torch(scenario) == [[False, True, False, False], [True, False, False, False]]


def test_a_pack_hook_that_modifies_its_input_is_refused(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        log = []

        def increment(t: Any) -> Any:
            t += 1
            return t

        a = T.tensor([1.0, 2.0], requires_grad=True)
        with T.autograd.graph.saved_tensors_hooks(increment, lambda t: t):
            try:
                T.exp(a)
            except RuntimeError as error:
                log.append("pack hook is modifying its input in place" in str(error))
        y = T.exp(a)
        try:
            y.grad_fn._raw_saved_result.register_hooks(increment, lambda t: t)
        except RuntimeError as error:
            log.append("pack hook is modifying its input in place" in str(error))
        return log

    assert same_as_torch(scenario) == [True, True]


def test_hook_contexts_entered_or_exited_in_backward_do_not_leak() -> None:
    """PyTorch puts the hook stack back when backward ends (its tests call such use unsupported
    but harmless; running this scenario on torch itself later crashes its garbage collector,
    so the expectations are written out)."""
    from gradscope.autograd.node import saved_tensor_hooks_stack

    packs = []
    ctx = gs.autograd.graph.saved_tensors_hooks(lambda t: packs.append("ctx") or t, lambda t: t)

    def enter_in_backward(t: Any) -> Any:
        ctx.__enter__()
        return t

    x = gs.tensor([1.0, 2.0], requires_grad=True)
    with gs.autograd.graph.saved_tensors_hooks(lambda t: t, enter_in_backward):
        x.sin().sum().backward()
    x.cos()                       # ctx entered inside backward: gone when backward ended
    with ctx:
        x.sin()
    x.cos()                       # and this exit left nothing behind
    assert packs == ["ctx"] and saved_tensor_hooks_stack == []

    def exit_in_backward(t: Any) -> Any:
        ctx.__exit__()
        return t

    outer = gs.autograd.graph.saved_tensors_hooks(lambda t: t, exit_in_backward)
    for _ in range(3):
        with outer:
            ctx.__enter__()
            x.sin().sum().backward()  # its exit is undone when backward ends
    assert len(saved_tensor_hooks_stack) == 3
    for _ in range(3):
        ctx.__exit__()
    assert saved_tensor_hooks_stack == []
    ctx.__exit__()                # one exit too many: no IndexError
    x.exp().grad_fn._raw_saved_result.register_hooks(lambda t: t, lambda t: t)  # no hooks in force


def test_disable_saved_tensors_hooks(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        log = []
        graph = T.autograd.graph
        with graph.disable_saved_tensors_hooks("outer"):
            with graph.disable_saved_tensors_hooks("inner"):
                try:
                    with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                        pass
                except RuntimeError as error:
                    log.append(str(error))
            try:
                with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    pass
            except RuntimeError as error:
                log.append(str(error))
        with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            try:
                with graph.disable_saved_tensors_hooks("while hooks are in force"):
                    pass
            except RuntimeError as error:
                log.append(str(error))
        with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            log.append("enabled again")
        return log

    assert same_as_torch(scenario) == ["inner", "outer", "while hooks are in force", "enabled again"]


def test_saved_attributes_are_the_saved_tensors(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        a = T.tensor([1.0, 2.0], requires_grad=True)
        b = a * a
        c = a * b
        d = T.exp(a)
        p = a.pow(2)
        log = [b.grad_fn._saved_self is a, b.grad_fn._saved_other is a, c.grad_fn._saved_other is b,
               d.grad_fn._saved_result is d, d.grad_fn._saved_result, d.grad_fn._saved_result.grad_fn is d.grad_fn,
               p.grad_fn._saved_exponent]
        unpacked = d.grad_fn._saved_result
        with T.no_grad():
            d += 1
        log += [unpacked, d._version == unpacked._version]
        try:
            d.grad_fn._saved_result
        except RuntimeError as error:
            log.append("modified by an inplace operation" in str(error))
        c.sum().backward()
        try:
            c.grad_fn._saved_self
        except RuntimeError as error:
            log.append("after they have already been freed" in str(error))
        return log

    log = same_as_torch(scenario)
    assert log[:4] == [True, True, True, False] and log[-1] is True


@pytest.mark.parametrize("leaf", [True, False])
def test_raw_saved_tensor_register_hooks(same_as_torch: Any, leaf: bool) -> None:
    def scenario(T: Any) -> list:
        def make() -> Any:
            base = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
            return base if leaf else base + 1

        log = []
        a = make()
        y = a * a
        y.grad_fn._raw_saved_self.register_hooks(lambda t: 2 * t, lambda t: t / 2)
        log += [y.grad_fn._saved_self, y.grad_fn._saved_self.grad_fn is a.grad_fn]
        y.sum().backward()
        a = make()
        y = a * a
        y.grad_fn._raw_saved_self.register_hooks(lambda t: 2 * t, lambda t: t)
        log.append(y.grad_fn._saved_self)
        leaf_tensor = a if leaf else None
        y.sum().backward()
        if leaf_tensor is not None:
            log.append(leaf_tensor.grad)  # g*other + g*self = a + 2a
        for bad_unpack, phrase in [(lambda t: 1, "unpack_hook expected to be a Tensor")]:
            a = make()
            y = a * a
            y.grad_fn._raw_saved_self.register_hooks(lambda t: t, bad_unpack)
            try:
                y.grad_fn._saved_self
            except TypeError as error:
                log.append(phrase in str(error))
        y = T.exp(make())
        y.grad_fn._raw_saved_result.register_hooks(lambda t: t, lambda t: t)
        try:
            y.grad_fn._raw_saved_result.register_hooks(lambda t: t, lambda t: t)
        except RuntimeError as error:
            log.append("hooks have already been set" in str(error))
        return log

    same_as_torch(scenario)


def test_default_hooks_pack_each_saved_tensor_and_unpack_in_backward(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        counts = {"pack": 0, "unpack": 0}

        def pack(t: Any) -> Any:
            counts["pack"] += 1
            return 2 * t

        def unpack(t: Any) -> Any:
            counts["unpack"] += 1
            return t

        with T.autograd.graph.saved_tensors_hooks(pack, unpack):
            a = T.tensor([1.0, -2.0], requires_grad=True)
            y = a * a
            log = [dict(counts), y.grad_fn._saved_self]
            y.sum().backward()
        return log + [dict(counts), a.grad]

    log = same_as_torch(scenario)
    assert log[0] == {"pack": 2, "unpack": 0}


def test_save_on_cpu(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        with T.autograd.graph.save_on_cpu():
            a = T.tensor([1.0, 3.0], requires_grad=True)
            y = a * a
            log = [y.grad_fn._saved_self, y.grad_fn._saved_self.dtype == a.dtype]
            y.sum().backward()
        return log + [a.grad]

    same_as_torch(scenario)


def test_wrapped_numbers_are_not_packed() -> None:
    def refuse(t: Any) -> Any:
        raise AssertionError("a python scalar must not go through saved-tensor hooks")

    with gs.autograd.graph.saved_tensors_hooks(refuse, refuse):
        a = gs.ones(3, requires_grad=True)
        (grad,) = gs.autograd.grad((a * 3).sum(), (a,))
    assert grad.tolist() == [3.0, 3.0, 3.0]
