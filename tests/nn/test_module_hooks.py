"""Per-module forward pre-hooks and forward hooks, and hook handles, compared with torch.

Every scenario records the hooks that fire into a log and checks the exact order after the
forward, after the backward and after a second iteration.
"""
from __future__ import annotations

import warnings

import numpy as np


def tensor(T, data, requires_grad=False):
    return T.tensor(np.asarray(data, dtype=np.float32), requires_grad=requires_grad)


def scale_cls(T):
    """``forward(x, y=None, *, k=1.0) = x * w (+ y) * k`` with one parameter ``w``."""
    class Scale(T.nn.Module):
        def __init__(self, value=2.0):
            super().__init__()
            self.w = T.nn.Parameter(tensor(T, [value]))

        def forward(self, x, y=None, *, k=1.0):
            out = x * self.w
            if y is not None:
                out = out + y
            return out * k

    return Scale


def failing_cls(T):
    class Failing(T.nn.Module):
        def forward(self, x):
            raise ValueError("forward failed")

    return Failing


# ---------------------------------------------------------------- forward pre-hooks
def test_pre_hook_arguments_and_none_keeps_objects(compare):
    def run(T, log):
        m = scale_cls(T)()
        x, y = tensor(T, [1.0, 2.0]), tensor(T, [10.0, 20.0])

        def pre(mod, args):
            log("pre", mod is m, type(args).__name__, len(args), args[0] is x, args[1] is y)

        m.register_forward_pre_hook(pre)
        m.register_forward_pre_hook(lambda mod, args: log("after a None return", args[0] is x, args[1] is y))
        out = m(x, y, k=3.0)
        log("kwargs reach forward unchanged", out)

    compare(run)


def test_pre_hook_return_values(compare):
    def run(T, log):
        m = scale_cls(T)()
        x = tensor(T, [1.0, 2.0])
        replaced = tensor(T, [5.0, 5.0])
        with m.register_forward_pre_hook(lambda mod, args: (replaced, tensor(T, [1.0, 1.0]))):
            log("tuple replaces all args", m(x))
        with m.register_forward_pre_hook(lambda mod, args: replaced):
            log("single value wrapped", m(x))
        with m.register_forward_pre_hook(lambda mod, args: (args[0] * 10,)):
            log("one-tuple", m(x, tensor(T, [1.0, 1.0])))

        class Collect(T.nn.Module):
            def forward(self, *args):
                return [type(a).__name__ for a in args]

        c = Collect()
        c.register_forward_pre_hook(lambda mod, args: [x, x])
        log("list is one argument", c(x))

        def seen_args(mod, args):
            log("second pre sees replacement", args[0])

        m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
        m.register_forward_pre_hook(seen_args)
        log("chained", m(x))

    compare(run)


def test_pre_hook_with_kwargs(compare):
    def run(T, log):
        m = scale_cls(T)()
        x = tensor(T, [1.0, 2.0])

        def pre(mod, args, kwargs):
            log("pre kwargs", sorted(kwargs), len(args))
            return (args[0] * 2,), {"k": kwargs["k"] * 10}

        with m.register_forward_pre_hook(pre, with_kwargs=True):
            log("replaced args and kwargs", m(x, k=0.5))
        with m.register_forward_pre_hook(lambda mod, args, kwargs: None, with_kwargs=True):
            log("None keeps", m(x, k=0.5))
        with m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {}), with_kwargs=True):
            log("any 2-tuple is (args, kwargs)", m(x, k=0.5))
        with m.register_forward_pre_hook(lambda mod, args, kwargs: (x,), with_kwargs=True):
            log.raises("1-tuple raises", lambda: m(x), "must return None or a tuple")
        with m.register_forward_pre_hook(lambda mod, args, kwargs: x, with_kwargs=True):
            log.raises("tensor raises", lambda: m(x), "must return None or a tuple")
        forward_ran = []
        m.register_forward_hook(lambda *a: forward_ran.append(1))
        with m.register_forward_pre_hook(lambda mod, args, kwargs: (1, 2, 3), with_kwargs=True):
            log.raises("3-tuple raises before forward", lambda: m(x), "must return None or a tuple")
        log("forward never ran", len(forward_ran))

    compare(run)


def test_pre_hook_prepend_and_mixed_kwargs_share_one_list(compare):
    def run(T, log):
        m = scale_cls(T)()
        m.register_forward_pre_hook(log.hook("a"))
        m.register_forward_pre_hook(lambda mod, args, kwargs: log.append(["b kw"]), with_kwargs=True)
        m.register_forward_pre_hook(log.hook("c first"), prepend=True)
        m.register_forward_pre_hook(log.hook("d"))
        m.register_forward_pre_hook(lambda mod, args, kwargs: log.append(["e kw first"]), with_kwargs=True,
                                    prepend=True)
        m(tensor(T, [1.0]))
        log("second call")
        m(tensor(T, [1.0]))

    compare(run)


# ---------------------------------------------------------------- forward hooks
def test_forward_hook_arguments_and_replacement(compare):
    def run(T, log):
        m = scale_cls(T)()
        x = tensor(T, [1.0, 2.0], requires_grad=True)
        m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))

        def post(mod, args, output):
            log("post", mod is m, type(args).__name__, args[0], output)
            return output * 100

        m.register_forward_hook(post)
        m.register_forward_hook(lambda mod, args, output: log.append(["second sees replacement",
                                                                       output.detach().numpy().tolist()]))
        out = m(x, k=2.0)
        log("caller sees replacement", out)
        out.sum().backward()
        log("grad through replacement", x.grad, m.w.grad)

    compare(run)


def test_forward_hook_may_return_non_tensor_and_with_kwargs(compare):
    def run(T, log):
        m = scale_cls(T)()
        x = tensor(T, [1.0, 2.0])
        with m.register_forward_hook(lambda mod, args, output: {"out": output, "n": 1}):
            result = m(x)
            log("dict output", sorted(result), result["out"])

        def post(mod, args, kwargs, output):
            log("kwargs", sorted(kwargs), kwargs.get("k"), output)
            return output + kwargs.get("k", 100.0)

        with m.register_forward_hook(post, with_kwargs=True):
            log("with_kwargs replacement", m(x, k=3.0))
            log("no kwargs given", m(x))

    compare(run)


def test_forward_hook_order_prepend_and_iterations(compare):
    def run(T, log):
        m = scale_cls(T)()
        m.register_forward_hook(log.hook("post a"))
        m.register_forward_hook(lambda mod, args, kwargs, out: log.append(["post b kw"]), with_kwargs=True)
        m.register_forward_hook(log.hook("post c first"), prepend=True)
        m.register_forward_pre_hook(log.hook("pre a"))
        m.register_forward_pre_hook(log.hook("pre b first"), prepend=True)
        x = tensor(T, [1.0, 2.0], requires_grad=True)
        for step in range(2):
            log("forward", step)
            out = m(x)
            log("backward", step)
            out.sum().backward()
        log("grad", x.grad, m.w.grad)

    compare(run)


def test_nested_sequential_forward_order(compare):
    def run(T, log):
        Scale = scale_cls(T)
        seq = T.nn.Sequential(Scale(2.0), T.nn.Sequential(Scale(3.0), Scale(0.5)))
        for name, module in seq.named_modules():
            label = name or "seq"
            module.register_forward_pre_hook(lambda mod, args, label=label: log.append(["pre", label]))
            module.register_forward_hook(lambda mod, args, out, label=label: log.append(["fwd", label]))
        x = tensor(T, [1.0], requires_grad=True)
        for step in range(2):
            out = seq(x)
            log("out", out)
            out.sum().backward()
            log("after backward", step)

    compare(run)


def test_hooks_fire_under_no_grad_every_call_and_not_for_forward(compare):
    def run(T, log):
        m = scale_cls(T)()
        m.register_forward_pre_hook(log.hook("pre"))
        m.register_forward_hook(lambda mod, args, out: log.append(["post", out.requires_grad]))
        x = tensor(T, [1.0])
        with T.no_grad():
            m(x)
        log("direct forward")
        m.forward(x)
        log("two calls")
        m(m(x))

    compare(run)


def test_forward_hooks_alone_pass_caller_objects(compare):
    def run(T, log):
        x = tensor(T, [1.0, 2.0], requires_grad=True)

        class Same(T.nn.Module):
            def forward(self, a):
                log("forward gets caller's object", a is x)
                return a

        m = Same()
        m.register_forward_pre_hook(lambda mod, args: log.append(["pre gets caller's object", args[0] is x]))
        m.register_forward_hook(lambda mod, args, out: log.append(["hook", args[0] is x, out is x]))
        log("identity returned", m(x) is x)

    compare(run)


# ---------------------------------------------------------------- always_call
def test_always_call_when_forward_raises(compare):
    def run(T, log):
        m = failing_cls(T)()
        m.register_forward_hook(lambda mod, args, out: log("plain", out))
        m.register_forward_hook(lambda mod, args, out: log("always", out, args[0]), always_call=True)
        m.register_forward_hook(lambda mod, args, kw, out: log("always kw", out, sorted(kw)),
                                with_kwargs=True, always_call=True)
        log.raises("propagates", lambda: m(tensor(T, [1.0])), "forward failed")

    compare(run)


def test_always_call_when_pre_hook_or_earlier_hook_raises(compare):
    def run(T, log):
        Scale = scale_cls(T)

        def boom(*args):
            raise KeyError("hook failed")

        m = Scale()
        m.register_forward_pre_hook(boom)
        m.register_forward_hook(log.hook("plain"))
        m.register_forward_hook(lambda mod, args, out: log("always after failed pre", out),
                                always_call=True)
        log.raises("pre-hook error propagates", lambda: m(tensor(T, [1.0])), "hook failed")

        m2 = Scale()
        m2.register_forward_hook(lambda mod, args, out: log("always before", out), always_call=True)
        m2.register_forward_hook(boom)
        m2.register_forward_hook(log.hook("plain after"))
        m2.register_forward_hook(lambda mod, args, out: log("always after", out), always_call=True)
        log.raises("earlier hook error propagates", lambda: m2(tensor(T, [1.0])), "hook failed")

    compare(run)


def test_always_call_hook_error_becomes_warning(compare):
    def run(T, log):
        m = failing_cls(T)()

        def broken(mod, args, out):
            log.append(["broken"])
            raise RuntimeError("broken always hook")

        m.register_forward_hook(broken, always_call=True)
        m.register_forward_hook(lambda mod, args, out: log.append(["second still runs"]), always_call=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log.raises("original error propagates", lambda: m(tensor(T, [1.0])), "forward failed")
        log.warnings("warning", caught, "always_call")

    compare(run)


def test_always_call_runs_once_on_success(compare):
    def run(T, log):
        m = scale_cls(T)()
        m.register_forward_hook(log.hook("plain"))
        m.register_forward_hook(log.hook("always"), always_call=True)
        m(tensor(T, [1.0]))
        log("second call")
        m(tensor(T, [1.0]))

    compare(run)


# ---------------------------------------------------------------- handles and mutation during calls
def test_remove_handle_inside_hook_takes_effect_next_call(compare):
    def run(T, log):
        m = scale_cls(T)()
        handles = {}

        def remove_self(mod, args):
            log.append(["self-removing pre"])
            handles["self"].remove()

        def remove_other(mod, args, out):
            log.append(["remover"])
            handles["other"].remove()

        handles["self"] = m.register_forward_pre_hook(remove_self)
        m.register_forward_hook(remove_other)
        handles["other"] = m.register_forward_hook(log.hook("removed by earlier hook"))
        for step in range(2):
            log("call", step)
            m(tensor(T, [1.0]))

    compare(run)


def test_hook_added_inside_hook_runs_from_next_call(compare):
    """A pre-hook added by a pre-hook waits for the next call; the forward-hook list is read
    after the pre-hooks, so a forward hook added by a pre-hook already runs (as in torch)."""
    def run(T, log):
        m = scale_cls(T)()
        added = []

        def adder(mod, args):
            log.append(["adder"])
            if not added:
                added.append(m.register_forward_pre_hook(log.hook("added pre")))
                added.append(m.register_forward_hook(log.hook("added post, read after the pre-hooks")))

        m.register_forward_pre_hook(adder)
        for step in range(2):
            log("call", step)
            m(tensor(T, [1.0]))

    compare(run)


def test_forward_hook_list_is_read_after_forward(compare):
    """Forward hooks added or removed by a pre-hook or by forward itself count for this call."""
    def run(T, log):
        class AddsHook(T.nn.Module):
            def forward(self, x):
                if not hasattr(self, "added"):
                    self.added = self.register_forward_hook(log.hook("added inside forward"))
                return x * 2

        m = AddsHook()
        victim = m.register_forward_hook(log.hook("victim"))
        m.register_forward_pre_hook(lambda mod, args: victim.remove())
        for step in range(2):
            log("call", step)
            m(tensor(T, [1.0]))

    compare(run)


def test_handles_context_manager_and_idempotent_remove(compare):
    def run(T, log):
        m = scale_cls(T)()
        x = tensor(T, [1.0], requires_grad=True)
        registrations = {
            "forward_pre": lambda: m.register_forward_pre_hook(log.hook("forward_pre")),
            "forward_pre_kw": lambda: m.register_forward_pre_hook(lambda *a: log.append(["forward_pre_kw"]),
                                                                  with_kwargs=True),
            "forward": lambda: m.register_forward_hook(log.hook("forward")),
            "forward_always": lambda: m.register_forward_hook(log.hook("forward_always"), always_call=True),
            "backward_pre": lambda: m.register_full_backward_pre_hook(log.hook("backward_pre")),
            "backward": lambda: m.register_full_backward_hook(log.hook("backward")),
        }
        for kind, register in registrations.items():
            keep = register()
            with register() as handle:
                log(kind, type(handle).__name__, handle is not keep)
                m(x).sum().backward()
            log("after exit", kind)
            m(x).sum().backward()
            handle.remove()
            keep.remove()
            keep.remove()
            log("after double remove", kind)
            m(x).sum().backward()
        try:
            with m.register_forward_hook(log.hook("inside failing block")):
                raise ZeroDivisionError("body failed")
        except ZeroDivisionError:
            log("exception not suppressed")
        m(x)
        log("removed on error", len(m._forward_hooks))

    compare(run)


def test_same_hook_on_two_modules_removes_only_own_entry(compare):
    def run(T, log):
        Scale = scale_cls(T)
        a, b = Scale(), Scale()

        def hook(mod, args, out):
            log.append(["hook", mod is a])

        ha = a.register_forward_hook(hook)
        b.register_forward_hook(hook)
        a(tensor(T, [1.0]))
        b(tensor(T, [1.0]))
        ha.remove()
        log("removed on a")
        a(tensor(T, [1.0]))
        b(tensor(T, [1.0]))
        del a
        ha.remove()
        log("remove after owner is gone is safe")

    compare(run)
