"""Global module hooks (``nn.modules.module.register_module_*``), compared with torch.

Every test removes its global hooks (``with`` blocks or ``finally``); the autouse fixture in
``conftest.py`` clears whatever a failing test left behind.
"""
from __future__ import annotations

import warnings
from contextlib import ExitStack

import numpy as np
import pytest

import gradscope as gs
from hook_models import affine_cls, tanh_cls
from gradscope.nn.modules import module as gs_module_file

GLOBAL_REGISTRATIONS = ("register_module_forward_pre_hook", "register_module_forward_hook",
                        "register_module_full_backward_pre_hook", "register_module_full_backward_hook",
                        "register_module_backward_hook", "register_module_module_registration_hook",
                        "register_module_parameter_registration_hook",
                        "register_module_buffer_registration_hook")


def tensor(T, data, requires_grad=False):
    return T.tensor(np.asarray(data, dtype=np.float32), requires_grad=requires_grad)


def mm(T):
    return T.nn.modules.module


def mlp(T):
    Affine, Tanh = affine_cls(T), tanh_cls(T)
    return T.nn.Sequential(Affine(3, 2), Tanh(), Affine(2, 2, offset=1.0))


def x_input(T, requires_grad=True):
    return tensor(T, [[1.0, 0.0, -1.0], [0.5, 2.0, 1.0]], requires_grad)


def labels(model):
    return {id(m): (name or "seq") for name, m in model.named_modules()}


# ---------------------------------------------------------------- forward
def test_global_forward_hooks_run_before_local_in_nested_order(compare):
    def run(T, log):
        model = mlp(T)
        names = labels(model)
        for name, module in model.named_modules():
            label = name or "seq"
            module.register_forward_pre_hook(lambda m, a, label=label: log("pre", label), prepend=True)
            module.register_forward_hook(lambda m, a, o, label=label: log("fwd", label), prepend=True)
        with mm(T).register_module_forward_pre_hook(lambda m, a: log("gpre", names.get(id(m)))), \
                mm(T).register_module_forward_hook(lambda m, a, o: log("gfwd", names.get(id(m)))):
            x = x_input(T)
            for step in range(2):
                out = model(x)
                log("forward done", step)
                out.sum().backward()
                log("backward done", step)
        model(x)
        log("globals removed")

    compare(run)


def test_global_pre_hook_modifies_args_and_forward_hook_replaces_output(compare):
    def run(T, log):
        model = mlp(T)
        x = x_input(T)
        with mm(T).register_module_forward_pre_hook(lambda m, args: (args[0] * 2,)):
            log("doubled at every module", model(x))
        with mm(T).register_module_forward_hook(lambda m, args, out: out + 1):
            out = model(x)
            log("plus one at every module", out)
            out.sum().backward()
            log("grad", x.grad)

    compare(run)


def test_global_forward_hook_with_kwargs_and_always_call(compare):
    def run(T, log):
        class Failing(T.nn.Module):
            def forward(self, x, *, scale=1.0):
                raise ValueError("forward failed")

        class Scaled(T.nn.Module):
            def forward(self, x, *, scale=1.0):
                return x * scale

        with mm(T).register_module_forward_hook(
                lambda m, args, kwargs, out: log("kw", type(m).__name__, sorted(kwargs), out), with_kwargs=True):
            Scaled()(tensor(T, [1.0]), scale=3.0)
        with mm(T).register_module_forward_hook(lambda m, a, o: log("always", type(m).__name__, o),
                                                always_call=True), \
                mm(T).register_module_forward_hook(lambda m, a, o: log("plain", type(m).__name__)):
            log.raises("error propagates", lambda: Failing()(tensor(T, [1.0])), "forward failed")
            Scaled()(tensor(T, [2.0]))

        def broken(m, a, o):
            raise RuntimeError("broken")

        local = Failing()
        local.register_forward_hook(lambda m, a, o: log("local always"), always_call=True)
        with mm(T).register_module_forward_hook(broken, always_call=True):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                log.raises("still the original error", lambda: local(tensor(T, [1.0])), "forward failed")
            log.warnings("warning", caught, "always_call")

    compare(run)


# ---------------------------------------------------------------- backward
def test_global_backward_hooks_run_before_local_in_nested_order(compare):
    def run(T, log):
        model = mlp(T)
        names = labels(model)
        for name, module in model.named_modules():
            label = name or "seq"
            module.register_full_backward_pre_hook(lambda m, go, label=label: log("pre", label, go), prepend=True)
            module.register_full_backward_hook(lambda m, gi, go, label=label: log("full", label, gi), prepend=True)
        for name, p in model.named_parameters():
            p.register_post_accumulate_grad_hook(lambda p, name=name: log("acc", name))
        x = x_input(T)
        x.register_hook(lambda g: log("x hook", g))
        with mm(T).register_module_full_backward_pre_hook(lambda m, go: log("gpre", names[id(m)], go)), \
                mm(T).register_module_full_backward_hook(lambda m, gi, go: log("gfull", names[id(m)], gi, go)):
            for step in range(2):
                model(x).sum().backward()
                log("backward done", step)
        model(x).sum().backward()
        log("globals removed", x.grad)

    compare(run)


def test_global_pre_hook_alone_wraps_and_fires(compare):
    def run(T, log):
        model = mlp(T)
        names = labels(model)
        with mm(T).register_module_full_backward_pre_hook(lambda m, go: log("gpre", names[id(m)], go)):
            out = model(x_input(T))
            log("output node", out.grad_fn.name())
            out.sum().backward()

    compare(run)


def test_global_full_hook_with_input_without_grad(compare):
    def run(T, log):
        model = mlp(T)
        names = labels(model)
        with mm(T).register_module_full_backward_hook(lambda m, gi, go: log("gfull", names[id(m)], gi, go)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model(x_input(T, requires_grad=False)).sum().backward()
        log.warnings("warning", caught, "no inputs require gradients")
        log("grads", [p.grad for p in model.parameters()])

    compare(run)


def test_global_full_hook_scaling_compounds_per_module(compare):
    def run(T, log):
        model = mlp(T)
        x = x_input(T)
        with mm(T).register_module_full_backward_hook(
                lambda m, gi, go: tuple(None if g is None else g * 0.5 for g in gi)):
            model(x).sum().backward()
        log("halved at every boundary upstream", x.grad, [p.grad for p in model.parameters()])

    compare(run)


def test_remove_global_hook_inside_hook_and_register_during_backward(compare):
    def run(T, log):
        model = mlp(T)
        names = labels(model)
        handles = {}
        added = []

        def remover(m, gi, go):
            log("remover", names[id(m)])
            handles["victim"].remove()

        def adder(m, go):
            log("adder", names[id(m)])
            if not added:
                added.append(mm(T).register_module_full_backward_hook(
                    lambda m, gi, go: log("added", names[id(m)])))

        try:
            handles["remover"] = mm(T).register_module_full_backward_hook(remover)
            handles["victim"] = mm(T).register_module_full_backward_hook(lambda m, gi, go: log("victim",
                                                                                           names[id(m)]))
            handles["adder"] = mm(T).register_module_full_backward_pre_hook(adder)
            x = x_input(T)
            for step in range(2):
                model(x).sum().backward()
                log("step", step)
        finally:
            for handle in [*handles.values(), *added]:
                handle.remove()

    compare(run)


# ---------------------------------------------------------------- registration hooks
def test_registration_hooks_called_and_replacement_used(compare):
    def run(T, log):
        replacement_param = T.nn.Parameter(tensor(T, [42.0]))
        replacement_buffer = tensor(T, [7.0])

        class Child(T.nn.Module):
            pass

        replacement_module = Child()

        def on_module(module, name, submodule):
            log("module", type(module).__name__, name, type(submodule).__name__)
            return replacement_module if name == "swap_me" else None

        def on_param(module, name, param):
            log("param", type(module).__name__, name, param)
            return replacement_param if name == "swap_p" else None

        def on_buffer(module, name, buffer):
            log("buffer", type(module).__name__, name, buffer)
            return replacement_buffer if name == "swap_b" else None

        with mm(T).register_module_module_registration_hook(on_module), \
                mm(T).register_module_parameter_registration_hook(on_param), \
                mm(T).register_module_buffer_registration_hook(on_buffer):
            m = T.nn.Module()
            m.p = T.nn.Parameter(tensor(T, [1.0]))
            m.register_parameter("swap_p", T.nn.Parameter(tensor(T, [2.0])))
            m.register_parameter("none_p", None)
            m.register_buffer("b", tensor(T, [3.0]))
            m.register_buffer("swap_b", tensor(T, [4.0]), persistent=False)
            m.b = tensor(T, [5.0])
            m.sub = T.nn.Module()
            m.add_module("swap_me", T.nn.Module())
            m.register_module("other", T.nn.Module())
            seq = T.nn.Sequential(T.nn.Module(), T.nn.Module())
            seq.append(T.nn.Module())
            plist = T.nn.ParameterList([T.nn.Parameter(tensor(T, [6.0]))])
        log("replacement param used", m.swap_p is replacement_param, m.swap_p)
        log("replacement buffer used", m.swap_b is replacement_buffer)
        log("replacement module used", m.swap_me is replacement_module)
        log("names", [n for n, _ in m.named_parameters()], [n for n, _ in m.named_buffers()],
            [n for n, _ in m.named_children()], len(seq), len(plist))
        T.nn.Module().register_parameter("after", T.nn.Parameter(tensor(T, [1.0])))
        log("removed: nothing logged after this")

    compare(run)


# ---------------------------------------------------------------- handles
def test_global_handles_context_manager_and_idempotent_remove(compare):
    def run(T, log):
        model = mlp(T)
        x = x_input(T)
        registrations = {
            "forward_pre": lambda: mm(T).register_module_forward_pre_hook(log.hook("forward_pre")),
            "forward": lambda: mm(T).register_module_forward_hook(log.hook("forward")),
            "forward_always": lambda: mm(T).register_module_forward_hook(log.hook("forward_always"),
                                                                         always_call=True),
            "backward_pre": lambda: mm(T).register_module_full_backward_pre_hook(log.hook("backward_pre")),
            "backward": lambda: mm(T).register_module_full_backward_hook(log.hook("backward")),
        }
        for kind, register in registrations.items():
            keep = register()
            try:
                with register() as handle:
                    log(kind, type(handle).__name__)
                    model[0](x).sum().backward()
                log("after exit", kind)
                model[0](x).sum().backward()
            finally:
                keep.remove()
            keep.remove()
            log("after double remove", kind)
            model[0](x).sum().backward()
        for kind in ("module", "parameter", "buffer"):
            register = getattr(mm(T), f"register_module_{kind}_registration_hook")
            handle = register(log.hook(kind))
            m = T.nn.Module()
            m.add_module("c", T.nn.Module())
            m.register_parameter("p", T.nn.Parameter(tensor(T, [1.0])))
            m.register_buffer("b", tensor(T, [1.0]))
            handle.remove()
            handle.remove()
            m.add_module("d", T.nn.Module())
            m.register_parameter("q", T.nn.Parameter(tensor(T, [1.0])))
            m.register_buffer("e", tensor(T, [1.0]))
            log("after remove", kind)
        try:
            with mm(T).register_module_forward_hook(log.hook("never")):
                raise ZeroDivisionError("body failed")
        except ZeroDivisionError:
            log("exception not suppressed")
        model(x)
        log("removed on error")

    compare(run)


# ---------------------------------------------------------------- gradscope-only surface
def test_global_functions_are_reexported_from_nn():
    for name in GLOBAL_REGISTRATIONS:
        assert getattr(gs.nn, name) is getattr(gs_module_file, name), name
        assert getattr(gs.nn.modules.module, name) is getattr(gs_module_file, name), name


def test_deprecated_global_backward_hook_is_full_hook(compare):
    def run(T, log):
        model = mlp(T)
        names = labels(model)

        def hook(m, gi, go):
            log("hook", names[id(m)], gi, go)

        if T is gs:
            with pytest.warns(FutureWarning, match="register_module_full_backward_hook"):
                handle = mm(T).register_module_backward_hook(hook)
        else:
            handle = mm(T).register_module_full_backward_hook(hook)
        try:
            x = x_input(T)
            model(x).sum().backward()
            log("grads", x.grad)
        finally:
            handle.remove()
        model(x).sum().backward()
        log("removed")

    compare(run)


# ---------------------------------------------------------------- observing does not change .grad
def sample_models(T):
    """(name, build) pairs; ``build()`` returns ``(model, inputs, run, leaves)`` for one step."""
    Affine, Tanh = affine_cls(T), tanh_cls(T)

    def mlp_model():
        model = mlp(T)
        x = x_input(T)
        return model, lambda: (model(x) ** 2).sum(), [x, *model.parameters()]

    def frozen_input():
        model = mlp(T)
        x = x_input(T, requires_grad=False)
        return model, lambda: model(x).sum(), [*model.parameters()]

    class Branchy(T.nn.Module):
        """Two inputs, a tuple output with a non-tensor entry, an unused output, a parameter
        that only feeds that unused output, a child called twice and a keyword tensor."""

        def __init__(self):
            super().__init__()
            self.shared = Affine(2, 2)
            self.act = Tanh()
            self.unused = T.nn.Parameter(tensor(T, [3.0, 3.0]))
            self.never = T.nn.Parameter(tensor(T, [1.0]))

        def forward(self, a, b, *, gate=None):
            hidden = self.act(self.shared(self.shared(a)))
            if gate is not None:
                hidden = hidden * gate
            return hidden, "tag", b * self.unused

    def branchy():
        model = Branchy()
        a = tensor(T, [[1.0, -1.0]], True)
        b = tensor(T, [[2.0, 0.5]], True)
        const = tensor(T, [[0.5, 0.5]])
        gate = tensor(T, [[1.0, 2.0]], True)
        return model, lambda: model(a, const + b * 0, gate=gate)[0].sum(), [a, b, gate, *model.parameters()]

    return {"mlp": mlp_model, "frozen input": frozen_input, "branchy": branchy}


def observe_everything(T, stack):
    """Attach every kind of global hook, each only reading what it is given."""
    def norms(grads):
        return [None if g is None else float((g * g).sum()) for g in grads]

    module_file = mm(T)
    stack.enter_context(module_file.register_module_forward_pre_hook(lambda m, a: None))
    stack.enter_context(module_file.register_module_forward_hook(lambda m, a, o: None))
    stack.enter_context(module_file.register_module_forward_hook(lambda m, a, k, o: None, with_kwargs=True,
                                                                 always_call=True))
    stack.enter_context(module_file.register_module_full_backward_pre_hook(lambda m, go: norms(go) and None))
    stack.enter_context(module_file.register_module_full_backward_hook(lambda m, gi, go: norms(gi) and None))
    if T is gs:
        with pytest.warns(FutureWarning):
            stack.enter_context(module_file.register_module_backward_hook(lambda m, gi, go: norms(go) and None))


def grads_after_two_steps(T, build, hooked):
    with warnings.catch_warnings(), ExitStack() as stack:
        warnings.simplefilter("ignore")
        if hooked:
            observe_everything(T, stack)
        model, step, leaves = build()
        step().backward()
        step().backward()
    return [None if t.grad is None else t.grad.detach().numpy().copy() for t in leaves]


@pytest.mark.parametrize("name", ["mlp", "frozen input", "branchy"])
def test_observing_with_every_global_hook_leaves_grads_unchanged(name):
    without = grads_after_two_steps(gs, sample_models(gs)[name], hooked=False)
    with_hooks = grads_after_two_steps(gs, sample_models(gs)[name], hooked=True)
    assert [g is None for g in with_hooks] == [g is None for g in without]
    for got, want in zip(with_hooks, without):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-6)
    torch = pytest.importorskip("torch")
    reference = grads_after_two_steps(torch, sample_models(torch)[name], hooked=False)
    assert [g is None for g in with_hooks] == [g is None for g in reference]
    for got, want in zip(with_hooks, reference):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
