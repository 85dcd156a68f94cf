"""Hook semantics that PyTorch's own tests pin (issue 25): each scenario runs on gradscope and on
torch (``same_as_torch``) and the two logs must be equal."""
from __future__ import annotations

import warnings
from typing import Any

import pytest

import gradscope as gs
from gradscope.autograd.function import once_differentiable


# ---------------------------------------------------------------- retain_grad and in-place ops
@pytest.mark.parametrize("inplace_ops", [1, 2])
def test_retain_grad_follows_an_inplace_op(same_as_torch: Any, inplace_ops: int) -> None:
    def scenario(T: Any) -> list:
        x = T.tensor([1.0, 2.0], requires_grad=True)
        a = x * 3
        a.retain_grad()
        for _ in range(inplace_ops):
            a.mul_(2)
        (a * a).sum().backward()
        return [a.grad, x.grad, a.retains_grad]

    log = same_as_torch(scenario)
    assert log[0] == [2 * 3 * 2 ** inplace_ops, 4 * 3 * 2 ** inplace_ops]  # d(a*a)/da of the current a


def test_retain_grad_of_one_output_of_a_two_output_node_follows_inplace(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        b = T.tensor([[1.0, 2.0], [3.0, 5.0]], requires_grad=True)
        var, mean = T.var_mean(b, dim=0)
        var.retain_grad()
        mean.retain_grad()
        var.mul_(2)
        (var * 3 + mean).sum().backward()
        return [var.grad, mean.grad, b.grad]

    same_as_torch(scenario)


def test_tensor_hooks_stay_with_the_value_they_were_registered_on(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        seen = []
        a = T.tensor([1.0], requires_grad=True)
        b = a.clone()
        b.register_hook(lambda g: seen.append(("old", g.tolist())) or g * 2)
        b.mul_(2)
        b.register_hook(lambda g: seen.append(("new", g.tolist())) or g * 2)
        b.sum().backward()
        return [seen, a.grad]

    assert same_as_torch(scenario)[0] == [["new", [1.0]], ["old", [4.0]]]


# ---------------------------------------------------------------- ops with several outputs: one node
@pytest.mark.parametrize("op", ["var_mean", "std_mean"])
def test_var_mean_is_one_node_with_two_outputs(same_as_torch: Any, op: str) -> None:
    def scenario(T: Any) -> list:
        seen = []
        x = T.tensor([[1.0, 2.0, 4.0], [3.0, 5.0, 9.0]], requires_grad=True)
        spread, mean = getattr(T, op)(x, dim=1)
        node = mean.grad_fn
        node.register_prehook(lambda grads: seen.append(["pre", len(grads), [g is None for g in grads]]))
        spread.register_hook(lambda g: seen.append(["spread hook", g is None]))
        mean.sum().backward()
        return [spread.grad_fn is node, node.name(), seen, x.grad]

    log = same_as_torch(scenario)
    assert log[2] == [["spread hook", True], ["pre", 2, [True, False]]]


@pytest.mark.parametrize("kwargs", [{}, {"dim": 0}, {"dim": 1, "keepdim": True}, {"dim": 1, "correction": 0}])
@pytest.mark.parametrize("op", ["var_mean", "std_mean"])
def test_var_mean_values_and_gradients_match_torch(same_as_torch: Any, op: str, kwargs: dict) -> None:
    def scenario(T: Any) -> list:
        x = T.tensor([[1.0, 2.0, 4.0], [3.0, 5.0, 9.0]], dtype=T.float64, requires_grad=True)
        spread, mean = getattr(T, op)(x, **kwargs)
        (spread * 2 + mean * 3).sum().backward()
        return [spread, mean, x.grad]

    same_as_torch(scenario)


def test_prehook_of_a_two_output_node_replaces_both_gradients(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        x = T.tensor([[1.0, 2.0], [4.0, 8.0]], requires_grad=True)
        var, mean = T.var_mean(x, dim=0)
        mean.grad_fn.register_prehook(lambda grads: tuple(g * 2 for g in grads))
        (var + mean).sum().backward()
        return x.grad

    same_as_torch(scenario)


# ---------------------------------------------------------------- autograd.Function with non-tensor outputs
def test_function_non_tensor_outputs_get_none_in_backward_and_hooks(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        seen = []

        class Twice(T.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any, k: int, y: Any) -> tuple:
                ctx.k = k
                return x * 2 * k, k, y * 2 * k

            @staticmethod
            def backward(ctx: Any, g1: Any, g_k: Any, g2: Any) -> tuple:
                seen.append(["backward", g_k is None])
                return g1 * 2 * ctx.k, None, g2 * 2 * ctx.k

        def prehook(grads: tuple) -> tuple:
            seen.append(["pre", len(grads), grads[1] is None])
            return (grads[0] * 2, None, grads[2] * 2)

        x = T.tensor([1.0, 2.0], requires_grad=True)
        y = T.tensor([3.0], requires_grad=True)
        c, k, d = Twice.apply(x, 3, y)
        c.grad_fn.register_prehook(prehook)
        (c.sum() + d.sum()).backward()
        return [k, c.output_nr, d.output_nr, seen, x.grad, y.grad]

    log = same_as_torch(scenario)
    assert log[3] == [["pre", 3, True], ["backward", True]]


def test_setup_context_and_once_differentiable(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        once = once_differentiable if T is gs else __import__("torch").autograd.function.once_differentiable

        class Cube(T.autograd.Function):
            @staticmethod
            def forward(x: Any, power: int = 3) -> tuple:
                return x ** power, float(power)

            @staticmethod
            def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
                x, power = inputs
                ctx.save_for_backward(x)
                ctx.power = power

            @staticmethod
            @once
            def backward(ctx: Any, g: Any, _unused: Any) -> tuple:
                (x,) = ctx.saved_tensors
                return g * ctx.power * x ** (ctx.power - 1), None

        x = T.tensor([1.0, 2.0], requires_grad=True)
        y, power = Cube.apply(x)
        y.sum().backward()
        return [y, power, x.grad]

    same_as_torch(scenario)


# ---------------------------------------------------------------- restricted backward and accumulators
def test_backward_inputs_non_leaf_runs_its_node_hooks(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        log = []
        x = T.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2
        z = y * 3
        y.register_hook(lambda g: log.append(["tensor", g.tolist()]) or g * 10)
        y.grad_fn.register_prehook(lambda grads: log.append(["pre", grads[0].tolist()]))
        y.grad_fn.register_hook(lambda grads_in, grads_out: log.append(["post", grads_in[0] is None]))
        z.sum().backward(inputs=(y,))
        return [log, y.grad, x.grad]

    assert same_as_torch(scenario)[0] == [["tensor", [3.0, 3.0]], ["pre", [30.0, 30.0]], ["post", True]]


def test_autograd_grad_of_a_non_leaf_skips_its_node_hooks(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        log = []
        x = T.tensor([1.0], requires_grad=True)
        y = x * 2
        y.grad_fn.register_prehook(lambda grads: log.append("pre"))
        (g,) = T.autograd.grad((y * 3).sum(), y)
        return [log, g]

    assert same_as_torch(scenario)[0] == []


def test_accumulate_grad_post_hook_sees_the_post_accumulate_hooks_edit(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        seen = []
        x = T.tensor([1.0, 1.0], requires_grad=True)
        acc = (x * 1).grad_fn.next_functions[0][0]
        def times_ten(t: Any) -> None:
            t.grad.mul_(10)

        x.register_post_accumulate_grad_hook(times_ten)
        acc.register_hook(lambda grads_in, grads_out: seen.append(grads_out[0].tolist()))
        (x * 2).sum().backward()  # .grad was None: the hook edits the very buffer that became .grad
        (x * 2).sum().backward()  # .grad existed: the post-hook sees the incoming gradient
        return [seen, x.grad]

    assert same_as_torch(scenario)[0] == [[20.0, 20.0], [2.0, 2.0]]


def test_post_accumulate_grad_hook_must_return_none(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        x = T.ones(2, requires_grad=True)
        x.register_post_accumulate_grad_hook(lambda t: t.grad)
        with pytest.raises(RuntimeError, match="hooks should return None."):
            x.sum().backward()
        return []

    same_as_torch(scenario)


# ---------------------------------------------------------------- engine callbacks and handles
def test_execution_engine_queue_callback(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        calls = []
        engine = T.autograd.Variable._execution_engine
        with pytest.raises(RuntimeError, match="Final callbacks can only be installed during backward pass"):
            engine.queue_callback(lambda: calls.append("outside"))
        x = T.ones(2, requires_grad=True)
        y = x * 2
        y.register_hook(lambda g: engine.queue_callback(lambda: calls.append(["after", x.grad is None])))
        y.sum().backward()
        return calls

    assert same_as_torch(scenario) == [["after", False]]


def test_removable_handle_exposes_its_dict_references(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        module = T.nn.Sigmoid()
        handle = module.register_forward_hook(lambda *args: None, with_kwargs=True)
        before = [len(handle.hooks_dict_ref()), handle.id in handle.hooks_dict_ref(),
                  [handle.id in ref() for ref in handle.extra_dict_ref]]
        handle.remove()
        return before + [len(handle.hooks_dict_ref()), any(handle.id in ref() for ref in handle.extra_dict_ref)]

    assert same_as_torch(scenario) == [1, True, [True, False], 0, False]


def test_saved_input_detached_in_place_is_refused(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        log = []
        a = T.tensor(1.0, requires_grad=True).clone()
        b = a.sin()
        a.detach_()
        try:
            b.backward()
        except RuntimeError as error:
            log.append("detached in-place" in str(error))
        a = T.tensor(1.0, requires_grad=True).clone()
        b = a.exp()  # saves its output, not a
        a.detach_()
        b.backward()
        return log

    assert same_as_torch(scenario) == [True]


def test_tensor_layout_is_strided() -> None:
    assert str(gs.ones(2).layout) == "gradscope.strided"


def test_no_warnings_from_a_plain_backward() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = gs.ones(2, requires_grad=True)
        v, m = gs.var_mean(x * 2)
        (v + m).backward()
    assert x.grad is not None


def test_engines_report_the_output_shapes_of_a_function_with_a_non_tensor_output() -> None:
    from gradscope.engines import get_engine

    def shapes(T: Any, engine_name: str) -> tuple:
        class Mixed(T.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any) -> tuple:
                return x * 2, 5, x * 3

            @staticmethod
            def backward(ctx: Any, a: Any, b: Any, c: Any) -> Any:
                return a + c

        out, _, _ = Mixed.apply(T.ones(2, requires_grad=True))
        return get_engine(engine_name).node_output_shapes(out.grad_fn)

    ours = shapes(gs, "gradscope")
    assert ours == ((2,), (), (2,))
    torch = pytest.importorskip("torch")
    assert shapes(torch, "torch") == ours
