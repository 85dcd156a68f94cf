"""Module full backward hooks and backward pre-hooks, compared with torch.

Scenarios log every hook that fires (with the values it sees) and are run on gradscope and
torch; the logs must be equal. Where gradscope deliberately differs (PyTorch's fabricated zero
gradients, deprecated non-full hooks), the tests assert gradscope's documented behaviour.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradscope as gs
from hook_models import affine_cls, tanh_cls

NO_INPUT_GRAD = "no inputs require gradients"
OUTPUT_TYPE = "module output should be a Tensor or a tuple of Tensors"


def tensor(T, data, requires_grad=False):
    return T.tensor(np.asarray(data, dtype=np.float32), requires_grad=requires_grad)


def two_in_cls(T):
    """``forward(a, b, k=None, kw=None) = a * b (* kw)``; ``k`` is a non-tensor slot."""
    class TwoIn(T.nn.Module):
        def forward(self, a, b, k=None, kw=None):
            out = a * b
            if kw is not None:
                out = out * kw
            return out

    return TwoIn


def scale_cls(T):
    class Scale(T.nn.Module):
        def __init__(self, value=2.0):
            super().__init__()
            self.w = T.nn.Parameter(tensor(T, [value]))

        def forward(self, x):
            return x * self.w

    return Scale


def mlp(T):
    Affine, Tanh = affine_cls(T), tanh_cls(T)
    return T.nn.Sequential(Affine(3, 2), Tanh(), Affine(2, 2, offset=1.0))


def x_input(T, requires_grad=True):
    return tensor(T, [[1.0, 0.0, -1.0], [0.5, 2.0, 1.0]], requires_grad)


def recorder(log, label):
    """(pre_hook, full_hook) pair that log the label and the gradients they receive."""
    def pre(module, grad_output):
        log("pre", label, grad_output)

    def full(module, grad_input, grad_output):
        log("full", label, grad_input, grad_output)

    return pre, full


def attach(module, log, label):
    pre, full = recorder(log, label)
    module.register_full_backward_pre_hook(pre)
    module.register_full_backward_hook(full)


# ---------------------------------------------------------------- arguments and return values
def test_full_hook_arguments(compare):
    def run(T, log):
        lin = affine_cls(T)()

        def pre(module, grad_output):
            log("pre", module is lin, type(grad_output).__name__, len(grad_output), grad_output)

        def full(module, grad_input, grad_output):
            log("full", module is lin, type(grad_input).__name__, len(grad_input), grad_input,
                type(grad_output).__name__, grad_output)

        lin.register_full_backward_pre_hook(pre)
        lin.register_full_backward_hook(full)
        x = x_input(T)
        out = lin(x)
        log("forward done")
        (out * tensor(T, [[1.0, 2.0]])).sum().backward()
        log("grads", x.grad, lin.weight.grad, lin.bias.grad)

    compare(run)


def test_full_hook_return_replaces_grad_input(compare):
    def run(T, log):
        m = two_in_cls(T)()
        m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 10, None))
        m.register_full_backward_hook(lambda mod, gi, go: log("second full sees replacement", gi))
        a, b = tensor(T, [1.0, 2.0], True), tensor(T, [3.0, 4.0], True)
        a.register_hook(lambda g: log("a tensor hook sees replacement", g))
        m(a, b).sum().backward()
        log("grads", a.grad, b.grad is None)

    compare(run)


def test_pre_hook_replaces_grad_output(compare):
    def run(T, log):
        lin = affine_cls(T)()
        lin.register_full_backward_pre_hook(lambda mod, go: (go[0] * 3,))
        lin.register_full_backward_pre_hook(lambda mod, go: log("second pre", go))
        lin.register_full_backward_hook(lambda mod, gi, go: log("full", gi, go))
        x = x_input(T)
        out = lin(x)
        out.retain_grad()
        out.sum().backward()
        log("param grads use replacement", lin.weight.grad, lin.bias.grad)
        log("input grad", x.grad)
        log("caller-side out.grad unchanged", out.grad)

    compare(run)


def test_wrong_number_of_gradients_raises(compare):
    def run(T, log):
        lin = affine_cls(T)()
        with lin.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0])):
            log.raises("full hook", lambda: lin(x_input(T)).sum().backward(), "invalid number of grad_input")
        with lin.register_full_backward_pre_hook(lambda mod, go: (go[0], None)):
            log.raises("pre-hook", lambda: lin(x_input(T)).sum().backward(), "invalid number of grad_output")
        with lin.register_full_backward_hook(lambda mod, gi, go: ()):
            log.raises("empty tuple", lambda: lin(x_input(T)).sum().backward(), "invalid number of grad_input")

    compare(run)


def test_wrong_shape_raises(compare):
    def run(T, log):
        lin = affine_cls(T)()
        x = x_input(T)
        with lin.register_full_backward_hook(lambda mod, gi, go: (gi[0][:1],)):
            log.raises("full hook", lambda: lin(x).sum().backward(), "changed the size")
        log("x.grad untouched", x.grad is None)
        with lin.register_full_backward_pre_hook(lambda mod, go: (go[0][:, :1],)):
            log.raises("pre-hook", lambda: lin(x).sum().backward(), "changed the size")

    compare(run)


def test_multiple_inputs_kwargs_and_non_tensor_args(compare):
    def run(T, log):
        m = two_in_cls(T)()
        m.register_full_backward_hook(lambda mod, gi, go: log("full", len(gi), gi, go))
        a, b = tensor(T, [1.0, 2.0], True), tensor(T, [3.0, 4.0], True)
        kw = tensor(T, [5.0, 6.0], True)
        m(a, b, "not a tensor", kw=kw).sum().backward()
        log("kwargs tensor has no slot but gets its gradient", kw.grad, a.grad, b.grad)
        a.grad = None
        m(a, a).sum().backward()
        log("same tensor twice: summed .grad", a.grad)

    compare(run)


def test_kwargs_only_call_and_nested_tensor_args(compare):
    def run(T, log):
        class KwargsOnly(T.nn.Module):
            def forward(self, x=None):
                return x * 2

        class NestedArgs(T.nn.Module):
            def forward(self, pair, scale):
                return pair[0] * pair[1] * scale

        k = KwargsOnly()
        attach(k, log, "kwargs only")
        x = tensor(T, [1.0, 2.0], True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            k(x=x).sum().backward()
        log.warnings("warning", caught, NO_INPUT_GRAD)
        log("kwarg grad flows", x.grad)

        n = NestedArgs()
        attach(n, log, "nested")
        a, b, scale = tensor(T, [1.0, 2.0], True), tensor(T, [3.0, 4.0], True), tensor(T, [2.0, 2.0], True)
        n([a, b], scale).sum().backward()
        log("tensors inside a list are not wrapped but get grads", a.grad, b.grad, scale.grad)

    compare(run)


# ---------------------------------------------------------------- ordering
def test_nested_sequential_order_over_iterations(compare):
    def run(T, log):
        model = mlp(T)
        for name, module in model.named_modules():
            attach(module, log, name or "seq")
        for name, p in model.named_parameters():
            p.register_post_accumulate_grad_hook(lambda p, name=name: log("acc", name, p.grad))
        x = x_input(T)
        x.register_hook(lambda g: log("x hook", g))
        for step in range(2):
            y = model(x)
            y.register_hook(lambda g: log("y hook", g))
            log("forward", step)
            (y * y).sum().backward()
            log("backward", step)
        log("x.grad", x.grad)

    compare(run)


def test_tensor_node_module_hooks_and_accumulation_order(compare):
    def run(T, log):
        m = scale_cls(T)()
        attach(m, log, "m")
        x = tensor(T, [1.0, -2.0], True)
        x.register_hook(lambda g: log("x tensor hook", g))
        x.register_post_accumulate_grad_hook(lambda t: log("x accumulated", t.grad))
        m.w.register_hook(lambda g: log("w tensor hook", g))
        m.w.register_post_accumulate_grad_hook(lambda t: log("w accumulated", t.grad))
        for step in range(2):
            y = m(x)
            y.retain_grad()
            y.register_hook(lambda g: log("y tensor hook", g))
            y.grad_fn.register_prehook(lambda go: log("y node prehook", go))
            y.grad_fn.register_hook(lambda gi, go: log("y node hook", gi, go))
            z = y * 3
            z.register_hook(lambda g: log("z tensor hook", g))
            z.sum().backward()
            log("step", step, y.grad, x.grad, m.w.grad)

    compare(run)


def test_prepend_and_registration_order(compare):
    def run(T, log):
        m = scale_cls(T)()
        m.register_full_backward_hook(log.hook("full a"))
        m.register_full_backward_hook(log.hook("full b first"), prepend=True)
        m.register_full_backward_hook(log.hook("full c"))
        m.register_full_backward_pre_hook(log.hook("pre a"))
        m.register_full_backward_pre_hook(log.hook("pre b first"), prepend=True)
        x = tensor(T, [1.0], True)
        for step in range(2):
            m(x).sum().backward()
            log("step", step)

    compare(run)


def test_input_without_grad_fires_at_output_time_with_warning(compare):
    def run(T, log):
        model = mlp(T)
        for name, module in model.named_modules():
            attach(module, log, name or "seq")
        x = x_input(T, requires_grad=False)
        for step in range(2):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model(x).sum().backward()
            log.warnings("warning", caught, NO_INPUT_GRAD)
            log("grads", [p.grad for p in model.parameters()])

    compare(run)


def test_input_without_grad_hook_must_return_none(compare):
    def run(T, log):
        m = scale_cls(T)()
        m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 10,))
        m.register_full_backward_hook(lambda mod, gi, go: log("full", gi, go))
        x = tensor(T, [1.0, 2.0])
        m(x).sum().backward()
        log("pre-hook replacement reaches params", m.w.grad)
        m.register_full_backward_hook(lambda mod, gi, go: (None,))
        m(x).sum().backward()
        log("all-None return is fine", m.w.grad)
        m.register_full_backward_hook(lambda mod, gi, go: (go[0],))
        log.raises("tensor return", lambda: m(x).sum().backward(), "should always return None")

    compare(run)


def test_pre_hook_only_with_input_without_grad_warns(compare):
    def run(T, log):
        m = scale_cls(T)()
        m.register_full_backward_pre_hook(lambda mod, go: log("pre", go))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m(tensor(T, [1.0, 2.0])).sum().backward()
        log.warnings("warning", caught, NO_INPUT_GRAD)
        log("param grad", m.w.grad)

    compare(run)


def test_list_returns_of_the_right_length_are_accepted(compare):
    def run(T, log):
        m = scale_cls(T)()
        m.register_full_backward_pre_hook(lambda mod, go: [go[0] * 2])
        m.register_full_backward_hook(lambda mod, gi, go: [gi[0] * 3])
        x = tensor(T, [1.0, 2.0], True)
        m(x).sum().backward()
        log("grads", x.grad, m.w.grad)

    compare(run)


def test_module_called_twice_in_one_forward(compare):
    def run(T, log):
        m = scale_cls(T)(3.0)
        calls = []

        def pre(mod, go):
            log("pre", go)

        def full(mod, gi, go):
            log("full", gi, go)

        m.register_full_backward_pre_hook(pre)
        m.register_full_backward_hook(full)
        m.register_forward_hook(lambda mod, args, out: calls.append(1))
        x = tensor(T, [1.0, 2.0], True)
        out = m(m(x))
        log("forward calls", len(calls))
        out.sum().backward(retain_graph=True)
        log("second backward on the same graph")
        out.sum().backward()
        log("grads", x.grad, m.w.grad)

    compare(run)


# ---------------------------------------------------------------- outputs
def test_tuple_outputs_with_non_tensor_and_unused_entries(compare):
    def run(T, log):
        class Split(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = T.nn.Parameter(tensor(T, [2.0, 3.0]))
                self.unused_w = T.nn.Parameter(tensor(T, [7.0, 7.0]))

            def forward(self, a, b):
                return a * self.w, "label", a * b, b * self.unused_w, (a * 5).detach()

        m = Split()
        attach(m, log, "split")
        a, b = tensor(T, [1.0, 2.0], True), tensor(T, [3.0, 4.0], True)
        first, label, both, only_unused, constant = m(a, b)
        log("label passes through", label, "constant output", constant.requires_grad)
        (first.sum() + (both * 2).sum() + both.sum()).backward()
        log("grads", a.grad, b.grad)
        log("param feeding only an unused output stays None", m.unused_w.grad is None, m.w.grad)

    compare(run)


def test_dict_and_list_outputs_warn_and_never_fire(compare):
    def run(T, log):
        class AsDict(T.nn.Module):
            def forward(self, x):
                return {"out": x * 2}

        class AsList(T.nn.Module):
            def forward(self, x):
                return [x * 3]

        for m, pick in ((AsDict(), lambda r: r["out"]), (AsList(), lambda r: r[0])):
            attach(m, log, type(m).__name__)
            x = tensor(T, [1.0, 2.0], True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = m(x)
            log.warnings("warning", caught, OUTPUT_TYPE)
            pick(result).sum().backward()
            log("grad flows", type(m).__name__, x.grad)

        class AsNumber(T.nn.Module):
            def forward(self, x):
                return float((x * 2).sum())

        number = AsNumber()
        attach(number, log, "number")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log("plain number", number(tensor(T, [1.0, 2.0], True)))
        log.warnings("warning", caught, OUTPUT_TYPE)

    compare(run)


def test_output_not_requiring_grad_never_fires(compare):
    def run(T, log):
        class Detaching(T.nn.Module):
            def forward(self, x):
                return (x * 2).detach()

        m = Detaching()
        attach(m, log, "detaching")
        x = tensor(T, [1.0, 2.0], True)
        out = m(x)
        log("output flags", out.requires_grad)
        (out * x).sum().backward()
        log("grad flows normally", x.grad)

    compare(run)


def test_no_grad_call_installs_nothing(compare):
    def run(T, log):
        x = tensor(T, [1.0, 2.0], True)

        class Probe(T.nn.Module):
            def forward(self, a):
                log("forward gets caller's object", a is x)
                return a * 2

        m = Probe()
        attach(m, log, "probe")
        with T.no_grad():
            out = m(x)
        log("no graph", out.requires_grad, out.grad_fn is None)
        (m(x) * 1).sum().backward()
        log("grad", x.grad)

    compare(run)


def test_wrapping_is_observable(compare):
    def run(T, log):
        x, y = tensor(T, [1.0, 2.0], True), tensor(T, [3.0, 4.0])

        class Probe(T.nn.Module):
            def forward(self, a, b):
                log("forward", a is x, a.grad_fn.name() if a.grad_fn is not None else None, b is y,
                    b.requires_grad, b.grad_fn is None)
                return a * b

        m = Probe()
        m.register_forward_hook(lambda mod, args, out: log("forward hook sees wrapped args", args[0] is x))
        with m.register_full_backward_pre_hook(lambda mod, go: None):
            out = m(x, y)
        log("output node", out.grad_fn.name(), out.grad_fn.next_functions[0][0].name())
        out = m(x, y)
        log("forward hooks alone do not wrap", out.grad_fn.name())

    compare(run)


def test_forward_hook_replacement_and_identity_module_are_hooked(compare):
    def run(T, log):
        m = scale_cls(T)(2.0)
        attach(m, log, "scale")
        m.register_forward_hook(lambda mod, args, out: out * 10)
        x = tensor(T, [1.0, 2.0], True)
        out = m(x)
        log("output", out)
        out.sum().backward()
        log("grads", x.grad, m.w.grad)

        class Identity(T.nn.Module):
            def forward(self, a):
                return a

        ident = Identity()
        attach(ident, log, "identity")
        x2 = tensor(T, [3.0], True)
        out = ident(x2)
        log("identity returns a new object", out is x2)
        (out * 5).sum().backward()
        log("identity grad", x2.grad)

    compare(run)


def test_hooks_follow_replaced_args_and_tuple_replacement_output(compare):
    def run(T, log):
        m = scale_cls(T)(3.0)
        attach(m, log, "scale")
        x = tensor(T, [1.0, 2.0], True)
        with m.register_forward_pre_hook(lambda mod, args: (args[0].detach() * 2,)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                m(x).sum().backward()
            log.warnings("replaced arg needs no grad", caught, NO_INPUT_GRAD)
        log("x got nothing", x.grad is None, m.w.grad)
        with m.register_forward_hook(lambda mod, args, out: (out, out * 2, "extra")):
            first, second, extra = m(x)
            (first + second).sum().backward()
        log("tuple replacement output", extra, x.grad)

    compare(run)


def test_backward_with_inputs_restricts_module_hooks(compare):
    def run(T, log):
        lin = affine_cls(T)()
        attach(lin, log, "lin")
        x = x_input(T)
        lin(x).sum().backward(inputs=[lin.weight])
        log("only weight", lin.weight.grad, lin.bias.grad is None, x.grad is None)
        lin(x).sum().backward(inputs=[x])
        log("only x", x.grad, lin.bias.grad is None)

    compare(run)


def test_error_inside_backward_hook_propagates_and_next_step_works(compare):
    def run(T, log):
        m = scale_cls(T)()
        calls = []

        def flaky(mod, gi, go):
            calls.append(1)
            if len(calls) == 1:
                raise ValueError("hook failed")
            log("full", gi)

        m.register_full_backward_hook(flaky)
        x = tensor(T, [1.0, 2.0], True)
        log.raises("propagates", lambda: m(x).sum().backward(), "hook failed")
        x.grad = None
        m.w.grad = None
        m(x).sum().backward()
        log("next step", x.grad, m.w.grad)

    compare(run)


# ---------------------------------------------------------------- lifetime, removal, registration
def test_hooks_removed_after_forward_still_fire_for_that_graph(compare):
    def run(T, log):
        m = scale_cls(T)()
        pre = m.register_full_backward_pre_hook(log.hook("pre"))
        full = m.register_full_backward_hook(log.hook("full"))
        x = tensor(T, [1.0], True)
        out = m(x)
        pre.remove()
        full.remove()
        log("removed before backward")
        out.sum().backward()
        log("next call is not wrapped", m(x).grad_fn.name())
        m(x).sum().backward()
        log("done", x.grad)

    compare(run)


def test_temporary_module_lives_through_its_hooks(compare):
    def run(T, log):
        Scale = scale_cls(T)
        x = tensor(T, [1.0], True)

        def make():
            m = Scale(4.0)
            m.register_full_backward_hook(lambda mod, gi, go: log("full on temporary", type(mod).__name__, gi))
            return m(x)

        make().sum().backward()
        log("grad", x.grad)

    compare(run)


def test_remove_and_register_inside_backward_hooks(compare):
    def run(T, log):
        m = scale_cls(T)()
        handles = {}
        added = []

        def remover(mod, gi, go):
            log("remover")
            handles["victim"].remove()
            handles["pre"].remove()

        def adder(mod, go):
            log("adder pre")
            if not added:
                added.append(m.register_full_backward_hook(log.hook("added during backward")))
                added.append(m.register_full_backward_pre_hook(log.hook("added pre during backward")))

        handles["pre"] = m.register_full_backward_pre_hook(adder)
        m.register_full_backward_hook(remover)
        handles["victim"] = m.register_full_backward_hook(log.hook("victim"))
        x = tensor(T, [1.0], True)
        for step in range(3):
            log("step", step)
            m(x).sum().backward()

    compare(run)


def test_backward_hook_registered_during_forward_waits_for_next_call(compare):
    def run(T, log):
        m = scale_cls(T)()
        added = []

        def pre(mod, args):
            if not added:
                added.append(mod.register_full_backward_hook(log.hook("full added in forward pre-hook")))

        m.register_forward_pre_hook(pre)
        x = tensor(T, [1.0], True)
        for step in range(2):
            log("step", step)
            m(x).sum().backward()

    compare(run)


def test_autograd_grad_fires_pre_hook_only_for_params(compare):
    def run(T, log):
        lin = affine_cls(T)()
        lin.register_full_backward_pre_hook(log.hook("pre"))
        lin.register_full_backward_hook(log.hook("full"))
        x = x_input(T)
        out = lin(x).sum()
        grads = T.autograd.grad(out, [lin.weight, lin.bias], retain_graph=True)
        log("wrt params", grads, lin.weight.grad is None)
        log("wrt input", T.autograd.grad(out, [x]), x.grad is None)

    compare(run)


def test_grad_mode_is_off_inside_backward_hooks(compare):
    def run(T, log):
        m = scale_cls(T)()
        m.register_full_backward_pre_hook(
            lambda mod, go: log("pre", T.is_grad_enabled(), go[0].requires_grad))
        m.register_full_backward_hook(
            lambda mod, gi, go: log("full", T.is_grad_enabled(), gi[0].requires_grad, go[0].requires_grad))
        x = tensor(T, [1.0, 2.0], True)
        m(x).sum().backward()
        log("restored", T.is_grad_enabled())

    compare(run)


def test_tensor_and_node_hook_handles(compare):
    def run(T, log):
        m = scale_cls(T)()
        x = tensor(T, [1.0, 2.0], True)
        y = m(x)
        registrations = {
            "tensor": lambda: x.register_hook(lambda g: log("tensor")),
            "post_accumulate": lambda: x.register_post_accumulate_grad_hook(lambda t: log("post_accumulate")),
            "node prehook": lambda: y.grad_fn.register_prehook(lambda go: log("node prehook")),
            "node hook": lambda: y.grad_fn.register_hook(lambda gi, go: log("node hook")),
        }
        for kind, register in registrations.items():
            keep = register()
            with register() as handle:
                log(kind, type(handle).__name__)
                y.sum().backward(retain_graph=True)
            log("after exit", kind)
            y.sum().backward(retain_graph=True)
            keep.remove()
            keep.remove()
            log("after double remove", kind)
            y.sum().backward(retain_graph=True)

    compare(run)


# ---------------------------------------------------------------- in-place on wrapped tensors
def test_inplace_on_wrapped_tensors_raises(compare):
    def run(T, log):
        class InplaceInput(T.nn.Module):
            def forward(self, a):
                a.mul_(2)
                return a * 1

        class Plain(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = T.nn.Parameter(tensor(T, [1.0, 1.0]))

            def forward(self, a):
                return a * self.w

        def leaf_with_grad():
            return tensor(T, [1.0, 2.0], True) * 1

        m = InplaceInput()
        m.register_full_backward_hook(lambda *a: None)
        log.raises("input modified inside forward", lambda: m(leaf_with_grad()), "modified inplace")
        no_grad_input = tensor(T, [1.0, 2.0])
        m(no_grad_input)
        log("fine when no input requires grad", no_grad_input)

        p = Plain()
        p.register_full_backward_pre_hook(lambda *a: None)
        log.raises("output add_", lambda: p(leaf_with_grad()).add_(1), "modified inplace")

        def iadd():
            out = p(leaf_with_grad())
            out += 1

        log.raises("output +=", iadd, "modified inplace")
        log.raises("output wrapped even if no input needs grad", lambda: p(tensor(T, [1.0, 2.0])).add_(1),
                   "modified inplace")

        fwd_only = InplaceInput()
        fwd_only.register_forward_hook(lambda *a: None)
        fwd_only.register_forward_pre_hook(lambda *a: None)
        out = fwd_only(leaf_with_grad())
        log("forward hooks only: no error", out)

    compare(run)


# ---------------------------------------------------------------- with real layers, when present
def test_linear_tanh_linear_with_real_layers(compare):

    def run(T, log):
        model = T.nn.Sequential(T.nn.Linear(3, 2), T.nn.Tanh(), T.nn.Linear(2, 2))
        with T.no_grad():
            for i, p in enumerate(model.parameters()):
                p.copy_(T.tensor(np.linspace(-1, 1, int(np.prod(p.shape)), dtype=np.float32).reshape(p.shape) + i))
        for name, module in model.named_modules():
            attach(module, log, name or "seq")
        for name, p in model.named_parameters():
            # only the owning layer is logged: the order of one layer's parameters is gradscope's own
            p.register_post_accumulate_grad_hook(lambda p, layer=name.split(".")[0]: log("acc", layer))
        x = x_input(T)
        target = tensor(T, [[0.5, -0.5], [1.0, 0.0]])
        for step in range(2):
            loss = T.nn.MSELoss()(model(x), target)
            loss.backward()
            log("step", step, loss, x.grad, [p.grad for p in model.parameters()])

    compare(run)


def test_relu_inplace_on_wrapped_input_raises(compare):

    def run(T, log):
        relu = T.nn.ReLU(inplace=True)
        relu.register_full_backward_hook(lambda *a: None)
        x = tensor(T, [[-1.0, 2.0]], True)
        log.raises("inplace ReLU on a wrapped input", lambda: relu(x * 1), "modified inplace")
        model = T.nn.Sequential(T.nn.Linear(2, 2), T.nn.ReLU(inplace=True))
        log("inplace ReLU without hooks works", model(x).shape == (1, 2))
        with model[1].register_forward_hook(lambda *a: None):
            log("forward hooks only: works", model(x).shape == (1, 2))
        with model[1].register_full_backward_pre_hook(lambda *a: None):
            log.raises("backward pre-hook wraps too", lambda: model(x), "modified inplace")

    compare(run)


# ---------------------------------------------------------------- gradscope's deliberate differences
def grads_of(tensors):
    return [None if t.grad is None else t.grad.detach().numpy().copy() for t in tensors]


def assert_same_grads(with_hooks, without_hooks):
    assert [g is None for g in with_hooks] == [g is None for g in without_hooks]
    for got, want in zip(with_hooks, without_hooks):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-6)


def zero_scenarios(T):
    """Modules whose PyTorch hooks would fabricate zero grad_input slots; returns (module, run)."""
    TwoIn = two_in_cls(T)

    class Ignores(T.nn.Module):
        def forward(self, a, b):
            return a * 2

    class UnusedBranch(T.nn.Module):
        def forward(self, a, b):
            return a * 2, b * 3

    def constant_input(m):
        a, b = tensor(T, [1.0, 2.0], True), tensor(T, [3.0, 4.0])
        m(a, b).sum().backward()
        return [a, b]

    def ignored_input(m):
        a, b = tensor(T, [1.0, 2.0], True), tensor(T, [3.0, 4.0], True)
        m(a, b).sum().backward()
        return [a, b]

    def unused_output(m):
        a, b = tensor(T, [1.0, 2.0], True), tensor(T, [3.0, 4.0], True)
        m(a, b)[0].sum().backward()
        return [a, b]

    return {"constant input": (TwoIn, constant_input), "ignored input": (Ignores, ignored_input),
            "input only feeds an unused output": (UnusedBranch, unused_output)}


@pytest.mark.parametrize("case", ["constant input", "ignored input", "input only feeds an unused output"])
def test_no_fabricated_zero_gradients(case):
    cls, run = zero_scenarios(gs)[case]
    plain = cls()
    without_hooks = grads_of(run(plain))
    hooked = cls()
    seen = []
    hooked.register_full_backward_hook(lambda mod, gi, go: seen.append(gi))
    with_hooks = grads_of(run(hooked))
    assert len(seen) == 1
    assert seen[0][0] is not None
    assert seen[0][1] is None, "gradscope gives None (not zeros) for an input that got no gradient"
    assert with_hooks[1] is None
    assert_same_grads(with_hooks, without_hooks)


@pytest.mark.parametrize("case", ["constant input", "ignored input", "input only feeds an unused output"])
def test_grads_with_hooks_equal_torch_without_hooks(case):
    torch = pytest.importorskip("torch")
    cls, run = zero_scenarios(gs)[case]
    hooked = cls()
    hooked.register_full_backward_hook(lambda *a: None)
    hooked.register_full_backward_pre_hook(lambda *a: None)
    torch_cls, torch_run = zero_scenarios(torch)[case]
    assert_same_grads(grads_of(run(hooked)), grads_of(torch_run(torch_cls())))


def test_deprecated_register_backward_hook_is_a_full_hook(compare):
    def run(T, log):
        model = mlp(T)
        for name, module in model.named_modules():
            label = name or "seq"

            def hook(mod, gi, go, label=label):
                log("hook", label, gi, go)

            if T is gs:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    module.register_backward_hook(hook)
                assert [w.category for w in caught] == [FutureWarning]
                assert "register_full_backward_hook" in str(caught[0].message)
            else:
                module.register_full_backward_hook(hook)
        x = x_input(T)
        model(x).sum().backward()
        log("grads", x.grad, [p.grad for p in model.parameters()])

    compare(run)


def test_deprecated_and_full_hooks_mix_on_one_module(log):
    m = scale_cls(gs)()
    with pytest.warns(FutureWarning, match="register_full_backward_hook"):
        legacy = m.register_backward_hook(lambda mod, gi, go: log("legacy", gi))
    full = m.register_full_backward_hook(lambda mod, gi, go: log("full", gi))
    x = tensor(gs, [1.0], True)
    m(x).sum().backward()
    legacy.remove()
    legacy.remove()
    m(x).sum().backward()
    full.remove()
    assert [event[0] for event in log] == ["legacy", "full", "full"]
    assert type(legacy).__name__ == "RemovableHandle"


def test_a_deep_copied_handle_removes_the_copys_hook_as_in_torch():
    import copy

    torch = pytest.importorskip("torch")

    def run(lib, nn):
        events = []

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(2, 2)
                self.handle = self.lin.register_forward_hook(lambda module, args, output: events.append(module))

        original = Model()
        duplicate = copy.deepcopy(original)
        duplicate.handle.remove()
        original.lin(lib.ones(1, 2))
        duplicate.lin(lib.ones(1, 2))
        return [module is original.lin for module in events], len(original.lin._forward_hooks), \
            len(duplicate.lin._forward_hooks)

    assert run(gs, gs.nn) == run(torch, torch.nn) == ([True], 1, 0)
